"""Wrong passwords cannot lock Prometheus out: a scraper with good credentials keeps getting
200 while many clients flood the exporter with bad ones, and a repeated bad password costs
one bcrypt check, not one per request.

Before the fix, 41 such clients made a cached scraper get 503 on 59 of 60 scrapes (the scrape
bound sat outside auth and waiting bcrypt checks held its slots), and 60 clients used 26 s of
CPU in 20 s (failed checks were never cached).
"""

from __future__ import annotations

import base64
import contextlib
import secrets
import threading
import time
from collections import Counter
from pathlib import Path

import bcrypt
from raw_http import Reader, connect, other_addresses, request

from support import Exporter, http_get, run_exporter

DEMO = str(Path(__file__).parents[2] / "exporter" / "simulated" / "scenarios" / "demo.yaml")
COST = 10  # ~0.07 s of CPU per check: 400 of them would be plain to see, 8 queued stay short
FLOODERS = 40
SAME_PASSWORD_REQUESTS = 10  # per flooder, 400 in all
DISTINCT_SECONDS = 5.0
SCRAPE_EVERY = 0.05


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, in clock ticks


class Scraper(threading.Thread):
    """Prometheus: good credentials, a scrape every SCRAPE_EVERY seconds until stopped."""

    def __init__(self, exporter: Exporter, headers: dict[str, str]) -> None:
        super().__init__()
        self.exporter = exporter
        self.headers = headers
        self.stop = threading.Event()
        self.statuses: Counter[int] = Counter()

    def run(self) -> None:
        while not self.stop.is_set():
            self.statuses[http_get(self.exporter.url + "/metrics", self.headers)[0]] += 1
            time.sleep(SCRAPE_EVERY)


def flood(exporter: Exporter, requests: int | None, seconds: float | None) -> Counter[int]:
    """FLOODERS threads sending wrong passwords: the same one `requests` times each, or a new
    one each time for `seconds`."""
    statuses: Counter[int] = Counter()
    lock = threading.Lock()
    until = time.monotonic() + seconds if seconds is not None else None

    def flooder(source: str) -> None:
        sent = 0
        while (requests is not None and sent < requests) or (
            until is not None and time.monotonic() < until
        ):
            password = "wrong" if requests is not None else secrets.token_hex(8)
            status = raw_get(exporter.port, source, basic("prometheus", password))
            with lock:
                statuses[status] += 1
            sent += 1

    sources = other_addresses(8)  # the flood's client hosts, 5 threads each
    threads = [
        threading.Thread(target=flooder, args=(sources[n % len(sources)],)) for n in range(FLOODERS)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return statuses


def raw_get(port: int, source: str, headers: dict[str, str]) -> int:
    """GET /metrics on a new connection from `source`; 0 when the connection failed."""
    try:
        with contextlib.closing(connect(port, source=source)) as sock:
            sock.sendall(request("GET", "/metrics", headers))
            return Reader(sock).response().status
    except OSError:
        return 0


def test_wrong_password_flood_does_not_lock_out_the_scraper(tmp_path: Path) -> None:
    hashed = bcrypt.hashpw(b"secret", bcrypt.gensalt(rounds=COST)).decode()
    web_config = tmp_path / "web.yml"
    web_config.write_text(f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    good = basic("prometheus", "secret")
    one_check = bcrypt_cpu_seconds(hashed)
    args = ["--simulate", DEMO, f"--web.config.file={web_config}"]
    with run_exporter(args, tmp_path) as exporter:
        assert exporter.get(**good)[0] == 200  # Prometheus' credentials, now cached
        scraper = Scraper(exporter, good)
        scraper.start()
        try:
            # The same wrong password over and over: one bcrypt check, then the cache.
            cpu_before = cpu_seconds(exporter.proc.pid)
            same = flood(exporter, SAME_PASSWORD_REQUESTS, None)
            cpu_same = cpu_seconds(exporter.proc.pid) - cpu_before
            # A new wrong password every time: one check at a time, the rest wait or get 503.
            distinct = flood(exporter, None, DISTINCT_SECONDS)
            print(f"same: {same}, {cpu_same:.2f} s CPU; distinct: {distinct}")
        finally:
            scraper.stop.set()
            scraper.join()
    assert same == Counter({401: FLOODERS * SAME_PASSWORD_REQUESTS}), same
    # 400 uncached checks would take 400 × one_check of CPU; allow ten checks and the HTTP.
    assert cpu_same < 10 * one_check + 5.0, (cpu_same, one_check)
    # The distinct guesses met the bounds on pending checks: per address (429) and of the
    # addresses whose checks failed (503); 0: the client gave up waiting.
    assert set(distinct) <= {0, 401, 429, 503} and distinct[429] + distinct[503] > 0, distinct
    total = sum(scraper.statuses.values())
    assert total >= 20, scraper.statuses
    assert scraper.statuses[200] >= 0.99 * total, scraper.statuses


def bcrypt_cpu_seconds(hashed: str) -> float:
    started = time.process_time()
    bcrypt.checkpw(b"not it", hashed.encode())
    return time.process_time() - started
