"""The leader writes each ExtendedResourceMapping's status: conditions and live capacity.

Every ``interval`` seconds and soon after a change (a CR, class, slice or claim event nudges it),
at most once per ``min_gap`` seconds; a status is written (merge patch of the status subresource)
only when it differs from what the CR already shows.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from draxr import logs
from draxr.core.allocator import DEFAULT_FEATURES, Allocator, Features
from draxr.core.capacity import dra_capacity, summarize
from draxr.core.mappings_crd import GROUP, PLURAL, VERSION, desired_status, parse_all, status_changed
from draxr.core.state import ClusterState
from draxr.kube import ApiException, Kube, Resource, api_message
from draxr.loops import GuardedLoop

log = logs.get("draxr.mapping_status")

MAPPINGS = Resource(GROUP, VERSION, PLURAL, False)


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def list_mappings(kube: Kube) -> list[dict[str, Any]] | None:
    """All mapping CRs, or None when the CRD is not installed (the operator works without it)."""
    try:
        return await kube.list(MAPPINGS, limit=500)
    except ApiException as e:
        if e.status == 404:
            return None
        raise


class MappingStatusWriter:
    def __init__(
        self,
        kube: Kube,
        state: ClusterState,
        objects: Callable[[], Mapping[str, Mapping[str, Any]]],
        *,
        features: Features = DEFAULT_FEATURES,
        interval: float = 10.0,
        min_gap: float = 1.0,
        gone: Callable[[str], None] | None = None,
        unmatched: Callable[[str], list[str]] | None = None,
    ) -> None:
        self.kube = kube
        self.state = state
        self.objects = objects
        self.features = features
        self.interval = interval
        self.min_gap = min_gap
        self.gone = gone
        # Per resource name, its unmatched device-plugin IDs (draxr.migrator), for the names whose
        # class declares an identity.
        self.unmatched = unmatched
        self._wake = asyncio.Event()
        self._written: dict[str, tuple[str, dict[str, Any]]] = {}  # name -> (resourceVersion seen, status)

    def nudge(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        async def step() -> None:
            self._wake.clear()
            await self.write_once()

        async def pause() -> None:
            await asyncio.sleep(self.min_gap)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.interval):  # (not wait_for: see SchedulingQueue.pop)
                    await self._wake.wait()

        await GuardedLoop("mapping-status").run(step, pause)

    async def write_once(self) -> int:
        """One pass; returns how many statuses were written."""
        objs = dict(self.objects())
        if not objs:
            return 0
        crs = parse_all(objs.values())
        existing = frozenset(self.state.classes)
        now = now_rfc3339()
        written = 0
        for cr in crs:
            # Per CR: the allocated state is a view valid until the next change, and this loop awaits.
            alloc = Allocator(self.state.inventory, self.state.allocated(), self.features)
            rows = dra_capacity(
                self.state, cr.resource_name, cr.class_names, cr.selectors, cr.node_selector, allocator=alloc
            )
            ids = (
                self.unmatched(cr.resource_name)
                if self.unmatched and cr.resource_name in self.state.identities()
                else None
            )
            desired = desired_status(cr, crs, existing, summarize(rows).to_status(), now, ids)
            rv = str((objs[cr.name].get("metadata") or {}).get("resourceVersion") or "")
            last = self._written.get(cr.name)
            current = last[1] if last is not None and last[0] == rv else cr.status
            if not status_changed(current, desired):
                continue
            try:
                out = await self.kube.patch(MAPPINGS, cr.name, {"status": desired}, subresource="status")
            except ApiException as e:
                if e.status == 404:
                    self._written.pop(cr.name, None)
                    if self.gone is not None:
                        self.gone(cr.name)
                    continue
                log.warning("mapping status not written", mapping=cr.name, error=api_message(e))
                continue
            self._written[cr.name] = (str(out.get("metadata", {}).get("resourceVersion") or ""), desired)
            written += 1
            log.debug("mapping status written", mapping=cr.name, capacity=desired["capacity"])
        for name in set(self._written) - set(objs):
            del self._written[name]
        return written
