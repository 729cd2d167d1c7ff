"""Python's cyclic garbage collector and the cluster view draxr keeps for its lifetime.

What draxr keeps (pods, claims, nodes, slices: some 90,000 objects with 40,000 bound pods) is
acyclic and freed by reference counting when the API server deletes it. The cyclic collector
still walks all of it in every full collection, which it runs whenever the tracked objects have
grown by a quarter: a dozen times while the watches list, and then about a second each time a
burst has grown the heap again. So, for the process that runs draxr (not for code that embeds it):
the collector is off while the watches list (for at most ``SYNC_GC_OFF_SECONDS``), and what the
initial sync built is frozen (``gc.freeze``: left out of every later collection) when it ends.
"""

from __future__ import annotations

import asyncio
import gc

from draxr import logs

log = logs.get(__name__)

SYNC_GC_OFF_SECONDS = 60.0  # a sync that takes longer (an API server down) collects garbage as usual


class ProcessHeap:
    """The collector's settings around the initial sync."""

    def __init__(self, off_seconds: float = SYNC_GC_OFF_SECONDS) -> None:
        self.off_seconds = off_seconds
        self._paused = False
        self._timer: asyncio.TimerHandle | None = None

    def sync_started(self) -> None:
        if not gc.isenabled():
            return  # (someone else manages it)
        gc.disable()
        self._paused = True
        self._timer = asyncio.get_running_loop().call_later(self.off_seconds, self._resume)

    def _resume(self) -> None:
        if self._paused:
            self._paused = False
            gc.enable()
            log.info("initial sync still running: garbage collection back on", after_seconds=self.off_seconds)

    def sync_done(self) -> None:
        """Freeze what the sync built (the cluster view) and turn the collector back on. No
        collection first: it took 0.8 s with 40,000 bound pods, in the way of leading, and found
        nothing (a sync makes no cyclic garbage; what a failing one makes in its first
        ``off_seconds`` is all that could be frozen with it)."""
        if self._timer is not None:
            self._timer.cancel()
        gc.freeze()
        if self._paused:
            self._paused = False
            gc.enable()
        log.info("heap frozen after the initial sync", objects=gc.get_freeze_count())
