"""DeviceTaintRules on the devices the allocator sees, as kube-scheduler 1.37's slice tracker applies
them (dynamic-resource-allocation v0.37.2 resourceslice/tracker applyPatches): the selector by
driver, pool and device, the effects, a tolerating request, and the inventory kept patched while
slices and rules come, change and go."""

from __future__ import annotations

from typing import Any

import pytest

from draxr.core.allocator import Allocated, Allocator, Inventory, NoFit
from draxr.core.allocator.model import parse_slice
from draxr.core.allocator.taint_rules import apply_taint_rules, parse_taint_rule
from draxr.core.requeue import Change
from draxr.core.state import ClusterState
from draxr_dev.allocator.builders import claim, device, device_class, node, request, slice_

JSON = dict[str, Any]
BROKEN = ("example.com/broken", "", "NoSchedule")
A0, A1, B0 = ("driver-a", "pool-1", "d0"), ("driver-a", "pool-1", "d1"), ("driver-b", "pool-1", "d0")


def rule(name: str, effect: str = "NoSchedule", key: str = "example.com/broken", **selector: str) -> JSON:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name},
        "spec": {"deviceSelector": selector, "taint": {"key": key, "effect": effect}},
    }


def two_slices() -> list[JSON]:
    """driver-a/pool-1 (d0, d1) and driver-b/pool-1 (d0)."""
    return [
        slice_("a", [device("d0"), device("d1")], driver="driver-a", pool="pool-1"),
        slice_("b", [device("d0")], driver="driver-b", pool="pool-1"),
    ]


def taints(inv: Inventory) -> dict[tuple[str, str, str], tuple[tuple[str, str, str], ...]]:
    return {d.id: d.taints for s in inv.all_slices for d in s.devices}


# ---- the selector -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("selector", "tainted"),
    [
        ({}, {A0, A1, B0}),
        ({"driver": "driver-a"}, {A0, A1}),
        ({"pool": "pool-1"}, {A0, A1, B0}),
        ({"pool": "pool-2"}, set()),
        ({"device": "d0"}, {A0, B0}),
        ({"driver": "driver-b", "device": "d0"}, {B0}),
        ({"driver": "driver-a", "pool": "pool-1", "device": "d1"}, {A1}),
        ({"driver": "driver-a", "pool": "pool-1", "device": "d9"}, set()),
        ({"driver": "*"}, set()),  # plain equality: no wildcard in the selector itself
    ],
)
def test_the_selector_picks_devices_by_driver_pool_and_device(selector: JSON, tainted: set[Any]) -> None:
    inv = Inventory(two_slices())
    inv.upsert_taint_rule(rule("r", **selector))
    assert {d for d, t in taints(inv).items() if t} == tainted
    assert all(t == (BROKEN,) for t in taints(inv).values() if t)


def test_a_rule_without_selector_selects_nothing() -> None:
    raw = rule("r")
    del raw["spec"]["deviceSelector"]
    assert parse_taint_rule(raw) is None
    inv = Inventory(two_slices())
    assert inv.upsert_taint_rule(raw) is False
    assert not any(taints(inv).values())


def test_rule_taints_come_after_the_drivers_own_and_the_slice_is_copied_only_when_selected() -> None:
    own = {"key": "driver.example.com/hot", "value": "1", "effect": "None"}
    info = parse_slice(slice_("a", [device("d0", taints=[own]), device("d1")]))
    r = parse_taint_rule(rule("r", device="d0"))
    assert r is not None
    patched = apply_taint_rules(info, [r])
    assert patched.devices[0].taints == (("driver.example.com/hot", "1", "None"), BROKEN)
    assert patched.devices[1] is info.devices[1]
    assert info.devices[0].taints == (("driver.example.com/hot", "1", "None"),)  # the parsed slice kept
    elsewhere = parse_taint_rule(rule("r", pool="elsewhere"))
    assert elsewhere is not None
    assert apply_taint_rules(info, [elsewhere]) is info


# ---- the inventory: slices and rules in any order -------------------------------------------------


def test_slices_and_rules_in_any_order_give_the_same_taints() -> None:
    first = Inventory(two_slices())
    first.upsert_taint_rule(rule("r1", device="d0"))
    first.upsert_taint_rule(rule("r2", effect="NoExecute", key="k2", driver="driver-a"))
    second = Inventory()
    second.upsert_taint_rule(rule("r2", effect="NoExecute", key="k2", driver="driver-a"))
    second.upsert_taint_rule(rule("r1", device="d0"))
    for s in two_slices():
        second.upsert_slice(s)
    assert taints(first) == taints(second)
    assert taints(first)[A0] == (BROKEN, ("k2", "", "NoExecute"))


def test_a_slice_updated_keeps_the_rules_taints_and_a_rule_gone_takes_them_away() -> None:
    inv = Inventory(two_slices())
    assert inv.upsert_taint_rule(rule("r", driver="driver-a", device="d1")) is True
    inv.upsert_slice(slice_("a", [device("d0"), device("d1"), device("d2")], driver="driver-a", pool="pool-1"))
    assert taints(inv)[("driver-a", "pool-1", "d1")] == (BROKEN,)
    assert taints(inv)[("driver-a", "pool-1", "d2")] == ()
    assert inv.remove_taint_rule("r") is True
    assert not any(taints(inv).values())
    assert inv.remove_taint_rule("r") is False


def test_a_rule_changed_moves_its_taint_and_says_whether_any_device_changed() -> None:
    inv = Inventory(two_slices())
    assert inv.upsert_taint_rule(rule("r", driver="driver-a", device="d0")) is True
    assert inv.upsert_taint_rule(rule("r", driver="driver-a", device="d0")) is False  # delivered again
    assert inv.upsert_taint_rule(rule("r", driver="driver-a", device="d1")) is True
    assert {d for d, t in taints(inv).items() if t} == {A1}
    assert inv.upsert_taint_rule(rule("other", pool="pool-9")) is False  # selects no device


# ---- what the allocator makes of them ------------------------------------------------------------


def pick(inv: Inventory, req: JSON) -> list[str] | None:
    out = Allocator(inv, None).allocate(node(), [claim("c", req)])
    if isinstance(out, NoFit):
        return None
    assert isinstance(out, Allocated)
    return [r["device"] for r in out.results[0]["devices"]["results"]]


def one_device() -> Inventory:
    return Inventory([slice_("s", [device("d0")])], [device_class("gpu")])


@pytest.mark.parametrize(("effect", "allocated"), [("NoSchedule", None), ("NoExecute", None), ("None", ["d0"])])
def test_the_effect_decides_whether_a_rule_keeps_the_device_from_a_request(
    effect: str, allocated: list[str] | None
) -> None:
    inv = one_device()
    assert pick(inv, request("r", "gpu")) == ["d0"]
    inv.upsert_taint_rule(rule("r", effect=effect, driver="driver-a"))
    assert pick(inv, request("r", "gpu")) == allocated
    inv.remove_taint_rule("r")
    assert pick(inv, request("r", "gpu")) == ["d0"]


@pytest.mark.parametrize(
    ("toleration", "allocated"),
    [
        ({"key": "example.com/broken", "operator": "Exists"}, ["d0"]),
        ({"key": "example.com/broken", "operator": "Exists", "effect": "NoSchedule"}, ["d0"]),
        ({"key": "example.com/broken", "operator": "Exists", "effect": "NoExecute"}, None),
        ({"key": "example.com/other", "operator": "Exists"}, None),
        ({"operator": "Exists"}, ["d0"]),
    ],
)
def test_a_request_that_tolerates_the_rules_taint_gets_the_device(
    toleration: JSON, allocated: list[str] | None
) -> None:
    inv = one_device()
    inv.upsert_taint_rule(rule("r", device="d0"))
    assert pick(inv, request("r", "gpu", tolerations=[toleration])) == allocated


def test_the_cluster_state_records_a_slice_change_only_when_a_devices_taints_change() -> None:
    state = ClusterState()
    state.upsert_slice(slice_("s", [device("d0")]))
    before = state.generation
    state.upsert_taint_rule(rule("far", pool="pool-9"))
    assert state.generation == before
    state.upsert_taint_rule(rule("near", device="d0"))
    assert state.generation > before
    assert Change.SLICE in state.changes.since(before)
    before = state.generation
    state.remove_taint_rule("far")
    assert state.generation == before
    state.remove_taint_rule("near")
    assert Change.SLICE in state.changes.since(before)
