"""`draxr explain`: per-node reasons for a pending pod, devices and mappings for a bound one."""

from __future__ import annotations

from draxr.app import Operator
from draxr.explain import explain
from draxr.kube import Kube

from .helpers import explain_scenario


async def test_explain_pending_and_bound(kube: Kube, operator: Operator, namespace: str, names: str) -> None:
    async with explain_scenario(kube, namespace, names) as ext:
        bound_text = await explain(kube, namespace, "small")
        assert f"is bound to node {names}-0" in bound_text
        assert f"{names}.example.com {names}-0/gpu-0" in bound_text
        assert f"container main: {ext} -> container-0-request-0" in bound_text

        # "big" is held back from the operator with a scheduling gate: explain works on any pending pod.
        text = await explain(kube, namespace, "big")
        assert "pod " + namespace + "/big is not bound" in text
        assert f"{names}-0: cannot allocate all claims: 2 device(s) of class {names}-gpu requested, only 1 free" in text
        assert f"{names}-1: node(s) had untolerated taint(s)" in text
