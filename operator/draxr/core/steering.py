"""Which pods draxr takes without their manifest naming it: the admission webhook's decision (steer a
new pod to draxr's scheduler name) and adoption mode's (schedule a default-scheduler pod that
kube-scheduler gave up on). Pure: a pod dict and the warm mapping in, a verdict out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from draxr.core.mapping import ExtendedResourceMapping
from draxr.core.pod_view import unsupported_fields
from draxr.core.requests import prepare_pod

DEFAULT_SCHEDULER = "default-scheduler"
STEERED_ANNOTATION = "draxr.io/steered"  # why the webhook set spec.schedulerName
# (its JSON pointer, RFC 6901: "~" then "/" escaped)
STEERED_POINTER = "/metadata/annotations/" + STEERED_ANNOTATION.replace("~", "~0").replace("/", "~1")
SKIP_LABEL = "draxr.io/skip"  # a pod labelled draxr.io/skip=true is never steered


@dataclass(frozen=True)
class Verdict:
    steer: bool
    reason: str  # why (for the annotation when steered, for the log otherwise)
    # steered | unchanged | unsupported (would be steered, but uses a field draxr cannot schedule)
    result: str = ""
    unsupported: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.result:
            object.__setattr__(self, "result", "steered" if self.steer else "unchanged")


def _skip_labelled(pod: Mapping[str, Any]) -> bool:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return str(labels.get(SKIP_LABEL, "")).lower() == "true"


def mappable(pod: Mapping[str, Any], mapping: ExtendedResourceMapping) -> list[str]:
    """The pod's requested extended resource names that some mapping (DeviceClass explicit or
    implicit name, ExtendedResourceMapping) serves, sorted."""
    prepared = prepare_pod(pod, mapping)
    return sorted(name for name in prepared.candidates if name in mapping)


def describe(names: list[str], mapping: ExtendedResourceMapping) -> str:
    parts = []
    for name in names:
        resolved = mapping.lookup(name)
        if resolved is None:
            continue
        what = f"ExtendedResourceMapping {resolved.origin}" if resolved.source == "override" else resolved.source
        parts.append(f"{name} -> DeviceClass {'|'.join(resolved.class_names)} ({what})")
    return "; ".join(parts)


def admission_verdict(pod: Mapping[str, Any], mapping: ExtendedResourceMapping) -> Verdict:
    """Steer a pod being created iff it leaves the scheduler at the default, is not bound already,
    is not labelled draxr.io/skip=true, requests an extended resource a mapping serves, and uses no
    field draxr cannot schedule yet (such a pod would wait for draxr forever; kube-scheduler can
    place it, so it keeps its scheduler). Pods that request only device-plugin resources (no
    mapping) stay with the default scheduler."""
    spec = pod.get("spec") or {}
    scheduler = spec.get("schedulerName") or DEFAULT_SCHEDULER
    if scheduler != DEFAULT_SCHEDULER:
        return Verdict(False, f"names scheduler {scheduler!r}")
    if spec.get("nodeName"):
        return Verdict(False, "already bound (spec.nodeName set)")
    if _skip_labelled(pod):
        return Verdict(False, f"labelled {SKIP_LABEL}=true")
    try:
        names = mappable(pod, mapping)
    except ValueError as e:  # a quantity the API server would have refused to decode: not steered
        return Verdict(False, f"unreadable resources: {e}")
    if not names:
        return Verdict(False, "requests no extended resource that a DeviceClass or ExtendedResourceMapping maps")
    unsupported = tuple(unsupported_fields(pod))
    if unsupported:
        why = f"requests {describe(names, mapping)} but uses {', '.join(unsupported)}, which draxr cannot schedule yet"
        return Verdict(False, why, result="unsupported", unsupported=unsupported)
    return Verdict(True, f"requests {describe(names, mapping)}")


def steering_patch(pod: Mapping[str, Any], scheduler_name: str, reason: str) -> list[dict[str, Any]]:
    """The JSON patch: spec.schedulerName and one annotation, nothing else."""
    annotations = (pod.get("metadata") or {}).get("annotations")
    note = f"schedulerName set to {scheduler_name} by the draxr admission webhook: {reason}"
    ops: list[dict[str, Any]] = [{"op": "add", "path": "/spec/schedulerName", "value": scheduler_name}]
    if annotations is None:
        ops.append({"op": "add", "path": "/metadata/annotations", "value": {STEERED_ANNOTATION: note}})
    else:
        ops.append({"op": "add", "path": STEERED_POINTER, "value": note})
    return ops


def unschedulable_by_default_scheduler(pod: Mapping[str, Any]) -> bool:
    """kube-scheduler tried and gave up: PodScheduled=False with reason Unschedulable."""
    for cond in (pod.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "PodScheduled":
            return bool(cond.get("status") == "False" and cond.get("reason") == "Unschedulable")
    return False


def adoptable(pod: Mapping[str, Any], mapping: ExtendedResourceMapping) -> bool:
    """Adoption mode: a default-scheduler pod, unbound, not gated, marked Unschedulable by
    kube-scheduler, requesting a mapped extended resource. Whether it fits for every other reason
    (cpu, taints, affinity) is the scheduling cycle's to decide, as for any pod of ours."""
    spec = pod.get("spec") or {}
    if (spec.get("schedulerName") or DEFAULT_SCHEDULER) != DEFAULT_SCHEDULER or spec.get("nodeName"):
        return False
    if spec.get("schedulingGates") or _skip_labelled(pod) or unsupported_fields(pod):
        return False  # kube-scheduler's to keep: draxr could not place it either
    return unschedulable_by_default_scheduler(pod) and bool(mappable(pod, mapping))
