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
