"""What the exporter says on the wire: HEAD, configured headers, Vary and Accept-Encoding
q-values, and plain HTTP on a TLS port, against the real process over bare sockets."""

from __future__ import annotations

import base64
import email.utils
import gzip
import socket
import ssl
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

import bcrypt
import pytest
from abuse_clients import https_status
from raw_http import Reader, closed_by_peer, connect, request

from kube_gpu_exporter.exporter.serve.server import accepts_gzip
from support import exporter_command, free_port, run_exporter, wait_until

DEMO = str(Path(__file__).parents[2] / "exporter" / "simulated" / "scenarios" / "demo.yaml")
HEADERS_CONFIG = """\
http_server_config:
  headers:
    X-Frame-Options: deny
    X-Content-Type-Options: nosniff
    Content-Security-Policy: "default-src 'none'"
"""
CONFIGURED = {
    "x-frame-options": "deny",
    "x-content-type-options": "nosniff",
    "content-security-policy": "default-src 'none'",
}
GO_PLAIN_HTTP_ON_TLS = (
    b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"
)


def test_head_answers_headers_only_and_keeps_the_connection_in_sync(tmp_path: Path) -> None:
    with run_exporter(["--simulate", DEMO], tmp_path) as exporter:
        sock = connect(exporter.port)
        reader = Reader(sock)
        for encoding in ("identity", "gzip"):
            headers = {"Accept-Encoding": encoding}
            # HEAD then GET, pipelined on one keep-alive connection.
            sock.sendall(request("HEAD", "/metrics", headers) + request("GET", "/metrics", headers))
            head = reader.response(head_request=True)
            get = reader.response()
            assert (head.status, get.status) == (200, 200)
            assert head.body == b""
            assert int(head.headers["content-length"]) == len(get.body) > 0
            assert head.headers["content-type"] == get.headers["content-type"]
            body = gzip.decompress(get.body) if encoding == "gzip" else get.body
            assert b"nvidia_gpu_info" in body
        # Still in sync: a third request on the same connection gets its own answer.
        sock.sendall(request("GET", "/healthz"))
        assert reader.response().body == b"ok\n"
        assert reader.buffer == b""


def test_configured_headers_are_on_every_response(tmp_path: Path) -> None:
    config = tmp_path / "web.yml"
    config.write_text(HEADERS_CONFIG)
    with run_exporter(["--simulate", DEMO, f"--web.config.file={config}"], tmp_path) as exporter:
        sock = connect(exporter.port)
        reader = Reader(sock)
        for method, path in [
            ("GET", "/metrics"),
            ("HEAD", "/metrics"),
            ("GET", "/healthz"),
            ("GET", "/readyz"),
            ("GET", "/"),
            ("GET", "/no-such-page"),
        ]:
            sock.sendall(request(method, path))
            response = reader.response(head_request=method == "HEAD")
            for name, value in CONFIGURED.items():
                assert response.headers.get(name) == value, (method, path, response.headers)


def test_vary_and_accept_encoding_q_values(tmp_path: Path) -> None:
    with run_exporter(["--simulate", DEMO], tmp_path) as exporter:
        sock = connect(exporter.port)
        reader = Reader(sock)
        for accept_encoding, gzipped in [
            ("gzip", True),
            ("gzip;q=0", False),
            ("gzip; q=0.0, identity", False),
            ("br, gzip;q=0.5", True),
            ("*", True),
            ("*;q=0", False),
            ("", False),
        ]:
            sock.sendall(request("GET", "/metrics", {"Accept-Encoding": accept_encoding}))
            response = reader.response()
            assert response.headers["vary"] == "Accept-Encoding"
            assert (response.headers.get("content-encoding") == "gzip") is gzipped, accept_encoding
            body = gzip.decompress(response.body) if gzipped else response.body
            assert body.startswith(b"# HELP")


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("gzip", True),
        ("GZIP", True),
        ("x-gzip", True),
        ("deflate, gzip;q=1.0", True),
        ("gzip;q=0", False),
        ("gzip;q=0.000", False),
        ("gzip;q=oops", False),
        ("*;q=0.1", True),
        ("*, gzip;q=0", False),
        ("gzip;q=0, *", False),
        ("identity", False),
        ("", False),
    ],
)
def test_accepts_gzip(header: str, expected: bool) -> None:
    assert accepts_gzip(header) is expected


def test_control_characters_in_a_configured_header_are_refused_at_start(tmp_path: Path) -> None:
    config = tmp_path / "web.yml"
    config.write_text(
        'http_server_config:\n  headers:\n    Content-Security-Policy: "a\\r\\nSet-Cookie: x=1"\n'
    )
    result = subprocess.run(
        exporter_command("serve", "--simulate", DEMO, f"--web.config.file={config}"),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "headers.Content-Security-Policy: control character" in lines[0]


def test_plain_http_on_the_tls_port_gets_go_s_400(
    tmp_path: Path, certificate: tuple[Path, Path]
) -> None:
    cert, key = certificate
    config = tmp_path / "web.yml"
    config.write_text(f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n")
    port = free_port()
    client = ssl.create_default_context(cafile=str(cert))
    command = exporter_command(
        "serve", f"--web.listen-address=127.0.0.1:{port}", "--simulate", DEMO,
        f"--web.config.file={config}",
    )  # fmt: skip
    log = tmp_path / "exporter.log"
    with log.open("w") as out, subprocess.Popen(command, stdout=out, stderr=out) as proc:
        try:
            wait_until(
                lambda: proc.poll() is not None or https_status(port, client) == 200,
                what="the exporter to answer over TLS",
            )
            assert proc.poll() is None, log.read_text()
            check_tls_port(port, client)
        finally:
            proc.terminate()
            proc.wait(timeout=15)
    assert "Traceback" not in log.read_text()


def check_tls_port(port: int, client: ssl.SSLContext) -> None:
    for plain in (request("GET", "/metrics"), request("HEAD", "/"), request("POST", "/")):
        sock = connect(port)
        sock.sendall(plain)
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
        assert answer == GO_PLAIN_HTTP_ON_TLS
    # TLS on the same port still works, keep-alive included.
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        client.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        reader = Reader(tls)
        for _ in range(2):
            tls.sendall(request("GET", "/healthz"))
            assert reader.response().body == b"ok\n"
    # A client that opens and says nothing is closed after the read-header timeout.
    assert closed_by_peer(connect(port), 60)


def test_a_request_with_a_body_is_answered_and_ends_the_connection(tmp_path: Path) -> None:
    """Requests are read one head at a time; a body (which nothing here reads) is passed on
    as it comes, and the connection ends after its answer rather than stalling on it."""
    with run_exporter(["--simulate", DEMO], tmp_path) as exporter:
        for body in (
            b"Content-Length: 5\r\n\r\nhello",
            b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        ):
            sock = connect(exporter.port)
            sock.sendall(b"POST /metrics HTTP/1.1\r\nHost: x\r\n" + body + request("GET", "/"))
            assert Reader(sock).response().status == 405
            assert closed_by_peer(sock, 30)
        # An empty body keeps the connection.
        sock = connect(exporter.port)
        reader = Reader(sock)
        empty = b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
        sock.sendall(empty + request("GET", "/healthz"))
        assert [reader.response().status, reader.response().status] == [405, 200]


def test_every_answer_has_the_configured_headers_and_no_server_header(tmp_path: Path) -> None:
    """The answers made below the app too: aiohttp's 400, the 431 for a head too large, the
    429 of an address over its connection share and the 503 of the overflow, which still
    answers /healthz. Before, those lacked the configured headers and aiohttp's named the
    Python and aiohttp versions in a Server header (as every answer did).

    A connection is refused only while every one it could displace has a request in the app:
    here two slow password checks (bcrypt at cost 15, about a second or more each) hold both."""
    good = bcrypt.hashpw(b"secret", bcrypt.gensalt(rounds=4)).decode()
    slow = bcrypt.hashpw(b"secret", bcrypt.gensalt(rounds=15)).decode()
    config = tmp_path / "web.yml"
    config.write_text(HEADERS_CONFIG + f"basic_auth_users:\n  fast: {good}\n  slow: {slow}\n")
    fast = {"Authorization": "Basic " + base64.b64encode(b"fast:secret").decode()}
    wrong = {"Authorization": "Basic " + base64.b64encode(b"slow:wrong").decode()}
    args = ["--simulate", DEMO, f"--web.config.file={config}", "--web.max-connections=2"]
    args += ["--web.max-connections-per-client=1", "--web.read-header-timeout=10m"]
    with run_exporter(args, tmp_path, wait_ready=False) as exporter:
        wait_until(lambda: exporter.get("/readyz")[0] == 200, what="the exporter")
        answers = {}
        for name, sent in [
            ("200", request("GET", "/metrics", fast)),
            ("404", request("GET", "/nowhere", fast)),
            ("400", b"GET /metrics HTTP/1.1\r\nBad header line\r\n\r\n"),
            ("431", b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 40_000 + b"\r\n\r\n"),
        ]:
            sock = connect(exporter.port)
            sock.sendall(sent)
            answers[name] = Reader(sock).response()
            sock.close()
        # Two addresses hold the two connections, each with a password check under way; a
        # third address meets the overflow.
        held = [connect(exporter.port, source=source) for source in ("127.0.0.2", "127.0.0.3")]
        for sock in held:
            sock.sendall(request("GET", "/metrics", wrong))
        time.sleep(0.3)  # both requests read (each check takes far longer)
        over_share = connect(exporter.port, source="127.0.0.2")
        over_share.sendall(request("GET", "/metrics"))
        answers["429"] = Reader(over_share).response()
        for path, name in (("/metrics", "503"), ("/healthz", "overflow probe")):
            sock = connect(exporter.port, source="127.0.0.4")
            sock.sendall(request("GET", path))
            answers[name] = Reader(sock).response()
            sock.close()
        for sock in held:
            assert Reader(sock).response().status == 401
    assert {name: answer.status for name, answer in answers.items()} == {
        "200": 200, "404": 404, "400": 400, "431": 431, "429": 429, "503": 503,
        "overflow probe": 200,
    }  # fmt: skip
    for name, answer in answers.items():
        assert "server" not in answer.headers, (name, answer.headers)
        for header, value in CONFIGURED.items():
            assert answer.headers.get(header) == value, (name, answer.headers)
    for name in ("429", "503"):
        assert answers[name].headers["retry-after"] == "1"


def test_a_request_head_of_30_kib_is_served(tmp_path: Path) -> None:
    """A long bearer token or cookie: up to 32 KiB of head (nginx's default) is served, where
    8 KiB was the limit before; beyond it, 431."""
    with run_exporter(["--simulate", DEMO], tmp_path) as exporter:
        sock = connect(exporter.port)
        reader = Reader(sock)
        sock.sendall(request("GET", "/healthz", {"Authorization": "Bearer " + "t" * 30_000}))
        assert reader.response().status == 200
        sock.sendall(request("GET", "/healthz", {"Authorization": "Bearer " + "t" * 33_000}))
        assert reader.response().status == 431


def test_requests_go_s_server_refuses_get_400_and_the_connection_ends(tmp_path: Path) -> None:
    """HTTP/1.1 without Host, a field folded onto the line before, whitespace before a colon,
    Content-Length beside Transfer-Encoding (the request-smuggling pair): Go's net/http
    answers 400, and so does the exporter's own parser (as aiohttp's did)."""
    with run_exporter(["--simulate", DEMO], tmp_path) as exporter:
        for head in (
            b"GET /healthz HTTP/1.1\r\n\r\n",
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n folded\r\n\r\n",
            b"GET /healthz HTTP/1.1\r\nHost : x\r\n\r\n",
            b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        ):
            sock = connect(exporter.port)
            sock.sendall(head + request("GET", "/healthz"))
            assert Reader(sock).response().status == 400, head
            assert closed_by_peer(sock, 30)
        assert "Traceback" not in exporter.log()


def test_a_thousand_pipelined_requests_are_answered_in_order(tmp_path: Path) -> None:
    """One client sends 1,000 requests at once and reads as they come: each is answered,
    in order, on the one connection (the next head is taken as each answer reaches the
    kernel, which must not nest one answer's call inside the last one's)."""
    with run_exporter(["--simulate", DEMO], tmp_path) as exporter:
        sock = connect(exporter.port)
        reader = Reader(sock)
        paths = ["/healthz", "/readyz"] * 500
        sock.sendall(b"".join(request("GET", path) for path in paths))
        bodies = [reader.response().body for _ in paths]
        assert bodies == [b"ok\n", b"ready\n"] * 500
        sock.sendall(request("GET", "/healthz"))
        assert reader.response().status == 200
        assert "Traceback" not in exporter.log()


def test_every_answer_of_the_app_carries_a_date(tmp_path: Path) -> None:
    """RFC 9110 §6.6.1: an origin server with a clock sends Date (Go's and aiohttp's did)."""
    with run_exporter(["--simulate", DEMO], tmp_path) as exporter:
        sock = connect(exporter.port)
        reader = Reader(sock)
        for method, path in [("GET", "/metrics"), ("HEAD", "/metrics"), ("GET", "/nowhere")]:
            sock.sendall(request(method, path))
            date = reader.response(head_request=method == "HEAD").headers["date"]
            assert date.endswith(" GMT") and len(date) == 29, date
            sent = email.utils.parsedate_to_datetime(date)
            assert abs((sent - datetime.now(UTC)).total_seconds()) < 60, date


def test_an_http_1_0_client_asking_keep_alive_is_told_the_connection_stays(
    tmp_path: Path,
) -> None:
    """RFC 9112 §9.3 / RFC 7230 A.1.2: HTTP/1.0 closes unless both sides say `keep-alive`, so
    the answer to a 1.0 request asking for it must carry `Connection: keep-alive` (Go's does)
    or the client closes; a 1.0 request without it is answered and closed."""
    with run_exporter(["--simulate", DEMO], tmp_path) as exporter:
        sock = connect(exporter.port)
        reader = Reader(sock)
        for path in ("/healthz", "/metrics"):
            sock.sendall(f"GET {path} HTTP/1.0\r\nConnection: keep-alive\r\n\r\n".encode())
            answer = reader.response()
            assert answer.status == 200
            assert answer.headers["connection"].lower() == "keep-alive"
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = reader.response()
        assert answer.body == b"ok\n" and "connection" not in answer.headers
        sock.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
        answer = reader.response()
        assert answer.headers["connection"].lower() == "close"
        assert closed_by_peer(sock, 5.0)


@pytest.mark.parametrize(
    "head",
    [b"GET /metrics HTTP/1.1\nHost: exporter\n\n", b"GET /metrics HTTP/1.1\r\nHost: x\r\n\n"],
    ids=["bare LF", "bare LF blank line"],
)
def test_a_head_ended_by_bare_line_feeds_gets_400_at_once(tmp_path: Path, head: bytes) -> None:
    """Before, such a head was never complete and waited for the read-header timeout (10 s)
    with no answer; Go answers at once, aiohttp with 400."""
    with run_exporter(["--simulate", DEMO], tmp_path) as exporter:
        sock = connect(exporter.port, timeout=5)
        sock.sendall(head)
        assert Reader(sock).response().status == 400
        assert closed_by_peer(sock, 5)
