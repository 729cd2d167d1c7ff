"""Pods with ResourceClaims of their own (core.pod_claims, placement's DynamicResources): outcomes
worked out by hand from kube-scheduler 1.37.2's dynamicresources.go (PreFilter, Filter) and
k8s.io/dynamic-resource-allocation v0.37.2's resourceclaim helpers."""

from __future__ import annotations

from typing import Any

from draxr.core.allocator import DEFAULT_FEATURES, FatalKind
from draxr.core.placement import Decision, Unschedulable, schedule
from draxr.core.plugins.dynamic_resources import ClaimDecision
from draxr.core.state import ClusterState, PodInfo
from tests.unit.cluster_builders import DRIVER, GPU_CLASS, allocation, cluster, devices_of, gpu_slice, pod

JSON = dict[str, Any]


def claim(
    name: str,
    *,
    count: int = 1,
    cls: str = GPU_CLASS,
    alloc: JSON | None = None,
    reserved: list[str] = (),  # type: ignore[assignment]
    owner_uid: str | None = None,
    deleting: bool = False,
) -> JSON:
    meta: JSON = {"name": name, "namespace": "ns", "uid": f"uid-claim-{name}", "resourceVersion": "5"}
    if owner_uid is not None:
        ref = {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": owner_uid, "controller": True}
        meta["ownerReferences"] = [ref]
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    body: JSON = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": meta,
        "spec": {
            "devices": {
                "requests": [
                    {"name": "gpu", "exactly": {"deviceClassName": cls, "allocationMode": "ExactCount", "count": count}}
                ]
            }
        },
    }
    status: JSON = {}
    if alloc is not None:
        status["allocation"] = alloc
    if reserved:
        status["reservedFor"] = [{"resource": "pods", "name": u, "uid": u} for u in reserved]
    if status:
        body["status"] = status
    return body


def claim_pod(entries: list[JSON], *, gpus: int = 0, statuses: list[JSON] | None = None, name: str = "p") -> JSON:
    p = pod(name, gpus=gpus, resourceClaims=entries)
    if statuses is not None:
        p["status"]["resourceClaimStatuses"] = statuses
    return p


def by_name(entry: str, claim_name: str) -> JSON:
    return {"name": entry, "resourceClaimName": claim_name}


def run(state: ClusterState, p: JSON, *, binds_claims: bool = True) -> Decision | Unschedulable:
    state.upsert_pod(p)
    info = PodInfo.from_api(p, keep_object=True)
    return schedule(info, state, features=DEFAULT_FEATURES, binds_claims=binds_claims)


def decided(result: Decision | Unschedulable) -> Decision:
    assert isinstance(result, Decision), result
    return result


def rejected(result: Decision | Unschedulable) -> Unschedulable:
    assert isinstance(result, Unschedulable), result
    return result


# --------------------------------------------------------------------------- PreFilter


def test_refused_unless_the_caller_writes_claims() -> None:
    s = cluster({"n1": 2})
    s.upsert_claim(claim("c"))
    out = rejected(run(s, claim_pod([by_name("res", "c")]), binds_claims=False))
    assert out.message == "draxr does not support spec.resourceClaims (ResourceClaims next to extended resources) yet"
    assert out.unresolvable


def test_template_claim_not_created_yet() -> None:
    s = cluster({"n1": 2})
    out = rejected(run(s, claim_pod([{"name": "res", "resourceClaimTemplateName": "t"}])))
    assert out.message == '0/1 nodes are available: pod "ns/p": ResourceClaim not created yet.'


def test_template_claim_recorded_as_none_is_skipped() -> None:
    # resourceclaim.Name returns a nil name: a valid state (no claim was needed), skipped.
    s = cluster({"n1": 2})
    d = decided(run(s, claim_pod([{"name": "res", "resourceClaimTemplateName": "t"}], statuses=[{"name": "res"}])))
    assert d.claims == ()
    assert d.allocation is None


def test_template_claim_must_be_controlled_by_the_pod() -> None:
    s = cluster({"n1": 2})
    s.upsert_claim(claim("p-res-abc", owner_uid="uid-other"))
    entry = {"name": "res", "resourceClaimTemplateName": "t"}
    p = claim_pod([entry], statuses=[{"name": "res", "resourceClaimName": "p-res-abc"}])
    out = rejected(run(s, p))
    assert out.message == (
        "0/1 nodes are available: ResourceClaim ns/p-res-abc was not created for Pod ns/p (Pod is not owner)."
    )


def test_missing_deleted_and_classless_claims() -> None:
    s = cluster({"n1": 2})
    assert rejected(run(s, claim_pod([by_name("res", "gone")]))).message == (
        '0/1 nodes are available: could not find ResourceClaim "ns/gone".'
    )
    s.upsert_claim(claim("old", deleting=True))
    assert rejected(run(s, claim_pod([by_name("res", "old")]))).message == (
        '0/1 nodes are available: resourceclaim "old" is being deleted.'
    )
    s.upsert_claim(claim("tpu", cls="tpu.example.com"))
    out = rejected(run(s, claim_pod([by_name("res", "tpu")])))
    assert out.message == "0/1 nodes are available: request gpu: device class tpu.example.com does not exist."
    assert out.until_inventory_changes  # a DeviceClass event may help


# --------------------------------------------------------------------------- allocation


def test_pod_claim_and_special_claim_are_allocated_together() -> None:
    # n1 has 2 devices: the claim's 2 and the special claim's 1 do not fit together; n2 has 3.
    s = cluster({"n1": 2, "n2": 3})
    s.upsert_claim(claim("c", count=2))
    d = decided(run(s, claim_pod([by_name("res", "c")], gpus=1)))
    assert d.node == "n2"
    (c,) = d.claims
    assert (c.entry, c.key, c.uid, c.reserve) == ("res", "ns/c", "uid-claim-c", True)
    assert c.allocation is not None
    assert d.allocation is not None
    mine, special = devices_of(c.allocation), devices_of(d.allocation)
    assert len(mine) == 2
    assert len(special) == 1
    assert not set(mine) & set(special)
    assert {r["request"] for r in c.allocation["devices"]["results"]} == {"gpu"}
    assert [r.name for r in d.requests] == ["container-0-request-0"]


def test_no_node_fits_both_claims() -> None:
    s = cluster({"n1": 2})
    s.upsert_claim(claim("c", count=2))
    out = rejected(run(s, claim_pod([by_name("res", "c")], gpus=1)))
    assert out.message.startswith("0/1 nodes are available: 1 cannot allocate all claims")


def test_allocated_shared_claim_is_only_reserved_on_its_node() -> None:
    s = cluster({"n1": 4, "n2": 4})
    s.upsert_claim(claim("shared", alloc=allocation("n2", "gpu-0", request="gpu"), reserved=["uid-a", "uid-b"]))
    d = decided(run(s, claim_pod([by_name("res", "shared")])))
    assert d.node == "n2"
    assert d.claims == (ClaimDecision("res", "ns", "shared", "uid-claim-shared", None, True),)


def test_claim_reserved_for_the_pod_needs_no_write() -> None:
    s = cluster({"n1": 4})
    s.upsert_claim(claim("mine", alloc=allocation("n1", "gpu-0", request="gpu"), reserved=["uid-p"]))
    d = decided(run(s, claim_pod([by_name("res", "mine")])))
    assert d.claims == ()


def test_full_reserved_for_is_not_in_use_in_1_37() -> None:
    # resourceclaim.CanBeReserved is always true in v0.37.2: no "resourceclaim in use".
    s = cluster({"n1": 4})
    users = [f"uid-u{i}" for i in range(256)]
    s.upsert_claim(claim("busy", alloc=allocation("n1", "gpu-0", request="gpu"), reserved=users))
    d = decided(run(s, claim_pod([by_name("res", "busy")])))
    assert d.claims[0].allocation is None
    assert d.claims[0].reserve


def test_allocator_failure_comes_before_the_node_selector() -> None:
    # The allocated claim is on n1 (its only device); the special claim needs one more device.
    # Upstream's Filter runs the allocator first: n1 "cannot allocate all claims", n2 (fits, but
    # the claim is elsewhere) "resourceclaim not available on the node".
    s = cluster({"n1": 1, "n2": 2})
    s.upsert_claim(claim("c", alloc=allocation("n1", "gpu-0", request="gpu"), reserved=["uid-x"]))
    out = rejected(run(s, claim_pod([by_name("res", "c")], gpus=1)))
    assert out.reasons == {
        "resourceclaim not available on the node": 1,
        "cannot allocate all claims: 1 device(s) of class gpu.example.com requested, "
        "only 0 free and matching on this node": 1,
    }


def test_shared_unallocated_claim_is_not_allocated_twice_in_flight() -> None:
    s = cluster({"n1": 4})
    s.upsert_claim(claim("shared"))
    first = decided(run(s, claim_pod([by_name("res", "shared")], name="a")))
    (c,) = first.claims
    assert c.allocation is not None
    assert first.claim_allocations == (("ns/shared", c.allocation),)
    for key, alloc in first.claim_allocations:
        s.assume_allocation(key, alloc)  # what the shell does until the write is seen
    out = rejected(run(s, claim_pod([by_name("res", "shared")], name="b")))
    assert out.message == ("0/1 nodes are available: resource claim ns/shared is in the process of being allocated.")
    # The write's answer (allocated, reserved for a) reaches the state, then the assumption goes.
    written = claim("shared", alloc=c.allocation, reserved=["uid-a"])
    written["metadata"]["resourceVersion"] = "6"
    s.upsert_claim(written)
    assert not s.allocation_in_flight(c.key)
    s.forget_allocation(c.key)
    second = decided(run(s, claim_pod([by_name("res", "shared")], name="b")))
    assert second.claims == (ClaimDecision("res", "ns", "shared", "uid-claim-shared", None, True),)
    assert devices_of(c.allocation)[0][0] == DRIVER


def test_all_devices_on_a_pool_being_updated_fails_the_attempt_as_upstream() -> None:
    # n2's pool has 2 slices, only one published (generation 1): "currently being updated". The
    # allocator's error makes DynamicResources' Filter return an Error; upstream's RunFilterPlugins
    # wraps it ('running "DynamicResources" filter plugin: ...') and schedulePod ends the attempt
    # with it, whether other nodes fit (n1 does) or not: no diagnosis, no PostFilter, the wrapped
    # error as the FailedScheduling message (scheduling differential, seed 2, mixed-dra-00039).
    s = cluster({"n1": 2, "n2": 0})
    part = gpu_slice("n2", 2)
    part["spec"]["pool"]["resourceSliceCount"] = 2
    s.upsert_slice(part)
    body = claim("c")
    body["spec"]["devices"]["requests"] = [
        {"name": "gpu", "exactly": {"deviceClassName": GPU_CLASS, "allocationMode": "All"}}
    ]
    s.upsert_claim(body)
    out = rejected(run(s, claim_pod([by_name("res", "c")])))
    assert out.message == (
        'running "DynamicResources" filter plugin: claim ns/c, request gpu: asks for all devices, '
        f"but resource pool {DRIVER}/n2 is currently being updated"
    )
    assert out.fatal_kind == FatalKind.INCOMPLETE_POOL
    assert out.statuses == {}
    assert out.every_node is None
    assert out.reasons == {}
