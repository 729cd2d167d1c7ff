"""The cost of a preempting decision in the pure core (no API server): a full cluster of
lower-priority pods, then high-priority pods that fit nowhere without evictions, each through
schedule() (the filters fail everywhere) and preempt() (candidates, dry runs, the choice), as the
operator's scheduling loop runs them. Printed figures, not a test.

    .venv/bin/python bench/preemption_decisions.py --nodes 500 --pods 40000 --case devices|cpu

Every node has 8 devices and 64 cpus; --pods pods of priority 0 are bound across the nodes
(one device each on the first 8 of every node, through their special claims; the rest cpu only),
filling every device and, with --case cpu, every cpu. The preemptor (priority 1000) asks for 2
devices (devices) or 16 cpus (cpu). The figure is the CPU time of schedule() + preempt() per
preemptor, and the worst single one: the scheduling loop holds the event loop that long.
"""

from __future__ import annotations

import argparse
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=500)
    ap.add_argument("--pods", type=int, default=40000)
    ap.add_argument("--case", choices=["devices", "cpu"], default="devices")
    ap.add_argument("--preemptors", type=int, default=20)
    run(ap.parse_args())


if __name__ == "__main__":
    main()
