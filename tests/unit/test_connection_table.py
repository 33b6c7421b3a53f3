"""The connection table's choice of whom to displace: least recent progress first, never a
connection whose request the app is handling, the address over its share paying first."""

from __future__ import annotations

from kube_gpu_exporter.exporter.httpd.client_shares import ConnectionTable, Verdict


def table(total: int, per_client: int, busy: set[str] | None = None) -> ConnectionTable[str]:
    return ConnectionTable(total, per_client, lambda connection: connection in (busy or set()))


def test_an_address_at_its_share_displaces_its_own_least_recent() -> None:
    shares = table(total=10, per_client=2)
    shares.add("a", "a1")
    shares.add("a", "a2")
    shares.add("b", "b1")
    shares.touch("a1")  # a1 made progress after a2
    admission = shares.admit("a")
    assert admission.verdict is Verdict.ADMIT and admission.evicted == "a2"
    assert shares.held_by("a") == 1 and shares.held_by("b") == 1


def test_an_address_whose_every_connection_is_busy_gets_its_refusal() -> None:
    shares = table(total=10, per_client=2, busy={"a1", "a2"})
    shares.add("a", "a1")
    shares.add("a", "a2")
    assert shares.admit("a").verdict is Verdict.CLIENT_FULL


def test_a_full_table_of_single_connections_gives_way_to_a_newcomer() -> None:
    """Thousands of addresses holding one connection each: before, nobody could be
    displaced and every newcomer was turned away."""
    shares = table(total=4, per_client=2, busy={"x0"})
    for n in range(4):
        shares.add(f"x{n}", f"x{n}")
    shares.touch("x1")
    admission = shares.admit("scraper")
    assert admission.verdict is Verdict.ADMIT
    assert admission.evicted == "x2"  # x0 is busy, x1 made progress since x2
    assert len(shares) == 3


def test_the_heaviest_address_gives_way_first() -> None:
    shares = table(total=4, per_client=4)
    shares.add("light", "l1")
    for n in range(3):
        shares.add("heavy", f"h{n}")
    shares.touch("l1")
    shares.touch("h0")
    assert shares.admit("new").evicted == "h1"


def test_when_every_connection_is_busy_the_newcomer_is_told_full() -> None:
    shares = table(total=2, per_client=2, busy={"a1", "b1"})
    shares.add("a", "a1")
    shares.add("b", "b1")
    assert shares.admit("c").verdict is Verdict.FULL
