"""--web.max-requests: requests beyond the bound get a quick 503; probes are never refused."""

from __future__ import annotations

import base64
import threading
from pathlib import Path

import bcrypt

from support import http_get, run_exporter, wait_until

DEMO = str(Path(__file__).parents[2] / "exporter" / "simulated" / "scenarios" / "demo.yaml")


def test_requests_beyond_the_limit_get_503_until_a_slot_frees(tmp_path: Path) -> None:
    # A costly bcrypt hash makes every wrong-password request hold its slot for a while.
    hashed = bcrypt.hashpw(b"secret", bcrypt.gensalt(rounds=12)).decode()
    web_config = tmp_path / "web.yml"
    web_config.write_text(f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    args = ["--simulate", DEMO, "--web.max-requests=1", f"--web.config.file={web_config}"]
    wrong = "Basic " + base64.b64encode(b"prometheus:guess").decode()
    stop = threading.Event()

    with run_exporter(args, tmp_path) as exporter:

        def hammer() -> None:
            while not stop.is_set():
                http_get(exporter.url + "/metrics", {"Authorization": wrong})

        flood = threading.Thread(target=hammer)
        flood.start()
        try:
            _status, _, body = wait_until(
                lambda: (lambda r: r if r[0] == 503 else None)(exporter.get()),
                what="a 503 while the only slot is held",
            )
            assert b"too many concurrent requests" in body
            assert exporter.get("/healthz")[0] == 200  # probes bypass the bound
            assert exporter.get("/readyz")[0] == 200
        finally:
            stop.set()
            flood.join()
        # The slot frees: an unauthenticated request is refused by auth again, not by the bound.
        wait_until(lambda: exporter.get()[0] == 401, what="the slot to free again")
