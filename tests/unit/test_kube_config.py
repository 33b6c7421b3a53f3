"""The API client's configuration without the `kubernetes` package: a kubeconfig's current
context and the pod's service account → a Connection, and every mistake one line.

What needs certificates (CA data, client certificates, tls-server-name, the service account's
CA) or a server is in tests/integration/test_kube_client.py.
"""

from __future__ import annotations

import base64
import json
import logging
import ssl
from pathlib import Path
from typing import Any

import pytest

from kube_gpu_exporter.exporter.input_errors import InputError
from kube_gpu_exporter.exporter.kubernetes.client import ApiClient, _query, api_client
from kube_gpu_exporter.exporter.kubernetes.connection import Connection, KubernetesConfigError
from kube_gpu_exporter.exporter.kubernetes.in_cluster import load_in_cluster
from kube_gpu_exporter.exporter.kubernetes.kubeconfig import current_context, load_kubeconfig
from kube_gpu_exporter.exporter.kubernetes.tokens import TokenFile


def kubeconfig(
    folder: Path,
    cluster: dict[str, Any] | None = None,
    user: dict[str, Any] | None = None,
    *,
    context: dict[str, Any] | None = None,
    current: str = "test",
) -> str:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:1", **(cluster or {})}}],
        "users": [{"name": "u", "user": user or {}}],
        "contexts": [{"name": "test", "context": {"cluster": "c", "user": "u", **(context or {})}}],
        "current-context": current,
    }
    path = folder / "kubeconfig"
    path.write_text(json.dumps(config))
    return str(path)


def header(connection: Connection) -> str | None:
    return None if connection.authorization is None else connection.authorization()


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


# --- what a kubeconfig gives ------------------------------------------------------------------


def test_token_and_server(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path, {"server": "http://api.example:8080/prefix/"}, {"token": "abc"})
    connection = load_kubeconfig(path)
    assert connection.server == "http://api.example:8080/prefix"
    assert connection.ssl_context is None  # plain HTTP: no TLS at all
    assert header(connection) == "Bearer abc"
    assert connection.source == f"kubeconfig {path}" and connection.namespace == "default"


def test_token_file_is_relative_to_the_kubeconfig_and_wins_over_token(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("from-file\n")
    path = kubeconfig(tmp_path, user={"token": "inline", "tokenFile": "token"})
    assert header(load_kubeconfig(path)) == "Bearer from-file"


def test_basic_auth(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path, user={"username": "admin", "password": "s3cret"})
    assert header(load_kubeconfig(path)) == "Basic " + b64("admin:s3cret")


def test_no_user_no_authorization(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path, context={"user": "", "namespace": "team"})
    connection = load_kubeconfig(path)
    assert connection.authorization is None and connection.namespace == "team"
    assert current_context(path).namespace == "team"


def test_insecure_skips_verification(tmp_path: Path) -> None:
    path = kubeconfig(
        tmp_path,
        {
            "server": "https://10.0.0.1:6443",
            "insecure-skip-tls-verify": True,
            "proxy-url": "http://p:3128",
        },
    )
    connection = load_kubeconfig(path)
    assert connection.ssl_context is not None
    assert connection.ssl_context.verify_mode == ssl.CERT_NONE
    assert not connection.ssl_context.check_hostname
    assert connection.proxy_url == "http://p:3128"


def test_https_without_a_ca_verifies_against_the_system_roots(tmp_path: Path) -> None:
    connection = load_kubeconfig(kubeconfig(tmp_path, {"server": "https://api.example"}))
    assert connection.ssl_context is not None
    assert connection.ssl_context.verify_mode == ssl.CERT_REQUIRED
    assert connection.ssl_context.check_hostname


def test_tls_server_name(tmp_path: Path) -> None:
    path = kubeconfig(
        tmp_path,
        {"server": "https://10.0.0.1", "insecure-skip-tls-verify": True, "tls-server-name": "kube"},
    )
    assert load_kubeconfig(path).server_hostname == "kube"


@pytest.mark.parametrize(
    ("cluster", "user", "context", "current", "fragment"),
    [
        ({}, {}, {}, "", "no current-context is set"),
        ({}, {}, {}, "elsewhere", "context 'elsewhere' not found"),
        ({}, {}, {"cluster": "gone"}, "test", "cluster 'gone' not found"),
        ({}, {}, {"cluster": ""}, "test", "cluster is not set"),
        ({}, {}, {"user": "nobody"}, "test", "user 'nobody' not found"),
        ({"server": ""}, {}, {}, "test", "server is not set"),
        ({"server": "api.example:6443"}, {}, {}, "test", "is not an http:// or https:// URL"),
        ({"server": "https://h:port"}, {}, {}, "test", "is not a URL"),
        ({"server": 6443}, {}, {}, "test", "server is not a string"),
        (
            {"server": "https://h", "insecure-skip-tls-verify": "yes"},
            {},
            {},
            "test",
            "is not true or false",
        ),
        ({}, {"username": "admin"}, {}, "test", "username and password must be given together"),
        ({}, {"token": "abc\ndef"}, {}, "test", "token is not a token"),
        ({}, {"tokenFile": "missing"}, {}, "test", "No such file or directory"),
        (
            {"server": "https://h", "certificate-authority": "ca.crt"},
            {},
            {},
            "test",
            "no such file",
        ),
        (
            {"server": "https://h", "certificate-authority-data": "!!"},
            {},
            {},
            "test",
            "certificate-authority-data is not base64",
        ),
        (
            {"server": "https://h", "certificate-authority-data": b64("not a certificate")},
            {},
            {},
            "test",
            "certificate-authority-data: no PEM certificate could be loaded",
        ),
        (
            {"server": "https://h"},
            {"client-certificate-data": b64("x")},
            {},
            "test",
            "client-certificate is given without client-key",
        ),
        (
            {"server": "https://h"},
            {"client-key": "client.key"},
            {},
            "test",
            "client-key is given without client-certificate",
        ),
        (
            {"server": "https://h"},
            {"client-certificate": "client.crt", "client-key": "client.key"},
            {},
            "test",
            "client-certificate",
        ),
        (
            {"server": "https://h"},
            {"client-certificate-data": b64("x"), "client-key-data": b64("y")},
            {},
            "test",
            "the client certificate and key cannot be used",
        ),
    ],
)
def test_every_mistake_is_one_line_naming_the_file(
    tmp_path: Path,
    cluster: dict[str, Any],
    user: dict[str, Any],
    context: dict[str, Any],
    current: str,
    fragment: str,
) -> None:
    path = kubeconfig(tmp_path, cluster, user, context=context, current=current)
    with pytest.raises(KubernetesConfigError) as caught:
        load_kubeconfig(path)
    message = str(caught.value)
    assert isinstance(caught.value, InputError)  # exit 2
    assert "\n" not in message and message.startswith(f"kubeconfig {path}: "), message
    assert fragment in message, message


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("", "the file is empty"),
        ("[1, 2]", "not a kubeconfig"),
        ("clusters: [unclosed", "not valid YAML at line 2"),
        ("a: b: c", "not valid YAML at line 1, column 5"),
    ],
)
def test_unreadable_files(tmp_path: Path, content: str, fragment: str) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(content)
    with pytest.raises(KubernetesConfigError, match=fragment):
        load_kubeconfig(str(path))


def test_no_temporary_file_is_left_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Key data goes through a private temporary folder that is gone once it is loaded (or
    has failed to load)."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(scratch))
    user = {"client-certificate-data": b64("x"), "client-key-data": b64("y")}
    with pytest.raises(KubernetesConfigError):
        load_kubeconfig(kubeconfig(tmp_path, {"server": "https://h"}, user))
    assert list(scratch.iterdir()) == []


# --- tokens -----------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_token_file_is_read_again_after_its_period(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Bound service-account tokens rotate: the file is re-read once a minute (client-go's
    period), and a failed re-read keeps the last token, with a warning."""
    path = tmp_path / "token"
    path.write_text("one")
    clock = Clock()
    token = TokenFile(str(path), "test", period=60, clock=clock)
    path.write_text("two")
    clock.now += 59
    assert token() == "Bearer one"
    clock.now += 1
    assert token() == "Bearer two"
    path.write_text("")  # being replaced
    clock.now += 60
    with caplog.at_level(logging.WARNING):
        assert token() == "Bearer two"
    path.unlink()
    clock.now += 60
    assert token() == "Bearer two"
    assert "using the token read before" in caplog.text
    path.write_text("three\n")
    clock.now += 60
    assert token() == "Bearer three"


def test_an_empty_token_file_at_start_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(" \n")
    with pytest.raises(KubernetesConfigError, match=r"^test: token file .*: empty$"):
        TokenFile(str(path), "test")


# --- in-cluster -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("environ", "fragment"),
    [
        ({}, "KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set"),
        ({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, "are not set"),
        ({"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "https"}, "not a port"),
        ({"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}, "ca.crt"),
    ],
)
def test_in_cluster_mistakes(tmp_path: Path, environ: dict[str, str], fragment: str) -> None:
    with pytest.raises(KubernetesConfigError, match=r"^in-cluster config: ") as caught:
        load_in_cluster(tmp_path, environ)
    assert fragment in str(caught.value) and "\n" not in str(caught.value)


def test_in_cluster_without_a_token(tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_text("")
    environ = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    with pytest.raises(KubernetesConfigError, match=r"^in-cluster config: token file .*token"):
        load_in_cluster(tmp_path, environ)


def test_api_client_of_a_missing_kubeconfig(tmp_path: Path) -> None:
    with pytest.raises(KubernetesConfigError, match="no such file"):
        api_client(str(tmp_path / "nothing"))


# --- requests ---------------------------------------------------------------------------------


def test_list_parameters_become_the_apis_query() -> None:
    query = _query(
        {
            "field_selector": "spec.nodeName=n1,spec.driver=gpu.nvidia.com",
            "watch": True,
            "resource_version": "42",
            "allow_watch_bookmarks": True,
            "timeout_seconds": 300,
            "limit": None,
            "_continue": "abc==",
        }
    )
    assert query == (
        "fieldSelector=spec.nodeName%3Dn1%2Cspec.driver%3Dgpu.nvidia.com&watch=true"
        "&resourceVersion=42&allowWatchBookmarks=true&timeoutSeconds=300&continue=abc%3D%3D"
    )
    with pytest.raises(TypeError, match="pretty"):
        _query({"pretty": True})


def test_environment_proxy_and_no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "10.0.0.1")
    for name in ("https_proxy", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    proxied = ApiClient(
        Connection("https://api.example:6443", "test", ssl.create_default_context())
    )
    direct = ApiClient(Connection("https://10.0.0.1:6443", "test", ssl.create_default_context()))
    assert proxied._http.proxy == "http://proxy.example:3128"
    assert direct._http.proxy is None
