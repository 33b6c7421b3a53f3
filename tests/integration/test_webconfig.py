"""--web.config.file: real TLS handshakes and basic auth against the exporter's own server.

Certificates come from the openssl CLI, servers (the serve/ stack: listener, wire,
connection, app) listen on 127.0.0.1 port 0, and clients are aiohttp sessions, so these tests
exercise the SSLContext and middlewares the exporter serves.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import shutil
import ssl
import subprocess
import threading
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import bcrypt
import pytest

from kube_gpu_exporter.exporter.httpd import App, ConnectionLimits, Listener, Request, Response
from kube_gpu_exporter.exporter.serve import middleware
from kube_gpu_exporter.exporter.serve.middleware import MAX_PENDING_CHECKS
from kube_gpu_exporter.exporter.serve.web_config import (
    WebConfig,
    WebConfigError,
    load_web_config,
    web_middlewares,
)

# Handshakes that the server refuses surface differently per TLS version and timing.
HANDSHAKE_REFUSED = (aiohttp.ClientError, ssl.SSLError, ConnectionError)

# exporter-toolkit's decoy hash of "fakepassword": a real $2y$ hash as htpasswd writes them.
HTPASSWD_2Y_HASH = "$2y$10$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DUmpZ/VcEd00UAV/LDeSi"
ALICE_PASSWORD = "s3cret"
ALICE_HASH = bcrypt.hashpw(ALICE_PASSWORD.encode(), bcrypt.gensalt(4)).decode()


# --- fixtures -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Pki:
    dir: Path
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    rogue_client_cert: Path  # a client cert signed by a CA the server does not trust
    rogue_client_key: Path
    other_key: Path  # matches no certificate
    encrypted_key: Path


def _openssl(cwd: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _key(cwd: Path, name: str) -> Path:
    _openssl(
        cwd, "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", name
    )
    return cwd / name


def _ca(cwd: Path, name: str) -> tuple[Path, Path]:
    key = _key(cwd, f"{name}.key")
    cert = cwd / f"{name}.crt"
    _openssl(
        cwd, "req", "-x509", "-new", "-key", key.name, "-out", cert.name, "-days", "2",
        "-subj", f"/CN={name}",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )  # fmt: skip
    return cert, key


def _leaf(cwd: Path, name: str, ca: tuple[Path, Path], usage: str, san: str) -> tuple[Path, Path]:
    key = _key(cwd, f"{name}.key")
    ext = cwd / f"{name}.ext"
    ext.write_text(
        "basicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature\n"
        f"extendedKeyUsage={usage}\n"
        f"subjectAltName={san}\n"
        "subjectKeyIdentifier=hash\n"
        "authorityKeyIdentifier=keyid\n"
    )
    _openssl(cwd, "req", "-new", "-key", key.name, "-out", f"{name}.csr", "-subj", f"/CN={name}")
    _openssl(
        cwd, "x509", "-req", "-in", f"{name}.csr", "-CA", str(ca[0]), "-CAkey", str(ca[1]),
        "-CAcreateserial", "-days", "2", "-extfile", ext.name, "-out", f"{name}.crt",
    )  # fmt: skip
    return cwd / f"{name}.crt", key


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl CLI to make test certificates")
    d = tmp_path_factory.mktemp("pki")
    ca = _ca(d, "test-ca")
    server = _leaf(d, "server", ca, "serverAuth", "IP:127.0.0.1,DNS:localhost")
    client = _leaf(d, "scraper", ca, "clientAuth", "DNS:scraper")
    rogue = _leaf(d, "rogue", _ca(d, "rogue-ca"), "clientAuth", "DNS:rogue")
    encrypted = d / "encrypted.key"
    _openssl(
        d, "pkey", "-in", server[1].name, "-aes256", "-passout", "pass:pw", "-out", encrypted.name
    )
    return Pki(
        dir=d,
        ca=ca[0],
        server_cert=server[0],
        server_key=server[1],
        client_cert=client[0],
        client_key=client[1],
        rogue_client_cert=rogue[0],
        rogue_client_key=rogue[1],
        other_key=_key(d, "other.key"),
        encrypted_key=encrypted,
    )


def write_config(tmp_path: Path, text: str, name: str = "web.yml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def tls_config(pki: Pki, extra: str = "") -> str:
    return (
        "tls_server_config:\n"
        f"  cert_file: {pki.server_cert}\n"
        f"  key_file: {pki.server_key}\n" + "".join(f"  {line}\n" for line in extra.splitlines())
    )


def client_ssl(pki: Pki, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    if cert is not None:
        ctx.load_cert_chain(cert, key)
    return ctx


class CountingCheckpw:
    """bcrypt.checkpw that counts its calls: proves when bcrypt ran, without timing."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, password: bytes, hashed: bytes) -> bool:
        self.calls += 1
        return bcrypt.checkpw(password, hashed)


@contextlib.asynccontextmanager
async def serve(config: WebConfig, checkpw: CountingCheckpw | None = None) -> AsyncIterator[str]:
    """The exporter's server with the config's middlewares, headers and SSL context; yields
    its URL."""

    async def metrics(request: Request) -> Response:
        return Response(text="ok\n")

    async def tls(request: Request) -> Response:
        """What the server negotiated: TLS version and cipher, seen from its side."""
        ssl_object = request.transport.get_extra_info("ssl_object")
        return Response(text=f"{ssl_object.version()} {ssl_object.cipher()[0]}")

    app = App(middlewares=web_middlewares(config, checkpw=checkpw or bcrypt.checkpw))
    app.add_get("/metrics", metrics)
    app.add_get("/tls", tls)
    limits = ConnectionLimits(headers=config.headers)  # as serve/site.py passes them
    listener = Listener(app, "127.0.0.1", 0, limits, ssl_context=config.ssl_context)
    await listener.start()
    host, port = listener.addresses[0]
    try:
        yield f"{'https' if config.ssl_context else 'http'}://{host}:{port}"
    finally:
        await listener.stop(drain_seconds=1.0)


def basic(user: str, password: str) -> dict[str, str]:
    """An Authorization header, built by hand to work on every aiohttp the project allows."""
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


async def get(
    url: str, ssl_ctx: ssl.SSLContext | bool = True, auth: dict[str, str] | None = None
) -> tuple[int, str, dict[str, str]]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(url, ssl=ssl_ctx, headers=auth) as resp,
    ):
        return resp.status, await resp.text(), dict(resp.headers)


# --- valid configs ------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "{}\n", "# nothing\n", "tls_server_config:\n"])
def test_empty_config_is_plain_http_without_auth(tmp_path: Path, text: str) -> None:
    config = load_web_config(write_config(tmp_path, text))
    assert config == WebConfig(ssl_context=None)
    assert not config.basic_auth_users
    assert not config.headers
    assert web_middlewares(config) == []


def test_tls_defaults_follow_exporter_toolkit(pki: Pki, tmp_path: Path) -> None:
    ctx = load_web_config(write_config(tmp_path, tls_config(pki))).ssl_context
    assert ctx is not None
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    assert ctx.maximum_version == ssl.TLSVersion.TLSv1_3
    assert ctx.verify_mode == ssl.CERT_NONE
    assert ctx.options & ssl.OP_CIPHER_SERVER_PREFERENCE


async def test_tls_serves_https(pki: Pki, tmp_path: Path) -> None:
    config = load_web_config(write_config(tmp_path, tls_config(pki)))
    async with serve(config) as url:
        assert url.startswith("https://")
        status, body, _ = await get(f"{url}/metrics", client_ssl(pki))
        assert (status, body) == (200, "ok\n")
        # A client that does not trust the test CA must fail: the server really speaks TLS.
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await get(f"{url}/metrics", ssl.create_default_context())


async def test_relative_paths_resolve_against_the_config_directory(
    pki: Pki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "certs").mkdir()
    shutil.copy(pki.server_cert, tmp_path / "certs" / "server.crt")
    shutil.copy(pki.server_key, tmp_path / "certs" / "server.key")
    path = write_config(
        tmp_path,
        "tls_server_config:\n  cert_file: certs/server.crt\n  key_file: certs/server.key\n",
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    config = load_web_config(path)
    async with serve(config) as url:
        status, _, _ = await get(f"{url}/metrics", client_ssl(pki))
        assert status == 200


async def test_min_version_refuses_older_clients(pki: Pki, tmp_path: Path) -> None:
    config = load_web_config(write_config(tmp_path, tls_config(pki, "min_version: TLS13")))
    tls12_only = client_ssl(pki)
    tls12_only.maximum_version = ssl.TLSVersion.TLSv1_2
    async with serve(config) as url:
        status, _, _ = await get(f"{url}/metrics", client_ssl(pki))
        assert status == 200
        with pytest.raises(HANDSHAKE_REFUSED):
            await get(f"{url}/metrics", tls12_only)


async def test_cipher_suites_are_mapped_to_openssl_names(pki: Pki, tmp_path: Path) -> None:
    extra = (
        "max_version: TLS12\n"
        "prefer_server_cipher_suites: false\n"
        "curve_preferences: [X25519, CurveP256]\n"
        "cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, TLS_AES_128_GCM_SHA256]\n"
    )
    config = load_web_config(write_config(tmp_path, tls_config(pki, extra)))
    assert config.ssl_context is not None
    assert not config.ssl_context.options & ssl.OP_CIPHER_SERVER_PREFERENCE
    async with serve(config) as url:
        status, body, _ = await get(f"{url}/tls", client_ssl(pki))
    assert (status, body) == (200, "TLSv1.2 ECDHE-ECDSA-AES256-GCM-SHA384")


async def test_require_and_verify_client_cert(pki: Pki, tmp_path: Path) -> None:
    extra = f"client_auth_type: RequireAndVerifyClientCert\nclient_ca_file: {pki.ca}"
    config = load_web_config(write_config(tmp_path, tls_config(pki, extra)))
    assert config.ssl_context is not None
    assert config.ssl_context.verify_mode == ssl.CERT_REQUIRED
    async with serve(config) as url:
        with pytest.raises(HANDSHAKE_REFUSED):
            await get(f"{url}/metrics", client_ssl(pki))
        with pytest.raises(HANDSHAKE_REFUSED):
            await get(
                f"{url}/metrics", client_ssl(pki, pki.rogue_client_cert, pki.rogue_client_key)
            )
        status, body, _ = await get(
            f"{url}/metrics", client_ssl(pki, pki.client_cert, pki.client_key)
        )
        assert (status, body) == (200, "ok\n")


async def test_verify_client_cert_if_given(pki: Pki, tmp_path: Path) -> None:
    extra = f"client_auth_type: VerifyClientCertIfGiven\nclient_ca_file: {pki.ca}"
    config = load_web_config(write_config(tmp_path, tls_config(pki, extra)))
    async with serve(config) as url:
        assert (await get(f"{url}/metrics", client_ssl(pki)))[0] == 200
        good = client_ssl(pki, pki.client_cert, pki.client_key)
        assert (await get(f"{url}/metrics", good))[0] == 200
        with pytest.raises(HANDSHAKE_REFUSED):
            await get(
                f"{url}/metrics", client_ssl(pki, pki.rogue_client_cert, pki.rogue_client_key)
            )


def test_legacy_require_client_cert_alias(pki: Pki, tmp_path: Path) -> None:
    extra = f"client_auth_type: RequireClientCert\nclient_ca_file: {pki.ca}"
    ctx = load_web_config(write_config(tmp_path, tls_config(pki, extra))).ssl_context
    assert ctx is not None and ctx.verify_mode == ssl.CERT_REQUIRED


# --- basic auth and headers ---------------------------------------------------------------

AUTH_CONFIG = f"""
basic_auth_users:
  alice: {ALICE_HASH}
  bob: "{HTPASSWD_2Y_HASH}"
"""


async def test_basic_auth(tmp_path: Path) -> None:
    config = load_web_config(write_config(tmp_path, AUTH_CONFIG))
    assert config.basic_auth_users["alice"] == ALICE_HASH.encode()
    checkpw = CountingCheckpw()
    async with serve(config, checkpw) as url:
        metrics = f"{url}/metrics"

        status, _, headers = await get(metrics)
        assert (status, headers["WWW-Authenticate"]) == (401, "Basic")
        assert checkpw.calls == 0

        status, _, headers = await get(metrics, auth=basic("alice", "wrong"))
        assert (status, headers["WWW-Authenticate"]) == (401, "Basic")
        assert checkpw.calls == 1

        # An unknown user still pays for one bcrypt check, so timing does not reveal users.
        status, _, _ = await get(metrics, auth=basic("mallory", ALICE_PASSWORD))
        assert status == 401
        assert checkpw.calls == 2

        good = basic("alice", ALICE_PASSWORD)
        status, body, _ = await get(metrics, auth=good)
        assert (status, body) == (200, "ok\n")
        calls_after_first_success = checkpw.calls
        for _ in range(3):  # later scrapes hit the cache: bcrypt is not run again
            assert (await get(metrics, auth=good))[0] == 200
        assert checkpw.calls == calls_after_first_success

        # The cache holds alice's verified password only; anything else is checked again.
        assert (await get(metrics, auth=basic("alice", "s3cret2")))[0] == 401
        assert checkpw.calls == calls_after_first_success + 1

        # A $2y$ hash from htpasswd works.
        assert (await get(metrics, auth=basic("bob", "fakepassword")))[0] == 200


async def test_basic_auth_counts_exactly(tmp_path: Path) -> None:
    """One good request is exactly one bcrypt call, and the next one is zero."""
    config = load_web_config(write_config(tmp_path, AUTH_CONFIG))
    checkpw = CountingCheckpw()
    good = basic("alice", ALICE_PASSWORD)
    async with serve(config, checkpw) as url:
        assert (await get(f"{url}/metrics", auth=good))[0] == 200
        assert checkpw.calls == 1
        assert (await get(f"{url}/metrics", auth=good))[0] == 200
        assert checkpw.calls == 1


async def test_concurrent_scrapes_share_one_bcrypt_check(tmp_path: Path) -> None:
    config = load_web_config(write_config(tmp_path, AUTH_CONFIG))
    checkpw = CountingCheckpw()
    good = basic("alice", ALICE_PASSWORD)
    async with serve(config, checkpw) as url:
        results = await asyncio.gather(*(get(f"{url}/metrics", auth=good) for _ in range(5)))
    assert [status for status, _, _ in results] == [200] * 5
    assert checkpw.calls == 1


class BlockingCheckpw(CountingCheckpw):
    """A bcrypt that never finishes a wrong password's check until released."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def __call__(self, password: bytes, hashed: bytes) -> bool:
        if password != ALICE_PASSWORD.encode():
            self.release.wait(30)
        return super().__call__(password, hashed)


async def test_failed_checks_are_cached_apart_from_successes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As exporter-toolkit: a repeated wrong password costs one bcrypt check. The cache of
    failures is bounded, and evicting from it never evicts a verified password."""
    monkeypatch.setattr(middleware, "REFUSED_CACHE_SIZE", 2)
    config = load_web_config(write_config(tmp_path, AUTH_CONFIG))
    checkpw = CountingCheckpw()
    async with serve(config, checkpw) as url:
        metrics = f"{url}/metrics"
        assert (await get(metrics, auth=basic("alice", ALICE_PASSWORD)))[0] == 200
        for _ in range(3):
            assert (await get(metrics, auth=basic("alice", "wrong")))[0] == 401
            assert (await get(metrics, auth=basic("mallory", "guess")))[0] == 401
        assert checkpw.calls == 3
        # Two more failures push ("alice", "wrong") out of the two-entry cache.
        assert (await get(metrics, auth=basic("alice", "w2")))[0] == 401
        assert (await get(metrics, auth=basic("alice", "w3")))[0] == 401
        assert (await get(metrics, auth=basic("alice", "wrong")))[0] == 401
        assert checkpw.calls == 6
        assert (await get(metrics, auth=basic("alice", ALICE_PASSWORD)))[0] == 200
        assert checkpw.calls == 6


async def test_pending_checks_are_bounded_and_cached_scrapers_never_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While bcrypt is stuck on wrong passwords, requests beyond MAX_PENDING_CHECKS distinct
    checks get a quick 503, the same wrong password shares its check, and a scraper whose
    password is cached gets 200 at once: the caches are read before the lock. (One address
    sends them all here, without its own share; the first of its checks is not yet a
    suspect's, the bound counts the others.)"""
    monkeypatch.setattr(middleware, "MAX_PENDING_PER_CLIENT", 100)
    config = load_web_config(write_config(tmp_path, AUTH_CONFIG))
    checkpw = BlockingCheckpw()
    good = basic("alice", ALICE_PASSWORD)
    extra = 4
    async with serve(config, checkpw) as url:
        metrics = f"{url}/metrics"
        assert (await get(metrics, auth=good))[0] == 200
        guesses = [
            asyncio.create_task(get(metrics, auth=basic("alice", f"guess-{i}")))
            for i in range(MAX_PENDING_CHECKS + 1)
        ]
        for _ in range(200):  # until every guess holds its place (one check runs, 7 wait)
            await asyncio.sleep(0.05)
            if checkpw.calls == 2:
                break
        repeats = [
            asyncio.create_task(get(metrics, auth=basic("alice", "guess-0"))) for _ in range(3)
        ]
        refused = await asyncio.gather(
            *(get(metrics, auth=basic("alice", f"more-{i}")) for i in range(extra))
        )
        assert [status for status, _, _ in refused] == [503] * extra
        assert not any(task.done() for task in guesses + repeats)
        assert (await get(metrics, auth=good))[0] == 200
        checkpw.release.set()
        answered = await asyncio.gather(*guesses, *repeats)
    assert [status for status, _, _ in answered] == [401] * (MAX_PENDING_CHECKS + 4)
    assert checkpw.calls == 2 + MAX_PENDING_CHECKS  # the repeats shared guess-0's check


async def test_passwords_over_72_bytes_never_match(tmp_path: Path) -> None:
    """bcrypt reads 72 bytes of a password; Go's bcrypt refuses longer ones, so one that only
    matches on its first 72 bytes must not pass. The config cannot say how long a password is
    (it holds only the hash of its first 72 bytes), so this is refused per request, without
    running bcrypt, rather than at load."""
    password = "p" * 72
    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(4)).decode()
    config = load_web_config(write_config(tmp_path, f"basic_auth_users:\n  carol: '{hashed}'\n"))
    checkpw = CountingCheckpw()
    async with serve(config, checkpw) as url:
        metrics = f"{url}/metrics"
        assert (await get(metrics, auth=basic("carol", password)))[0] == 200
        assert (await get(metrics, auth=basic("carol", password + "x")))[0] == 401
        assert (await get(metrics, auth=basic("carol", password + "p" * 100)))[0] == 401
    assert checkpw.calls == 1


@pytest.mark.parametrize(
    "authorization",
    ["Bearer abc", "Basic !!!notbase64", "Basic bm9jb2xvbg==", "Basic", "Basic //7/:x"],
)
async def test_malformed_authorization_is_401(tmp_path: Path, authorization: str) -> None:
    config = load_web_config(write_config(tmp_path, AUTH_CONFIG))
    async with serve(config) as url, aiohttp.ClientSession() as session:
        headers = {"Authorization": authorization}
        async with session.get(f"{url}/metrics", headers=headers) as resp:
            assert resp.status == 401
            assert resp.headers["WWW-Authenticate"] == "Basic"


async def test_basic_auth_guards_every_path(tmp_path: Path) -> None:
    config = load_web_config(write_config(tmp_path, AUTH_CONFIG))
    async with serve(config) as url:
        assert (await get(f"{url}/no-such-page"))[0] == 401
        good = basic("alice", ALICE_PASSWORD)
        assert (await get(f"{url}/no-such-page", auth=good))[0] == 404


async def test_headers_are_added_to_every_response(pki: Pki, tmp_path: Path) -> None:
    text = (
        tls_config(pki)
        + AUTH_CONFIG
        + "http_server_config:\n"
        + "  http2: false\n"
        + "  headers:\n"
        + "    X-Frame-Options: deny\n"
        + "    x-content-type-options: nosniff\n"
        + "    Content-Security-Policy: \"default-src 'none'\"\n"
    )
    config = load_web_config(write_config(tmp_path, text))
    assert dict(config.headers) == {
        "X-Frame-Options": "deny",
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": "default-src 'none'",
    }
    good = basic("alice", ALICE_PASSWORD)
    async with serve(config) as url:
        ok = await get(f"{url}/metrics", client_ssl(pki), auth=good)
        unauthorized = await get(f"{url}/metrics", client_ssl(pki))
        not_found = await get(f"{url}/nope", client_ssl(pki), auth=good)
    for status, _, headers in (ok, unauthorized, not_found):
        assert headers["X-Frame-Options"] == "deny", status
        assert headers["X-Content-Type-Options"] == "nosniff", status
        assert headers["Content-Security-Policy"] == "default-src 'none'", status
    assert [ok[0], unauthorized[0], not_found[0]] == [200, 401, 404]


# --- errors -------------------------------------------------------------------------------


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.yml"
    with pytest.raises(WebConfigError) as exc:
        load_web_config(path)
    assert str(exc.value) == f"cannot read web config {path}: No such file or directory"


# (config text with {dir} for the pki directory, {ca}, {cert}, {key}, {other}, {encrypted};
#  substrings the one-line message must contain)
ERRORS: dict[str, tuple[str, tuple[str, ...]]] = {
    "invalid yaml": ("tls_server_config: [unclosed\n", ("not valid YAML at line",)),
    "not a mapping": ("- a\n- b\n", ("top level: expected a mapping, got list",)),
    "duplicate key": ("basic_auth_users: {}\nbasic_auth_users: {}\n", ("duplicate key",)),
    "unknown top-level key": ("tls_config: {}\n", ("top level: unknown key 'tls_config'",)),
    "unknown tls key": (
        "tls_server_config:\n  cert_fil: x\n",
        ("tls_server_config: unknown key 'cert_fil' (expected one of: cert_file, key_file",),
    ),
    "unknown http key": (
        "http_server_config:\n  http3: true\n",
        ("http_server_config: unknown key 'http3'",),
    ),
    "unsupported rate_limit": ("rate_limit: {}\n", ("rate_limit: is not supported",)),
    "unsupported client_allowed_sans": (
        "tls_server_config:\n  client_allowed_sans: [a]\n",
        ("tls_server_config.client_allowed_sans: is not supported",),
    ),
    "bad client_auth_type": (
        "tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n  client_auth_type: Foo\n",
        (
            "tls_server_config.client_auth_type: unknown value 'Foo' (expected one of: "
            "NoClientCert, RequestClientCert, RequireAnyClientCert, VerifyClientCertIfGiven, "
            "RequireAndVerifyClientCert)",
        ),
    ),
    "bad min_version": (
        "tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n  min_version: TLS14\n",
        ("tls_server_config.min_version: unknown value 'TLS14' (expected one of: TLS10,",),
    ),
    "min above max": (
        "tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
        "  min_version: TLS13\n  max_version: TLS12\n",
        ("min_version TLS13 is above max_version TLS12",),
    ),
    "unknown cipher": (
        "tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n  cipher_suites: [RC4]\n",
        ("tls_server_config.cipher_suites: unknown value 'RC4'",),
    ),
    "unknown curve": (
        "tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n  curve_preferences: [P256]\n",
        ("tls_server_config.curve_preferences: unknown value 'P256'",),
    ),
    "bad bool": (
        "tls_server_config:\n  prefer_server_cipher_suites: yes please\n",
        ("tls_server_config.prefer_server_cipher_suites: expected true or false",),
    ),
    "cert without key": (
        "tls_server_config:\n  cert_file: {cert}\n",
        ("tls_server_config.key_file: required when TLS is configured",),
    ),
    "key without cert": (
        "tls_server_config:\n  key_file: {key}\n",
        ("tls_server_config.cert_file: required when TLS is configured",),
    ),
    "cert file missing": (
        "tls_server_config:\n  cert_file: missing.crt\n  key_file: {key}\n",
        ("tls_server_config.cert_file: {dir}/missing.crt: No such file or directory",),
    ),
    "key does not match cert": (
        "tls_server_config:\n  cert_file: {cert}\n  key_file: {other}\n",
        ("tls_server_config: cannot load cert_file/key_file ({cert}, {other}):", "mismatch"),
    ),
    "key is not a key": (
        "tls_server_config:\n  cert_file: {cert}\n  key_file: {ca}\n",
        ("tls_server_config: cannot load cert_file/key_file",),
    ),
    "encrypted key": (
        "tls_server_config:\n  cert_file: {cert}\n  key_file: {encrypted}\n",
        ("tls_server_config.key_file: {encrypted}: encrypted keys are not supported",),
    ),
    "client_ca_file required": (
        "tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
        "  client_auth_type: RequireAndVerifyClientCert\n",
        (
            "tls_server_config.client_ca_file: required by client_auth_type "
            "RequireAndVerifyClientCert",
        ),
    ),
    "client_ca_file without client auth": (
        "tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n  client_ca_file: {ca}\n",
        ("tls_server_config.client_ca_file: set, but client_auth_type does not ask",),
    ),
    "client_ca_file missing": (
        "tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
        "  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: nope.pem\n",
        ("tls_server_config.client_ca_file: {dir}/nope.pem: No such file or directory",),
    ),
    "client_ca_file not a certificate": (
        "tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
        "  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: {other}\n",
        ("tls_server_config.client_ca_file: cannot load {other}:",),
    ),
    "plaintext password": (
        "basic_auth_users:\n  alice: hunter2\n",
        ("basic_auth_users.alice: not a bcrypt hash",),
    ),
    "apr1 hash": (
        "basic_auth_users:\n  alice: $apr1$abcdefgh$0123456789abcdefghijkl\n",
        ("basic_auth_users.alice: not a bcrypt hash",),
    ),
    "bcrypt cost out of range": (
        "basic_auth_users:\n  alice: '" + HTPASSWD_2Y_HASH.replace("$10$", "$03$") + "'\n",
        ("basic_auth_users.alice: not a bcrypt hash",),
    ),
    "truncated bcrypt hash": (
        "basic_auth_users:\n  alice: '" + HTPASSWD_2Y_HASH[:-1] + "'\n",
        ("basic_auth_users.alice: not a bcrypt hash",),
    ),
    "users not a mapping": (
        "basic_auth_users: [alice]\n",
        ("basic_auth_users: expected a mapping, got list",),
    ),
    "header not allowed": (
        "http_server_config:\n  headers:\n    X-Powered-By: python\n",
        ("http_server_config.headers: header 'X-Powered-By' cannot be configured",),
    ),
    "header value with CRLF": (
        'http_server_config:\n  headers:\n    Content-Security-Policy: "a\\r\\nSet-Cookie: x"\n',
        (
            "http_server_config.headers.Content-Security-Policy: control character in value "
            "'a\\r\\nSet-Cookie: x'",
        ),
    ),
    "header value with a NUL": (
        'http_server_config:\n  headers:\n    Strict-Transport-Security: "max-age=1\\0"\n',
        ("http_server_config.headers.Strict-Transport-Security: control character",),
    ),
    "header value not allowed": (
        "http_server_config:\n  headers:\n    X-Frame-Options: allow\n",
        (
            "http_server_config.headers.X-Frame-Options: invalid value 'allow' "
            "(expected one of: deny, sameorigin)",
        ),
    ),
}


def fill(text: str, names: Mapping[str, object]) -> str:
    for name, value in names.items():
        text = text.replace(f"{{{name}}}", str(value))
    return text


@pytest.mark.parametrize(("text", "expected"), ERRORS.values(), ids=ERRORS.keys())
def test_invalid_config(pki: Pki, tmp_path: Path, text: str, expected: tuple[str, ...]) -> None:
    names = {
        "dir": tmp_path,
        "ca": pki.ca,
        "cert": pki.server_cert,
        "key": pki.server_key,
        "other": pki.other_key,
        "encrypted": pki.encrypted_key,
    }
    path = write_config(tmp_path, fill(text, names))
    with pytest.raises(WebConfigError) as exc:
        load_web_config(path)
    message = str(exc.value)
    assert "\n" not in message
    assert message.startswith(f"web config {path}: ")
    for part in expected:
        assert fill(part, names) in message
    assert "hunter2" not in message  # secrets are never echoed
    assert "_ssl.c" not in message
