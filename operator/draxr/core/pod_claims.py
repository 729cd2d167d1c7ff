"""The pod's own ResourceClaims (``spec.resourceClaims``) as kube-scheduler 1.37.2's DynamicResources
plugin sees them (pure).

``prefilter`` is the plugin's PreFilter for the user claims (dynamicresources.go
foreachPodResourceClaim + PreFilter): each entry resolves to a claim name as upstream's
``resourceclaim.Name`` does (``resourceClaimName``, or for a template the name kube-controller-manager
recorded in ``pod.status.resourceClaimStatuses``; an entry whose status names no claim is skipped),
the claim must exist, not be being deleted and, when made from a template, be controlled by the pod
(``resourceclaim.IsForPod``). Then, claim by claim: an allocated claim contributes its allocation's
``nodeSelector`` (Filter: "resourceclaim not available on the node"); an unallocated one must not be
in the process of being allocated for another pod (an allocation assumed in flight under the claim's
key, see ClusterState.assume_allocation) and its requests' DeviceClasses must exist. Every rejection
is UnschedulableAndUnresolvable except the few upstream returns as errors (code Error).

In 1.37.2 ``resourceclaim.CanBeReserved`` is always true: a claim allocated for other pods is never
"in use" here, whatever its ``reservedFor`` holds (upstream's PreBind then meets the API server's
limit of 256 entries). ``can_be_reserved`` keeps that rule in one place.

``unavailable_on`` is the Filter's node-selector check; allocating the claims that need it is
placement's (one allocator call per node with the special claim, as upstream).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from draxr.core.allocator.nodeselector import NodeSelectorError, selector_matches
from draxr.core.status import Status, error, unresolvable

__all__ = [
    "ClaimsCycle",
    "PodClaim",
    "can_be_reserved",
    "claim_key",
    "has_claims",
    "prefilter",
    "reserved_for_pod",
    "unavailable_on",
]

NOT_AVAILABLE = "resourceclaim not available on the node"
IN_USE = "resourceclaim in use"


def claim_key(namespace: str, name: str) -> str:
    """The key of a claim in ClusterState.claims and of its in-flight allocation."""
    return f"{namespace}/{name}"


@dataclass(frozen=True, slots=True)
class PodClaim:
    """One resolved entry of ``spec.resourceClaims``."""

    entry: str  # spec.resourceClaims[].name
    namespace: str
    name: str
    uid: str
    claim: Mapping[str, Any]  # the ResourceClaim as ClusterState holds it
    allocation: Mapping[str, Any] | None  # status.allocation, None when the scheduler must allocate it
    reserved: bool  # the pod is already in status.reservedFor
    node_selector: Mapping[str, Any] | None  # the allocation's nodeSelector (None: every node)

    @property
    def key(self) -> str:
        return claim_key(self.namespace, self.name)


@dataclass(frozen=True, slots=True)
class ClaimsCycle:
    claims: tuple[PodClaim, ...]

    @property
    def to_allocate(self) -> tuple[PodClaim, ...]:
        return tuple(c for c in self.claims if c.allocation is None)

    @property
    def selectors(self) -> tuple[Mapping[str, Any], ...]:
        return tuple(c.node_selector for c in self.claims if c.node_selector is not None)


PLUGIN = "DynamicResources"


def has_claims(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("spec") or {}).get("resourceClaims"))


def reserved_for_pod(claim: Mapping[str, Any], pod_uid: str) -> bool:
    """resourceclaim.IsReservedForPod (PodGroup reservations are off by default in 1.37)."""
    return any(r.get("uid") == pod_uid for r in (claim.get("status") or {}).get("reservedFor") or ())


def can_be_reserved(claim: Mapping[str, Any]) -> bool:
    """resourceclaim.CanBeReserved of k8s.io/dynamic-resource-allocation v0.37.2: no restriction."""
    return True


def _controlled_by(claim: Mapping[str, Any], pod_uid: str) -> bool:
    """metav1.IsControlledBy: the controller ownerReference has the pod's UID."""
    for ref in (claim.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("controller"):
            return bool(ref.get("uid") == pod_uid)
    return False


def _resolve(pod: Mapping[str, Any], entry: Mapping[str, Any]) -> tuple[str | None, bool] | str:
    """resourceclaim.Name: (claim name or None to skip, must check owner), or the error."""
    meta = pod.get("metadata") or {}
    ns, name = meta.get("namespace", ""), meta.get("name", "")
    if entry.get("resourceClaimName") is not None:
        return str(entry["resourceClaimName"]), False
    if entry.get("resourceClaimTemplateName") is not None:
        for status in (pod.get("status") or {}).get("resourceClaimStatuses") or ():
            if status.get("name") == entry.get("name"):
                found = status.get("resourceClaimName")
                return (None if found is None else str(found)), True
        return f'pod "{ns}/{name}": ResourceClaim not created yet'
    return f'pod "{ns}/{name}", spec.resourceClaim "{entry.get("name", "")}": none of the supported fields are set'


def prefilter(
    pod: Mapping[str, Any],
    claims: Callable[[str], Mapping[str, Any] | None],
    class_exists: Callable[[str], bool],
    in_flight: Callable[[str], bool],
) -> ClaimsCycle | Status:
    """DynamicResources' PreFilter for the pod's own claims. ``claims(key)``: the claim object (None
    when unknown); ``in_flight(key)``: another pod's allocation of that claim is assumed but not yet
    seen in the claim."""
    meta = pod.get("metadata") or {}
    ns, uid = str(meta.get("namespace") or ""), str(meta.get("uid") or "")
    resolved: list[PodClaim] = []
    for entry in (pod.get("spec") or {}).get("resourceClaims") or ():
        got = _resolve(pod, entry)
        if isinstance(got, str):
            return unresolvable(PLUGIN, got)
        name, must_check_owner = got
        if name is None:
            continue  # valid: no claim was generated for this entry
        key = claim_key(ns, name)
        claim = claims(key)
        if claim is None:
            return unresolvable(PLUGIN, f'could not find ResourceClaim "{key}"')
        cmeta = claim.get("metadata") or {}
        if cmeta.get("deletionTimestamp"):
            return unresolvable(PLUGIN, f'resourceclaim "{name}" is being deleted')
        if must_check_owner and not _controlled_by(claim, uid):
            return unresolvable(
                PLUGIN,
                f"ResourceClaim {ns}/{name} was not created for Pod {ns}/{meta.get('name', '')} (Pod is not owner)",
            )
        allocation = (claim.get("status") or {}).get("allocation") or None
        resolved.append(
            PodClaim(
                entry=str(entry.get("name") or ""),
                namespace=ns,
                name=name,
                uid=str(cmeta.get("uid") or ""),
                claim=claim,
                allocation=allocation,
                reserved=reserved_for_pod(claim, uid),
                node_selector=(allocation or {}).get("nodeSelector"),
            )
        )
    for pc in resolved:
        if pc.allocation is not None:
            if not can_be_reserved(pc.claim) and not pc.reserved:
                return unresolvable(PLUGIN, IN_USE)
            if pc.node_selector is not None:
                try:  # nodeaffinity.NewNodeSelector: an invalid selector is an error
                    selector_matches(pc.node_selector, {"metadata": {"name": ""}})
                except NodeSelectorError as e:
                    return error(PLUGIN, str(e))
            continue
        if in_flight(pc.key):
            return unresolvable(PLUGIN, f"resource claim {pc.key} is in the process of being allocated")
        rejection = _validate_classes(pc, class_exists)
        if rejection is not None:
            return rejection
    return ClaimsCycle(tuple(resolved))


def _validate_classes(pc: PodClaim, class_exists: Callable[[str], bool]) -> Status | None:
    requests: Sequence[Mapping[str, Any]] = ((pc.claim.get("spec") or {}).get("devices") or {}).get("requests") or ()
    for request in requests:
        name = str(request.get("name") or "")
        if request.get("exactly") is not None:
            checks = [(name, str(request["exactly"].get("deviceClassName") or ""))]
        elif request.get("firstAvailable"):
            subs = request["firstAvailable"]
            checks = [(f"{name}/{s.get('name', '')}", str(s.get("deviceClassName") or "")) for s in subs]
        else:
            return unresolvable(PLUGIN, f"resource claim {pc.key}, request {name}: unknown request type")
        for qualified, class_name in checks:
            if not class_name:
                return error(PLUGIN, f"request {qualified}: unsupported request type")
            if not class_exists(class_name):
                return unresolvable(PLUGIN, f"request {qualified}: device class {class_name} does not exist")
    return None


def unavailable_on(cycle: ClaimsCycle, node: Mapping[str, Any]) -> bool:
    """Filter: some allocated claim's nodeSelector does not match the node."""
    return any(not selector_matches(s, node) for s in cycle.selectors)
