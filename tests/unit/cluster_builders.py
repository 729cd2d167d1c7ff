"""Small builders of v1 API dicts for the state, placement and gc tests (pods, nodes, claims).

Nodes, slices and classes come from the fake driver (the same shapes the dev cluster publishes);
pods and claims are written out here, since the tests need every field under control.
"""

from __future__ import annotations

from typing import Any

from draxr.core.claims import DELETE_PROTECTION_FINALIZER, EXTENDED_RESOURCE_CLAIM_ANNOTATION
from draxr.core.state import ClusterState
from draxr_dev.devcluster import fakedriver

DRIVER = fakedriver.DRIVER
GPU = "example.com/gpu"
GPU_CLASS = "gpu.example.com"
SCHEDULER = "draxr"

JSON = dict[str, Any]


def pod(
    name: str = "p",
    *,
    uid: str | None = None,
    namespace: str = "ns",
    gpus: int = 0,
    resource: str = GPU,
    limits: dict[str, str] | None = None,
    requests: dict[str, str] | None = None,
    node_name: str = "",
    phase: str = "Pending",
    scheduler: str = SCHEDULER,
    priority: int | None = None,
    created: str = "2026-01-01T00:00:00Z",
    rv: str | None = None,
    claim_name: str | None = None,
    **spec: Any,
) -> JSON:
    """A one-container pod; ``gpus`` adds ``resource: gpus`` to its limits (defaulted to requests)."""
    lim = dict(limits or {})
    if gpus:
        lim[resource] = str(gpus)
    resources: JSON = {}
    if lim:
        resources["limits"] = lim
    if requests:
        resources["requests"] = dict(requests)
    container: JSON = {"name": "c", "image": "busybox"}
    if resources:
        container["resources"] = resources
    body: JSON = {"schedulerName": scheduler, "containers": [container], **spec}
    if node_name:
        body["nodeName"] = node_name
    if priority is not None:
        body["priority"] = priority
    meta: JSON = {"name": name, "namespace": namespace, "uid": uid or f"uid-{name}", "creationTimestamp": created}
    if rv is not None:
        meta["resourceVersion"] = rv
    status: JSON = {"phase": phase}
    if claim_name is not None:
        status["extendedResourceClaimStatus"] = {
            "requestMappings": [{"containerName": "c", "resourceName": resource, "requestName": "r"}],
            "resourceClaimName": claim_name,
        }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": body, "status": status}


def node(
    name: str,
    *,
    cpu: str = "8",
    memory: str = "32Gi",
    pods: str = "110",
    labels: dict[str, str] | None = None,
    taints: list[JSON] | None = None,
    extended: dict[str, str] | None = None,
    unschedulable: bool = False,
) -> JSON:
    n = fakedriver.node(name, labels=labels, taints=taints, extended=extended, cpu=cpu, memory=memory, pods=pods)
    if unschedulable:
        n["spec"]["unschedulable"] = True
    return n


def gpu_slice(node_name: str, count: int, *, model: str = "fake-a100", first: int = 0) -> JSON:
    devices = [
        fakedriver.device(f"gpu-{i}", model=model, uid=f"{node_name}-gpu-{i}") for i in range(first, first + count)
    ]
    return fakedriver.resource_slice(node_name, devices)


def gpu_class(name: str = GPU_CLASS, resource: str | None = GPU, *extra: str) -> JSON:
    return fakedriver.device_class(name, extended_resource_name=resource, extra_selectors=list(extra))


def cluster(gpus_per_node: dict[str, int], **node_kwargs: Any) -> ClusterState:
    """A state with the example.com/gpu class and one DRA node per entry (``n: devices``)."""
    state = ClusterState()
    state.upsert_class(gpu_class())
    for name, count in gpus_per_node.items():
        state.upsert_node(node(name, **node_kwargs))
        if count:
            state.upsert_slice(gpu_slice(name, count))
    return state


def allocation(node_name: str, *devices: str, request: str = "container-0-request-0") -> JSON:
    return {
        "devices": {
            "results": [{"request": request, "driver": DRIVER, "pool": node_name, "device": d} for d in devices]
        },
        "nodeSelector": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}]
        },
    }


def special_claim(
    name: str,
    pod_name: str,
    pod_uid: str,
    *,
    namespace: str = "ns",
    rv: str | None = None,
    alloc: JSON | None = None,
    reserved: bool = False,
    finalizer: bool = True,
    deleting: bool = False,
    annotation: str = "true",
    controller: bool = True,
) -> JSON:
    meta: JSON = {
        "name": name,
        "namespace": namespace,
        "uid": f"claim-uid-{name}",
        "annotations": {EXTENDED_RESOURCE_CLAIM_ANNOTATION: annotation},
        "ownerReferences": [
            {"apiVersion": "v1", "kind": "Pod", "name": pod_name, "uid": pod_uid, "controller": controller}
        ],
    }
    if finalizer:
        meta["finalizers"] = [DELETE_PROTECTION_FINALIZER]
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:10Z"
    if rv is not None:
        meta["resourceVersion"] = rv
    claim: JSON = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": meta,
        "spec": {"devices": {"requests": []}},
    }
    status: JSON = {}
    if alloc is not None:
        status["allocation"] = alloc
    if reserved:
        status["reservedFor"] = [{"resource": "pods", "name": pod_name, "uid": pod_uid}]
    if status:
        claim["status"] = status
    return claim


def plain_claim(name: str, *, namespace: str = "ns", rv: str | None = None, alloc: JSON | None = None) -> JSON:
    """An ordinary claim (kube-scheduler's, for a DRA pod): no annotation, no owner."""
    meta: JSON = {"name": name, "namespace": namespace, "uid": f"claim-uid-{name}"}
    if rv is not None:
        meta["resourceVersion"] = rv
    claim: JSON = {"metadata": meta, "spec": {"devices": {"requests": []}}}
    if alloc is not None:
        claim["status"] = {"allocation": alloc}
    return claim


def devices_of(alloc: JSON | Any) -> list[tuple[str, str, str]]:
    return [(r["driver"], r["pool"], r["device"]) for r in alloc["devices"]["results"]]
