"""draxr run embedded in the test's event loop, stopped cleanly afterwards."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from draxr.app import Operator, connect
from draxr.kube import Kube
from draxr.settings import Settings


@contextlib.asynccontextmanager
async def embedded_operator(settings: Settings) -> AsyncIterator[tuple[Kube, Operator]]:
    """Yields the operator's own client and the operator once its initial sync is done."""
    kube, cfg = await connect(settings)
    op = Operator(settings, kube, cfg)
    stop = asyncio.Event()
    task = asyncio.create_task(op.run(stop))
    try:
        await asyncio.wait_for(op.synced.wait(), 60)
        yield kube, op
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)
        await kube.close()
