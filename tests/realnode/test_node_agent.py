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

from draxr.kube import PODS, ApiException, Kube
from draxr.node_agent import RECORDS
from draxr_dev.devcluster.controlplane import ControlPlane, free_port
from draxr_dev.devcluster.realnode import RealNode

from ..integration.helpers import eventually
from ..integration.test_node_agent import (
    AGENT,
    agent_command,
    install_component,
    pod_bound_token,
    remove_component,
    start_agent,
    write_sa_dir,
)
from .test_kubelet_runs_pods import SIDECAR, _logs, container, node_pod

JSON = dict[str, Any]


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
