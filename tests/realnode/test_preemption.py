"""Preemption for devices on a real node: a running low-priority pod holds all the node's devices;
a high-priority pod asking for them makes draxr evict it. kubelet stops it, the DRA plugin
unprepares its claim, draxr releases the claim, and the preemptor's container is given the same
devices (CDI, from the plugin). kube-scheduler 1.37 leaves such a pod Pending.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from draxr.app import Operator
from draxr.kube import EVENTS, PODS, RESOURCE_CLAIMS, Kube, Resource
from draxr_dev.devcluster.controlplane import ControlPlane
from draxr_dev.devcluster.realnode import RealNode

from ..integration.helpers import bound_with_status, eventually, get_or_none
from .test_kubelet_runs_pods import _draxr_env, _logs, container, env_key, node_pod

PRIORITY_CLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses", False)
RUNS_UNTIL_STOPPED = "trap 'exit 0' TERM; env | sort; while true; do sleep 1; done"
JSON = dict[str, Any]


@pytest.fixture
async def priorities(kube: Kube, names: str) -> AsyncIterator[tuple[str, str]]:
    made = []
    for suffix, value in (("low", 0), ("high", 100000)):
        name = f"{names}-{suffix}"
        body = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}}
        await kube.create(PRIORITY_CLASSES, {**body, "value": value})
        made.append(name)
    yield made[0], made[1]
    for name in made:
        await kube.delete_if_exists(PRIORITY_CLASSES, name)


def _devices(claim: JSON) -> list[str]:
    return sorted(r["device"] for r in claim["status"]["allocation"]["devices"]["results"])


async def test_a_high_priority_pod_takes_the_devices_of_a_running_low_priority_pod(
    kube: Kube,
    control_plane: ControlPlane,
    real_node: RealNode,
    operator: Operator,
    namespace: str,
    priorities: tuple[str, str],
) -> None:
    low_class, high_class = priorities
    count = real_node.options.devices
    low = node_pod("low", [container("main", count, RUNS_UNTIL_STOPPED)])
    low["spec"]["priorityClassName"] = low_class
    await kube.create(PODS, low, namespace)
    bound = await eventually(lambda: bound_with_status(kube, "low", namespace), timeout=120)
    low_claim_name = bound["status"]["extendedResourceClaimStatus"]["resourceClaimName"]
    low_claim = await kube.get(RESOURCE_CLAIMS, low_claim_name, namespace)

    async def running() -> bool:
        p = await kube.get(PODS, "low", namespace)
        return p["status"].get("phase") == "Running"

    await eventually(running, timeout=120)
    async def low_log() -> str | None:
        try:
            return await _logs(control_plane, namespace, "low", "main")
        except AssertionError:  # (not there yet)
            return None

    low_env = _draxr_env(await eventually(low_log, timeout=60))
    assert low_env, "the low-priority container saw its devices"

    high = node_pod("high", [container("main", count)])
    high["spec"]["priorityClassName"] = high_class
    await kube.create(PODS, high, namespace)

    async def succeeded() -> JSON | None:
        p = await kube.get(PODS, "high", namespace)
        return p if p["status"].get("phase") in ("Succeeded", "Failed") else None

    final = await eventually(succeeded, timeout=180)
    assert final["status"]["phase"] == "Succeeded", final["status"]
    assert final["spec"]["nodeName"] == real_node.name
    # The victim went: evicted by draxr, its claim released and unprepared.
    assert await get_or_none(kube, PODS, "low", namespace) is None
    events = await kube.list(EVENTS, namespace)
    preempted = [e for e in events if e["reason"] == "Preempted" and e["regarding"]["name"] == "low"]
    assert [e["note"] for e in preempted] == [f"Preempted by pod {final['metadata']['uid']} on node {real_node.name}"]
    uid = low_claim["metadata"]["uid"]
    unprepared = [e for e in real_node.plugin_events() if e["event"] == "unprepare" and e["claim"]["uid"] == uid]
    assert len(unprepared) == 1, real_node.plugin_events()
    # The preemptor's container was given exactly the devices the victim had.
    high_env = _draxr_env(await _logs(control_plane, namespace, "high", "main"))
    request = final["status"]["extendedResourceClaimStatus"]["requestMappings"][0]["requestName"]
    low_request = bound["status"]["extendedResourceClaimStatus"]["requestMappings"][0]["requestName"]
    assert high_env[f"DRAXR_DEVICES_{env_key(request)}"] == ",".join(_devices(low_claim))
    assert low_env[f"DRAXR_DEVICES_{env_key(low_request)}"] == ",".join(_devices(low_claim))
