"""The real node's device plugin: a pod asking for a device-plugin-served name runs with the plugin's
devices, through draxr and through kube-scheduler alike, and gets no special claim (allocatable
serves the name on this node, not DRA)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from draxr.app import Operator
from draxr.kube import DEVICE_CLASSES, PODS, RESOURCE_CLAIMS, Kube
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


async def test_a_mixed_node_serves_a_name_by_device_plugin_then_by_dra_when_the_plugin_stops(
    kube: Kube, control_plane: ControlPlane, real_node: RealNode, operator: Operator, namespace: str
) -> None:
    """One name served both ways on one node: a DeviceClass maps the device plugin's resource name to
    the DRA plugin's devices. While the device plugin advertises it (allocatable > 0), draxr binds
    without a claim and kubelet's device manager hands out a plugin device, as kube-scheduler does;
    once the plugin is gone (allocatable 0) the next pod gets a special claim on the same node."""
    resource = real_node.options.device_plugin_resource
    mixed = "draxr-real-mixed"
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": mixed},
        "spec": {
            "extendedResourceName": resource,
            "selectors": [{"cel": {"expression": f'device.driver == "{realnode.DRIVER}"'}}],
        },
    }
    await kube.create(DEVICE_CLASSES, body)
    try:
        plugin = await _run(kube, control_plane, namespace, "by-plugin", resource)
        assert "extendedResourceClaimStatus" not in plugin.pod["status"]
        assert plugin.claims == []
        assert "DRAXR_DP_DEVICES" in plugin.env
        assert not [k for k in plugin.env if k.startswith("DRAXR_CLAIM")]

        real_node.stop_device_plugin()
        try:
            dra = await _run(kube, control_plane, namespace, "by-dra", resource)
        finally:
            real_node.start_device_plugin()
        status = dra.pod["status"]["extendedResourceClaimStatus"]
        assert status["requestMappings"] == [
            {"containerName": "main", "resourceName": resource, "requestName": "container-0-request-0"}
        ]
        assert dra.pod["spec"]["nodeName"] == realnode.REAL_NODE_NAME
        assert "DRAXR_DP_DEVICES" not in dra.env
        assert dra.env["DRAXR_CLAIM"].split("/")[1] == status["resourceClaimName"]
        assert len(dra.env["DRAXR_DEVICES_CONTAINER_0_REQUEST_0"].split(",")) == 1
    finally:
        await kube.delete_if_exists(DEVICE_CLASSES, mixed)


@dataclass
class _Ran:
    pod: JSON
    env: dict[str, str]
    claims: list[JSON]  # the special claims of the namespace while the pod ran


async def _run(kube: Kube, cp: ControlPlane, namespace: str, name: str, resource: str) -> _Ran:
    body = node_pod(name, [container("main", 0, "env | sort; sleep 2")])
    body["spec"]["containers"][0]["resources"] = {"limits": {resource: "1"}}
    await kube.create(PODS, body, namespace)

    async def running_or_done() -> JSON | None:
        p = await kube.get(PODS, name, namespace)
        return p if p["status"].get("phase") in ("Running", "Succeeded", "Failed") else None

    await eventually(running_or_done, timeout=120)
    claims = await kube.list(RESOURCE_CLAIMS, namespace)

    async def finished() -> JSON | None:
        p = await kube.get(PODS, name, namespace)
        return p if p["status"].get("phase") in ("Succeeded", "Failed") else None

    final = await eventually(finished, timeout=120)
    assert final["status"]["phase"] == "Succeeded", final["status"]
    log = await _logs(cp, namespace, name, "main")
    env = dict(line.split("=", 1) for line in log.splitlines() if line.startswith("DRAXR_"))
    return _Ran(final, env, claims)
