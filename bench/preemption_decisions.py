"""The cost of a preempting decision in the pure core (no API server): a full cluster of
lower-priority pods, then high-priority pods that fit nowhere without evictions, each through
schedule() (the filters fail everywhere) and preempt() (candidates, dry runs, the choice), as the
operator's scheduling loop runs them. Printed figures, not a test.

    .venv/bin/python bench/preemption_decisions.py --nodes 500 --pods 40000 --case devices|cpu

Every node has 8 devices and 64 cpus; --pods pods of priority 0 are bound across the nodes
(one device each on the first 8 of every node, through their special claims; the rest cpu only),
filling every device and, with --case cpu, every cpu. The preemptor (priority 1000) asks for 2
devices (devices) or 16 cpus (cpu). The figure is the CPU time of schedule() + preempt() per
preemptor, and the worst single one.

With ``--loop`` the operator's real Scheduler runs instead (``Scheduler.run``, writes answered by
bench/event_loop_lag.py's stand-in API), with the preemptors pending at once, beside a probe that
wakes every 10 ms as the watches would: how late it woke is how long the scheduling loop held the
event loop while it preempted (the dry runs hand it back every ``--turn`` seconds).

With ``--upstream`` (the cpu case only, side by side with kube-scheduler): one cluster written as a
case of the scheduler harness (tests/scheduler_harness: kube-scheduler 1.37.2's own framework and
DefaultPreemption), N nodes of exactly --pods/N cpus filled by 1-cpu pods of priority 0, and a pod
of priority 1000 asking for 16 cpus (half a node when a node has fewer than 32). The harness times
RunPostFilterPlugins (the candidates, dry runs and choice; kube-scheduler runs them on 16
goroutines, this box has 2 cores); draxr's side is preempt() on the same case as
draxr_dev.scheduling builds it, best of --preemptors.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import time
from typing import Any

from draxr.core.allocator import DEFAULT_FEATURES
from draxr.core.placement import Unschedulable, schedule
from draxr.core.preemption import preempt
from draxr.core.state import ClusterState
from draxr_dev.devcluster import fakedriver

EXT = "example.com/gpu"
CLASS = "gpu.example.com"


def _pod(name: str, node: str, priority: int, limits: dict[str, str], start: int) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "draxr",
        "priority": priority,
        "containers": [{"name": "c", "resources": {"limits": limits}}],
    }
    status: dict[str, Any] = {"phase": "Pending"}
    if node:
        spec["nodeName"] = node
        status = {"phase": "Running", "startTime": f"2026-01-01T{start // 3600 % 24:02}:{start // 60 % 60:02}:00Z"}
    return {
        "metadata": {"name": name, "namespace": "bench", "uid": f"uid-{name}", "resourceVersion": "1"},
        "spec": spec,
        "status": status,
    }


def build(nodes: int, pods: int, case: str) -> ClusterState:
    state = ClusterState()
    cls = fakedriver.device_class(CLASS, extended_resource_name=EXT)
    cls["metadata"]["resourceVersion"] = "1"
    state.upsert_class(cls)
    per_node = max(1, pods // nodes)
    cpu_each = max(1, 64 // per_node) if case == "cpu" else 0
    for n in range(nodes):
        name = f"node-{n}"
        node = fakedriver.node(name, cpu="64", pods=str(per_node + 10))
        node["metadata"]["resourceVersion"] = "1"
        state.upsert_node(node)
        sl = fakedriver.resource_slice(name, [fakedriver.device(f"gpu-{d}", uid=f"{name}-{d}") for d in range(8)])
        sl["metadata"]["resourceVersion"] = "1"
        state.upsert_slice(sl)
        for i in range(per_node):
            pod_name = f"{name}-p{i}"
            limits = {"cpu": f"{cpu_each}"} if cpu_each else {}
            claim = None
            if i < 8:
                limits[EXT] = "1"
                claim = f"{pod_name}-claim"
            body = _pod(pod_name, name, 0, limits, i)
            if claim is not None:
                body["status"]["extendedResourceClaimStatus"] = {"resourceClaimName": claim, "requestMappings": []}
            state.upsert_pod(body)
            if claim is not None:
                alloc = {
                    "devices": {
                        "results": [{"request": "r", "driver": fakedriver.DRIVER, "pool": name, "device": f"gpu-{i}"}]
                    }
                }
                state.upsert_claim(
                    {
                        "metadata": {
                            "name": claim,
                            "namespace": "bench",
                            "uid": f"c-{claim}",
                            "resourceVersion": "1",
                            "annotations": {"resource.kubernetes.io/extended-resource-claim": "true"},
                            "ownerReferences": [
                                {"kind": "Pod", "name": pod_name, "uid": f"uid-{pod_name}", "controller": True}
                            ],
                        },
                        "spec": {"devices": {"requests": []}},
                        "status": {
                            "allocation": alloc,
                            "reservedFor": [{"resource": "pods", "name": pod_name, "uid": f"uid-{pod_name}"}],
                        },
                    }
                )
    return state


def run(args: argparse.Namespace) -> None:
    t0 = time.process_time()
    state = build(args.nodes, args.pods, args.case)
    print(f"state built in {time.process_time() - t0:.1f}s CPU: {len(state.nodes)} nodes, {len(state.pods)} pods")
    gc.collect()
    gc.freeze()
    rng = random.Random(1)
    limits = {EXT: "2"} if args.case == "devices" else {"cpu": "16"}
    times: list[float] = []
    filtering = 0.0
    victims = 0
    for k in range(args.preemptors):
        info = state.upsert_pod(_pod(f"hi-{k}", "", 1000, limits, 0))
        t = time.process_time()
        result = schedule(info, state, features=DEFAULT_FEATURES)
        filtering += time.process_time() - t
        assert isinstance(result, Unschedulable), result
        out = preempt(info, state, result, features=DEFAULT_FEATURES, offset=rng.randrange)
        times.append(time.process_time() - t)
        assert out.chosen is not None, out.message
        victims += len(out.chosen.victims)
        state.remove_pod(info.uid)
    mean = sum(times) / len(times)
    print(
        f"nodes={args.nodes} pods={len(state.pods)} case={args.case}: {len(times)} preempting decisions, "
        f"{mean * 1000:.1f} ms CPU each (worst {max(times) * 1000:.1f} ms; the filters "
        f"{filtering / len(times) * 1000:.1f} ms of it), {victims / len(times):.1f} victims each"
    )


async def loop_run(args: argparse.Namespace) -> None:
    from draxr import metrics
    from draxr.events import Recorder
    from draxr.scheduler import Scheduler
    from draxr.settings import Settings
    from event_loop_lag import InstantApi, percentile

    state = build(args.nodes, args.pods, args.case)
    api = InstantApi(0.005)
    settings = Settings(scheduler_turn_seconds=args.turn)
    scheduler = Scheduler(api, state, settings, Recorder(api, "draxr"))  # type: ignore[arg-type]
    limits = {EXT: "2"} if args.case == "devices" else {"cpu": "16"}
    # The pods' first cycle over all nodes (a cold equivalence table: ~0.5 s at 5,000 nodes, with
    # or without preemption) is taken before the probe starts.
    warm = state.upsert_pod(_pod("warm", "", 1000, limits, 0))
    schedule(warm, state, features=DEFAULT_FEATURES, scoring=settings.scoring, device_scoring=settings.device_scoring)
    state.remove_pod(warm.uid)
    gc.collect()
    gc.freeze()
    for k in range(args.preemptors):
        scheduler.pod_changed(state.upsert_pod(_pod(f"hi-{k}", "", 1000, limits, 0)))
    lateness: list[float] = []

    async def probe() -> None:
        loop = asyncio.get_running_loop()
        while True:
            t0 = loop.time()
            await asyncio.sleep(0.01)
            lateness.append(loop.time() - t0 - 0.01)

    attempts0 = metrics.PREEMPTION_ATTEMPTS._value.get()
    tasks = [asyncio.create_task(probe())]
    await asyncio.sleep(0)
    tasks.append(asyncio.create_task(scheduler.run()))
    t0 = time.monotonic()
    while metrics.PREEMPTION_ATTEMPTS._value.get() - attempts0 < args.preemptors and time.monotonic() - t0 < 600:  # noqa: ASYNC110
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.5)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await scheduler.drain()
    attempts = metrics.PREEMPTION_ATTEMPTS._value.get() - attempts0
    print(
        f"nodes={args.nodes} pods={args.pods} case={args.case} turn={args.turn}s: {attempts:.0f} preemptions in "
        f"{time.monotonic() - t0:.1f}s; a 10 ms probe woke late by p50 {percentile(lateness, 0.5) * 1000:.1f} ms, "
        f"p99 {percentile(lateness, 0.99) * 1000:.1f} ms, max {max(lateness, default=0) * 1000:.1f} ms"
    )


def upstream_case(nodes: int, pods: int) -> dict[str, Any]:
    per_node = max(1, pods // nodes)
    node_objs, pod_objs = [], []
    for n in range(nodes):
        name = f"node-{n}"
        node_objs.append(fakedriver.node(name, cpu=str(per_node), pods=str(per_node + 10)))
        for i in range(per_node):
            p = _pod(f"{name}-p{i}", name, 0, {"cpu": "1"}, i)
            p["metadata"]["namespace"] = "default"
            pod_objs.append(p)
    hi = _pod("hi", "", 1000, {"cpu": str(max(1, min(16, per_node // 2)))}, 0)
    hi["metadata"]["namespace"] = "default"
    for p in (*pod_objs, hi):  # requests written out: the harness applies no API defaulting
        for c in p["spec"]["containers"]:
            c["resources"]["requests"] = dict(c["resources"]["limits"])
    return {"name": "bench", "preempt": True, "preemptTimeOnly": True, "nodes": node_objs, "pods": pod_objs, "pod": hi}


def upstream_run(args: argparse.Namespace) -> None:
    import json
    import subprocess

    from draxr_dev.scheduling import harness
    from draxr_dev.scheduling.evaluate import _with_identity, build_state

    case = upstream_case(args.nodes, args.pods)
    binary = harness.build()
    t = time.monotonic()
    proc = subprocess.run(
        [str(binary)], input=json.dumps([case]), capture_output=True, text=True, check=True, timeout=3600
    )
    go_wall = time.monotonic() - t
    [go] = json.loads(proc.stdout)
    pre = go["preemption"]
    ours: list[float] = []
    message = ""
    for _ in range(args.preemptors):
        state = build_state(case)
        pod = state.upsert_pod(_with_identity(case["pod"], "incoming", 0))
        gc.collect()
        t0 = time.process_time()
        result = schedule(pod, state, features=DEFAULT_FEATURES, device_scoring=None)
        assert isinstance(result, Unschedulable), result
        t1 = time.process_time()
        out = preempt(pod, state, result, features=DEFAULT_FEATURES)
        ours.append(time.process_time() - t1)
        message = out.message
        del t0
    print(
        f"nodes={args.nodes} pods={len(case['pods'])} case=cpu: kube-scheduler's PostFilter "
        f"{pre['postFilterSeconds'] * 1000:.1f} ms wall (harness process {go_wall:.1f} s), "
        f"draxr's preempt() {min(ours) * 1000:.1f} ms CPU (best of {len(ours)})"
    )
    print(f"  kube-scheduler: {pre['message']}")
    print(f"  draxr:          {message}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=500)
    ap.add_argument("--pods", type=int, default=40000)
    ap.add_argument("--case", choices=["devices", "cpu"], default="devices")
    ap.add_argument("--preemptors", type=int, default=20)
    ap.add_argument("--loop", action="store_true", help="the operator's scheduling loop, with a lag probe")
    ap.add_argument("--turn", type=float, default=0.05, help="the scheduling loop's turn budget, seconds (--loop)")
    ap.add_argument("--upstream", action="store_true", help="side by side with kube-scheduler's PostFilter (cpu)")
    args = ap.parse_args()
    if args.upstream:
        upstream_run(args)
    elif args.loop:
        asyncio.run(loop_run(args))
    else:
        run(args)


if __name__ == "__main__":
    main()
