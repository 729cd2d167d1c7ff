"""NodeResourcesFit's count of a DRA-served extended resource on a node, for scoring
(resource_allocation.go calculateDRAResourceTotals): the devices the resource's DeviceClass
matches on the node, and how many of them are allocated (in-flight allocations included)."""

from __future__ import annotations

from draxr.core.allocator import Allocator, Features
from draxr.core.plugins.node_resources_fit import DraTotals
from draxr.core.state import ClusterState, NodeInfo


def dra_totals(state: ClusterState, features: Features) -> DraTotals:
    """The counter for one cycle; the allocator (an allocated-devices snapshot) is built on first use."""
    allocator: Allocator | None = None

    def totals(node: NodeInfo, resource_name: str) -> tuple[int, int]:
        nonlocal allocator
        class_name = state.mapping.class_for(resource_name)
        if class_name is None:
            return 0, 0
        if allocator is None:
            allocator = Allocator(state.inventory, state.allocated(), features)
        found = allocator.matching_devices(node.raw, class_name)
        allocated = allocator.allocated
        return len(found), sum(1 for d in found if allocated.is_device_allocated(d))

    return totals
