"""Pods of a PodGroup (``spec.schedulingGroup``, the GenericWorkload gate: beta and off by default
in 1.37): kube-scheduler places a group all or nothing (GangScheduling); draxr does not place such
pods one by one yet (issue 36), where they would hold devices while their peers wait. On a 1.37
control plane with the gate on, a group's pod named for draxr stays Pending with an Event naming
the field and gets no claim, while a pod without a group on the same node is bound."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from draxr.kube import EVENTS, NAMESPACES, PODS, RESOURCE_CLAIMS
from draxr_dev.devcluster.controlplane import ControlPlane, Options

from .clusters import extra_control_plane
from .embedded import embedded_operator, fast_settings
from .helpers import SCHEDULER, eventually, gpus, pod

REFUSED = "draxr does not support spec.schedulingGroup (gang scheduling) yet"


@pytest.fixture(scope="module")
def gang_cluster() -> Iterator[ControlPlane]:
    with extra_control_plane("gang", Options(scheduler=False, kwok=True, feature_gates="GenericWorkload=true")) as cp:
        yield cp


async def test_a_pod_group_member_is_not_placed_alone(gang_cluster: ControlPlane, names: str) -> None:
    settings = fast_settings(kubeconfig=str(gang_cluster.kubeconfig), scheduler_name=SCHEDULER)
    async with embedded_operator(settings) as (kube, _):
        await kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": names}})
        async with gpus(kube, names) as resource:
            member = pod("worker-0", {resource: "1"}, scheduler=SCHEDULER)
            member["spec"]["schedulingGroup"] = {"podGroupName": "train"}
            created = await kube.create(PODS, member, names)
            assert created["spec"].get("schedulingGroup") == {"podGroupName": "train"}  # the gate kept it
            await kube.create(PODS, pod("solo", {resource: "1"}, scheduler=SCHEDULER), names)

            async def solo_bound() -> bool:
                return bool((await kube.get(PODS, "solo", names))["spec"].get("nodeName"))

            await eventually(solo_bound)

            async def refused() -> list[dict[str, Any]]:
                events = await kube.list(EVENTS, names, fieldSelector="regarding.name=worker-0")
                return [e for e in events if e.get("reason") == "FailedScheduling" and REFUSED in e.get("note", "")]

            assert await eventually(refused)
            got = await kube.get(PODS, "worker-0", names)
            assert not got["spec"].get("nodeName")
            [condition] = [c for c in got["status"].get("conditions") or () if c["type"] == "PodScheduled"]
            assert (condition["status"], condition.get("reason"), condition.get("message")) == (
                "False",
                "Unschedulable",
                REFUSED,
            )
            owners = {
                r["name"] for c in await kube.list(RESOURCE_CLAIMS, names) for r in c["metadata"]["ownerReferences"]
            }
            assert owners == {"solo"}
