"""Which special claims to release or roll back (pure decisions; the shell does the writes).

* Release (kubernetes#134311): the pod holding the claim finished (Succeeded/Failed) or is gone.
  Devices must come back at once, not when someone deletes the pod. kube-controller-manager's
  resourceclaim controller does the same for every pod from 1.35 on (#134312), unless it runs
  without that controller. By default draxr releases a claim only when it is still held after a
  grace period: a working controller has released it by then (within milliseconds), so draxr
  does not race it (and it logs no errors), and where none runs the devices still come back. The
  grace is short for draxr's own pods (it schedules the next pod on those devices) and longer for
  other schedulers' (``ReleasePlan``).
* Roll back: a special claim of an unbound pod that no binding of ours is writing: a crashed or
  failed binding left it. Upstream never reuses such a claim; neither do we.
"""

from __future__ import annotations

from collections.abc import Collection
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace
from enum import StrEnum

from draxr.core.state import ClaimInfo, ClusterState
from draxr.core.steering import DEFAULT_SCHEDULER


@dataclass(frozen=True)
class ClaimAction:
    namespace: str
    name: str
    pod_name: str
    pod_uid: str
    reason: str
    confirm_pod_gone: bool = False  # the pod is unknown here: check with the API before acting
    foreign: bool = False  # release: the pod is not (known to be) one draxr scheduled

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def own_schedulers(scheduler_name: str, adopt: bool) -> frozenset[str]:
    """The schedulerNames of the pods whose claims draxr writes: its own, plus the default
    scheduler's in adoption mode (1.34/1.35, where kube-scheduler writes no special claims)."""
    return frozenset({scheduler_name, DEFAULT_SCHEDULER} if adopt else {scheduler_name})


def claims_to_release(state: ClusterState, own: AbstractSet[str]) -> list[ClaimAction]:
    """Special claims whose pod finished or is gone. ``foreign`` unless the pod (or, once deleted,
    its tombstone in the state) names one of the ``own`` schedulers: a claim whose pod was never
    seen counts as foreign, so it waits for kube-controller-manager first."""
    actions: list[ClaimAction] = []
    for key, claim in sorted(state.claims.items()):
        owner = claim.owner
        if owner is None or _going_away(claim):
            continue
        pod_name, pod_uid = owner
        ns, name = key.split("/", 1)
        pod = state.pods.get(pod_uid)
        if pod is None:
            foreign = state.gone_pod_schedulers.get(pod_uid) not in own
            actions.append(ClaimAction(ns, name, pod_name, pod_uid, "pod deleted", True, foreign))
        elif pod.terminal:
            foreign = pod.scheduler_name not in own
            actions.append(ClaimAction(ns, name, pod_name, pod_uid, f"pod {pod.phase}", False, foreign))
    return actions


class ForeignClaims(StrEnum):
    """Who releases the special claims of pods draxr did not schedule (kube-scheduler's)."""

    AUTO = "auto"  # draxr, if still held after the grace period: correct with or without KCM's release
    ALWAYS = "always"  # draxr, at once: no kube-controller-manager releases them (1.34, controller off)
    NEVER = "never"  # kube-controller-manager only (1.35+ with its resourceclaim controller)


@dataclass(frozen=True)
class ReleasePolicy:
    own: frozenset[str]  # schedulerNames of draxr's pods
    foreign_delay: float | None  # seconds a foreign claim waits for kube-controller-manager; None: forever
    own_delay: float = 0.0  # seconds an own claim waits for it (its controller acts on every pod's claims)

    @classmethod
    def of(
        cls, scheduler_name: str, adopt: bool, foreign: ForeignClaims, grace_seconds: float, own_grace: float = 0.0
    ) -> ReleasePolicy:
        delay = {ForeignClaims.AUTO: max(grace_seconds, 0.0), ForeignClaims.ALWAYS: 0.0, ForeignClaims.NEVER: None}
        own_delay = 0.0 if foreign is ForeignClaims.ALWAYS else max(own_grace, 0.0)
        return cls(own_schedulers(scheduler_name, adopt), delay[foreign], own_delay)


class ReleasePlan:
    """``claims_to_release`` gated by the policy: own claims are due at once, a foreign one once it
    has been proposed for ``foreign_delay`` seconds (counted from the first sweep that proposed it,
    i.e. from when draxr saw its pod finish or go). The clock is the caller's (monotonic seconds)."""

    def __init__(self, policy: ReleasePolicy) -> None:
        self.policy = policy
        self._since: dict[str, float] = {}  # foreign claim key -> first proposed
        self.held_back: dict[str, float] = {}  # of those, not due at the last sweep: key -> when due

    def due(self, state: ClusterState, now: float) -> list[ClaimAction]:
        actions = claims_to_release(state, self.policy.own)
        self._since = {a.key: self._since.get(a.key, now) for a in actions}
        self.held_back = {}
        due: list[ClaimAction] = []
        for a in actions:
            delay = self.policy.foreign_delay if a.foreign else self.policy.own_delay
            if delay == 0:
                due.append(a)
            elif delay is None:
                continue
            elif now - self._since[a.key] >= delay:
                due.append(replace(a, reason=f"{a.reason}; not released by KCM within {delay:g}s"))
            else:
                self.held_back[a.key] = self._since[a.key] + delay
        return due

    def wait_seconds(self, now: float, sweep_seconds: float) -> float:
        """How long the shell may sleep before the next sweep: the periodic sweep, or less when a
        held-back claim falls due sooner. Claims handed out are retried at the sweep's pace."""
        return min([sweep_seconds, *(max(t - now, 0.0) for t in self.held_back.values())])


def claims_to_roll_back(
    state: ClusterState, scheduler_names: AbstractSet[str], in_flight: Collection[str]
) -> list[ClaimAction]:
    """Special claims of our pods (``scheduler_names``: ours, plus the default scheduler's in
    adoption mode, where kube-scheduler writes no such claims) that no binding in flight is
    writing and that the pod does not use: the pod is unbound (an earlier attempt crashed or
    failed), or it is bound and its status names another claim. kube-scheduler's pods are left
    alone otherwise: it may be mid-binding."""
    actions: list[ClaimAction] = []
    for key, claim in sorted(state.claims.items()):
        owner = claim.owner
        if owner is None or _going_away(claim):
            continue
        pod = state.pods.get(owner[1])
        if pod is None or pod.terminal or pod.uid in in_flight or pod.scheduler_name not in scheduler_names:
            continue
        if pod.uid in state.assumed_nodes:
            continue  # bound by us, the watch has not shown it yet: the claim is in use
        ns, name = key.split("/", 1)
        if not pod.node_name:
            why = "pod not bound: stale claim of an earlier attempt"
        elif name != pod.claim_name:
            why = f"pod is bound and uses claim {pod.claim_name or '(none)'}"
        else:
            continue
        actions.append(ClaimAction(ns, name, pod.name, pod.uid, why))
    return actions


def _going_away(claim: ClaimInfo) -> bool:
    """Deleted, holding no devices and no finalizer: the API server removes it without our help.
    A released claim that was not deleted still counts against quota, so it is deleted too."""
    holds = claim.allocated or claim.reserved or claim.finalizers
    return claim.deleting and not holds
