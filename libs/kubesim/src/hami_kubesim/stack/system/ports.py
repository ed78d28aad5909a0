"""Ports for processes a test starts: picked here, bound later by the child.

A port picked by binding port 0 comes from the kernel's ephemeral range, the same range every
outgoing connection's local port comes from: between the pick and the child's bind, a client
connection (the stack makes many) may take it, and the child dies with "address already in
use". Two picks may even return the same port, since the kernel starts each search at a random
place. So ports are picked below the ephemeral range (or above it when nothing is below), where
the kernel never puts a connection, from a random starting place per process (another test run
on the machine searches elsewhere), never the same one twice in a process, and each is checked
free by binding it.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path
from typing import Final

__all__ = ["free_port", "pickable_ports"]

_RANGE_FILE: Final = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LINUX_DEFAULT_RANGE: Final = (32768, 60999)
_LOWEST: Final = 10000
"""Below this, well-known and registered services are more likely to listen."""


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = (int(word) for word in _RANGE_FILE.read_text().split())
    except (OSError, ValueError):
        return _LINUX_DEFAULT_RANGE
    return low, high


def pickable_ports(ephemeral: tuple[int, int]) -> range:
    """The ports to pick from, outside the ``ephemeral`` range (inclusive bounds)."""
    low, high = ephemeral
    below = range(_LOWEST, low)
    above = range(high + 1, 65536)
    if len(below) >= 1000 or len(below) >= len(above):
        return below
    return above


class _Picker:
    def __init__(self) -> None:
        self._ports = pickable_ports(_ephemeral_range())
        self._next = random.randrange(len(self._ports)) if self._ports else 0
        self._handed_out: set[int] = set()

    def pick(self, host: str) -> int:
        for step in range(len(self._ports)):
            index = (self._next + step) % len(self._ports)
            port = self._ports[index]
            if port in self._handed_out or not _bindable(host, port):
                continue
            self._next = index + 1
            self._handed_out.add(port)
            return port
        # Nothing outside the ephemeral range is free: the kernel's pick is all there is.
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            return int(sock.getsockname()[1])


def _bindable(host: str, port: int) -> bool:
    # No SO_REUSEADDR: a port still in TIME_WAIT counts as taken, and is skipped.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


_picker: _Picker | None = None


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on now, that no connection will take meanwhile, and that this
    process has not handed out before."""
    global _picker  # noqa: PLW0603 - one picker per process, made on first use
    if _picker is None:
        _picker = _Picker()
    return _picker.pick(host)
