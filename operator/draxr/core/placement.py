"""Node filters, scoring and the per-pod decision (one scheduling cycle, pure).

Filters run in kube-scheduler's order and report its wording, so that the summary reads like
kube-scheduler's: "0/12 nodes are available: 4 node(s) had untolerated taint(s),
8 Insufficient example.com/gpu."
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from draxr.core import pod_claims, volumes
from draxr.core.allocator import AllocationFatalError, Allocator, Features, NodeFailure, NoFit
from draxr.core.allocator.allocated_devices import AllocatedState
from draxr.core.allocator.nodeselector import NodeSelectorError
from draxr.core.claims import held_claim_key
from draxr.core.cycle import PodCycle, node_affinity_matches, node_names, prepare, score_nodes, weighted_totals
from draxr.core.equivalence import Aligned
from draxr.core.mappings_crd import invalid_selectors
from draxr.core.node_verdict import NodeVerdict
from draxr.core.pod_claims import ClaimsCycle, PodClaim
from draxr.core.pod_view import CLAIMS_UNSUPPORTED, VOLUMES_UNSUPPORTED, PodView
from draxr.core.ranking import rank
from draxr.core.requests import DeviceRequest, NodeRequests, PodExtendedResources, RequestMapping, prepare_pod
from draxr.core.scores import (
    balanced_allocation_score,
    intolerable_prefer_no_schedule,
    node_affinity_score,
    prefer_no_schedule_tolerations,
    preferred_terms,
    resource_fit_score,
)
from draxr.core.state import EMPTY_USAGE, ClusterState, NodeInfo, NodeUsage, PodInfo
from draxr.core.status import Status, error, rejected, unresolvable, unschedulable
from draxr.core.storage import StorageState, VolumeDecision

_MIN_FEASIBLE_NODES = 100  # upstream minFeasibleNodesToFind
_FIT_CHECKED = ("cpu", "memory", "ephemeral-storage")  # in fitsRequest's order


class Scoring(StrEnum):
    LEAST_ALLOCATED = "LeastAllocated"
    MOST_ALLOCATED = "MostAllocated"


@dataclass(frozen=True, slots=True)
class ClaimDecision:
    """What the binder writes to one of the pod's own claims (``spec.resourceClaims``), in PreBind
    as upstream's bindClaim: with ``allocation``, add the finalizer
    ``resource.kubernetes.io/delete-protection`` if missing (an Update), then UpdateStatus with the
    allocation and ``{resource: pods, name, uid}`` of the pod appended to ``reservedFor``; without
    it (allocated already, e.g. shared with other pods) only the reservedFor append. Either way
    upstream stamps ``allocation.allocationTimestamp`` when it is missing (binding conditions are on
    by default in 1.37). Refuse the write if the claim is being deleted, or (with ``allocation``)
    got allocated meanwhile. Roll back as Unreserve does: remove the pod from ``reservedFor``
    (strategic-merge ``$patch: delete`` by uid) and leave deallocation to kube-controller-manager.
    Claims already reserved for the pod are not listed. Assume ``allocation`` under ``key`` until the
    claim's write is seen (ClusterState.assume_allocation / upsert_claim with the write's answer,
    then forget_allocation): meanwhile other pods sharing the claim wait ("in the process of being
    allocated") instead of allocating it a second time."""

    entry: str  # spec.resourceClaims[].name
    namespace: str
    name: str
    uid: str  # the claim's UID (a precondition for the write)
    allocation: Mapping[str, Any] | None  # newly allocated: write it; None: allocated already
    reserve: bool = True  # append {resource: pods, name, uid} of the pod to status.reservedFor

    @property
    def key(self) -> str:
        return pod_claims.claim_key(self.namespace, self.name)


@dataclass(frozen=True)
class Decision:
    node: str
    score: float  # the weighted sum of the default profile's scores (see cycle.score_nodes)
    allocation: Mapping[str, Any] | None  # the special claim's allocation result, None if no claim
    requests: tuple[DeviceRequest, ...]
    mappings: tuple[RequestMapping, ...]
    nodes_evaluated: int
    scores: Mapping[str, int] = field(default_factory=dict)  # plugin -> normalised score on ``node``
    volumes: VolumeDecision | None = None  # VolumeBinding's decision on ``node`` (PV bindings, provisioning)
    # The pod's own claims to write before the Binding (DynamicResources' PreBind order: these in
    # spec order, then the special claim), see ClaimDecision. Empty for pods without claims.
    claims: tuple[ClaimDecision, ...] = ()
    # The nodes rejected before the choice, node by node (those of runs the equivalence cache
    # took whole are left out): what explain shows next to the chosen node. Not part of equality:
    # with or without the cache, the decision is the same.
    statuses: Mapping[str, Status] = field(default_factory=dict, compare=False)

    @property
    def needs_claim(self) -> bool:
        return bool(self.requests)

    @property
    def claim_allocations(self) -> tuple[tuple[str, Mapping[str, Any]], ...]:
        """(claim key, allocation) of the pod's own claims allocated by this decision: what to
        assume (ClusterState.assume_allocation) until each write is seen."""
        return tuple((c.key, c.allocation) for c in self.claims if c.allocation is not None)


@dataclass(frozen=True)
class Unschedulable:
    """No node fits. ``message`` is kube-scheduler's summary; ``unresolvable`` marks pods that no
    ordinary cluster change can help (unsupported fields, a broken class): they wait for their own
    update, or, when ``until_inventory_changes`` (a class, slice or mapping is at fault), for a
    change of the DRA inventory or the mappings, as kube-scheduler requeues on DeviceClass events
    (and, for a volume plugin's PreFilter, of the storage objects: ClusterState.storage_revision)."""

    message: str
    reasons: Mapping[str, int] = field(default_factory=dict)
    unresolvable: bool = False
    fatal_kind: str | None = None
    until_inventory_changes: bool = False
    # The diagnosis (upstream's NodeToStatus): each evaluated node's status, whose reasons are what
    # ``reasons`` counts; ``every_node``: the PreFilter status that every node reports instead.
    # Both empty when the attempt ended before the nodes (unsupported fields, an allocator error).
    statuses: Mapping[str, Status] = field(default_factory=dict)
    every_node: Status | None = None

    def status_of(self, node: str) -> Status | None:
        return self.every_node if self.every_node is not None else self.statuses.get(node)


def _ports_conflict(pod: PodInfo, usage: NodeUsage) -> bool:
    for ip, proto, port in pod.host_ports:
        for uip, uproto, uport in usage.host_ports:
            if uport == port and uproto == proto and (ip == uip or "0.0.0.0" in (ip, uip)):
                return True
    return False


def fit_checked(pod: PodInfo) -> list[tuple[str, int]]:
    """The pod's requests NodeResourcesFit checks against allocatable, in its order (fitsRequest:
    cpu, memory, ephemeral-storage, then the scalar resources; upstream walks those in map order,
    here by name)."""
    first = {name: i for i, name in enumerate(_FIT_CHECKED)}
    return sorted(
        ((n, want) for n, want in pod.units.items() if n in first or "/" in n or n.startswith("hugepages-")),
        key=lambda item: (first.get(item[0], len(first)), item[0]),
    )


def fit_unresolvable(checked: list[tuple[str, int]], node: NodeInfo, dra_names: Collection[str]) -> bool:
    """Whether NodeResourcesFit's rejection is UnschedulableAndUnresolvable: some request exceeds
    the node's allocatable itself (no pod leaving would help)."""
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


def _fit_score(cpu: int, memory: int, node: NodeInfo, usage: NodeUsage, least: bool) -> int:
    """NodeResourcesFit LeastAllocated / MostAllocated over cpu and memory, equal weights.
    ``cpu`` and ``memory`` are the pod's non-zero requests (upstream's defaults when unset)."""
    requested = (usage.nonzero_milli_cpu + cpu, usage.nonzero_memory + memory)
    alloc = (node.allocatable.get("cpu", 0), node.allocatable.get("memory", 0))
    return resource_fit_score(requested, alloc, most=not least)


def _summary(total: int, reasons: Counter[str]) -> str:
    if total == 0:
        return "no nodes available to schedule pods"
    parts = sorted(f"{count} {reason}" for reason, count in reasons.items())
    return f"0/{total} nodes are available: {', '.join(parts)}." if parts else f"0/{total} nodes are available."


def nodes_to_find(total: int, percentage: int = 0) -> int:
    """Upstream numFeasibleNodesToFind: stop searching once this many nodes fit."""
    if total < _MIN_FEASIBLE_NODES:
        return total
    pct = percentage or max(5, 50 - total // 125)
    return max(_MIN_FEASIBLE_NODES, total * pct // 100)


Prefiltered = tuple[PodCycle, volumes.VolumeCycle | None, ClaimsCycle | None]


def claims_prefilter(pod: PodInfo, state: ClusterState) -> ClaimsCycle | Status | None:
    """DynamicResources' PreFilter for the pod's own claims (core.pod_claims); None without any."""
    claims_input = pod.view.claims_input
    if claims_input is None:
        return None
    return pod_claims.prefilter(
        claims_input,
        state.claim_object,
        lambda name: state.inventory.get_class(name) is not None,
        state.allocation_in_flight,
    )


def prefilter(pod: PodInfo, state: ClusterState) -> Prefiltered | Status:
    """The PreFilters in the default profile's order (NodeName and NodeAffinity's node names,
    the volume plugins, PodTopologySpread and InterPodAffinity, DynamicResources for the pod's own
    claims): the cycle's states, or the rejection every node reports."""
    view = pod.view
    names = node_names(view)
    if names.rejected is not None:
        plugin = "NodeAffinity" if names.rejected == "pod affinity terms conflict" else ""
        return unresolvable(plugin, names.rejected)
    vcycle = None
    if pod.volumes:
        vcycle = volumes.prefilter(pod.raw, state.storage, state.nodes)
        if vcycle.rejected is not None:
            return vcycle.rejected
    if view.invalid:
        plugin = "InterPodAffinity" if "parsing pod" in view.invalid else "PodTopologySpread"
        return unresolvable(plugin, view.invalid)
    ccycle = claims_prefilter(pod, state)
    if isinstance(ccycle, Status):
        return ccycle
    return prepare(pod, state), vcycle, ccycle


class NodeFilter:
    """Phase 1's filters for one pod, in kube-scheduler's order and with its status codes:
    PreFilter's node-name narrowing, NodeName, NodeUnschedulable, TaintToleration, NodeAffinity,
    NodePorts (``before_fit``), then NodeResourcesFit, the volume plugins, PodTopologySpread,
    InterPodAffinity (``from_fit``). schedule() computes the node's device-plugin/DRA split
    between the two; the differential harness (draxr_dev.scheduling.evaluate) runs the same two
    calls without DRA. VolumeBinding's decision on each node that passed is kept in ``decisions``."""

    __slots__ = ("checked", "cycle", "decisions", "filtered", "narrowed", "pod", "storage", "view", "volumes")

    def __init__(
        self,
        pod: PodInfo,
        cycle: PodCycle,
        vcycle: volumes.VolumeCycle | None = None,
        storage: StorageState | None = None,
    ) -> None:
        self.pod, self.view, self.cycle = pod, cycle.view, cycle
        self.volumes, self.storage = vcycle, storage or StorageState()
        self.decisions: dict[str, VolumeDecision | None] = {}
        self.narrowed = cycle.names.names
        self.checked = fit_checked(pod)
        # Whether a cheap filter can reject a schedulable, untainted node.
        view = cycle.view
        self.filtered = bool(view.node_name or view.node_selector or view.required_node_affinity or pod.host_ports)

    def before_fit(self, node: NodeInfo, usage: NodeUsage) -> Status | None:
        if self.narrowed is not None and node.name not in self.narrowed:
            return unresolvable("", self.cycle.names.absent_reason)
        if node.unschedulable or node.taints or self.filtered:
            return cheap_filter(self.pod, self.view, node, usage)
        return None

    def from_fit(
        self, node: NodeInfo, usage: NodeUsage, dra_names: Collection[str] = (), dra_reasons: Sequence[str] = ()
    ) -> Status | None:
        """``dra_names``: the requested names DRA serves on this node (the allocator checks them);
        ``dra_reasons``: why the split itself rejects the node (an unserved extended resource)."""
        rejection = self.fit(node, usage, dra_names, dra_reasons)
        return rejection if rejection is not None else self.beyond_node(node)

    def fit(
        self, node: NodeInfo, usage: NodeUsage, dra_names: Collection[str] = (), dra_reasons: Sequence[str] = ()
    ) -> Status | None:
        """NodeResourcesFit (see from_fit): the last filter that reads only the node and its usage."""
        fit = insufficient(self.checked, node, usage, dra_names)
        if fit or dra_reasons:
            hopeless = fit_unresolvable(self.checked, node, dra_names)
            return rejected("NodeResourcesFit", tuple(dict.fromkeys([*fit, *dra_reasons])), hopeless)
        return None

    @property
    def reads_beyond_node(self) -> bool:
        """Whether beyond_node can reject a node (never cached: it reads other pods or volumes)."""
        return self.volumes is not None or self.cycle.filters_pods

    def beyond_node(self, node: NodeInfo) -> Status | None:
        """The filters after NodeResourcesFit: the volume plugins, PodTopologySpread, InterPodAffinity."""
        if self.volumes is not None:
            verdict = volumes.filter_node(self.volumes, self.storage, node)
            if verdict.rejection is not None:
                return verdict.rejection
            self.decisions[node.name] = verdict.decision
        if self.cycle.filters_pods:
            return self.cycle.filter(node)
        return None

    def volume_scores(self, nodes: Sequence[NodeInfo]) -> dict[str, int] | None:
        """VolumeBinding's scores of ``nodes`` (which passed from_fit), None without volumes."""
        if self.volumes is None:
            return None
        return volumes.score_nodes(self.volumes, {n.name: self.decisions.get(n.name) for n in nodes})


CANNOT_ALLOCATE = "cannot allocate all claims"  # upstream's reason when the allocator finds no fit
DRA = pod_claims.PLUGIN


@dataclass(frozen=True, slots=True)
class DraFit:
    """DynamicResources' Filter on one node: a rejection (``detail``: draxr's own, more telling
    reason for the summary; ``fatal``: the allocator's error, which ends the pod's attempt), or the
    special claim's chosen requests and allocation plus what to write to the pod's own claims."""

    rejection: Status | None
    detail: str = ""
    fatal: AllocationFatalError | None = None
    option: NodeRequests | None = None
    special: Mapping[str, Any] | None = None
    claims: tuple[ClaimDecision, ...] = ()

    @property
    def counted(self) -> Status:
        """The rejection as the diagnosis keeps it: draxr's more telling reason in upstream's
        status (the summary counts it)."""
        assert self.rejection is not None
        if not self.detail or self.rejection.reasons == (self.detail,):
            return self.rejection
        return Status(self.rejection.code, self.rejection.plugin, (self.detail,))


class DynamicResources:
    """DynamicResources' Filter for one pod, node by node (dynamicresources.go Filter): the
    allocated claims' node selectors, then ONE allocator call with the claims to allocate, the
    pod's own unallocated claims in spec order followed by the node's special claim (when the node
    serves some of the pod's extended resources by DRA). Claims allocated already are only
    reserved. The allocator is built once (one snapshot of the allocated devices per cycle)."""

    __slots__ = ("_allocated", "_allocator", "ccycle", "features", "memo", "pod", "state")

    def __init__(self, pod: PodInfo, state: ClusterState, features: Features, ccycle: ClaimsCycle | None) -> None:
        self.pod, self.state, self.features, self.ccycle = pod, state, features, ccycle
        self._allocator: Allocator | None = None
        self._allocated: AllocatedState | None = None
        self.memo = state.static_no_fit()

    def use_allocated(self, allocated: AllocatedState) -> None:
        """Allocate against ``allocated`` instead of the state's (preemption's dry run)."""
        self._allocated, self._allocator = allocated, None

    @property
    def allocator(self) -> Allocator:
        if self._allocator is None:
            allocated = self._allocated
            if allocated is None:
                tracker, held = self.state.tracker, held_claim_key(self.pod.uid)
                # The devices preemption holds for this pod are its own to take.
                allocated = tracker.snapshot_without((held,)) if tracker.is_assumed(held) else tracker.snapshot()
            self._allocator = Allocator(self.state.inventory, allocated, self.features)
        return self._allocator

    def unavailable(self, node: NodeInfo) -> bool:
        """Some allocated claim's nodeSelector excludes the node."""
        ccycle = self.ccycle
        return ccycle is not None and bool(ccycle.selectors) and pod_claims.unavailable_on(ccycle, node.raw)

    def _reject(self, reason: str, detail: str = "") -> DraFit:
        return DraFit(unresolvable(DRA, reason), detail or reason)

    def filter(self, node: NodeInfo, options: Sequence[NodeRequests]) -> DraFit:
        """``options``: the special claim's requests on this node, the first preferred (mapping
        CRs with several classes add the same requests with later classes)."""
        user: tuple[PodClaim, ...] = self.ccycle.to_allocate if self.ccycle is not None else ()
        try:
            unavailable = self.unavailable(node)
        except NodeSelectorError as e:  # validated by prefilter; kept as upstream's error
            return DraFit(error(DRA, str(e)), str(e))
        if not user and not any(o.needs_claim for o in options):
            if unavailable:
                return self._reject(pod_claims.NOT_AVAILABLE)
            return DraFit(None, option=options[0], claims=self._decisions(()))
        reason, detail = CANNOT_ALLOCATE, ""
        for option in options:
            if not user:
                # Only the special claim: the cheap per-class count first (never rejects a node
                # the allocator would accept).
                wanted = _devices_per_class(option.dra_requests)
                memo_key = (node.name, node.labels_key, frozenset(wanted.items()))
                quick = self.memo.get(memo_key)
                if quick is None:
                    found = self.allocator.cannot_fit(node.raw, wanted)
                    if found is not None:
                        quick = found[0]
                        if found[1]:
                            self.memo[memo_key] = quick
                if quick is not None:
                    reason, detail = CANNOT_ALLOCATE, quick
                    continue
            claims = [pc.claim for pc in user]
            if option.needs_claim:
                claims.append(_claim_for_allocation(self.pod, option.claim_requests()))
            try:
                outcome = self.allocator.allocate(node.raw, claims)
            except AllocationFatalError as err:
                return DraFit(error(DRA, str(err)), str(err), fatal=err)
            if isinstance(outcome, NoFit):
                reason, detail = CANNOT_ALLOCATE, outcome.reason
                continue
            if isinstance(outcome, NodeFailure):
                reason = detail = outcome.reason
                continue
            if unavailable:
                return self._reject(pod_claims.NOT_AVAILABLE)
            results = outcome.results
            special = results[len(user)] if option.needs_claim else None
            return DraFit(None, option=option, special=special, claims=self._decisions(results[: len(user)]))
        return self._reject(reason, detail)

    def _decisions(self, allocated: Sequence[Mapping[str, Any]]) -> tuple[ClaimDecision, ...]:
        if self.ccycle is None:
            return ()
        out: list[ClaimDecision] = []
        results = iter(allocated)
        for pc in self.ccycle.claims:
            if pc.allocation is None:
                out.append(ClaimDecision(pc.entry, pc.namespace, pc.name, pc.uid, next(results)))
            elif not pc.reserved:
                out.append(ClaimDecision(pc.entry, pc.namespace, pc.name, pc.uid, None))
        return tuple(out)


@dataclass
class _Candidate:
    node: NodeInfo
    fit: int  # NodeResourcesFit's score (with draxr's device scoring, when on)
    requests: NodeRequests
    score: int = 0  # the weighted total, once the candidates are scored together
    dra: DraFit | None = None  # DynamicResources' verdict when phase 1 ran it (pods with claims)


def schedule(
    pod: PodInfo,
    state: ClusterState,
    *,
    features: Features,
    scoring: Scoring = Scoring.LEAST_ALLOCATED,
    start: int = 0,
    percentage_of_nodes: int = 0,
    device_scoring: Scoring | None = None,
    binds_volumes: bool = False,
    binds_claims: bool = False,
    equivalence: bool = True,
) -> Decision | Unschedulable:
    """Choose a node for ``pod`` and allocate its special claim there.

    Two phases, for speed: the cheap filters and scoring run over the nodes (rotated by ``start``
    and cut off after kube-scheduler's number of feasible nodes); then the DRA allocator, the
    expensive part, runs on the candidates best score first until one fits. The allocator stays the
    judge of every device decision; only the order of trying nodes differs from kube-scheduler.
    Pods with ResourceClaims of their own get DynamicResources in phase 1 on every node that passes
    the other filters, as upstream: their choice is kube-scheduler's.

    ``binds_volumes``: the caller binds and provisions the chosen volumes before the pod's Binding
    (VolumeBinding's PreBind); without it, pods with persistent or ephemeral volumes are refused.
    ``binds_claims``: the caller writes the pod's own claims as ``Decision.claims`` says before
    the Binding (DynamicResources' PreBind); without it, pods with ``spec.resourceClaims`` are
    refused. ``equivalence``: reuse the node-local part of phase 1 across pods of the same shape
    (core.equivalence, ranked by core.ranking); off, every node is evaluated afresh and ranked by
    cycle.score_nodes, the reference the cache is tested against."""
    view = pod.view
    unsupported = list(view.unsupported)
    if not binds_claims and view.claims_input is not None:
        unsupported.append(CLAIMS_UNSUPPORTED)
    if not binds_volumes and any(v.kind in ("pvc", "ephemeral") for v in pod.volumes):
        unsupported.insert(0, VOLUMES_UNSUPPORTED)
    if unsupported:
        return Unschedulable(f"draxr does not support {', '.join(unsupported)} yet", unresolvable=True)
    prefiltered = prefilter(pod, state)
    if isinstance(prefiltered, Status):
        return _prefilter_failed(prefiltered, len(state.nodes))
    cycle, vcycle, ccycle = prefiltered

    prepared = prepare_pod(view, state.mapping)
    names = state.node_names()
    total = len(names)
    if total:
        start %= total
    want = nodes_to_find(total, percentage_of_nodes)
    filters = NodeFilter(pod, cycle, vcycle, state.storage)
    entries: dict[str, tuple[int, NodeVerdict]] | None = None
    shared: dict[Hashable, Any] = {}
    if equivalence:
        table = state.equivalence.table(node_local_key(pod), state.mapping, (scoring, device_scoring))
        entries, shared = table.entries, table.shared
    local = _NodeLocal(pod, filters, prepared, state, scoring, device_scoring, shared)
    beyond_node = filters.reads_beyond_node
    nodes, usages, stamps, nominated = state.nodes, state.usage, state.node_stamps, state.nominated

    # Runs of nodes whose cached verdicts still hold are taken whole (equivalence.Aligned) when
    # nothing but the node-local verdict decides phase 1 for the pod.
    aligned: Aligned[NodeInfo, NodeVerdict] | None = None
    runs: list[tuple[int, int]] = []  # the runs taken; their rejections are counted at the end
    if equivalence and not beyond_node and ccycle is None:
        aligned = table.aligned
        if aligned is None or aligned.names is not names:
            aligned = table.aligned = Aligned(names, state)
        else:
            aligned.sync(state)

    statuses: dict[str, Status] = {}  # the diagnosis: each rejected node's status
    dra = DynamicResources(pod, state, features, ccycle)
    evaluated = 0
    while evaluated < total:
        # Phase 1: the filters and the node-local scores until `want` nodes pass (or the nodes run out).
        feasible: list[NodeInfo] = []
        verdicts: list[NodeVerdict] = []
        dra_fits: list[DraFit | None] = []
        while evaluated < total and len(feasible) < want:
            at = (start + evaluated) % total
            if aligned is not None:
                end = aligned.run_end(at, min(total, at + total - evaluated))
                if end > at:
                    end, taken, taken_verdicts = aligned.take(at, end, want - len(feasible))
                    feasible += taken
                    verdicts += taken_verdicts
                    dra_fits += [None] * len(taken)
                    runs.append((at, end))
                    evaluated += end - at
                    continue
            name = names[at]
            evaluated += 1
            node = nodes[name]
            found: NodeVerdict | None = None
            stamp = stamps.get(name)
            if entries is not None and stamp is not None and name not in nominated:
                hit = entries.get(name)
                if hit is not None and hit[0] == stamp:
                    found = hit[1]
            if name in nominated:
                # Nominated pods of higher or equal priority count on their node in the filters
                # (upstream's RunFilterPluginsWithNominatedPods), not in the scores: never
                # cached, nominations are short-lived.
                usage = usages.get(name) or EMPTY_USAGE
                found = local.verdict(node, usage, _with_nominated(pod, state, name, usage))
            elif found is None:
                found = local.verdict(node, usages.get(name) or EMPTY_USAGE)
                if entries is not None and stamp is not None:
                    entries[name] = (stamp, found)
            if aligned is not None and stamp is not None and name not in nominated:
                aligned.store(at, node, found, found.problem is None, found.ext is not None)
            if found.ext is None:  # rejected, or a broken mapping CR
                if found.problem is not None:
                    return Unschedulable(found.problem, unresolvable=True, until_inventory_changes=True)
                assert found.status is not None
                statuses[name] = found.status
                continue
            if beyond_node:
                rejection = _beyond_with_nominated(pod, state, node) if name in nominated else None
                if rejection is None:
                    rejection = filters.beyond_node(node)
                if rejection is not None:
                    statuses[name] = rejection
                    continue
            verdict: DraFit | None = None
            if ccycle is not None:
                # A pod with claims of its own: DynamicResources filters before scoring, as upstream
                # (the scores of the other plugins are normalised over the nodes that pass it).
                verdict = dra.filter(node, special_claim_options(prepared, node, found.ext, state))
                if verdict.fatal is not None:
                    return _fatal(verdict.fatal)
                if verdict.rejection is not None:
                    statuses[name] = verdict.counted
                    continue
            feasible.append(node)
            verdicts.append(found)
            dra_fits.append(verdict)

        # Every default score plugin over the feasible nodes (kube-scheduler scores the nodes that
        # pass all its filters; here the allocator may still reject some of them, unless the pod
        # has claims of its own).
        volume = filters.volume_scores(feasible) if feasible else None
        order: Iterable[int]
        chosen_scores: Callable[[int], dict[str, int]]
        if equivalence:
            ranking = rank(cycle, state, feasible, verdicts, volume)
            order, totals, chosen_scores = ranking.order(), ranking.totals, ranking.scores
        else:
            order, totals, chosen_scores = _reference_ranking(cycle, state, feasible, verdicts, scoring, volume)
        # Phase 2: the allocator on the candidates, best score first; the first fit wins.
        for i in order:
            node, ext, verdict = feasible[i], verdicts[i].ext, dra_fits[i]
            assert ext is not None
            allocation: Mapping[str, Any] | None = None
            claims: tuple[ClaimDecision, ...] = ()
            if verdict is None and ext.needs_claim:
                verdict = dra.filter(node, special_claim_options(prepared, node, ext, state))
                if verdict.fatal is not None:
                    return _fatal(verdict.fatal)
                if verdict.rejection is not None:
                    statuses[node.name] = verdict.counted
                    continue
            if verdict is not None:
                allocation, claims = verdict.special, verdict.claims
                ext = verdict.option or ext
            return Decision(
                node.name,
                totals[i],
                allocation,
                ext.dra_requests,
                ext.mappings,
                evaluated,
                chosen_scores(i),
                filters.decisions.get(node.name),
                claims,
                statuses,
            )
    if aligned is not None:
        for at, end in runs:
            for rejected_node, rejected_verdict in aligned.rejected(at, end):
                assert rejected_verdict.status is not None
                statuses[rejected_node.name] = rejected_verdict.status
    reasons: Counter[str] = Counter()
    for status in statuses.values():
        reasons.update(status.reasons)
    return Unschedulable(_summary(total, reasons), dict(reasons), statuses=statuses)


def node_local_key(pod: PodInfo) -> Hashable:
    """Everything _NodeLocal reads of the pod (and NodeFilter.before_fit and fit, through it):
    pods with equal keys get equal NodeVerdicts on a node. Extend it with any field they start to
    read."""
    view = pod.view
    required = view.required_node_affinity
    preferred = view.preferred_node_affinity
    return (
        view.node_name,
        tuple(sorted(view.node_selector.items())),
        json.dumps(required, sort_keys=True, default=repr) if required is not None else None,
        view.tolerations,
        json.dumps(preferred, sort_keys=True, default=repr) if preferred is not None else None,
        tuple(sorted(view.extended.items())),
        tuple(
            (c.index, c.name, c.long_lived, c.request_names, tuple(sorted(c.device_counts.items())))
            for c in view.containers
        ),
        tuple(sorted(pod.units.items())),
        pod.host_ports,
        pod.nonzero,
    )


class _NodeLocal:
    """Computes one pod's NodeVerdicts: the filters up to NodeResourcesFit and the node-local raw
    scores. Reads of the pod only what node_local_key holds, the mappings and the node's own
    inputs; ``shared`` keeps the device-plugin/DRA split per set of requested names the node
    advertises (and, for mapping CRs with a nodeSelector, the names that selector leaves unmapped
    there): nodes that agree share one result, as do pods of one shape (it is their table's)."""

    __slots__ = (
        "actual",
        "candidates",
        "cpu",
        "device_scoring",
        "filters",
        "least",
        "memory",
        "preferred",
        "prepared",
        "restricted",
        "shared",
        "state",
        "tolerations",
    )

    def __init__(
        self,
        pod: PodInfo,
        filters: NodeFilter,
        prepared: PodExtendedResources,
        state: ClusterState,
        scoring: Scoring,
        device_scoring: Scoring | None,
        shared: dict[Hashable, Any],
    ) -> None:
        self.filters, self.prepared, self.state, self.shared = filters, prepared, state, shared
        self.candidates = frozenset(prepared.candidates)
        self.restricted = prepared.node_restricted
        self.cpu, self.memory = pod.nonzero
        self.least = scoring is Scoring.LEAST_ALLOCATED
        self.device_scoring = device_scoring
        actual = (pod.units.get("cpu", 0), pod.units.get("memory", 0))
        self.actual = None if actual == (0, 0) else actual  # None: BalancedAllocation skips the pod
        view = pod.view
        self.tolerations = prefer_no_schedule_tolerations(view.tolerations)
        pref = view.preferred_node_affinity
        self.preferred = preferred_terms(pref) if pref is not None else None

    def verdict(self, node: NodeInfo, usage: NodeUsage, filtered: NodeUsage | None = None) -> NodeVerdict:
        """``filtered``: the usage the filters see when it is not ``usage`` (nominated pods added)."""
        rejection = self.filters.before_fit(node, filtered or usage)
        if rejection is not None:
            return NodeVerdict(rejection)
        prepared = self.prepared
        unmapped = prepared.unmapped_on(node.raw) if self.restricted else _NONE
        key = (self.candidates & node.device_plugin_names, unmapped)
        split: tuple[NodeRequests, str | None] | None = self.shared.get(key)
        if split is None:
            ext = prepared.for_allocatable(node.raw.get("status", {}).get("allocatable") or {}, unmapped)
            split = self.shared[key] = (ext, _mapping_problem(prepared, ext))
        ext, problem = split
        if problem is not None:
            return NodeVerdict(problem=problem)
        rejection = self.filters.fit(node, filtered or usage, ext.dra, ext.reasons)
        if rejection is not None:
            return NodeVerdict(rejection)
        fit = _fit_score(self.cpu, self.memory, node, usage, self.least)
        if self.device_scoring is not None and (ext.dra_requests or ext.device_plugin):
            fit = round(_with_devices(fit, self.state, node, usage, ext, self.device_scoring))
        balanced = 0
        if self.actual is not None:
            used = (usage.requested.get("cpu", 0), usage.requested.get("memory", 0))
            alloc = (node.allocatable.get("cpu", 0), node.allocatable.get("memory", 0))
            balanced = balanced_allocation_score(used, self.actual, alloc)
        taint = intolerable_prefer_no_schedule(node.taints, self.tolerations) if node.taints else 0
        affinity = node_affinity_score(self.preferred, node.raw) if self.preferred is not None else 0
        return NodeVerdict(None, None, ext, fit, balanced, taint, affinity)


_NONE: frozenset[str] = frozenset()


def _reference_ranking(
    cycle: PodCycle,
    state: ClusterState,
    nodes: Sequence[NodeInfo],
    verdicts: Sequence[NodeVerdict],
    scoring: Scoring,
    volume: Mapping[str, int] | None,
) -> tuple[list[int], list[int], Callable[[int], dict[str, int]]]:
    """The ranking without the equivalence cache (the reference the cache is tested against):
    cycle.score_nodes, with NodeResourcesFit's raw score from the verdicts (device scoring)."""
    if not nodes:
        return [], [], lambda i: {}
    fit = {n.name: v.fit for n, v in zip(nodes, verdicts, strict=True)}
    scores = score_nodes(cycle, state, nodes, most_allocated=scoring is not Scoring.LEAST_ALLOCATED, fit_override=fit)
    if volume is not None:
        scores["VolumeBinding"] = dict(volume)
    by_name = weighted_totals(scores)
    totals = [by_name.get(n.name, 0) for n in nodes]
    order = sorted(range(len(nodes)), key=lambda i: (-totals[i], nodes[i].name))
    return (
        order,
        totals,
        lambda i: {plugin: per_node.get(nodes[i].name, 0) for plugin, per_node in scores.items()},
    )


def _prefilter_failed(status: Status, total: int) -> Unschedulable:
    reason = status.first
    if status.plugin in ("InterPodAffinity", "PodTopologySpread"):  # the pod itself is invalid
        return Unschedulable(reason, unresolvable=True)
    if status.error:  # upstream fails the attempt (and retries with backoff)
        return Unschedulable(reason)
    message = f"0/{total} nodes are available: {reason}."
    if status.plugin == DRA:
        # The claim, its template's claim or a class may appear: claim, pod or class events.
        missing_class = "device class" in reason
        return Unschedulable(message, until_inventory_changes=missing_class, every_node=status)
    # A volume plugin's PreFilter (a claim missing, unbound immediate claims, ...): storage
    # events may heal it, as VolumeBinding's queueing hints requeue on PV/PVC/class events.
    by_storage = status.plugin in volumes.PLUGINS
    return Unschedulable(
        message, unresolvable=status.unresolvable, until_inventory_changes=by_storage, every_node=status
    )


def _beyond_with_nominated(pod: PodInfo, state: ClusterState, node: NodeInfo) -> Status | None:
    """The first pass of RunFilterPluginsWithNominatedPods for the filters that read other pods:
    with the nominated pods of at least the pod's priority placed on ``node`` (their labels,
    terms and volumes count), PreFilter again, then the node's filters after NodeResourcesFit.
    None also when no such pod is nominated there (the second pass, without them, follows)."""
    extra = nominated_for(pod, state, node.name)
    if not extra:
        return None
    with state.with_pods_on(node.name, extra):
        prefiltered = prefilter(pod, state)
        if isinstance(prefiltered, Status):
            return prefiltered
        cycle, vcycle, _ = prefiltered
        return NodeFilter(pod, cycle, vcycle, state.storage).beyond_node(node)


def nominated_for(pod: PodInfo, state: ClusterState, node: str) -> list[PodInfo]:
    """The pods nominated to ``node`` that ``pod``'s filters count there: priority at least its own."""
    return [p for p in state.nominated_pods(node) if p.uid != pod.uid and p.priority >= pod.priority]


def _with_nominated(pod: PodInfo, state: ClusterState, node: str, usage: NodeUsage) -> NodeUsage:
    """The node's usage with the pods nominated to it of priority at least ``pod``'s."""
    extra = nominated_for(pod, state, node)
    if not extra:
        return usage
    out = usage.copy()
    for p in extra:
        out.apply(p, +1)
    return out


def _fatal(err: AllocationFatalError) -> Unschedulable:
    return Unschedulable(str(err), unresolvable=True, fatal_kind=err.kind, until_inventory_changes=True)


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


def _mapping_problem(prepared: PodExtendedResources, ext: NodeRequests) -> str | None:
    """A mapping CR that serves one of the DRA-served names has a selector that does not compile."""
    for name in sorted(ext.dra):
        resolved = prepared.mapping.lookup(name)
        if resolved is None or resolved.source != "override" or not resolved.selectors:
            continue
        bad = invalid_selectors([str(x) for x in resolved.selectors])
        if bad:
            return f"ExtendedResourceMapping {resolved.origin} for {name} has an invalid selector: {'; '.join(bad)}"
    return None


def special_claim_options(
    prepared: PodExtendedResources, node: NodeInfo, ext: NodeRequests, state: ClusterState
) -> list[NodeRequests]:
    """The special claim's request options on ``node`` (see _class_options), for DynamicResources.filter."""
    return _class_options(prepared, _Candidate(node, 0, ext), state)


def _class_options(prepared: PodExtendedResources, cand: _Candidate, state: ClusterState) -> list[NodeRequests]:
    """The candidate's requests, then the same with later classes of multi-class mapping CRs;
    options naming a DeviceClass that does not exist are skipped (unless all do: then the first
    stays, and the allocator reports the missing class)."""
    ext = cand.requests
    choices = prepared.class_choices(ext.dra)
    if len(choices) == 1:
        return [ext]
    unmapped = prepared.unmapped_on(cand.node.raw) if prepared.node_restricted else frozenset()
    allocatable = (cand.node.raw.get("status") or {}).get("allocatable") or {}
    options = [ext if not choice else prepared.for_allocatable(allocatable, unmapped, choice) for choice in choices]
    usable = [
        o for o in options if all(state.inventory.get_class(r.device_class_name) is not None for r in o.dra_requests)
    ]
    return usable or options[:1]


def _devices_per_class(requests: Sequence[DeviceRequest]) -> dict[str, int]:
    wanted: dict[str, int] = {}
    for r in requests:
        wanted[r.device_class_name] = wanted.get(r.device_class_name, 0) + r.count
    return wanted


_NODE_NAME = unresolvable("NodeName", "node(s) didn't match the requested node name")
_UNSCHEDULABLE_NODE = unresolvable("NodeUnschedulable", "node(s) were unschedulable")
_TAINTED = unresolvable("TaintToleration", "node(s) had untolerated taint(s)")  # 1.37's wording: no key
_AFFINITY = unresolvable("NodeAffinity", "node(s) didn't match Pod's node affinity/selector")
_PORTS = unschedulable("NodePorts", "node(s) didn't have free ports for the requested pod ports")


def cheap_filter(pod: PodInfo, view: PodView, node: NodeInfo, usage: NodeUsage) -> Status | None:
    """kube-scheduler's cheap filters in its order, with their codes and words; None: all pass."""
    if view.node_name and view.node_name != node.name:
        return _NODE_NAME
    if node.unschedulable and not view.tolerates_unschedulable:
        return _UNSCHEDULABLE_NODE
    if node.taints and view.untolerated(node.taints) is not None:
        return _TAINTED
    if not node_affinity_matches(view, node):
        return _AFFINITY
    if pod.host_ports and _ports_conflict(pod, usage):
        return _PORTS
    return None


def _claim_for_allocation(pod: PodInfo, requests: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """The in-memory special claim the allocator sees (upstream's "<extended-resources>" template)."""
    return {
        "metadata": {"name": "<extended-resources>", "namespace": pod.namespace, "uid": f"assumed-{pod.uid}"},
        "spec": {"devices": {"requests": list(requests)}},
    }
