"""The real node's device plugin: a pod asking for a device-plugin-served name runs with the plugin's
devices, through draxr and through kube-scheduler alike, and gets no special claim (allocatable
serves the name on this node, not DRA)."""

from __future__ import annotations

import pytest

from draxr.app import Operator
from draxr.kube import PODS, RESOURCE_CLAIMS, Kube
from draxr_dev.devcluster import realnode
from draxr_dev.devcluster.controlplane import ControlPlane
from draxr_dev.devcluster.realnode import RealNode

from ..integration.helpers import eventually
from .test_kubelet_runs_pods import JSON, _logs, container, env_key, node_pod


@pytest.mark.parametrize("scheduler", ["draxr", "default-scheduler"])
async def test_device_plugin_devices_reach_the_container(
    kube: Kube,
    control_plane: ControlPlane,
    real_node: RealNode,
    operator: Operator,
    namespace: str,
    scheduler: str,
) -> None:
    resource = real_node.options.device_plugin_resource
    assert real_node.allocatable(resource) == real_node.options.device_plugin_devices
    before = len(real_node.plugin_events("deviceplugin"))
    body = node_pod("dp", [container("main", 0)], scheduler=scheduler)
    body["spec"]["containers"][0]["resources"] = {"limits": {resource: "2"}}
    await kube.create(PODS, body, namespace)

    async def finished() -> JSON | None:
        p = await kube.get(PODS, "dp", namespace)
        return p if p["status"].get("phase") in ("Succeeded", "Failed") else None

    final = await eventually(finished, timeout=120)
    assert final["status"]["phase"] == "Succeeded", final["status"]
    assert final["spec"]["nodeName"] == realnode.REAL_NODE_NAME
    assert "extendedResourceClaimStatus" not in final["status"]
    assert await kube.list(RESOURCE_CLAIMS, namespace) == []
    log = await _logs(control_plane, namespace, "dp", "main")
    env = dict(line.split("=", 1) for line in log.splitlines() if line.startswith("DRAXR_"))
    ids = env["DRAXR_DP_DEVICES"].split(",")
    assert len(ids) == 2
    per_device = {k: v for k, v in env.items() if k.startswith("DRAXR_DP_DEVICE_")}
    assert per_device == {f"DRAXR_DP_DEVICE_{env_key(i)}": i for i in ids}
    assert not [k for k in env if k.startswith(("DRAXR_CLAIM", "DRAXR_DEVICES_"))]  # no DRA device
    allocations = real_node.plugin_events("deviceplugin")[before:]
    assert [a["devices"] for a in allocations] == [sorted(ids)]
