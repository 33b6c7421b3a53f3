"""The aiohttp internals that serve/connection.py overrides are still there, as it uses them.

aiohttp documents none of RequestHandler, and connection.py replaces or calls several of its
methods (one request head fed at a time, errors dressed and logged quietly) and one of
StreamResponse's. pyproject pins aiohttp to the releases tested; this test is what fails,
naming the method, when a release in that range (or a widened pin) changes one, rather than
letting the protection lapse silently. The behaviour itself is tested over real sockets in
tests/integration/test_http_semantics.py and test_client_shares.py.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import pytest
from aiohttp import web
from aiohttp.http_writer import StreamWriter
from aiohttp.web_protocol import RequestHandler

from kube_gpu_exporter.exporter.serve.connection import Connection

# name → the parameters (after self) connection.py passes or receives, in order.
OVERRIDDEN: dict[str, list[str]] = {
    "data_received": ["data"],
    "finish_response": ["request", "resp", "start_time"],
    "handle_error": ["request", "status", "exc", "message"],
    "connection_made": ["transport"],
    "connection_lost": ["exc"],
}
CALLED = ["force_close", "close", "log_exception"]
INIT_KEYWORDS = ["keepalive_timeout", "max_line_size", "max_field_size", "loop", "access_log"]


def parameters(function: Callable[..., object]) -> list[str]:
    return list(inspect.signature(function).parameters)[1:]


@pytest.mark.parametrize("name", sorted(OVERRIDDEN))
def test_overridden_request_handler_methods_keep_their_signatures(name: str) -> None:
    method = getattr(RequestHandler, name, None)
    assert method is not None, f"aiohttp's RequestHandler has no {name} any more"
    assert parameters(method)[: len(OVERRIDDEN[name])] == OVERRIDDEN[name], name
    # and ours still overrides it with the same parameters
    assert parameters(getattr(Connection, name))[: len(OVERRIDDEN[name])] == OVERRIDDEN[name]


def test_finish_response_is_a_coroutine_and_returns_what_start_expects() -> None:
    assert inspect.iscoroutinefunction(RequestHandler.finish_response)
    # Every request's answer goes through it (_handle_request), as the pair (response, reset)
    # that ours passes through.
    source = inspect.getsource(RequestHandler._handle_request)
    assert "resp, reset = await self.finish_response(request, resp, start_time)" in source


@pytest.mark.parametrize("name", CALLED)
def test_called_request_handler_methods_exist(name: str) -> None:
    assert callable(getattr(RequestHandler, name, None)), name


def test_request_handler_takes_the_keywords_connection_passes() -> None:
    accepted = inspect.signature(RequestHandler.__init__).parameters
    for keyword in INIT_KEYWORDS:
        assert keyword in accepted, keyword
    assert "_loop" in inspect.getsource(RequestHandler.__init__) or "_loop" in inspect.getsource(
        RequestHandler.__mro__[1].__init__
    )


def test_handle_error_is_called_for_a_malformed_request() -> None:
    """Our dressed 400 comes from overriding handle_error: aiohttp must still route a parse
    failure through it."""
    source = inspect.getsource(RequestHandler)
    assert "self.handle_error(" in source


def test_the_server_header_is_set_in_prepare_headers_before_the_prepare_hook() -> None:
    """dress() removes the Server header after _prepare_headers set it and before the headers
    are written: the app's hook runs between the two, and _ErrorResponse overrides the first."""
    assert inspect.iscoroutinefunction(web.StreamResponse._prepare_headers)
    assert "SERVER" in inspect.getsource(web.StreamResponse._prepare_headers)
    start = inspect.getsource(web.StreamResponse._start)
    order = [start.index(step) for step in ("_prepare_headers", "_prepare_hook", "_write_headers")]
    assert order == sorted(order), start


def test_headers_can_be_sent_apart_from_the_body() -> None:
    """server.metrics sends the head on its own (StreamWriter.send_headers) so that the body
    reaches the wire as the rendered bytes object, not joined to the head in a copy."""
    assert callable(StreamWriter.send_headers)
    assert parameters(StreamWriter.send_headers) == []
    source = inspect.getsource(StreamWriter.write_eof)
    assert "self._write(chunk)" in source


def test_the_parser_is_fed_only_through_data_received() -> None:
    """connection.py holds bytes back in its inbox and hands aiohttp one head at a time via
    super().data_received; aiohttp must not read the transport another way."""
    source = inspect.getsource(RequestHandler)
    assert "get_buffer" not in source and "buffer_updated" not in source
