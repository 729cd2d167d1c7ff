"""The special ResourceClaim and the pod status, shaped exactly as kube-scheduler 1.37 writes them
(contract §2.4-2.5; pinned against kube-scheduler's own output by the integration tests)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

EXTENDED_RESOURCE_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
DELETE_PROTECTION_FINALIZER = "resource.kubernetes.io/delete-protection"
GENERATE_NAME_SUFFIX = "-extended-resources-"

JSONDict = dict[str, Any]


def assumed_claim_key(pod_uid: str) -> str:
    """The allocation tracker's key of a pod's special claim decided but not yet written."""
    return f"<assumed>/{pod_uid}"


def held_claim_key(pod_uid: str) -> str:
    """The tracker's key of the devices preemption freed and holds for a nominated pod."""
    return f"<held>/{pod_uid}"


def special_claim(pod: Mapping[str, Any], requests: Sequence[Mapping[str, Any]]) -> JSONDict:
    """The claim to create. Unlike kube-scheduler, the finalizer is set at create: one write fewer,
    and the object is never allocated without it."""
    meta = pod["metadata"]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "generateName": meta["name"] + GENERATE_NAME_SUFFIX,
            "namespace": meta["namespace"],
            "annotations": {EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"},
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"], "controller": True}
            ],
            "finalizers": [DELETE_PROTECTION_FINALIZER],
        },
        "spec": {"devices": {"requests": [dict(r) for r in requests]}},
    }


def rfc3339(ts: datetime) -> str:
    """metav1.Time: second precision, UTC, 'Z'."""
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_time(ts: datetime) -> str:
    """metav1.MicroTime (Events, Leases): microsecond precision, UTC, 'Z'."""
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def allocated_status(
    pod: Mapping[str, Any], allocation: Mapping[str, Any], now: datetime, *, stamp: bool = True
) -> JSONDict:
    """`status` with the allocation (stamped like kube-scheduler 1.37, where binding conditions and
    device status are on by default) and the pod as the only consumer."""
    alloc = dict(allocation)
    if stamp:
        alloc["allocationTimestamp"] = rfc3339(now)
    meta = pod["metadata"]
    return {"allocation": alloc, "reservedFor": [{"resource": "pods", "name": meta["name"], "uid": meta["uid"]}]}


def pod_status_patch(claim_name: str, mappings: Sequence[Mapping[str, str]]) -> JSONDict:
    return {
        "status": {
            "extendedResourceClaimStatus": {
                "requestMappings": [dict(m) for m in mappings],
                "resourceClaimName": claim_name,
            }
        }
    }


def special_claim_owner(claim: Mapping[str, Any]) -> tuple[str, str] | None:
    """(pod name, pod uid) when ``claim`` is a special claim: annotation exactly "true" and a
    controller ownerReference to a Pod (upstream `findExtendedResourceClaim`)."""
    meta = claim.get("metadata") or {}
    if (meta.get("annotations") or {}).get(EXTENDED_RESOURCE_CLAIM_ANNOTATION) != "true":
        return None
    for ref in meta.get("ownerReferences") or ():
        if ref.get("controller") and ref.get("kind") == "Pod" and ref.get("apiVersion") == "v1":
            return str(ref.get("name", "")), str(ref.get("uid", ""))
    return None


def is_special_claim_of(claim: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    owner = special_claim_owner(claim)
    meta = pod.get("metadata") or {}
    return owner is not None and owner == (meta.get("name"), meta.get("uid"))
