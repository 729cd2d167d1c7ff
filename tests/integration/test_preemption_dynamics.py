"""Preemption under real dynamics (issue 34), side by side with kube-scheduler 1.37.2.

draxr runs here as an operator of its own whose unschedulable flush is 600 s: a pod that is
retried within the test was moved by an event, never by the safety net. It reaches the API server
through a fault proxy (with the manifests' ServiceAccount) that slows the writes which open each
race, so that every run meets it (kube-scheduler, the control, is not slowed):

* A preemptor whose victims are all gone while its evictions still run is bound as soon as they
  end (before: it waited for the flush, 60 s by default, in 3 of 5 runs). The Preempted Events,
  written after the deletions, are slowed: the victims are gone and the preemptor is tried while
  its evictions still run.
* Many preemptors at once over full nodes, lower-priority replicas retrying (a Deployment with
  more replicas than fit): each preemptor evicts on one node, the fewest pods, and no
  lower-priority pod takes the room freed for a nominated one (before: 22 victims for 10
  preemptors, one evicting on two nodes). The pods' status writes (a nomination is one) are
  slowed: the other preemptors choose while it is on its way.

Counted per run: victims (Preempted events), nodes per preemptor, and the seconds from the last
victim gone to the preemptor bound (printed, not asserted).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from draxr.app import Operator
from draxr.kube import EVENTS, NAMESPACES, PODS, Kube, Resource
from draxr_dev.devcluster import fakedriver
from draxr_dev.devcluster.controlplane import ControlPlane

from ..faultproxy import Call, FaultProxy, resource
from . import manifests
from .clusters import service_account_dir
from .embedded import embedded_operator, fast_settings
from .helpers import eventually
from .test_preemption import body, tainted_fleet

SCHEDULER = "draxr-dynamics"
FLUSH = 600.0
PRIORITY_CLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses", False)
DEPLOYMENTS = Resource("apps", "v1", "deployments", True)
JSON = dict[str, Any]


@pytest.fixture
async def dynamics(
    control_plane: ControlPlane, kube: Kube, tmp_path: Path
) -> AsyncIterator[tuple[FaultProxy, Operator]]:
    applied = manifests.apply(control_plane)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    sa_dir = await service_account_dir(kube, control_plane, "draxr-system", "draxr", tmp_path / "sa")
    settings = fast_settings(
        kubeconfig=None,
        serviceaccount_dir=str(sa_dir),
        scheduler_name=SCHEDULER,
        leader_elect=False,
        backoff_initial_seconds=1.0,  # kube-scheduler's defaults (1 s, at most 10 s)
        backoff_max_seconds=10.0,
        unschedulable_flush_seconds=FLUSH,
    )
    with FaultProxy.for_control_plane(control_plane) as proxy:
        with proxy.in_cluster():
            ctx = embedded_operator(settings)
            _, op = await ctx.__aenter__()
        try:
            yield proxy, op
        finally:
            proxy.clear()
            await ctx.__aexit__(None, None, None)


def status_writes(call: Call) -> bool:
    """A pod's status written (a nomination, a victim's DisruptionTarget, PodScheduled)."""
    return call.is_write and call.resource == "pods" and call.path.endswith("/status")


@pytest.fixture
async def priorities(kube: Kube, names: str) -> AsyncIterator[tuple[str, str]]:
    """(low, high): PriorityClasses of 0 and 100000, named after the test."""
    made = []
    for value in (0, 100000):
        name = f"{names}-p{value}"
        obj: JSON = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}}
        obj["value"] = value
        await kube.create(PRIORITY_CLASSES, obj)
        made.append(name)
    yield made[0], made[1]
    for name in made:
        await kube.delete_if_exists(PRIORITY_CLASSES, name)


class Watcher:
    """Polls the namespace's pods every 50 ms: when each pod was last seen and when it was first
    seen bound, for the time from the last victim gone to the preemptor bound."""

    def __init__(self, kube: Kube, namespace: str) -> None:
        self.kube, self.namespace = kube, namespace
        self.last_seen: dict[str, float] = {}
        self.bound_at: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None

    async def _poll(self) -> None:
        while True:
            now = time.monotonic()
            for p in await self.kube.list(PODS, self.namespace):
                name = p["metadata"]["name"]
                self.last_seen[name] = now
                if p["spec"].get("nodeName"):
                    self.bound_at.setdefault(name, now)
            await asyncio.sleep(0.05)

    async def bound(self, *names: str) -> bool:
        return all(n in self.bound_at for n in names)

    def __enter__(self) -> Watcher:
        self._task = asyncio.ensure_future(self._poll())
        return self

    def __exit__(self, *_: object) -> None:
        assert self._task is not None
        self._task.cancel()


async def _preempted(kube: Kube, namespace: str, reporter: str) -> dict[str, list[tuple[str, str]]]:
    """Preemptor uid -> [(victim, node)] from the Preempted events."""
    out: dict[str, list[tuple[str, str]]] = {}
    for e in await kube.list(EVENTS, namespace):
        if e["reason"] != "Preempted" or e["reportingController"] != reporter:
            continue
        m = re.fullmatch(r"Preempted by pod (\S+) on node (\S+)", e["note"])
        assert m is not None, e["note"]
        out.setdefault(m.group(1), []).append((e["regarding"]["name"], m.group(2)))
    return out


@contextlib.asynccontextmanager
async def _in_namespace(kube: Kube, name: str) -> AsyncIterator[str]:
    await kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    try:
        yield name
    finally:
        await kube.request("DELETE", PODS.path(name), query={"gracePeriodSeconds": 0})
        await kube.delete_if_exists(NAMESPACES, name)


# ------------------------------------------------------------------------ scene 1: no lost wake-up


async def scene_one(kube: Kube, namespace: str, prefix: str, scheduler: str, priorities: tuple[str, str]) -> JSON:
    """Two nodes of 16 cpus, each full with two priority-0 pods of 8; one high-priority pod asking
    cpu 16 and one device."""
    low, high = priorities
    _, objs = await tainted_fleet(kube, prefix, cpu="16", devices=4)
    ext = f"{prefix}.example.com/gpu"
    try:
        fill = [body(f"{prefix}-f{i}", {"cpu": "8"}, scheduler, low, prefix) for i in range(4)]
        for p in fill:
            await kube.create(PODS, p, namespace)
        fill_names = [p["metadata"]["name"] for p in fill]

        async def all_bound() -> bool:
            pods = {p["metadata"]["name"]: p for p in await kube.list(PODS, namespace)}
            return all(pods.get(n, {}).get("spec", {}).get("nodeName") for n in fill_names)

        await eventually(all_bound, timeout=60)
        with Watcher(kube, namespace) as seen:
            hi = await kube.create(
                PODS, body(f"{prefix}-hi", {"cpu": "16", ext: "1"}, scheduler, high, prefix), namespace
            )
            name = hi["metadata"]["name"]
            await eventually(lambda: seen.bound(name), timeout=90)
        present = {p["metadata"]["name"] for p in await kube.list(PODS, namespace)}
        gone = [n for n in fill_names if n not in present]
        uid = hi["metadata"]["uid"]

        async def reported() -> list[tuple[str, str]]:
            # (the Preempted events may be written after the preemptor is bound)
            found = (await _preempted(kube, namespace, scheduler)).get(uid, [])
            return found if len(found) >= len(gone) else []

        evicted = await eventually(reported, timeout=30)
        last_gone = max((seen.last_seen.get(n, 0.0) for n in gone), default=0.0)
        return {
            "gone": sorted(gone),
            "evicted": sorted(evicted),
            "nodes": sorted({node for _, node in evicted}),
            "after_last_victim": round(seen.bound_at[name] - last_gone, 2),
        }
    finally:
        await kube.request("DELETE", PODS.path(namespace), query={"gracePeriodSeconds": 0})
        await fakedriver.delete(kube, objs)


async def test_a_preemptor_is_bound_as_soon_as_its_victims_are_gone(
    dynamics: tuple[FaultProxy, Operator], kube: Kube, names: str, priorities: tuple[str, str]
) -> None:
    proxy, _ = dynamics
    runs: dict[str, list[JSON]] = {SCHEDULER: [], "default-scheduler": []}
    for i in range(3):
        for scheduler in runs:
            tag = "d" if scheduler == SCHEDULER else "k"
            slow = proxy.latency(1.0, match=resource("events")) if scheduler == SCHEDULER else contextlib.nullcontext()
            async with _in_namespace(kube, f"{names}-{tag}{i}") as ns:
                with slow:
                    runs[scheduler].append(await scene_one(kube, ns, f"{names[:14]}-{tag}{i}", scheduler, priorities))
    assert proxy.counts["latency"] > 0
    print("\nscene 1 (victims, nodes, seconds from the last victim gone to bound):")
    for scheduler, results in runs.items():
        print(f"  {scheduler}: {[(len(r['evicted']), len(r['nodes']), r['after_last_victim']) for r in results]}")
    for scheduler, results in runs.items():
        for r in results:
            assert len(r["gone"]) == 2, (scheduler, r)
            assert len(r["evicted"]) == 2, (scheduler, r)
            assert len(r["nodes"]) == 1, (scheduler, r)
            assert [v for v, _ in r["evicted"]] == r["gone"], (scheduler, r)


# ------------------------------------------------------------------------ scene 2: no extra eviction


def _deployment(
    name: str, replicas: int, resources: dict[str, str], scheduler: str, priority_class: str, fleet: str
) -> JSON:
    template = body(name, resources, scheduler, priority_class, fleet)
    template["metadata"] = {"labels": {"app": name}}
    template["spec"]["restartPolicy"] = "Always"
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": template["metadata"], "spec": template["spec"]},
        },
    }


async def scene_two(
    kube: Kube,
    namespace: str,
    prefix: str,
    scheduler: str,
    priorities: tuple[str, str],
    nodes: int = 4,
    slowed: FaultProxy | None = None,
    devices: bool = False,
) -> JSON:
    """``nodes`` nodes of 8 cpus and 4 devices, full with a Deployment's priority-0 replicas of cpu
    2 (``devices``: of one device; six more replicas than fit: they keep retrying); then one
    high-priority pod of cpu 4 (two devices) per node, all at once, each needing the room of two
    replicas."""
    low, high = priorities
    _, objs = await tainted_fleet(kube, prefix, cpu="8", devices=4, nodes=nodes)
    fits = 4 * nodes
    ext = f"{prefix}.example.com/gpu"
    replica, preemptor = ({ext: "1"}, {ext: "2"}) if devices else ({"cpu": "2"}, {"cpu": "4"})
    try:
        fill = _deployment(f"{prefix}-fill", fits + 6, replica, scheduler, low, prefix)
        await kube.create(DEPLOYMENTS, fill, namespace)

        async def full() -> bool:
            pods = await kube.list(PODS, namespace)
            return sum(1 for p in pods if p["spec"].get("nodeName")) == fits

        await eventually(full, timeout=90)
        await asyncio.sleep(1)  # (the six that do not fit have been tried and wait)
        preemptors = [body(f"{prefix}-hi{i}", preemptor, scheduler, high, prefix) for i in range(nodes)]
        slow = slowed.latency(0.5, match=status_writes) if slowed is not None else contextlib.nullcontext()
        with Watcher(kube, namespace) as seen, slow:
            made = await asyncio.gather(*(kube.create(PODS, p, namespace) for p in preemptors))
            want = [p["metadata"]["name"] for p in made]
            await eventually(lambda: seen.bound(*want), timeout=120)

        async def reported() -> dict[str, list[tuple[str, str]]]:
            # Every preemptor's Preempted events (they may be written after it is bound): each
            # evicted some, then one more look a second later for any that came last.
            found = await _preempted(kube, namespace, scheduler)
            return found if all(p["metadata"]["uid"] in found for p in made) else {}

        await eventually(reported, timeout=30)
        await asyncio.sleep(1)
        evicted = await _preempted(kube, namespace, scheduler)
        by_preemptor = {p["metadata"]["name"]: evicted.get(p["metadata"]["uid"], []) for p in made}
        return {
            "victims": sum(len(v) for v in by_preemptor.values()),
            "nodes_per_preemptor": sorted(len({n for _, n in v}) for v in by_preemptor.values()),
            "evicted": by_preemptor,
        }
    finally:
        await kube.delete_if_exists(DEPLOYMENTS, f"{prefix}-fill", namespace)
        await kube.request("DELETE", PODS.path(namespace), query={"gracePeriodSeconds": 0})
        await fakedriver.delete(kube, objs)


async def test_many_preemptors_over_full_nodes_evict_no_more_than_kube_scheduler(
    dynamics: tuple[FaultProxy, Operator], kube: Kube, names: str, priorities: tuple[str, str]
) -> None:
    proxy, _ = dynamics
    runs: dict[str, list[JSON]] = {SCHEDULER: [], "default-scheduler": []}
    for i in range(2):
        for scheduler in runs:
            tag = "d" if scheduler == SCHEDULER else "k"
            async with _in_namespace(kube, f"{names}-{tag}{i}") as ns:
                runs[scheduler].append(
                    await scene_two(
                        kube, ns, f"{names[:14]}-{tag}{i}", scheduler, priorities, slowed=proxy if tag == "d" else None
                    )
                )
    print("\nscene 2 (victims, nodes per preemptor):")
    for scheduler, results in runs.items():
        print(f"  {scheduler}: {[(r['victims'], r['nodes_per_preemptor']) for r in results]}")
    for scheduler, results in runs.items():
        for r in results:
            assert r["victims"] == 8, (scheduler, r)
            assert r["nodes_per_preemptor"] == [1, 1, 1, 1], (scheduler, r)


async def test_many_preemptors_for_devices_evict_what_their_dry_runs_named_on_one_node(
    dynamics: tuple[FaultProxy, Operator], kube: Kube, names: str, priorities: tuple[str, str]
) -> None:
    """The same with devices, where kube-scheduler 1.37 cannot preempt: the rule is at most the
    victims each dry run named, on one node, per nomination (two per preemptor here)."""
    proxy, _ = dynamics
    runs = []
    for i in range(2):
        async with _in_namespace(kube, f"{names}-g{i}") as ns:
            runs.append(
                await scene_two(kube, ns, f"{names[:14]}-g{i}", SCHEDULER, priorities, slowed=proxy, devices=True)
            )
    figures = [(r["victims"], r["nodes_per_preemptor"]) for r in runs]
    print(f"\nscene 2 with devices (victims, nodes per preemptor): {figures}")
    for r in runs:
        assert r["victims"] == 8, r
        assert r["nodes_per_preemptor"] == [1, 1, 1, 1], r
