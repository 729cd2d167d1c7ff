"""A one-shot ClusterState from one list of each kind: the CLI's read-only view (capacity, explain)."""

from __future__ import annotations

import asyncio

from draxr.core import mappings_crd
from draxr.core.state import ClusterState
from draxr.kube import DEVICE_CLASSES, NODES, PODS, RESOURCE_CLAIMS, RESOURCE_SLICES, Kube
from draxr.mapping_status import list_mappings


async def load_state(kube: Kube) -> ClusterState:
    nodes, slices, classes, claims, pods, mappings = await asyncio.gather(
        kube.list(NODES, limit=500),
        kube.list(RESOURCE_SLICES, limit=500),
        kube.list(DEVICE_CLASSES, limit=500),
        kube.list(RESOURCE_CLAIMS, limit=500),
        kube.list(PODS, limit=500),
        list_mappings(kube),
    )
    state = ClusterState()
    for n in nodes:
        state.upsert_node(n)
    for s in slices:
        state.upsert_slice(s)
    for c in classes:
        state.upsert_class(c)
    for c in claims:
        state.upsert_claim(c)
    for p in pods:
        state.upsert_pod(p)
    state.set_overrides(mappings_crd.overrides(mappings_crd.parse_all(mappings or ())))
    return state
