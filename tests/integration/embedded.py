"""draxr run embedded in the test's event loop, stopped cleanly afterwards."""

from __future__ import annotations

import asyncio
import contextlib
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
