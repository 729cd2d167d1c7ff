"""Invariants of the allocator, checked on generated inputs (hypothesis).

* never a device that is already allocated, nor the same device twice (except multi-allocatable
  devices with consumable capacity, whose shares must fit the capacity);
* every picked device satisfies its class selectors and its request selectors;
* shared counters never exceed their counter sets, and a claim is allocated exactly when a
  brute-force search finds devices that fit them;
* "no fit" agrees with a brute-force search on small inputs;

The oracles are written from the rules, not from the port: selectors as Python predicates, counters
by brute force over every choice of devices (both checked against upstream's Go allocator on 400
drawn worlds each when they were written).
* the fast path never changes an answer.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from draxr.core.allocator import (
    Allocated,
    AllocationFatalError,
    Allocator,
    Features,
    Inventory,
    NoFit,
    allocated_state_from_claims,
)
from draxr.core.quantity import Quantity
from draxr_dev.allocator.builders import claim, device, device_class, node, request, slice_
from draxr_dev.allocator.casegen import generate
from draxr_dev.allocator.cases import comparable

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _attr(dev: dict[str, Any], name: str) -> Any:
    a = (dev.get("attributes") or {}).get(name)
    return None if a is None else next(iter(a.values()))


def _numa_or_9(dev: dict[str, Any]) -> int:
    numa = _attr(dev, "numa")
    return 9 if numa is None else int(numa)


# The selectors the worlds draw from, each with its meaning written out in Python: the oracle does not
# evaluate CEL with draxr's own compiler. Every device of these worlds is driver-a's.
CLASS_SELECTORS: dict[str, Callable[[dict[str, Any]], bool]] = {
    "true": lambda d: True,
    'device.attributes["driver-a"].?model.orValue("") == "a"': lambda d: _attr(d, "model") == "a",
    'device.driver == "driver-a"': lambda d: True,
}
REQUEST_SELECTORS: dict[str, Callable[[dict[str, Any]], bool]] = {
    'device.attributes["driver-a"].?numa.orValue(9) <= 1': lambda d: _numa_or_9(d) <= 1,
    '"model" in device.attributes["driver-a"]': lambda d: "model" in (d.get("attributes") or {}),
}
CLASS_EXPRS = list(CLASS_SELECTORS)
REQUEST_EXPRS = list(REQUEST_SELECTORS)


@st.composite
def small_world(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(1, 5))
    devices = []
    for i in range(n):
        attrs: dict[str, Any] = {}
        if draw(st.booleans()):
            attrs["model"] = draw(st.sampled_from(["a", "b"]))
        if draw(st.booleans()):
            attrs["numa"] = draw(st.integers(0, 2))
        fields: dict[str, Any] = {}
        if draw(st.integers(0, 4)) == 0:
            fields["taints"] = [{"key": "k", "effect": "NoSchedule"}]
        devices.append(device(f"d{i}", attributes=attrs, **fields))
    allocated = [d["name"] for d in devices if draw(st.integers(0, 4)) == 0]
    classes = [
        device_class(f"c{i}", e)
        for i, e in enumerate(draw(st.lists(st.sampled_from(CLASS_EXPRS), min_size=1, max_size=2)))
    ]
    requests = []
    for r in range(draw(st.integers(1, 2))):
        sels = tuple(draw(st.lists(st.sampled_from(REQUEST_EXPRS), max_size=1)))
        tol = [{"operator": "Exists"}] if draw(st.integers(0, 3)) == 0 else None
        extra = {"tolerations": tol} if tol else {}
        requests.append(
            request(
                f"r{r}",
                draw(st.sampled_from([c["metadata"]["name"] for c in classes])),
                draw(st.integers(1, 2)),
                selectors=sels,
                **extra,
            )
        )
    constraints = []
    kind = draw(st.sampled_from(["none", "matchAttribute", "distinctAttribute"]))
    if kind != "none":
        constraints.append({kind: f"driver-a/{draw(st.sampled_from(['model', 'numa']))}"})
    return {
        "slices": [slice_("s", devices)],
        "classes": classes,
        "claim": claim("c", *requests, constraints=constraints or None),
        "allocated": allocated,
    }


def _allocated_claim(name: str, devices: Iterable[str]) -> dict[str, Any]:
    """A claim holding these devices of driver-a/pool-1."""
    results = [{"request": "x", "driver": "driver-a", "pool": "pool-1", "device": d} for d in devices]
    return claim(name, allocation={"devices": {"results": results}})


def _run(world: dict[str, Any], fast_path: bool = True) -> Any:
    allocated = [_allocated_claim("old", world["allocated"])]
    inv = Inventory(world["slices"], world["classes"])
    return Allocator(inv, allocated_state_from_claims(allocated), fast_path=fast_path).allocate(
        node(), [world["claim"]]
    )


def _matches(expr: str, dev: dict[str, Any]) -> bool:
    return {**CLASS_SELECTORS, **REQUEST_SELECTORS}[expr](dev)


def _brute_force(world: dict[str, Any]) -> bool:
    """Is there any assignment of distinct free devices to all request slots satisfying everything?"""
    devs = {d["name"]: d for d in world["slices"][0]["spec"]["devices"]}
    classes = {c["metadata"]["name"]: c for c in world["classes"]}
    slots = []
    for r in world["claim"]["spec"]["devices"]["requests"]:
        e = r["exactly"]
        klass = classes[e["deviceClassName"]]
        ok = []
        for name, d in devs.items():
            if name in world["allocated"]:
                continue
            if not all(_matches(s["cel"]["expression"], d) for s in klass["spec"].get("selectors", [])):
                continue
            if not all(_matches(s["cel"]["expression"], d) for s in e.get("selectors", [])):
                continue
            if d.get("taints") and not e.get("tolerations"):
                continue
            ok.append(name)
        slots += [ok] * e["count"]
    constraints = world["claim"]["spec"]["devices"].get("constraints") or []
    for choice in itertools.product(*slots):
        if len(set(choice)) != len(choice):
            continue
        good = True
        for c in constraints:
            kind, fq = next(iter(c.items()))
            values = [_attr(devs[n], fq.split("/")[1]) for n in choice]
            if (
                any(v is None for v in values)
                or (kind == "matchAttribute" and len(set(values)) > 1)
                or (kind == "distinctAttribute" and len(set(values)) != len(values))
            ):
                good = False
        if good:
            return True
    return False


@SETTINGS
@given(small_world())
def test_no_fit_agrees_with_brute_force(world: dict[str, Any]) -> None:
    out = _run(world)
    assert isinstance(out, Allocated | NoFit)
    assert isinstance(out, Allocated) == _brute_force(world)


@SETTINGS
@given(small_world())
def test_picks_are_free_distinct_and_satisfy_selectors(world: dict[str, Any]) -> None:
    out = _run(world)
    if not isinstance(out, Allocated):
        return
    devs = {d["name"]: d for d in world["slices"][0]["spec"]["devices"]}
    classes = {c["metadata"]["name"]: c for c in world["classes"]}
    requests = {r["name"]: r["exactly"] for r in world["claim"]["spec"]["devices"]["requests"]}
    picked = [r["device"] for r in out.results[0]["devices"]["results"]]
    assert len(picked) == len(set(picked))
    assert not set(picked) & set(world["allocated"])
    for r in out.results[0]["devices"]["results"]:
        req = requests[r["request"]]
        dev = devs[r["device"]]
        for s in classes[req["deviceClassName"]]["spec"].get("selectors", []) + req.get("selectors", []):
            assert _matches(s["cel"]["expression"], dev)


@SETTINGS
@given(small_world())
def test_fast_path_never_changes_the_answer(world: dict[str, Any]) -> None:
    fast, slow = _run(world, True), _run(world, False)
    assert type(fast) is type(slow)  # NoFit reasons may differ in wording
    assert getattr(fast, "results", None) == getattr(slow, "results", None)


def test_fast_path_never_changes_the_answer_on_generated_cases() -> None:
    for case in generate(seed=2, scale=0.3):
        outs = []
        for fast in (True, False):
            inv = Inventory(case["slices"], case["classes"])
            features = Features.from_go(case["features"])
            state = allocated_state_from_claims(case["allocatedClaims"], features.consumable_capacity)
            try:
                o = Allocator(inv, state, features, share_id=lambda: "S", fast_path=fast).allocate(
                    case["node"], case["claims"]
                )
                outs.append(comparable({"outcome": type(o).__name__, "results": list(getattr(o, "results", ()))}))
            except AllocationFatalError as exc:
                outs.append({"fatal": exc.kind})
        assert outs[0] == outs[1], case["name"]


# -- counters and shared capacity ---------------------------------------------------------------


@st.composite
def partitioned_world(draw: st.DrawFn) -> dict[str, Any]:
    sets = [
        {"name": f"cs{i}", "counters": {"mem": {"value": str(draw(st.integers(0, 6)))}}}
        for i in range(draw(st.integers(1, 2)))
    ]
    devs = []
    for i in range(draw(st.integers(1, 6))):
        cs = draw(st.sampled_from(sets))["name"]
        use = {"mem": {"value": str(draw(st.integers(1, 4)))}}
        devs.append(device(f"p{i}", consumesCounters=[{"counterSet": cs, "counters": use}]))
    allocated = [d["name"] for d in devs if draw(st.integers(0, 5)) == 0]
    count = draw(st.integers(1, 3))
    return {"sets": sets, "devices": devs, "allocated": allocated, "count": count}


def _counter_use(world: dict[str, Any], names: Iterable[str]) -> dict[str, int]:
    """What the devices ``names`` consume of each counter set."""
    use: dict[str, int] = {}
    devices = {d["name"]: d for d in world["devices"]}
    for name in names:
        for c in devices[name]["consumesCounters"]:
            use[c["counterSet"]] = use.get(c["counterSet"], 0) + int(c["counters"]["mem"]["value"])
    return use


def _fits_counters(world: dict[str, Any], picked: Iterable[str]) -> bool:
    """Upstream's rule (checkAvailableCounters): once a device is picked, every counter set of the pool
    must hold what the allocated and the picked devices consume together; so a set over-committed
    by allocated devices alone blocks every pick in the pool, even of devices that do not use it."""
    total = _counter_use(world, [*world["allocated"], *picked])
    return all(total.get(s["name"], 0) <= int(s["counters"]["mem"]["value"]) for s in world["sets"])


def _counters_feasible(world: dict[str, Any]) -> bool:
    """Brute force: is there any ``count`` free devices that fit the counter sets?"""
    free = [d["name"] for d in world["devices"] if d["name"] not in world["allocated"]]
    return any(_fits_counters(world, c) for c in itertools.combinations(free, world["count"]))


@SETTINGS
@given(partitioned_world())
def test_counters_allocate_exactly_when_some_choice_fits(world: dict[str, Any]) -> None:
    """Allocated exactly when a brute-force search finds free devices that fit the counter sets, and
    then with picks that fit them: never more than a counter set holds, counting what is allocated."""
    slices = [slice_("a", None, count=2, sharedCounters=world["sets"]), slice_("b", world["devices"], count=2)]
    allocated = [_allocated_claim("o", world["allocated"])]
    out = Allocator(Inventory(slices, [device_class("any")]), allocated_state_from_claims(allocated)).allocate(
        node(), [claim("c", request("r", "any", world["count"]))]
    )
    assert isinstance(out, Allocated | NoFit)
    assert isinstance(out, Allocated) == _counters_feasible(world)
    if isinstance(out, Allocated):
        picked = [r["device"] for r in out.results[0]["devices"]["results"]]
        assert len(picked) == len(set(picked)) == world["count"]
        assert not set(picked) & set(world["allocated"])
        assert _fits_counters(world, picked)


@SETTINGS
@given(
    st.lists(st.sampled_from(["256Mi", "512Mi", "1Gi", "2Gi"]), min_size=1, max_size=4),
    st.sampled_from(["1Gi", "2Gi", "3Gi"]),
)
def test_shared_capacity_stays_within_limits(amounts: list[str], total: str) -> None:
    dev = device("shared", allowMultipleAllocations=True, capacity={"memory": total})
    reqs = [request(f"r{i}", "any", capacity={"requests": {"memory": a}}) for i, a in enumerate(amounts)]
    out = Allocator(Inventory([slice_("s", [dev])], [device_class("any")])).allocate(node(), [claim("c", *reqs)])
    fits = sum(Quantity.parse(a).value for a in amounts) <= Quantity.parse(total).value
    assert isinstance(out, Allocated) == fits
    if isinstance(out, Allocated):
        consumed = sum(
            Quantity.parse(r["consumedCapacity"]["memory"]).value for r in out.results[0]["devices"]["results"]
        )
        assert consumed <= Quantity.parse(total).value
