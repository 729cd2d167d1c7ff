"""draxr.core.placement: kube-scheduler's filters and wording, scoring, and the per-pod decision."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from draxr.core.allocator import DEFAULT_FEATURES, FatalKind
from draxr.core.placement import Decision, Unschedulable, nodes_to_find, schedule
from draxr.core.plugins.node_resources_fit import Scoring
from draxr.core.pod_view import unsupported_fields
from draxr.core.requests import DeviceRequest, RequestMapping
from draxr.core.state import ClusterState, PodInfo
from draxr_dev.devcluster import fakedriver
from tests.unit.cluster_builders import (
    DRIVER,
    GPU,
    GPU_CLASS,
    allocation,
    cluster,
    devices_of,
    gpu_class,
    gpu_slice,
    node,
    plain_claim,
    pod,
)

JSON = dict[str, Any]
TAINT = {"key": "gpu", "value": "true", "effect": "NoSchedule"}


def run(
    state: ClusterState, p: JSON, *, scoring: Scoring = Scoring.LEAST_ALLOCATED, start: int = 0
) -> Decision | Unschedulable:
    state.upsert_pod(p)
    # Without the pod object: placement reads only the view made when the pod arrived (every test
    # here would raise PodObjectDropped if it went back to the dict).
    info = dataclasses.replace(PodInfo.from_api(p, keep_object=True), obj=None)
    return schedule(info, state, features=DEFAULT_FEATURES, scoring=scoring, start=start)


def decided(result: Decision | Unschedulable) -> Decision:
    assert isinstance(result, Decision), result
    return result


def rejected(result: Decision | Unschedulable) -> Unschedulable:
    assert isinstance(result, Unschedulable), result
    return result


def assume(state: ClusterState, p: JSON, d: Decision) -> None:
    uid = p["metadata"]["uid"]
    state.assume_pod(uid, d.node)
    if d.allocation is not None:
        state.assume_allocation(f"<assumed>/{uid}", d.allocation)


def bound(name: str, node_name: str, **kw: Any) -> JSON:
    return pod(name, node_name=node_name, phase="Running", scheduler="default-scheduler", **kw)


def with_ports(p: JSON, *ports: JSON) -> JSON:
    p["spec"]["containers"][0]["ports"] = list(ports)
    return p


# --------------------------------------------------------------------------- decisions


def test_dra_pod_gets_free_devices_request_and_mapping() -> None:
    s = cluster({"n1": 4})
    s.upsert_claim(plain_claim("other", alloc=allocation("n1", "gpu-0", "gpu-2")))  # kube-scheduler's
    d = decided(run(s, pod("web", gpus=2)))
    assert d.node == "n1"
    assert d.needs_claim
    assert d.requests == (DeviceRequest("container-0-request-0", GPU_CLASS, 2),)
    assert d.mappings == (RequestMapping("c", GPU, "container-0-request-0"),)
    assert d.allocation is not None
    assert sorted(devices_of(d.allocation)) == [(DRIVER, "n1", "gpu-1"), (DRIVER, "n1", "gpu-3")]
    assert {r["request"] for r in d.allocation["devices"]["results"]} == {"container-0-request-0"}
    assert d.allocation["nodeSelector"] == allocation("n1")["nodeSelector"]
    assert d.nodes_evaluated == 1


def test_implicit_class_name_is_served_by_dra() -> None:
    s = cluster({"n1": 2})
    d = decided(run(s, pod("web", gpus=1, resource=f"deviceclass.resource.kubernetes.io/{GPU_CLASS}")))
    assert d.requests == (DeviceRequest("container-0-request-0", GPU_CLASS, 1),)
    assert d.allocation is not None
    assert len(devices_of(d.allocation)) == 1


def test_assumed_allocations_are_not_handed_out_again() -> None:
    s = cluster({"n1": 3})
    p1, p2, p3 = pod("a", gpus=2), pod("b", gpus=1), pod("c", gpus=1)
    d1 = decided(run(s, p1))
    assume(s, p1, d1)
    d2 = decided(run(s, p2))
    assume(s, p2, d2)
    assert d1.allocation is not None
    assert d2.allocation is not None
    assert not set(devices_of(d1.allocation)) & set(devices_of(d2.allocation))
    r = rejected(run(s, p3))
    assert r.message.startswith("0/1 nodes are available: 1 cannot allocate all claims")
    s.forget_allocation("<assumed>/uid-b")  # the binding of b failed: its device is free again
    d3 = decided(run(s, p3))
    assert d3.allocation is not None
    assert devices_of(d3.allocation) == devices_of(d2.allocation)


def test_device_plugin_only_pod_gets_no_claim() -> None:
    s = cluster({})
    s.upsert_node(node("dp", extended={GPU: "4"}))
    d = decided(run(s, pod("web", gpus=2)))
    assert d.node == "dp"
    assert d.allocation is None
    assert d.requests == ()
    assert d.mappings == ()
    assert not d.needs_claim


def test_pod_without_extended_resources_gets_no_claim() -> None:
    s = cluster({"n1": 2})
    d = decided(run(s, pod("web", requests={"cpu": "1"})))
    assert (d.node, d.allocation, d.needs_claim) == ("n1", None, False)


def test_allocatable_zero_means_dra() -> None:
    """A node that stopped running the device plugin keeps `example.com/gpu: 0`: DRA serves it."""
    s = cluster({})
    s.upsert_node(node("n1", extended={GPU: "0"}))
    s.upsert_slice(gpu_slice("n1", 2))
    d = decided(run(s, pod("web", gpus=2)))
    assert d.allocation is not None
    assert len(devices_of(d.allocation)) == 2


def test_device_plugin_capacity_is_checked_against_usage() -> None:
    s = cluster({})
    s.upsert_node(node("dp", extended={GPU: "4"}))
    s.upsert_pod(bound("old", "dp", gpus=3))
    r = rejected(run(s, pod("web", gpus=2)))
    assert r.message == f"0/1 nodes are available: 1 Insufficient {GPU}."
    assert r.reasons == {f"Insufficient {GPU}": 1}
    assert not r.unresolvable
    # A DRA node next to it takes the pod.
    s.upsert_node(node("n1"))
    s.upsert_slice(gpu_slice("n1", 2))
    d = decided(run(s, pod("web", gpus=2)))
    assert d.node == "n1"
    assert d.allocation is not None


def test_unmapped_extended_resource_is_insufficient_once_per_node() -> None:
    s = cluster({"n1": 2, "n2": 2})
    r = rejected(run(s, pod("web", gpus=1, resource="example.com/fpga")))
    assert r.message == "0/2 nodes are available: 2 Insufficient example.com/fpga."
    assert r.reasons == {"Insufficient example.com/fpga": 2}


def test_not_enough_devices_message() -> None:
    s = cluster({"n1": 2, "n2": 1})
    r = rejected(run(s, pod("web", gpus=3)))
    assert r.message.startswith("0/2 nodes are available: ")
    assert sum(r.reasons.values()) == 2
    assert all(reason.startswith("cannot allocate all claims") for reason in r.reasons)
    assert not r.unresolvable
    assert r.fatal_kind is None


def test_more_than_32_devices() -> None:
    s = cluster({"n1": 40})
    r = rejected(run(s, pod("web", gpus=33)))
    reason = "extended resource claim needs 33 devices, more than the 32 allowed in one claim"
    assert r.reasons == {reason: 1}
    assert r.message == f"0/1 nodes are available: 1 {reason}."
    d = decided(run(s, pod("web2", gpus=32)))
    assert d.allocation is not None
    assert len(devices_of(d.allocation)) == 32


# --------------------------------------------------------------------------- filters and wording


def test_unschedulable_node() -> None:
    s = cluster({"n1": 2}, unschedulable=True)
    r = rejected(run(s, pod("web", gpus=1)))
    assert r.message == "0/1 nodes are available: 1 node(s) were unschedulable."
    tolerating = pod(
        "tol",
        gpus=1,
        tolerations=[{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}],
    )
    assert decided(run(s, tolerating)).node == "n1"


def test_spec_node_name() -> None:
    s = cluster({"n1": 1, "n2": 1})
    assert decided(run(s, pod("a", gpus=1, node_name="n2"))).node == "n2"
    r = rejected(run(s, pod("b", gpus=1, node_name="n9")))
    assert (
        r.message == "0/2 nodes are available: 2 node(s) didn't satisfy plugin(s) [NodeName]."
    )  # PreFilter's narrowing


@pytest.mark.parametrize("effect", ["NoSchedule", "NoExecute"])
def test_untolerated_taint(effect: str) -> None:
    s = cluster({"n1": 2}, taints=[{**TAINT, "effect": effect}])
    r = rejected(run(s, pod("web", gpus=1)))
    assert r.message == "0/1 nodes are available: 1 node(s) had untolerated taint(s)."


def test_taint_without_value_wording() -> None:
    s = cluster({"n1": 2}, taints=[{"key": "dedicated", "effect": "NoSchedule"}])
    r = rejected(run(s, pod("web")))
    assert r.message == "0/1 nodes are available: 1 node(s) had untolerated taint(s)."


def test_prefer_no_schedule_is_ignored() -> None:
    s = cluster({"n1": 2}, taints=[{**TAINT, "effect": "PreferNoSchedule"}])
    assert decided(run(s, pod("web", gpus=1))).node == "n1"


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        ({"key": "gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}, True),
        ({"key": "gpu", "value": "true"}, True),  # operator defaults to Equal, any effect
        ({"key": "gpu", "operator": "Exists"}, True),
        ({"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}, True),
        ({"operator": "Exists"}, True),  # empty key with Exists tolerates everything
        ({"operator": "Exists", "effect": "NoSchedule"}, True),
        ({"key": "gpu", "operator": "Equal", "value": "false"}, False),
        ({"key": "gpu"}, False),  # Equal with empty value
        ({"key": "gpu", "operator": "Exists", "effect": "NoExecute"}, False),
        ({"operator": "Exists", "effect": "NoExecute"}, False),
        ({"key": "other", "operator": "Exists"}, False),
    ],
)
def test_tolerations(toleration: JSON, tolerated: bool) -> None:
    s = cluster({"n1": 2}, taints=[TAINT])
    result = run(s, pod("web", gpus=1, tolerations=[toleration]))
    assert isinstance(result, Decision) is tolerated, result


def test_every_taint_must_be_tolerated() -> None:
    second = {"key": "zone", "value": "x", "effect": "NoExecute"}
    s = cluster({"n1": 2}, taints=[TAINT, second])
    r = rejected(run(s, pod("web", gpus=1, tolerations=[{"key": "gpu", "operator": "Exists"}])))
    assert r.message == "0/1 nodes are available: 1 node(s) had untolerated taint(s)."
    both = [{"key": "gpu", "operator": "Exists"}, {"key": "zone", "operator": "Equal", "value": "x"}]
    assert decided(run(s, pod("web2", gpus=1, tolerations=both))).node == "n1"


def test_node_selector() -> None:
    s = cluster({})
    s.upsert_node(node("a", labels={"zone": "a"}))
    s.upsert_node(node("b", labels={"zone": "b"}))
    assert decided(run(s, pod("web", nodeSelector={"zone": "b"}))).node == "b"
    r = rejected(run(s, pod("web2", nodeSelector={"zone": "c"})))
    assert r.message == "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector."


def _required(*terms: JSON) -> JSON:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}


def test_required_node_affinity() -> None:
    s = cluster({})
    s.upsert_node(node("a", labels={"zone": "a"}))
    s.upsert_node(node("b", labels={"zone": "b"}))
    s.upsert_node(node("c", labels={"zone": "c"}))
    not_a = _required({"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]})
    assert decided(run(s, pod("p1", affinity=not_a))).node == "b"
    by_field = _required({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["c"]}]})
    assert decided(run(s, pod("p2", affinity=by_field))).node == "c"
    # Terms are ORed; requirements in a term ANDed.
    impossible = _required(
        {
            "matchExpressions": [
                {"key": "zone", "operator": "In", "values": ["a"]},
                {"key": "zone", "operator": "In", "values": ["b"]},
            ]
        }
    )
    r = rejected(run(s, pod("p3", affinity=impossible)))
    assert r.message == "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."
    # nodeSelector and affinity must both match.
    both = pod("p4", affinity=not_a, nodeSelector={"zone": "c"})
    assert decided(run(s, both)).node == "c"


def test_host_ports() -> None:
    s = cluster({"n1": 0})
    s.upsert_pod(with_ports(bound("old", "n1"), {"containerPort": 80, "hostPort": 8080}))
    r = rejected(run(s, with_ports(pod("web"), {"containerPort": 80, "hostPort": 8080})))
    assert r.message == "0/1 nodes are available: 1 node(s) didn't have free ports for the requested pod ports."
    # Another protocol, another port or no host port at all: fine.
    assert isinstance(
        run(s, with_ports(pod("udp"), {"containerPort": 80, "hostPort": 8080, "protocol": "UDP"})), Decision
    )
    assert isinstance(run(s, with_ports(pod("other"), {"containerPort": 80, "hostPort": 8081})), Decision)
    assert isinstance(run(s, with_ports(pod("none"), {"containerPort": 8080})), Decision)


def test_host_ports_with_specific_ips() -> None:
    s = cluster({"n1": 0})
    s.upsert_pod(with_ports(bound("old", "n1"), {"containerPort": 80, "hostPort": 8080, "hostIP": "10.0.0.1"}))
    assert isinstance(
        run(s, with_ports(pod("ip2"), {"containerPort": 80, "hostPort": 8080, "hostIP": "10.0.0.2"})), Decision
    )
    assert isinstance(
        run(s, with_ports(pod("ip1"), {"containerPort": 80, "hostPort": 8080, "hostIP": "10.0.0.1"})), Unschedulable
    )
    assert isinstance(run(s, with_ports(pod("any"), {"containerPort": 80, "hostPort": 8080})), Unschedulable)


def test_too_many_pods() -> None:
    s = cluster({"n1": 0}, pods="2")
    s.upsert_pod(bound("a", "n1"))
    assert decided(run(s, pod("b"))).node == "n1"
    s.upsert_pod(bound("c", "n1"))
    r = rejected(run(s, pod("d")))
    assert r.message == "0/1 nodes are available: 1 Too many pods."


def test_assumed_pods_count_for_capacity() -> None:
    s = cluster({"n1": 0}, pods="1")
    p1 = pod("a")
    assume(s, p1, decided(run(s, p1)))
    assert rejected(run(s, pod("b"))).reasons == {"Too many pods": 1}


def test_insufficient_cpu_and_memory() -> None:
    s = cluster({"n1": 0}, cpu="2", memory="4Gi")
    s.upsert_pod(bound("old", "n1", requests={"cpu": "1500m", "memory": "3Gi"}))
    assert decided(run(s, pod("fits", requests={"cpu": "500m", "memory": "1Gi"}))).node == "n1"
    r = rejected(run(s, pod("cpu", requests={"cpu": "501m"})))
    assert r.message == "0/1 nodes are available: 1 Insufficient cpu."
    r = rejected(run(s, pod("mem", requests={"memory": "1025Mi"})))
    assert r.message == "0/1 nodes are available: 1 Insufficient memory."
    r = rejected(run(s, pod("both", requests={"cpu": "1", "memory": "2Gi"})))
    assert r.message == "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient memory."
    assert r.reasons == {"Insufficient cpu": 1, "Insufficient memory": 1}


def test_first_failing_filter_wins_per_node() -> None:
    """kube-scheduler stops at the first filter that rejects a node (in its plugin order)."""
    s = cluster({})
    s.upsert_node(node("n1", unschedulable=True, taints=[TAINT], labels={"zone": "x"}, cpu="1"))
    r = rejected(run(s, pod("web", nodeSelector={"zone": "y"}, requests={"cpu": "4"})))
    assert r.reasons == {"node(s) were unschedulable": 1}
    s.upsert_node(node("n1", taints=[TAINT], labels={"zone": "x"}, cpu="1"))
    r = rejected(run(s, pod("web", nodeSelector={"zone": "y"}, requests={"cpu": "4"})))
    assert r.reasons == {"node(s) had untolerated taint(s)": 1}
    s.upsert_node(node("n1", labels={"zone": "x"}, cpu="1"))
    r = rejected(run(s, pod("web", nodeSelector={"zone": "y"}, requests={"cpu": "4"})))
    assert r.reasons == {"node(s) didn't match Pod's node affinity/selector": 1}


def test_summary_sorted_like_fit_error() -> None:
    """Reasons are "<count> <reason>" strings sorted as strings (FitError.Error), so 10 precedes 2."""
    s = ClusterState()
    s.upsert_class(gpu_class())
    for i in range(10):
        s.upsert_node(node(f"u{i:02}", unschedulable=True))
    for i in range(2):
        s.upsert_node(node(f"t{i}", taints=[TAINT]))
    s.upsert_node(node("small", cpu="1"))
    s.upsert_node(node("full", pods="0"))
    r = rejected(run(s, pod("web", requests={"cpu": "2"})))
    assert r.message == (
        "0/14 nodes are available: 1 Insufficient cpu, 1 Too many pods, 10 node(s) were unschedulable, "
        "2 node(s) had untolerated taint(s)."
    )
    assert r.reasons == {
        "Insufficient cpu": 1,
        "Too many pods": 1,
        "node(s) were unschedulable": 10,
        "node(s) had untolerated taint(s)": 2,
    }


def test_the_diagnosis_gives_each_node_its_plugin_code_and_reasons() -> None:
    """Unschedulable.statuses is upstream's NodeToStatus: preemption reads the codes (only an
    Unschedulable node may be helped by evicting pods), explain the reasons; the summary counts
    exactly those reasons, with the equivalence cache on or off."""
    s = cluster({"gpu": 1})
    s.upsert_node(node("cordoned", unschedulable=True))
    s.upsert_node(node("small", cpu="1"))
    s.upsert_node(node("busy", cpu="4", pods="1"))
    s.upsert_pod(bound("old", "busy", requests={"cpu": "3"}))
    s.upsert_claim(plain_claim("held", alloc=allocation("gpu", "gpu-0")))
    p = pod("web", requests={"cpu": "2"}, gpus=1)
    r = rejected(run(s, p))
    got = {name: (status.plugin, str(status.code), status.reasons) for name, status in r.statuses.items()}
    assert got["cordoned"] == ("NodeUnschedulable", "UnschedulableAndUnresolvable", ("node(s) were unschedulable",))
    assert got["small"] == ("NodeResourcesFit", "UnschedulableAndUnresolvable", ("Insufficient cpu",))
    assert got["busy"] == ("NodeResourcesFit", "Unschedulable", ("Too many pods", "Insufficient cpu"))
    assert got["gpu"][:2] == ("DynamicResources", "UnschedulableAndUnresolvable")
    assert got["gpu"][2][0].startswith("cannot allocate all claims")
    assert set(got) == set(s.nodes)
    counted: dict[str, int] = {}
    for status in r.statuses.values():
        for reason in status.reasons:
            counted[reason] = counted.get(reason, 0) + 1
    assert counted == r.reasons
    info = PodInfo.from_api(p, keep_object=True)
    assert schedule(info, s, features=DEFAULT_FEATURES, equivalence=False) == r


def test_a_prefilter_status_holds_for_every_node() -> None:
    s = cluster({"n1": 1, "n2": 1})
    p = pod("web", resourceClaims=[{"name": "x", "resourceClaimName": "gone"}])
    info = s.upsert_pod(p)
    r = rejected(schedule(info, s, features=DEFAULT_FEATURES, binds_claims=True))
    assert r.statuses == {}
    assert r.message == '0/2 nodes are available: could not find ResourceClaim "ns/gone".'
    for name in ("n1", "n2"):
        status = r.status_of(name)
        assert status is not None
        assert status.unresolvable
        assert status.plugin == "DynamicResources"


def test_no_nodes() -> None:
    r = rejected(run(cluster({}), pod("web")))
    assert r.message == "no nodes available to schedule pods"  # kube-scheduler ErrNoNodesAvailable
    assert r.reasons == {}


# --------------------------------------------------------------------------- scoring and tie-break


@pytest.mark.parametrize("equivalence", [True, False])
def test_plugins_upstream_never_skips_are_scored_without_images_or_volumes(equivalence: bool) -> None:
    """ImageLocality has no PreScore and VolumeBinding's never skips (StorageCapacityScoring):
    upstream scores both, 0 on every node, for a pod whose images no node has and without volumes
    (found by the scheduling differential, which compares the plugins each side runs)."""
    s = cluster({"a": 2, "b": 2})
    info = PodInfo.from_api(pod("web", gpus=1, requests={"cpu": "1", "memory": "1Gi"}), keep_object=True)
    d = decided(schedule(info, s, features=DEFAULT_FEATURES, equivalence=equivalence))
    assert d.scores["ImageLocality"] == 0
    assert d.scores["VolumeBinding"] == 0


def test_least_allocated_spreads_and_most_allocated_packs() -> None:
    s = cluster({"busy": 2, "idle": 2})
    s.upsert_pod(bound("old", "busy", requests={"cpu": "4", "memory": "16Gi"}))
    p = pod("web", gpus=1, requests={"cpu": "1", "memory": "1Gi"})
    least = decided(run(s, p, scoring=Scoring.LEAST_ALLOCATED))
    most = decided(run(s, p, scoring=Scoring.MOST_ALLOCATED))
    assert least.node == "idle"
    assert most.node == "busy"
    # Scores on the 0..100 scale, cpu and memory weighted equally, in upstream's integer maths.
    assert least.scores["NodeResourcesFit"] == (7000 * 100 // 8000 + 31 * 100 // 32) // 2  # idle after placement
    assert most.scores["NodeResourcesFit"] == (5000 * 100 // 8000 + 17 * 100 // 32) // 2  # busy after placement


def test_best_effort_pods_spread_by_default_requests() -> None:
    s = cluster({"a": 0, "b": 0})
    s.upsert_pod(bound("old", "a"))  # no requests, yet it counts with upstream's defaults
    assert decided(run(s, pod("web"))).node == "b"


def test_tie_break_is_deterministic_and_ignores_start() -> None:
    s = ClusterState()
    s.upsert_class(gpu_class())
    for name in ("c", "a", "b"):
        s.upsert_node(node(name))
        s.upsert_slice(gpu_slice(name, 2))
    for start in range(5):
        assert decided(run(s, pod("web", gpus=1), start=start)).node == "a"


def test_best_scored_node_without_devices_falls_back_to_next() -> None:
    s = cluster({"busy": 2, "idle": 0})
    s.upsert_pod(bound("old", "busy", requests={"cpu": "4"}))
    d = decided(run(s, pod("web", gpus=1)))
    assert d.node == "busy"
    assert d.allocation is not None


def test_nodes_to_find() -> None:
    """Upstream numFeasibleNodesToFind with the adaptive default percentage."""
    assert nodes_to_find(1) == 1
    assert nodes_to_find(99) == 99
    assert nodes_to_find(100) == 100  # 50% would be 50: at least 100
    assert nodes_to_find(1000) == 420  # 50 - 1000/125 = 42%
    assert nodes_to_find(5000) == 500  # 10%
    assert nodes_to_find(10000) == 500  # floor of 5%
    assert nodes_to_find(1000, 10) == 100
    assert nodes_to_find(1000, 100) == 1000


def test_search_stops_after_enough_feasible_nodes_and_continues_when_they_fail() -> None:
    names = [f"n{i:03}" for i in range(200)]
    s = cluster(dict.fromkeys(names, 0))
    d = decided(run(s, pod("plain")))
    assert d.nodes_evaluated == 100  # max(100, 200 * 49%)
    # Only the last node has devices: the first batch of feasible nodes all fail the allocator.
    s.upsert_slice(gpu_slice(names[-1], 1))
    d = decided(run(s, pod("web", gpus=1)))
    assert d.node == names[-1]
    assert d.nodes_evaluated == 200


# --------------------------------------------------------------------------- unsupported and fatal


def _pod_affinity(kind: str) -> JSON:
    term = {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "kubernetes.io/hostname"}
    return {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


VOLUME_SPECS = [
    {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]},
    {"volumes": [{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}]},
]


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        *((spec, "spec.volumes") for spec in VOLUME_SPECS),
        ({"resourceClaims": [{"name": "extra", "resourceClaimName": "c"}]}, "spec.resourceClaims"),
    ],
)
def test_unsupported_fields_are_unresolvable(spec: JSON, field: str) -> None:
    """Volume claims and the pod's own ResourceClaims only for a caller that does not bind them
    (binds_volumes=False, binds_claims=False); the operator does."""
    s = cluster({"n1": 2})
    r = rejected(run(s, pod("web", gpus=1, **spec)))
    assert r.unresolvable
    assert r.fatal_kind is None
    assert field in r.message
    assert r.message.startswith("draxr does not support ")
    assert unsupported_fields(pod("web", **spec)) == []


@pytest.mark.parametrize("spec", VOLUME_SPECS)
def test_volume_prefilter_rejections_wait_for_storage_events(spec: JSON) -> None:
    """With binds_volumes the volume plugins judge the pod: a claim that does not exist (yet) is
    UnschedulableAndUnresolvable, and the pod waits for a storage event (the inventory stamp)."""
    s = cluster({"n1": 2})
    p = pod("web", gpus=1, **spec)
    s.upsert_pod(p)
    info = PodInfo.from_api(p, keep_object=True)
    r = rejected(schedule(info, s, features=DEFAULT_FEATURES, binds_volumes=True))
    assert r.unresolvable
    assert r.until_inventory_changes
    assert "persistentvolumeclaim" in r.message
    assert unsupported_fields(p) == []


def test_supported_lookalikes_are_scheduled() -> None:
    s = cluster({"n1": 2})
    preferred = {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 1,
                    "podAffinityTerm": {"labelSelector": {}, "topologyKey": "kubernetes.io/hostname"},
                }
            ]
        }
    }
    volumes = [{"name": "cfg", "configMap": {"name": "cfg"}}, {"name": "tmp", "emptyDir": {}}]
    p = pod("web", gpus=1, affinity=preferred, volumes=volumes, topologySpreadConstraints=[])
    assert unsupported_fields(p) == []
    assert isinstance(run(s, p), Decision)


def test_no_field_but_a_scheduling_group_is_unsupported() -> None:
    """The webhook and adoption take pods with persistent volumes and claims of their own."""
    volumes = [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
    p = pod("web", volumes=volumes, resourceClaims=[{"name": "x", "resourceClaimTemplateName": "t"}])
    assert unsupported_fields(p) == []


def test_a_pod_group_member_is_not_placed_alone() -> None:
    """A pod of a PodGroup (spec.schedulingGroup, GenericWorkload): kube-scheduler places the group
    all or nothing; draxr does not place its pods one by one (they would hold devices while their
    peers wait): unresolvable, with a reason that says why."""
    s = cluster({"n1": 2})
    p = pod("worker-0", gpus=1, schedulingGroup={"podGroupName": "train"})
    assert unsupported_fields(p) == ["spec.schedulingGroup (gang scheduling)"]
    r = rejected(run(s, p))
    assert r.unresolvable
    assert r.message == "draxr does not support spec.schedulingGroup (gang scheduling) yet"
    assert isinstance(run(s, pod("solo", gpus=1)), Decision)


@pytest.mark.parametrize("kind", ["podAffinity", "podAntiAffinity"])
def test_required_pod_affinity_and_spreading_are_supported(kind: str) -> None:
    spread = [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule"}]
    for extra in ({"affinity": _pod_affinity(kind)}, {"topologySpreadConstraints": spread}):
        assert unsupported_fields(pod("web", **extra)) == []


def test_allocation_fatal_error_is_unresolvable() -> None:
    s = ClusterState()
    s.upsert_class(gpu_class(GPU_CLASS, GPU, f'device.attributes["{DRIVER}"].nosuch == "x"'))
    s.upsert_node(node("n1"))
    s.upsert_slice(gpu_slice("n1", 2))
    r = rejected(run(s, pod("web", gpus=1)))
    assert r.unresolvable
    assert r.fatal_kind == FatalKind.CEL_RUNTIME
    assert "nosuch" in r.message
    # A pod that needs no devices is not affected by the broken class.
    assert isinstance(run(s, pod("plain")), Decision)


# --------------------------------------------------------------------------- properties

GPU_A = "example.com/gpu-a"
MODEL_A_SELECTOR = f'device.attributes["{DRIVER}"].model == "a"'


@st.composite
def _world(draw: st.DrawFn) -> JSON:
    nodes = []
    for i in range(draw(st.integers(1, 4))):
        device_plugin = draw(st.integers(0, 3)) == 0
        models = [] if device_plugin else draw(st.lists(st.sampled_from("ab"), max_size=6))
        nodes.append(
            {
                "name": f"n{i}",
                "cpu": draw(st.sampled_from([1000, 2000, 4000, 4000])),
                "pods": draw(st.integers(1, 6)),
                "unschedulable": draw(st.integers(0, 7)) == 0,
                "tainted": draw(st.integers(0, 3)) == 0,
                "zone": draw(st.sampled_from("xy")),
                "models": models,
                "preallocated": [d for d in range(len(models)) if draw(st.integers(0, 4)) == 0],
                "dp": draw(st.integers(1, 4)) if device_plugin else 0,
            }
        )
    pods = draw(
        st.lists(
            st.fixed_dictionaries(
                {
                    "gpu": st.sampled_from([0, 1, 1, 2, 3]),
                    "gpu_a": st.sampled_from([0, 0, 0, 1, 2]),
                    "cpu": st.sampled_from([0, 0, 500, 1000]),
                    "tolerate": st.booleans(),
                    "zone": st.sampled_from([None, None, None, "x", "y"]),
                }
            ),
            min_size=1,
            max_size=6,
        )
    )
    return {"nodes": nodes, "pods": pods}


class _Oracle:
    """An independent model of the cluster: what a correct scheduler must respect."""

    def __init__(self, world: JSON) -> None:
        self.nodes = {n["name"]: n for n in world["nodes"]}
        self.cpu = dict.fromkeys(self.nodes, 0)
        self.pods = dict.fromkeys(self.nodes, 0)
        self.dp = dict.fromkeys(self.nodes, 0)
        self.used = {(DRIVER, n["name"], f"gpu-{d}") for n in world["nodes"] for d in n["preallocated"]}

    def model(self, dev: tuple[str, str, str]) -> str:
        return str(self.nodes[dev[1]]["models"][int(dev[2].removeprefix("gpu-"))])

    def free(self, name: str, model: str | None = None) -> int:
        n = self.nodes[name]
        return sum(
            1
            for d, m in enumerate(n["models"])
            if (DRIVER, name, f"gpu-{d}") not in self.used and (model is None or m == model)
        )

    def fits(self, name: str, p: JSON) -> bool:
        n = self.nodes[name]
        if n["unschedulable"] or (n["tainted"] and not p["tolerate"]):
            return False
        if p["zone"] is not None and p["zone"] != n["zone"]:
            return False
        if self.pods[name] >= n["pods"] or (p["cpu"] and self.cpu[name] + p["cpu"] > n["cpu"]):
            return False
        dra_gpu = p["gpu"]
        if n["dp"] and p["gpu"]:  # served by the device plugin on this node
            if self.dp[name] + p["gpu"] > n["dp"]:
                return False
            dra_gpu = 0
        return p["gpu_a"] <= self.free(name, "a") and p["gpu_a"] + dra_gpu <= self.free(name)


def _world_state(world: JSON) -> ClusterState:
    s = ClusterState()
    s.upsert_class(gpu_class())
    s.upsert_class(gpu_class("gpu-a.example.com", GPU_A, MODEL_A_SELECTOR))
    for n in world["nodes"]:
        s.upsert_node(
            node(
                n["name"],
                cpu=f"{n['cpu']}m",
                pods=str(n["pods"]),
                labels={"zone": n["zone"]},
                taints=[TAINT] if n["tainted"] else None,
                unschedulable=n["unschedulable"],
                extended={GPU: str(n["dp"])} if n["dp"] else None,
            )
        )
        if n["models"]:
            devices = [
                fakedriver.device(f"gpu-{d}", model=m, uid=f"{n['name']}-{d}") for d, m in enumerate(n["models"])
            ]
            s.upsert_slice(fakedriver.resource_slice(n["name"], devices))
        for d in n["preallocated"]:
            s.upsert_claim(plain_claim(f"{n['name']}-held-{d}", alloc=allocation(n["name"], f"gpu-{d}")))
    return s


def _spec_pod(i: int, p: JSON) -> JSON:
    limits = {}
    if p["gpu"]:
        limits[GPU] = str(p["gpu"])
    if p["gpu_a"]:
        limits[GPU_A] = str(p["gpu_a"])
    extra: JSON = {}
    if p["tolerate"]:
        extra["tolerations"] = [{"key": "gpu", "operator": "Exists"}]
    if p["zone"] is not None:
        extra["nodeSelector"] = {"zone": p["zone"]}
    return pod(f"p{i}", limits=limits, requests={"cpu": f"{p['cpu']}m"} if p["cpu"] else None, **extra)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(world=_world(), scoring=st.sampled_from(list(Scoring)))
def test_decisions_respect_filters_and_never_share_devices(world: JSON, scoring: Scoring) -> None:
    """Pods scheduled one after another with assume, as the scheduler does: every decision's node
    passes every filter, its devices are free, match their class and are on that node, and no
    device is handed out twice; "unschedulable" holds only if brute force finds no node either."""
    s = _world_state(world)
    oracle = _Oracle(world)
    for i, spec in enumerate(world["pods"]):
        p = _spec_pod(i, spec)
        result = run(s, p, scoring=scoring, start=i)
        feasible = [name for name in oracle.nodes if oracle.fits(name, spec)]
        if isinstance(result, Unschedulable):
            assert feasible == [], (result.message, feasible)
            assert not result.unresolvable
            assert result.message.startswith(f"0/{len(oracle.nodes)} nodes are available: ")
            assert sum(result.reasons.values()) >= len(oracle.nodes)
            continue
        name = result.node
        assert name in feasible, (name, feasible)
        dp_served = bool(oracle.nodes[name]["dp"] and spec["gpu"])
        want = {GPU_CLASS: 0 if dp_served else spec["gpu"], "gpu-a.example.com": spec["gpu_a"]}
        if result.allocation is None:
            assert not any(want.values())
            devices: list[tuple[str, str, str]] = []
        else:
            by_request = {r.name: r.device_class_name for r in result.requests}
            got = {GPU_CLASS: 0, "gpu-a.example.com": 0}
            for r in result.allocation["devices"]["results"]:
                got[by_request[r["request"]]] += 1
                if by_request[r["request"]] == "gpu-a.example.com":
                    assert oracle.model((r["driver"], r["pool"], r["device"])) == "a"
            assert got == want
            devices = devices_of(result.allocation)
        assert len(set(devices)) == len(devices)
        assert all(pool == name for _, pool, _ in devices)
        assert not set(devices) & oracle.used, "device handed out twice"
        oracle.used |= set(devices)
        oracle.cpu[name] += spec["cpu"]
        oracle.pods[name] += 1
        if dp_served:
            oracle.dp[name] += spec["gpu"]
        assume(s, p, result)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    devices=st.lists(st.integers(0, 4), min_size=1, max_size=4),
    ops=st.lists(st.tuples(st.sampled_from(["schedule", "bind", "fail", "finish"]), st.integers(1, 3)), max_size=20),
)
def test_devices_stay_taken_through_bind_and_come_back_on_release(
    devices: list[int], ops: list[tuple[str, int]]
) -> None:
    """The lifecycle of the shell: assume -> claim written (committed) -> assumption forgotten, or
    binding failed -> forgotten; pods finish -> claim removed. Devices held by a live decision are
    never handed out again, and a pod is unschedulable only when no node has enough free devices."""
    s = cluster({f"n{i}": count for i, count in enumerate(devices)})
    capacity = {f"n{i}": count for i, count in enumerate(devices)}
    assumed: dict[str, tuple[JSON, Decision]] = {}
    committed: dict[str, set[tuple[str, str, str]]] = {}
    counter = 0
    for op, n in ops:
        held = set().union(*committed.values(), *(set(devices_of(d.allocation)) for _, d in assumed.values()))
        if op == "schedule":
            counter += 1
            p = pod(f"p{counter}", gpus=n)
            result = run(s, p)
            taken = {name: sum(1 for dev in held if dev[1] == name) for name in capacity}
            if isinstance(result, Unschedulable):
                assert all(capacity[name] - taken[name] < n for name in capacity)
                continue
            assert result.allocation is not None
            got = set(devices_of(result.allocation))
            assert len(got) == n
            assert not got & held
            assume(s, p, result)
            assumed[p["metadata"]["uid"]] = (p, result)
        elif assumed:
            uid = sorted(assumed)[n % len(assumed)]
            p, d = assumed.pop(uid)
            if op in ("bind", "finish"):
                name = f"{p['metadata']['name']}-extended-resources-x"
                s.upsert_claim(plain_claim(name, alloc=d.allocation))  # the binder's status write
                committed[uid] = set(devices_of(d.allocation))
            else:
                s.forget_pod(uid)
            s.forget_allocation(f"<assumed>/{uid}")
            if op == "finish":
                s.remove_claim("ns", name)
                s.remove_pod(uid)
                del committed[uid]
        elif committed and op == "finish":
            uid = sorted(committed)[n % len(committed)]
            s.remove_claim("ns", f"{s.pods[uid].name}-extended-resources-x")
            del committed[uid]
    held = set().union(*committed.values(), *(set(devices_of(d.allocation)) for _, d in assumed.values()))
    assert s.allocated().allocated_devices == held


def _place_all(s: ClusterState, sizes: list[int], device_scoring: Scoring | None) -> list[str]:
    """Schedule pods asking for these device counts one after the other, each decision assumed."""
    placed = []
    for i, n in enumerate(sizes):
        p = pod(f"p{i}", gpus=n)
        s.upsert_pod(p)
        result = schedule(
            PodInfo.from_api(p, keep_object=True), s, features=DEFAULT_FEATURES, device_scoring=device_scoring
        )
        if isinstance(result, Decision):
            assume(s, p, result)
            placed.append(result.node)
        else:
            placed.append("")
    return placed


def test_device_scoring_packs_small_requests_so_a_whole_node_stays_free() -> None:
    sizes = [1, 1, 1, 1, 4]  # four small pods, then one that needs a whole 4-device node
    spread = _place_all(cluster({"a": 4, "b": 4}), sizes, device_scoring=None)
    packed = _place_all(cluster({"a": 4, "b": 4}), sizes, device_scoring=Scoring.MOST_ALLOCATED)
    # cpu/memory only: best-effort pods spread (upstream's integer scores tie from the third on)
    assert spread[:3] == ["a", "b", "a"]
    assert spread[4] == ""  # no node has 4 free devices left
    assert packed == ["a", "a", "a", "a", "b"]
    least = _place_all(cluster({"a": 4, "b": 4}), [1, 1], device_scoring=Scoring.LEAST_ALLOCATED)
    assert least == ["a", "b"]


def test_device_scoring_ranks_device_plugin_nodes_like_dra_nodes() -> None:
    """A node serving the name by device plugin is scored on the same device axis: MostAllocated
    fills the busier of the two kinds first instead of always preferring the node without slices."""

    def busy(dp_used: int, dra_used: int) -> str:
        s = cluster({"dra": 8})
        for i in range(dra_used):  # before the device-plugin node exists: all on "dra"
            p = pod(f"old-dra-{i}", gpus=1)
            s.upsert_pod(p)
            assume(s, p, decided(schedule(PodInfo.from_api(p), s, features=DEFAULT_FEATURES)))
        s.upsert_node(node("dp", extended={GPU: "8"}))
        if dp_used:
            s.upsert_pod(bound("old-dp", "dp", gpus=dp_used))
        p = pod("new", gpus=1)
        s.upsert_pod(p)
        result = schedule(PodInfo.from_api(p), s, features=DEFAULT_FEATURES, device_scoring=Scoring.MOST_ALLOCATED)
        return decided(result).node

    assert busy(dp_used=0, dra_used=4) == "dra"
    assert busy(dp_used=4, dra_used=0) == "dp"


def test_a_quick_no_fit_is_kept_only_while_the_node_is_untouched() -> None:
    """DynamicResources keeps the quick count's "too few free devices" per node stamp: an
    allocation leaving the node's pool touches the node, and the node fits again."""
    s = cluster({"n1": 2, "n2": 2})
    s.upsert_claim(plain_claim("a", alloc=allocation("n1", "gpu-0", "gpu-1")))
    s.upsert_claim(plain_claim("b", alloc=allocation("n2", "gpu-0", "gpu-1")))
    first = rejected(run(s, pod("first", gpus=1)))
    kept = s.no_fit.now()
    assert kept is not None
    assert len(kept) == 2  # one per node
    assert first.statuses["n1"].plugin == "DynamicResources"
    assert rejected(run(s, pod("again", gpus=1))).message == first.message  # from the kept ones
    s.remove_claim("ns", "a")
    assert decided(run(s, pod("after", gpus=1))).node == "n1"


def test_quick_no_fits_are_not_kept_where_a_node_sees_shared_slices() -> None:
    s = cluster({"n1": 2})
    shared = gpu_slice("n1", 1, first=5)
    shared["metadata"]["name"] = "network-attached"
    shared["spec"]["pool"]["name"] = "network"
    del shared["spec"]["nodeName"]
    shared["spec"]["allNodes"] = True
    s.upsert_slice(shared)
    assert s.no_fit.now() is None
