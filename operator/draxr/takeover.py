"""What a new leader does before its first rollback or decision: catch up with the API server.

A standby's watches may lag, or be backing off after a dropped connection, at the moment it takes
the lease over; the claims and bindings the previous leader wrote in that gap are then missing
from its view. Deciding on it double-allocates devices (a claim it has not seen holds them) and
rolls back claims of pods it wrongly believes unbound. So the new leader lists the claims, then
the pods (consistent reads, in that order: a pod seen bound has its claim in the state already),
and hands every object to the informer as if its watch had delivered it: the state ignores
versions older than what it holds, and the informer knows the objects for its next re-list.
Found by bench/chaos.py (drop-all, then a failover: a device in two claims).

A kind needs no catch-up when its informer's last complete list was sent after ``quiet_since``,
the moment from which no other leader can have written: that list is itself a consistent read
holding every earlier write, and what the watch delivered since is only newer. ``quiet_since`` is
known in two cases (``app``): without leader election (one replica by contract: the process's
start), and when the lease this replica acquired is the very record it read, released, before its
informers listed (a clean restart: the previous leader drained its writes before releasing, and no
one held the lease in between). A takeover from a live, crashed or frozen leader, or from a
standby whose lists are older than the previous leader's last term, always lists (the chaos run's
case). At 40,000 bound pods the catch-up is ~80,000 objects in pages of 500: 49 s on a loaded
API server (bench/NOTEBOOK.md, "Scale"), which a clean restart no longer pays.
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


def up_to_date(inf: Informer, quiet_since: float | None) -> bool:
    """The informer's last complete list was sent once no other leader could write any more."""
    return quiet_since is not None and inf.listed_since is not None and inf.listed_since >= quiet_since


async def catch_up(
    kube: Kube,
    informers: Sequence[Informer],
    scheduler_name: str | None = None,
    page_size: int = 500,
    quiet_since: float | None = None,
) -> int:
    """List the kinds of ``CATCH_UP`` into their informers (only the pods of ``scheduler_name``
    when given: the ones draxr binds and rolls back), but for those ``up_to_date`` with
    ``quiet_since``; retried until it succeeds (losing the lease meanwhile cancels it; an error
    that is no API hiccup ends the process after a few tries, as in every loop). Returns the
    number of objects listed."""
    by_name = {inf.name: inf for inf in informers}
    kinds = [name for name in CATCH_UP if not up_to_date(by_name[name], quiet_since)]
    skipped = [name for name in CATCH_UP if name not in kinds]
    if skipped:
        log.info("listed since no other leader could write: no catch-up for", kinds=skipped)
    guard = GuardedLoop("catch-up", backoff=Backoff(0.5, 5.0))
    while True:
        try:
            seen = 0
            for name in kinds:
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
