"""A value that is replaced now and then, and the two ways to hear of it: the core both
inventories (GPUs and RDMA NICs) are built on, and :func:`follow_source`, which feeds a device
source's lists into one.

* **Waiters** (ListAndWatch streams) take :attr:`ChangeFeed.changed` *before* reading the value,
  then wait on it.  Each change sets the event the waiters hold and puts a new one in its place,
  so no change can slip between the read and the wait, and an event is never cleared under a
  waiter that has not woken yet.
* **Listeners** (metrics, the registration loop) are called with the new value at each change,
  synchronously, so they see changes in order and must not block.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Generic, Protocol, TypeVar

import structlog

__all__ = ["ChangeFeed", "Listener", "follow_source"]

log = structlog.get_logger("hami_deviceplugin")

T = TypeVar("T")
D = TypeVar("D", bound="_Device")

Listener = Callable[[T], None]


class ChangeFeed(Generic[T]):
    """Holds the current value; subclasses decide what counts as a change and call
    :meth:`_publish` once whatever they derive from the value is current."""

    def __init__(self, value: T) -> None:
        self._value = value
        self._version = 0
        self._changed = asyncio.Event()
        self._listeners: list[Listener[T]] = []

    @property
    def version(self) -> int:
        """How many changes there have been."""
        return self._version

    @property
    def changed(self) -> asyncio.Event:
        """Set at the next change (a new event object after each change)."""
        return self._changed

    def subscribe(self, listener: Listener[T]) -> None:
        """Call ``listener(value)`` now and after every change (it must not block)."""
        self._listeners.append(listener)
        listener(self._value)

    def _publish(self, value: T) -> None:
        self._value = value
        self._version += 1
        fired, self._changed = self._changed, asyncio.Event()
        fired.set()
        for listener in self._listeners:
            listener(value)


class _Device(Protocol):
    @property
    def healthy(self) -> bool: ...

    @property
    def reason(self) -> str: ...


async def follow_source(
    updates: AsyncIterator[tuple[D, ...]],
    replace: Callable[[tuple[D, ...]], bool],
    *,
    event: str,
    key: Callable[[D], str],
) -> None:
    """Hand every list ``updates`` yields to ``replace`` (an inventory's) and, when it is adopted,
    log ``event`` with the devices (named by ``key``) by health, until cancelled."""
    async for devices in updates:
        if replace(devices):
            log.info(
                event,
                healthy=[key(d) for d in devices if d.healthy],
                unhealthy={key(d): d.reason for d in devices if not d.healthy},
            )
