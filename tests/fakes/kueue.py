"""The real Kueue in a test control plane: its controller manager built from its Go module
(`make kueue-bin`), its CRDs and its admission and conversion webhooks as the module ships
them, served by that process and reached by the API server at a URL.

How a cluster runs Kueue, and what stands in for each piece here:

- Kueue's CRDs (`config/components/crd/bases`, copied into the bin cache at build time) are
  created as they are, except that the five Kueue converts between v1beta1 and v1beta2
  (its `config/components/crd/patches/webhook_in_*.yaml`) get the conversion webhook at
  `https://127.0.0.1:<port>/convert`;
- its webhook configurations (`config/components/webhook/manifests.yaml`) name a Service in
  `kueue-system`; with no Service network here each one's `clientConfig` becomes a URL on
  loopback with our CA's bundle. Only the webhooks of the integrations a test turns on (Kueue's
  own kinds, and `batch` for `batch/job`) are registered: a webhook with `failurePolicy: Fail`
  for kinds Kueue does not watch would only make their creation depend on it;
- its certificate management is off (`internalCertManagement.enable: false`): a CA and a
  serving certificate for 127.0.0.1 made with openssl serve the webhooks (`webhook.certDir`).
  With its own management off Kueue also reads the metrics server's certificate from the fixed
  path `/etc/kueue/metrics/certs`, which is not ours to write: Kueue runs in a mount namespace
  of its own whose `/etc` is a read-only overlay of the machine's with that folder added;
- its visibility API server (`VisibilityOnDemand`, pending workloads' positions) reads its
  certificate from another fixed path, `/visibility/tls.crt`, at the root, where no overlay of
  an existing folder reaches. Off by default; with `visibility=True` Kueue runs chrooted in a
  root of its own (a tmpfs holding the machine's top-level folders bound in, and
  `/visibility` with our certificate), the server listens on a loopback port, and the API
  server aggregates it: an APIService per version naming a Service of type ExternalName
  `localhost` (no Service network here; the aggregator dials an ExternalName's host as it
  is), which needs the plane started with `front_proxy_args` (the front proxy's CA and
  client certificate, by which the aggregated server authenticates the API server);
- it runs as one process on the admin kubeconfig, without leader election, its health probe
  and metrics servers on free loopback ports.

Start it with `run_kueue(plane, workdir)` (a context manager) once the plane is ready; the
plane needs the `job` controller (pods for admitted Jobs) and the scheduler to place them."""

from __future__ import annotations

import base64
import ssl
import subprocess
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from control_plane import ControlPlane, _start, _wait_ready
from operator_crds import _CrdLoader
from real_binaries import real_components, require

from support import free_port, wait_until

NAMESPACE = "kueue-system"
# the CRDs whose kustomization (config/components/crd/kustomization.yaml) enables conversion
CONVERTED = ("localqueues", "clusterqueues", "cohorts", "workloads", "multikueueclusters")
# an integration -> the API groups of the webhooks it needs besides Kueue's own
INTEGRATION_GROUPS = {"batch/job": ("batch",), "pod": ("",)}
# Kueue's webhook configurations here: named apart from anything else a test registers
WEBHOOK_PREFIX = "kueue-"
# openssl's extensions of the webhooks' serving certificate (the last name: the visibility
# Service's, which the API server's aggregator verifies) and of the front proxy's client one
SERVING = (
    "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:visibility-server.kueue-system.svc\n"
    "extendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
)
CLIENT = "extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature\n"


@dataclass
class Kueue:
    """A running Kueue: where its servers listen and its log."""

    version: str
    log: Path
    webhook_url: str
    health_url: str
    metrics_port: int
    ca_bundle: bytes
    crds: list[str] = field(default_factory=list)
    visibility_port: int | None = None  # the visibility API server's, when it runs

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def metrics(self, token: str) -> str:
        """Kueue's own /metrics (`kueue_*`), served over TLS with our certificate to callers
        the API server authenticates and authorizes (TokenReview, SubjectAccessReview)."""
        context = ssl.create_default_context(cadata=self.ca_bundle.decode())
        request = urllib.request.Request(f"https://127.0.0.1:{self.metrics_port}/metrics")
        request.add_header("Authorization", f"Bearer {token}")
        with urllib.request.urlopen(request, context=context, timeout=30) as response:
            return str(response.read().decode())


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _ca(folder: Path, stem: str, subject: str) -> tuple[Path, Path]:
    """A self-signed CA's key and certificate, `<stem>.key` and `<stem>.crt` in `folder`."""
    key, crt = folder / f"{stem}.key", folder / f"{stem}.crt"
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(key))
    _openssl(
        "req", "-x509", "-new", "-key", str(key), "-out", str(crt), "-days", "2",
        "-subj", subject,
    )  # fmt: skip
    return key, crt


def _issue(
    folder: Path, stem: str, common_name: str, ca: tuple[Path, Path], extensions: str
) -> tuple[Path, Path]:
    """A key and a certificate for `common_name` that `ca` (_ca's) signs with `extensions`
    (openssl's extfile lines), `<stem>.key` and `<stem>.crt` in `folder`."""
    key, csr, crt = folder / f"{stem}.key", folder / f"{stem}.csr", folder / f"{stem}.crt"
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(key))
    _openssl("req", "-new", "-key", str(key), "-out", str(csr), "-subj", f"/CN={common_name}")
    ext = folder / f"{stem}.ext"
    ext.write_text(extensions)
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(ca[1]), "-CAkey", str(ca[0]),
        "-CAcreateserial", "-out", str(crt), "-days", "2", "-extfile", str(ext),
    )  # fmt: skip
    key.chmod(0o600)
    return key, crt


def make_certificates(folder: Path) -> Path:
    """A CA, and a serving certificate it signs for IP 127.0.0.1 and localhost (and the
    visibility Service's name), in `folder`
    as controller-runtime's webhook server reads them (tls.crt, tls.key); returns the CA."""
    folder.mkdir(parents=True, exist_ok=True)
    ca = _ca(folder, "ca", "/CN=kube-gpu-exporter test Kueue CA")
    _issue(folder, "tls", "127.0.0.1", ca, SERVING)
    return ca[1]


def front_proxy_args(folder: Path) -> list[str]:
    """kube-apiserver's flags for API aggregation: a front-proxy CA and the client
    certificate it signs, which the API server presents to aggregated servers (they trust
    the CA through the `extension-apiserver-authentication` ConfigMap)."""
    folder.mkdir(parents=True, exist_ok=True)
    ca = _ca(folder, "front-proxy-ca", "/CN=kube-gpu-exporter test front-proxy CA")
    key, crt = _issue(folder, "front-proxy", "front-proxy-client", ca, CLIENT)
    return [
        f"--requestheader-client-ca-file={ca[1]}",
        "--requestheader-allowed-names=front-proxy-client",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={crt}",
        f"--proxy-client-key-file={key}",
    ]


def _files() -> Path:
    """The bin cache folder of the built Kueue: the binary, crds/ and webhook/."""
    return require("kueue").parent


def crds(webhook_url: str, ca_bundle: bytes) -> list[dict[str, Any]]:
    """Kueue's CRDs from its module, the converted ones pointed at the conversion webhook."""
    out = []
    for path in sorted((_files() / "crds").glob("*.yaml")):
        crd = yaml.load(path.read_text(), _CrdLoader)
        if crd["spec"]["names"]["plural"] in CONVERTED:
            crd["spec"]["conversion"] = {
                "strategy": "Webhook",
                "webhook": {
                    "clientConfig": {
                        "url": f"{webhook_url}/convert",
                        "caBundle": base64.b64encode(ca_bundle).decode(),
                    },
                    "conversionReviewVersions": ["v1"],
                },
            }
        out.append(crd)
    return out


def webhook_configurations(
    webhook_url: str, ca_bundle: bytes, integrations: Sequence[str]
) -> list[dict[str, Any]]:
    """Kueue's mutating and validating webhook configurations, each webhook at its URL, only
    those for Kueue's own kinds and for the `integrations`' API groups."""
    groups = {"kueue.x-k8s.io"}
    for integration in integrations:
        groups.update(INTEGRATION_GROUPS[integration])
    manifests = (_files() / "webhook" / "manifests.yaml").read_text()
    out = []
    for config in yaml.safe_load_all(manifests):
        if not config:
            continue
        config["metadata"]["name"] = WEBHOOK_PREFIX + config["metadata"]["name"]
        kept = []
        for webhook in config["webhooks"]:
            if not {g for rule in webhook["rules"] for g in rule["apiGroups"]} <= groups:
                continue
            path = webhook["clientConfig"]["service"]["path"]
            webhook["clientConfig"] = {
                "url": webhook_url + path,
                "caBundle": base64.b64encode(ca_bundle).decode(),
            }
            kept.append(webhook)
        config["webhooks"] = kept
        out.append(config)
    return out


def _configuration(
    certs: Path,
    webhook_port: int,
    health_port: int,
    metrics_port: int,
    frameworks: Sequence[str],
    visibility_port: int | None = None,
) -> dict[str, Any]:
    config = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(certs)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "integrations": {"frameworks": list(frameworks)},
    }
    if visibility_port is not None:
        config["visibilityServer"] = {"bindAddress": "127.0.0.1", "bindPort": visibility_port}
    return config


def install_v1beta1_only(
    plane: ControlPlane, plurals: Sequence[str] = ("workloads", "localqueues")
) -> None:
    """Kueue's CRDs of `plurals` (Workloads and LocalQueues unless told) as a server with an
    older Kueue (before v1beta2) serves them: v1beta1 only, stored as such, no conversion
    (and no Kueue running)."""
    for crd in crds("https://127.0.0.1:1", b""):
        if crd["spec"]["names"]["plural"] not in plurals:
            continue
        crd["spec"].pop("conversion", None)
        crd["spec"]["versions"] = [
            dict(v, served=True, storage=True)
            for v in crd["spec"]["versions"]
            if v["name"] == "v1beta1"
        ]
        plane.ok("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
        wait_until(
            lambda name=crd["metadata"]["name"]: _established(plane, name),
            timeout=60,
            what=f"{crd['metadata']['name']} established",
        )


def _established(plane: ControlPlane, name: str) -> bool:
    path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
    conditions = plane.ok("GET", path).get("status", {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


@contextmanager
def run_kueue(
    plane: ControlPlane,
    workdir: Path,
    *,
    integrations: Sequence[str] = ("batch/job",),
    timeout: float = 180,
    visibility: bool = False,
) -> Iterator[Kueue]:
    """Kueue's CRDs installed, Kueue running, and its webhooks registered when this yields;
    with `visibility`, its visibility API too, aggregated by the API server (see the
    module's doc: the plane must have been started with `front_proxy_args`).

    The CRDs come first (Kueue's informers list them at start-up), the webhooks last: they
    fail closed, and Kueue must be answering before the API server sends it anything."""
    binary = require("kueue")
    version = real_components.PINS["kueue"].version
    workdir.mkdir(parents=True, exist_ok=True)
    certs = workdir / "certs"
    ca = make_certificates(certs)
    ca_bundle = ca.read_bytes()
    # /etc as Kueue sees it: the machine's, plus kueue/metrics/certs (see the module's doc)
    etc_top = workdir / "etc-overlay"
    metrics_certs = etc_top / "kueue" / "metrics" / "certs"
    metrics_certs.mkdir(parents=True)
    for name in ("tls.crt", "tls.key"):
        (metrics_certs / name).write_bytes((certs / name).read_bytes())

    webhook_port, health_port = free_port(), free_port()
    metrics_port = free_port()
    visibility_port = free_port() if visibility else None
    webhook_url = f"https://127.0.0.1:{webhook_port}"
    config = workdir / "kueue-config.yaml"
    config.write_text(
        yaml.safe_dump(
            _configuration(
                certs, webhook_port, health_port, metrics_port, integrations, visibility_port
            )
        )
    )

    installed = crds(webhook_url, ca_bundle)
    for crd in installed:
        plane.ok("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    names = [crd["metadata"]["name"] for crd in installed]
    wait_until(
        lambda: all(_established(plane, n) for n in names),
        timeout=60,
        what="Kueue's CRDs established",
    )
    plane.ok("POST", "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})

    command = " ".join(
        [
            str(binary),
            f"--config={config}",
            f"--kubeconfig={plane.kubeconfig}",
            f"--feature-gates=VisibilityOnDemand={str(visibility).lower()}",
            "--zap-log-level=2",
        ]
    )
    script = f"mount -t overlay overlay -o lowerdir={etc_top}:/etc /etc && "
    if visibility:
        script += _own_root(workdir / "root", certs) + " && exec chroot " + str(workdir / "root")
    else:
        script += "exec"
    script += " " + command
    with ExitStack() as stack:
        proc, log = _start(
            "kueue",
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
            workdir,
            stack,
        )
        kueue = Kueue(
            version,
            log,
            webhook_url,
            f"http://127.0.0.1:{health_port}",
            metrics_port,
            ca_bundle,
            names,
            visibility_port,
        )

        def ready() -> bool:
            with urllib.request.urlopen(f"{kueue.health_url}/readyz", timeout=5) as response:
                return response.status == 200

        _wait_ready("kueue", proc, log, ready, timeout)

        for webhook_config in webhook_configurations(webhook_url, ca_bundle, integrations):
            kind = webhook_config["kind"].lower() + "s"
            plane.ok("POST", f"/apis/admissionregistration.k8s.io/v1/{kind}", webhook_config)

        def cleanup() -> None:  # so that the plane outlives Kueue without failing closed
            for kind in ("mutating", "validating"):
                plane.request(
                    "DELETE",
                    f"/apis/admissionregistration.k8s.io/v1/{kind}webhookconfigurations/"
                    f"{WEBHOOK_PREFIX}{kind}-webhook-configuration",
                )

        stack.callback(cleanup)  # runs before the process is stopped (last in, first out)
        if visibility_port is not None:
            _aggregate(plane, visibility_port, ca_bundle)
        yield kueue


def _own_root(root: Path, certs: Path) -> str:
    """The shell commands that make `root` a root of Kueue's own: a tmpfs with each of the
    machine's top-level entries in it (folders bound recursively, so /etc's overlay and
    every mount below come along; links copied), and `/visibility` with our certificate."""
    return (
        f"mkdir -p {root} && mount -t tmpfs tmpfs {root} && "
        "for entry in /*; do name=${entry#/}; "
        f'if [ -L "$entry" ]; then cp -P "$entry" "{root}/$name"; '
        f'elif [ -d "$entry" ]; then mkdir "{root}/$name" && '
        f'mount --rbind "$entry" "{root}/$name"; '
        f'else touch "{root}/$name" && mount --bind "$entry" "{root}/$name"; fi; done && '
        f"mkdir {root}/visibility && cp {certs}/tls.crt {certs}/tls.key {root}/visibility/"
    )


def _aggregate(plane: ControlPlane, port: int, ca_bundle: bytes) -> None:
    """Kueue's visibility API aggregated by the API server (its APIService manifests, at a
    Service of type ExternalName `localhost` on `port`), once available."""
    plane.ok(
        "POST",
        f"/api/v1/namespaces/{NAMESPACE}/services",
        {
            "metadata": {"name": "visibility-server"},
            "spec": {
                "type": "ExternalName",
                "externalName": "localhost",
                "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
            },
        },
    )
    versions = ("v1beta1", "v1beta2")
    for version in versions:
        plane.ok(
            "POST",
            "/apis/apiregistration.k8s.io/v1/apiservices",
            {
                "metadata": {"name": f"{version}.visibility.kueue.x-k8s.io"},
                "spec": {
                    "group": "visibility.kueue.x-k8s.io",
                    "version": version,
                    "groupPriorityMinimum": 100,
                    "versionPriority": 100,
                    "caBundle": base64.b64encode(ca_bundle).decode(),
                    "service": {"name": "visibility-server", "namespace": NAMESPACE, "port": port},
                },
            },
        )

    def available() -> bool:
        for version in versions:
            path = (
                f"/apis/apiregistration.k8s.io/v1/apiservices/{version}.visibility.kueue.x-k8s.io"
            )
            conditions = plane.ok("GET", path).get("status", {}).get("conditions") or []
            if not any(c["type"] == "Available" and c["status"] == "True" for c in conditions):
                return False
        return True

    wait_until(available, timeout=120, what="Kueue's visibility APIServices Available")
