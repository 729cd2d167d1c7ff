"""One list of each kind the scheduler needs, and a ClusterState built from it: the operator's
initial sync and the CLI's read-only view (capacity, explain) share this."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from draxr.core import mappings_crd
from draxr.core.state import ClusterState
from draxr.kube import DEVICE_CLASSES, NODES, PODS, RESOURCE_CLAIMS, RESOURCE_SLICES, Kube
from draxr.mapping_status import list_mappings

JSON = dict[str, Any]


@dataclass(frozen=True)
class Listing:
    nodes: list[JSON]
    slices: list[JSON]
    classes: list[JSON]
    claims: list[JSON]
    pods: list[JSON]
    mappings: list[JSON] | None  # None: the ExtendedResourceMapping CRD is not installed

    def apply(self, state: ClusterState, upsert_pod: Callable[[JSON], object] | None = None) -> None:
        """Feed everything but the mappings into ``state``; pods through ``upsert_pod`` when given
        (the operator also queues them)."""
        for n in self.nodes:
            state.upsert_node(n)
        for s in self.slices:
            state.upsert_slice(s)
        for c in self.classes:
            state.upsert_class(c)
        for c in self.claims:
            state.upsert_claim(c)
        for p in self.pods:
            (upsert_pod or state.upsert_pod)(p)


async def list_cluster(kube: Kube) -> Listing:
    nodes, slices, classes, claims, pods, mappings = await asyncio.gather(
        kube.list(NODES, limit=500),
        kube.list(RESOURCE_SLICES, limit=500),
        kube.list(DEVICE_CLASSES, limit=500),
        kube.list(RESOURCE_CLAIMS, limit=500),
        kube.list(PODS, limit=500),
        list_mappings(kube),
    )
    return Listing(nodes, slices, classes, claims, pods, mappings)


async def load_state(kube: Kube) -> ClusterState:
    listing = await list_cluster(kube)
    state = ClusterState()
    listing.apply(state)
    state.set_overrides(mappings_crd.overrides(mappings_crd.parse_all(listing.mappings or ())))
    return state
