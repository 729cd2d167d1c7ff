"""The migrator's periodic pass over settled nodes (issue 27), in the pure core: CPU per pass of
``draxr.migrator.plans`` over nodes whose device-plugin pods are all adopted, with and without the
memo that skips a node whose inputs did not change. Printed figures, not a test.

    .venv/bin/python bench/migration_passes.py --nodes 500 --devices 8

Every node has ``--devices`` DRA devices of the class ``gpu.example.com`` (identity ``uuid``), one
running device-plugin pod per device, a fresh record naming them, and their adoption claims
written: what a leader passes over every 5 s once a fleet has moved (bench/migration.py measures
the whole move on a cluster; its idle phase is this pass).
"""

from __future__ import annotations

import argparse
import time

from draxr.core.migration import ID_ATTRIBUTE_ANNOTATION
from draxr.core.state import ClusterState
from draxr.migrator import Memo, plans
from draxr_dev.devcluster import fakedriver
from draxr_dev.devcluster.records import fake_record

OBSERVED = "2026-12-05T07:00:00Z"
NOW = 1_796_454_010.0  # 10 s after OBSERVED: every record is fresh
GPU = "example.com/gpu"


def _settled(nodes: int, devices: int) -> ClusterState:
    state = ClusterState()
    cls = fakedriver.device_class("gpu.example.com", extended_resource_name=GPU)
    cls["metadata"]["annotations"] = {ID_ATTRIBUTE_ANNOTATION: "uuid"}
    state.upsert_class(cls)
    for n in range(nodes):
        node = f"node-{n}"
        state.upsert_node(fakedriver.node(node))
        slice_devices = [fakedriver.device(f"gpu-{i}", uid=f"{node}-gpu-{i}") for i in range(devices)]
        state.upsert_slice(fakedriver.resource_slice(node, slice_devices))
        pods = {}
        for i in range(devices):
            name = f"{node}-p{i}"
            container = {"name": "c", "image": "x", "resources": {"limits": {GPU: "1"}}}
            state.upsert_pod(
                {
                    "metadata": {"name": name, "namespace": "dp", "uid": f"uid-{name}", "creationTimestamp": OBSERVED},
                    "spec": {"nodeName": node, "schedulerName": "default-scheduler", "containers": [container]},
                    "status": {"phase": "Running"},
                }
            )
            pods[name] = i
        held = {("dp", name): {GPU: [f"{node}-gpu-{i}"]} for name, i in pods.items()}
        state.adoption.upsert_record(fake_record(node, held, observed=OBSERVED))
    for p in plans(state, NOW).values():
        for claim in p.create:
            state.upsert_claim({**claim.body(), "status": claim.status()})
    return state


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=500)
    ap.add_argument("--devices", type=int, default=8)
    ap.add_argument("--passes", type=int, default=10)
    args = ap.parse_args()
    state = _settled(args.nodes, args.devices)
    adopted = sum(len(c) for c in state.adoption.claims_by_node().values())
    print(f"{args.nodes} nodes x {args.devices} devices, {adopted} adoption claims, every record fresh")
    for label, memo in (("without the memo", None), ("with the memo", Memo())):
        first = plans(state, NOW, memo=memo)  # (fills the memo)
        assert all(not p.create and not p.delete for p in first.values()), "not settled"
        start = time.process_time()
        for _ in range(args.passes):
            plans(state, NOW, memo=memo)
        per_pass = (time.process_time() - start) / args.passes
        print(f"  {label:17} {per_pass * 1000:7.1f} ms CPU per pass; every 5 s: {per_pass * 6:.3f} CPU s in 30 s")


if __name__ == "__main__":
    main()
