"""Preemption on the real control plane: the issue's two cases.

* cpu (and a DRA device), side by side with kube-scheduler 1.37.2, which preempts for cpu: the
  same victims, the DisruptionTarget condition, the Preempted events, the FailedScheduling message,
  the preemptor bound where it was nominated;
* devices, which kube-scheduler cannot free: nodes full of 1-device pods of priority 0 and a
  2-device pod of high priority. draxr evicts two pods on one node, their special claims are
  released, the preemptor gets exactly their devices, and a low-priority pod created meanwhile
  does not take them.

draxr runs as the session operator, with the manifests' ServiceAccount (pods/delete,
poddisruptionbudgets list/watch: RBAC is exercised).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from draxr import metrics
from draxr.kube import EVENTS, NAMESPACES, PODS, RESOURCE_CLAIMS, Kube, Resource
from draxr_dev.devcluster import fakedriver

from .helpers import SCHEDULER, eventually, pod

TAINT = "draxr.io/preemption-test"
PRIORITY_CLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses", False)
JSON = dict[str, Any]


@pytest.fixture
async def priorities(kube: Kube, names: str) -> AsyncIterator[dict[int, str]]:
    """PriorityClasses by value (0, 1, 5, 100000; -1: 100000 with preemptionPolicy Never), named
    after the test."""
    made: dict[int, str] = {}
    for value in (0, 1, 5, 100000, -1):
        name = f"{names}-p{value}"
        obj: JSON = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}}
        obj["value"] = value if value >= 0 else 100000
        if value < 0:
            obj["preemptionPolicy"] = "Never"
        await kube.create(PRIORITY_CLASSES, obj)
        made[value] = name
    yield made
    for name in made.values():
        await kube.delete_if_exists(PRIORITY_CLASSES, name)


async def tainted_fleet(
    kube: Kube, prefix: str, cpu: str, devices: int, nodes: int = 2
) -> tuple[fakedriver.Fleet, list[JSON]]:
    """``nodes`` DRA nodes of ``cpu`` cpus and ``devices`` devices, tainted for the test's pods."""
    fleet = fakedriver.Fleet(
        prefix=prefix,
        dra_nodes=nodes,
        devices_per_node=devices,
        driver=f"{prefix}.example.com",
        classes={f"{prefix}-gpu": f"{prefix}.example.com/gpu"},
        # Only this test's pods (they tolerate it): the install's own pods, placed by kube-scheduler
        # on free nodes, would be victims of lower priority too (and come back, their ReplicaSet's).
        node_taints=[{"key": TAINT, "value": prefix, "effect": "NoSchedule"}],
    )
    objs = fleet.manifests()
    for o in objs:
        if o["kind"] == "Node":
            o["status"]["allocatable"]["cpu"] = o["status"]["capacity"]["cpu"] = cpu
    await fakedriver.apply(kube, objs)
    await fakedriver.wait_nodes_ready(kube, fleet.node_names())
    return fleet, objs


def body(
    name: str, resources: dict[str, str], scheduler: str, priority_class: str, prefix: str, node: str = ""
) -> JSON:
    p = pod(name, resources, scheduler=scheduler)
    p["spec"]["priorityClassName"] = priority_class
    p["spec"]["nodeSelector"] = {fakedriver.FLEET_LABEL: prefix}
    p["spec"]["terminationGracePeriodSeconds"] = 0
    p["spec"]["tolerations"] = [{"key": TAINT, "operator": "Exists", "effect": "NoSchedule"}]
    if node:
        p["spec"]["nodeSelector"]["kubernetes.io/hostname"] = node
    return p


async def running(kube: Kube, namespace: str, names: list[str]) -> bool:
    pods = {p["metadata"]["name"]: p for p in await kube.list(PODS, namespace)}
    return all(
        n in pods and pods[n]["spec"].get("nodeName") and pods[n]["status"].get("phase") == "Running" for n in names
    )


async def scenario_cpu(kube: Kube, namespace: str, prefix: str, scheduler: str, priorities: dict[int, str]) -> JSON:
    """Node -0 (64 cpus): 8 pods of cpu 8, four of priority 0 then four of 1; node -1: 8 of
    priority 5; then a pod of priority 100000 asking cpu 16 and one device. Returns what happened."""
    fleet, objs = await tainted_fleet(kube, prefix, cpu="64", devices=4)
    ext = f"{prefix}.example.com/gpu"
    try:
        n0, n1 = fleet.node_names()
        fill = []
        for i in range(8):
            prio = priorities[0] if i < 4 else priorities[1]
            fill.append(body(f"a{i}", {"cpu": "8"}, scheduler, prio, prefix, n0))
            fill.append(body(f"b{i}", {"cpu": "8"}, scheduler, priorities[5], prefix, n1))
        # The pods of priority 0 start one after another, each in a later second than the one
        # before (startTime has seconds only): which two are the victims is then defined, the two
        # started last, with no tie for either scheduler to break its own way.
        starts: dict[str, str] = {}
        for p in fill:
            name = p["metadata"]["name"]
            await kube.create(PODS, p, namespace)
            if p["spec"]["priorityClassName"] != priorities[0]:
                continue
            await eventually(lambda n=name: running(kube, namespace, [n]), timeout=60)
            starts[name] = (await kube.get(PODS, name, namespace))["status"]["startTime"]
            started = datetime.strptime(starts[name], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
            await asyncio.sleep(max(0.0, (started + timedelta(seconds=1.1) - datetime.now(UTC)).total_seconds()))
        await eventually(lambda: running(kube, namespace, [p["metadata"]["name"] for p in fill]), timeout=90)
        hi = await kube.create(
            PODS, body("hi", {"cpu": "16", ext: "1"}, scheduler, priorities[100000], prefix), namespace
        )

        async def bound() -> JSON | None:
            p = await kube.get(PODS, "hi", namespace)
            return p if p["spec"].get("nodeName") else None

        placed = await eventually(bound, timeout=90)
        pods = {p["metadata"]["name"]: p for p in await kube.list(PODS, namespace)}
        gone = sorted(p["metadata"]["name"] for p in fill if p["metadata"]["name"] not in pods)
        events = await kube.list(EVENTS, namespace)
        preempted = [e for e in events if e["reason"] == "Preempted"]
        failed = [e["note"] for e in events if e["reason"] == "FailedScheduling" and e["regarding"]["name"] == "hi"]
        return {
            "node": placed["spec"]["nodeName"],
            "nodes": (n0, n1),
            "gone": gone,
            "preempted": preempted,
            "failed": failed,
            "uid": hi["metadata"]["uid"],
            "starts": starts,
        }
    finally:
        await kube.request("DELETE", PODS.path(namespace), query={"gracePeriodSeconds": 0})
        await fakedriver.delete(kube, objs)


def _histogram_sum(h: Any) -> float:
    return float(next(s.value for m in h.collect() for s in m.samples if s.name.endswith("_sum")))


def _generic(note: str, nodes: tuple[str, str]) -> str:
    """A message with the test's node names replaced and the cluster's node count dropped."""
    for i, n in enumerate(nodes):
        note = note.replace(n, f"<node-{i}>")
    return re.sub(r"\d+/\d+ nodes|\d+ node\(s\) didn't match", "N", note)


async def test_cpu_preemption_evicts_the_same_victims_as_kube_scheduler(
    kube: Kube, operator: object, namespace: str, names: str, priorities: dict[int, str]
) -> None:
    ours = await scenario_cpu(kube, namespace, f"{names}-d", SCHEDULER, priorities)
    other = f"{namespace}-k"
    await kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other}})
    try:
        theirs = await scenario_cpu(kube, other, f"{names}-k", "default-scheduler", priorities)
    finally:
        await kube.delete_if_exists(NAMESPACES, other)
    # Node -0's victims are of priority 0 and 1 (-1's all of 5): the lowest highest priority wins;
    # on it the two pods of priority 0 started last are the fewest that free 16 cpus.
    assert ours["node"] == ours["nodes"][0]
    assert theirs["node"] == theirs["nodes"][0]
    for run in (ours, theirs):
        assert len(set(run["starts"].values())) == 4, run["starts"]  # no tie among the priority-0 pods
    latest = sorted(theirs["starts"], key=theirs["starts"].__getitem__)[2:]
    assert theirs["gone"] == sorted(latest), theirs
    assert ours["gone"] == theirs["gone"], (ours["gone"], theirs["gone"])
    for run, reporter in ((ours, SCHEDULER), (theirs, "default-scheduler")):
        assert len(run["preempted"]) == 2, run["preempted"]
        for e in run["preempted"]:
            assert e["reportingController"] == reporter
            assert e["type"] == "Normal"
            assert e["action"] == "Preempting"
            assert e["note"] == f"Preempted by pod {run['uid']} on node {run['node']}"
            assert e["regarding"]["name"] in run["gone"]
    # The same fields (kube-scheduler writes no "related" for it, whatever its call says).
    fields = {frozenset(e) for run in (ours, theirs) for e in run["preempted"]}
    assert len(fields) == 1, fields
    assert "related" not in next(iter(fields))
    # The FailedScheduling that nominated the node, in the same words.
    want = [_generic(n, theirs["nodes"]) for n in theirs["failed"] if "preemption: found" in n]
    got = [_generic(n, ours["nodes"]) for n in ours["failed"] if "preemption: found" in n]
    assert want, theirs["failed"]
    assert got == want[:1] or set(got) == set(want), (got, want)


async def test_devices_are_preempted_and_held_for_the_preemptor(
    kube: Kube, operator: object, namespace: str, names: str, priorities: dict[int, str]
) -> None:
    fleet, objs = await tainted_fleet(kube, names, cpu="64", devices=4)
    ext = f"{names}.example.com/gpu"
    try:
        fill = []
        for n, node in enumerate(fleet.node_names()):
            prio = priorities[0] if n == 0 else priorities[1]
            fill += [body(f"n{n}-{i}", {ext: "1"}, SCHEDULER, prio, names, node) for i in range(4)]
        for p in fill:
            await kube.create(PODS, p, namespace)
        await eventually(lambda: running(kube, namespace, [p["metadata"]["name"] for p in fill]), timeout=90)
        before = {c["metadata"]["ownerReferences"][0]["name"]: c for c in await kube.list(RESOURCE_CLAIMS, namespace)}
        assert len(before) == 8
        attempts0 = metrics.PREEMPTION_ATTEMPTS._value.get()
        evictions0 = _histogram_sum(metrics.PREEMPTION_VICTIMS)
        await kube.create(PODS, body("hi", {ext: "2"}, SCHEDULER, priorities[100000], names), namespace)

        async def nominated() -> str | None:
            p = await kube.get(PODS, "hi", namespace)
            return p["status"].get("nominatedNodeName") or p["spec"].get("nodeName")

        target = await eventually(nominated, timeout=60)
        assert target == fleet.node_names()[0]  # priority 0 there, 1 on the other
        # Created while the victims go: of lower priority, it must not get the freed devices.
        await kube.create(PODS, body("late", {ext: "1"}, SCHEDULER, priorities[0], names, target), namespace)

        async def bound() -> JSON | None:
            p = await kube.get(PODS, "hi", namespace)
            return p if p["spec"].get("nodeName") and p["status"].get("extendedResourceClaimStatus") else None

        placed = await eventually(bound, timeout=90)
        assert placed["spec"]["nodeName"] == target
        pods = {p["metadata"]["name"] for p in await kube.list(PODS, namespace)}
        gone = sorted(p["metadata"]["name"] for p in fill if p["metadata"]["name"] not in pods)
        assert len(gone) == 2
        assert all(g.startswith("n0-") for g in gone)
        claims = await kube.list(RESOURCE_CLAIMS, namespace)
        by_owner = {c["metadata"]["ownerReferences"][0]["name"]: c for c in claims}
        assert not set(gone) & set(by_owner), "the victims' claims are released"
        mine = {r["device"] for r in by_owner["hi"]["status"]["allocation"]["devices"]["results"]}
        freed = {r["device"] for g in gone for r in before[g]["status"]["allocation"]["devices"]["results"]}
        assert mine == freed
        late = await kube.get(PODS, "late", namespace)
        assert not late["spec"].get("nodeName")
        # No device in two claims.
        held = [
            (r["pool"], r["device"])
            for c in claims
            for r in ((c.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results", [])
        ]
        assert len(held) == len(set(held))
        events = await kube.list(EVENTS, namespace)
        assert sorted(e["regarding"]["name"] for e in events if e["reason"] == "Preempted") == gone
        victim_conditions = [e for e in events if e["reason"] == "Preempted"]
        assert all(e["reportingController"] == SCHEDULER for e in victim_conditions)
        # The embedded operator's metrics (this process's registry): one preemption of two pods,
        # and the attempts while the victims went.
        assert metrics.PREEMPTION_ATTEMPTS._value.get() > attempts0
        assert _histogram_sum(metrics.PREEMPTION_VICTIMS) - evictions0 == 2
    finally:
        await kube.request("DELETE", PODS.path(namespace), query={"gracePeriodSeconds": 0})
        await fakedriver.delete(kube, objs)


async def test_preemption_policy_never_and_no_victims_say_so(
    kube: Kube, operator: object, namespace: str, names: str, priorities: dict[int, str]
) -> None:
    fleet, objs = await tainted_fleet(kube, names, cpu="8", devices=1)
    try:
        node = fleet.node_names()[0]
        await kube.create(PODS, body("big", {"cpu": "8"}, SCHEDULER, priorities[5], names, node), namespace)
        await eventually(lambda: running(kube, namespace, ["big"]), timeout=60)
        await kube.create(PODS, body("never", {"cpu": "4"}, SCHEDULER, priorities[-1], names, node), namespace)
        low = body("low", {"cpu": "4"}, SCHEDULER, priorities[1], names, node)
        await kube.create(PODS, low, namespace)

        async def message(name: str) -> str | None:
            p = await kube.get(PODS, name, namespace)
            for c in (p.get("status") or {}).get("conditions") or ():
                if c["type"] == "PodScheduled" and c["status"] == "False":
                    return str(c["message"])
            return None

        text = await eventually(lambda: message("never"))
        assert text.endswith(" preemption: not eligible due to preemptionPolicy=Never."), text
        text = await eventually(lambda: message("low"))
        total = re.match(r"0/(\d+) nodes", text)
        assert total is not None, text
        n = int(total.group(1))
        assert text.endswith(
            f" preemption: 0/{n} nodes are available: 1 No preemption victims found for incoming pod, "
            f"{n - 1} Preemption is not helpful for scheduling."
        ), text
        assert (await kube.get(PODS, "big", namespace))["metadata"].get("deletionTimestamp") is None
    finally:
        await kube.request("DELETE", PODS.path(namespace), query={"gracePeriodSeconds": 0})
        await fakedriver.delete(kube, objs)
