"""A test host of our own: a network namespace made for the run, joined to this one by a veth
pair, standing in for a node whose pods have addresses.

The API server refuses loopback addresses in Endpoints and EndpointSlices, and a test may send
traffic only to loopback or to hosts it made itself in network namespaces of its own (never
to the machine's own or any other network's address). So the processes standing in for pods
(an exporter, an Alertmanager) run inside the namespace (`prefix`) and listen on its
`address`; what they call back (a webhook) listens on `gateway`, this side of the pair. One
per test process, removed at exit; addresses in 10.213.0.0/16, a /30 per process.
"""

from __future__ import annotations

import atexit
import functools
import os
import subprocess
from dataclasses import dataclass

import pytest


@dataclass(frozen=True)
class NetnsHost:
    name: str
    address: str  # inside the namespace
    gateway: str  # this namespace's end of the pair

    @property
    def prefix(self) -> list[str]:
        """The command prefix that runs a process inside the namespace."""
        return ["ip", "netns", "exec", self.name]


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.fail(f"ip {' '.join(args)}: {done.stderr.strip()}")


@functools.cache
def netns_host() -> NetnsHost:
    """This process's test host, made on first use."""
    pid = os.getpid()
    name = f"kge{pid}"
    base = (pid % 16384) * 4  # a /30 per process
    subnet = f"10.213.{base // 256}.{base % 256}"
    prefix = subnet.rsplit(".", 1)[0]
    gateway, address = f"{prefix}.{base % 256 + 1}", f"{prefix}.{base % 256 + 2}"
    outside, inside = f"kgo{pid}"[:15], f"kgi{pid}"[:15]
    _ip("netns", "add", name)
    atexit.register(subprocess.run, ["ip", "netns", "delete", name], capture_output=True)
    _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
    atexit.register(subprocess.run, ["ip", "link", "delete", outside], capture_output=True)
    _ip("link", "set", inside, "netns", name)
    _ip("addr", "add", f"{gateway}/30", "dev", outside)
    _ip("link", "set", outside, "up")
    _ip("-n", name, "addr", "add", f"{address}/30", "dev", inside)
    _ip("-n", name, "link", "set", inside, "up")
    _ip("-n", name, "link", "set", "lo", "up")
    return NetnsHost(name, address, gateway)
