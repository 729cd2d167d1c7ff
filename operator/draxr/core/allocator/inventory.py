"""Long-lived view of ResourceSlices and DeviceClasses plus the caches that make allocation cheap.

The shell feeds watch events in (`upsert_slice`, `remove_slice`, `upsert_class`, ...). Parsed
slices, the pools gathered per node and the (class, device) selector matches survive across pods
and are invalidated precisely:
* pools per node: by the revision of that node's slices, of slices without nodeName, of the node
  labels, and (only for pools that needed the full-pool scan) of all slices;
* class-selector matches: keyed by the class's and the slice's (uid, resourceVersion), so a new
  version of either simply misses the cache. Objects without resourceVersion are never cached.

DeviceTaintRules (`upsert_taint_rule`, `remove_taint_rule`) are applied to the slices they select
as upstream's slice tracker does (`taint_rules`): every slice held is the slice with the rules'
taints, its unpatched form kept aside while a rule selects one of its devices.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from draxr.core.allocator.claim_requests import ClassInfo, parse_class
from draxr.core.allocator.features import Features
from draxr.core.allocator.model import SliceInfo, parse_slice
from draxr.core.allocator.pools import Pool, gather_pools_ex
from draxr.core.allocator.taint_rules import TaintRule, apply_taint_rules, parse_taint_rule

__all__ = ["Inventory"]

# Selector outcome: True / False, or (message, kind) of the error it raised.
MatchOutcome = bool | tuple[str, str]


@dataclass(slots=True)
class _PoolsEntry:
    labels: dict[str, str]
    node_rev: int
    shared_rev: int
    global_rev: int | None  # None: did not depend on slices of other nodes
    features: Features
    pools: list[Pool]


class Inventory:
    def __init__(
        self,
        slices: Iterable[Mapping[str, Any]] = (),
        classes: Iterable[Mapping[str, Any]] = (),
        on_node_change: Callable[[str], None] | None = None,
    ) -> None:
        # Told the node of every slice with nodeName that comes, goes or changes (see on_pool_change
        # of AllocationTracker: the same per-node caches).
        self.on_node_change = on_node_change
        self._ids = itertools.count()
        self._slices: dict[int, SliceInfo] = {}  # insertion order = "informer order"
        self._by_name: dict[str, int] = {}
        self._node_index: dict[str, dict[int, SliceInfo]] = {}
        self._shared_index: dict[int, SliceInfo] = {}
        self._node_rev: dict[str, int] = {}
        self._pool_nodes: dict[tuple[str, str], Counter[str]] = {}  # (driver, pool) -> nodes with its slices
        self._shared_rev = 0
        self.revision = 0
        self._classes: dict[str, ClassInfo] = {}
        self.class_revision = 0
        # DeviceTaintRules by name, and by the pool their selector names (None: any pool); the
        # slices a rule patches, unpatched (slice id -> SliceInfo as parsed).
        self._rules: dict[str, TaintRule] = {}
        self._rules_by_pool: dict[str | None, dict[str, TaintRule]] = {}
        self._unpatched: dict[int, SliceInfo] = {}
        self._pools: dict[str, _PoolsEntry] = {}
        self._local_devices: dict[str, tuple[int, int, tuple[tuple[str, str], ...]]] = {}
        self.class_matches: dict[tuple[tuple[str, str], tuple[str, str], int], MatchOutcome] = {}
        # (CEL expression, slice key, device index) -> whether it matches: classes share it.
        self.expression_matches: dict[tuple[str, tuple[str, str], int], bool] = {}
        # (node, class selectors) -> (pools the entry was computed for, features, matching devices
        # or None): classes with the same selectors share it.
        self.class_candidates: dict[
            tuple[str, tuple[str | None, ...]],
            tuple[list[Pool], Features, tuple[tuple[str, str, str], ...] | None],
        ] = {}
        for s in slices:
            # A plain list may contain the same name twice (upstream treats them as two slices).
            self._add(parse_slice(s))
        for c in classes:
            self.upsert_class(c)

    # -- slices -------------------------------------------------------------------------------

    def _add(self, info: SliceInfo) -> int:
        sid = next(self._ids)
        info = self._patched(sid, info)
        self._slices[sid] = info
        self._by_name[info.name] = sid
        self._index(sid, info, +1)
        return sid

    def _index(self, sid: int, info: SliceInfo, sign: int) -> None:
        if info.node_name:
            bucket = self._node_index.setdefault(info.node_name, {})
            if sign > 0:
                bucket[sid] = info
            else:
                bucket.pop(sid, None)
            self._node_rev[info.node_name] = self._node_rev.get(info.node_name, 0) + 1
            nodes = self._pool_nodes.setdefault((info.driver, info.pool), Counter())
            nodes[info.node_name] += sign
            if nodes[info.node_name] <= 0:
                del nodes[info.node_name]
                if not nodes:
                    del self._pool_nodes[(info.driver, info.pool)]
            if self.on_node_change is not None:
                self.on_node_change(info.node_name)
        else:
            if sign > 0:
                self._shared_index[sid] = info
            else:
                self._shared_index.pop(sid, None)
            self._shared_rev += 1
        self.revision += 1

    def upsert_slice(self, raw: Mapping[str, Any]) -> None:
        info = parse_slice(raw)
        sid = self._by_name.get(info.name)
        if sid is None:
            self._add(info)
            return
        self._replace(sid, self._patched(sid, info))

    def _replace(self, sid: int, info: SliceInfo) -> None:
        old = self._slices[sid]
        self._index(sid, old, -1)
        self._slices[sid] = info  # keeps its position, like an informer update
        self._index(sid, info, +1)

    def remove_slice(self, name: str) -> None:
        sid = self._by_name.pop(name, None)
        if sid is None:
            return
        old = self._slices.pop(sid)
        self._unpatched.pop(sid, None)
        self._index(sid, old, -1)

    # -- DeviceTaintRules ---------------------------------------------------------------------

    def _patched(self, sid: int, info: SliceInfo) -> SliceInfo:
        """``info`` (as parsed) with the taints of the rules that select its devices."""
        rules = [*self._rules_by_pool.get(info.pool, {}).values(), *self._rules_by_pool.get(None, {}).values()]
        patched = apply_taint_rules(info, sorted(rules, key=lambda r: r.name)) if rules else info
        if patched is info:
            self._unpatched.pop(sid, None)
        else:
            self._unpatched[sid] = info
        return patched

    def upsert_taint_rule(self, raw: Mapping[str, Any]) -> bool:
        """A DeviceTaintRule added or changed; True when some device's taints changed."""
        name = str((raw.get("metadata") or {}).get("name") or "")
        rule = parse_taint_rule(raw)
        old = self._rules.get(name)
        if rule == old:
            return False
        self._drop_rule(name)
        if rule is not None:
            self._rules[name] = rule
            self._rules_by_pool.setdefault(rule.pool, {})[name] = rule
        return self._resync(r for r in (old, rule) if r is not None)

    def remove_taint_rule(self, name: str) -> bool:
        """A DeviceTaintRule deleted; True when some device's taints changed."""
        old = self._drop_rule(name)
        return old is not None and self._resync((old,))

    def _drop_rule(self, name: str) -> TaintRule | None:
        old = self._rules.pop(name, None)
        if old is not None:
            by_pool = self._rules_by_pool[old.pool]
            del by_pool[name]
            if not by_pool:
                del self._rules_by_pool[old.pool]
        return old

    def _resync(self, rules: Iterable[TaintRule]) -> bool:
        """Patch again the slices these rules (as they were or are now) select: upstream's
        syncSlice for the slices of a rule event. True when some device's taints changed."""
        rules = tuple(rules)
        changed = False
        for sid, info in list(self._slices.items()):
            if not any(r.selects_slice(info) and any(r.selects(info, d) for d in info.devices) for r in rules):
                continue
            patched = self._patched(sid, self._unpatched.get(sid, info))
            if [d.taints for d in patched.devices] != [d.taints for d in info.devices]:
                self._replace(sid, patched)
                changed = True
        return changed

    @property
    def taint_rules(self) -> dict[str, TaintRule]:
        return dict(self._rules)

    @property
    def all_slices(self) -> list[SliceInfo]:
        return list(self._slices.values())

    def node_local_slices(self, node_name: str) -> list[SliceInfo]:
        """The slices with `nodeName` = this node (no shared ones)."""
        own = self._node_index.get(node_name)
        return list(own.values()) if own else []

    def node_local_devices(self, node_name: str) -> tuple[int, tuple[tuple[str, str], ...]]:
        """(devices, distinct (driver, pool) in slice order) of the node's own slices, cached per
        revision of that node's slices (device scoring asks for every candidate of every cycle)."""
        rev = self._node_rev.get(node_name, 0)
        hit = self._local_devices.get(node_name)
        if hit is not None and hit[0] == rev:
            return hit[1], hit[2]
        own = self._node_index.get(node_name)
        slices = own.values() if own else ()
        total = sum(len(sl.devices) for sl in slices)
        pools = tuple(dict.fromkeys((sl.driver, sl.pool) for sl in slices))
        self._local_devices[node_name] = (rev, total, pools)
        return total, pools

    @property
    def has_shared_slices(self) -> bool:
        """Some slice has no nodeName (network-attached or all-nodes pools): a node may then see
        pools whose allocations do not change its stamp (ClusterState.node_stamps)."""
        return bool(self._shared_index)

    def nodes_of_pool(self, driver: str, pool: str) -> Iterable[str]:
        """The nodes with a slice (nodeName set) of this pool."""
        return tuple(self._pool_nodes.get((driver, pool)) or ())

    def slices_for_node(self, node_name: str) -> list[SliceInfo]:
        """Upstream: slicesOnNode[node] followed by every slice without nodeName."""
        own = self._node_index.get(node_name)
        return [*(own.values() if own else ()), *self._shared_index.values()]

    # -- classes ------------------------------------------------------------------------------

    def upsert_class(self, raw: Mapping[str, Any]) -> None:
        info = parse_class(raw)
        self._classes[info.name] = info
        self.class_revision += 1

    def remove_class(self, name: str) -> None:
        if self._classes.pop(name, None) is not None:
            self.class_revision += 1

    def get_class(self, name: str) -> ClassInfo | None:
        return self._classes.get(name)

    # -- pools --------------------------------------------------------------------------------

    def pools_for_node(self, node: Mapping[str, Any], features: Features) -> list[Pool]:
        meta = node.get("metadata") or {}
        name = str(meta.get("name") or "")
        labels = meta.get("labels") or {}
        entry = self._pools.get(name)
        node_rev, shared_rev = self._node_rev.get(name, 0), self._shared_rev
        if (
            entry is not None
            and entry.node_rev == node_rev
            and entry.shared_rev == shared_rev
            and (entry.global_rev is None or entry.global_rev == self.revision)
            and entry.features == features
            and entry.labels == labels
        ):
            return entry.pools
        pools, used_all = gather_pools_ex(self.slices_for_node(name), node, features, self.all_slices)
        self._pools[name] = _PoolsEntry(
            dict(labels), node_rev, shared_rev, self.revision if used_all else None, features, pools
        )
        return pools

    def forget_node(self, name: str) -> None:
        self._pools.pop(name, None)
