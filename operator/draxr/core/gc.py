"""Which special claims to release or roll back (pure decisions; the shell does the writes).

* Release (kubernetes#134311): the pod holding the claim finished (Succeeded/Failed) or is gone.
  Devices must come back at once, not when someone deletes the pod.
* Roll back: a special claim of an unbound pod that no binding of ours is writing: a crashed or
  failed binding left it. Upstream never reuses such a claim; neither do we.
"""

from __future__ import annotations

from collections.abc import Collection
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from draxr.core.state import ClaimInfo, ClusterState


@dataclass(frozen=True)
class ClaimAction:
    namespace: str
    name: str
    pod_name: str
    pod_uid: str
    reason: str
    confirm_pod_gone: bool = False  # the pod is unknown here: check with the API before acting

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def claims_to_release(state: ClusterState) -> list[ClaimAction]:
    actions: list[ClaimAction] = []
    for key, claim in sorted(state.claims.items()):
        owner = claim.owner
        if owner is None or _going_away(claim):
            continue
        pod_name, pod_uid = owner
        ns, name = key.split("/", 1)
        pod = state.pods.get(pod_uid)
        if pod is None:
            actions.append(ClaimAction(ns, name, pod_name, pod_uid, "pod deleted", confirm_pod_gone=True))
        elif pod.terminal:
            actions.append(ClaimAction(ns, name, pod_name, pod_uid, f"pod {pod.phase}"))
    return actions


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
