"""The allocator's fast path (one claim, one plain ExactCount request: `_Run._fast_allocate`) gives
exactly the general path's answer: the same devices in the same order, the same NoFit reasons,
node failures and fatal errors (kind and message).

Worlds are drawn around the fast path's preconditions and the checks its loop makes: several pools
(incomplete, invalid), per-device node selection, taints and tolerations, binding conditions,
counters, consumable capacity and multi-allocatable devices, class selectors that raise on some
devices, classes sharing selectors (they share cached candidates), allocated devices, feature
switches; and now and then something that must send the claim to the general path (request
selectors, admin access, All, subrequests, capacity requests, constraints, a second claim).
The reference is the same allocator with the fast path switched off.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from draxr.core.allocator import (
    Allocated,
    AllocationFatalError,
    AllocationTracker,
    Allocator,
    Features,
    Inventory,
    allocated_state_from_claims,
)
from draxr.core.allocator import allocator as allocator_module
from draxr_dev.allocator.builders import claim, device, device_class, node, request, slice_, subrequest

CLASS_SELECTORS = [
    "true",
    'device.driver == "driver-a"',
    'device.attributes["driver-a"].model == "a"',  # a CEL runtime error on devices without a model
    'device.attributes["driver-a"].?model.orValue("") != "b"',
]


def _versioned(obj: dict[str, Any], rv: str = "1") -> dict[str, Any]:
    obj["metadata"]["resourceVersion"] = rv
    return obj


def _device(r: random.Random, name: str, counter_sets: list[str], per_device: bool) -> dict[str, Any]:
    attrs: dict[str, Any] = {}
    if r.random() < 0.8:
        attrs["model"] = r.choice("ab")
    if r.random() < 0.03:  # converting the device fails: every selector fails on it
        attrs["v"] = r.choice([{"version": "1.2"}, {"int": 2**63}, {}])
    fields: dict[str, Any] = {}
    if r.random() < 0.2:
        taint = {"key": "k", "effect": r.choice(["NoSchedule", "NoExecute", "PreferNoSchedule", "None"])}
        if r.random() < 0.5:
            taint["value"] = "v"
        fields["taints"] = [taint]
    if r.random() < 0.1:
        fields["bindingConditions"] = ["ready"]
        fields["bindsToNode"] = True
    if r.random() < 0.1:
        fields["allowMultipleAllocations"] = True
    if r.random() < 0.2:
        fields["capacity"] = {
            "mem": r.choice(
                [
                    "1Gi",
                    "-1",
                    {"value": "2Gi", "requestPolicy": {"default": "1Gi"}},
                    {"value": "1Gi", "requestPolicy": {"default": "2Gi"}},
                ]
            )
        }
    if counter_sets and r.random() < 0.3:
        fields["consumesCounters"] = [{"counterSet": r.choice(counter_sets), "counters": {"c": {"value": "1"}}}]
    if per_device:
        choice = r.random()
        if choice < 0.5:
            fields["nodeName"] = r.choice(["node-1", "node-2"])
        elif choice < 0.8:
            fields["allNodes"] = True
        else:
            fields["nodeSelector"] = {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]}]
            }
    return device(name, attributes=attrs, **fields)


def _slices(r: random.Random, versioned: bool) -> list[dict[str, Any]]:
    out = []
    for p in range(r.randint(1, 2)):
        pool = f"pool-{p}"
        n_slices = r.randint(1, 2)
        count = n_slices + (1 if r.random() < 0.15 else 0)  # sometimes incomplete
        duplicate = r.random() < 0.05  # an invalid pool
        for s in range(n_slices):
            per_device = r.random() < 0.2
            sets: list[dict[str, Any]] = []
            if r.random() < 0.3:
                sets = [{"name": "cs", "counters": {"c": {"value": str(r.randint(0, 2))}}}]
            names = [f"d{p}{s}{i}" for i in range(r.randint(0, 4))]
            if duplicate and names:
                names.append(names[0])
            devices = [_device(r, n, [c["name"] for c in sets], per_device) for n in names]
            spec: dict[str, Any] = {"sharedCounters": sets} if sets else {}
            if per_device:
                spec["perDeviceNodeSelection"] = True
            sl = slice_(f"s{p}{s}", devices, pool=pool, count=count, node_name=None if per_device else "node-1", **spec)
            out.append(_versioned(sl, "1") if versioned else sl)
    return out


def _classes(r: random.Random, versioned: bool) -> list[dict[str, Any]]:
    first = r.sample(CLASS_SELECTORS, r.randint(0, 2))
    second = list(first) if r.random() < 0.5 else r.sample(CLASS_SELECTORS, r.randint(0, 2))
    config = [{"opaque": {"driver": "driver-a", "parameters": {"c": 1}}}]
    classes = [device_class("c0", *first), device_class("c1", *second, config=config)]
    return [_versioned(c) for c in classes] if versioned else classes


def _request(r: random.Random) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    if r.random() < 0.3:
        fields["tolerations"] = [
            r.choice([{"operator": "Exists"}, {"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"}])
        ]
    cls = r.choice(["c0", "c0", "c1", "missing"]) if r.random() < 0.1 else r.choice(["c0", "c1"])
    req = request("r", cls, r.choice([0, 1, 1, 1, 2, 2, 3]), **fields)
    unusual = r.random()
    if unusual < 0.04:
        req["exactly"]["selectors"] = [
            {"cel": {"expression": 'device.attributes["driver-a"].?model.orValue("") == "a"'}}
        ]
    elif unusual < 0.06:
        req["exactly"]["adminAccess"] = True
    elif unusual < 0.08:
        req["exactly"] = {"deviceClassName": cls, "allocationMode": "All"}
    elif unusual < 0.10:
        req = {"name": "r", "firstAvailable": [subrequest("s0", cls, 2), subrequest("s1", cls, 1)]}
    elif unusual < 0.12:
        req["exactly"]["capacity"] = {"requests": {"mem": "1Gi"}}
    elif unusual < 0.13:
        req["exactly"]["count"] = 33  # over the claim limit
    return req


def draw_world(seed: int) -> dict[str, Any]:
    r = random.Random(seed)
    versioned = r.random() < 0.7
    slices = _slices(r, versioned)
    names = [(d["name"], s["spec"]["pool"]["name"]) for s in slices for d in s["spec"].get("devices") or ()]
    allocated = [n for n in names if r.random() < 0.3]
    constraints = [{"matchAttribute": "driver-a/model"}] if r.random() < 0.05 else None
    claims = [claim("c", _request(r), constraints=constraints)]
    if r.random() < 0.05:
        claims.append(claim("c2", request("r", "c0", 1)))
    features = Features(
        consumable_capacity=r.random() < 0.7,
        device_taints=r.random() < 0.8,
        partitionable_devices=r.random() < 0.7,
        device_binding_and_status=r.random() < 0.7,
    )
    return {
        "slices": slices,
        "classes": _classes(r, versioned),
        "claims": claims,
        "allocated": allocated,
        "features": features,
        "node": node("node-1", zone=r.choice(["z1", "z2"])),
    }


def _allocated_claim(devices: list[tuple[str, str]]) -> dict[str, Any]:
    results = [{"request": "x", "driver": "driver-a", "pool": p, "device": d} for d, p in devices]
    return claim("old", allocation={"devices": {"results": results}})


@contextmanager
def _general_path_only() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(allocator_module._Run, "_fast_allocate", lambda self: None)
        yield


def _outcome(alloc: Allocator, world: dict[str, Any]) -> Any:
    try:
        out = alloc.allocate(world["node"], world["claims"])
    except AllocationFatalError as exc:
        return ("fatal", exc.kind, str(exc))
    return (type(out).__name__, getattr(out, "results", None), getattr(out, "reason", None))


def _allocator(world: dict[str, Any]) -> Allocator:
    features: Features = world["features"]
    state = allocated_state_from_claims([_allocated_claim(world["allocated"])], features.consumable_capacity)
    return Allocator(Inventory(world["slices"], world["classes"]), state, features, share_id=lambda: "S")


def _both(world: dict[str, Any]) -> tuple[Any, Any, int]:
    fast = _allocator(world)
    got = _outcome(fast, world)
    with _general_path_only():
        want = _outcome(_allocator(world), world)
    return got, want, fast.stats.fast_allocations


def test_fast_path_agrees_with_the_general_path_on_drawn_worlds() -> None:
    answered = allocated = 0
    for seed in range(800):
        world = draw_world(seed)
        got, want, fast = _both(world)
        assert got == want, seed
        answered += fast
        allocated += fast and got[0] == "Allocated"
    # The worlds reach the fast path often, and it allocates in many of them (not only NoFit).
    assert answered >= 300, answered
    assert allocated >= 100, allocated


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**32))
def test_fast_path_agrees_with_the_general_path(seed: int) -> None:
    got, want, _ = _both(draw_world(seed))
    assert got == want


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32), st.lists(st.sampled_from(["assume", "forget", "class", "slice"]), min_size=2, max_size=8))
def test_fast_path_agrees_across_changes(seed: int, steps: list[str]) -> None:
    """One inventory and tracker across allocations and changes (cached candidates shared between
    classes, invalidated by slice and class changes), against a fresh general-path allocator each time."""
    world = draw_world(seed)
    features = world["features"]
    r = random.Random(seed)
    inv = Inventory(world["slices"], world["classes"])
    tracker = AllocationTracker(features.consumable_capacity)
    tracker.assume("old", _allocated_claim(world["allocated"])["status"]["allocation"])
    for i, step in enumerate(steps):
        world["claims"] = [claim("c", request("r", r.choice(["c0", "c1"]), r.choice([1, 2])))]
        fast = Allocator(inv, tracker.snapshot(), features, share_id=lambda: "S")
        got = _outcome(fast, world)
        with _general_path_only():
            fresh = Inventory(world["slices"], world["classes"])
            want = _outcome(Allocator(fresh, tracker.snapshot(), features, share_id=lambda: "S"), world)
        assert got == want, (i, step)
        if step == "assume" and got[0] == "Allocated":
            tracker.assume(f"a{i}", got[1][0])
        elif step == "forget":
            tracker.forget("old")
        elif step == "class":
            name = r.choice(["c0", "c1"])
            sels = r.sample(CLASS_SELECTORS, r.randint(0, 2))
            updated = _versioned(device_class(name, *sels), str(i + 2))
            world["classes"] = [c for c in world["classes"] if c["metadata"]["name"] != name] + [updated]
            inv.upsert_class(updated)
        elif step == "slice":
            new = _slices(r, True)
            for sl in world["slices"]:
                inv.remove_slice(sl["metadata"]["name"])
            for sl in new:
                sl["metadata"]["resourceVersion"] = str(i + 2)
                inv.upsert_slice(sl)
            world["slices"] = new


def test_plain_request_takes_the_fast_path_and_picks_in_pool_order() -> None:
    slices = [
        _versioned(slice_("b", [device("b0"), device("b1")], pool="pool-b")),
        _versioned(slice_("a", [device("a0", taints=[{"key": "k", "effect": "NoSchedule"}]), device("a1")])),
    ]
    world = {
        "slices": slices,
        "classes": [_versioned(device_class("c0", 'device.driver == "driver-a"'))],
        "claims": [claim("c", request("r", "c0", 2))],
        "allocated": [("a1", "pool-1")],
        "features": Features(),
        "node": node(),
    }
    got, want, fast = _both(world)
    assert fast == 1
    assert got == want
    assert [r["device"] for r in got[1][0]["devices"]["results"]] == ["b0", "b1"]


def test_a_device_that_does_not_convert_fails_even_a_driver_selector() -> None:
    """Upstream converts the whole device before evaluating any selector: a bad attribute fails
    `device.driver == ...` too (a shortcut that skipped the conversion gave 4 differential mismatches)."""
    bad = device("d1", attributes={"v": {"version": "1.2"}})
    world = {
        "slices": [_versioned(slice_("s", [device("d0"), bad]))],
        "classes": [_versioned(device_class("c0", 'device.driver == "driver-a"'))],
        "claims": [claim("c", request("r", "c0", 2))],
        "allocated": [],
        "features": Features(),
        "node": node(),
    }
    got, want, fast = _both(world)
    assert fast == 0
    assert got == want
    assert got[0] == "fatal"
    assert "attribute driver-a/v: parse semantic version" in got[2]


def test_cached_candidates_are_shared_by_classes_with_the_same_selectors_only() -> None:
    model_a = 'device.attributes["driver-a"].model == "a"'
    classes = [
        _versioned(device_class("any", "true")),
        _versioned(device_class("a", model_a)),
        _versioned(device_class("also-a", model_a, config=[{"opaque": {"driver": "driver-a", "parameters": {}}}])),
    ]
    slices = [
        _versioned(slice_("s", [device("d0", attributes={"model": "b"}), device("d1", attributes={"model": "a"})]))
    ]
    inv = Inventory(slices, classes)

    def pick(class_name: str) -> list[str]:
        out = Allocator(inv).allocate(node(), [claim("c", request("r", class_name, 1))])
        assert isinstance(out, Allocated)
        return [r["device"] for r in out.results[0]["devices"]["results"]]

    assert pick("any") == ["d0"]
    assert pick("a") == ["d1"]
    assert pick("also-a") == ["d1"]
    assert len(inv.class_candidates) == 2  # "a" and "also-a" share one entry
