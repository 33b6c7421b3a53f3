"""The order of bcrypt checks: credentials asked again first, then addresses not yet suspect
newest first (the oldest giving way past the bound), then suspects by address."""

from __future__ import annotations

import asyncio

import pytest

from kube_gpu_exporter.exporter.serve.middleware import CheckTurns, GaveWay


async def _order(
    events: list[tuple[str, str, bool]], repeat: str = "", bound: int = 8
) -> list[str]:
    """Start a check per (client, key, suspect) while one runs, then let them go; the keys in
    the order they ran, and those that gave way."""
    turns = CheckTurns(bound)
    ran: list[str] = []
    release = asyncio.Event()

    async def check(client: str, key: str, suspect: bool) -> None:
        try:
            async with turns.turn(client, key, suspect):
                ran.append(key)
                await release.wait()
        except GaveWay:
            ran.append(f"gave way: {key}")

    first = asyncio.create_task(check("busy", "running", False))
    await asyncio.sleep(0)
    tasks = [asyncio.create_task(check(*event)) for event in events]
    await asyncio.sleep(0)
    if repeat:
        turns.repeat(repeat)
    release.set()
    await asyncio.gather(first, *tasks)
    return ran[1:]


def test_new_addresses_newest_first_after_repeated_credentials() -> None:
    events = [("a", "a", False), ("b", "b", False), ("s", "s", True), ("c", "c", False)]
    assert asyncio.run(_order(events, repeat="a")) == ["a", "c", "b", "s"]


def test_the_oldest_new_address_gives_way_past_the_bound() -> None:
    events = [("a", "a", False), ("b", "b", False), ("c", "c", False)]
    assert asyncio.run(_order(events, bound=2)) == ["gave way: a", "c", "b"]


@pytest.mark.parametrize("repeat", ["s1", "s2"])
def test_a_suspects_repeated_credentials_go_first_too(repeat: str) -> None:
    events = [("x", "s1", True), ("y", "s2", True), ("n", "n", False)]
    ran = asyncio.run(_order(events, repeat=repeat))
    assert ran[0] == repeat and ran[1] == "n"


def test_credentials_asked_again_after_giving_way_go_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """Prometheus' check gave way to newer addresses (503): its next scrape, with the same
    credentials, is checked before every other waiting one; a flooding address that gave way
    and then asks a new password waits with the suspects."""
    import threading

    from kube_gpu_exporter.exporter.httpd import Refusal
    from kube_gpu_exporter.exporter.serve import middleware

    monkeypatch.setattr(middleware, "MAX_PENDING_TRUSTED", 2)
    gate = threading.Event()
    checked: list[bytes] = []

    def checkpw(password: bytes, hashed: bytes) -> bool:
        checked.append(password)
        if password == b"first":
            gate.wait(10)
        return password == b"good"

    auth = middleware.BasicAuth({"prometheus": b"$2b$04$" + b"x" * 53}, checkpw, frozenset())

    async def scenario() -> dict[str, object]:
        async def ask(client: str, password: bytes) -> object:
            return await auth._authenticate(client, "prometheus", password)

        results: dict[str, object] = {}

        async def run(name: str, client: str, password: bytes) -> None:
            results[name] = await ask(client, password)

        tasks = [asyncio.create_task(run("first", "a", b"first"))]
        await asyncio.sleep(0.05)  # a's check runs, the others wait
        for name, client, password in [
            ("scraper", "s", b"good"), ("b", "b", b"b1"), ("c", "c", b"c1"), ("d", "d", b"d1"),
        ]:  # fmt: skip
            tasks.append(asyncio.create_task(run(name, client, password)))
            await asyncio.sleep(0.01)
        assert results == {"scraper": Refusal.TOTAL, "b": Refusal.TOTAL}  # gave way
        tasks.append(asyncio.create_task(run("b again", "b", b"b2")))
        tasks.append(asyncio.create_task(run("scraper again", "s", b"good")))
        await asyncio.sleep(0.01)
        gate.set()
        await asyncio.gather(*tasks)
        return results

    results = asyncio.run(scenario())
    assert results["scraper again"] is True
    assert checked == [b"first", b"good", b"d1", b"c1", b"b2"], checked
