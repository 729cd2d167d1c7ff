"""Resource pools relevant to one node: upstream incubating GatherPools (pools_incubating.go, v0.37.2).

* A slice is relevant if its nodeName / allNodes / nodeSelector matches the node, or, with
  perDeviceNodeSelection, if any of its devices does. Slices with no known node selection are skipped.
* Per pool (driver, pool name) only the highest generation counts.
* Completeness via resourceSliceCount; if the relevant slices look incomplete, all slices of the
  pool are checked (a newer generation elsewhere makes the pool obsolete and it is dropped).
* Invalid pools (duplicate device names, duplicate counter sets, references to missing counter
  sets or counters) are kept, marked, and skipped by the search.
* Order: pools sorted by (driver, pool), pools with binding conditions last; slices by name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from draxr.core.allocator.features import Features
from draxr.core.allocator.model import SliceInfo
from draxr.core.allocator.nodeselector import NodeSelectorError, node_matches
from draxr.core.allocator.outcomes import AllocationFatalError, FatalKind
from draxr.core.quantity import Quantity

__all__ = ["Pool", "PoolId", "gather_pools", "gather_pools_ex"]

PoolId = tuple[str, str]  # (driver, pool name)


@dataclass(eq=False, slots=True)
class Pool:
    id: PoolId
    is_incomplete: bool = False
    is_invalid: bool = False
    invalid_reason: str = ""
    device_slices: list[SliceInfo] = field(default_factory=list)  # DeviceSlicesTargetingNode
    slices_not_targeting_node: list[SliceInfo] = field(default_factory=list)
    counter_sets: dict[str, dict[str, Quantity]] = field(default_factory=dict)

    @property
    def driver(self) -> str:
        return self.id[0]

    @property
    def name(self) -> str:
        return self.id[1]


def _node_error(what: str, exc: NodeSelectorError) -> AllocationFatalError:
    return AllocationFatalError(f"gather pool information: {what}: {exc}", FatalKind.INVALID_NODE_SELECTOR)


def _relevant(slice_: SliceInfo, node: Mapping[str, Any]) -> bool | None:
    """True/False, or None for a slice with no node selection this version knows."""
    if slice_.node_name or slice_.all_nodes or slice_.node_selector is not None:
        try:
            return node_matches(node, slice_.node_name, slice_.all_nodes, slice_.node_selector)
        except NodeSelectorError as exc:
            raise _node_error(f"failed to perform node selection for slice {slice_.name}", exc) from exc
    if slice_.per_device_node_selection:
        for dev in slice_.devices:
            try:
                if node_matches(node, dev.node_name, dev.all_nodes, dev.node_selector):
                    return True
            except NodeSelectorError as exc:
                raise _node_error(
                    f"failed to perform node selection for device {dev.name} in slice {slice_.name}", exc
                ) from exc
        return False
    return None


def _ignored(slice_: SliceInfo, features: Features) -> bool:
    if not features.partitionable_devices and (
        slice_.per_device_node_selection is not None or len(slice_.shared_counters) > 0
    ):
        return True
    # Without DRADeviceCompatibilityGroups such slices are ignored, which leaves their pool incomplete.
    return not features.compatibility_groups and slice_.uses_compatibility_groups


def gather_pools(
    slices_for_node: Sequence[SliceInfo],
    node: Mapping[str, Any],
    features: Features,
    all_slices: Sequence[SliceInfo],
) -> list[Pool]:
    """Upstream GatherPools. `slices_for_node` is the node's own slices followed by all slices without nodeName."""
    return gather_pools_ex(slices_for_node, node, features, all_slices)[0]


def gather_pools_ex(
    slices_for_node: Sequence[SliceInfo],
    node: Mapping[str, Any],
    features: Features,
    all_slices: Sequence[SliceInfo],
) -> tuple[list[Pool], bool]:
    """gather_pools, plus whether slices not listed for the node were consulted (for caching)."""
    used_all = False
    groups: dict[PoolId, list[SliceInfo]] = {}
    for s in slices_for_node:
        if _ignored(s, features):
            continue
        if not _relevant(s, node):
            continue
        pid = (s.driver, s.pool)
        current = groups.get(pid)
        if current is None or s.generation > current[0].generation:
            groups[pid] = [s]
        elif s.generation == current[0].generation:
            current.append(s)

    result: list[Pool] = []
    with_binding: list[Pool] = []
    for pid, pool_slices in groups.items():
        wanted = pool_slices[0].resource_slice_count
        if len(pool_slices) == wanted:
            pool = _build_pool(pid, pool_slices, features, None)
        else:
            used_all = True
            obsolete, all_for_pool = _check_slices_in_pool(all_slices, pid, pool_slices[0].generation)
            if obsolete:
                continue
            if not features.compatibility_groups:
                all_for_pool = [s for s in all_for_pool if not s.uses_compatibility_groups]
            if len(all_for_pool) != wanted:
                result.append(Pool(id=pid, is_incomplete=True))
                continue
            pool = _build_pool(pid, pool_slices, features, all_for_pool)
        (with_binding if _has_binding_conditions(pool) else result).append(pool)

    result.sort(key=lambda p: p.id)
    with_binding.sort(key=lambda p: p.id)
    return result + with_binding, used_all


def _check_slices_in_pool(
    all_slices: Sequence[SliceInfo], pid: PoolId, generation: int
) -> tuple[bool, list[SliceInfo]]:
    found: list[SliceInfo] = []
    for s in all_slices:
        if s.driver != pid[0] or s.pool != pid[1]:
            continue
        if s.generation == generation:
            found.append(s)
        elif s.generation > generation:
            return True, []
    return False, found


def _build_pool(pid: PoolId, slices: list[SliceInfo], features: Features, all_for_pool: list[SliceInfo] | None) -> Pool:
    slices = sorted(slices, key=lambda s: s.name)
    device_slices: list[SliceInfo] = []
    counter_slices: list[SliceInfo] = []
    not_targeting: list[SliceInfo] = []
    for s in slices:
        (counter_slices if features.partitionable_devices and s.shared_counters else device_slices).append(s)
    if all_for_pool is not None and len(slices) < len(all_for_pool):
        names = {s.name for s in slices}
        for s in all_for_pool:
            if s.name in names:
                continue
            (counter_slices if features.partitionable_devices and s.shared_counters else not_targeting).append(s)

    seen: set[str] = set()
    for s in device_slices:
        for d in s.devices:
            if d.name in seen:
                return Pool(id=pid, is_invalid=True, invalid_reason=f"duplicate device name {d.name}")
            seen.add(d.name)

    if not features.partitionable_devices:
        return Pool(id=pid, device_slices=device_slices)

    counter_sets: dict[str, dict[str, Quantity]] = {}
    for s in counter_slices:
        for cs_name, counters in s.shared_counters:
            if cs_name in counter_sets:
                return Pool(id=pid, is_invalid=True, invalid_reason=f"duplicate counter set name {cs_name}")
            counter_sets[cs_name] = counters

    for group in (device_slices, not_targeting):
        reason = _validate_counter_consumption(counter_sets, group)
        if reason:
            return Pool(id=pid, is_invalid=True, invalid_reason=reason)

    return Pool(id=pid, device_slices=device_slices, slices_not_targeting_node=not_targeting, counter_sets=counter_sets)


def _validate_counter_consumption(counter_sets: dict[str, dict[str, Quantity]], slices: list[SliceInfo]) -> str:
    for s in slices:
        for d in s.devices:
            for cs_name, counters in d.consumes_counters:
                cs = counter_sets.get(cs_name)
                if cs is None:
                    return f"counter set {cs_name} not found"
                for counter, _ in counters:
                    if counter not in cs:
                        return f"counter {counter} not found in counter set {cs_name}"
    return ""


def _has_binding_conditions(pool: Pool) -> bool:
    return any(d.binding_conditions is not None for s in pool.device_slices for d in s.devices)
