"""draxr.snapshot: the initial listing, cut down page by page, builds the same state as the objects."""

from __future__ import annotations

import copy
from typing import Any

from draxr.core.state import POD_INFO_FIELDS, ClaimInfo, ClusterState
from draxr.kube import DEVICE_CLASSES, NODES, PODS, RESOURCE_CLAIMS, RESOURCE_SLICES, Kube
from draxr.snapshot import list_cluster
from tests.unit.cluster_builders import allocation, gpu_class, gpu_slice, node, pod, special_claim

JSON = dict[str, Any]


class PagedKube(Kube):
    """Serves fixed lists ``limit`` items at a time with continue tokens, like the API server."""

    def __init__(self, objects: dict[str, list[JSON]]) -> None:
        self.limiter = None
        self.objects = objects
        self.requests: list[tuple[str, dict[str, Any]]] = []

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: dict[str, Any] | None = None,
        content_type: str = "application/json",
    ) -> JSON:
        query = dict(query or {})
        self.requests.append((path, query))
        items = self.objects.get(path, [])
        start = int(query.get("continue") or 0)
        end = start + int(query.get("limit") or len(items) or 1)
        meta = {"continue": str(end)} if end < len(items) else {}
        return {"items": copy.deepcopy(items[start:end]), "metadata": meta}  # a fresh decode per page


def _managed(obj: JSON) -> JSON:
    obj["metadata"]["managedFields"] = [{"manager": "m", "operation": "Update", "fieldsV1": {"f:spec": {}}}]
    return obj


def _cluster(pods: int) -> dict[str, list[JSON]]:
    nodes = [_managed(node(f"n{i}")) for i in range(3)]
    for n in nodes:
        n["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    bound = [
        _managed(pod(f"b{i}", gpus=1, node_name=f"n{i % 3}", phase="Running", rv=str(10 + i),
                     claim_name=f"b{i}-extended-resources-x", tolerations=[{"operator": "Exists"}]))
        for i in range(pods)
    ]  # fmt: skip
    pending = [_managed(pod(f"p{i}", gpus=1, rv=str(5000 + i), tolerations=[{"operator": "Exists"}])) for i in range(3)]
    claims = [
        _managed(special_claim(f"b{i}-extended-resources-x", f"b{i}", f"uid-b{i}", rv=str(2000 + i),
                               alloc=allocation(f"n{i % 3}", f"gpu-{i // 3}"), reserved=True))
        for i in range(pods)
    ]  # fmt: skip
    return {
        NODES.path(): nodes,
        RESOURCE_SLICES.path(): [_managed(gpu_slice(f"n{i}", 8)) for i in range(3)],
        DEVICE_CLASSES.path(): [_managed(gpu_class())],
        RESOURCE_CLAIMS.path(): claims,
        PODS.path(): bound + pending,
    }


async def test_listing_is_cut_down_page_by_page() -> None:
    objects = _cluster(pods=1200)
    kube = PagedKube(objects)
    listing = await list_cluster(kube)
    pod_pages = [q for path, q in kube.requests if path == PODS.path()]
    assert len(pod_pages) == 3  # 1203 pods, 500 a page
    assert all(q["limit"] == 500 for q in pod_pages)
    assert len(listing.pods) == 1203
    bound, pending = listing.pods[0], listing.pods[-1]
    assert "tolerations" not in bound["spec"]
    assert "managedFields" not in bound["metadata"]
    assert pending["spec"]["tolerations"] == [{"operator": "Exists"}]  # schedulable: whole
    assert "managedFields" not in pending["metadata"]
    assert all(isinstance(c, ClaimInfo) for c in listing.claims)
    assert "conditions" not in listing.nodes[0]["status"]
    assert all("managedFields" not in o["metadata"] for o in [*listing.nodes, *listing.slices, *listing.classes])
    # A bound pod is reduced to the fields its summary (PodInfo) is computed from.
    assert set(bound) == {"metadata", "spec", "status"}
    assert set(bound["spec"]) <= set(POD_INFO_FIELDS["spec"] or ())


async def test_listing_builds_the_same_state_as_the_whole_objects() -> None:
    objects = _cluster(pods=20)
    listing = await list_cluster(PagedKube(objects))
    from_listing = ClusterState()
    listing.apply(from_listing)
    direct = ClusterState()
    for n in objects[NODES.path()]:
        direct.upsert_node(n)
    for s in objects[RESOURCE_SLICES.path()]:
        direct.upsert_slice(s)
    for c in objects[DEVICE_CLASSES.path()]:
        direct.upsert_class(c)
    for c in objects[RESOURCE_CLAIMS.path()]:
        direct.upsert_claim(c)
    for p in objects[PODS.path()]:
        direct.upsert_pod(p)
    assert from_listing.pods == direct.pods
    assert from_listing.claims == direct.claims
    assert from_listing.special_claims == direct.special_claims
    assert from_listing.usage == direct.usage
    assert from_listing.allocated().allocated_devices == direct.allocated().allocated_devices
    assert len(from_listing.allocated().allocated_devices) == 20
    assert {k: n.raw for k, n in from_listing.nodes.items()} == {k: n.raw for k, n in direct.nodes.items()}
    assert from_listing.mapping.class_for("example.com/gpu") == direct.mapping.class_for("example.com/gpu")
