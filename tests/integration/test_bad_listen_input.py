"""Listen addresses and TLS settings that cannot work: one line and exit status 2 at start,
never a server that listens somewhere else than asked or one no client can talk to. The CLI
runs in-process (inprocess_cli.py) for the flags; TLS handshakes are real (openssl CLI keys).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from inprocess_cli import assert_one_line, offline_cli, run_cli

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "exporter" / "simulated" / "scenarios" / "demo.yaml"


@pytest.fixture(autouse=True)
def _offline() -> Iterator[None]:
    with offline_cli():
        yield


BAD_ADDRESSES = {
    "unbalanced-bracket": ("[::1:29999", "missing ']'"),
    "unopened-bracket": ("::1]:29999", "not a listen address"),
    "bare-ipv6": ("::1:29999", "IPv6 address in brackets"),
    "bracketed-ipv4": ("[127.0.0.1]:29999", "not an IPv6 address"),
    "text-after-bracket": ("[::1]x:29999", "not a listen address"),
    "bracket-no-port": ("[::1]", "not a listen address"),
    "bad-ipv6": ("[::g]:29999", "not an IPv6 address"),
    "nested-brackets": ("[[::1]]:29999", "not a listen address"),
    "space-in-host": ("my host:29999", "not an IP address or host name"),
    "bad-ipv4": ("999.1.1.1:29999", "not an IP address or host name"),
    "percent-host": ("%eth0:29999", "not an IP address or host name"),
    "no-port": ("127.0.0.1", "(use host:port)"),
    "empty-port": ("127.0.0.1:", "(use host:port)"),
    "port-out-of-range": ("[::1]:0", "port 0 out of range 1–65535"),
}


@pytest.mark.parametrize(("address", "expected"), BAD_ADDRESSES.values(), ids=BAD_ADDRESSES)
@pytest.mark.parametrize("command", [["serve"], ["cluster"]])
def test_a_malformed_listen_address_is_refused(
    command: list[str], address: str, expected: str
) -> None:
    line = assert_one_line(*run_cli([*command, f"--web.listen-address={address}"]), expected)
    assert "--web.listen-address" in line


@pytest.mark.parametrize(
    "address",
    [":29999", "127.0.0.1:29999", "[::1]:29999", "[::]:29999", "localhost:29999",
     "gpu-node-1.example.com:29999", "[fe80::1%eth0]:29999", "0.0.0.0:29999"],
)  # fmt: skip
def test_well_formed_listen_addresses_are_accepted(address: str) -> None:
    assert run_cli(["serve", "--simulate", DEMO, f"--web.listen-address={address}"]) == (0, "")


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("[::1", "--host"),
        ("::1", "IPv4 address or a host name"),
        ("my host", "not an IP address or host name"),
        ("", "IPv4 address or a host name"),
    ],
)
def test_the_demo_checks_its_host(host: str, expected: str) -> None:
    assert_one_line(*run_cli(["demo", f"--host={host}"]), "--host", expected)
