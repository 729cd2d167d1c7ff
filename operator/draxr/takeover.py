"""What a new leader does before its first rollback or decision: catch up with the API server.

A standby's watches may lag, or be backing off after a dropped connection, at the moment it takes
the lease over; the claims and bindings the previous leader wrote in that gap are then missing
from its view. Deciding on it double-allocates devices (a claim it has not seen holds them) and
rolls back claims of pods it wrongly believes unbound. So the new leader lists the claims, then
the pods (consistent reads, in that order: a pod seen bound has its claim in the state already),
and hands every object to the informer as if its watch had delivered it: the state ignores
versions older than what it holds, and the informer knows the objects for its next re-list.
Found by bench/chaos.py (drop-all, then a failover: a device in two claims).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from draxr import logs
from draxr.kube import Kube
from draxr.loops import Backoff, GuardedLoop
from draxr.watch import Informer

log = logs.get("draxr.takeover")
CATCH_UP = ("resourceclaims", "pods")


async def catch_up(
    kube: Kube, informers: Sequence[Informer], scheduler_name: str | None = None, page_size: int = 500
) -> int:
    """List the kinds of ``CATCH_UP`` into their informers (only the pods of ``scheduler_name``
    when given: the ones draxr binds and rolls back); retried until it succeeds (losing the
    lease meanwhile cancels it; an error that is no API hiccup ends the process after a few tries,
    as in every loop). Returns the number of objects listed."""
    by_name = {inf.name: inf for inf in informers}
    guard = GuardedLoop("catch-up", backoff=Backoff(0.5, 5.0))
    while True:
        try:
            seen = 0
            for name in CATCH_UP:
                inf = by_name[name]
                query: dict[str, Any] = {"limit": page_size}
                if name == "pods" and scheduler_name:
                    query["fieldSelector"] = f"spec.schedulerName={scheduler_name}"
                async for page in kube.pages(inf.target.resource, **query):
                    for obj in page:
                        inf.apply(obj)  # the informer's own dispatch (state, queue, known objects)
                    seen += len(page)
                    await asyncio.sleep(0)
            log.info("caught up with the API server", objects=seen)
            return seen
        except Exception as e:
            await asyncio.sleep(guard.failed(e))
