"""One list of each kind the scheduler needs, and a ClusterState built from it: the operator's
initial sync and the CLI's read-only view (capacity, explain) share this.

Objects are cut down page by page as they arrive (``slim_*``, ``ClaimInfo``), so that a listing of a
large cluster never holds every whole pod and claim at once."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from draxr.core import mappings_crd
from draxr.core.state import ClaimInfo, ClusterState, compact, slim_node, slim_pod, without_managed_fields
from draxr.kube import (
    CSI_DRIVERS,
    CSI_NODES,
    CSI_STORAGE_CAPACITIES,
    DEVICE_CLASSES,
    NODES,
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    PODS,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    STORAGE_CLASSES,
    VOLUME_ATTACHMENTS,
    Kube,
    Resource,
)
from draxr.mapping_status import list_mappings

JSON = dict[str, Any]
T = TypeVar("T")


@dataclass(frozen=True)
class Listing:
    nodes: list[JSON]  # slim_node
    slices: list[Mapping[str, Any]]  # without managedFields, compacted
    classes: list[Mapping[str, Any]]  # without managedFields
    claims: list[ClaimInfo]
    pods: list[Mapping[str, Any]]  # slim_pod: whole while schedulable, else the fields PodInfo reads
    mappings: list[JSON] | None  # None: the ExtendedResourceMapping CRD is not installed

    def apply(self, state: ClusterState, upsert_pod: Callable[[Any], object] | None = None) -> None:
        """Feed everything but the mappings into ``state``; pods through ``upsert_pod`` when given
        (the operator also queues them)."""
        for n in self.nodes:
            state.upsert_node(n)
        for s in self.slices:
            state.upsert_slice(s)
        for cls in self.classes:
            state.upsert_class(cls)
        for claim in self.claims:
            state.upsert_claim(claim)
        for p in self.pods:
            (upsert_pod or state.upsert_pod)(p)


async def _list(kube: Kube, res: Resource, keep: Callable[[JSON], T]) -> list[T]:
    kept: list[T] = []
    async for page in kube.pages(res, limit=500):
        kept.extend(keep(obj) for obj in page)
    return kept


def _slim_slice(obj: JSON) -> Mapping[str, Any]:
    return dict(compact(without_managed_fields(obj)))


async def list_cluster(kube: Kube) -> Listing:
    nodes, slices, classes, claims, pods, mappings = await asyncio.gather(
        _list(kube, NODES, slim_node),
        _list(kube, RESOURCE_SLICES, _slim_slice),
        _list(kube, DEVICE_CLASSES, without_managed_fields),
        _list(kube, RESOURCE_CLAIMS, ClaimInfo.from_api),
        _list(kube, PODS, slim_pod),
        list_mappings(kube),
    )
    return Listing(nodes, slices, classes, claims, pods, mappings)


async def load_storage(kube: Kube, state: ClusterState) -> None:
    """The volume plugins' objects (PVs, claims, classes, CSI objects) into ``state.storage``."""
    st = state.storage
    kinds: list[tuple[Resource, Callable[[Mapping[str, Any]], object]]] = [
        (PERSISTENT_VOLUMES, st.upsert_pv),
        (PERSISTENT_VOLUME_CLAIMS, st.upsert_pvc),
        (STORAGE_CLASSES, st.upsert_class),
        (CSI_NODES, st.upsert_csi_node),
        (CSI_DRIVERS, st.upsert_csi_driver),
        (CSI_STORAGE_CAPACITIES, st.upsert_capacity),
        (VOLUME_ATTACHMENTS, st.upsert_attachment),
    ]
    listed = await asyncio.gather(*(_list(kube, res, without_managed_fields) for res, _ in kinds))
    for (_, upsert), objs in zip(kinds, listed, strict=True):
        for obj in objs:
            upsert(obj)


async def load_state(kube: Kube, *, storage: bool = False) -> ClusterState:
    """``storage``: also the volume plugins' objects (``draxr explain``; ``draxr capacity`` needs none)."""
    listing = await list_cluster(kube)
    state = ClusterState()
    if storage:
        await load_storage(kube, state)
    listing.apply(state)
    state.extended.set_overrides(mappings_crd.overrides(mappings_crd.parse_all(listing.mappings or ())))
    return state
