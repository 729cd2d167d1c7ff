"""Capacity per extended resource name and node: total / allocated / free, and who serves it (pure).

* DRA: on a node where the name is mapped (mapping CR or DeviceClass, the CR's nodeSelector
  permitting) and not advertised in allocatable, the devices of the node matching any of the
  mapping's classes (and the CR's extra selectors); allocated = held by any claim, also in-flight
  ones; one device counts once even if several classes match it.
* device plugin: on a node advertising the name in allocatable, allocatable minus the requests of
  the pods placed there (as NodeResourcesFit counts).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from draxr.core.allocator import DEFAULT_FEATURES, Allocator, Features
from draxr.core.allocator.nodeselector import NodeSelectorError, selector_matches
from draxr.core.mapping import DEVICE_CLASS_PREFIX
from draxr.core.state import ClusterState, NodeInfo

__all__ = [
    "DEVICE_PLUGIN",
    "DRA",
    "NodeCapacity",
    "Summary",
    "cluster_capacity",
    "dra_capacity",
    "iter_cluster_capacity",
    "summarize",
]

ServedBy = Literal["DRA", "device plugin"]
DRA: ServedBy = "DRA"
DEVICE_PLUGIN: ServedBy = "device plugin"


@dataclass(frozen=True)
class NodeCapacity:
    resource_name: str
    node: str
    served_by: ServedBy
    total: int
    allocated: int
    classes: tuple[str, ...] = ()  # DRA: the classes whose devices count

    @property
    def free(self) -> int:
        return max(self.total - self.allocated, 0)


@dataclass(frozen=True)
class Summary:
    total: int
    allocated: int
    free: int
    nodes: int

    def to_status(self) -> dict[str, int]:
        return {"total": self.total, "allocated": self.allocated, "free": self.free, "nodes": self.nodes}


def summarize(rows: Iterable[NodeCapacity]) -> Summary:
    rows = list(rows)
    return Summary(
        total=sum(r.total for r in rows),
        allocated=sum(r.allocated for r in rows),
        free=sum(r.free for r in rows),
        nodes=sum(1 for r in rows if r.total > 0),
    )


def _selects(node_selector: Mapping[str, Any] | None, node: NodeInfo) -> bool:
    if node_selector is None:
        return True
    try:
        return selector_matches(node_selector, node.raw)
    except NodeSelectorError:
        return False


def dra_capacity(
    state: ClusterState,
    resource_name: str,
    class_names: Sequence[str],
    selectors: Sequence[str] = (),
    node_selector: Mapping[str, Any] | None = None,
    *,
    features: Features = DEFAULT_FEATURES,
    allocator: Allocator | None = None,
) -> list[NodeCapacity]:
    """Per node where DRA would serve ``resource_name`` with these classes: matching devices and how
    many are allocated. Nodes without a matching device are left out."""
    found = _iter_dra(state, resource_name, class_names, selectors, node_selector, features, allocator)
    return [r for r in found if r is not None]


def _iter_dra(
    state: ClusterState,
    resource_name: str,
    class_names: Sequence[str],
    selectors: Sequence[str],
    node_selector: Mapping[str, Any] | None,
    features: Features,
    allocator: Allocator | None,
) -> Iterator[NodeCapacity | None]:
    """dra_capacity's rows, and None for each node looked at without a row (see iter_cluster_capacity)."""
    alloc = allocator or Allocator(state.inventory, state.allocated(), features)
    allocated = alloc.allocated
    for name in sorted(state.nodes):
        node = state.nodes.get(name)  # (a caller that pauses between nodes may see one go)
        if node is None or resource_name in node.device_plugin_names or not _selects(node_selector, node):
            yield None
            continue
        devices: dict[tuple[str, str, str], None] = {}
        used: list[str] = []
        for cls in class_names:
            found = alloc.matching_devices(node.raw, cls, selectors)
            if found:
                used.append(cls)
            devices.update(dict.fromkeys(found))
        if not devices:
            yield None
            continue
        taken = sum(1 for d in devices if allocated.is_device_allocated(d))
        yield NodeCapacity(resource_name, name, DRA, len(devices), taken, tuple(used))


def device_plugin_capacity(state: ClusterState, resource_name: str) -> list[NodeCapacity]:
    rows: list[NodeCapacity] = []
    for name in sorted(state.nodes):
        node = state.nodes[name]
        if resource_name not in node.device_plugin_names:
            continue
        usage = state.usage.get(name)
        taken = usage.requested.get(resource_name, 0) if usage is not None else 0
        rows.append(NodeCapacity(resource_name, name, DEVICE_PLUGIN, node.allocatable.get(resource_name, 0), taken))
    return rows


def cluster_capacity(
    state: ClusterState,
    names: Iterable[str] | None = None,
    *,
    include_implicit: bool = False,
    features: Features = DEFAULT_FEATURES,
) -> list[NodeCapacity]:
    """Rows for ``names`` (default: every mapped name, from CRs and DeviceClasses, plus every
    extended resource some node advertises; implicit `deviceclass.resource.kubernetes.io/` names
    only with ``include_implicit``), sorted by name, then DRA before device plugin, then node."""
    found = iter_cluster_capacity(state, names, include_implicit=include_implicit, features=features)
    return [r for r in found if r is not None]


def iter_cluster_capacity(
    state: ClusterState,
    names: Iterable[str] | None = None,
    *,
    include_implicit: bool = False,
    features: Features = DEFAULT_FEATURES,
) -> Iterator[NodeCapacity | None]:
    """cluster_capacity's rows one by one, with a None for every node looked at that has no row of
    that name: a caller may pause at any item (the shell's scrape-time metrics hand the event loop
    back between nodes; a cold class-match cache costs a CEL evaluation per device)."""
    if names is None:
        wanted = {n for n in state.mapping.names if include_implicit or not n.startswith(DEVICE_CLASS_PREFIX)}
        for node in state.nodes.values():
            wanted |= node.device_plugin_names
    else:
        wanted = set(names)
    alloc = Allocator(state.inventory, state.allocated(), features)
    for name in sorted(wanted):
        resolved = state.mapping.lookup(name)
        if resolved is not None:
            selectors = [str(s) for s in resolved.selectors] if resolved.source == "override" else []
            yield from _iter_dra(state, name, resolved.class_names, selectors, resolved.node_selector, features, alloc)
        yield from device_plugin_capacity(state, name)
