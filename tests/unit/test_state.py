"""draxr.core.state: the in-memory cluster view fed by watch events, and the assume cache."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from draxr.core.state import (
    DEFAULT_MEMORY,
    DEFAULT_MILLI_CPU,
    ClaimInfo,
    ClusterState,
    NodeInfo,
    NodeUsage,
    PodInfo,
    PodObjectDropped,
    slim_pod,
    units,
)
from tests.unit.cluster_builders import (
    DRIVER,
    GPU,
    GPU_CLASS,
    allocation,
    gpu_class,
    gpu_slice,
    node,
    plain_claim,
    pod,
    special_claim,
)

GiB = 1024**3


def _usage(state: ClusterState, name: str) -> NodeUsage:
    return state.usage.get(name) or NodeUsage()


def _bound(name: str, node_name: str = "n1", **kw: object) -> dict[str, object]:
    return pod(name, node_name=node_name, phase="Running", **kw)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- parsing


def test_units() -> None:
    assert units("cpu", "1") == 1000
    assert units("cpu", "250m") == 250
    assert units("memory", "1Gi") == GiB
    assert units("memory", "1500m") == 2  # Value() rounds up
    assert units("example.com/gpu", "2") == 2


def test_node_info_from_api() -> None:
    taints = [{"key": "gpu", "value": "true", "effect": "NoSchedule"}]
    info = NodeInfo.from_api(
        node(
            "n1",
            cpu="4",
            memory="8Gi",
            pods="10",
            labels={"zone": "a"},
            taints=taints,
            extended={"example.com/gpu": "4", "example.com/old": "0", "hugepages-2Mi": "1Gi"},
            unschedulable=True,
        )
    )
    assert info.name == "n1"
    assert info.labels["zone"] == "a"
    assert info.taints == tuple(taints)
    assert info.unschedulable
    assert info.allocatable["cpu"] == 4000
    assert info.allocatable["memory"] == 8 * GiB
    assert info.allocatable["pods"] == 10
    # Only extended (prefixed) names with allocatable > 0 are served by a device plugin.
    assert info.device_plugin_names == frozenset({"example.com/gpu"})


def test_pod_info_from_api() -> None:
    p = pod(
        "web",
        uid="u1",
        namespace="team",
        gpus=2,
        requests={"cpu": "500m", "memory": "1Gi"},
        priority=7,
        created="2026-02-03T04:05:06Z",
    )
    p["spec"]["containers"][0]["ports"] = [
        {"containerPort": 80, "hostPort": 8080},
        {"containerPort": 53, "hostPort": 53, "protocol": "UDP", "hostIP": "10.0.0.1"},
        {"containerPort": 9090},  # no host port
    ]
    info = PodInfo.from_api(p)
    assert (info.uid, info.namespace, info.name, info.key) == ("u1", "team", "web", "team/web")
    assert info.node_name == ""
    assert info.phase == "Pending"
    assert info.scheduler_name == "draxr"
    assert info.priority == 7
    assert info.created == "2026-02-03T04:05:06Z"
    assert not info.deleting
    assert not info.terminal
    assert info.requests == {"cpu": Decimal("0.5"), "memory": Decimal(GiB), GPU: Decimal(2)}
    assert info.units == {"cpu": 500, "memory": GiB, GPU: 2}
    assert info.host_ports == frozenset({("0.0.0.0", "TCP", 8080), ("10.0.0.1", "UDP", 53)})
    assert info.claim_name == ""


def test_pod_info_defaults_and_claim_name() -> None:
    p = pod("web", scheduler="", phase="", claim_name="web-extended-resources-x")
    del p["spec"]["schedulerName"]
    p["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    info = PodInfo.from_api(p)
    assert info.scheduler_name == "default-scheduler"
    assert info.phase == "Pending"
    assert info.deleting
    assert info.units == {}
    assert info.claim_name == "web-extended-resources-x"


@pytest.mark.parametrize(("phase", "terminal"), [("Succeeded", True), ("Failed", True), ("Running", False),
                                                 ("Pending", False), ("Unknown", False)])  # fmt: skip
def test_terminal_phases(phase: str, terminal: bool) -> None:
    assert PodInfo.from_api(pod(phase=phase)).terminal is terminal


# --------------------------------------------------------------------------- node and pod accounting


def test_usage_counts_bound_non_terminal_pods() -> None:
    s = ClusterState()
    s.upsert_node(node("n1"))
    s.upsert_node(node("n2"))
    s.upsert_pod(_bound("a", requests={"cpu": "500m", "memory": "1Gi"}, gpus=1))
    s.upsert_pod(_bound("b", requests={"cpu": "1"}))
    s.upsert_pod(pod("pending", requests={"cpu": "4"}))  # not placed: counts nowhere
    u = _usage(s, "n1")
    assert u.pods == 2
    assert u.requested == {"cpu": 1500, "memory": GiB, GPU: 1}
    assert u.nonzero_milli_cpu == 1500
    assert u.nonzero_memory == GiB + DEFAULT_MEMORY  # b requests no memory: upstream's default
    assert _usage(s, "n2").pods == 0


def test_best_effort_pod_uses_default_nonzero_requests() -> None:
    s = ClusterState()
    s.upsert_node(node("n1"))
    s.upsert_pod(_bound("a"))
    u = _usage(s, "n1")
    assert u.pods == 1
    assert u.requested == {}
    assert (u.nonzero_milli_cpu, u.nonzero_memory) == (DEFAULT_MILLI_CPU, DEFAULT_MEMORY)


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_terminal_pod_stops_counting(phase: str) -> None:
    s = ClusterState()
    s.upsert_node(node("n1"))
    s.upsert_pod(_bound("a", requests={"cpu": "1"}, rv="1"))
    gen = s.generation
    s.upsert_pod(pod("a", node_name="n1", phase=phase, requests={"cpu": "1"}, rv="2"))
    u = _usage(s, "n1")
    assert (u.pods, u.requested.get("cpu", 0), u.nonzero_milli_cpu, u.nonzero_memory) == (0, 0, 0, 0)
    assert s.generation > gen  # resources freed: pending pods may fit now
    assert s.pods["uid-a"].terminal


def test_deleted_pod_stops_counting() -> None:
    s = ClusterState()
    s.upsert_node(node("n1"))
    s.upsert_pod(_bound("a", requests={"cpu": "1"}))
    s.upsert_pod(_bound("b", requests={"cpu": "2"}))
    gen = s.generation
    removed = s.remove_pod("uid-a")
    assert removed is not None
    assert removed.name == "a"
    assert "uid-a" not in s.pods
    assert _usage(s, "n1").pods == 1
    assert _usage(s, "n1").requested["cpu"] == 2000
    assert s.generation > gen
    gen = s.generation
    assert s.remove_pod("uid-a") is None  # twice: no-op
    assert s.generation == gen
    assert _usage(s, "n1").pods == 1


def test_pod_update_is_not_counted_twice() -> None:
    s = ClusterState()
    s.upsert_node(node("n1"))
    for rv in ("1", "2", "3"):
        s.upsert_pod(_bound("a", requests={"cpu": "1"}, rv=rv))
    assert _usage(s, "n1").pods == 1
    assert _usage(s, "n1").requested["cpu"] == 1000


def test_host_ports_are_tracked_per_node() -> None:
    s = ClusterState()
    s.upsert_node(node("n1"))
    p = _bound("a")
    p["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
    q = _bound("b")
    q["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
    s.upsert_pod(p)
    s.upsert_pod(q)
    assert _usage(s, "n1").host_ports == {("0.0.0.0", "TCP", 8080): 2}
    s.remove_pod("uid-a")
    assert _usage(s, "n1").host_ports == {("0.0.0.0", "TCP", 8080): 1}
    s.remove_pod("uid-b")
    assert _usage(s, "n1").host_ports == {}


def test_assume_and_forget_pod() -> None:
    s = ClusterState()
    s.upsert_node(node("n1"))
    s.upsert_pod(pod("a", requests={"cpu": "1"}, gpus=2, rv="1"))
    gen = s.generation
    s.assume_pod("uid-a", "n1")
    assert s.assumed_nodes == {"uid-a": "n1"}
    assert _usage(s, "n1").pods == 1
    assert _usage(s, "n1").requested == {"cpu": 1000, GPU: 2}
    assert s.generation == gen  # taking resources cannot help anyone
    s.forget_pod("uid-a")
    assert s.assumed_nodes == {}
    assert _usage(s, "n1").pods == 0
    assert _usage(s, "n1").requested.get("cpu", 0) == 0
    assert s.generation > gen  # resources given back


def test_assumed_pod_stays_counted_across_updates_and_binding() -> None:
    s = ClusterState()
    s.upsert_node(node("n1"))
    s.upsert_pod(pod("a", requests={"cpu": "1"}, rv="1"))
    s.assume_pod("uid-a", "n1")
    s.upsert_pod(pod("a", requests={"cpu": "1"}, rv="2", claim_name="a-extended-resources-x"))  # status patch
    assert _usage(s, "n1").pods == 1
    s.upsert_pod(pod("a", requests={"cpu": "1"}, rv="3", node_name="n1", claim_name="a-extended-resources-x"))
    assert s.assumed_nodes == {}  # the binding is visible: no longer an assumption
    assert _usage(s, "n1").pods == 1
    assert _usage(s, "n1").requested["cpu"] == 1000
    s.forget_pod("uid-a")  # a late forget must not uncount a bound pod
    assert _usage(s, "n1").pods == 1


def test_assume_pod_moves_between_nodes() -> None:
    s = ClusterState()
    s.upsert_node(node("n1"))
    s.upsert_node(node("n2"))
    s.upsert_pod(pod("a", requests={"cpu": "1"}))
    s.assume_pod("uid-a", "n1")
    s.assume_pod("uid-a", "n2")
    assert (_usage(s, "n1").pods, _usage(s, "n2").pods) == (0, 1)


def test_removing_an_assumed_pod_releases_its_node() -> None:
    s = ClusterState()
    s.upsert_node(node("n1"))
    s.upsert_pod(pod("a", requests={"cpu": "1"}))
    s.assume_pod("uid-a", "n1")
    s.remove_pod("uid-a")
    assert s.assumed_nodes == {}
    assert _usage(s, "n1").pods == 0


def test_stale_pod_event_is_ignored() -> None:
    s = ClusterState()
    s.upsert_node(node("n1"))
    s.upsert_pod(_bound("a", requests={"cpu": "1"}, rv="10"))
    # A late event from before the binding must not unbind the pod nor drop its usage.
    info = s.upsert_pod(pod("a", requests={"cpu": "1"}, rv="9"))
    assert info.node_name == "n1"
    assert s.pods["uid-a"].node_name == "n1"
    assert _usage(s, "n1").pods == 1
    # A late event must not revive a pod that is known to be finished either.
    s.upsert_pod(pod("a", node_name="n1", phase="Succeeded", requests={"cpu": "1"}, rv="12"))
    s.upsert_pod(_bound("a", requests={"cpu": "1"}, rv="11"))
    assert s.pods["uid-a"].terminal
    assert _usage(s, "n1").pods == 0


def test_non_numeric_resource_versions_are_applied() -> None:
    s = ClusterState()
    s.upsert_pod(pod("a", rv="abc"))
    s.upsert_pod(pod("a", rv="abb", node_name="n1", phase="Running"))
    assert s.pods["uid-a"].node_name == "n1"


# --------------------------------------------------------------------------- nodes


def test_node_upsert_and_remove() -> None:
    s = ClusterState()
    gen = s.generation
    s.upsert_node(node("n1", cpu="4"))
    assert s.generation > gen
    assert s.nodes["n1"].allocatable["cpu"] == 4000
    s.upsert_pod(_bound("a", requests={"cpu": "1"}))
    gen = s.generation
    s.upsert_node(node("n1", cpu="8"))  # an update keeps the pods' usage
    assert s.generation > gen
    assert s.nodes["n1"].allocatable["cpu"] == 8000
    assert _usage(s, "n1").pods == 1
    gen = s.generation
    beat = node("n1", cpu="8")
    beat["metadata"]["resourceVersion"] = "99"
    beat.setdefault("status", {})["conditions"] = [{"type": "Ready", "status": "True", "lastHeartbeatTime": "t"}]
    s.upsert_node(beat)  # a status heartbeat: nothing a filter reads changed, no pod is woken
    assert s.generation == gen
    tainted = node("n1", cpu="8")
    tainted["spec"] = {"taints": [{"key": "k", "effect": "NoSchedule"}]}
    s.upsert_node(tainted)
    assert s.generation > gen
    s.upsert_slice(gpu_slice("n1", 2))
    assert s.inventory.slices_for_node("n1")
    gen = s.generation
    s.remove_node("n1")
    assert "n1" not in s.nodes
    assert s.generation > gen


# --------------------------------------------------------------------------- claims


def test_claim_allocation_is_tracked_and_a_stale_event_does_not_undo_it() -> None:
    s = ClusterState()
    key = "ns/web-extended-resources-x"
    s.upsert_claim(special_claim("web-extended-resources-x", "web", "u1", rv="5"))
    assert s.allocated().allocated_devices == frozenset()
    applied = s.upsert_claim(
        special_claim("web-extended-resources-x", "web", "u1", rv="7", alloc=allocation("n1", "gpu-0"))
    )
    assert applied
    assert s.allocated().allocated_devices == {(DRIVER, "n1", "gpu-0")}
    # The watch delivers the creation event late: ignored.
    assert not s.upsert_claim(special_claim("web-extended-resources-x", "web", "u1", rv="5"))
    assert s.allocated().allocated_devices == {(DRIVER, "n1", "gpu-0")}
    assert s.claims[key].allocated
    assert s.claims[key].object()["status"]["allocation"] == allocation("n1", "gpu-0")
    # The same version again is applied (idempotent re-delivery).
    assert s.upsert_claim(
        special_claim("web-extended-resources-x", "web", "u1", rv="7", alloc=allocation("n1", "gpu-0"))
    )


def test_deallocation_and_removal_free_devices_and_bump_generation() -> None:
    s = ClusterState()
    s.upsert_claim(plain_claim("c1", rv="1", alloc=allocation("n1", "gpu-0", "gpu-1")))
    assert s.allocated().allocated_devices == {(DRIVER, "n1", "gpu-0"), (DRIVER, "n1", "gpu-1")}
    gen = s.generation
    s.upsert_claim(plain_claim("c1", rv="2"))  # deallocated
    assert s.allocated().allocated_devices == frozenset()
    assert s.generation > gen
    s.upsert_claim(plain_claim("c1", rv="3", alloc=allocation("n1", "gpu-1")))
    gen = s.generation
    s.remove_claim("ns", "c1")
    assert "ns/c1" not in s.claims
    assert s.allocated().allocated_devices == frozenset()
    assert s.generation > gen
    gen = s.generation
    s.remove_claim("ns", "c1")  # unknown: no-op
    assert s.generation == gen


def test_new_allocation_does_not_bump_generation() -> None:
    s = ClusterState()
    gen = s.generation
    s.upsert_claim(plain_claim("c1", rv="1"))
    s.upsert_claim(plain_claim("c1", rv="2", alloc=allocation("n1", "gpu-0")))
    assert s.generation == gen


def test_special_claim_index_by_pod_uid() -> None:
    s = ClusterState()
    s.upsert_claim(special_claim("web-extended-resources-b", "web", "u1", rv="1"))
    s.upsert_claim(special_claim("web-extended-resources-a", "web", "u1", rv="2"))
    s.upsert_claim(special_claim("db-extended-resources-a", "db", "u2", rv="3"))
    s.upsert_claim(plain_claim("ordinary", rv="4"))
    s.upsert_claim(special_claim("not-special", "web", "u1", rv="5", annotation="false"))
    s.upsert_claim(special_claim("not-controlled", "web", "u1", rv="6", controller=False))
    assert s.special_claims == {
        "u1": {"ns/web-extended-resources-a", "ns/web-extended-resources-b"},
        "u2": {"ns/db-extended-resources-a"},
    }
    names = [c.name for c in s.special_claims_of("u1")]
    assert names == ["web-extended-resources-a", "web-extended-resources-b"]  # sorted by key
    assert s.special_claims_of("nobody") == []
    s.remove_claim("ns", "web-extended-resources-a")
    assert s.special_claims["u1"] == {"ns/web-extended-resources-b"}
    s.remove_claim("ns", "web-extended-resources-b")
    assert "u1" not in s.special_claims
    assert s.special_claims_of("u1") == []
    s.remove_claim("ns", "ordinary")
    assert s.special_claims == {"u2": {"ns/db-extended-resources-a"}}


def test_assumed_allocation_counts_until_forgotten() -> None:
    s = ClusterState()
    s.assume_allocation("<assumed>/u1", allocation("n1", "gpu-0"))
    assert s.allocated().allocated_devices == {(DRIVER, "n1", "gpu-0")}
    gen = s.generation
    s.forget_allocation("<assumed>/u1")
    assert s.allocated().allocated_devices == frozenset()
    assert s.generation > gen


# --------------------------------------------------------------------------- DRA objects and mapping


def test_mapping_follows_class_add_and_remove() -> None:
    s = ClusterState()
    assert s.mapping.lookup(GPU) is None
    gen = s.generation
    s.upsert_class(gpu_class())
    assert s.generation > gen
    assert s.mapping.class_for(GPU) == GPU_CLASS
    assert s.mapping.class_for(f"deviceclass.resource.kubernetes.io/{GPU_CLASS}") == GPU_CLASS
    assert s.inventory.get_class(GPU_CLASS) is not None
    gen = s.generation
    s.upsert_class(gpu_class(GPU_CLASS, None))  # the explicit name is dropped
    assert s.generation > gen
    assert s.mapping.lookup(GPU) is None
    assert s.mapping.class_for(f"deviceclass.resource.kubernetes.io/{GPU_CLASS}") == GPU_CLASS
    gen = s.generation
    s.remove_class(GPU_CLASS)
    assert s.generation > gen
    assert s.mapping.lookup(f"deviceclass.resource.kubernetes.io/{GPU_CLASS}") is None
    assert s.inventory.get_class(GPU_CLASS) is None
    assert GPU_CLASS not in s.classes


def test_mapping_is_recomputed_not_patched() -> None:
    """Two classes claim one name: the newer wins; when it goes away the older one takes over
    (upstream's incremental cache would leave the name unmapped)."""
    old = gpu_class("old-gpus")
    old["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    new = gpu_class("new-gpus")
    new["metadata"]["creationTimestamp"] = "2026-02-01T00:00:00Z"
    s = ClusterState()
    s.upsert_class(old)
    s.upsert_class(new)
    assert s.mapping.class_for(GPU) == "new-gpus"
    s.remove_class("new-gpus")
    assert s.mapping.class_for(GPU) == "old-gpus"
    s.upsert_class(new)
    s.upsert_class({**new, "spec": {**new["spec"], "extendedResourceName": "example.com/other"}})  # renamed
    assert s.mapping.class_for(GPU) == "old-gpus"
    assert s.mapping.class_for("example.com/other") == "new-gpus"


def test_slices_bump_generation() -> None:
    s = ClusterState()
    gen = s.generation
    s.upsert_slice(gpu_slice("n1", 2))
    assert s.generation > gen
    assert [x for x in s.inventory.slices_for_node("n1")]
    gen = s.generation
    s.remove_slice(gpu_slice("n1", 2)["metadata"]["name"])
    assert s.generation > gen
    assert not s.inventory.slices_for_node("n1")


def test_pending_pod_arrival_does_not_bump_generation() -> None:
    s = ClusterState()
    s.upsert_node(node("n1"))
    gen = s.generation
    s.upsert_pod(pod("a", rv="1"))
    s.upsert_pod(pod("a", rv="2", claim_name="x"))
    s.upsert_pod(_bound("b"))  # a new running pod takes resources
    assert s.generation == gen


# --------------------------------------------------------------------------- property


_EVENTS = st.lists(
    st.tuples(
        st.sampled_from(["upsert", "remove", "assume", "forget"]),
        st.sampled_from(["a", "b", "c"]),  # pod
        st.sampled_from(["", "n1", "n2"]),  # nodeName (upsert) / node (assume)
        st.sampled_from(["Pending", "Running", "Succeeded", "Failed"]),
        st.integers(0, 3),  # cpu (0: no cpu request)
        st.integers(0, 1),  # memory in GiB (0: no memory request)
        st.integers(1, 6),  # resourceVersion: repeats and goes back (re-lists, late events)
    ),
    max_size=25,
)


@settings(max_examples=300, deadline=None)
@given(events=_EVENTS)
def test_usage_always_equals_a_model_of_the_events(events: list[tuple[str, str, str, str, int, int, int]]) -> None:
    """Whatever the order of events and of their resourceVersions, the incremental usage equals what
    a model built from the events alone says: per pod the newest version seen (an older or the same
    resourceVersion changes nothing; a removed pod is forgotten), every non-terminal pod counted
    once, on its bound node or else on its assumed node, with upstream's non-zero defaults (100m
    cpu, 200Mi memory) for what it does not request."""
    s = ClusterState()
    s.upsert_node(node("n1"))
    s.upsert_node(node("n2"))
    model: dict[str, tuple[int, str, str, int, int]] = {}  # pod -> (rv, nodeName, phase, cpu, GiB)
    assumed: dict[str, str] = {}  # pod -> node
    for op, name, where, phase, cpu, gib, rv in events:
        uid = f"uid-{name}"
        if op == "upsert":
            requests = {"cpu": str(cpu)} if cpu else {}
            if gib:
                requests["memory"] = f"{gib}Gi"
            s.upsert_pod(pod(name, node_name=where, phase=phase, requests=requests, rv=str(rv)))
            if name not in model or rv > model[name][0]:
                model[name] = (rv, where, phase, cpu, gib)
                if where:
                    assumed.pop(name, None)  # the binding is seen: no longer an assumption
        elif op == "remove":
            s.remove_pod(uid)
            model.pop(name, None)
            assumed.pop(name, None)
        elif op == "assume" and where and name in model:
            s.assume_pod(uid, where)
            assumed[name] = where
        elif op == "forget":
            s.forget_pod(uid)
            assumed.pop(name, None)

    assert {uid: (p.node_name, p.phase) for uid, p in s.pods.items()} == {
        f"uid-{name}": (where, phase) for name, (_, where, phase, _, _) in model.items()
    }
    assert s.assumed_nodes == {f"uid-{name}": n for name, n in assumed.items()}
    for n in ("n1", "n2"):
        on_node = [
            (cpu, gib)
            for name, (_, where, phase, cpu, gib) in model.items()
            if phase not in ("Succeeded", "Failed") and (where or assumed.get(name, "")) == n
        ]
        requested = {
            "cpu": sum(cpu * 1000 for cpu, _ in on_node),
            "memory": sum(gib * GiB for _, gib in on_node),
        }
        u = _usage(s, n)
        assert u.pods == len(on_node)
        assert {k: v for k, v in u.requested.items() if v} == {k: v for k, v in requested.items() if v}
        assert u.nonzero_milli_cpu == sum(cpu * 1000 or 100 for cpu, _ in on_node)
        assert u.nonzero_memory == sum(gib * GiB or 200 * 1024 * 1024 for _, gib in on_node)


# --------------------------------------------------------------------------- what is kept (memory)


def _managed(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` as the API server returns it: with server-side apply bookkeeping."""
    obj["metadata"]["managedFields"] = [
        {"manager": "kubectl", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}
    ]
    return obj


def test_bound_pod_keeps_its_summary_not_its_object() -> None:
    s = ClusterState()
    s.upsert_node(node("n1"))
    pending = s.upsert_pod(_managed(pod("a", gpus=2, requests={"cpu": "1"}, rv="1")))
    assert pending.raw["spec"]["containers"][0]["name"] == "c"  # schedulable: the whole pod
    assert "managedFields" not in pending.raw["metadata"]
    s.upsert_pod(_managed(pod("a", gpus=2, requests={"cpu": "1"}, rv="2", node_name="n1", phase="Running",
                              claim_name="a-extended-resources-x")))  # fmt: skip
    info = s.pods["uid-a"]
    assert info.obj is None
    with pytest.raises(PodObjectDropped, match="only its summary is kept"):
        _ = info.raw
    # What placement and release read is still there.
    assert (info.node_name, info.claim_name, info.resource_version) == ("n1", "a-extended-resources-x", "2")
    assert _usage(s, "n1").pods == 1
    assert _usage(s, "n1").requested == {"cpu": 1000, GPU: 2}
    # A late event (before the binding) is still recognised as older, without the object.
    s.upsert_pod(pod("a", gpus=2, requests={"cpu": "1"}, rv="1"))
    assert s.pods["uid-a"].node_name == "n1"
    assert _usage(s, "n1").pods == 1
    # And the pod still stops counting when it finishes.
    gen = s.generation
    s.upsert_pod(pod("a", gpus=2, requests={"cpu": "1"}, rv="3", node_name="n1", phase="Succeeded"))
    assert _usage(s, "n1").pods == 0
    assert _usage(s, "n1").requested.get(GPU, 0) == 0
    assert s.generation > gen


def test_release_and_roll_back_decisions_work_from_the_summary() -> None:
    from draxr.core.gc import claims_to_release, claims_to_roll_back

    s = ClusterState()
    s.upsert_pod(pod("a", node_name="n1", phase="Running", claim_name="a-extended-resources-new", rv="5"))
    s.upsert_claim(special_claim("a-extended-resources-old", "a", "uid-a", rv="1", alloc=allocation("n1", "gpu-0")))
    s.upsert_claim(special_claim("a-extended-resources-new", "a", "uid-a", rv="2", alloc=allocation("n1", "gpu-1")))
    assert s.pods["uid-a"].obj is None
    rollback = claims_to_roll_back(s, "draxr", frozenset())
    assert [(a.name, a.reason) for a in rollback] == [
        ("a-extended-resources-old", "pod is bound and uses claim a-extended-resources-new")
    ]
    s.upsert_pod(pod("a", node_name="n1", phase="Failed", claim_name="a-extended-resources-new", rv="6"))
    assert sorted(a.name for a in claims_to_release(s, {"draxr"})) == [
        "a-extended-resources-new",
        "a-extended-resources-old",
    ]


@pytest.mark.parametrize("scheduler", ["draxr", "default-scheduler", "someone-else"])
def test_unbound_pods_of_any_scheduler_keep_their_object(scheduler: str) -> None:
    s = ClusterState()
    info = s.upsert_pod(pod("a", scheduler=scheduler, tolerations=[{"operator": "Exists"}]))
    assert info.obj is not None
    assert info.raw["spec"]["tolerations"] == [{"operator": "Exists"}]


@pytest.mark.parametrize(
    ("changes", "kept"),
    [
        ({}, True),
        ({"node_name": "n1", "phase": "Running"}, False),
        ({"phase": "Failed"}, False),  # finished without ever being bound
        ({"deleting": True}, False),
    ],
)
def test_object_kept_only_while_schedulable(changes: dict[str, Any], kept: bool) -> None:
    deleting = changes.pop("deleting", False)
    p = pod("a", **changes)
    if deleting:
        p["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    info = ClusterState().upsert_pod(p)
    assert (info.obj is not None) is kept
    assert info.schedulable is kept
    # draxr explain asks for the object whatever the pod's state.
    assert ClusterState().upsert_pod(p, keep_object=True).raw["metadata"]["name"] == "a"


def _pods_to_slim() -> list[dict[str, Any]]:
    """Pods that keep only their summary, using every field PodInfo.from_api reads."""
    full = pod("full", gpus=2, requests={"cpu": "250m", "memory": "1Gi"}, node_name="n1", phase="Running",
               priority=100, rv="42", claim_name="full-extended-resources-x", created="2026-03-04T05:06:07Z",
               scheduler="other", overhead={"cpu": "100m"}, resources={"requests": {"memory": "3Gi"}},
               tolerations=[{"operator": "Exists"}], schedulingGates=[{"name": "g"}])  # fmt: skip
    full["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080, "protocol": "UDP"}]
    full["spec"]["initContainers"] = [
        {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}},
        {"name": "init", "resources": {"limits": {"cpu": "4", "example.com/gpu": "3"}},
         "ports": [{"containerPort": 1, "hostPort": 9000, "hostIP": "10.0.0.1"}]},
    ]  # fmt: skip
    full["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    deleting = pod("deleting", gpus=1)
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return [_managed(full), deleting, pod("done", node_name="n2", phase="Succeeded"), pod("failed", phase="Failed")]


@pytest.mark.parametrize("p", _pods_to_slim(), ids=lambda p: p["metadata"]["name"])
def test_slim_pod_gives_the_same_pod_info(p: dict[str, Any]) -> None:
    slim = slim_pod(p)
    assert PodInfo.from_api(slim) == PodInfo.from_api(p)
    assert "tolerations" not in slim["spec"]
    assert "managedFields" not in slim["metadata"]
    if p["metadata"].get("deletionTimestamp"):  # preemption reads a deleting pod's DisruptionTarget
        assert slim["status"].get("conditions") == [
            {k: c[k] for k in ("type", "status", "reason") if k in c} for c in p["status"].get("conditions") or ()
        ] or "conditions" not in p["status"]
    else:
        assert "conditions" not in slim["status"]


def test_slim_pod_keeps_a_schedulable_pod_whole() -> None:
    p = _managed(pod("a", gpus=1, tolerations=[{"operator": "Exists"}]))
    slim = slim_pod(p)
    assert "managedFields" not in slim["metadata"]
    assert "managedFields" in p["metadata"]  # the input is left alone
    assert {**slim, "metadata": {**slim["metadata"], "managedFields": p["metadata"]["managedFields"]}} == p


def test_managed_fields_are_dropped_from_every_stored_object() -> None:
    s = ClusterState()
    n = _managed(node("n1", labels={"zone": "a"}))
    n["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    n["status"]["images"] = [{"names": ["busybox"], "sizeBytes": 1}]
    s.upsert_node(n)
    s.upsert_slice(_managed(gpu_slice("n1", 2)))
    s.upsert_class(_managed(gpu_class()))
    s.upsert_claim(_managed(special_claim("c", "a", "uid-a", rv="1", alloc=allocation("n1", "gpu-0"))))
    raw_node = s.nodes["n1"].raw
    assert "managedFields" not in raw_node["metadata"]
    assert raw_node["metadata"]["labels"]["zone"] == "a"
    assert raw_node["status"] == {"allocatable": n["status"]["allocatable"], "capacity": n["status"]["capacity"]}
    assert all("managedFields" not in sl.raw["metadata"] for sl in s.inventory.all_slices)
    assert "managedFields" not in s.classes[GPU_CLASS]["metadata"]
    assert "managedFields" not in s.claims["ns/c"].object()["metadata"]
    assert s.allocated().allocated_devices == {(DRIVER, "n1", "gpu-0")}  # the devices still count


def test_claim_info_keeps_what_release_reads_and_the_claim() -> None:
    c = special_claim("c", "web", "uid-web", rv="9", alloc=allocation("n1", "gpu-0"), reserved=True, deleting=True)
    info = ClaimInfo.from_api(_managed(json.loads(json.dumps(c))))
    assert (info.key, info.uid, info.resource_version) == ("ns/c", "claim-uid-c", "9")
    assert info.owner == ("web", "uid-web")
    assert (info.deleting, info.allocated, info.reserved) == (True, True, True)
    assert info.finalizers == ("resource.kubernetes.io/delete-protection",)
    assert info.object() == c  # the claim itself, without managedFields, for the release writes
    assert info.object() is not info.object()  # callers may change their copy
    bare = ClaimInfo.from_api(plain_claim("p"))
    assert (bare.owner, bare.finalizers) == (None, ())
    assert (bare.deleting, bare.allocated, bare.reserved) == (False, False, False)


def _at(obj: dict[str, Any], rv: str) -> dict[str, Any]:
    obj["metadata"]["resourceVersion"] = rv
    return obj


def test_the_same_version_delivered_again_changes_nothing() -> None:
    """kopf lists everything again after the initial sync: same resourceVersion, same object."""
    s = ClusterState()
    s.upsert_node(_at(node("n1", cpu="4"), "3"))
    s.upsert_slice(_at(gpu_slice("n1", 2), "4"))
    s.upsert_claim(special_claim("c", "a", "uid-a", rv="5", alloc=allocation("n1", "gpu-0")))
    bound = s.upsert_pod(pod("a", node_name="n1", phase="Running", rv="6", gpus=1))
    pending = s.upsert_pod(pod("b", rv="7", gpus=1))
    gen, inventory_rev, claim, node_info = s.generation, s.inventory.revision, s.claims["ns/c"], s.nodes["n1"]

    s.upsert_node(_managed(_at(node("n1", cpu="4"), "3")))
    s.upsert_slice(_managed(_at(gpu_slice("n1", 2), "4")))
    assert s.upsert_claim(special_claim("c", "a", "uid-a", rv="5", alloc=allocation("n1", "gpu-0")))
    assert s.upsert_pod(pod("a", node_name="n1", phase="Running", rv="6", gpus=1)) is bound
    assert s.upsert_pod(pod("b", rv="7", gpus=1)) is pending
    assert (s.generation, s.inventory.revision) == (gen, inventory_rev)
    assert s.claims["ns/c"] is claim
    assert s.nodes["n1"] is node_info
    assert _usage(s, "n1").pods == 1
    # explain asks for the whole object of a pod of which only the summary is kept: rebuilt.
    assert s.upsert_pod(pod("a", node_name="n1", phase="Running", rv="6", gpus=1), keep_object=True).obj is not None
    # Newer versions are applied as before.
    s.upsert_slice(_at(gpu_slice("n1", 3), "8"))
    assert s.generation > gen
    assert s.inventory.revision > inventory_rev
    s.upsert_node(_at(node("n1", cpu="8"), "9"))
    assert s.nodes["n1"].allocatable["cpu"] == 8000
