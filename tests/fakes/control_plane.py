"""A real Kubernetes control plane on loopback ports: etcd, kube-apiserver, and on request
kube-controller-manager and kube-scheduler, all built by `make k8s-bin` from their Go modules.

What `demo/kube_api` cannot prove, this can: the API server's own list/watch semantics, RBAC
and ServiceAccount tokens, and the scheduler's own verdicts (a pod bound, or left Pending with a
`FailedScheduling` event). It is the same setup as controller-runtime's envtest, plus RBAC:

- etcd on a temporary data dir, fsync off (a test cluster, thrown away after the test);
- kube-apiserver with a self-signed serving certificate (`--cert-dir`), `--authorization-mode
  =RBAC`, a static admin token (`--token-auth-file`, group `system:masters`) and a
  ServiceAccount signing key made with openssl, so the TokenRequest API mints real tokens whose
  permissions are exactly what RBAC grants;
- Node objects are kept as created: the `TaintNodesByCondition` admission plugin, which would
  taint every new Node `not-ready` until a node-lifecycle controller saw a kubelet's heartbeat,
  is off (no kubelet runs here); so is the `ServiceAccount` plugin unless the controller
  manager's `serviceaccount` controller runs to create each namespace's `default` account;
- the scheduler and the controller manager without leader election, on the admin kubeconfig.

Start it with `run_control_plane(tmp_dir, …)` (a context manager); stop is SIGTERM in reverse
order, then a wait. Missing binaries fail the test with the `make k8s-bin` hint."""

from __future__ import annotations

import json
import secrets
import signal
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from real_binaries import require

from kube_gpu_exporter.demo.children import ended_with_parent
from support import free_port, stop_process, wait_until

ADMIN_USER = "kge-admin"
SERVICE_CIDR = "10.0.0.0/24"
DEFAULT_CONTROLLERS = (
    "serviceaccount",  # the `default` ServiceAccount in each namespace
    "resourcequota",  # quota status, and the admission check's usage
    "job",
    "replicaset",
    "deployment",
    "daemonset",
    "namespace",  # namespace deletion
    "garbagecollector",  # ownerReference cascades
)


@dataclass
class ControlPlane:
    """A running control plane: its URL, admin credential and logs."""

    url: str
    token: str
    ca_file: Path
    kubeconfig: Path
    workdir: Path
    logs: dict[str, Path] = field(default_factory=dict)
    etcd_url: str = ""
    # set by run_control_plane: what restart_apiserver stops and starts
    _apiservers: Any = None

    def restart_apiserver(self, while_down: Callable[[], None] | None = None) -> None:
        """Stop kube-apiserver (SIGTERM, as a rolling upgrade does), call `while_down()`,
        start it again with the same flags on the same port over the same etcd, and wait
        until it is ready: every open watch ends, and clients come back to the same address."""
        assert self._apiservers is not None, "not started by run_control_plane"
        self._apiservers.restart(while_down)

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        token: str | None = None,
        content_type: str = "application/json",
    ) -> tuple[int, Any]:
        """One API call as the admin (or with `token`): (HTTP status, decoded JSON body).
        Errors are returned, not raised: a 403 is what RBAC tests look for."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"{self.url}{path}", data=data, method=method)
        req.add_header("Authorization", f"Bearer {token or self.token}")
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, context=self.ssl_context(), timeout=30) as resp:
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as error:
            status, raw = error.code, error.read()
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            return status, raw.decode(errors="replace")

    def ok(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
        """`request` that fails the test unless the API server said 2xx."""
        status, answer = self.request(method, path, body, **kwargs)
        assert 200 <= status < 300, f"{method} {path} -> {status}: {answer}"
        return answer

    def log_tail(self, component: str, lines: int = 40) -> str:
        text = self.logs[component].read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])


class _ApiServers:
    """The running kube-apiserver of a plane: started, or restarted in place."""

    def __init__(
        self,
        plane: ControlPlane,
        argv: Callable[[int], list[str]],
        workdir: Path,
        stack: ExitStack,
        timeout: float,
    ) -> None:
        self._plane = plane
        self._argv = argv
        self._workdir = workdir
        self._stack = stack
        self._timeout = timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self._port = 0

    def start(self, port: int, name: str) -> subprocess.Popen[bytes]:
        proc, log = _start(name, self._argv(port), self._workdir, self._stack)
        self._plane.logs[name] = log
        probe = replace(self._plane, url=f"https://127.0.0.1:{port}")

        def ready() -> bool:
            if not probe.ca_file.is_file():
                return False
            return probe.request("GET", "/readyz")[0] == 200

        _wait_ready(name, proc, log, ready, self._timeout)
        self._proc, self._port = proc, port
        self._plane.url = probe.url
        return proc

    def _stop(self, proc: subprocess.Popen[bytes] | None) -> None:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)

    def restart(self, while_down: Callable[[], None] | None) -> None:
        self._stop(self._proc)
        if while_down is not None:
            while_down()
        self.start(self._port, "kube-apiserver")


def _start(
    name: str, argv: Sequence[str], workdir: Path, stack: ExitStack
) -> tuple[subprocess.Popen[bytes], Path]:
    """Start one component with its output in `workdir/<name>.log` (appended to, when it is
    started again); stopped on stack exit."""
    log_path = workdir / f"{name}.log"
    log = log_path.open("ab")
    # Ended with the test process even when it is killed (a CI time-out, ^C twice): an
    # orphaned etcd and API server would keep their ports and a few hundred MiB.
    proc = subprocess.Popen(
        ended_with_parent(argv),
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        cwd=workdir,
    )
    log.close()

    def stop() -> None:
        stop_process(proc, 20)

    stack.callback(stop)
    return proc, log_path


def _wait_ready(
    what: str, proc: subprocess.Popen[bytes], log: Path, check: Any, timeout: float
) -> None:
    def probe() -> bool:
        if proc.poll() is not None:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
            pytest.fail(f"{what} exited with {proc.returncode}:\n{tail}", pytrace=False)
        try:
            return bool(check())
        except OSError:
            return False

    wait_until(probe, timeout=timeout, what=f"{what} ready (log: {log})")


def _service_account_key(path: Path) -> None:
    """An ECDSA P-256 key: the API server signs ServiceAccount tokens with it (ES256)."""
    subprocess.run(
        ["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(path)],
        check=True,
        capture_output=True,
    )


def _write_kubeconfig(path: Path, url: str, ca_file: Path, token: str) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "test", "cluster": {"server": url, "certificate-authority": str(ca_file)}}
        ],
        "users": [{"name": ADMIN_USER, "user": {"token": token}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": ADMIN_USER}}],
        "current-context": "test",
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)


@contextmanager
def run_control_plane(
    workdir: Path,
    *,
    scheduler: bool = False,
    controllers: Sequence[str] = (),
    extra_apiserver_args: Sequence[str] = (),
    extra_scheduler_args: Sequence[str] = (),
    extra_etcd_args: Sequence[str] = (),
    etcd_data: Path | None = None,
    timeout: float = 120,
) -> Iterator[ControlPlane]:
    """etcd + kube-apiserver (+ kube-scheduler when `scheduler`, + kube-controller-manager
    running `controllers` when any are named), ready when this yields.

    `etcd_data` is etcd's data dir (default `workdir/etcd`, new): one that an earlier plane
    left holds its objects, and this plane serves them with its own certificates and token
    (bench/fleet_cache.py starts the bench's 150,000 pods so in seconds, not minutes).

    The readiness timeout is generous for a loaded two-core machine: the API server takes
    10-30 s to install its APIs and bootstrap RBAC's default roles."""
    etcd_bin = require("etcd")
    apiserver_bin = require("kube-apiserver")
    scheduler_bin = require("kube-scheduler") if scheduler else None
    kcm_bin = require("kube-controller-manager") if controllers else None

    workdir.mkdir(parents=True, exist_ok=True)
    certs = workdir / "certs"
    certs.mkdir(exist_ok=True)
    sa_key = workdir / "sa.key"
    _service_account_key(sa_key)
    token = secrets.token_hex(24)
    tokens = workdir / "tokens.csv"
    tokens.write_text(f'{token},{ADMIN_USER},{ADMIN_USER},"system:masters"\n')
    tokens.chmod(0o600)

    etcd_port, peer_port, api_port = free_port(), free_port(), free_port()
    etcd_url = f"http://127.0.0.1:{etcd_port}"
    peer_url = f"http://127.0.0.1:{peer_port}"
    url = f"https://127.0.0.1:{api_port}"
    ca_file = certs / "apiserver.crt"  # written by the API server: the serving cert + its CA
    kubeconfig = workdir / "admin.kubeconfig"

    disabled = ["TaintNodesByCondition"]
    if "serviceaccount" not in controllers:
        disabled.append("ServiceAccount")

    with ExitStack() as stack:
        plane = ControlPlane(url, token, ca_file, kubeconfig, workdir, etcd_url=etcd_url)
        etcd, plane.logs["etcd"] = _start(
            "etcd",
            [
                str(etcd_bin),
                "--name=test",
                f"--data-dir={etcd_data or workdir / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=test={peer_url}",
                "--unsafe-no-fsync",
                "--log-level=warn",
                *extra_etcd_args,
            ],
            workdir,
            stack,
        )

        def etcd_healthy() -> bool:
            with urllib.request.urlopen(f"{etcd_url}/health", timeout=5) as response:
                return bool(json.load(response).get("health") == "true")

        _wait_ready("etcd", etcd, plane.logs["etcd"], etcd_healthy, timeout)

        def apiserver_argv(port: int) -> list[str]:
            return [
                str(apiserver_bin),
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={certs}",  # kept: a restart serves the same certificate
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={sa_key}",
                f"--service-account-signing-key-file={sa_key}",
                "--authorization-mode=RBAC",
                f"--token-auth-file={tokens}",
                f"--disable-admission-plugins={','.join(disabled)}",
                # no kubelet or kube-proxy reads the `kubernetes` Service's endpoints, and a
                # loopback endpoint is refused by validation: nothing to reconcile
                "--endpoint-reconciler-type=none",
                "--allow-privileged=true",
                *extra_apiserver_args,
            ]

        apiservers = _ApiServers(plane, apiserver_argv, workdir, stack, timeout)
        apiservers.start(api_port, "kube-apiserver")
        plane._apiservers = apiservers
        _write_kubeconfig(kubeconfig, plane.url, ca_file, token)

        if kcm_bin is not None:
            kcm, plane.logs["kube-controller-manager"] = _start(
                "kube-controller-manager",
                [
                    str(kcm_bin),
                    f"--kubeconfig={kubeconfig}",
                    "--leader-elect=false",
                    f"--controllers={','.join(controllers)}",
                    "--use-service-account-credentials=false",
                    f"--service-account-private-key-file={sa_key}",
                    f"--root-ca-file={ca_file}",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={free_port()}",
                ],
                workdir,
                stack,
            )
            if "serviceaccount" in controllers:
                # pods are refused until their namespace's `default` account exists
                _wait_ready(
                    "kube-controller-manager",
                    kcm,
                    plane.logs["kube-controller-manager"],
                    lambda: (
                        plane.request("GET", "/api/v1/namespaces/default/serviceaccounts/default")[
                            0
                        ]
                        == 200
                    ),
                    timeout,
                )
        if scheduler_bin is not None:
            _start(
                "kube-scheduler",
                [
                    str(scheduler_bin),
                    f"--kubeconfig={kubeconfig}",
                    "--leader-elect=false",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={free_port()}",
                    *extra_scheduler_args,
                ],
                workdir,
                stack,
            )
            plane.logs["kube-scheduler"] = workdir / "kube-scheduler.log"
        yield plane
