"""A small client of Prometheus' HTTP query API (`/api/v1/query`, `/api/v1/query_range`).

Standard library only (urllib): the report asks a few dozen queries one after another, so an
async client would buy nothing. Queries go as POST forms, since a dashboard query with its
joins can be longer than a URL should be. Every failure the operator must fix — a URL that
does not answer, a server that is not Prometheus, a query Prometheus refuses — is an
InputError: one line, exit 2.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from kube_gpu_exporter.exporter.input_errors import InputError, quoted

TIMEOUT = 120.0  # seconds for one query: a week of subqueries on a large fleet takes a while


@dataclass(frozen=True)
class Sample:
    """One series of an instant query's answer."""

    labels: dict[str, str]
    value: float


@dataclass(frozen=True)
class Series:
    """One series of a range query's answer: Unix times and values."""

    labels: dict[str, str]
    times: tuple[float, ...]
    values: tuple[float, ...]


class PrometheusApi:
    def __init__(self, url: str, timeout: float = TIMEOUT) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise InputError(f"--prometheus {quoted(url)}: not an http:// or https:// URL")
        self.url = url.rstrip("/")
        self.timeout = timeout

    def instant(self, expr: str, at: float) -> list[Sample]:
        data = self._call("query", query=expr, time=f"{at:.3f}")
        return [Sample(r["metric"], float(r["value"][1])) for r in data["result"]]

    def range(self, expr: str, start: float, end: float, step: int) -> list[Series]:
        data = self._call(
            "query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}", step=str(step)
        )
        return [
            Series(
                r["metric"],
                tuple(float(t) for t, _ in r["values"]),
                tuple(float(v) for _, v in r["values"]),
            )
            for r in data["result"]
        ]

    def _call(self, path: str, **form: str) -> Any:
        body = urllib.parse.urlencode(form).encode()
        request = urllib.request.Request(
            f"{self.url}/api/v1/{path}",
            data=body,
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                answer = _json(response.read(), self.url)
        except urllib.error.HTTPError as exc:
            answer = _json(exc.read(), self.url, status=exc.code)
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise InputError(f"cannot reach Prometheus at {self.url}: {reason}") from None
        if answer.get("status") != "success":
            raise InputError(
                f"Prometheus at {self.url} refused a query: "
                f"{answer.get('errorType', '')} {answer.get('error', '')}".strip()
            )
        return answer["data"]


def _json(raw: bytes, url: str, status: int = 200) -> dict[str, Any]:
    try:
        answer = json.loads(raw)
    except ValueError:
        answer = None
    if not isinstance(answer, dict) or "status" not in answer:
        raise InputError(f"{url} does not answer as a Prometheus API (HTTP {status})")
    return answer
