"""``draxr node-agent`` against a real kubelet's pod-resources API (the real node's socket
``<kubelet root>/pod-resources/kubelet.sock``): a running pod holding two devices of our device
plugin appears in the node's DevicePluginRecord with the IDs its container got, and stays there
after the device plugin stops (kubelet keeps the pod's devices in its checkpoint while the pod
runs: what issue 27's adoption relies on); once the pod is gone, so is its entry.

The agent runs on the host (as root: the socket is root's), in-cluster with a ServiceAccount token
bound to a real pod on the node, under the component's RBAC and admission policy."""

from __future__ import annotations

import asyncio
import datetime as dt
import signal
import subprocess
from pathlib import Path
from typing import Any

from draxr import __version__
from draxr.kube import NODES, PODS, ApiException, Kube, Resource
from draxr.node_agent import RECORDS
from draxr_dev.devcluster import realnode
from draxr_dev.devcluster.binaries import ensure_image
from draxr_dev.devcluster.controlplane import ControlPlane, free_port
from draxr_dev.devcluster.realnode import RealNode

from ..integration.helpers import eventually
from ..integration.test_node_agent import (
    AGENT,
    agent_command,
    component_objects,
    install_component,
    pod_bound_token,
    remove_component,
    start_agent,
    write_sa_dir,
)
from .test_kubelet_runs_pods import SIDECAR, _logs, container, node_pod

JSON = dict[str, Any]
IMAGE = f"ghcr.io/draxr/draxr:{__version__}"


async def test_agent_publishes_what_the_real_kubelet_reports_and_keeps_it_after_the_plugin_stops(
    kube: Kube, control_plane: ControlPlane, real_node: RealNode, namespace: str, names: str, tmp_path: Path
) -> None:
    cp, node = control_plane, real_node.name
    resource = real_node.options.device_plugin_resource
    socket = real_node.kubelet_root / "pod-resources" / "kubelet.sock"
    assert socket.is_socket(), socket
    objs = await asyncio.to_thread(install_component, cp)
    agent: subprocess.Popen[bytes] | None = None
    plugin_stopped = False
    log = tmp_path / "node-agent.log"
    agent_pod = f"{names}-agent"
    try:
        # A pod holding two of the device plugin's devices, running until deleted.
        holder = node_pod("holder", [container("main", 0, SIDECAR)], scheduler="default-scheduler")
        holder["spec"]["nodeName"] = node
        holder["spec"]["containers"][0]["resources"] = {"limits": {resource: "2"}}
        await kube.create(PODS, holder, namespace)

        async def device_ids() -> list[str] | None:
            p = await kube.get(PODS, "holder", namespace)
            if p["status"].get("phase") != "Running":
                return None
            env = dict(
                line.split("=", 1)
                for line in (await _logs(cp, namespace, "holder", "main")).splitlines()
                if line.startswith("DRAXR_DP_DEVICES=")
            )
            return sorted(env["DRAXR_DP_DEVICES"].split(",")) if env else None

        ids = await eventually(device_ids, timeout=120)
        assert len(ids) == 2

        # The agent, with a token bound to a real pod on the node (busybox, sleeping).
        sleeper = node_pod(agent_pod, [container("agent", 0, SIDECAR)], scheduler="default-scheduler")
        token = await pod_bound_token(kube, node, agent_pod, sleeper["spec"])
        sa_dir = await asyncio.to_thread(write_sa_dir, cp, tmp_path / "sa", token)
        cmd, env = agent_command(cp, sa_dir, node, socket, free_port(), refresh=2)
        agent = start_agent(cmd, env, log)

        async def holders(want: bool, after: str = "") -> JSON | None:
            assert agent is not None
            assert agent.poll() is None, log.read_text()
            try:
                rec = await kube.get(RECORDS, node)
            except ApiException as e:
                if e.status == 404:
                    return None
                raise
            if rec["spec"]["observedTime"] <= after:
                return None
            listed = [p for p in rec["spec"]["pods"] if (p["namespace"], p["name"]) == (namespace, "holder")]
            return rec if bool(listed) is want else None

        rec = await eventually(lambda: holders(True), timeout=60)
        [entry] = [p for p in rec["spec"]["pods"] if p["namespace"] == namespace]
        assert entry["containers"] == [{"name": "main", "devices": [{"resourceName": resource, "deviceIDs": ids}]}]

        # The device plugin stops (allocatable 0): the running pod keeps its devices, and kubelet
        # keeps reporting them; the agent's next refreshes still list them.
        await asyncio.to_thread(real_node.stop_device_plugin)
        plugin_stopped = True
        stopped = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        rec = await eventually(lambda: holders(True, after=stopped), timeout=30)
        [entry] = [p for p in rec["spec"]["pods"] if p["namespace"] == namespace]
        assert entry["containers"][0]["devices"] == [{"resourceName": resource, "deviceIDs": ids}]

        # The pod goes: its entry goes.
        await kube.delete(PODS, "holder", namespace)
        await eventually(lambda: holders(False), timeout=60)
        agent.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(agent.wait, 20) == 0, log.read_text()
    finally:
        if agent is not None and agent.poll() is None:
            agent.kill()
            agent.wait()
        if plugin_stopped:
            await asyncio.to_thread(real_node.start_device_plugin)
        await kube.delete_if_exists(PODS, agent_pod, AGENT)
        await kube.delete_if_exists(RECORDS, node)
        await asyncio.to_thread(remove_component, cp, objs)


DAEMONSETS = Resource("apps", "v1", "daemonsets", True)


def _daemonset_here(cp: ControlPlane, node: RealNode) -> JSON:
    """The component's DaemonSet with what this loopback-only machine needs, nothing else:
    hostNetwork (the node's CNI is loopback-only) with the API server's loopback address in
    KUBERNETES_SERVICE_HOST/PORT, the real node's kubelet root for the socket's hostPath, this node
    only (the kwok nodes have no kubelet) with its taint tolerated, the refresh at 2 s, a free health
    port and no HTTP probe (kubelet would probe the node's address)."""
    [ds] = [o for o in component_objects() if o["kind"] == "DaemonSet"]
    pod = ds["spec"]["template"]["spec"]
    pod["hostNetwork"] = True
    pod["nodeSelector"] = {"kubernetes.io/hostname": node.name}
    pod["tolerations"].append(realnode.TOLERATION)
    [c] = pod["containers"]
    assert c["image"] == IMAGE
    c["env"] += [
        {"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
        {"name": "KUBERNETES_SERVICE_PORT", "value": str(cp.ports["api"])},
    ]
    c["args"] = [
        "--refresh-seconds=2",
        "--poll-seconds=0.5",
        f"--health-port={free_port()}",
        "--bind-address=127.0.0.1",
    ]
    del c["livenessProbe"]
    del c["ports"]
    [volume] = [v for v in pod["volumes"] if v["name"] == "pod-resources"]
    volume["hostPath"]["path"] = str(node.kubelet_root / "pod-resources")
    return ds


async def test_the_daemonset_runs_the_agent_from_the_image_on_the_node(
    kube: Kube, control_plane: ControlPlane, real_node: RealNode, namespace: str, tmp_path: Path
) -> None:
    """The component's DaemonSet as kubelet runs it (the image, uid 0 with no capability, a read-only
    root, the pod-resources directory by hostPath, the projected pod-bound token): its record lists
    the running pod's device-plugin devices, and is owned by the Node."""
    cp, node = control_plane, real_node.name
    resource = real_node.options.device_plugin_resource
    archive = await asyncio.to_thread(ensure_image)
    assert IMAGE in await asyncio.to_thread(real_node.import_image, archive)
    objs = await asyncio.to_thread(install_component, cp)
    try:
        holder = node_pod("holder", [container("main", 0, SIDECAR)], scheduler="default-scheduler")
        holder["spec"]["nodeName"] = node
        holder["spec"]["containers"][0]["resources"] = {"limits": {resource: "2"}}
        await kube.create(PODS, holder, namespace)
        await kube.create(DAEMONSETS, _daemonset_here(cp, real_node), AGENT)

        async def listed() -> JSON | None:
            try:
                rec = await kube.get(RECORDS, node)
            except ApiException as e:
                if e.status == 404:
                    return None
                raise
            mine = [p for p in rec["spec"]["pods"] if (p["namespace"], p["name"]) == (namespace, "holder")]
            return rec if mine else None

        rec = await eventually(listed, timeout=120)
        [entry] = [p for p in rec["spec"]["pods"] if p["namespace"] == namespace]
        [ctr] = entry["containers"]
        assert ctr["name"] == "main"
        [devices] = ctr["devices"]
        assert devices["resourceName"] == resource
        assert len(devices["deviceIDs"]) == 2
        assert rec["spec"]["agentVersion"] == __version__
        node_uid = (await kube.get(NODES, node))["metadata"]["uid"]
        assert rec["metadata"]["ownerReferences"][0]["uid"] == node_uid
        [agent] = await kube.list(PODS, AGENT, labelSelector="app.kubernetes.io/component=node-agent")
        assert agent["spec"]["nodeName"] == node
        [status] = agent["status"]["containerStatuses"]
        assert status["ready"], status
        assert status["restartCount"] == 0, status
        # It keeps refreshing (every 2 s): the process is alive in its container.
        first = rec["spec"]["observedTime"]

        async def refreshed() -> bool:
            return bool((await kube.get(RECORDS, node))["spec"]["observedTime"] > first)

        await eventually(refreshed, timeout=30)
    finally:
        await kube.delete_if_exists(DAEMONSETS, "draxr-node-agent", AGENT)
        await kube.delete_if_exists(PODS, "holder", namespace)

        async def gone() -> bool:
            return not await kube.list(PODS, AGENT, labelSelector="app.kubernetes.io/component=node-agent")

        await eventually(gone, timeout=120)
        await kube.delete_if_exists(RECORDS, node)
        await asyncio.to_thread(remove_component, cp, objs)
