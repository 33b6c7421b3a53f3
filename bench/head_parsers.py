"""The request-head parser's cost: the server's `parse_head` against llhttp bare (httptools
with callbacks that only collect), and against the regular-expression parser the server used
before httptools (loaded from git, `--before REF`), per head:

- Prometheus' scrape head (~300 bytes);
- a 32 KiB head of ~300 short fields (a client sending many headers);
- a 32 KiB head of one long field (a bearer token, the legitimate long head).

    python bench/head_parsers.py [--before REF] [--repeat N]

The figures in bench/README.md ("Request heads") come from this script.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import timeit
import types
from collections.abc import Callable
from pathlib import Path

import httptools

from kube_gpu_exporter.exporter.httpd.connection import MAX_HEAD
from kube_gpu_exporter.exporter.httpd.request_head import parse_head

REPO = Path(__file__).resolve().parents[1]
# The commit whose request_head.py parsed with two regular expressions (before httptools).
REGEX_PARSER = "4986197"

SCRAPE = (
    b"GET /metrics HTTP/1.1\r\nHost: 10.0.0.12:19400\r\nUser-Agent: Prometheus/3.5.0\r\n"
    b"Accept: application/openmetrics-text;version=1.0.0;escaping=underscores;q=0.5,"
    b"application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;"
    b"escaping=underscores;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1\r\n"
    b"Accept-Encoding: gzip\r\nX-Prometheus-Scrape-Timeout-Seconds: 10\r\n\r\n"
)


def many_fields(size: int) -> bytes:
    """A head of `size` bytes at most, of short fields."""
    lines = [b"GET /metrics HTTP/1.1\r\n", b"Host: x\r\n"]
    used = sum(map(len, lines)) + 2
    index = 0
    while True:
        line = b"X-Field-%04d: %s\r\n" % (index, b"v" * 80)
        if used + len(line) > size:
            break
        lines.append(line)
        used += len(line)
        index += 1
    return b"".join(lines) + b"\r\n"


def long_field(size: int) -> bytes:
    start = b"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
    return start + b"A" * (size - len(start) - 4) + b"\r\n\r\n"


class _Collect:
    """What a caller of llhttp must do at least: keep the target and the fields."""

    def __init__(self) -> None:
        self.url = b""
        self.fields: list[tuple[bytes, bytes]] = []

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.fields.append((name, value))


def llhttp_bare(head: bytes) -> None:
    httptools.HttpRequestParser(_Collect()).feed_data(head)


def regex_parser(ref: str) -> Callable[[bytes], object]:
    """`parse_head` as request_head.py had it at `ref`."""
    path = "exporter/httpd/request_head.py"
    source = subprocess.run(
        ["git", "show", f"{ref}:{path}"], cwd=REPO, check=True, capture_output=True, text=True
    ).stdout
    module = types.ModuleType("request_head_before")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(source, path, "exec"), module.__dict__)
    return module.parse_head  # type: ignore[no-any-return]


def per_call_us(parse: Callable[[bytes], object], head: bytes, repeat: int) -> float:
    """The best of five runs, in µs a head."""
    number = max(1, repeat * 300 // max(300, len(head)))
    return min(timeit.repeat(lambda: parse(head), number=number, repeat=5)) / number * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default=REGEX_PARSER, help="the regex parser's commit")
    parser.add_argument("--repeat", type=int, default=20_000)
    args = parser.parse_args()
    heads = {
        f"scrape ({len(SCRAPE)} B)": SCRAPE,
        "32 KiB, short fields": many_fields(MAX_HEAD),
        "32 KiB, one long field": long_field(MAX_HEAD),
    }
    parsers = {
        "parse_head (llhttp + our checks)": parse_head,
        "llhttp bare": llhttp_bare,
        f"regex parse_head ({args.before})": regex_parser(args.before),
    }
    print("| head | " + " | ".join(parsers) + " |")
    print("|---|" + "---:|" * len(parsers))
    for name, head in heads.items():
        cells = [f"{per_call_us(parse, head, args.repeat):,.1f} µs" for parse in parsers.values()]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
