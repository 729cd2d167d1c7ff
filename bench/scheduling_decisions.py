"""Scheduling decisions per second of the pure core (no API server): placement + allocation of one
pod at a time against an in-memory cluster, each decision assumed before the next, as the operator
does. Printed figures, not a test.

    .venv/bin/python bench/scheduling_decisions.py --nodes 500 --devices 8 --classes 25 --count 1 [--selector]

A pod asks for `count` devices of `example.com/gpu-<i mod classes>`; the run schedules pods until
`--fill` of all devices are taken and reports the mean CPU time per decision over all of them.
`--selector` puts a CEL request selector on the DeviceClass (25 classes share one driver and differ
by a model attribute, like the upstream scheduler_perf ExtendedResource_25Classes workload).
`--workload` adds kube-scheduler's inter-pod features, pods grouped by class (`app=g<i mod classes>`):
`spread` a hard topology spread over hostname (maxSkew 1), `anti-affinity` a required
anti-affinity over hostname within the group, `replicaset` pods owned by a ReplicaSet selecting the
group (the system default spreading scores every decision); `bare` (default) none of these.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import time
import uuid
from typing import Any

from draxr.core.allocator import DEFAULT_FEATURES
from draxr.core.placement import Decision, schedule
from draxr.core.plugins.node_resources_fit import Scoring
from draxr.core.state import ClusterState
from draxr_dev.devcluster import fakedriver


def build(nodes: int, devices: int, classes: int, selector: bool, workload: str = "bare") -> ClusterState:
    state = ClusterState()
    if workload == "replicaset":
        for i in range(classes):
            rs = {
                "metadata": {"name": f"g{i}", "namespace": "bench"},
                "spec": {"selector": {"matchLabels": {"app": f"g{i}"}}},
            }
            state.workloads.upsert({**rs, "kind": "ReplicaSet"})
    models = [f"model-{i}" for i in range(classes)]
    for i in range(classes):
        extra = [f'device.attributes["gpu.example.com"].model == "{models[i]}"'] if selector else []
        cls = fakedriver.device_class(f"gpu-{i}", extended_resource_name=f"example.com/gpu-{i}", extra_selectors=extra)
        cls["metadata"]["resourceVersion"] = "1"
        state.upsert_class(cls)
    for n in range(nodes):
        name = f"node-{n}"
        node = fakedriver.node(name)
        node["metadata"]["resourceVersion"] = "1"
        state.upsert_node(node)
        model = models[n % classes] if selector else "fake-a100"
        devs = [fakedriver.device(f"gpu-{d}", model=model, numa=d // 4, uid=f"{name}-{d}") for d in range(devices)]
        sl = fakedriver.resource_slice(name, devs)
        sl["metadata"]["resourceVersion"] = "1"
        state.upsert_slice(sl)
    return state


def pod(i: int, classes: int, count: int, workload: str = "bare") -> dict[str, Any]:
    group = f"g{i % classes}"
    obj: dict[str, Any] = {
        "metadata": {
            "name": f"p-{i}",
            "namespace": "bench",
            "uid": str(uuid.uuid4()),
            "resourceVersion": "1",
            "creationTimestamp": "2026-11-30T00:00:00Z",
            "labels": {"app": group},
        },
        "spec": {
            "schedulerName": "draxr",
            "containers": [{"name": "c", "resources": {"limits": {f"example.com/gpu-{i % classes}": str(count)}}}],
        },
        "status": {"phase": "Pending"},
    }
    host = "kubernetes.io/hostname"
    selector = {"matchLabels": {"app": group}}
    if workload == "spread":
        obj["spec"]["topologySpreadConstraints"] = [
            {"maxSkew": 1, "topologyKey": host, "whenUnsatisfiable": "DoNotSchedule", "labelSelector": selector}
        ]
    elif workload == "anti-affinity":
        term = {"labelSelector": selector, "topologyKey": host}
        obj["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    elif workload == "replicaset":
        owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": group, "uid": group, "controller": True}
        obj["metadata"]["ownerReferences"] = [owner]
    return obj


def run(args: argparse.Namespace) -> None:
    t0 = time.process_time()
    state = build(args.nodes, args.devices, args.classes, args.selector, args.workload)
    print(f"state built in {time.process_time() - t0:.2f}s CPU")
    gc.collect()
    gc.freeze()  # as `draxr run` does once its initial sync has built the view (draxr.heap)
    total_pods = int(args.nodes * args.devices * args.fill) // args.count
    cpu = 0.0
    scheduled = 0
    start = 0
    for i in range(total_pods):
        info = state.upsert_pod(pod(i, args.classes, args.count, args.workload))
        t = time.process_time()
        result = schedule(info, state, features=DEFAULT_FEATURES, start=start, device_scoring=args.device_scoring)
        if isinstance(result, Decision):
            start += result.nodes_evaluated
            state.assume_pod(info.uid, result.node)
            if result.allocation is not None:
                state.assume_allocation(f"<assumed>/{info.uid}", result.allocation)
            scheduled += 1
        cpu += time.process_time() - t
    per = cpu / max(total_pods, 1)
    print(
        f"nodes={args.nodes} devices/node={args.devices} classes={args.classes} count={args.count} "
        f"selector={args.selector} device_scoring={args.device_scoring} workload={args.workload}: "
        f"{total_pods} decisions ({scheduled} scheduled), "
        f"{per * 1000:.2f} ms CPU/decision, {1 / per:,.0f} decisions/s"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=500)
    ap.add_argument("--devices", type=int, default=8)
    ap.add_argument("--classes", type=int, default=25)
    ap.add_argument("--count", type=int, default=1)
    ap.add_argument("--fill", type=float, default=0.8, help="fraction of all devices to fill")
    ap.add_argument("--selector", action="store_true")
    ap.add_argument("--workload", choices=["bare", "spread", "anti-affinity", "replicaset"], default="bare")
    ap.add_argument(
        "--device-scoring",
        type=lambda v: None if v == "none" else Scoring(v),
        default=Scoring.MOST_ALLOCATED,
        help="MostAllocated (the operator's default), LeastAllocated or none",
    )
    ap.add_argument("--profile", action="store_true", help="print the top functions by cumulative time")
    args = ap.parse_args()
    if args.profile:
        prof = cProfile.Profile()
        prof.runcall(run, args)
        pstats.Stats(prof).sort_stats("tottime").print_stats(18)
    else:
        run(args)


if __name__ == "__main__":
    main()
