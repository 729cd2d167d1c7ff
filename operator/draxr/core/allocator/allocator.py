"""The search: a port of upstream's incubating allocator (allocator_incubating.go, v0.37.2).

Order of work, as upstream, so that the first solution found is the same one:
claims in order -> requests in spec order -> for firstAvailable each subrequest in order with a
full search of everything after it -> device slots 0..count-1 -> candidates in pool order
(pools sorted by driver/pool, binding-condition pools last) -> slices by name -> devices in
order. Within one request the next slot starts after the previous pick (combinations, not
permutations). Per candidate: in use? -> selectable (class CEL, request CEL, per-device node)
-> capacity -> counters -> taints -> constraints -> mark in use -> consumed capacity.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import draxr.core.cel as cel
from draxr.core.allocator import consumable_capacity as cap
from draxr.core.allocator.allocated_devices import AllocatedState
from draxr.core.allocator.claim_requests import ALL, EXACT_COUNT, ClassInfo, RequestInfo, claim_ref, parse_request
from draxr.core.allocator.constraints import Constraint, DistinctAttribute, MatchAttribute
from draxr.core.allocator.features import DEFAULT_FEATURES, Features, check_supported
from draxr.core.allocator.inventory import Inventory, MatchOutcome
from draxr.core.allocator.model import DeviceId, DeviceInfo, SliceInfo
from draxr.core.allocator.nodeselector import NodeSelectorError, node_matches
from draxr.core.allocator.outcomes import Allocated, AllocationFatalError, FatalKind, NodeFailure, NoFit
from draxr.core.allocator.pools import Pool, PoolId
from draxr.core.allocator.result import ChosenRequest, DeviceResult, build_result
from draxr.core.limits import ALLOCATION_RESULTS_MAX_SIZE
from draxr.core.quantity import Quantity

__all__ = ["Allocator", "Stats"]

MATCH_CACHE_LIMIT = 500_000  # cross-call cache entries before starting over
# The (class, device) outcomes: one entry per device and class (~110 B each; 5,000 x 8 devices and
# 25 classes would be 1,000,000), behind the per-(node, class) candidates and in front of the
# per-(expression, device) results that classes share, so a miss costs dict lookups, not CEL.
CLASS_MATCH_CACHE_LIMIT = 65_536


class _MaxSizeExceeded(Exception):
    """errAllocationResultMaxSizeExceeded: backtrack harder; never escapes allocate()."""


@dataclass(slots=True)
class _RequestData:
    request: RequestInfo
    parent: RequestInfo | None
    class_: ClassInfo
    num_devices: int = 0
    selected_sub: int = 0
    all_devices: list[tuple[DeviceInfo, SliceInfo, Pool]] = field(default_factory=list)

    def request_name(self) -> str:
        return f"{self.parent.name}/{self.request.name}" if self.parent else self.request.name


@dataclass(slots=True)
class Stats:
    allocate_one_calls: int = 0
    fast_path_rejections: int = 0
    fast_allocations: int = 0  # allocate() calls the fast path answered (see _Run._fast_allocate)


# Counter bookkeeping: pool -> counter set -> counter -> amount.
_Counters = dict[str, dict[str, Decimal]]


class Allocator:
    """One allocator per scheduling cycle of a pod, like upstream's NewAllocator.

    `allocate(node, claims)` may be called for many nodes. The allocated state is a snapshot; the
    inventory provides slices, classes and the caches shared across cycles.
    """

    def __init__(
        self,
        inventory: Inventory,
        allocated: AllocatedState | None = None,
        features: Features = DEFAULT_FEATURES,
        *,
        share_id: Callable[[], str] | None = None,
        fast_path: bool = True,
    ) -> None:
        check_supported(features)
        self.inventory = inventory
        self.allocated = allocated if allocated is not None else AllocatedState()
        self.features = features
        self.stats = Stats()
        self._share_id = share_id or (lambda: str(uuid.uuid4()))
        self._fast_path = fast_path
        # Upstream availableCounters: per pool, computed once per Allocator.
        self._available_counters: dict[PoolId, _Counters] = {}

    def allocate(self, node: Mapping[str, Any], claims: Sequence[Mapping[str, Any]]) -> Allocated | NoFit | NodeFailure:
        """Allocate all claims on `node`; raises AllocationFatalError for errors that concern the whole pod."""
        return _Run(self, node, claims).run()

    def cannot_fit(self, node: Mapping[str, Any], wanted: Mapping[str, int]) -> tuple[str, bool] | None:
        """(reason, static) when `node` surely lacks free devices for plain ExactCount requests of
        these classes (class name -> devices), from the cached (node, class) index; None when it may
        fit or the index cannot tell (then `allocate` decides). ``static``: the node has too few
        matching devices even when all are free, so only a slice or class change can alter that.
        Much cheaper than `allocate`; never rejects a node that `allocate` would accept."""
        run = _Run(self, node, ())
        run.pools = self.inventory.pools_for_node(node, self.features)
        if any(p.is_invalid for p in run.pools):
            return None
        allocated = self.allocated.allocated_devices
        for name, need in wanted.items():
            class_ = self.inventory.get_class(name)
            if class_ is None:
                return None  # allocate reports the missing class
            candidates = run._class_candidates(class_)
            if candidates is None:
                return None
            short = _shortfall(candidates, allocated, need, name, run.pools)
            if short is not None:
                return short, len(candidates) < need
        return None

    def matching_devices(
        self, node: Mapping[str, Any], class_name: str, selectors: Sequence[str] = ()
    ) -> tuple[DeviceId, ...]:
        """Devices of `node`'s usable pools that match the class (and these extra CEL selectors), for
        capacity reports: free or not. A device on which a selector fails (CEL error) is not counted;
        an unknown class matches nothing. Uses the cached (node, class) index when it can."""
        class_ = self.inventory.get_class(class_name)
        if class_ is None:
            return ()
        run = _Run(self, node, ())
        run.pools = self.inventory.pools_for_node(node, self.features)
        if not selectors:
            cached = run._class_candidates(class_)
            if cached is not None:
                return cached
        found: list[DeviceId] = []
        for pool in run.pools:
            if pool.is_incomplete or pool.is_invalid:
                continue
            for slice_ in pool.device_slices:
                for dev in slice_.devices:
                    if not self.features.device_binding_and_status and dev.binding_conditions:
                        continue
                    if run._class_outcome(class_, slice_, dev) is not True:
                        continue
                    try:
                        if selectors and not run._selectors_match(selectors, dev, "selector"):
                            continue
                        if slice_.per_device_node_selection and not node_matches(
                            node, dev.node_name, dev.all_nodes, dev.node_selector
                        ):
                            continue
                    except (AllocationFatalError, NodeSelectorError):
                        continue
                    found.append(dev.id)
        return tuple(found)


def _shortfall(
    candidates: Sequence[DeviceId], allocated: Collection[DeviceId], need: int, class_name: str, pools: Sequence[Pool]
) -> str | None:
    """The "cannot allocate" reason when fewer than ``need`` of the class's matching devices are
    free; None when enough are (counting stops at ``need``)."""
    free = 0
    for did in candidates:
        if did not in allocated:
            free += 1
            if free >= need:
                return None
    return (
        f"cannot allocate all claims: {need} device(s) of class {class_name} requested, "
        f"only {free} free and matching on this node{_incomplete_note(pools)}"
    )


def _incomplete_note(pools: Sequence[Pool]) -> str:
    """Why devices a driver publishes may be missing: its pool on this node is incomplete (fewer
    slices of the newest generation than resourceSliceCount), so none of them are offered yet."""
    names = [f"{p.driver}/{p.name}" for p in pools if p.is_incomplete]
    if not names:
        return ""
    return f" (incomplete resource pools, not used until all their slices are published: {', '.join(names)})"


class _Run:
    """State of one Allocate call (upstream's `allocator` struct)."""

    def __init__(self, owner: Allocator, node: Mapping[str, Any], claims: Sequence[Mapping[str, Any]]) -> None:
        self.o = owner
        self.f = owner.features
        self.node = node
        self.node_name = str((node.get("metadata") or {}).get("name") or "")
        self.claims = list(claims)
        self.claim_refs = [claim_ref(c) for c in self.claims]
        self.allocated = owner.allocated
        self.pools: list[Pool] = []
        self.request_data: dict[tuple[int, int, int], _RequestData] = {}
        self.constraints: list[list[Constraint]] = []
        self.match_cache: dict[tuple[DeviceId, int, int, int], bool] = {}
        self.allocating_devices: dict[DeviceId, set[int]] = {}
        self.allocating_capacity: dict[DeviceId, dict[str, Quantity]] = {}
        self.consumed_counters: dict[PoolId, _Counters] = {}
        self.results: list[list[DeviceResult]] = [[] for _ in self.claims]
        self.deepest: tuple[int, int] = (0, 0)
        self.fast_reason = ""

    # -- setup --------------------------------------------------------------------------------

    def run(self) -> Allocated | NoFit | NodeFailure:
        self.pools = self.o.inventory.pools_for_node(self.node, self.f)
        if self.o._fast_path:
            fast = self._fast_allocate()
            if fast is not None:
                self.o.stats.fast_allocations += 1
                return fast
        for ci, claim in enumerate(self.claims):
            self._validate_claim(ci, claim)

        if self.o._fast_path and self._fast_reject():
            self.o.stats.fast_path_rejections += 1
            return NoFit(self.fast_reason)

        try:
            done = self._allocate_one(0, 0, 0, 0, False, (0, 0, 0))
        except _MaxSizeExceeded:
            done = False
        if not done:
            invalid = [p for p in self.pools if p.is_invalid]
            if invalid:
                reasons = "; ".join(f"{p.driver}/{p.name}: {p.invalid_reason}" for p in invalid)
                return NodeFailure(f"invalid resource pools were encountered ({reasons})")
            return NoFit(self._no_fit_reason())
        return Allocated(
            tuple(
                build_result(
                    claim,
                    self._chosen_requests(ci, claim),
                    self.results[ci],
                    self.node_name,
                    claim_ref=self.claim_refs[ci],
                    binding_conditions=self.f.device_binding_and_status,
                )
                for ci, claim in enumerate(self.claims)
            )
        )

    def _chosen_requests(self, ci: int, claim: Mapping[str, Any]) -> list[ChosenRequest]:
        chosen: list[ChosenRequest] = []
        for ri, raw in enumerate(self._requests(claim)):
            rd = self.request_data[(ci, ri, 0)]
            sub = None
            if rd.parent is not None:
                rd = self.request_data[(ci, ri, rd.selected_sub)]
                sub = rd.request_name()
            chosen.append(ChosenRequest(str(raw.get("name", "")), sub, rd.class_))
        return chosen

    def _no_fit_reason(self) -> str:
        ci, ri = self.deepest
        if ci < len(self.claims):
            reqs = ((self.claims[ci].get("spec") or {}).get("devices") or {}).get("requests") or []
            if ri < len(reqs):
                return (
                    f"cannot allocate all claims: claim {self.claim_refs[ci]}, request "
                    f"{reqs[ri].get('name', '')}: not enough suitable devices on this node"
                ) + _incomplete_note(self.pools)
        return "cannot allocate all claims" + _incomplete_note(self.pools)

    def _requests(self, claim: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        return list(((claim.get("spec") or {}).get("devices") or {}).get("requests") or ())

    def _validate_claim(self, ci: int, claim: Mapping[str, Any]) -> None:
        ref = self.claim_refs[ci]
        min_per_claim = 0
        for ri, raw in enumerate(self._requests(claim)):
            name = raw.get("name", "")
            subs = raw.get("firstAvailable") or []
            exactly = raw.get("exactly")
            if not self.f.prioritized_list and subs:
                raise AllocationFatalError(
                    f"claim {ref}, request {name}: has subrequests, but the DRAPrioritizedList feature is disabled",
                    FatalKind.FEATURE_DISABLED,
                )
            if not self.f.consumable_capacity:
                if exactly is not None and exactly.get("capacity") is not None:
                    raise AllocationFatalError(
                        f"claim {ref}, request {name}: has capacity requests, but the DRAConsumableCapacity "
                        "feature is disabled",
                        FatalKind.FEATURE_DISABLED,
                    )
                for sub in subs:
                    if sub.get("capacity") is not None:
                        raise AllocationFatalError(
                            f"claim {ref}, subrequest {sub.get('name', '')}: has capacity requests, but the "
                            "DRAConsumableCapacity feature is disabled",
                            FatalKind.FEATURE_DISABLED,
                        )
            if subs:
                parent = parse_request({**(exactly or {}), "name": name}, ref, admin_allowed=True)
                min_per_request: int | None = None
                for si, sub in enumerate(subs):
                    rd = self._validate_request(parse_request(sub, ref, admin_allowed=False), parent, (ci, ri, si))
                    self.request_data[(ci, ri, si)] = rd
                    min_per_request = (
                        rd.num_devices if min_per_request is None else min(min_per_request, rd.num_devices)
                    )
                needed = min_per_request or 0
            else:
                if exactly is None:
                    raise AllocationFatalError(
                        f"claim {ref}, request {name}: neither exactly nor firstAvailable is set "
                        "(unsupported request type?)",
                        FatalKind.INVALID_REQUEST,
                    )
                rd = self._validate_request(parse_request({**exactly, "name": name}, ref, True), None, (ci, ri, 0))
                self.request_data[(ci, ri, 0)] = rd
                needed = rd.num_devices
            if needed > ALLOCATION_RESULTS_MAX_SIZE - min_per_claim:
                raise AllocationFatalError(
                    f"claim {ref}, request {name}: adding {needed} devices exceeds the claim limit of "
                    f"{ALLOCATION_RESULTS_MAX_SIZE}, with {min_per_claim} already accounted for",
                    FatalKind.TOO_MANY_DEVICES,
                )
            min_per_claim += needed

        constraints: list[Constraint] = []
        for i, c in enumerate(((claim.get("spec") or {}).get("devices") or {}).get("constraints") or ()):
            requests = frozenset(c.get("requests") or ())
            if c.get("matchAttribute") is not None:
                constraints.append(MatchAttribute(requests, str(c["matchAttribute"])))
            elif c.get("distinctAttribute") is not None:
                constraints.append(DistinctAttribute(requests, str(c["distinctAttribute"])))
            else:
                raise AllocationFatalError(
                    f"claim {ref}, constraint #{i}: empty constraint (unsupported constraint type?)",
                    FatalKind.INVALID_REQUEST,
                )
        self.constraints.append(constraints)

    def _validate_request(
        self, req: RequestInfo, parent: RequestInfo | None, key: tuple[int, int, int]
    ) -> _RequestData:
        ref = self.claim_refs[key[0]]
        if req.has_derived_attributes:
            raise AllocationFatalError(
                f"claim {ref}, request {req.name}: cannot handle request with derived attributes, the feature is "
                "disabled",
                FatalKind.FEATURE_DISABLED,
            )
        for i, sel in enumerate(req.selectors):
            if sel is None:
                raise AllocationFatalError(
                    f"claim {ref}, request {req.name}, selector #{i}: CEL expression empty "
                    "(unsupported selector type?)",
                    FatalKind.INVALID_REQUEST,
                )
        if not self.f.admin_access and req.has_admin_access:
            raise AllocationFatalError(
                f"claim {ref}, request {req.name}: admin access is requested, but the feature is disabled",
                FatalKind.FEATURE_DISABLED,
            )
        if not req.class_name:
            raise AllocationFatalError(
                f"claim {ref}, request {req.name}: missing device class name (unsupported request type?)",
                FatalKind.INVALID_REQUEST,
            )
        class_ = self.o.inventory.get_class(req.class_name)
        if class_ is None:
            raise AllocationFatalError(
                f"claim {ref}, request {req.name}: could not retrieve device class {req.class_name}: "
                f'deviceclass.resource.k8s.io "{req.class_name}" not found',
                FatalKind.CLASS_NOT_FOUND,
            )
        rd = _RequestData(request=req, parent=parent, class_=class_)
        if req.mode == EXACT_COUNT:
            rd.num_devices = req.count
        elif req.mode == ALL:
            for pool in self.pools:
                if pool.is_incomplete:
                    raise AllocationFatalError(
                        f"claim {ref}, request {req.name}: asks for all devices, but resource pool "
                        f"{pool.driver}/{pool.name} is currently being updated",
                        FatalKind.INCOMPLETE_POOL,
                    )
                if pool.is_invalid:
                    raise AllocationFatalError(
                        f"claim {ref}, request {req.name}: asks for all devices, but resource pool "
                        f"{pool.driver}/{pool.name} is currently invalid",
                        FatalKind.INVALID_POOL,
                    )
                for slice_ in pool.device_slices:
                    for dev in slice_.devices:
                        if not self._is_selectable(key, rd, slice_, dev):
                            continue
                        if self.f.consumable_capacity:
                            # Static capacity only; what is in use is checked when allocating, so a
                            # device without room makes "All" fail instead of being left out.
                            try:
                                ok = cap.fits(
                                    None, req.capacity_requests, dev.capacity, None, self.f.fractional_capacity_range
                                )
                            except cap.CapacityError as exc:
                                raise _capacity_error(ref, req, "checking capacity", dev.name, exc) from exc
                            if not ok:
                                continue
                        rd.all_devices.append((dev, slice_, pool))
            rd.num_devices = len(rd.all_devices)
        else:
            raise AllocationFatalError(
                f"claim {ref}, request {req.name}: unsupported count mode {req.mode}", FatalKind.INVALID_REQUEST
            )
        return rd

    # -- fast path ----------------------------------------------------------------------------

    def _plain_request(self) -> tuple[Mapping[str, Any], RequestInfo, int] | None:
        """The fast path's preconditions on the claims: one claim, no constraint, one plain
        ExactCount request of a class (its raw dict, parsed, and its count), and no invalid pool."""
        if len(self.claims) != 1 or any(p.is_invalid for p in self.pools):
            return None
        claim = self.claims[0]
        spec_devices = (claim.get("spec") or {}).get("devices") or {}
        if spec_devices.get("constraints"):
            return None
        requests = self._requests(claim)
        if len(requests) != 1:
            return None
        raw = requests[0]
        exactly = raw.get("exactly")
        if raw.get("firstAvailable") or exactly is None or exactly.get("capacity") is not None:
            return None
        count = exactly.get("count")
        if type(count) is not int or not 1 <= count <= ALLOCATION_RESULTS_MAX_SIZE:
            return None
        req = parse_request({**exactly, "name": raw.get("name", "")}, self.claim_refs[0], True)
        if (
            req.mode != EXACT_COUNT
            or req.selectors
            or req.has_admin_access
            or req.has_capacity
            or req.has_derived_attributes
            or not req.class_name
        ):
            return None
        return raw, req, count

    def _fast_allocate(self) -> Allocated | NoFit | None:
        """The common case without the general search: one claim with one plain ExactCount request
        (no subrequests, selectors, admin access, capacity or derived attributes; tolerations are
        fine), no constraints, no invalid pool, and a class whose selectors raise on no device of
        the node. Then the search takes the first ``count`` free, selectable devices in pool order
        that pass the taint and capacity checks, and validation cannot fail; this loop does that.
        None (the general path decides) whenever anything else could matter: a precondition fails,
        a device consumes counters, or fewer devices pass than requested (the search's own NoFit
        reason). Never changes an answer (tests/unit/test_allocator_fast_path.py)."""
        plain = self._plain_request()
        if plain is None:
            return None
        raw, req, count = plain
        claim, ref = self.claims[0], self.claim_refs[0]
        class_ = self.o.inventory.get_class(req.class_name)
        if class_ is None:
            return None
        candidates = self._class_candidates(class_)
        if candidates is None:
            return None
        allocated = self.allocated.allocated_devices
        short = _shortfall(candidates, allocated, count, class_.name, self.pools)
        if short is not None:  # _fast_reject's answer
            return NoFit(short)
        f = self.f
        results: list[DeviceResult] = []  # (a valid pool names each device once: no repeats)
        for pool in self.pools:
            if pool.is_incomplete:
                continue
            for slice_ in pool.device_slices:
                per_device = slice_.per_device_node_selection
                for dev in slice_.devices:
                    did = dev.id
                    if did in allocated:
                        continue
                    if not f.device_binding_and_status and dev.binding_conditions:
                        continue
                    outcome = self._class_outcome(class_, slice_, dev)
                    if outcome is not True:
                        if outcome is False:
                            continue
                        return None
                    if per_device:
                        try:
                            if not node_matches(self.node, dev.node_name, dev.all_nodes, dev.node_selector):
                                continue
                        except NodeSelectorError:
                            return None
                    if f.consumable_capacity:
                        if dev.allow_multiple_allocations:
                            return None
                        try:
                            ok = self._fits(req, dev)
                        except cap.CapacityError as exc:
                            raise _capacity_error(ref, req, "checking capacity", "/".join(did), exc) from exc
                        if not ok:
                            continue
                    if dev.consumes_counters:
                        if not f.partitionable_devices:
                            continue
                        return None  # counter bookkeeping: the general path
                    if f.device_taints and _taint_prevents(dev, req):
                        continue
                    results.append(
                        DeviceResult(
                            request=req.name,
                            parent_request="",
                            device=dev,
                            slice=slice_,
                            share_id=None,
                            consumed_capacity=None,
                            admin_access=req.admin_access,
                            tolerations=req.tolerations_raw,
                        )
                    )
                    if len(results) == count:
                        chosen = [ChosenRequest(str(raw.get("name", "")), None, class_)]
                        return Allocated(
                            (
                                build_result(
                                    claim,
                                    chosen,
                                    results,
                                    self.node_name,
                                    claim_ref=ref,
                                    binding_conditions=f.device_binding_and_status,
                                ),
                            )
                        )
        return None

    def _fast_reject(self) -> bool:
        """Necessary-condition check that proves "no fit" without searching. Never changes an answer.

        Applies when every request is a plain ExactCount request (no request selectors, admin
        access, capacity requests or subrequests) and no pool on the node is invalid or could
        make the full search raise an error: then, per class, the devices requested in total must
        not exceed the devices that are free and match the class. Taints, counters, constraints
        and capacity can only remove candidates, so failing this check means the exhaustive
        search fails too, without having seen an error.
        """
        if not self.request_data or any(p.is_invalid for p in self.pools):
            return False
        wanted: dict[str, int] = {}
        classes: dict[str, ClassInfo] = {}
        for rd in self.request_data.values():
            r = rd.request
            if (
                rd.parent is not None
                or r.mode != EXACT_COUNT
                or r.selectors
                or r.has_admin_access
                or r.capacity_requests is not None
            ):
                return False
            wanted[rd.class_.name] = wanted.get(rd.class_.name, 0) + rd.num_devices
            classes[rd.class_.name] = rd.class_
        # A class whose selectors fail on any device of the node (or whose devices could make the
        # search raise another error) disables the shortcut: the search would raise that error
        # before concluding "no fit".
        candidates: dict[str, tuple[DeviceId, ...]] = {}
        for name in wanted:
            found = self._class_candidates(classes[name])
            if found is None:
                return False
            candidates[name] = found
        allocated = self.allocated.allocated_devices
        for name, need in wanted.items():
            short = _shortfall(candidates[name], allocated, need, name, self.pools)
            if short is not None:
                self.fast_reason = short
                return True
        return False

    def _class_candidates(self, class_: ClassInfo) -> tuple[DeviceId, ...] | None:
        """Devices of this node's usable pools that match the class, or None if the count cannot be trusted.

        Cached per node and class selectors (versioned classes only) for as long as the node's
        pools are unchanged: the answer depends on the class only through its selectors (an error
        names the class, but then the answer is None), so classes with the same selectors share it.
        """
        inv = self.o.inventory
        key = (self.node_name, class_.selectors) if class_.cache_key is not None else None
        if key is not None:
            hit = inv.class_candidates.get(key)
            if hit is not None and hit[0] is self.pools and hit[1] == self.f:
                return hit[2]
        found: list[DeviceId] | None = []
        consumable = self.f.consumable_capacity
        for pool in self.pools:
            if pool.is_incomplete or found is None:
                continue
            for slice_ in pool.device_slices:
                per_device = bool(slice_.per_device_node_selection)
                for dev in slice_.devices:
                    if not self.f.device_binding_and_status and dev.binding_conditions:
                        continue
                    outcome = self._class_outcome(class_, slice_, dev)
                    if outcome is False:
                        continue
                    if outcome is not True or (
                        consumable and (dev.allow_multiple_allocations or dev.has_negative_capacity)
                    ):
                        found = None  # an error the search could hit, or a device usable many times
                        break
                    if per_device:
                        try:
                            if not node_matches(self.node, dev.node_name, dev.all_nodes, dev.node_selector):
                                continue
                        except NodeSelectorError:
                            found = None
                            break
                    found.append(dev.id)
                if found is None:
                    break
        result = tuple(found) if found is not None else None
        if key is not None:
            if len(inv.class_candidates) >= MATCH_CACHE_LIMIT:
                inv.class_candidates.clear()
            inv.class_candidates[key] = (self.pools, self.f, result)
        return result

    # -- selection ----------------------------------------------------------------------------

    def _class_outcome(self, class_: ClassInfo, slice_: SliceInfo, dev: DeviceInfo) -> MatchOutcome:
        """All class selectors on one device, through the cross-call cache when both objects are versioned."""
        key = None
        if class_.cache_key is not None and slice_.cache_key is not None:
            key = (class_.cache_key, slice_.cache_key, dev.index)
            hit = self.o.inventory.class_matches.get(key)
            if hit is not None:
                return hit
        outcome: MatchOutcome
        try:
            outcome = self._class_selectors_match(class_, slice_, dev)
        except AllocationFatalError as exc:
            outcome = (str(exc), exc.kind)
        if key is not None:
            cache = self.o.inventory.class_matches
            if len(cache) >= CLASS_MATCH_CACHE_LIMIT:
                cache.clear()  # entries of old slice/class versions are never looked up again
            cache[key] = outcome
        return outcome

    def _class_selectors_match(self, class_: ClassInfo, slice_: SliceInfo, dev: DeviceInfo) -> bool:
        """_selectors_match of the class's selectors; on a versioned slice each expression's result
        is shared between classes (many select by the same driver expression). Errors are not
        shared: their message names the class."""
        who = f"class {class_.name}"
        if slice_.cache_key is None:
            return self._selectors_match(class_.selectors, dev, who)
        cache = self.o.inventory.expression_matches
        for i, expr in enumerate(class_.selectors):
            key = (expr, slice_.cache_key, dev.index) if expr is not None else None
            found = cache.get(key) if key is not None else None
            if found is None:
                found = self._selector_match(i, expr, dev, who)
                if key is not None:
                    if len(cache) >= MATCH_CACHE_LIMIT:
                        cache.clear()
                    cache[key] = found
            if not found:
                return False
        return True

    def _selectors_match(self, selectors: Sequence[str | None], dev: DeviceInfo, who: str) -> bool:
        return all(self._selector_match(i, expr, dev, who) for i, expr in enumerate(selectors))

    def _selector_match(self, i: int, expr: str | None, dev: DeviceInfo, who: str) -> bool:
        if expr is None:
            raise AllocationFatalError(
                f"{who}: selector #{i}: CEL expression empty (unsupported selector type?)",
                FatalKind.INVALID_REQUEST,
            )
        try:
            compiled = cel.compile_selector(expr)
        except cel.CelCompileError as exc:
            raise AllocationFatalError(
                f"{who}: selector #{i}: CEL compile error: {exc}", FatalKind.CEL_COMPILE
            ) from exc
        try:
            if dev.view is None:
                # `device.driver == "x"` on a device that surely converts (upstream converts the
                # whole device first and fails every selector on one that does not): no view.
                literal = compiled.driver_equals
                if literal is not None and cel.converts_surely(dev.raw):
                    return dev.driver == literal
                dev.view = cel.device_view(dev.driver, dev.raw)
            matches = compiled.matches(dev.view)
        except (cel.CelRuntimeError, ValueError, TypeError) as exc:
            msg = str(exc)
            if "no such key:" in msg:
                msg += (
                    ". consider using CEL optional chaining (.? followed by orValue()) or guarding the check "
                    "with has() for optional fields"
                )
            raise AllocationFatalError(
                f"{who}: selector #{i} on device {'/'.join(dev.id)}: CEL runtime error: {msg}",
                FatalKind.CEL_RUNTIME,
            ) from exc
        return bool(matches)

    def _is_selectable(self, key: tuple[int, int, int], rd: _RequestData, slice_: SliceInfo, dev: DeviceInfo) -> bool:
        if not self.f.device_binding_and_status and dev.binding_conditions:
            return False
        mkey = (dev.id, *key)
        hit = self.match_cache.get(mkey)
        if hit is not None:
            return hit
        outcome = self._class_outcome(rd.class_, slice_, dev)
        if outcome is not True:
            if outcome is False:
                self.match_cache[mkey] = False
                return False
            raise AllocationFatalError(outcome[0], outcome[1])
        if not self._selectors_match(rd.request.selectors, dev, f"claim {self.claim_refs[key[0]]}"):
            self.match_cache[mkey] = False
            return False
        if slice_.per_device_node_selection:
            try:
                ok = node_matches(self.node, dev.node_name, dev.all_nodes, dev.node_selector)
            except NodeSelectorError as exc:
                raise AllocationFatalError(
                    f"failed to parse node selector of device {'/'.join(dev.id)}: {exc}",
                    FatalKind.INVALID_NODE_SELECTOR,
                ) from exc
            if not ok:
                self.match_cache[mkey] = False
                return False
        self.match_cache[mkey] = True
        return True

    # -- in use -------------------------------------------------------------------------------

    def _in_use(self, dev: DeviceId) -> bool:
        return dev in self.allocated.allocated_devices or bool(self.allocating_devices.get(dev))

    def _allocating_for_claim(self, dev: DeviceId, ci: int) -> bool:
        claims = self.allocating_devices.get(dev)
        return claims is not None and ci in claims

    def _capacity_in_use(self, dev: DeviceId) -> bool:
        return (
            dev in self.allocated.aggregated_capacity
            or self.allocated.has_shared_allocation(dev)
            or dev in self.allocating_capacity
        )

    def _fits(self, req: RequestInfo, dev: DeviceInfo) -> bool:
        return cap.fits(
            self.allocated.aggregated_capacity.get(dev.id),
            req.capacity_requests,
            dev.capacity,
            self.allocating_capacity.get(dev.id),
            self.f.fractional_capacity_range,
        )

    # -- search -------------------------------------------------------------------------------

    def _allocate_one(self, ci: int, ri: int, si: int, di: int, in_sub: bool, start: tuple[int, int, int]) -> bool:
        self.o.stats.allocate_one_calls += 1
        if ci >= len(self.claims):
            return True
        claim = self.claims[ci]
        nreq = len(self._requests(claim))
        if ri >= nreq:
            try:
                return self._allocate_one(ci + 1, 0, 0, 0, False, (0, 0, 0))
            except _MaxSizeExceeded:
                return False
        if (ci, ri) > self.deepest:
            self.deepest = (ci, ri)

        rd = self.request_data[(ci, ri, si)]
        if not in_sub and rd.parent is not None:
            all_exceeded = True
            sub = 0
            while (ci, ri, sub) in self.request_data:
                try:
                    ok = self._allocate_one(ci, ri, sub, di, True, (0, 0, 0))
                except _MaxSizeExceeded:
                    sub += 1
                    continue
                all_exceeded = False
                if ok:
                    self.request_data[(ci, ri, 0)].selected_sub = sub
                    return True
                sub += 1
            if all_exceeded:
                raise _MaxSizeExceeded()
            return False

        req = rd.request
        do_all = req.mode == ALL
        if do_all and not rd.all_devices:
            return False
        if di >= rd.num_devices:
            return self._allocate_one(ci, ri + 1, 0, 0, False, (0, 0, 0))
        if rd.num_devices - di > ALLOCATION_RESULTS_MAX_SIZE - len(self.results[ci]):
            raise _MaxSizeExceeded()

        if do_all:
            dev, slice_, pool = rd.all_devices[di]
            undo = self._allocate_device(ci, ri, si, rd, dev, slice_, pool, must=True)
            if undo is None:
                return False
            try:
                done = self._allocate_one(ci, ri, si, di + 1, in_sub, (0, 0, 0))
            except BaseException:
                undo()
                raise
            if not done:
                undo()
            return done

        key = (ci, ri, si)
        admin = req.admin_access
        p0, s0, d0 = start
        pools = self.pools
        for pi in range(p0, len(pools)):
            pool = pools[pi]
            if pool.is_incomplete or pool.is_invalid:
                continue
            slices = pool.device_slices
            for sj in range(s0 if pi == p0 else 0, len(slices)):
                slice_ = slices[sj]
                devices = slice_.devices
                for dj in range(d0 if (pi == p0 and sj == s0) else 0, len(devices)):
                    dev = devices[dj]
                    if admin:
                        if self._allocating_for_claim(dev.id, ci):
                            continue
                    elif self._in_use(dev.id):
                        continue
                    if not self._is_selectable(key, rd, slice_, dev):
                        continue
                    if self.f.consumable_capacity:
                        try:
                            ok = self._fits(req, dev)
                        except cap.CapacityError as exc:
                            raise _capacity_error(
                                self.claim_refs[ci], req, "checking capacity", "/".join(dev.id), exc
                            ) from exc
                        if not ok:
                            continue
                    undo = self._allocate_device(ci, ri, si, rd, dev, slice_, pool, must=False)
                    if undo is None:
                        continue
                    try:
                        done = self._allocate_one(ci, ri, si, di + 1, in_sub, (pi, sj, dj + 1))
                    except BaseException:
                        undo()
                        raise
                    if done:
                        return True
                    undo()
        return False

    def _allocate_device(
        self,
        ci: int,
        ri: int,
        si: int,
        rd: _RequestData,
        dev: DeviceInfo,
        slice_: SliceInfo,
        pool: Pool,
        must: bool,
    ) -> Callable[[], None] | None:
        """Try one selectable candidate; returns an undo function, or None if it cannot be used."""
        req = rd.request
        did = dev.id
        multi = self.f.consumable_capacity and bool(dev.allow_multiple_allocations)
        if not multi and req.admin_access and self._allocating_for_claim(did, ci):
            return None
        if not req.admin_access and self._in_use(did):
            return None
        if not self.f.partitionable_devices and dev.consumes_counters:
            return None

        skip_counters = multi and self._capacity_in_use(did)
        counters_reserved = False
        if not skip_counters and dev.consumes_counters:
            if not self._check_available_counters(dev, pool):
                return None
            counters_reserved = True

        if rd.parent is None:
            base, sub = req.name, ""
        else:
            base, sub = rd.parent.name, req.name

        added: list[Constraint] = []

        def rollback(
            marked: bool, cap_inserted: dict[str, Quantity] | None, cap_existed: bool, result_len: int | None
        ) -> None:
            if result_len is not None:
                del self.results[ci][result_len:]
            if cap_inserted is not None:
                self._capacity_remove(did, cap_inserted)
                if cap_existed and did not in self.allocating_capacity:
                    self.allocating_capacity[did] = {}
            if marked:
                self.allocating_devices[did].discard(ci)
            for c in reversed(added):
                c.remove(base, sub, dev)
            if counters_reserved:
                self._release_counters(dev, pool)

        if self.f.device_taints and _taint_prevents(dev, req):
            rollback(False, None, False, None)
            return None

        for c in self.constraints[ci]:
            if not c.add(base, sub, dev):
                rollback(False, None, False, None)
                if must:
                    raise AllocationFatalError(
                        f"claim {self.claim_refs[ci]}, request {req.name}: cannot add device {'/'.join(did)} because "
                        "a claim constraint would not be satisfied",
                        FatalKind.CONSTRAINT,
                    )
                return None
            added.append(c)

        marked = False
        if not multi:
            self.allocating_devices.setdefault(did, set()).add(ci)
            marked = True

        consumed: dict[str, Quantity] = {}
        share_id: str | None = None
        cap_inserted: dict[str, Quantity] | None = None
        cap_existed = False
        if self.f.consumable_capacity:
            try:
                ok = self._fits(req, dev)
            except cap.CapacityError as exc:
                rollback(marked, None, False, None)
                raise _capacity_error(self.claim_refs[ci], req, "rechecking capacity", "/".join(did), exc) from exc
            if not ok:
                rollback(marked, None, False, None)
                return None
            if multi:
                try:
                    consumed = cap.consumed_capacity(
                        req.capacity_requests, dev.capacity, self.f.fractional_capacity_range
                    )
                except cap.CapacityError as exc:
                    rollback(marked, None, False, None)
                    raise _capacity_error(
                        self.claim_refs[ci], req, "computing consumed capacity", "/".join(did), exc
                    ) from exc
                share_id = self.o._share_id()
                cap_existed = did in self.allocating_capacity
                self._capacity_insert(did, consumed)
                cap_inserted = consumed

        result_len = len(self.results[ci])
        self.results[ci].append(
            DeviceResult(
                request=req.name,
                parent_request=rd.parent.name if rd.parent else "",
                device=dev,
                slice=slice_,
                share_id=share_id,
                consumed_capacity=consumed if consumed else None,
                admin_access=req.admin_access,
                tolerations=req.tolerations_raw,
            )
        )

        def undo() -> None:
            rollback(marked, cap_inserted, cap_existed, result_len)

        return undo

    # -- consumable capacity bookkeeping (ConsumedCapacityCollection) -------------------------

    def _capacity_insert(self, did: DeviceId, consumed: Mapping[str, Quantity]) -> None:
        entry = self.allocating_capacity.get(did)
        if entry is None:
            self.allocating_capacity[did] = dict(consumed)
            return
        for name, q in consumed.items():
            entry[name] = entry[name] + q if name in entry else q

    def _capacity_remove(self, did: DeviceId, consumed: Mapping[str, Quantity]) -> None:
        entry = self.allocating_capacity.get(did)
        if entry is None:
            return
        for name, q in consumed.items():
            if name in entry:
                entry[name] = entry[name] - q
        if all(q.value == 0 for q in entry.values()):
            del self.allocating_capacity[did]

    # -- counters -----------------------------------------------------------------------------

    def _available(self, pool: Pool) -> _Counters:
        avail = self.o._available_counters.get(pool.id)
        if avail is not None:
            return avail
        avail = {cs: {n: q.value for n, q in counters.items()} for cs, counters in pool.counter_sets.items()}
        for group in (pool.device_slices, pool.slices_not_targeting_node):
            for s in group:
                for d in s.devices:
                    if not self.allocated.is_device_allocated(d.id):
                        continue
                    for cs_name, counters in d.consumes_counters:
                        target = avail.get(cs_name)
                        if target is None:
                            continue
                        for n, q in counters:
                            if n in target:
                                target[n] -= q.value
        self.o._available_counters[pool.id] = avail
        return avail

    def _check_available_counters(self, dev: DeviceInfo, pool: Pool) -> bool:
        avail = self._available(pool)
        consumed = self.consumed_counters.setdefault(pool.id, {})
        for cs_name, counters in dev.consumes_counters:
            target = consumed.setdefault(cs_name, {})
            for n, q in counters:
                target[n] = target.get(n, Decimal(0)) + q.value
        for cs_name, counters_avail in avail.items():
            used = consumed.get(cs_name, {})
            for n, amount in counters_avail.items():
                if amount < used.get(n, 0):
                    self._release_counters(dev, pool)
                    return False
        return True

    def _release_counters(self, dev: DeviceInfo, pool: Pool) -> None:
        consumed = self.consumed_counters[pool.id]
        for cs_name, counters in dev.consumes_counters:
            target = consumed[cs_name]
            for n, q in counters:
                target[n] -= q.value


def _capacity_error(claim: str, req: RequestInfo, doing: str, device: str, exc: Exception) -> AllocationFatalError:
    return AllocationFatalError(
        f"claim {claim}, request {req.name}: {doing} for device {device}: {exc}", FatalKind.CAPACITY
    )


def _taint_prevents(dev: DeviceInfo, req: RequestInfo) -> bool:
    for key, value, effect in dev.taints:
        if effect not in ("NoSchedule", "NoExecute"):
            continue  # None and unknown effects do not prevent allocation
        if not any(_tolerates(t, key, value, effect) for t in req.tolerations):
            return True
    return False


def _tolerates(t: Mapping[str, Any], key: str, value: str, effect: str) -> bool:
    """resourceclaim.ToleratesTaint."""
    t_effect = t.get("effect") or ""
    if t_effect and t_effect != effect:
        return False
    t_key = t.get("key") or ""
    if t_key and t_key != key:
        return False
    op = t.get("operator") or ""
    if op in ("", "Equal"):
        return bool((t.get("value") or "") == value)
    return bool(op == "Exists")
