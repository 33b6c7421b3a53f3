"""Logging in the Prometheus exporter style: `--log.level`, `--log.format=logfmt|json`."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time

LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "error": logging.ERROR,
}
FORMATS = ("logfmt", "json")


def add_flags(parser: argparse.ArgumentParser) -> None:
    """`--log.level` and `--log.format`, declared once for every command that logs, so their
    names, choices and help cannot drift apart between `serve` and `cluster`."""
    parser.add_argument(
        "--log.level",
        dest="log_level",
        choices=list(LEVELS),
        default="info",
        metavar="LEVEL",
        help=f"the least severe messages logged: {', '.join(LEVELS)} (default info)",
    )
    parser.add_argument(
        "--log.format",
        dest="log_format",
        choices=FORMATS,
        default="logfmt",
        metavar="FORMAT",
        help="how each line on stderr is written: logfmt (key=value) or json (default logfmt)",
    )


def _timestamp(record: logging.LogRecord) -> str:
    millis = int(record.msecs)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{millis:03d}Z"


def _level(record: logging.LogRecord) -> str:
    return "warn" if record.levelno == logging.WARNING else record.levelname.lower()


def _logfmt_value(value: str) -> str:
    if value and not any(ch in value for ch in ' "=\n'):
        return value
    return json.dumps(value)


def _fields(formatter: logging.Formatter, record: logging.LogRecord) -> dict[str, str]:
    fields = {
        "ts": _timestamp(record),
        "level": _level(record),
        "source": record.name.removeprefix("kube_gpu_exporter."),
        "msg": record.getMessage(),
    }
    if record.exc_info:
        fields["err"] = formatter.formatException(record.exc_info)
    return fields


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return " ".join(f"{k}={_logfmt_value(v)}" for k, v in _fields(self, record).items())


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(_fields(self, record))


def setup(level: str, fmt: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else LogfmtFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(LEVELS[level])
