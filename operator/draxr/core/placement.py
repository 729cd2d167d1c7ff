"""Node filters, scoring and the per-pod decision (one scheduling cycle, pure).

Filters run in kube-scheduler's order and report its wording, so that the summary reads like
kube-scheduler's: "0/12 nodes are available: 4 node(s) had untolerated taint(s),
8 Insufficient example.com/gpu."
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from draxr.core import plugins as registry
from draxr.core import volumes
from draxr.core.allocator import Features
from draxr.core.cycle import PodCycle, node_names, prepare, score_nodes, weighted_totals
from draxr.core.device_totals import dra_totals
from draxr.core.equivalence import Aligned
from draxr.core.mappings_crd import invalid_selectors
from draxr.core.node_verdict import NodeVerdict
from draxr.core.plugins import node_local_key, node_resources_fit
from draxr.core.plugins.dynamic_resources import (
    DRA,
    ClaimDecision,
    DraFit,
    DynamicResources,
    claims_prefilter,
    prioritized_list_scores,
    special_claim_options,
)
from draxr.core.plugins.node_resources_fit import Scoring
from draxr.core.pod_claims import ClaimsCycle
from draxr.core.pod_view import CLAIMS_UNSUPPORTED, VOLUMES_UNSUPPORTED
from draxr.core.pods_for_a_while import with_pods_on
from draxr.core.profile import SchedulerProfile
from draxr.core.ranking import rank
from draxr.core.requests import DeviceRequest, NodeRequests, PodExtendedResources, RequestMapping, prepare_pod
from draxr.core.state import EMPTY_USAGE, ClusterState, NodeInfo, NodeUsage, PodInfo
from draxr.core.status import Status, unresolvable
from draxr.core.storage import StorageState, VolumeDecision

_MIN_FEASIBLE_NODES = 100  # upstream minFeasibleNodesToFind


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

    def rejecting_plugins(self) -> set[str]:
        """Upstream's UnschedulablePlugins: the plugins of the statuses (none when the attempt ended
        before the nodes, or a status names none: then any change may help, core.requeue)."""
        statuses = [self.every_node] if self.every_node is not None else self.statuses.values()
        plugins = {s.plugin for s in statuses}
        return set() if "" in plugins else plugins


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

    __slots__ = (
        "checks",
        "cycle",
        "decisions",
        "narrowed",
        "node_gated",
        "pod",
        "resources",
        "storage",
        "view",
        "volumes",
    )

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
        # The node-local filters this pod does not skip, in the profile's order.
        self.checks = tuple(c for plugin in registry.REGISTRY.filters if (c := plugin.prefilter(pod)) is not None)
        # Only NodeUnschedulable and TaintToleration run: a schedulable, untainted node passes.
        self.node_gated = len(self.checks) <= 2 and not (
            self.view.node_name or self.view.node_selector or self.view.required_node_affinity or pod.host_ports
        )
        self.resources = node_resources_fit.PLUGIN.prefilter(pod)

    def before_fit(self, node: NodeInfo, usage: NodeUsage) -> Status | None:
        if self.narrowed is not None and node.name not in self.narrowed:
            return unresolvable("", self.cycle.names.absent_reason)
        if self.node_gated and not node.unschedulable and not node.taints:
            return None  # (the pod asks nothing the other filters check: the common node passes)
        for check in self.checks:
            status = check(node, usage)
            if status is not None:
                return status
        return None

    def from_fit(
        self, node: NodeInfo, usage: NodeUsage, dra_names: Collection[str] = (), dra_reasons: Sequence[str] = ()
    ) -> Status | None:
        """NodeResourcesFit (see Fit.filter for ``dra_names`` and ``dra_reasons``), then beyond_node."""
        rejection = self.resources.filter(node, usage, dra_names, dra_reasons)
        return rejection if rejection is not None else self.beyond_node(node)

    def fit(
        self, node: NodeInfo, usage: NodeUsage, dra_names: Collection[str] = (), dra_reasons: Sequence[str] = ()
    ) -> Status | None:
        """NodeResourcesFit: the last filter that reads only the node and its usage."""
        return self.resources.filter(node, usage, dra_names, dra_reasons)

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
        """VolumeBinding's scores of ``nodes`` (which passed from_fit); None without volumes: 0 on
        every node (upstream runs the plugin all the same: StorageCapacityScoring is on by
        default, so its PreScore never skips), which the ranking keeps as one constant."""
        if self.volumes is None:
            return None
        return volumes.score_nodes(self.volumes, {n.name: self.decisions.get(n.name) for n in nodes})


def schedule(
    pod: PodInfo,
    state: ClusterState,
    *,
    features: Features,
    scoring: Scoring | None = None,
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
    judge of every device decision; the scores are normalised over the nodes of phase 1, where
    kube-scheduler normalises over those DynamicResources' Filter leaves, so when the allocator
    rejects a node the choice may differ from kube-scheduler's (the scheduling differential's known
    deviation, compare_scheduling.two_phase_scoring).
    Pods with ResourceClaims of their own get DynamicResources in phase 1 on every node that passes
    the other filters, as upstream: their choice is kube-scheduler's.

    ``binds_volumes``: the caller binds and provisions the chosen volumes before the pod's Binding
    (VolumeBinding's PreBind); without it, pods with persistent or ephemeral volumes are refused.
    ``binds_claims``: the caller writes the pod's own claims as ``Decision.claims`` says before
    the Binding (DynamicResources' PreBind); without it, pods with ``spec.resourceClaims`` are
    refused. ``equivalence``: reuse the node-local part of phase 1 across pods of the same shape
    (core.equivalence, ranked by core.ranking); off, every node is evaluated afresh and ranked by
    cycle.score_nodes, the reference the cache is tested against.

    The profile is ``state.profile`` (a KubeSchedulerConfiguration's, else kube-scheduler's
    default); ``scoring`` replaces its NodeResourcesFit strategy type (tests and benchmarks);
    ``percentage_of_nodes``: percentageOfNodesToScore (the shell's setting, which a configuration
    file sets from its profile's or its global one)."""
    refused = _unsupported(pod, binds_volumes=binds_volumes, binds_claims=binds_claims)
    if refused is not None:
        return refused
    prefiltered = prefilter(pod, state)
    if isinstance(prefiltered, Status):
        return _prefilter_failed(prefiltered, len(state.nodes))
    profile = state.profile if scoring is None else state.profile.with_scoring(scoring)
    attempt = _Attempt(pod, state, profile, prefiltered, features, device_scoring, equivalence)
    return attempt.run(start, nodes_to_find(len(attempt.names), percentage_of_nodes))


def _unsupported(pod: PodInfo, *, binds_volumes: bool, binds_claims: bool) -> Unschedulable | None:
    """What draxr does not run: fields it does not support, and pods whose own claims or volumes
    the caller cannot write or bind before the Binding."""
    view = pod.view
    unsupported = list(view.unsupported)
    if not binds_claims and view.claims_input is not None:
        unsupported.append(CLAIMS_UNSUPPORTED)
    if not binds_volumes and any(v.kind in ("pvc", "ephemeral") for v in pod.volumes):
        unsupported.insert(0, VOLUMES_UNSUPPORTED)
    if unsupported:
        return Unschedulable(f"draxr does not support {', '.join(unsupported)} yet", unresolvable=True)
    return None


_Feasible = tuple[list[NodeInfo], list[NodeVerdict], list["DraFit | None"]]


class _Attempt:
    """One pod's attempt after PreFilter (schedule's two phases): phase 1, the filters and the
    node-local scores (through the pod shape's equivalence table) until enough nodes pass; the
    ranking of those (every score plugin of the profile); phase 2, the allocator on them best
    first. Phase 1 goes on from where it stopped when phase 2 finds no fit; when the nodes run out,
    the diagnosis: each rejected node's status and kube-scheduler's summary."""

    __slots__ = (
        "aligned",
        "ccycle",
        "cycle",
        "dra",
        "entries",
        "equivalence",
        "evaluated",
        "filters",
        "local",
        "names",
        "pod",
        "prepared",
        "profile",
        "runs",
        "state",
        "statuses",
    )

    def __init__(
        self,
        pod: PodInfo,
        state: ClusterState,
        profile: SchedulerProfile,
        prefiltered: Prefiltered,
        features: Features,
        device_scoring: Scoring | None,
        equivalence: bool,
    ) -> None:
        cycle, vcycle, ccycle = prefiltered
        self.pod, self.state, self.profile, self.cycle, self.ccycle = pod, state, profile, cycle, ccycle
        self.prepared = prepare_pod(pod.view, state.mapping)
        self.names = state.node_names()
        self.filters = NodeFilter(pod, cycle, vcycle, state.storage)
        self.local = _NodeLocal(pod, self.filters, self.prepared, state, profile, device_scoring, {}, features)
        self.dra = DynamicResources(pod, state, features, ccycle)
        self.statuses: dict[str, Status] = {}  # the diagnosis: each rejected node's status
        self.runs: list[tuple[int, int]] = []  # the runs taken whole; their rejections are counted at the end
        self.evaluated = 0
        self.entries: dict[str, tuple[int, NodeVerdict]] | None = None
        self.aligned: Aligned[NodeInfo, NodeVerdict] | None = None
        self.equivalence = equivalence
        self._use_equivalence((profile, device_scoring))

    def _use_equivalence(self, options: tuple[Hashable, ...]) -> None:
        """The pod shape's table of cached verdicts (core.equivalence) and, when nothing but the
        node-local verdict decides phase 1 for the pod, its runs of nodes whose cached verdicts
        still hold, taken whole (equivalence.Aligned)."""
        state = self.state
        if self.local.resources.reads_devices(lambda name: name in state.mapping):
            # NodeResourcesFit counts the devices of a class on the node: the node's stamp covers its
            # own slices and the allocations in its pools, not the classes (their revision keys the
            # table) nor slices shared with other nodes (then nothing is cached).
            options = (*options, state.inventory.class_revision)
            if state.inventory.has_shared_slices:
                self.equivalence = False
        if not self.equivalence:
            return
        table = state.equivalence.table(node_local_key(self.pod), state.mapping, options)
        self.entries = table.entries
        self.local.shared = table.shared
        if not self.filters.reads_beyond_node and self.ccycle is None:
            aligned = table.aligned
            if aligned is None or aligned.names is not self.names:
                aligned = table.aligned = Aligned(self.names, state.stamps)
            else:
                aligned.sync(state.stamps)
            self.aligned = aligned

    def run(self, start: int, want: int) -> Decision | Unschedulable:
        """``start``: where the nodes are rotated to; ``want``: the feasible nodes phase 1 looks for."""
        total = len(self.names)
        if total:
            start %= total
        while self.evaluated < total:
            found = self._phase1(start, want)
            if isinstance(found, Unschedulable):
                return found
            chosen = self._phase2(*found)
            if chosen is not None:
                return chosen
        return self._diagnosis()

    def _phase1(self, start: int, want: int) -> _Feasible | Unschedulable:
        """The filters and the node-local scores from where the last pass stopped until ``want``
        nodes pass (or the nodes run out); an Unschedulable ends the attempt."""
        pod, state, local, filters, dra, prepared = (
            self.pod,
            self.state,
            self.local,
            self.filters,
            self.dra,
            self.prepared,
        )
        names, entries, aligned, statuses, ccycle = self.names, self.entries, self.aligned, self.statuses, self.ccycle
        nodes, usages, stamps, nominated = state.nodes, state.usage, state.node_stamps, state.nominated
        beyond_node, total, evaluated = filters.reads_beyond_node, len(names), self.evaluated
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
                    self.runs.append((at, end))
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
                    return _fatal(verdict)
                if verdict.rejection is not None:
                    statuses[name] = verdict.counted
                    continue
            feasible.append(node)
            verdicts.append(found)
            dra_fits.append(verdict)
        self.evaluated = evaluated
        return feasible, verdicts, dra_fits

    def _phase2(
        self, feasible: list[NodeInfo], verdicts: list[NodeVerdict], dra_fits: list[DraFit | None]
    ) -> Decision | Unschedulable | None:
        """Every score plugin of the profile over the feasible nodes (kube-scheduler scores the
        nodes that pass all its filters; here the allocator may still reject some of them, unless
        the pod has claims of its own), then the allocator on them, best score first: the first
        fit wins. None: no node fits."""
        filters, state, statuses = self.filters, self.state, self.statuses
        volume = filters.volume_scores(feasible) if feasible else None
        # DynamicResources' Score: the firstAvailable subrequests each node's Filter chose.
        dra_scores = prioritized_list_scores(self.ccycle, dra_fits) if feasible else None
        order: Iterable[int]
        chosen_scores: Callable[[int], dict[str, int]]
        if self.equivalence:
            ranking = rank(self.cycle, state, feasible, verdicts, volume, dra_scores, self.profile)
            order, totals, chosen_scores = ranking.order(), ranking.totals, ranking.scores
        else:
            order, totals, chosen_scores = _reference_ranking(
                self.cycle, state, feasible, verdicts, self.profile, volume, dra_scores
            )
        for i in _short_last(order, verdicts):
            node, ext, verdict = feasible[i], verdicts[i].ext, dra_fits[i]
            assert ext is not None
            allocation: Mapping[str, Any] | None = None
            claims: tuple[ClaimDecision, ...] = ()
            if verdict is None and ext.needs_claim:
                verdict = self.dra.filter(node, special_claim_options(self.prepared, node, ext, state))
                if verdict.fatal is not None:
                    return _fatal(verdict)
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
                self.evaluated,
                chosen_scores(i),
                filters.decisions.get(node.name),
                claims,
                statuses,
            )
        return None

    def _diagnosis(self) -> Unschedulable:
        """No node fits: every rejected node's status (those of the runs taken whole too) and the
        summary of their reasons."""
        statuses = self.statuses
        if self.aligned is not None:
            for at, end in self.runs:
                for rejected_node, rejected_verdict in self.aligned.rejected(at, end):
                    assert rejected_verdict.status is not None
                    statuses[rejected_node.name] = rejected_verdict.status
        reasons: Counter[str] = Counter()
        for status in statuses.values():
            reasons.update(status.reasons)
        return Unschedulable(_summary(len(self.names), reasons), dict(reasons), statuses=statuses)


class _NodeLocal:
    """Computes one pod's NodeVerdicts: the filters up to NodeResourcesFit and the node-local raw
    scores. Reads of the pod only what node_local_key holds, the mappings and the node's own
    inputs; ``shared`` keeps the device-plugin/DRA split per set of requested names the node
    advertises (and, for mapping CRs with a nodeSelector, the names that selector leaves unmapped
    there): nodes that agree share one result, as do pods of one shape (it is their table's)."""

    __slots__ = (
        "candidates",
        "filters",
        "identities",
        "prepared",
        "resources",
        "restricted",
        "scorers",
        "shared",
    )

    def __init__(
        self,
        pod: PodInfo,
        filters: NodeFilter,
        prepared: PodExtendedResources,
        state: ClusterState,
        profile: SchedulerProfile,
        device_scoring: Scoring | None,
        shared: dict[Hashable, Any],
        features: Features,
    ) -> None:
        self.filters, self.prepared, self.shared = filters, prepared, shared
        self.candidates = frozenset(prepared.candidates)
        self.restricted = prepared.node_restricted
        self.resources = node_resources_fit.PLUGIN.prefilter(
            pod, state, profile.fit, device_scoring, filters.resources.checked, dra_totals(state, features)
        )
        self.identities = bool(state.identities())  # (a node moving back to its device plugin)
        self.scorers = tuple(plugin.prescore(pod) for plugin in registry.REGISTRY.scorers)

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
        rejection = self.resources.filter(node, filtered or usage, ext.dra, ext.reasons)
        if rejection is None and ext.device_plugin and self.identities:
            rejection = self.resources.device_plugin_conflict(node, ext)
        if rejection is not None:
            return NodeVerdict(rejection)
        return NodeVerdict(
            None,
            None,
            ext,
            self.resources.score(node, usage, ext),
            tuple(score(node, usage) if score is not None else 0 for score in self.scorers),
            self.resources.short,
        )


_NONE: frozenset[str] = frozenset()


def _short_last(order: Iterable[int], verdicts: Sequence[NodeVerdict]) -> Iterator[int]:
    """Phase 2's order: the ranking's, but the nodes NodeResourcesFit counted too few free devices
    on (``NodeVerdict.short``) after the others. Upstream's DynamicResources Filter turns those
    down before scoring; here the allocator would, one by one, and MostAllocated ranks a full node
    first. (A device that several claims may share, consumable capacity, counts as allocated: a
    node short by the count could still fit, then it is tried after the others.)"""
    deferred: list[int] = []
    for i in order:
        if verdicts[i].short:
            deferred.append(i)
        else:
            yield i
    yield from deferred


def _reference_ranking(
    cycle: PodCycle,
    state: ClusterState,
    nodes: Sequence[NodeInfo],
    verdicts: Sequence[NodeVerdict],
    profile: SchedulerProfile,
    volume: Mapping[str, int] | None,
    dra: Sequence[int] | None,
) -> tuple[list[int], list[int], Callable[[int], dict[str, int]]]:
    """The ranking without the equivalence cache (the reference the cache is tested against):
    cycle.score_nodes, with NodeResourcesFit's raw score from the verdicts (device scoring)."""
    if not nodes:
        return [], [], lambda i: {}
    fit = {n.name: v.fit for n, v in zip(nodes, verdicts, strict=True)}
    scores = score_nodes(cycle, state, nodes, profile=profile, fit_override=fit)
    scores["VolumeBinding"] = dict(volume) if volume is not None else dict.fromkeys((n.name for n in nodes), 0)
    scores["DynamicResources"] = (
        {n.name: s for n, s in zip(nodes, dra, strict=True)}
        if dra is not None
        else dict.fromkeys((n.name for n in nodes), 0)
    )
    scores = {plugin: per_node for plugin, per_node in scores.items() if profile.scores(plugin)}
    by_name = weighted_totals(scores, profile)
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
    with with_pods_on(state, node.name, extra):
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


def _fatal(fit: DraFit) -> Unschedulable:
    """DynamicResources' Filter failed with the allocator's error: upstream's schedulePod returns
    the error (findNodesThatPassFilters stops at the first), so the attempt ends with no diagnosis
    (no node statuses, no PostFilter), and its FailedScheduling message is the wrapped error
    (``running "DynamicResources" filter plugin: ...``)."""
    assert fit.fatal is not None
    assert fit.rejection is not None
    return Unschedulable(
        fit.rejection.first, unresolvable=True, fatal_kind=fit.fatal.kind, until_inventory_changes=True
    )


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
