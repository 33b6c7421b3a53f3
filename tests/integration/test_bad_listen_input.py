"""Listen addresses and TLS settings that cannot work: one line and exit status 2 at start,
never a server that listens somewhere else than asked or one no client can talk to. The CLI
runs in-process (inprocess_cli.py) for the flags; TLS handshakes are real (openssl CLI keys).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from inprocess_cli import assert_one_line, offline_cli, run_cli

from support import exporter_command, free_port, run_exporter

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "exporter" / "simulated" / "scenarios" / "demo.yaml"


@pytest.fixture(autouse=True)
def _offline() -> Iterator[None]:
    with offline_cli():
        yield


BAD_ADDRESSES = {
    "unbalanced-bracket": ("[::1:29999", "missing ']'"),
    "unopened-bracket": ("::1]:29999", "not a listen address"),
    "bare-ipv6": ("::1:29999", "IPv6 address in brackets"),
    "bracketed-ipv4": ("[127.0.0.1]:29999", "not an IPv6 address"),
    "text-after-bracket": ("[::1]x:29999", "not a listen address"),
    "bracket-no-port": ("[::1]", "not a listen address"),
    "bad-ipv6": ("[::g]:29999", "not an IPv6 address"),
    "nested-brackets": ("[[::1]]:29999", "not a listen address"),
    "space-in-host": ("my host:29999", "not an IP address or host name"),
    "bad-ipv4": ("999.1.1.1:29999", "not an IP address or host name"),
    "percent-host": ("%eth0:29999", "not an IP address or host name"),
    "no-port": ("127.0.0.1", "(use host:port)"),
    "empty-port": ("127.0.0.1:", "(use host:port)"),
    "port-out-of-range": ("[::1]:0", "port 0 out of range 1–65535"),
}


@pytest.mark.parametrize(("address", "expected"), BAD_ADDRESSES.values(), ids=BAD_ADDRESSES)
@pytest.mark.parametrize("command", [["serve"], ["cluster"]])
def test_a_malformed_listen_address_is_refused(
    command: list[str], address: str, expected: str
) -> None:
    line = assert_one_line(*run_cli([*command, f"--web.listen-address={address}"]), expected)
    assert "--web.listen-address" in line


@pytest.mark.parametrize(
    "address",
    [":29999", "127.0.0.1:29999", "[::1]:29999", "[::]:29999", "localhost:29999",
     "gpu-node-1.example.com:29999", "[fe80::1%eth0]:29999", "0.0.0.0:29999"],
)  # fmt: skip
def test_well_formed_listen_addresses_are_accepted(address: str) -> None:
    assert run_cli(["serve", "--simulate", DEMO, f"--web.listen-address={address}"]) == (0, "")


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("[::1", "--host"),
        ("::1", "IPv4 address or a host name"),
        ("my host", "not an IP address or host name"),
        ("", "IPv4 address or a host name"),
    ],
)
def test_the_demo_checks_its_host(host: str, expected: str) -> None:
    assert_one_line(*run_cli(["demo", f"--host={host}"]), "--host", expected)


# --- TLS: cipher suites no handshake can use with the certificate --------------------------


def _cert(tmp_path: Path, name: str, algorithm: list[str]) -> tuple[Path, Path]:
    key, cert = tmp_path / f"{name}.key", tmp_path / f"{name}.crt"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", *algorithm, "-nodes", "-keyout", str(key),
         "-out", str(cert), "-days", "2", "-subj", f"/CN={name}"],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    folder = tmp_path_factory.mktemp("certs")
    return {
        "RSA": _cert(folder, "rsa", ["rsa:2048"]),
        "ECDSA": _cert(folder, "ec", ["ec", "-pkeyopt", "ec_paramgen_curve:P-256"]),
    }


ECDSA_ONLY = "[TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384]"
RSA_ONLY = "[TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256]"
RSA_KEY_EXCHANGE = "[TLS_RSA_WITH_AES_128_GCM_SHA256]"


def _serve_with(tmp_path: Path, cert: tuple[Path, Path], settings: str) -> tuple[int, str]:
    config = tmp_path / "web.yml"
    config.write_text(
        f"tls_server_config:\n  cert_file: {cert[0]}\n  key_file: {cert[1]}\n{settings}"
    )
    return run_cli(["serve", "--simulate", DEMO, "--web.config.file", config])


@pytest.mark.parametrize(
    ("key", "suites"),
    [("RSA", ECDSA_ONLY), ("ECDSA", RSA_ONLY), ("ECDSA", RSA_KEY_EXCHANGE)],
    ids=["ecdsa-suites-rsa-key", "rsa-suites-ecdsa-key", "rsa-key-exchange-ecdsa-key"],
)
def test_cipher_suites_that_cannot_sign_with_the_key_are_refused(
    tmp_path: Path, certs: dict[str, tuple[Path, Path]], key: str, suites: str
) -> None:
    """Up to TLS 1.2 a suite names the key type that signs: with no suite for the certificate's
    key no client can complete a handshake, which only showed at the first scrape."""
    settings = f"  max_version: TLS12\n  cipher_suites: {suites}\n"
    line = assert_one_line(
        *_serve_with(tmp_path, certs[key], settings),
        "tls_server_config.cipher_suites",
        f"{key} key",
        suites.strip("[]").split(",")[0],
    )
    assert "no TLS handshake" in line


@pytest.mark.parametrize(
    ("key", "settings"),
    [
        ("RSA", f"  min_version: TLS13\n  cipher_suites: {ECDSA_ONLY}\n"),  # 1.3 ignores them
        ("RSA", f"  cipher_suites: {ECDSA_ONLY}\n"),  # up to TLS 1.3 by default
        ("RSA", f"  max_version: TLS12\n  cipher_suites: {RSA_ONLY}\n"),
        ("RSA", f"  max_version: TLS12\n  cipher_suites: {RSA_KEY_EXCHANGE}\n"),
        ("ECDSA", f"  max_version: TLS12\n  cipher_suites: {ECDSA_ONLY}\n"),
        ("ECDSA", "  max_version: TLS12\n"),
    ],
)
def test_cipher_suites_some_handshake_can_use_are_accepted(
    tmp_path: Path, certs: dict[str, tuple[Path, Path]], key: str, settings: str
) -> None:
    assert _serve_with(tmp_path, certs[key], settings) == (0, "")


@pytest.mark.parametrize("command", ["serve", "cluster"])
def test_more_connections_than_open_files_is_refused_at_start(command: str) -> None:
    """`ulimit -n 1024` and --web.max-connections=1024: before, the server started, accept
    failed with EMFILE, and scrapes and probes timed out with nothing said."""
    args = ["prlimit", "--nofile=1024:1024", "--"]
    args += exporter_command(command, f"--web.listen-address=127.0.0.1:{free_port()}")
    args += ["--simulate", str(DEMO)] if command == "serve" else []
    done = subprocess.run(
        [*args, "--web.max-connections=1024"], capture_output=True, text=True, timeout=60
    )
    line = assert_one_line(done.returncode, done.stderr, "--web.max-connections=1024")
    assert "ulimit -n" in line


def test_a_soft_open_file_limit_is_raised_towards_the_hard_one(tmp_path: Path) -> None:
    args = ["--simulate", str(DEMO), "--web.max-connections=1024"]
    prefix = ["prlimit", "--nofile=256:4096", "--"]
    with run_exporter(args, tmp_path, prefix=prefix) as exporter:
        assert exporter.get("/healthz")[0] == 200
        limits = Path(f"/proc/{exporter.proc.pid}/limits").read_text()
        soft = int(limits.split("Max open files")[1].split()[0])
        assert soft >= 1024 + 32
