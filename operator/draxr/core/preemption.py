"""Preemption (PostFilter), pure: kube-scheduler 1.37.2's DefaultPreemption, made DRA-aware.

Ported from ``pkg/scheduler/framework/preemption/preemption.go`` (Evaluator.evaluate,
findCandidates, DryRunPreemption, pickOneNodeForPreemption) and
``plugins/defaultpreemption/default_preemption.go`` (PodEligibleToPreemptOthers,
SelectVictimsOnNode, filterPodsWithPDBViolation, calculateNumCandidates):

* only nodes whose status was ``Unschedulable`` are candidates (never UnschedulableAndUnresolvable);
* on each, every lower-priority pod is removed and the filters run again (with the nominated pods
  of higher or equal priority counted); if the pod fits, victims are reprieved one by one in
  MoreImportantPod order, those whose PDB would be violated first;
* at least max(10 % of the candidates, 100) candidates, from a random offset; the node chosen by
  fewest PDB violations, lowest highest victim priority, lowest sum of priorities, fewest victims,
  latest start of the highest-priority victims, then the first;
* the message is upstream's, word for word (``preemption: ...``).

Beyond upstream (which cannot preempt for DRA devices in 1.37: KEP-5690 is open):

* a node where DynamicResources could not allocate (UnschedulableAndUnresolvable upstream) is a
  candidate too, and the dry run frees the devices of each victim's special claim
  (``status.extendedResourceClaimStatus``) and of every claim whose ``reservedFor`` holds only
  victims; a claim also reserved for a pod that stays, or for a non-pod consumer, stays allocated;
* the devices the dry run found for the preemptor are returned (``Outcome.held``) so that the
  shell holds them for it (ClusterState's tracker, ``claims.held_claim_key``) until it binds, and
  while the victims' claims are still allocated the preemptor waits (``releasing``) instead of
  evicting again.

Where KEP-5690 is still open, draxr decides: an admin-access result never counts as allocated
(core.allocator), so freeing it frees nothing and a victim holding only such claims frees no
device; a claim reserved for victims and for a pod that stays (or any non-pod consumer) stays
allocated; a preemptor deleted (or bound elsewhere) while it waits loses its hold at once (the
shell's Preemptor.release), and its victims are not brought back (as upstream).

RemovePod/AddPod: node-local filters see the node's usage less the removed pods; for a pod whose
filters read other pods or volumes (spreading, inter-pod affinity, the volume plugins) the removed
pods are taken out of every count (pods_for_a_while.without_pods) and PreFilter runs again, which is
what upstream's extensions compute incrementally. Nominated pods of at least the pod's priority
count as upstream's RunFilterPluginsWithNominatedPods counts them: with their resources and ports,
and for filters that read other pods in a first pass with them placed (then a second without);
their devices through their hold. Not reproduced: PodTopologySpread's RemovePod/AddPod count a
terminating victim that its PreFilter left out (an upstream inconsistency: removing a terminating
pod lowers its domain's count there); draxr never counts terminating pods.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ParamSpec

from draxr.core.allocator import Features
from draxr.core.allocator.allocated_devices import AllocatedState
from draxr.core.allocator.model import DeviceId
from draxr.core.budget import Budget
from draxr.core.claims import assumed_claim_key, held_claim_key
from draxr.core.placement import NodeFilter, Unschedulable, nominated_for, prefilter
from draxr.core.plugins.dynamic_resources import (
    CANNOT_ALLOCATE,
    DRA,
    ClaimDecision,
    DynamicResources,
    special_claim_options,
)
from draxr.core.pod_claims import ClaimsCycle
from draxr.core.pods_for_a_while import with_pods_on, without_pods
from draxr.core.requests import NodeRequests, prepare_pod
from draxr.core.state import EMPTY_USAGE, ClusterState, NodeInfo, NodeUsage, PodInfo
from draxr.core.status import Code, Status, error, unresolvable

MIN_CANDIDATE_NODES_PERCENTAGE = 10  # DefaultPreemptionArgs' defaults
MIN_CANDIDATE_NODES_ABSOLUTE = 100
NOT_HELPFUL = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"
POLICY_NEVER = "not eligible due to preemptionPolicy=Never."
TERMINATING = "not eligible due to a terminating pod on the nominated node."
STATE_NOT_FOUND = "not found"  # fwk.ErrNotFound
RELEASING = "not eligible due to claims of preempted pods not yet deallocated."
_MAX_INT32 = 2**31 - 1
P = ParamSpec("P")


@dataclass(frozen=True, slots=True)
class Candidate:
    node: str
    victims: tuple[PodInfo, ...]  # most important first
    pdb_violations: int
    held: Mapping[str, Any] | None = None  # the preemptor's special-claim allocation in the dry run


@dataclass(frozen=True)
class Outcome:
    """PostFilter's result. ``message``: what follows the filters' summary in the FailedScheduling
    message ("" when preemption says nothing); ``chosen``: the node to nominate and its victims;
    ``clear_nomination``: the pod's nominatedNodeName is to be cleared (no candidate);
    ``statuses``: the dry run's status of each node it tried and rejected."""

    message: str
    chosen: Candidate | None = None
    clear_nomination: bool = False
    statuses: Mapping[str, Status] = field(default_factory=dict)

    @property
    def held(self) -> Mapping[str, Any] | None:
        return self.chosen.held if self.chosen is not None else None


def more_important(a: PodInfo, b: PodInfo) -> bool:
    """util.MoreImportantPod: higher priority, then the earlier start (an unset start is "now")."""
    if a.priority != b.priority:
        return a.priority > b.priority
    return _start(a) < _start(b)


def _start(pod: PodInfo) -> str:
    return pod.started or "~"  # "~" sorts after every RFC 3339 time: now, later than any start


def _importance_key(pod: PodInfo, position: int = 0) -> tuple[int, str, int]:
    """MoreImportantPod as a sort key. Pods without a start time compare upstream by the time.Now()
    each got, in the node's pod order: ``position`` (its place there) breaks their ties."""
    return (-pod.priority, _start(pod), 0 if pod.started else position)


def num_candidates(potential: int) -> int:
    """calculateNumCandidates with the default arguments."""
    n = potential * MIN_CANDIDATE_NODES_PERCENTAGE // 100
    return min(max(n, MIN_CANDIDATE_NODES_ABSOLUTE), potential)


def split_by_budget(pods: Sequence[PodInfo], budgets: Sequence[Budget]) -> tuple[list[PodInfo], list[PodInfo]]:
    """filterPodsWithPDBViolation: (violating, non-violating), each in the given order."""
    allowed = [b.allowed for b in budgets]
    violating: list[PodInfo] = []
    fine: list[PodInfo] = []
    for pod in pods:
        violated = False
        if pod.labels:
            for i, budget in enumerate(budgets):
                if budget.namespace != pod.namespace or budget.selector is None:
                    continue
                if not budget.selector.matches(pod.labels) or pod.name in budget.disrupted:
                    continue
                allowed[i] -= 1
                if allowed[i] < 0:
                    violated = True
                    break  # (upstream's podIsViolating returns here: later budgets keep their count)
        (violating if violated else fine).append(pod)
    return violating, fine


def wants_preemption(pod: PodInfo) -> bool:
    policy = ((pod.raw.get("spec") or {}).get("preemptionPolicy")) or "PreemptLowerPriority"
    return policy != "Never"


def _freeable(pods: Iterable[PodInfo], state: ClusterState) -> dict[str, frozenset[str]]:
    """The tracker keys the removal of some of ``pods`` may free, each with the pods that must
    all be gone: a pod's special claim (written or in flight) on its own, a claim reserved only
    for pods on all of them (one with a non-pod consumer is never freed)."""
    needs: dict[str, frozenset[str]] = {}
    for p in pods:
        for key in (*state.special_claims.get(p.uid, ()), assumed_claim_key(p.uid)):
            needs[key] = frozenset((p.uid,))
        for key in state.reserved_claims.get(p.uid, ()):
            claim = state.claims.get(key)
            if claim is not None and all(r == "pods" for r, _ in claim.consumers):
                needs[key] = frozenset(u for _, u in claim.consumers)
    return needs


@dataclass(frozen=True)
class Releasing:
    """What a preemptor waits for after its preemption: its victims' devices. ``claims``: the
    tracker keys freed_claims found when it chose; ``victims``: their uids, for what appears
    after the choice (a victim's binding was in flight: its allocation still assumed, its special
    claim written later under a new name)."""

    victims: frozenset[str] = frozenset()
    claims: tuple[str, ...] = ()

    def pending(self, state: ClusterState) -> bool:
        tracker = state.tracker
        for uid in self.victims:
            if tracker.is_assumed(assumed_claim_key(uid)):
                return True
            if any((c := state.claims.get(k)) is not None and c.allocated for k in state.special_claims.get(uid, ())):
                return True
        return any((c := state.claims.get(key)) is not None and c.allocated for key in self.claims)


def releasing_of(victims: Sequence[PodInfo], state: ClusterState) -> Releasing:
    return Releasing(frozenset(v.uid for v in victims), tuple(freed_claims(victims, state)))


def freed_claims(victims: Sequence[PodInfo], state: ClusterState) -> list[str]:
    """The tracker keys whose allocations the victims' removal frees: each victim's special claim
    (written or in flight) and every claim reserved only for victims."""
    gone = {v.uid for v in victims}
    return [key for key, uids in _freeable(victims, state).items() if uids <= gone]


class _DryRun:
    """The preemptor's filters on one node with some pods removed (SelectVictimsOnNode's
    RunFilterPluginsWithNominatedPods): the filters on the node's usage less the removed pods
    plus the nominated pods of higher or equal priority, then DynamicResources with the removed
    pods' claims freed. When the pod's filters read other pods or volumes (spreading, inter-pod
    affinity, the volume plugins), the removed pods are taken out of the state's counts for the
    check and PreFilter runs again: upstream's RemovePod/AddPod extensions, computed afresh."""

    def __init__(self, pod: PodInfo, state: ClusterState, features: Features) -> None:
        self.pod, self.state, self.features = pod, state, features
        prefiltered = prefilter(pod, state)
        assert not isinstance(prefiltered, Status), "preemption runs after the filters ran"
        cycle, vcycle, self.ccycle = prefiltered
        self.filters = NodeFilter(pod, cycle, vcycle, state.storage)
        self.prepared = prepare_pod(pod.view, state.mapping)
        self.own_hold = held_claim_key(pod.uid)
        self.beyond = self.filters.reads_beyond_node
        self.also_freed: list[str] = []  # claims counted as free besides the removed pods' (rebuilt_hold)

    def nominated(self, node: str) -> list[PodInfo]:
        return nominated_for(self.pod, self.state, node)

    def fits(self, node_name: str, removed: Sequence[PodInfo]) -> tuple[Status | None, Mapping[str, Any] | None]:
        """For a pod whose filters read other pods (``beyond``; the others go through _Trial's
        incremental checks): (the first failing filter's status or None, the special claim's
        allocation when it fits)."""
        with without_pods(self.state, removed):
            nominated = self.nominated(node_name)
            if nominated:  # RunFilterPluginsWithNominatedPods' first pass: with them placed
                with with_pods_on(self.state, node_name, nominated):
                    first = self._recheck(node_name, removed, count_nominated=False)
                if first[0] is not None:
                    return first
            return self._recheck(node_name, removed)

    def _recheck(
        self, node_name: str, removed: Sequence[PodInfo], count_nominated: bool = True
    ) -> tuple[Status | None, Mapping[str, Any] | None]:
        """PreFilter again on the state as it is now, then the node's filters."""
        prefiltered = prefilter(self.pod, self.state)
        if isinstance(prefiltered, Status):
            return prefiltered, None
        cycle, vcycle, ccycle = prefiltered
        filters = NodeFilter(self.pod, cycle, vcycle, self.state.storage)
        usage = (self.state.usage.get(node_name) or EMPTY_USAGE).copy()
        return self._check(node_name, usage, filters, ccycle, removed, count_nominated)

    def _check(
        self,
        node_name: str,
        usage: NodeUsage,
        filters: NodeFilter,
        ccycle: ClaimsCycle | None,
        removed: Sequence[PodInfo],
        count_nominated: bool = True,
    ) -> tuple[Status | None, Mapping[str, Any] | None]:
        state = self.state
        node = state.nodes[node_name]
        if count_nominated:  # (already in the usage when placed by with_pods_on)
            for p in self.nominated(node_name):
                usage.apply(p, +1)
        status = filters.before_fit(node, usage)
        if status is not None:
            return status, None
        ext = self.requests_on(node)
        status = filters.fit(node, usage, ext.dra, ext.reasons)
        if status is None and filters.reads_beyond_node:
            status = filters.beyond_node(node)
        if status is not None:
            return status, None
        if not ext.needs_claim and ccycle is None:
            return None, None
        dra = DynamicResources(self.pod, state, self.features, ccycle)
        dra.use_allocated(self._allocated(removed))
        verdict = dra.filter(node, special_claim_options(self.prepared, node, ext, state))
        if verdict.rejection is not None:
            return verdict.counted, None
        return None, verdict.special

    def _allocated(self, removed: Sequence[PodInfo]) -> AllocatedState:
        keys = freed_claims(removed, self.state)
        keys += self.also_freed
        keys.append(self.own_hold)
        return self.state.tracker.snapshot_without(keys)

    def requests_on(self, node: NodeInfo) -> NodeRequests:
        """The pod's device-plugin/DRA split on ``node``, as placement's _NodeLocal makes it."""
        prepared = self.prepared
        unmapped = prepared.unmapped_on(node.raw) if prepared.node_restricted else frozenset()
        return prepared.for_allocatable(node.raw.get("status", {}).get("allocatable") or {}, unmapped)


class _Trial:
    """One node's dry run, pods removed and added back one at a time (SelectVictimsOnNode's
    removePod/addPod): the node-local filters on a usage kept up to date, DynamicResources
    recomputed only when the set of freed claims changes. For a pod whose filters read other
    pods, every check goes through _DryRun.fits (the counts recomputed)."""

    def __init__(self, dry: _DryRun, node: str, removed: Sequence[PodInfo]) -> None:
        self.dry, self.node = dry, node
        self.removed = list(removed)
        self.uids = {p.uid for p in removed}
        self.held: Mapping[str, Any] | None = None
        if dry.beyond:
            return
        state = dry.state
        self.usage = (state.usage.get(node) or EMPTY_USAGE).copy()
        for p in removed:
            self.usage.apply(p, -1)
        for p in dry.nominated(node):
            self.usage.apply(p, +1)
        # The claims the removed pods may free (only those holding devices: the others change
        # nothing the allocator reads), each with the pods that must all be gone.
        holds = state.tracker.holds
        self.needs = {key: uids for key, uids in _freeable(removed, state).items() if holds(key)}
        self.dra: dict[frozenset[str], tuple[Status | None, Mapping[str, Any] | None]] = {}
        self.ext = dry.requests_on(state.nodes[node])
        # The last fit: its freed claims and the devices its allocation took (see _still_fits).
        self.fit: tuple[frozenset[str], frozenset[DeviceId]] | None = None
        self.whole_devices = _whole_devices_only(state, node)

    def check(self) -> Status | None:
        dry = self.dry
        if dry.beyond:
            status, self.held = dry.fits(self.node, self.removed)
            return status
        node, filters, ext = dry.state.nodes[self.node], dry.filters, self.ext
        status = filters.before_fit(node, self.usage)
        if status is None:
            status = filters.fit(node, self.usage, ext.dra, ext.reasons)
        if status is not None:
            return status
        if not ext.needs_claim and dry.ccycle is None:
            return None
        freed = frozenset(k for k, uids in self.needs.items() if uids <= self.uids)
        verdict = self.dra.get(freed)
        if verdict is None and self._still_fits(freed):
            assert self.fit is not None
            verdict = self.dra[freed] = self.dra[self.fit[0]]
        if verdict is None:
            dra = DynamicResources(dry.pod, dry.state, dry.features, dry.ccycle)
            dra.use_allocated(dry.state.tracker.snapshot_without((*freed, dry.own_hold)))
            found = dra.filter(node, special_claim_options(dry.prepared, node, ext, dry.state))
            verdict = self.dra[freed] = (found.counted if found.rejection is not None else None, found.special)
            if found.rejection is None:
                self.fit = (freed, _devices_taken(found.special, found.claims))
        status, special = verdict
        if status is None:
            self.held = special
        return status

    def _still_fits(self, freed: frozenset[str]) -> bool:
        """The last fit's allocation holds with fewer claims freed when those put back hold none
        of its devices: the allocator, a first-found search whose answers only shrink as devices
        are taken, then finds that same allocation (so the verdict and the held devices are what
        it would compute). Only for whole devices: with shared counters or consumable capacity a
        device put back in use can take what another device needs."""
        fit = self.fit
        if fit is None or not self.whole_devices or not freed <= fit[0]:
            return False
        tracker = self.dry.state.tracker
        for key in fit[0] - freed:
            held = tracker.dedicated_devices(key)
            if held is None or not held.isdisjoint(fit[1]):
                return False
        return True

    def add_back(self, pod: PodInfo) -> bool:
        """Put ``pod`` back; if the preemptor no longer fits, take it off again (False)."""
        self._move(pod, +1)
        if self.check() is None:
            return True
        self._move(pod, -1)
        self.check()  # (the held devices of the state it returns to)
        return False

    def _move(self, pod: PodInfo, sign: int) -> None:
        if sign > 0:
            self.removed.remove(pod)
            self.uids.discard(pod.uid)
        else:
            self.removed.append(pod)
            self.uids.add(pod.uid)
        if not self.dry.beyond:
            self.usage.apply(pod, sign)


def _whole_devices_only(state: ClusterState, node: str) -> bool:
    """No device the node sees consumes counters or may be allocated several times."""
    for sl in state.inventory.slices_for_node(node):
        if sl.shared_counters:
            return False
        for d in sl.devices:
            if d.consumes_counters or d.allow_multiple_allocations:
                return False
    return True


def _devices_taken(special: Mapping[str, Any] | None, claims: Iterable[ClaimDecision]) -> frozenset[DeviceId]:
    """The devices an allocation (the special claim's and the pod's own claims') takes."""
    out: set[DeviceId] = set()
    for allocation in (special, *(c.allocation for c in claims)):
        for r in ((allocation or {}).get("devices") or {}).get("results") or ():
            out.add((str(r.get("driver", "")), str(r.get("pool", "")), str(r.get("device", ""))))
    return frozenset(out)


def select_victims(dry: _DryRun, node: str, budgets: Sequence[Budget]) -> tuple[Candidate | None, Status | None]:
    """SelectVictimsOnNode: (the candidate, None) or (None, why the node cannot be one)."""
    pod = dry.pod
    potential = [p for p in dry.state.placed_pods(node) if p.priority < pod.priority]
    if not potential:
        return None, unresolvable("", NO_VICTIMS)
    trial = _Trial(dry, node, potential)
    status = trial.check()
    if status is not None:
        return None, status
    position = {p.uid: i for i, p in enumerate(potential)}  # the node's pod order

    def importance(p: PodInfo) -> tuple[int, str, int]:
        return _importance_key(p, position[p.uid])

    potential.sort(key=importance)
    violating, fine = split_by_budget(potential, budgets)
    victims: list[PodInfo] = []
    violations = 0
    for group, counts in ((violating, True), (fine, False)):
        for p in group:
            if not trial.add_back(p):
                victims.append(p)
                violations += counts
    if violating and fine:
        victims.sort(key=importance)
    return Candidate(node, tuple(victims), violations, trial.held), None


def pick_one(candidates: Sequence[Candidate]) -> Candidate:
    """pickOneNodeForPreemption: each criterion keeps the best; the first of the rest wins."""

    def earliest_start(c: Candidate) -> str:
        top = c.victims[0].priority
        return min(_start(v) for v in c.victims if v.priority == top)

    criteria: list[Callable[[Candidate], Any]] = [
        lambda c: -c.pdb_violations,
        lambda c: -c.victims[0].priority,
        lambda c: -sum(v.priority + _MAX_INT32 + 1 for v in c.victims),
        lambda c: -len(c.victims),
        earliest_start,  # the latest earliest start is preferred
    ]
    left = list(candidates)
    for score in criteria:
        best = max(score(c) for c in left)
        left = [c for c in left if score(c) == best]
        if len(left) == 1:
            break
    return left[0]


def is_candidate_status(status: Status) -> bool:
    """Upstream: only Unschedulable. draxr also tries the nodes where DynamicResources could not
    allocate the claims (freed devices may let them fit)."""
    if status.code is Code.UNSCHEDULABLE:
        return True
    return status.plugin == DRA and status.first.startswith(CANNOT_ALLOCATE)


def preemption(
    pod: PodInfo,
    state: ClusterState,
    result: Unschedulable,
    *,
    features: Features,
    budgets: Sequence[Budget] = (),
    offset: Callable[[int], int] = lambda n: 0,
    releasing: Releasing = Releasing(),
) -> Generator[None, None, Outcome]:
    """Evaluator.evaluate for a pod no node fits (``result``'s diagnosis), as a generator that
    yields after each node's dry run (its value is the Outcome): the shell hands the event loop
    back between nodes, so that a dry run over hundreds of nodes never holds it long. The state
    may change between steps (watch events); a node gone meanwhile is skipped. ``offset(n)``:
    where among the n potential nodes the dry run starts (upstream: rand.Int31n);
    ``releasing``: the victims of the pod's last preemption, whose devices it waits for while any
    is still allocated or assumed. ``preempt`` runs it to the end in one go."""
    if result.every_node is not None and result.every_node.plugin != DRA:
        # A PreFilter before DynamicResources' turned the pod away: DynamicResources' PostFilter,
        # which runs first, finds no cycle state of its own and fails with the framework's
        # ErrNotFound, and DefaultPreemption is not reached (kube-scheduler 1.37.2, word for word).
        return Outcome(STATE_NOT_FOUND)
    if not wants_preemption(pod):
        return Outcome(f"preemption: {POLICY_NEVER}")
    if releasing.pending(state):
        # draxr's (KEP-5690 leaves it open): the victims are gone but their claims are not yet
        # deallocated; the freed devices are held for the pod meanwhile, so evicting more would
        # only take more pods.
        return Outcome(f"preemption: {RELEASING}")
    if pod.nominated:
        nominated = result.status_of(pod.nominated)
        if nominated is None or nominated.code is not Code.UNRESOLVABLE:
            for p in state.placed_pods(pod.nominated):
                if p.priority < pod.priority and p.preempted:
                    return Outcome(f"preemption: {TERMINATING}")
    total = len(state.nodes)
    names = state.node_names()
    potential = [n for n in names if (s := result.status_of(n)) is not None and is_candidate_status(s)]
    statuses: dict[str, Status] = {}
    candidates: list[Candidate] = []
    if potential:
        dry = _DryRun(pod, state, features)
        want = num_candidates(len(potential))
        start = offset(len(potential))
        violating: list[Candidate] = []
        for i in range(len(potential)):
            if i:
                yield
            node = potential[(start + i) % len(potential)]
            if node not in state.nodes:
                continue
            found, status = select_victims(dry, node, budgets)
            if found is not None and found.victims:
                (candidates if found.pdb_violations == 0 else violating).append(found)
                if candidates and len(candidates) + len(violating) >= want:
                    break
                continue
            if found is not None:  # fits with nobody evicted (a nominated pod's count changed)
                status = error("", f'expected at least one victim pod on node "{node}"')
            assert status is not None
            statuses[node] = status
        candidates += violating
    if not candidates:
        reasons: dict[str, int] = {}
        for status in statuses.values():
            for reason in status.reasons:
                reasons[reason] = reasons.get(reason, 0) + 1
        if total > len(statuses):
            reasons[NOT_HELPFUL] = reasons.get(NOT_HELPFUL, 0) + total - len(statuses)
        parts = sorted(f"{n} {r}" for r, n in reasons.items())
        message = f"preemption: 0/{total} nodes are available: {', '.join(parts)}."
        return Outcome(message, clear_nomination=True, statuses=statuses)
    chosen = pick_one(candidates)
    found_one = f"found a potential placement for pod on node {chosen.node}"
    message = f"preemption: {found_one}, preempting {len(chosen.victims)} victims"
    return Outcome(message, chosen, statuses=statuses)


def _to_the_end(steps: Callable[P, Generator[None, None, Outcome]]) -> Callable[P, Outcome]:
    def run(*args: P.args, **kwargs: P.kwargs) -> Outcome:
        generator = steps(*args, **kwargs)
        while True:
            try:
                next(generator)
            except StopIteration as done:
                outcome: Outcome = done.value
                return outcome

    return run


preempt = _to_the_end(preemption)  # the same in one go (tests, benches, the differential)


def rebuilt_hold(pod: PodInfo, state: ClusterState, features: Features) -> tuple[Mapping[str, Any], Releasing] | None:
    """After a leader change: the devices to hold again for a pod nominated by an earlier leader's
    preemption (the hold lived in that leader's memory; the nomination is in the pod's status).
    The devices the pod gets on its nominated node once the lower-priority pods being preempted
    there are gone and the special claims of pods already gone are released, and what it waits
    for meanwhile; None when it would not fit there even so, or nothing is on its way out."""
    node = pod.nominated
    if not node or node not in state.nodes:
        return None
    victims = [p for p in state.placed_pods(node) if p.priority < pod.priority and p.preempted]
    gone = [uid for uid in state.gone_pod_schedulers if uid in state.special_claims]
    if not victims and not gone:
        return None
    if isinstance(prefilter(pod, state), Status):
        return None
    dry = _DryRun(pod, state, features)
    dry.also_freed = [key for uid in gone for key in sorted(state.special_claims[uid])]
    status, held = dry.fits(node, victims)
    if status is not None or held is None:
        return None
    waits = releasing_of(victims, state)
    return held, Releasing(waits.victims | frozenset(gone), (*waits.claims, *dry.also_freed))


def lower_nominated(pod: PodInfo, node: str, state: ClusterState) -> list[PodInfo]:
    """getLowerPriorityNominatedPods: pods of lower priority nominated to ``node``."""
    return [p for p in state.nominated_pods(node) if p.priority < pod.priority]
