"""Random allocator cases (see cases.py for the format), for differential tests against upstream Go.

tests/unit/test_allocator_golden.py holds upstream's answers for fixed seeds: changing what this
module generates invalidates them (regenerate with the Go harness, see that file).

Small name spaces on purpose (2 drivers, 3 pools, 2 nodes, a handful of devices) so that
collisions, shared pools, generations, invalid pools and backtracking actually happen.
Deterministic for a given seed.
"""

from __future__ import annotations

import random
from typing import Any

__all__ = ["generate_case"]

DRIVERS = ("driver-a", "driver-b")
POOLS = ("pool-1", "pool-2", "pool-3")
NODES = ("node-1", "node-2")
MODELS = ("a100", "h100", "l4")
CLASS_EXPRS = (
    'device.driver == "driver-a"',
    'device.driver == "driver-b"',
    'device.driver == "driver-a"',
    'device.driver == "driver-b"',
    "true",
    '"model" in device.attributes["{d}"] && device.attributes["{d}"].model == "a100"',
    'device.attributes["{d}"].?model.orValue("") != "l4"',
    'device.attributes["{d}"].model != "l4"',  # a runtime error on devices without "model"
)
REQUEST_EXPRS = (
    'device.attributes["{d}"].?numa.orValue(0) == 0',
    'device.attributes["{d}"].numa == 0',  # a runtime error without "numa"
    '!("numa" in device.attributes["{d}"]) || device.attributes["{d}"].numa >= 1',
    'device.capacity["{d}"].memory.compareTo(quantity("2Gi")) >= 0',
    '"memory" in device.capacity["{d}"] && device.capacity["{d}"].memory.isGreaterThan(quantity("1Gi"))',
    '"ver" in device.attributes["{d}"] && device.attributes["{d}"].ver.isGreaterThan(semver("1.0.0"))',
    "device.allowMultipleAllocations",
    "!device.allowMultipleAllocations",
)
QUANTITIES = ("1Gi", "2Gi", "3Gi", "4Gi", "1536Mi", "512Mi", "100m", "1", "2", "4", "8", "10")


def _maybe(r: random.Random, p: float) -> bool:
    return r.random() < p


def _node_selection(r: random.Random, node: str) -> dict[str, Any]:
    kind = r.choices(["nodeName", "allNodes", "selector", "perDevice"], weights=[6, 2, 2, 1])[0]
    if kind == "nodeName":
        return {"nodeName": node if _maybe(r, 0.75) else r.choice(NODES)}
    if kind == "allNodes":
        return {"allNodes": True}
    if kind == "selector":
        op = r.choice(["In", "NotIn", "Exists"])
        expr: dict[str, Any] = {"key": "region", "operator": op}
        if op != "Exists":
            expr["values"] = [r.choice(["r1", "r2"])]
        term: dict[str, Any] = {"matchExpressions": [expr]}
        if _maybe(r, 0.2):
            term["matchFields"] = [{"key": "metadata.name", "operator": "In", "values": [r.choice(NODES)]}]
        return {"nodeSelector": {"nodeSelectorTerms": [term]}}
    return {"perDeviceNodeSelection": True}


def _device(r: random.Random, name: str, driver: str, per_device: bool, counter_sets: list[dict[str, Any]]) -> Any:
    d: dict[str, Any] = {"name": name}
    attrs: dict[str, Any] = {}
    if _maybe(r, 0.8):
        key = "model" if _maybe(r, 0.7) else f"{driver}/model"
        attrs[key] = {"string": r.choice(MODELS)}
    if _maybe(r, 0.6):
        attrs["numa"] = {"int": r.randint(0, 2)}
    if _maybe(r, 0.3):
        attrs["ver"] = {"version": r.choice(["1.0.0", "1.2.3", "2.0.0"])}
    if _maybe(r, 0.3):
        attrs["fast"] = {"bool": r.choice([True, False])}
    if attrs:
        d["attributes"] = attrs
    if _maybe(r, 0.5):
        cap: dict[str, Any] = {"value": r.choice(QUANTITIES[:6])}
        if _maybe(r, 0.3):
            kind = r.choice(["range", "values", "default", "fractional"])
            if kind == "fractional":
                cap["value"] = r.choice(["2", "1500m"])
                cap["requestPolicy"] = {"default": "500m", "validRange": {"min": "250m", "step": "250m", "max": "1"}}
            elif kind == "range":
                cap["requestPolicy"] = {
                    "default": "1Gi",
                    "validRange": {"min": "512Mi", **({"step": "512Mi"} if _maybe(r, 0.6) else {})},
                }
                if _maybe(r, 0.4):
                    cap["requestPolicy"]["validRange"]["max"] = "2Gi"
            elif kind == "values":
                cap["requestPolicy"] = {"default": "1Gi", "validValues": ["1Gi", "2Gi"]}
            else:
                cap["requestPolicy"] = {"default": "512Mi"}
        d["capacity"] = {"memory": cap}
    if _maybe(r, 0.25):
        d["allowMultipleAllocations"] = True
    if _maybe(r, 0.2):
        d["taints"] = [
            {
                "key": r.choice(["k1", "k2"]),
                "value": r.choice(["", "v"]),
                "effect": r.choice(["NoSchedule", "None", "NoExecute"]),
            }
        ]
    if counter_sets and _maybe(r, 0.6):
        cs = r.choice(counter_sets)
        counter = r.choice(list(cs["counters"]))
        d["consumesCounters"] = [
            {"counterSet": cs["name"], "counters": {counter: {"value": r.choice(["1", "2", "4"])}}}
        ]
        if _maybe(r, 0.05):
            d["consumesCounters"][0]["counterSet"] = "missing-set"
    if _maybe(r, 0.05):
        d["bindingConditions"] = ["ready"]
        d["bindingFailureConditions"] = ["failed"]
    if _maybe(r, 0.05):
        d["bindsToNode"] = True
    if per_device:
        sel = r.choice(["nodeName", "allNodes", "selector"])
        if sel == "nodeName":
            d["nodeName"] = r.choice(NODES)
        elif sel == "allNodes":
            d["allNodes"] = True
        else:
            d["nodeSelector"] = {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "region", "operator": "In", "values": ["r1"]}]}]
            }
    return d


def _slices(r: random.Random, node: str, big: bool) -> list[dict[str, Any]]:
    slices: list[dict[str, Any]] = []
    n_pools = r.randint(1, 4)
    used: set[tuple[str, str]] = set()
    for _ in range(n_pools):
        driver, pool = r.choice(DRIVERS), r.choice(POOLS)
        if (driver, pool) in used:
            continue
        used.add((driver, pool))
        generation = r.randint(1, 2)
        n_slices = r.choices([1, 2, 3], weights=[6, 3, 1])[0]
        count = n_slices if not _maybe(r, 0.1) else n_slices + 1
        selection = _node_selection(r, node)
        counter_sets: list[dict[str, Any]] = []
        with_counters = _maybe(r, 0.25)
        names = iter(f"dev-{i}" for i in range(40))
        for si in range(n_slices):
            spec: dict[str, Any] = {
                "driver": driver,
                "pool": {"name": pool, "generation": generation, "resourceSliceCount": count},
            }
            if with_counters and si == 0 and n_slices > 1:
                counter_sets = [
                    {
                        "name": f"cs-{k}",
                        "counters": {"mem": {"value": r.choice(["2", "4", "6"])}, "cores": {"value": "4"}},
                    }
                    for k in range(r.randint(1, 2))
                ]
                spec["sharedCounters"] = counter_sets
                spec["nodeName" if "nodeName" in selection else "allNodes"] = selection.get("nodeName", True)
            else:
                this_sel = selection if _maybe(r, 0.85) else _node_selection(r, node)
                spec.update(this_sel)
                per_device = "perDeviceNodeSelection" in this_sel
                devices = [
                    _device(r, next(names), driver, per_device, counter_sets)
                    for _ in range(r.randint(0, 8 if big else 4))
                ]
                if devices and _maybe(r, 0.04):
                    devices.append(dict(devices[0]))  # duplicate device name: invalid pool
                spec["devices"] = devices
            slices.append({"metadata": {"name": f"{driver}-{pool}-{generation}-{si}"}, "spec": spec})
        if _maybe(r, 0.1):
            # An older generation lying around.
            slices.append(
                {
                    "metadata": {"name": f"{driver}-{pool}-old"},
                    "spec": {
                        "driver": driver,
                        "pool": {"name": pool, "generation": generation - 1, "resourceSliceCount": 1},
                        "nodeName": r.choice(NODES),
                        "devices": [{"name": "dev-old"}],
                    },
                }
            )
    r.shuffle(slices)
    return slices


def _selectors(r: random.Random, exprs: tuple[str, ...], p: float) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    while _maybe(r, p) and len(out) < 2:
        out.append({"cel": {"expression": r.choice(exprs).replace("{d}", r.choice(DRIVERS))}})
    return out


def _exact(r: random.Random, classes: list[str], admin_ok: bool) -> dict[str, Any]:
    e: dict[str, Any] = {"deviceClassName": r.choice(classes)}
    if _maybe(r, 0.08):
        e["allocationMode"] = "All"
    else:
        e["allocationMode"] = "ExactCount"
        e["count"] = r.choices([1, 2, 3], weights=[6, 3, 1])[0]
    sels = _selectors(r, REQUEST_EXPRS, 0.25)
    if sels:
        e["selectors"] = sels
    if admin_ok and _maybe(r, 0.08):
        e["adminAccess"] = True
    if _maybe(r, 0.2):
        e["tolerations"] = [
            {"key": r.choice(["k1", "k2", ""]), "operator": r.choice(["Exists", "Equal"]), "value": "v"}
        ]
        if _maybe(r, 0.5):
            e["tolerations"][0]["effect"] = r.choice(["NoSchedule", "NoExecute"])
    if _maybe(r, 0.15):
        e["capacity"] = {"requests": {"memory": r.choice(["256Mi", "512Mi", "1Gi", "1536Mi", "3Gi", "300m", "1"])}}
    if e.get("count") and _maybe(r, 0.02):
        e["count"] = r.choice([17, 33])  # the 32-device limit
    return e


def _claim(r: random.Random, name: str, classes: list[str]) -> dict[str, Any]:
    requests = []
    for i in range(r.choices([1, 2, 3], weights=[5, 3, 1])[0]):
        req: dict[str, Any] = {"name": f"req-{i}"}
        if _maybe(r, 0.2):
            req["firstAvailable"] = [{"name": f"sub-{j}", **_exact(r, classes, False)} for j in range(r.randint(1, 3))]
        else:
            req["exactly"] = _exact(r, classes, True)
        requests.append(req)
    devices: dict[str, Any] = {"requests": requests}
    constraints = []
    if _maybe(r, 0.3):
        c: dict[str, Any] = {}
        attr = r.choice(["model", "numa", "ver", "fast"])
        domain = r.choice(DRIVERS)
        if _maybe(r, 0.5):
            c["matchAttribute"] = f"{domain}/{attr}"
        else:
            c["distinctAttribute"] = f"{domain}/{attr}"
        if _maybe(r, 0.4):
            names = [q["name"] for q in requests]
            pick = r.choice(names)
            sub = next((q for q in requests if q["name"] == pick and "firstAvailable" in q), None)
            if sub is not None and _maybe(r, 0.5):
                pick = f"{pick}/{sub['firstAvailable'][0]['name']}"
            c["requests"] = [pick]
        constraints.append(c)
    if constraints:
        devices["constraints"] = constraints
    if _maybe(r, 0.3):
        cfg: dict[str, Any] = {"opaque": {"driver": r.choice(DRIVERS), "parameters": {"claim": name}}}
        if _maybe(r, 0.6):
            cfg["requests"] = [r.choice([q["name"] for q in requests])]
        devices["config"] = [cfg]
    return {"metadata": {"name": name, "namespace": "default"}, "spec": {"devices": devices}}


def _allocated_claims(r: random.Random, slices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    devices = [
        (s["spec"]["driver"], s["spec"]["pool"]["name"], d) for s in slices for d in s["spec"].get("devices") or ()
    ]
    results: list[dict[str, Any]] = []
    for driver, pool, d in devices:
        if not _maybe(r, 0.2):
            continue
        res: dict[str, Any] = {"request": "r", "driver": driver, "pool": pool, "device": d["name"]}
        if d.get("allowMultipleAllocations"):
            res["shareID"] = f"00000000-0000-0000-0000-{len(results):012d}"
            if d.get("capacity") and _maybe(r, 0.8):
                res["consumedCapacity"] = {"memory": r.choice(["512Mi", "1Gi"])}
        elif _maybe(r, 0.1):
            res["adminAccess"] = True
        results.append(res)
    if not results:
        return []
    return [
        {
            "metadata": {"name": "allocated", "namespace": "default"},
            "spec": {"devices": {"requests": []}},
            "status": {"allocation": {"devices": {"results": results}}},
        }
    ]


def generate_case(seed: int) -> dict[str, Any]:
    r = random.Random(seed)
    node_name = r.choice(NODES)
    big = _maybe(r, 0.3)  # larger pools: more backtracking
    slices = _slices(r, node_name, big)
    class_names = []
    classes = []
    for i in range(r.randint(1, 3)):
        name = f"class-{i}"
        class_names.append(name)
        spec: dict[str, Any] = {}
        sels = _selectors(r, CLASS_EXPRS, 0.6)
        if sels:
            spec["selectors"] = sels
        if _maybe(r, 0.3):
            spec["config"] = [{"opaque": {"driver": r.choice(DRIVERS), "parameters": {"class": name}}}]
        classes.append({"metadata": {"name": name}, "spec": spec})
    if _maybe(r, 0.03):
        class_names.append("missing-class")
    claims = [_claim(r, f"claim-{i}", class_names) for i in range(r.choices([1, 2], weights=[3, 1])[0])]
    features = {
        "AdminAccess": True,
        "PrioritizedList": True,
        "PartitionableDevices": not _maybe(r, 0.1),
        "DeviceTaints": not _maybe(r, 0.1),
        "DeviceBindingAndStatus": not _maybe(r, 0.1),
        "ConsumableCapacity": not _maybe(r, 0.1),
        "FractionalCapacityRange": _maybe(r, 0.1),
    }
    if not (
        features["DeviceBindingAndStatus"] or features["ConsumableCapacity"] or features["FractionalCapacityRange"]
    ):
        features["ConsumableCapacity"] = True  # otherwise upstream picks its (order-random) stable variant
    node = {"metadata": {"name": node_name, "labels": {"region": r.choice(["r1", "r2"])}}}
    return {
        "name": f"random-{seed}",
        "features": features,
        "node": node,
        "slices": slices,
        "classes": classes,
        "claims": claims,
        "allocatedClaims": _allocated_claims(r, slices),
    }
