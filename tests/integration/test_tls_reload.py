"""A certificate rotated in place is served from the next connection on, as exporter-toolkit
does; a broken rotation keeps the old one. Before, the files were read once at start and the
old certificate was served until a restart (cert-manager rotates Secrets in place).

The web config names `tls/server.crt` and `tls/server.key`, where `tls` is a symlink to a
dated folder, swapped atomically as the kubelet does for a Secret volume.
"""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
from pathlib import Path

from abuse_clients import run_tls_exporter

from support import wait_until

DEMO = str(Path(__file__).parents[2] / "exporter" / "simulated" / "scenarios" / "demo.yaml")


def make_pair(folder: Path, name: str) -> Path:
    folder.mkdir(parents=True)
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-days", "2", "-subj", f"/CN={name}", "-addext",
         "subjectAltName=IP:127.0.0.1", "-keyout", "server.key", "-out", "server.crt"],
        cwd=folder, check=True, capture_output=True,
    )  # fmt: skip
    return folder


def swap(link: Path, target: Path) -> None:
    """Point `link` at `target` in one rename, as the kubelet's atomic writer does."""
    staged = link.with_name(link.name + ".new")
    staged.symlink_to(target.name)
    os.replace(staged, link)


def served_name(port: int) -> str:
    """The common name of the certificate a new connection is served."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    text = subprocess.run(
        ["openssl", "x509", "-inform", "DER", "-noout", "-subject"],
        input=der, capture_output=True, check=True,
    ).stdout.decode()  # fmt: skip
    return text.strip().rpartition("CN")[2].lstrip(" =")


def test_a_certificate_rotated_in_place_is_served_on_new_connections(tmp_path: Path) -> None:
    first = make_pair(tmp_path / "2026-01", "first")
    second = make_pair(tmp_path / "2026-02", "second")
    broken = tmp_path / "2026-03"
    broken.mkdir()
    (broken / "server.crt").write_text("not a certificate\n")
    (broken / "server.key").write_text("not a key\n")
    link = tmp_path / "tls"
    link.symlink_to(first.name)
    config = tmp_path / "web.yml"
    config.write_text(
        "tls_server_config:\n  cert_file: tls/server.crt\n  key_file: tls/server.key\n"
    )
    client = ssl.create_default_context(cafile=str(first / "server.crt"))
    with run_tls_exporter(
        ["--simulate", DEMO, f"--web.config.file={config}"], tmp_path, client
    ) as exporter:
        assert served_name(exporter.port) == "first"
        swap(link, second)
        wait_until(lambda: served_name(exporter.port) == "second", what="the rotated certificate")
        swap(link, broken)
        names: set[str] = set()

        def refused() -> bool:  # new connections, until the broken files have been tried
            names.add(served_name(exporter.port))
            return "cannot be used" in exporter.log()

        wait_until(refused, what="the broken rotation to be refused")
        assert names == {"second"} and served_name(exporter.port) == "second"
        swap(link, first)
        wait_until(lambda: served_name(exporter.port) == "first", what="a good one again")
