"""Kubeconfig `exec` plugins run as kubectl runs them (exporter/kubernetes/exec_plugin.py,
exec_auth.py), without the `kubernetes` package: v1 and v1beta1, the request in
KUBERNETES_EXEC_INFO, the credential kept until it expires and fetched again then, refused
settings and failing plugins in one line.

The plugin is a Python script that answers, run after run, the next of the answers a test
wrote for it (the last one again when they run out) and keeps each request it was given.
"""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kube_gpu_exporter.exporter.kubernetes.connection import KubernetesConfigError
from kube_gpu_exporter.exporter.kubernetes.exec_auth import ExecAuthorization
from kube_gpu_exporter.exporter.kubernetes.kubeconfig import load_kubeconfig

V1 = "client.authentication.k8s.io/v1"
V1BETA1 = "client.authentication.k8s.io/v1beta1"
PLUGIN = f"""#!{sys.executable}
import json, os, pathlib, sys
folder = pathlib.Path(__file__).parent
runs = sorted(folder.glob("request-*.json"))
(folder / f"request-{{len(runs)}}.json").write_text(os.environ["KUBERNETES_EXEC_INFO"])
(folder / f"env-{{len(runs)}}.json").write_text(json.dumps(dict(os.environ)))
answers = json.loads((folder / "answers.json").read_text())
answer = answers[min(len(runs), len(answers) - 1)]
if isinstance(answer, int):
    print("login failed:\\nthe token endpoint said no", file=sys.stderr)
    sys.exit(answer)
print(json.dumps(answer))
"""


def credential(token: str, version: str = V1, **status: Any) -> dict[str, Any]:
    return {"apiVersion": version, "kind": "ExecCredential", "status": {"token": token, **status}}


def plugin(tmp_path: Path, *answers: Any) -> Path:
    path = tmp_path / "plugin"
    path.write_text(PLUGIN)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "answers.json").write_text(json.dumps(answers))
    return path


def requests(tmp_path: Path) -> list[dict[str, Any]]:
    count = len(list(tmp_path.glob("request-*.json")))
    return [json.loads((tmp_path / f"request-{n}.json").read_text()) for n in range(count)]


def kubeconfig(tmp_path: Path, exec_entry: dict[str, Any], **cluster: Any) -> str:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:1", **cluster}}],
        "users": [{"name": "u", "user": {"exec": exec_entry}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(config))
    return str(path)


def entry(command: Path | str, version: str = V1, **fields: Any) -> dict[str, Any]:
    mode = {"interactiveMode": "Never"} if version == V1 else {}
    return {"apiVersion": version, "command": str(command), **mode, **fields}


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("version", [V1, V1BETA1])
def test_each_version_is_asked_and_answered_in_its_own(tmp_path: Path, version: str) -> None:
    command = plugin(tmp_path, credential("t1", version))
    connection = load_kubeconfig(kubeconfig(tmp_path, entry(command, version)))
    assert connection.authorization is not None and connection.authorization() == "Bearer t1"
    assert requests(tmp_path) == [
        {"apiVersion": version, "kind": "ExecCredential", "spec": {"interactive": False}}
    ]


def test_an_answer_in_another_version_is_refused_in_one_line(tmp_path: Path) -> None:
    command = plugin(tmp_path, credential("t1", V1BETA1))
    with pytest.raises(KubernetesConfigError) as caught:
        load_kubeconfig(kubeconfig(tmp_path, entry(command, V1)))
    message = str(caught.value)
    assert "\n" not in message and f"exec plugin {command}: answered with apiVersion" in message
    assert message.startswith(f"kubeconfig {tmp_path / 'kubeconfig'}: user 'u': ")


def test_args_env_and_cluster_info_reach_the_plugin(tmp_path: Path) -> None:
    command = plugin(tmp_path, credential("t1"))
    (tmp_path / "ca.crt").write_bytes(b"-----BEGIN CERTIFICATE-----\n")
    exec_entry = entry(
        command,
        args=["--region", "eu"],
        env=[{"name": "AWS_PROFILE", "value": "ml"}],
        provideClusterInfo=True,
    )
    extension = {"name": "client.authentication.k8s.io/exec", "extension": {"audience": "a"}}
    cluster = {"certificate-authority": "ca.crt", "tls-server-name": "api"}
    load_kubeconfig(kubeconfig(tmp_path, exec_entry, **cluster, extensions=[extension]))
    env = json.loads((tmp_path / "env-0.json").read_text())
    assert env["AWS_PROFILE"] == "ml"
    assert requests(tmp_path)[0]["spec"]["cluster"] == {
        "server": "http://127.0.0.1:1",
        "tls-server-name": "api",
        "certificate-authority-data": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==",
        "config": {"audience": "a"},
    }


def test_the_token_is_kept_until_it_expires_then_fetched_again(tmp_path: Path) -> None:
    command = plugin(
        tmp_path,
        credential("t1", expirationTimestamp="2030-01-01T00:00:00Z"),
        credential("t2", expirationTimestamp="2030-01-01T01:00:00.5+00:00"),
    )
    connection = load_kubeconfig(kubeconfig(tmp_path, entry(command)))
    auth = connection.authorization
    assert isinstance(auth, ExecAuthorization)
    auth._clock = clock = Clock(1893455999.0)  # 2029-12-31T23:59:59Z
    assert [auth(), auth()] == ["Bearer t1", "Bearer t1"]
    clock.now = 1893456000.0  # its expirationTimestamp
    assert [auth(), auth()] == ["Bearer t2", "Bearer t2"]
    assert len(requests(tmp_path)) == 2


def test_a_401_to_the_current_token_fetches_it_again_once(tmp_path: Path) -> None:
    command = plugin(tmp_path, credential("t1"), credential("t2"), credential("t3"))
    connection = load_kubeconfig(kubeconfig(tmp_path, entry(command)))
    assert connection.authorization is not None and connection.rejected is not None
    assert connection.authorization() == "Bearer t1"
    connection.rejected("Bearer t1")
    connection.rejected("Bearer t1")  # a second watch's 401 to the same token
    assert connection.authorization() == "Bearer t2"
    connection.rejected("Bearer t1")  # a late 401 to the token already replaced
    assert connection.authorization() == "Bearer t2"
    assert len(requests(tmp_path)) == 2


def test_a_later_run_that_fails_keeps_the_last_token(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    command = plugin(tmp_path, credential("t1"), 1)
    connection = load_kubeconfig(kubeconfig(tmp_path, entry(command)))
    assert connection.authorization is not None and connection.rejected is not None
    connection.rejected("Bearer t1")
    assert connection.authorization() == "Bearer t1"
    assert "the token endpoint said no; using the credential it gave before" in caplog.text


def test_a_failing_plugin_is_one_line_with_its_last_words(tmp_path: Path) -> None:
    command = plugin(tmp_path, 3)
    with pytest.raises(KubernetesConfigError) as caught:
        load_kubeconfig(kubeconfig(tmp_path, entry(command)))
    assert str(caught.value) == (
        f"kubeconfig {tmp_path / 'kubeconfig'}: user 'u': exec plugin {command}: exited with "
        "status 3: the token endpoint said no"
    )


def test_a_missing_plugin_is_one_line_with_its_install_hint(tmp_path: Path) -> None:
    missing = tmp_path / "gke-gcloud-auth-plugin"
    hint = "Install it with:\n  gcloud components install gke-gcloud-auth-plugin"
    with pytest.raises(KubernetesConfigError) as caught:
        load_kubeconfig(kubeconfig(tmp_path, entry(missing, installHint=hint)))
    assert str(caught.value).endswith(
        f"exec plugin {missing}: not found (Install it with: gcloud components install "
        "gke-gcloud-auth-plugin)"
    )


@pytest.mark.parametrize(
    ("fields", "refusal"),
    [
        ({"interactiveMode": "Always"}, "interactiveMode Always needs standard input"),
        ({"interactiveMode": None}, "interactiveMode is required by"),
        ({"interactiveMode": "Sometimes"}, "interactiveMode 'Sometimes' is not one of"),
        ({"apiVersion": "client.authentication.k8s.io/v1alpha1"}, "no longer supported"),
        ({"args": "--region eu"}, "args is not a list of strings"),
        ({"env": [{"name": "A"}]}, "env is not a list of {name, value} strings"),
    ],
)
def test_settings_the_protocol_refuses_are_one_line_before_any_run(
    tmp_path: Path, fields: dict[str, Any], refusal: str
) -> None:
    command = plugin(tmp_path, credential("t1"))
    exec_entry = {k: v for k, v in {**entry(command), **fields}.items() if v is not None}
    with pytest.raises(KubernetesConfigError, match=refusal) as caught:
        load_kubeconfig(kubeconfig(tmp_path, exec_entry))
    assert "\n" not in str(caught.value)
    assert requests(tmp_path) == []


@pytest.mark.parametrize(
    ("answer", "refusal"),
    [
        ("not json", "did not print an ExecCredential"),
        ({"apiVersion": V1, "kind": "ExecCredential"}, "gave no status"),
        ({"apiVersion": V1, "kind": "ExecCredential", "status": {}}, "gave neither a token"),
        (credential("t", clientKeyData="k"), "clientCertificateData and clientKeyData, not both"),
        (credential("t", expirationTimestamp="soon"), "is not an RFC 3339 time"),
        (credential("two words"), "status.token is not a token"),
    ],
)
def test_answers_the_protocol_refuses_are_one_line(
    tmp_path: Path, answer: Any, refusal: str
) -> None:
    command = plugin(tmp_path, answer)
    with pytest.raises(KubernetesConfigError, match=refusal) as caught:
        load_kubeconfig(kubeconfig(tmp_path, entry(command)))
    assert "\n" not in str(caught.value)


def test_the_users_own_token_wins_over_the_plugins(tmp_path: Path) -> None:
    """client-go's rule: a request that already carries an Authorization header keeps it."""
    command = plugin(tmp_path, credential("from-plugin"))
    path = Path(kubeconfig(tmp_path, entry(command)))
    config = json.loads(path.read_text())
    config["users"][0]["user"]["token"] = "own"
    path.write_text(json.dumps(config))
    connection = load_kubeconfig(str(path))
    assert connection.authorization is not None and connection.authorization() == "Bearer own"
    assert connection.rejected is None


def test_the_exec_path_does_not_import_the_kubernetes_package(tmp_path: Path) -> None:
    command = plugin(tmp_path, credential("t1"))
    code = (
        "import sys\n"
        "from kube_gpu_exporter.exporter.kubernetes.kubeconfig import load_kubeconfig\n"
        "print(load_kubeconfig(sys.argv[1]).authorization())\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'kubernetes'))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, kubeconfig(tmp_path, entry(command))],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.stdout.splitlines() == ["Bearer t1", "[]"], done.stdout + done.stderr
