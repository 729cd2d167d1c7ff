"""DynamicResources (KEP-4381 structured parameters, KEP-5004 extended resources by DRA): its
PreFilter for the pod's own claims (core.pod_claims), its Filter on one node (the allocated claims'
node selectors, then one allocator call with the claims to allocate), and what its PreBind writes
(ClaimDecision). Not cached across pods: it reads the allocations of the whole cluster. Preemption
frees the devices of victims through ``DynamicResources.use_allocated`` (the RemovePod extension
upstream's KEP-5690 proposes, see core.preemption)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from draxr.core import pod_claims
from draxr.core.allocator import AllocationFatalError, Allocator, Features, NodeFailure, NoFit
from draxr.core.allocator.allocated_devices import AllocatedState
from draxr.core.allocator.nodeselector import NodeSelectorError
from draxr.core.claims import assumed_claim_key, held_claim_key
from draxr.core.plugins.scoring import Column, ScoreInputs
from draxr.core.pod_claims import ClaimsCycle, PodClaim
from draxr.core.requests import DeviceRequest, NodeRequests, PodExtendedResources
from draxr.core.scores import normalize
from draxr.core.state import ClusterState, NodeInfo, PodInfo
from draxr.core.status import Status, filter_error, unresolvable, unschedulable

CANNOT_ALLOCATE = "cannot allocate all claims"  # upstream's reason when the allocator finds no fit
# draxr's: a class declares a device-plugin identity (core.migration) and running device-plugin pods
# on the node hold devices of it that no adoption claim covers yet: allocating its devices there
# could hand out one of theirs.
NOT_ADOPTED = "node(s) had device-plugin pods whose devices are not adopted yet"
DRA = pod_claims.PLUGIN


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


# resourceapi.FirstAvailableDeviceRequestMaxSize
FIRST_AVAILABLE_MAX_SIZE = 8


def prioritized_list_score(ccycle: ClaimsCycle, fit: DraFit | None) -> int:
    """DynamicResources' raw Score on a node (dynamicresources.go Score / computeScore, with
    DRAPrioritizedList): for every claim of the pod, allocated already or by this node's Filter
    (``fit.claims``), and every firstAvailable request, 8 minus the index of the subrequest its
    allocation chose. 0 for claims without firstAvailable."""
    new = {d.key: d.allocation for d in (fit.claims if fit is not None else ()) if d.allocation is not None}
    score = 0
    for pc in ccycle.claims:
        allocation = pc.allocation if pc.allocation is not None else new.get(pc.key)
        if allocation is None:
            continue
        chosen = {
            str(r.get("request") or "")
            for r in (allocation.get("devices") or {}).get("results") or ()
            if "/" in str(r.get("request") or "")
        }
        if not chosen:
            continue
        for request in ((pc.claim.get("spec") or {}).get("devices") or {}).get("requests") or ():
            if request.get("exactly") is not None:
                continue
            for i, sub in enumerate(request.get("firstAvailable") or ()):
                if f"{request.get('name')}/{sub.get('name')}" in chosen:
                    score += FIRST_AVAILABLE_MAX_SIZE - i
    return score


def prioritized_list_scores(ccycle: ClaimsCycle | None, fits: Sequence[DraFit | None]) -> list[int] | None:
    """DynamicResources' normalised scores (DefaultNormalizeScore) over the feasible nodes, given
    each one's Filter verdict; None for a pod without claims of its own (0 on every node)."""
    if ccycle is None:
        return None
    return normalize([prioritized_list_score(ccycle, fit) for fit in fits])


class DynamicResourcesScore:
    """DynamicResources' Score, which its Filter computes (prioritized_list_scores): 0 on every
    node for a pod without claims of its own (upstream has no PreScore for it: never skipped)."""

    name = DRA

    def column(self, inputs: ScoreInputs) -> Column:
        return list(inputs.dra) if inputs.dra is not None else 0


SCORE_PLUGIN = DynamicResourcesScore()


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


@dataclass(frozen=True, slots=True)
class DraFit:
    """DynamicResources' Filter on one node: a rejection (``detail``: draxr's own, more telling
    reason for the summary; ``fatal``: the allocator's error, which ends the pod's attempt), or the
    special claim's chosen requests and allocation plus what to write to the pod's own claims.
    With ``fatal`` the rejection is the framework's Error (``running "DynamicResources" filter
    plugin: <the allocator's error>``)."""

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

    __slots__ = ("_allocated", "_allocator", "ccycle", "features", "memo", "migrating", "no_fit_now", "pod", "state")

    def __init__(self, pod: PodInfo, state: ClusterState, features: Features, ccycle: ClaimsCycle | None) -> None:
        self.pod, self.state, self.features, self.ccycle = pod, state, features, ccycle
        self._allocator: Allocator | None = None
        self._allocated: AllocatedState | None = None
        self.memo = state.no_fit.static()
        self.migrating = bool(state.identities())  # some class declares a device-plugin identity
        # The rejections kept per node stamp hold for the state's allocations as they are, so not
        # for a pod whose held devices are its own to take, nor for a dry run's (use_allocated).
        self.no_fit_now = None if state.tracker.is_assumed(held_claim_key(pod.uid)) else state.no_fit.now()

    def use_allocated(self, allocated: AllocatedState) -> None:
        """Allocate against ``allocated`` instead of the state's (preemption's dry run)."""
        self._allocated, self._allocator = allocated, None
        self.no_fit_now = None

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
            failed = filter_error(DRA, str(e))
            return DraFit(failed, failed.first)
        if not user and not any(o.needs_claim for o in options):
            if unavailable:
                return self._reject(pod_claims.NOT_AVAILABLE)
            return DraFit(None, option=options[0], claims=self._decisions(()))
        if self.migrating:
            gaps = unadopted_classes(self.state, node.name)
            if gaps and not gaps.isdisjoint(self._classes(user, options)):
                return DraFit(unschedulable(DRA, NOT_ADOPTED), NOT_ADOPTED)
        reason, detail = CANNOT_ALLOCATE, ""
        for option in options:
            if not user:
                # Only the special claim: the cheap per-class count first (never rejects a node
                # the allocator would accept).
                wanted = frozenset(_devices_per_class(option.dra_requests).items())
                memo_key = (node.name, node.labels_key, wanted)
                quick = self.memo.get(memo_key)
                now = self.no_fit_now
                stamp = self.state.node_stamps.get(node.name) if now is not None else None
                if quick is None and stamp is not None:
                    assert now is not None
                    quick = now.get((stamp, wanted))
                if quick is None:
                    found = self.allocator.cannot_fit(node.raw, dict(wanted))
                    if found is not None:
                        quick = found[0]
                        if found[1]:
                            self.memo[memo_key] = quick
                        elif stamp is not None:
                            assert now is not None
                            now[(stamp, wanted)] = quick
                if quick is not None:
                    reason, detail = CANNOT_ALLOCATE, quick
                    continue
            claims = [pc.claim for pc in user]
            if option.needs_claim:
                claims.append(_claim_for_allocation(self.pod, option.claim_requests()))
            try:
                outcome = self.allocator.allocate(node.raw, claims)
            except AllocationFatalError as err:
                # Upstream's attempt ends with the framework's wrapped error: no diagnosis, no
                # PostFilter, and that text as the FailedScheduling message (placement._fatal).
                failed = filter_error(DRA, str(err))
                return DraFit(failed, failed.first, fatal=err)
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

    @staticmethod
    def _classes(user: Sequence[PodClaim], options: Sequence[NodeRequests]) -> set[str]:
        """The DeviceClasses the allocation may take devices of."""
        out = {r.device_class_name for o in options for r in o.dra_requests}
        for pc in user:
            for r in (pc.claim.get("spec") or {}).get("devices", {}).get("requests") or ():
                exactly = r.get("exactly")
                if exactly is not None:
                    out.add(str(exactly.get("deviceClassName") or ""))
                out.update(str(s.get("deviceClassName") or "") for s in r.get("firstAvailable") or ())
        return out

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


def got_dra_devices(state: ClusterState, pod: PodInfo) -> bool:
    """The pod's extended resources came from DRA (a special claim, seen or still assumed), not
    from a device plugin."""
    uid = pod.uid
    return bool(pod.claim_name) or uid in state.special_claims or state.tracker.is_assumed(assumed_claim_key(uid))


def unadopted_classes(state: ClusterState, node: str) -> frozenset[str]:
    """The classes with a device-plugin identity whose devices running device-plugin pods on
    ``node`` may hold without an adoption claim: pods placed there that request a resource of such
    a class and got no DRA devices for it (no special claim, none assumed) and no allocated adoption
    claim covering it. Kept per node stamp (any pod placed there, or an allocation in its pools,
    touches the node) and mapping (ClusterState.unadopted)."""
    stamp = state.node_stamps.get(node)
    cached = state.unadopted.get(node)
    if cached is not None and stamp is not None and cached[0] == stamp and cached[1] is state.mapping:
        return cached[2]
    found: set[str] = set()
    ids = state.identities()
    for uid in state.placed.get(node, ()):
        pod = state.pods[uid]
        if got_dra_devices(state, pod):
            continue
        adopted = state.adoption.adopted.get(uid)
        for resource, (_, class_name) in ids.items():
            if pod.units.get(resource) and (adopted is None or resource not in adopted):
                found.add(class_name)
    result = frozenset(found)
    if stamp is not None:
        state.unadopted[node] = (stamp, state.mapping, result)
    return result


def special_claim_options(
    prepared: PodExtendedResources, node: NodeInfo, ext: NodeRequests, state: ClusterState
) -> list[NodeRequests]:
    """The special claim's request options on ``node``, for DynamicResources.filter: ``ext`` (the
    node's split), then the same with later classes of multi-class mapping CRs; options naming a
    DeviceClass that does not exist are skipped (unless all do: then the first stays, and the
    allocator reports the missing class)."""
    choices = prepared.class_choices(ext.dra)
    if len(choices) == 1:
        return [ext]
    unmapped = prepared.unmapped_on(node.raw) if prepared.node_restricted else frozenset()
    allocatable = (node.raw.get("status") or {}).get("allocatable") or {}
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


def _claim_for_allocation(pod: PodInfo, requests: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """The in-memory special claim the allocator sees (upstream's "<extended-resources>" template)."""
    return {
        "metadata": {"name": "<extended-resources>", "namespace": pod.namespace, "uid": f"assumed-{pod.uid}"},
        "spec": {"devices": {"requests": list(requests)}},
    }
