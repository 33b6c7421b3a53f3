"""The slim API client against TLS servers: CA and client certificates as data and as files,
tls-server-name, insecure-skip-tls-verify, the service account's rotating token, an exec
plugin's token and client certificate (its protocol: test_exec_plugin.py), an auth-provider
through the `kubernetes` package's loader, and `serve` never importing that package.

Certificates are made with the openssl CLI (as make test installs it): a CA, a client
certificate it signs, and two serving certificates, one for 127.0.0.1 and one only for the
name `api.internal`.
"""

from __future__ import annotations

import base64
import contextlib
import json
import shutil
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from kube_gpu_exporter.demo.kube_api import NODE, KubeApiServer, make_pod
from kube_gpu_exporter.exporter.kubernetes.api_errors import classify, summary
from kube_gpu_exporter.exporter.kubernetes.client import ApiClient, ApiError, api_client
from kube_gpu_exporter.exporter.kubernetes.connection import KubernetesConfigError
from kube_gpu_exporter.exporter.kubernetes.in_cluster import load_in_cluster

REPO = Path(__file__).resolve().parents[2]
SCENARIO = REPO / "exporter" / "simulated" / "scenarios" / "demo.yaml"


@dataclass(frozen=True)
class Pki:
    folder: Path

    def path(self, name: str) -> Path:
        return self.folder / name

    def b64(self, name: str) -> str:
        return base64.b64encode(self.path(name).read_bytes()).decode()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    openssl = shutil.which("openssl")
    assert openssl, "the openssl CLI is missing (Debian's openssl package)"
    folder = tmp_path_factory.mktemp("pki")
    curve = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], cwd=folder, check=True, capture_output=True)

    run("req", "-x509", *curve, "-days", "2", "-subj", "/CN=test-ca", "-keyout", "ca.key",
        "-out", "ca.crt")  # fmt: skip
    for name, extension in [
        ("alice", "extendedKeyUsage=clientAuth"),
        ("by-ip", "subjectAltName=IP:127.0.0.1"),
        ("by-name", "subjectAltName=DNS:api.internal"),
    ]:
        (folder / f"{name}.ext").write_text(extension + "\n")
        run("req", *curve, "-subj", f"/CN={name}", "-keyout", f"{name}.key", "-out", f"{name}.csr")
        signed = ["-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-days", "2"]
        run("x509", "-req", "-in", f"{name}.csr", *signed, "-extfile", f"{name}.ext",
            "-out", f"{name}.crt")  # fmt: skip
    return Pki(folder)


@dataclass
class Seen:
    """What the server saw of each request: path, Authorization, client certificate's CN."""

    requests: list[tuple[str, str | None, str | None]] = field(default_factory=list)
    answer: tuple[int, dict[str, Any]] = (200, {"kind": "PodList", "metadata": {}, "items": []})


@contextlib.contextmanager
def tls_server(pki: Pki, name: str, seen: Seen) -> Iterator[str]:
    """An HTTPS server with the `name` serving certificate that asks for (and verifies
    against the CA) a client certificate; its URL."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki.path(f"{name}.crt"), pki.path(f"{name}.key"))
    context.load_verify_locations(pki.path("ca.crt"))
    context.verify_mode = ssl.CERT_OPTIONAL

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            peer = self.connection.getpeercert()  # type: ignore[attr-defined]
            subject = dict(pair[0] for pair in peer["subject"]) if peer else {}
            seen.requests.append(
                (self.path, self.headers.get("Authorization"), subject.get("commonName"))
            )
            code, body = seen.answer
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    class Server(ThreadingHTTPServer):
        daemon_threads = True

        def handle_error(self, request: Any, client_address: Any) -> None:
            pass  # the refused handshakes of the tests that expect them

    httpd = Server(("127.0.0.1", 0), Handler)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def write_kubeconfig(folder: Path, cluster: dict[str, Any], user: dict[str, Any]) -> str:
    config = {
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path = folder / "kubeconfig"
    path.write_text(json.dumps(config))
    return str(path)


def list_once(client: ApiClient, **params: Any) -> dict[str, Any]:
    response = client.lister("/api/v1/pods", field_selector=f"spec.nodeName={NODE}")(
        _preload_content=False, _request_timeout=(5, 5), **params
    )
    try:
        return dict(json.loads(response.data))
    finally:
        response.release_conn()


# --- TLS and client certificates ---------------------------------------------------------------


def test_client_certificate_and_ca_as_data(pki: Pki, tmp_path: Path) -> None:
    """The form kind, minikube and kubeadm write: everything inline, base64."""
    seen = Seen()
    with tls_server(pki, "by-ip", seen) as url:
        cluster = {"server": url, "certificate-authority-data": pki.b64("ca.crt")}
        user = {"client-certificate-data": pki.b64("alice.crt"),
                "client-key-data": pki.b64("alice.key")}  # fmt: skip
        client = api_client(write_kubeconfig(tmp_path, cluster, user))
        try:
            list_once(client, watch=True, resource_version="7", allow_watch_bookmarks=True)
        finally:
            client.close()
    ((path, authorization, common_name),) = seen.requests
    assert common_name == "alice" and authorization is None
    assert path == (
        f"/api/v1/pods?fieldSelector=spec.nodeName%3D{NODE}&watch=true&resourceVersion=7"
        "&allowWatchBookmarks=true"
    )


def test_client_certificate_and_ca_as_files_relative_to_the_kubeconfig(
    pki: Pki, tmp_path: Path
) -> None:
    for name in ("ca.crt", "alice.crt", "alice.key"):
        shutil.copy(pki.path(name), tmp_path / name)
    seen = Seen()
    with tls_server(pki, "by-ip", seen) as url:
        cluster = {"server": url, "certificate-authority": "ca.crt"}
        user = {"client-certificate": "alice.crt", "client-key": "alice.key", "token": "t0"}
        client = api_client(write_kubeconfig(tmp_path, cluster, user))
        list_once(client)
    assert [(auth, cn) for _, auth, cn in seen.requests] == [("Bearer t0", "alice")]


def test_tls_server_name_is_what_the_certificate_is_checked_against(
    pki: Pki, tmp_path: Path
) -> None:
    """The serving certificate names only api.internal; the URL's host is an IP address."""
    seen = Seen()
    with tls_server(pki, "by-name", seen) as url:
        cluster = {"server": url, "certificate-authority-data": pki.b64("ca.crt")}
        without = api_client(write_kubeconfig(tmp_path, cluster, {}))
        with pytest.raises(Exception) as caught:
            list_once(without)
        assert classify(caught.value) == "connection" and "certificate" in str(caught.value)
        cluster["tls-server-name"] = "api.internal"
        list_once(api_client(write_kubeconfig(tmp_path, cluster, {})))
    assert len(seen.requests) == 1


def test_insecure_skip_tls_verify(pki: Pki, tmp_path: Path) -> None:
    """The serving certificate is not signed by anything the client trusts."""
    seen = Seen()
    with tls_server(pki, "by-ip", seen) as url:
        verifying = api_client(write_kubeconfig(tmp_path, {"server": url}, {}))
        with pytest.raises(Exception) as caught:
            list_once(verifying)
        assert "certificate verify failed" in str(caught.value)
        insecure = {"server": url, "insecure-skip-tls-verify": True}
        list_once(api_client(write_kubeconfig(tmp_path, insecure, {})))
    assert len(seen.requests) == 1


def test_a_refusal_raises_with_the_status_message(pki: Pki, tmp_path: Path) -> None:
    status = {"kind": "Status", "code": 403, "reason": "Forbidden",
              "message": 'pods is forbidden: User "alice" cannot list resource "pods"'}  # fmt: skip
    seen = Seen(answer=(403, status))
    with tls_server(pki, "by-ip", seen) as url:
        cluster = {"server": url, "certificate-authority-data": pki.b64("ca.crt")}
        client = api_client(write_kubeconfig(tmp_path, cluster, {"token": "t"}))
        with pytest.raises(ApiError) as caught:
            list_once(client)
        seen.answer = (200, {"items": []})
        assert list_once(client) == {"items": []}  # the client goes on after an error
    assert caught.value.status == 403 and classify(caught.value) == "other"
    assert summary(caught.value) == f"HTTP 403: {status['message']}"


# --- in-cluster ---------------------------------------------------------------------------------


def test_in_cluster_token_is_followed_as_it_rotates(pki: Pki, tmp_path: Path) -> None:
    """The kubelet replaces the bound token about hourly; the next request after the re-read
    period carries the new one (the period is client-go's minute; 0 here)."""
    shutil.copy(pki.path("ca.crt"), tmp_path / "ca.crt")
    (tmp_path / "token").write_text("first")
    (tmp_path / "namespace").write_text("gpu-monitoring")
    seen = Seen()
    with tls_server(pki, "by-ip", seen) as url:
        port = url.rsplit(":", 1)[1]
        environ = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": port}
        connection = load_in_cluster(tmp_path, environ, reread_seconds=0)
        assert connection.namespace == "gpu-monitoring"
        client = ApiClient(connection)
        list_once(client)
        (tmp_path / "token").write_text("second")
        list_once(client)
    assert [auth for _, auth, _ in seen.requests] == ["Bearer first", "Bearer second"]


def test_in_cluster_ipv6_host_is_bracketed(pki: Pki, tmp_path: Path) -> None:
    shutil.copy(pki.path("ca.crt"), tmp_path / "ca.crt")
    (tmp_path / "token").write_text("t")
    environ = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    assert load_in_cluster(tmp_path, environ).server == "https://[fd00::1]:443"


def test_a_ca_file_that_is_not_a_certificate(pki: Pki, tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_text("garbage")
    (tmp_path / "token").write_text("t")
    environ = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    with pytest.raises(KubernetesConfigError, match=r"^in-cluster config: certificate-authority"):
        load_in_cluster(tmp_path, environ)


def test_a_client_key_that_does_not_match_its_certificate(pki: Pki, tmp_path: Path) -> None:
    user = {"client-certificate-data": pki.b64("alice.crt"),
            "client-key-data": pki.b64("by-ip.key")}  # fmt: skip
    path = write_kubeconfig(tmp_path, {"server": "https://127.0.0.1:1"}, user)
    with pytest.raises(KubernetesConfigError, match="the client certificate and key cannot"):
        api_client(path)


# --- exec plugins (their protocol: test_exec_plugin.py) and auth-providers ---------------------


def _plugin(tmp_path: Path, *answers: dict[str, Any]) -> str:
    """A plugin printing `answers` one per run (the last again when they run out)."""
    plugin = tmp_path / "plugin.py"
    (tmp_path / "answers.json").write_text(json.dumps(answers))
    plugin.write_text(
        "import json, pathlib\n"
        "folder = pathlib.Path(__file__).parent\n"
        "runs = folder / 'runs'\n"
        "n = int(runs.read_text()) if runs.exists() else 0\n"
        "runs.write_text(str(n + 1))\n"
        "answers = json.loads((folder / 'answers.json').read_text())\n"
        "status = answers[min(n, len(answers) - 1)]\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', "
        "'kind': 'ExecCredential', 'status': status}))\n"
    )
    return str(plugin)


def _exec_user(plugin: str) -> dict[str, Any]:
    return {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
                     "args": [plugin], "interactiveMode": "Never"}}  # fmt: skip


def test_an_exec_plugin_token(pki: Pki, tmp_path: Path) -> None:
    user = _exec_user(_plugin(tmp_path, {"token": "from-plugin"}))
    seen = Seen()
    with tls_server(pki, "by-ip", seen) as url:
        cluster = {"server": url, "certificate-authority-data": pki.b64("ca.crt")}
        list_once(api_client(write_kubeconfig(tmp_path, cluster, user)))
    assert [auth for _, auth, _ in seen.requests] == ["Bearer from-plugin"]


def test_an_exec_plugin_client_certificate(pki: Pki, tmp_path: Path) -> None:
    answer = {"clientCertificateData": pki.path("alice.crt").read_text(),
              "clientKeyData": pki.path("alice.key").read_text()}  # fmt: skip
    user = _exec_user(_plugin(tmp_path, answer))
    seen = Seen()
    with tls_server(pki, "by-ip", seen) as url:
        cluster = {"server": url, "certificate-authority-data": pki.b64("ca.crt")}
        list_once(api_client(write_kubeconfig(tmp_path, cluster, user)))
    assert [(auth, cn) for _, auth, cn in seen.requests] == [(None, "alice")]


def test_a_401_makes_the_next_request_carry_a_fresh_plugin_token(pki: Pki, tmp_path: Path) -> None:
    """As client-go: the request answered 401 fails; the plugin runs again for the next."""
    user = _exec_user(_plugin(tmp_path, {"token": "revoked"}, {"token": "fresh"}))
    seen = Seen(answer=(401, {"kind": "Status", "code": 401, "reason": "Unauthorized"}))
    with tls_server(pki, "by-ip", seen) as url:
        cluster = {"server": url, "certificate-authority-data": pki.b64("ca.crt")}
        client = api_client(write_kubeconfig(tmp_path, cluster, user))
        with pytest.raises(ApiError):
            list_once(client)
        seen.answer = Seen().answer
        list_once(client)
    assert [auth for _, auth, _ in seen.requests] == ["Bearer revoked", "Bearer fresh"]


def test_an_exec_plugin_that_fails_is_one_line(tmp_path: Path) -> None:
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "interactiveMode": "Never",
                     "command": str(tmp_path / "missing-plugin")}}  # fmt: skip
    path = write_kubeconfig(tmp_path, {"server": "https://127.0.0.1:1"}, user)
    with pytest.raises(KubernetesConfigError, match="missing-plugin: not found") as caught:
        api_client(path)
    assert "\n" not in str(caught.value)


def _oidc_user() -> dict[str, Any]:
    """An OIDC auth-provider whose id-token has not expired: the loader uses it as it is."""
    claims = base64.urlsafe_b64encode(b'{"exp": 4102444800}').decode().rstrip("=")
    token = f"eyJhbGciOiJub25lIn0.{claims}.c2ln"
    config = {"id-token": token, "idp-issuer-url": "https://issuer.invalid", "client-id": "x"}
    return {"auth-provider": {"name": "oidc", "config": config}}


def test_an_auth_provider_token_through_the_kubernetes_loader(pki: Pki, tmp_path: Path) -> None:
    pytest.importorskip("kubernetes")  # the `auth-provider` extra
    seen = Seen()
    user = _oidc_user()
    with tls_server(pki, "by-ip", seen) as url:
        cluster = {"server": url, "certificate-authority-data": pki.b64("ca.crt")}
        list_once(api_client(write_kubeconfig(tmp_path, cluster, user)))
    assert [auth for _, auth, _ in seen.requests] == [
        f"Bearer {user['auth-provider']['config']['id-token']}"
    ]


def test_an_auth_provider_without_the_extra_is_one_line_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "kubernetes", None)  # as if not installed
    path = write_kubeconfig(tmp_path, {"server": "https://127.0.0.1:1"}, _oidc_user())
    with pytest.raises(KubernetesConfigError) as caught:
        api_client(path)
    message = str(caught.value)
    assert "\n" not in message
    assert message.endswith("pip install 'kube-gpu-exporter[auth-provider]'"), message


# --- serve never imports kubernetes ------------------------------------------------------------


def test_serve_with_kubernetes_watches_does_not_import_the_kubernetes_package(
    tmp_path: Path,
) -> None:
    """`serve --kubernetes.enabled` builds and runs its pod and ResourceSlice watches until
    they are up, without the `kubernetes` package (the auth-provider extra, slow to import:
    bench/README.md), which the test extra installs."""
    code = """
import asyncio, sys, time
from kube_gpu_exporter.exporter import app
from kube_gpu_exporter.exporter.cli import main

async def watches_only(args, web_config, sampler, directory, *_):
    directory.start()
    deadline = time.monotonic() + 30
    while not directory.up and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    print("up" if directory.up else "down")
    directory.stop()

app._serve = watches_only
main(sys.argv[1:])
print(sorted(m for m in sys.modules if m.split(".")[0] == "kubernetes"))
"""
    with KubeApiServer() as api:
        api.put(make_pod("trainer-0", "ml"))
        config = api.write_kubeconfig(tmp_path / "kubeconfig")
        argv = ["serve", "--simulate", str(SCENARIO), "--kubernetes.enabled",
                f"--kubernetes.kubeconfig={config}", f"--kubernetes.node-name={NODE}"]  # fmt: skip
        proc = subprocess.run(
            [sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=60
        )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["up", "[]"], proc.stdout + proc.stderr
