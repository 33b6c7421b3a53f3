"""`--web.probe-listen-address`: the kubelet's probes on a socket of their own, plain HTTP
without auth. Where the web config requires client certificates, the kubelet (which presents
none) could not probe the TLS port at all; and a crowd reconnecting to the scrape port fills
its accept queue, whose SYNs the kernel drops, the probes' among them. The probe port has its
own queue and answers /healthz and /readyz only.
"""

from __future__ import annotations

import socket
import ssl
import subprocess
from pathlib import Path

from abuse_clients import run_tls_exporter
from inprocess_cli import assert_one_line
from raw_http import Reader, connect, request

from support import exporter_command, free_port, http_get, run_exporter

DEMO = str(Path(__file__).parents[2] / "exporter" / "simulated" / "scenarios" / "demo.yaml")


def test_probes_are_answered_in_plain_http_where_the_scrape_port_requires_client_certificates(
    tmp_path: Path, certificate: tuple[Path, Path]
) -> None:
    cert, key = certificate
    config = tmp_path / "web.yml"
    config.write_text(
        f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
        f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {cert}\n"
    )
    client = ssl.create_default_context(cafile=str(cert))
    client.load_cert_chain(cert, key)  # the scraper's certificate (self-signed, trusted)
    probe_port = free_port()
    args = ["--simulate", DEMO, f"--web.config.file={config}"]
    args.append(f"--web.probe-listen-address=127.0.0.1:{probe_port}")
    with run_tls_exporter(args, tmp_path, client) as exporter:
        kubelet = ssl.create_default_context(cafile=str(cert))  # no client certificate
        with socket.create_connection(("127.0.0.1", exporter.port), timeout=5) as raw:
            try:
                with kubelet.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                    tls.sendall(request("GET", "/healthz"))
                    refused = tls.recv(64) == b""
            except (ssl.SSLError, ConnectionError):
                refused = True
        assert refused, "the scrape port answered a client without a certificate"
        for path, status in (("/healthz", 200), ("/readyz", 200), ("/metrics", 404)):
            assert http_get(f"http://127.0.0.1:{probe_port}{path}", {})[0] == status, path


def test_the_probe_port_keeps_its_own_connections(tmp_path: Path) -> None:
    """The scrape port's table full of one address's idle connections takes nothing from the
    probe port's."""
    probe_port = free_port()
    args = ["--simulate", DEMO, "--web.max-connections=2", "--web.read-header-timeout=10m"]
    args.append(f"--web.probe-listen-address=127.0.0.1:{probe_port}")
    with run_exporter(args, tmp_path) as exporter:
        held = [connect(exporter.port) for _ in range(8)]  # silent, each displacing another
        sock = connect(probe_port)
        sock.sendall(request("GET", "/healthz"))
        assert Reader(sock).response().status == 200
        for each in [*held, sock]:
            each.close()


def test_a_probe_address_in_use_is_one_line() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        command = exporter_command(
            "serve",
            f"--web.listen-address=127.0.0.1:{free_port()}",
            "--simulate",
            DEMO,
            f"--web.probe-listen-address=127.0.0.1:{port}",
        )
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert_one_line(done.returncode, done.stderr, f"cannot listen on 127.0.0.1:{port}")
