"""ExtendedResourceMapping CRs: overrides, conditions, status; scheduling semantics of a CR mapping
(ordered classes, extra selectors, nodeSelector); capacity per name and node."""

from __future__ import annotations

from typing import Any

from draxr.core.allocator import DEFAULT_FEATURES
from draxr.core.capacity import DEVICE_PLUGIN, DRA, cluster_capacity, summarize
from draxr.core.mappings_crd import conditions, desired_status, overrides, parse_all, status_changed
from draxr.core.placement import Decision, Unschedulable, schedule
from draxr.core.state import ClusterState, PodInfo
from draxr_dev.devcluster import fakedriver
from tests.unit.cluster_builders import GPU, allocation, gpu_class, node, plain_claim, pod

JSON = dict[str, Any]
OLD, NEW = "2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z"


def cr(
    name: str,
    classes: list[str],
    *,
    resource: str = GPU,
    created: str = OLD,
    selectors: list[str] | None = None,
    node_selector: JSON | None = None,
    generation: int = 1,
    status: JSON | None = None,
) -> JSON:
    spec: JSON = {"extendedResourceName": resource, "deviceClassNames": classes}
    if selectors:
        spec["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    if node_selector:
        spec["nodeSelector"] = node_selector
    obj: JSON = {
        "apiVersion": "draxr.io/v1alpha1",
        "kind": "ExtendedResourceMapping",
        "metadata": {"name": name, "creationTimestamp": created, "generation": generation},
        "spec": spec,
    }
    if status is not None:
        obj["status"] = status
    return obj


def by_type(conds: list[JSON]) -> dict[str, JSON]:
    return {c["type"]: c for c in conds}


# --------------------------------------------------------------------------- overrides and conditions


def test_older_cr_wins_the_name_newer_one_reports_conflict() -> None:
    crs = parse_all([cr("newer", ["b"], created=NEW), cr("older", ["a"], created=OLD)])
    [ov] = overrides(crs)
    assert (ov.resource_name, ov.class_names, ov.origin) == (GPU, ("a",), "older")
    newer = by_type(conditions(crs[0], crs, {"a", "b"}))
    assert newer["Conflict"]["status"] == "True"
    assert "'older'" in newer["Conflict"]["message"]
    assert newer["Ready"]["status"] == "False"
    older = by_type(conditions(crs[1], crs, {"a", "b"}))
    assert older["Conflict"]["status"] == "False"
    assert older["Ready"] == {**older["Ready"], "status": "True", "reason": "Serving", "observedGeneration": 1}


def test_invalid_selector_and_missing_class_conditions() -> None:
    [bad] = parse_all([cr("m", ["a", "gone"], selectors=["device.driver ==", "true"], generation=3)])
    c = by_type(conditions(bad, [bad], {"a"}))
    assert c["InvalidSelector"]["status"] == "True"
    assert c["InvalidSelector"]["message"].startswith("selectors[0]: ")
    assert c["DeviceClassNotFound"]["status"] == "True"
    assert "gone" in c["DeviceClassNotFound"]["message"]
    assert c["Ready"]["reason"] == "InvalidSelector"
    assert {x["observedGeneration"] for x in c.values()} == {3}
    # The CR still owns the name (a typo must not silently hand out other devices).
    assert overrides([bad])[0].origin == "m"
    [none] = parse_all([cr("n", ["gone"])])
    assert by_type(conditions(none, [none], set()))["Ready"]["reason"] == "DeviceClassNotFound"


def test_unmatched_device_plugin_ids_are_a_condition_only_where_an_identity_is_declared() -> None:
    [m] = parse_all([cr("m", ["a"])])
    assert "DevicePluginIDsUnmatched" not in by_type(conditions(m, [m], {"a"}))  # no identity
    matched = by_type(conditions(m, [m], {"a"}, []))["DevicePluginIDsUnmatched"]
    assert (matched["status"], matched["reason"]) == ("False", "AllMatched")
    ids = [f"GPU-{i} on n1 matches no device of DeviceClass a" for i in range(7)]
    unmatched = by_type(conditions(m, [m], {"a"}, ids))["DevicePluginIDsUnmatched"]
    assert (unmatched["status"], unmatched["reason"]) == ("True", "Unmatched")
    assert unmatched["message"].startswith("GPU-0 on n1 matches no device of DeviceClass a; GPU-1")
    assert "GPU-5" not in unmatched["message"]
    assert "and 2 more" in unmatched["message"]
    assert by_type(conditions(m, [m], {"a"}, ids))["Ready"]["status"] == "True"  # the name is still served


def test_desired_status_keeps_transition_times_and_detects_changes() -> None:
    [m] = parse_all([cr("m", ["a"])])
    first = desired_status(m, [m], {"a"}, {"total": 4, "allocated": 1, "free": 3, "nodes": 1}, "T1")
    assert all(c["lastTransitionTime"] == "T1" for c in first["conditions"])
    [again] = parse_all([cr("m", ["a"], status=first)])
    second = desired_status(again, [again], {"a"}, dict(first["capacity"]), "T2")
    assert second == first
    assert not status_changed(first, second)
    third = desired_status(again, [again], set(), dict(first["capacity"]), "T3")  # class deleted
    ready = by_type(third["conditions"])["Ready"]
    assert (ready["status"], ready["lastTransitionTime"]) == ("False", "T3")
    assert by_type(third["conditions"])["Conflict"]["lastTransitionTime"] == "T1"
    assert status_changed(first, third)


# --------------------------------------------------------------------------- scheduling semantics


def _class(name: str, model: str, resource: str | None = None) -> JSON:
    return fakedriver.device_class(
        name,
        extended_resource_name=resource,
        extra_selectors=[f'device.attributes["{fakedriver.DRIVER}"].model == "{model}"'],
    )


def _state(**crs: JSON) -> ClusterState:
    """Two nodes; n1 has 2 "small" and 2 "big" devices, n2 has 2 "big" ones."""
    state = ClusterState()
    state.upsert_class(_class("small", "small", GPU))  # also maps the name through the DeviceClass
    state.upsert_class(_class("big", "big"))
    for name, labels in (("n1", {"pool": "a"}), ("n2", {"pool": "b"})):
        state.upsert_node(node(name, labels=labels))
    devs = [fakedriver.device(f"gpu-{i}", model=m, uid=f"n1-{i}") for i, m in enumerate(["small"] * 2 + ["big"] * 2)]
    state.upsert_slice(fakedriver.resource_slice("n1", devs))
    state.upsert_slice(
        fakedriver.resource_slice("n2", [fakedriver.device(f"gpu-{i}", model="big", uid=f"n2-{i}") for i in range(2)])
    )
    state.extended.set_overrides(overrides(parse_all(crs.values())))
    return state


def _schedule(state: ClusterState, p: JSON) -> Decision | Unschedulable:
    state.upsert_pod(p)
    return schedule(PodInfo.from_api(p, keep_object=True), state, features=DEFAULT_FEATURES)


def _pinned(name: str, gpus: int, node_name: str) -> JSON:
    return pod(name, gpus=gpus, nodeSelector={"kubernetes.io/hostname": node_name})


def test_device_class_mapping_keeps_the_plain_claim_shape() -> None:
    d = _schedule(_state(), _pinned("p", 2, "n1"))
    assert isinstance(d, Decision)
    assert [r.to_api() for r in d.requests] == [
        {
            "name": "container-0-request-0",
            "exactly": {"deviceClassName": "small", "allocationMode": "ExactCount", "count": 2},
        }
    ]


def test_cr_beats_device_class_and_falls_back_to_the_next_class() -> None:
    state = _state(m=cr("m", ["small", "big"]))
    first = _schedule(state, _pinned("p1", 2, "n1"))
    assert isinstance(first, Decision)
    assert first.requests[0].device_class_name == "small"
    state.assume_allocation("ns/p1", first.allocation or {})
    second = _schedule(state, _pinned("p2", 2, "n1"))  # no small device left on n1: big ones
    assert isinstance(second, Decision)
    assert second.requests[0].device_class_name == "big"
    assert {r["device"] for r in second.allocation["devices"]["results"]} == {"gpu-2", "gpu-3"}  # type: ignore[index]
    # Only big devices on n2, where "small" never fits.
    third = _schedule(state, _pinned("p3", 1, "n2"))
    assert isinstance(third, Decision)
    assert third.requests[0].device_class_name == "big"


def test_missing_class_in_the_list_is_skipped() -> None:
    d = _schedule(_state(m=cr("m", ["not-there", "big"])), _pinned("p", 1, "n2"))
    assert isinstance(d, Decision)
    assert d.requests[0].device_class_name == "big"


def test_cr_selectors_go_into_the_request() -> None:
    expr = f'device.attributes["{fakedriver.DRIVER}"].uuid == "n1-3"'
    d = _schedule(_state(m=cr("m", ["big"], selectors=[expr])), pod("p", gpus=1))
    assert isinstance(d, Decision)
    assert d.node == "n1"
    assert d.requests[0].to_api()["exactly"]["selectors"] == [{"cel": {"expression": expr}}]
    assert [r["device"] for r in d.allocation["devices"]["results"]] == ["gpu-3"]  # type: ignore[index]


def test_invalid_cr_selector_makes_only_its_pods_unschedulable() -> None:
    state = _state(m=cr("m", ["big"], selectors=["device.driver =="]))
    bad = _schedule(state, pod("bad", gpus=1))
    assert isinstance(bad, Unschedulable)
    assert bad.unresolvable
    assert "ExtendedResourceMapping m for example.com/gpu has an invalid selector" in bad.message
    ok = _schedule(state, pod("ok", resource="deviceclass.resource.kubernetes.io/big", gpus=1))
    assert isinstance(ok, Decision)


def test_node_selector_limits_dra_to_matching_nodes() -> None:
    sel = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["b"]}]}]}
    state = _state(m=cr("m", ["big"], node_selector=sel))
    d = _schedule(state, pod("p", gpus=1))
    assert isinstance(d, Decision)
    assert d.node == "n2"
    no = _schedule(state, _pinned("q", 1, "n1"))
    assert isinstance(no, Unschedulable)
    assert "Insufficient example.com/gpu" in no.message


# --------------------------------------------------------------------------- capacity


def test_capacity_dra_and_device_plugin() -> None:
    state = _state(m=cr("m", ["small", "big"]))
    state.upsert_node(node("dp", extended={GPU: "4"}))
    state.upsert_pod(pod("user", gpus=3, node_name="dp", phase="Running"))
    state.upsert_claim(plain_claim("c", alloc=allocation("n1", "gpu-0", "gpu-3")))
    state.upsert_class(gpu_class("other", "other.com/x"))
    rows = cluster_capacity(state)
    gpu = [(r.node, r.served_by, r.total, r.allocated, r.free) for r in rows if r.resource_name == GPU]
    assert gpu == [("n1", DRA, 4, 2, 2), ("n2", DRA, 2, 0, 2), ("dp", DEVICE_PLUGIN, 4, 3, 1)]
    s = summarize(r for r in rows if r.resource_name == GPU and r.served_by == DRA)
    assert s.to_status() == {"total": 6, "allocated": 2, "free": 4, "nodes": 2}
    # A name mapped only through a DeviceClass gets the same summary.
    assert [(r.node, r.total, r.allocated) for r in rows if r.resource_name == "other.com/x"] == [
        ("n1", 4, 2),
        ("n2", 2, 0),
    ]
    assert not any(r.resource_name.startswith("deviceclass.resource.kubernetes.io/") for r in rows)
    implicit = cluster_capacity(state, include_implicit=True)
    assert any(r.resource_name == "deviceclass.resource.kubernetes.io/big" for r in implicit)
