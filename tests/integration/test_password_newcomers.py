"""An uncached password does not wait behind every new flooding address.

A fresh exporter (nothing cached) with basic auth: 200 addresses, each new to it, send one
distinct wrong password at once, then Prometheus sends its good credentials. Each flooding
address is checked once before it becomes a suspect, and checks run one at a time; before,
new addresses were served in order of arrival and their queue refused the rest with 503, so
the scraper got 503 or waited behind every one of them (24-45 s with 200 addresses).

What is asserted is the order, not a duration: how many of the flooders' checks were
answered between the scraper's request and its 200. Checks are slow here (bcrypt cost 12), so
that a loaded machine's delay in reading the scraper's request lets few of them by.
"""

from __future__ import annotations

import contextlib
import secrets
import socket
import threading
from collections import Counter
from pathlib import Path

import bcrypt
from abuse_clients import basic
from raw_http import Reader, connect, other_addresses, request

from support import run_exporter, wait_until

DEMO = str(Path(__file__).parents[2] / "exporter" / "simulated" / "scenarios" / "demo.yaml")
COST = 12  # a few hundred ms a check
FLOODERS = 200
MOST_AHEAD = 8  # flooders' checks answered while the scraper's waited (one was under way)


def test_the_scrapers_first_check_does_not_wait_behind_new_flooding_addresses(
    tmp_path: Path,
) -> None:
    hashed = bcrypt.hashpw(b"secret", bcrypt.gensalt(rounds=COST)).decode()
    config = tmp_path / "web.yml"
    config.write_text(f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    answered: list[int] = []  # statuses of the flooders, in the order they came
    lock = threading.Lock()
    with run_exporter(["--simulate", DEMO, f"--web.config.file={config}"], tmp_path) as exporter:
        flooders: list[socket.socket] = []
        for source in other_addresses(FLOODERS):
            sock = connect(exporter.port, source=source)
            headers = {"Authorization": basic("prometheus", secrets.token_hex(8))}
            sock.sendall(request("GET", "/metrics", headers))
            flooders.append(sock)

        def collect(sock: socket.socket) -> None:
            with contextlib.suppress(OSError, ConnectionError):
                status = Reader(sock).response().status
                with lock:
                    answered.append(status)

        readers = [threading.Thread(target=collect, args=(s,), daemon=True) for s in flooders]
        for thread in readers:
            thread.start()
        # Every flooder's request read: all but those waiting (at most 64) and the one being
        # checked were answered at once, so none reaches the server after the scraper's.
        wait_until(lambda: len(answered) >= FLOODERS - 65, what="the flooders' requests read")
        with lock:
            ahead_at_send = Counter(answered)[401]
        scraper = connect(exporter.port, source="127.0.0.1")
        good = {"Authorization": basic("prometheus", "secret")}
        scraper.sendall(request("GET", "/metrics", good))
        status = Reader(scraper).response().status
        with lock:
            ahead = Counter(answered)[401] - ahead_at_send
            seen = Counter(answered)
        for sock in [*flooders, scraper]:
            sock.close()
    print(f"scraper {status}; flooders' checks answered while it waited: {ahead}; {seen}")
    assert status == 200
    assert ahead <= MOST_AHEAD, f"{ahead} flooders' checks ran before the scraper's"
