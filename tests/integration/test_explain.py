"""`draxr explain`: per-node reasons for a pending pod, devices and mappings for a bound one."""

from __future__ import annotations

from typing import Any

from draxr.app import Operator
from draxr.explain import explain
from draxr.kube import PODS, Kube
from draxr_dev.devcluster import fakedriver

from .helpers import SCHEDULER, bound_with_status, eventually, pod


async def test_explain_pending_and_bound(kube: Kube, operator: Operator, namespace: str, names: str) -> None:
    ext = f"{names}.example.com/gpu"
    fleet = fakedriver.Fleet(
        prefix=names,
        dra_nodes=2,
        devices_per_node=2,
        driver=f"{names}.example.com",
        classes={f"{names}-gpu": ext},
        node_taints=[],
    )
    objs = fleet.manifests()
    tainted = next(o for o in objs if o["kind"] == "Node" and o["metadata"]["name"].endswith("-1"))
    tainted["spec"]["taints"] = [{"key": "maintenance", "value": "yes", "effect": "NoSchedule"}]
    await fakedriver.apply(kube, objs)
    try:
        await fakedriver.wait_nodes_ready(kube, fleet.node_names())
        await kube.create(PODS, pod("small", {ext: "1"}, scheduler=SCHEDULER), namespace)
        await eventually(lambda: bound_with_status(kube, "small", namespace))
        bound_text = await explain(kube, namespace, "small")
        assert f"is bound to node {names}-0" in bound_text
        assert f"{fleet.driver} {names}-0/gpu-0" in bound_text
        assert f"container main: {ext} -> container-0-request-0" in bound_text

        # Hold the pod back from the operator with a scheduling gate: explain works on any pending pod.
        body: dict[str, Any] = pod("big", {ext: "2"}, scheduler=SCHEDULER)
        body["spec"]["schedulingGates"] = [{"name": "draxr.io/test-hold"}]
        await kube.create(PODS, body, namespace)
        text = await explain(kube, namespace, "big")
        assert "pod " + namespace + "/big is not bound" in text
        assert f"{names}-0: cannot allocate all claims: 2 device(s) of class {names}-gpu requested, only 1 free" in text
        assert f"{names}-1: node(s) had untolerated taint(s)" in text
    finally:
        await fakedriver.delete(kube, objs)
