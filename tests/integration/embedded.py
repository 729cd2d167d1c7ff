"""draxr run embedded in the test's event loop, stopped cleanly afterwards."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import AsyncIterator
from typing import Any

from kubernetes_asyncio import client

from draxr.app import Operator, connect
from draxr.kube import Kube
from draxr.settings import Settings


def fast_settings(**overrides: Any) -> Settings:
    """Settings of an operator under test: no fixed ports, quick retries, console logs; what the
    test passes wins."""
    base: dict[str, Any] = {
        "metrics_port": 0,
        "health_port": 0,
        "backoff_initial_seconds": 0.2,
        "log_format": "console",
    }
    return Settings(**{**base, **overrides})


@contextlib.asynccontextmanager
async def embedded_operator(settings: Settings) -> AsyncIterator[tuple[Kube, Operator]]:
    """Yields a client with the operator's configuration (its identity) and the operator once its
    initial sync is done. Not the operator's own client: that one refuses writes while the
    operator does not lead (the leader's fence), and the test's writes must not depend on it."""
    kube, cfg = await connect(settings)
    op = Operator(settings, kube, cfg)
    mine = Kube(client.ApiClient(cfg))
    stop = asyncio.Event()
    task = asyncio.create_task(op.run(stop))
    try:
        await asyncio.wait_for(op.synced.wait(), 60)
        yield mine, op
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)
        await mine.close()
        await kube.close()


@contextlib.asynccontextmanager
async def long_backoff_operator(
    kubeconfig: str, scheduler_name: str, backoff: float
) -> AsyncIterator[tuple[Kube, Operator]]:
    """An operator of its own scheduler name whose every backoff and flush lasts ``backoff``: a pod
    it retries within the test was moved by an event, not by a timer."""
    settings = fast_settings(
        kubeconfig=kubeconfig,
        scheduler_name=scheduler_name,
        leader_elect=False,
        backoff_initial_seconds=backoff,
        backoff_max_seconds=backoff,
        unschedulable_flush_seconds=backoff,
    )
    async with embedded_operator(settings) as running:
        yield running


class OperatorThread:
    """draxr on an event loop and thread of its own, as a deployed operator runs: never frozen by
    the test process's synchronous code (a fixture starting a control plane, a run of sync tests,
    a ``helm`` subprocess). On the test's loop such a pause outlasts the renew deadline, the
    operator loses its lease and ends, and every later test of the session fails for it.

    It is not restarted when it ends: ``problem()`` says why, and the session's fixtures fail the
    next test that needs it with that reason. A test module that lends its names (its Lease, its
    webhook port) to draxr's own pods ``pause()``s it, a clean stop that gives the Lease up, and
    ``restart()``s it afterwards on the same thread and loop; while paused, ``problem()`` says so."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="draxr-embedded", daemon=True)
        self._stop: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._kube: Kube | None = None
        self.operator: Operator | None = None
        self.paused: str | None = None  # why, while paused

    def start(self, timeout: float = 90) -> Operator:
        """Blocks until the operator's initial sync is done (call it with ``asyncio.to_thread``)."""
        self.thread.start()
        return self._call(self._start(), timeout)

    def _call(self, coro: Any, timeout: float) -> Any:
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise

    async def _start(self) -> Operator:
        self._kube, cfg = await connect(self.settings)
        op = Operator(self.settings, self._kube, cfg)
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(op.run(self._stop), name="embedded-operator")
        synced = asyncio.create_task(op.synced.wait())
        await asyncio.wait([self._task, synced], timeout=60, return_when=asyncio.FIRST_COMPLETED)
        if not synced.done():
            synced.cancel()
            raise RuntimeError(f"the embedded operator did not sync: {self.problem() or 'timed out after 60 s'}")
        self.operator = op
        return op

    def pause(self, why: str, timeout: float = 90) -> None:
        """Stop the operator cleanly (it releases its Lease and closes its servers and clients) and
        keep the thread and loop for ``restart()``. Raises if it does not end within ``timeout``."""
        self._call(self._stop_operator(), timeout)
        assert self._task is None or self._task.done(), "the embedded operator did not stop"
        self.paused = why

    def restart(self, timeout: float = 90) -> Operator:
        """A new operator with the same settings, once ``pause()`` (or its own end) stopped the last
        one; blocks until its initial sync is done (call it with ``asyncio.to_thread``)."""
        if self._task is not None and not self._task.done():
            raise RuntimeError("the embedded operator still runs: pause() it first")
        if not self.thread.is_alive():
            raise RuntimeError("the embedded operator's thread ended")
        self.operator = None
        self._task = None
        self.paused = None
        return self._call(self._start(), timeout)

    def problem(self) -> str | None:
        """None while the operator runs; else why it ended (or that it is paused)."""
        if not self.thread.is_alive():
            return "its thread ended"
        if self.paused is not None:
            return f"it is paused: {self.paused}"
        task = self._task
        if task is None or not task.done():
            return None
        if task.cancelled():
            return "its task was cancelled"
        error = task.exception()
        if error is not None:
            return f"it failed: {error!r}"
        lost = self.operator is not None and self.operator.lost_leadership
        return "it lost its lease and stopped leading" if lost else "it returned"

    def tasks(self) -> set[asyncio.Task[Any]]:
        """The operator loop's tasks (read from the test's thread)."""
        return asyncio.all_tasks(self.loop)

    def stop(self, timeout: float = 90) -> None:
        try:
            if self.thread.is_alive():
                self._call(self._shutdown(), timeout)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout)
            if not self.thread.is_alive():
                self.loop.close()

    async def _shutdown(self) -> None:
        await self._stop_operator()

    async def _stop_operator(self) -> None:
        if self._stop is not None and self._task is not None:
            self._stop.set()
            await asyncio.wait([self._task], timeout=60)
            if self._task.done() and not self._task.cancelled():
                self._task.exception()  # retrieved here: problem() reported it
        if self._kube is not None:
            await self._kube.close()
            self._kube = None
