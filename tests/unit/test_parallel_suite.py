"""The suite runs in parallel (`make test` passes `-n` to pytest-xdist): what keeps its
workers, and other runs on the same machine, out of each other's way."""

from __future__ import annotations

import errno
import logging
import logging.config
import socket
import struct

import pytest

from support import free_port

IP_LOCAL_PORT_RANGE = 51  # Linux ≥ 6.3: bounds the ports this socket's autoselection picks


def _autoselected_within(port: int) -> int:
    """The port the kernel hands a socket whose bind(0) may pick `port` and nothing else, as
    when another worker or process asks for any free port and `port` is the one left; raises
    EADDRINUSE when it will not hand `port` out. Kernels without the option: an explicit bind
    without SO_REUSEADDR, refused for a port the kernel holds in the same way."""
    with socket.socket() as other:
        try:
            other.setsockopt(
                socket.IPPROTO_IP, IP_LOCAL_PORT_RANGE, struct.pack("I", port | port << 16)
            )
            other.bind(("127.0.0.1", 0))
        except OSError as exc:
            if exc.errno != errno.ENOPROTOOPT:
                raise
            other.bind(("127.0.0.1", port))
        return int(other.getsockname()[1])


def test_a_free_port_is_not_handed_to_anyone_else_before_its_server_binds_it() -> None:
    port = free_port()
    with pytest.raises(OSError) as refused:
        _autoselected_within(port)
    assert refused.value.errno == errno.EADDRINUSE
    with socket.socket() as server:  # SO_REUSEADDR, as aiohttp, Go and http.server set it
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", port))
        server.listen()


WATCHED = "kube_gpu_exporter.exporter.nvml.sampler"


def test_a_test_may_configure_logging_in_process() -> None:
    """As importlinter's lint_imports does (test_layout.py): every existing logger disabled."""
    logging.getLogger(WATCHED)
    logging.config.dictConfig({"version": 1})
    assert logging.getLogger(WATCHED).disabled


def test_the_tests_after_it_on_its_worker_still_get_their_log_records(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO):
        logging.getLogger(WATCHED).info("rediscovered")
    assert [r.getMessage() for r in caplog.records] == ["rediscovered"]
