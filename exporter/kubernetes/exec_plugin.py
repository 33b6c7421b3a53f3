"""A kubeconfig user's `exec` plugin, run as kubectl runs it: the ExecCredential protocol
(client.authentication.k8s.io v1 and v1beta1) that `aws eks get-token`,
`gke-gcloud-auth-plugin`, `kubelogin` and `tsh` speak.

Why our own and not the `kubernetes` package's loader: the protocol is one command and one
JSON answer, and that package costs every exec user its import (bench/README.md) and the
image its size. What client-go does, we do: the command with its args, the environment
plus the entry's `env`, `KUBERNETES_EXEC_INFO` holding the ExecCredential request (the
cluster's connection details too when `provideClusterInfo` is set); the answer's apiVersion
must be the entry's. We never give a plugin standard input, so `spec.interactive` is false,
`interactiveMode: Always` is refused, and `IfAvailable` (v1beta1's default; v1 requires the
field) means never. The plugin's standard error reaches the terminal when ours is one (a
device-code login prints its prompt there); otherwise its last line ends our error line.
v1alpha1 is refused, as kubectl 1.24 and later refuse it.

Every failure is one `KubernetesConfigError` line naming the kubeconfig, the user and the
command. Caching and re-running are exec_auth.py's.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from kube_gpu_exporter.exporter.input_errors import one_line
from kube_gpu_exporter.exporter.kubernetes.connection import KubernetesConfigError

GROUP: Final = "client.authentication.k8s.io"
VERSIONS: Final = (f"{GROUP}/v1", f"{GROUP}/v1beta1")
MODES: Final = ("Never", "IfAvailable", "Always")
# A browser login (kubelogin's default) waits for the person; a plugin that hangs must not
# hold the exporter's requests for ever (client-go has no limit).
TIMEOUT_SECONDS: Final = 300.0
MAX_OUTPUT: Final = 1 << 20  # an ExecCredential is a token or a certificate and key
EXTENSION: Final = f"{GROUP}/exec"  # the cluster extension handed over as `config`


@dataclass(frozen=True)
class Credential:
    """What one run gave: a token, a PEM client certificate and key, or both; `expires` is
    a Unix time, None for a credential that does not expire."""

    token: str | None
    cert: bytes | None
    key: bytes | None
    expires: float | None


@dataclass(frozen=True)
class ExecPlugin:
    """One user's `exec` entry, checked; `run()` runs it once."""

    source: str  # "kubeconfig FILE: user 'NAME'"
    command: str
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    api_version: str
    install_hint: str
    cluster: Mapping[str, Any] | None  # spec.cluster, when provideClusterInfo

    def run(self) -> Credential:
        spec: dict[str, Any] = {"interactive": False}
        if self.cluster is not None:
            spec["cluster"] = dict(self.cluster)
        request = {"apiVersion": self.api_version, "kind": "ExecCredential", "spec": spec}
        env = {**os.environ, **dict(self.env), "KUBERNETES_EXEC_INFO": json.dumps(request)}
        pass_stderr = _is_terminal(sys.stderr)
        try:
            done = subprocess.run(
                [self.command, *self.args],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=None if pass_stderr else subprocess.PIPE,
                timeout=TIMEOUT_SECONDS,
                check=False,
            )
        except FileNotFoundError:
            hint = f" ({self.install_hint})" if self.install_hint else ""
            raise self.error(f"not found{hint}") from None
        except subprocess.TimeoutExpired:
            raise self.error(f"gave no answer within {TIMEOUT_SECONDS:.0f} s") from None
        except OSError as exc:
            raise self.error(f"cannot be run: {exc.strerror or exc}") from None
        if done.returncode != 0:
            said = _last_line(done.stderr)
            raise self.error(f"exited with status {done.returncode}{': ' if said else ''}{said}")
        return self.answer(done.stdout)

    def answer(self, stdout: bytes) -> Credential:
        """The credential the plugin's output holds."""
        if len(stdout) > MAX_OUTPUT:
            raise self.error(f"printed more than {MAX_OUTPUT >> 20} MiB")
        try:
            data = json.loads(stdout)
        except (ValueError, RecursionError):
            raise self.error("did not print an ExecCredential (not JSON)") from None
        if not isinstance(data, Mapping) or data.get("kind") != "ExecCredential":
            raise self.error("did not print an ExecCredential")
        if data.get("apiVersion") != self.api_version:
            raise self.error(
                f"answered with apiVersion {data.get('apiVersion')!r}, not {self.api_version}"
            )
        status = data.get("status")
        if not isinstance(status, Mapping):
            raise self.error("gave no status")
        token = _string(self, status, "token")
        cert = _string(self, status, "clientCertificateData")
        key = _string(self, status, "clientKeyData")
        if (cert is None) != (key is None):
            raise self.error("gave clientCertificateData and clientKeyData, not both")
        if token is None and cert is None:
            raise self.error("gave neither a token nor a client certificate and key")
        expires = _string(self, status, "expirationTimestamp")
        return Credential(
            token=token,
            cert=cert.encode() if cert is not None else None,
            key=key.encode() if key is not None else None,
            expires=None if expires is None else _timestamp(self, expires),
        )

    def error(self, what: str) -> KubernetesConfigError:
        return KubernetesConfigError(one_line(f"{self.source}: exec plugin {self.command}: {what}"))


def exec_plugin(
    entry: Any, source: str, command: str, cluster: Mapping[str, Any] | None
) -> ExecPlugin:
    """The checked `exec` entry; `command` is the entry's, a relative path already resolved
    from its file's folder; `cluster` the request's spec.cluster (used if provideClusterInfo)."""

    def problem(what: str) -> KubernetesConfigError:
        return KubernetesConfigError(f"{source}: exec: {what}")

    if not isinstance(entry, Mapping):
        raise problem("not a mapping")
    version = entry.get("apiVersion")
    if version == f"{GROUP}/v1alpha1":
        raise problem(f"apiVersion {version} is no longer supported (use {VERSIONS[0]})")
    if version not in VERSIONS:
        raise problem(f"apiVersion {version!r} is not one of {', '.join(VERSIONS)}")
    if not command:
        raise problem("command is not set")
    args = entry.get("args") or []
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise problem("args is not a list of strings")
    env = []
    for item in entry.get("env") or []:
        name, value = (item.get("name"), item.get("value")) if isinstance(item, Mapping) else (0, 0)
        if not isinstance(name, str) or not name or not isinstance(value, str):
            raise problem("env is not a list of {name, value} strings")
        env.append((name, value))
    mode = entry.get("interactiveMode")
    if mode is None and version == VERSIONS[0]:
        raise problem(f"interactiveMode is required by {version} (Never or IfAvailable)")
    if mode is not None and mode not in MODES:
        raise problem(f"interactiveMode {mode!r} is not one of {', '.join(MODES)}")
    if mode == "Always":
        raise problem(
            "interactiveMode Always needs standard input, which kube-gpu-exporter never gives "
            "a plugin (use IfAvailable, or log in with the plugin first)"
        )
    hint = entry.get("installHint")
    return ExecPlugin(
        source=source,
        command=command,
        args=tuple(args),
        env=tuple(env),
        api_version=version,
        install_hint=hint if isinstance(hint, str) else "",
        cluster=cluster if entry.get("provideClusterInfo") is True else None,
    )


def cluster_info(cluster: Mapping[str, Any], server: str, ca_data: bytes | None) -> dict[str, Any]:
    """spec.cluster as client-go writes it: the connection's details, the CA as base64 (from
    its file or its data) and the cluster's `client.authentication.k8s.io/exec` extension."""
    info: dict[str, Any] = {"server": server}
    for key in ("tls-server-name", "insecure-skip-tls-verify", "proxy-url", "disable-compression"):
        if cluster.get(key):
            info[key] = cluster[key]
    if ca_data:
        info["certificate-authority-data"] = base64.b64encode(ca_data).decode("ascii")
    extensions = cluster.get("extensions")
    for extension in extensions if isinstance(extensions, list) else []:
        if isinstance(extension, Mapping) and extension.get("name") == EXTENSION:
            info["config"] = extension.get("extension")
            break
    return info


def _string(plugin: ExecPlugin, status: Mapping[str, Any], key: str) -> str | None:
    value = status.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise plugin.error(f"status.{key} is not a string")
    return value


def _timestamp(plugin: ExecPlugin, text: str) -> float:
    """An RFC 3339 time (`2024-05-01T10:00:00Z`, with fractions or an offset) → Unix time."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise plugin.error(f"status.expirationTimestamp {text!r} is not an RFC 3339 time") from None
    if moment.tzinfo is None:
        raise plugin.error(f"status.expirationTimestamp {text!r} has no time zone")
    return moment.timestamp()


def _last_line(stderr: bytes | None) -> str:
    lines = (stderr or b"")[-4096:].decode("utf-8", errors="replace").strip().splitlines()
    return lines[-1].strip() if lines else ""


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
