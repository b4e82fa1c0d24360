"""Hosts for tests: Linux network namespaces joined by veth pairs.

``Hosts`` makes one namespace per host name: the first ("coord") holds a bridge with
address 10.77.0.1; every other host gets a veth pair, one end in its namespace with
10.77.0.N, the other on the bridge.  Each namespace has its own network stack
(interfaces, routes, loopback, ports): traffic between hosts crosses the veth links
and nothing else.  ``cut(host)`` / ``restore(host)`` take a host's link down and up.
Everything is removed by ``close`` (the fixture's finalizer), even after a failure.

Needs root and ``ip`` (iproute2); ``skip_reason`` says why not when they are missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid

SUBNET = "10.77.0"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20, check=check)


def skip_reason() -> str | None:
    if shutil.which("ip") is None:
        return "needs `ip` (iproute2) to build network namespaces"
    if os.geteuid() != 0:
        return "needs root to build network namespaces (ip netns add)"
    probe = f"lsprobe{uuid.uuid4().hex[:6]}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"cannot make a network namespace here: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


class Hosts:
    def __init__(self, names: list[str]) -> None:
        self.tag = uuid.uuid4().hex[:5]
        self.names = names
        self.ns = {name: f"ls{self.tag}{name}" for name in names}
        self.address: dict[str, str] = {}
        self._links: dict[str, str] = {}  # host -> its veth end on the bridge
        self._made: list[str] = []

    def build(self) -> "Hosts":
        coord, *others = self.names
        for name in self.names:
            _ip("netns", "add", self.ns[name])
            self._made.append(self.ns[name])
            _ip("-n", self.ns[name], "link", "set", "lo", "up")
        c = self.ns[coord]
        _ip("-n", c, "link", "add", "br0", "type", "bridge")
        _ip("-n", c, "addr", "add", f"{SUBNET}.1/24", "dev", "br0")
        _ip("-n", c, "link", "set", "br0", "up")
        self.address[coord] = f"{SUBNET}.1"
        for i, name in enumerate(others, start=2):
            inner, outer = f"v{self.tag}{i}", f"b{self.tag}{i}"  # under 15 characters
            _ip("link", "add", inner, "type", "veth", "peer", "name", outer)
            _ip("link", "set", inner, "netns", self.ns[name])
            _ip("link", "set", outer, "netns", c)
            _ip("-n", c, "link", "set", outer, "master", "br0")
            _ip("-n", c, "link", "set", outer, "up")
            _ip("-n", self.ns[name], "addr", "add", f"{SUBNET}.{i}/24", "dev", inner)
            _ip("-n", self.ns[name], "link", "set", inner, "up")
            self.address[name] = f"{SUBNET}.{i}"
            self._links[name] = outer
        return self

    def prefix(self, host: str) -> list[str]:
        """Prepend to a command to run it on ``host``."""
        return ["ip", "netns", "exec", self.ns[host]]

    def cut(self, host: str) -> None:
        _ip("-n", self.ns[self.names[0]], "link", "set", self._links[host], "down")

    def restore(self, host: str) -> None:
        _ip("-n", self.ns[self.names[0]], "link", "set", self._links[host], "up")

    def close(self) -> None:
        for ns in reversed(self._made):
            _ip("netns", "del", ns, check=False)  # its veth ends go with it
        self._made.clear()
