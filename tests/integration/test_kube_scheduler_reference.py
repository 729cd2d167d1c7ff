"""What kube-scheduler 1.37.2 itself writes for an extended resource backed by DRA, on our fake nodes.

This pins the upstream contract draxr reproduces (claim shape, request names, allocation, pod status)
on the same cluster; the operator's fidelity tests compare against the same output.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from draxr.kube import PODS, RESOURCE_CLAIMS, Kube
from draxr_dev.devcluster import fakedriver

from .helpers import DELETE_PROTECTION, EXTENDED_CLAIM_ANNOTATION, eventually, pod


async def _bound(kube: Kube, name: str, namespace: str) -> dict[str, Any] | None:
    p = await kube.get(PODS, name, namespace)
    return p if p["spec"].get("nodeName") and p["status"].get("extendedResourceClaimStatus") else None


async def test_kube_scheduler_writes_the_special_claim_and_pod_status(
    kube: Kube, namespace: str, fleet: fakedriver.Fleet
) -> None:
    await fakedriver.wait_nodes_ready(kube, fleet.node_names())
    [(cls, ext)] = fleet.classes.items()
    assert ext is not None
    body = pod("ref", {ext: "2", "cpu": "100m"}, scheduler="default-scheduler")
    created = await kube.create(PODS, body, namespace)

    bound = await eventually(lambda: _bound(kube, "ref", namespace))
    node = bound["spec"]["nodeName"]
    assert node in fleet.node_names()

    claims = await kube.list(RESOURCE_CLAIMS, namespace)
    assert len(claims) == 1
    claim = claims[0]
    meta = claim["metadata"]
    assert meta["generateName"] == "ref-extended-resources-"
    assert meta["annotations"] == {EXTENDED_CLAIM_ANNOTATION: "true"}
    assert meta.get("labels") is None
    assert meta["finalizers"] == [DELETE_PROTECTION]
    assert meta["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": "ref", "uid": created["metadata"]["uid"], "controller": True}
    ]
    # j indexes the sorted resource names of the container's requests (cpu included).
    request = f"container-0-request-{sorted(['cpu', ext]).index(ext)}"
    assert claim["spec"] == {
        "devices": {
            "requests": [
                {"name": request, "exactly": {"deviceClassName": cls, "allocationMode": "ExactCount", "count": 2}}
            ]
        }
    }
    alloc = claim["status"]["allocation"]
    assert set(claim["status"]) == {"allocation", "reservedFor"}
    # 1.37 enables binding conditions and device status by default, so PreBind stamps the allocation.
    assert set(alloc) == {"devices", "nodeSelector", "allocationTimestamp"}
    assert datetime.fromisoformat(alloc["allocationTimestamp"]) <= datetime.now(UTC)
    assert set(alloc["devices"]) == {"results"}  # no class or claim config here
    assert alloc["devices"]["results"] == [
        {"request": request, "driver": fleet.driver, "pool": node, "device": "gpu-0"},
        {"request": request, "driver": fleet.driver, "pool": node, "device": "gpu-1"},
    ]
    assert alloc["nodeSelector"] == {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
    }
    assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": "ref", "uid": created["metadata"]["uid"]}]
    assert bound["status"]["extendedResourceClaimStatus"] == {
        "requestMappings": [{"containerName": "main", "resourceName": ext, "requestName": request}],
        "resourceClaimName": meta["name"],
    }
