"""NodeResourcesFit: the Filter checks the pod's requests against the node's allocatable less what
the pods placed there request; the Score is the profile's scoring strategy (LeastAllocated,
MostAllocated or RequestedToCapacityRatio over its resources with their weights, extended resources
included: a DRA-served one counts the devices of its class on the node, as upstream's
resource_allocation.go since KEP-5004's beta). draxr's older device scoring (``device_scoring``,
not reachable from `draxr run` any more) adds the node's devices as a third resource.

KEP-5004: an extended resource a node does not advertise but a DeviceClass serves by DRA is not
checked here (the allocator judges it); which names those are on a node is the pod's
device-plugin/DRA split (requests.PodExtendedResources.for_allocatable), which placement computes
before this Filter and hands it as ``dra_names`` and ``dra_reasons``."""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Hashable, Sequence

from draxr.core.limits import MAX_NODE_SCORE
from draxr.core.mapping import is_extended_resource_name, is_prefixed_native_resource
from draxr.core.plugins.scoring import Column, ScoreInputs
from draxr.core.profile import FitStrategy, ScoringType, broken_linear
from draxr.core.requests import NodeRequests
from draxr.core.state import ClusterState, NodeInfo, NodeUsage, PodInfo
from draxr.core.status import Status, rejected, unresolvable

NAME = "NodeResourcesFit"
# draxr's, for a node moving back from DRA to its device plugin (core.migration): kubelet's device
# manager picks the devices without the scheduler, so while DRA claims other than adoption claims
# hold devices there it could hand one of theirs to a device-plugin pod.
DRA_HOLDS_DEVICES = "node(s) had DRA claims holding devices the device plugin may hand out"
_FIT_CHECKED = ("cpu", "memory", "ephemeral-storage")  # in fitsRequest's order


Scoring = ScoringType  # (the name callers used before the profile)

DraTotals = Callable[[NodeInfo, str], tuple[int, int]]
"""(devices of the resource's DeviceClass on the node, how many are allocated); (0, 0) when no
class serves the name."""


def is_scalar_resource_name(name: str) -> bool:
    """`schedutil.IsScalarResourceName`."""
    return (
        is_extended_resource_name(name)
        or name.startswith("hugepages-")
        or is_prefixed_native_resource(name)
        or name.startswith("attachable-volumes-")
    )


def strategy_score(strategy: FitStrategy, requested: Sequence[int], allocatable: Sequence[int]) -> int:
    """least_allocated.go, most_allocated.go, requested_to_capacity_ratio.go: a resource with
    allocatable 0 is left out; the weighted mean, Go's integer division (RequestedToCapacityRatio:
    rounded, and only resources scoring above 0 count)."""
    total = weights = 0
    kind = strategy.type
    for spec, req, cap in zip(strategy.resources, requested, allocatable, strict=True):
        if cap == 0:
            continue
        if kind is ScoringType.LEAST_ALLOCATED:
            score = 0 if req > cap else (cap - req) * MAX_NODE_SCORE // cap
        elif kind is ScoringType.MOST_ALLOCATED:
            score = min(req, cap) * MAX_NODE_SCORE // cap
        else:
            score = broken_linear(strategy.shape, 100 if req > cap else req * 100 // cap)
            if score <= 0:
                continue
        total += score * spec.weight
        weights += spec.weight
    if weights == 0:
        return 0
    if kind is ScoringType.REQUESTED_TO_CAPACITY_RATIO:
        return math.floor(total / weights + 0.5)
    return total // weights


def fit_checked(pod: PodInfo) -> list[tuple[str, int]]:
    """The pod's requests the Filter checks against allocatable, in its order (fitsRequest:
    cpu, memory, ephemeral-storage, then the scalar resources; upstream walks those in map order,
    here by name)."""
    first = {name: i for i, name in enumerate(_FIT_CHECKED)}
    return sorted(
        ((n, want) for n, want in pod.units.items() if n in first or "/" in n or n.startswith("hugepages-")),
        key=lambda item: (first.get(item[0], len(first)), item[0]),
    )


def fit_unresolvable(checked: list[tuple[str, int]], node: NodeInfo, dra_names: Collection[str]) -> bool:
    """Whether the rejection is UnschedulableAndUnresolvable: some request exceeds the node's
    allocatable itself (no pod leaving would help)."""
    return any(want > node.allocatable.get(name, 0) for name, want in checked if name not in dra_names)


def insufficient(
    checked: list[tuple[str, int]], node: NodeInfo, usage: NodeUsage, dra_names: Collection[str]
) -> list[str]:
    reasons: list[str] = []
    if usage.pods >= node.allocatable.get("pods", 0):
        reasons.append("Too many pods")
    for name, want in checked:
        # DRA-served names are checked by the allocator, not against allocatable.
        if want > node.allocatable.get(name, 0) - usage.requested.get(name, 0) and name not in dra_names:
            reasons.append(f"Insufficient {name}")
    return reasons


class Fit:
    """The Filter and Score for one pod."""

    __slots__ = ("checked", "cpu", "device_scoring", "dra", "memory", "requests", "short", "state", "strategy")

    def __init__(
        self,
        pod: PodInfo,
        state: ClusterState | None,
        scoring: Scoring | FitStrategy,
        device_scoring: Scoring | None,
        checked: list[tuple[str, int]] | None = None,
        dra: DraTotals | None = None,
    ) -> None:
        self.checked = fit_checked(pod) if checked is None else checked
        self.cpu, self.memory = pod.view.fit_nonzero or pod.nonzero  # (pod-level requests left out)
        self.strategy = scoring if isinstance(scoring, FitStrategy) else FitStrategy(scoring)
        self.state, self.device_scoring = state, device_scoring
        # calculatePodResourceRequestList: cpu and memory with the non-zero defaults; pod-level
        # hugepages left out too.
        huge = pod.view.fit_hugepages
        self.requests = [
            self.cpu
            if r.name == "cpu"
            else self.memory
            if r.name == "memory"
            else huge.get(r.name, 0)
            if huge is not None and r.name.startswith("hugepages-")
            else pod.units.get(r.name, 0)
            for r in self.strategy.resources
        ]
        self.dra = dra
        self.short = False  # set by vectors(): the last node had too few free devices counted

    def reads_devices(self, served: Callable[[str], bool]) -> bool:
        """Whether the score counts devices (a resource the pod requests that DRA may serve):
        then it reads more than the node's own inputs (allocations in shared pools)."""
        return any(
            want and spec.name not in ("cpu", "memory", "ephemeral-storage") and served(spec.name)
            for spec, want in zip(self.strategy.resources, self.requests, strict=True)
        )

    def vectors(self, node: NodeInfo, usage: NodeUsage) -> tuple[list[int], list[int]]:
        """calculateNodeAllocatableRequest: (requested with the pod, allocatable) per resource."""
        requested: list[int] = []
        allocatable: list[int] = []
        alloc = node.allocatable
        self.short = False
        for spec, want in zip(self.strategy.resources, self.requests, strict=True):
            name = spec.name
            cap = used = 0
            if name == "cpu":
                cap, used = alloc.get("cpu", 0), usage.nonzero_milli_cpu
            elif name == "memory":
                cap, used = alloc.get("memory", 0), usage.nonzero_memory
            elif name == "ephemeral-storage":
                cap, used = alloc.get(name, 0), usage.requested.get(name, 0)
            elif is_scalar_resource_name(name) and want:
                cap, used = alloc.get(name, 0), usage.requested.get(name, 0)
                if cap == 0 and self.dra is not None:
                    cap, used = self.dra(node, name)
                    self.short = self.short or used + want > cap
            if cap == 0:
                requested.append(0)
                allocatable.append(0)
                continue
            requested.append(used + want)
            allocatable.append(cap)
        return requested, allocatable

    def filter(
        self, node: NodeInfo, usage: NodeUsage, dra_names: Collection[str] = (), dra_reasons: Sequence[str] = ()
    ) -> Status | None:
        """``dra_names``: the requested names DRA serves on this node (the allocator checks them);
        ``dra_reasons``: why the split itself rejects the node (an unserved extended resource)."""
        fit = insufficient(self.checked, node, usage, dra_names)
        if fit or dra_reasons:
            hopeless = fit_unresolvable(self.checked, node, dra_names)
            return rejected(NAME, tuple(dict.fromkeys([*fit, *dra_reasons])), hopeless)
        return None

    def device_plugin_conflict(self, node: NodeInfo, ext: NodeRequests) -> Status | None:
        """A name the device plugin serves on ``node`` whose class declares a device-plugin
        identity, while DRA claims (not adoption claims) hold devices of the node's own pools."""
        state = self.state
        if state is None or not ext.device_plugin:
            return None
        ids = state.identities()
        if not ids or not any(name in ids for name in ext.device_plugin):
            return None
        _, pools = state.inventory.node_local_devices(node.name)
        held = sum(state.tracker.allocated_in_pool(driver, pool) for driver, pool in pools)
        if held > state.adoption.devices_on(node.name):
            return unresolvable(NAME, DRA_HOLDS_DEVICES)  # (no eviction is tried for it)
        return None

    def score(self, node: NodeInfo, usage: NodeUsage, ext: NodeRequests) -> int:
        """The raw score (not normalised: upstream's is 0..100 already). ``usage`` without the
        nominated pods: upstream counts them in the filters only."""
        fit = strategy_score(self.strategy, *self.vectors(node, usage))
        if self.device_scoring is not None and self.state is not None and (ext.dra_requests or ext.device_plugin):
            fit = round(_with_devices(fit, self.state, node, usage, ext, self.device_scoring))
        return fit


class NodeResourcesFit:
    name = NAME

    def key(self, pod: PodInfo) -> Hashable:
        """The requests, and what the device-plugin/DRA split reads (the extended resources per
        container, with the requests' names)."""
        view = pod.view
        return (
            tuple(sorted(pod.units.items())),
            pod.nonzero,
            view.fit_nonzero,
            tuple(sorted(view.fit_hugepages.items())) if view.fit_hugepages is not None else None,
            tuple(sorted(view.extended.items())),
            tuple(
                (c.index, c.name, c.long_lived, c.request_names, tuple(sorted(c.device_counts.items())))
                for c in view.containers
            ),
        )

    def prefilter(
        self,
        pod: PodInfo,
        state: ClusterState | None = None,
        scoring: Scoring | FitStrategy = Scoring.LEAST_ALLOCATED,
        device_scoring: Scoring | None = None,
        checked: list[tuple[str, int]] | None = None,
        dra: DraTotals | None = None,
    ) -> Fit:
        """``checked``: fit_checked(pod) when the caller has it already; ``dra``: the device
        counts of DRA-served extended resources (None: such a resource scores as one the node
        does not have)."""
        return Fit(pod, state, scoring, device_scoring, checked, dra)

    def column(self, inputs: ScoreInputs) -> Column:
        """The verdicts' scores (Fit.score; upstream's are 0..100 already: no normalisation)."""
        return [v.fit for v in inputs.verdicts]


PLUGIN = NodeResourcesFit()


def _with_devices(
    score: float, state: ClusterState, node: NodeInfo, usage: NodeUsage, ext: NodeRequests, scoring: Scoring
) -> float:
    """Adds the node's devices as a third resource next to cpu and memory. MostAllocated packs
    devices (whole nodes stay free for large requests); LeastAllocated spreads them. DRA devices
    are counted per pool of the node's own slices, whatever the class; device-plugin resources the
    pod asks for by their allocatable, so that both kinds of node rank alike. A heuristic for
    ranking, never for fit."""
    used = total = wanted = 0
    if ext.dra_requests:
        wanted += ext.device_count
        total, pools = state.inventory.node_local_devices(node.name)
        in_pool = state.tracker.allocated_in_pool
        for driver, pool in pools:
            used += in_pool(driver, pool)
    for name, count in ext.device_plugin.items():
        wanted += count
        total += node.allocatable.get(name, 0)
        used += usage.requested.get(name, 0)
    if total <= 0:
        return score
    if used + wanted > total:
        devices = 0.0  # too few local devices left: rank it last, so the allocator tries it last
    else:
        frac = (used + wanted) / total
        devices = frac if scoring is Scoring.MOST_ALLOCATED else 1 - frac
    return (score * 2 + devices * 100) / 3
