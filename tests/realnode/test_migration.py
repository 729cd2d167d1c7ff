"""Device plugin → DRA on the real node (issue 27): kubelet and containerd, our device plugin and our
DRA plugin publishing the same devices with the same identities (the device plugin's ID of device
i is ``dev-i``; the DRA plugin publishes it as device ``gpu-i``'s attribute ``uuid``).

A pod runs with two of the device plugin's devices; the device plugin stops (allocatable 0); a
DeviceClass maps the device plugin's name to the DRA plugin's devices of the same identities
(``index < 4``: the devices the device plugin served) and declares the identity attribute; the
node agent (``draxr node-agent`` on the host, as tests/realnode/test_node_agent.py runs it) reads
kubelet's pod-resources API and publishes the pod's IDs; the session operator's migrator writes
the adoption claim. New pods from draxr and from kube-scheduler then fill the node with the other
devices only, one more from each stays Pending, and once the old pod's container exits its
devices are handed out. Every look at the cluster checks every ResourceClaim: while the old pod
is there and not finished, its devices appear in no claim but its adoption claim.

The old pod is scheduled by draxr (not bound by nodeName): a device-plugin pod on a real cluster
went through a scheduler, and draxr, which later hands out the DRA devices, is the one under test
here; it binds such a pod without any claim (allocatable serves the name).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import signal
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from draxr import kubectl_plugin
from draxr.app import Operator
from draxr.core.migration import ADOPTION_LABEL, FENCE_NODE_ANNOTATION, ID_ATTRIBUTE_ANNOTATION
from draxr.core.plugins.dynamic_resources import NOT_ADOPTED
from draxr.core.plugins.node_resources_fit import DRA_HOLDS_DEVICES
from draxr.kube import DEVICE_CLASSES, EVENTS, PODS, RESOURCE_CLAIMS, RESOURCE_SLICES, Kube
from draxr.leader import LEASES
from draxr.migrator import DEVICE_TAINT_RULES, FENCE_SELECTOR
from draxr.node_agent import RECORDS
from draxr_dev.devcluster import realnode
from draxr_dev.devcluster.controlplane import ControlPlane, free_port
from draxr_dev.devcluster.realnode import RealNode

from ..integration.clusters import service_account_dir
from ..integration.embedded import OperatorThread
from ..integration.helpers import NAMESPACE, SCHEDULER, Draxr, eventually, get_or_none
from ..integration.test_node_agent import (
    AGENT,
    agent_command,
    install_component,
    pod_bound_token,
    remove_component,
    start_agent,
    write_sa_dir,
)
from .test_kubelet_runs_pods import SIDECAR, _draxr_env, _logs, container, node_pod

JSON = dict[str, Any]
OLD_DEVICES = 2
# The old pod's container runs until the test creates the file /signal/finish (a hostPath of the
# test's own directory), then exits 0: the pod Succeeds, as a finished job does.
UNTIL_FINISHED = "trap 'exit 0' TERM; env | sort; while [ ! -e /signal/finish ]; do sleep 1; done"
# The replicas' Lease, short: the standby takes over a few seconds after the leader is killed.
FAST_LEASE = ["--lease-duration-seconds", "6", "--renew-deadline-seconds", "4", "--retry-period-seconds", "1"]
# A container that, asked to stop, goes on using its devices for a while (saving its work).
SLOW_TO_STOP = "trap 'sleep 15; exit 0' TERM; env | sort; while true; do sleep 1; done"


@dataclass
class Watcher:
    """Every look at the cluster lists every ResourceClaim, then reads the old pod: while it is
    there and not finished (read after the list), a claim holding one of its devices other than its
    adoption claim is a device handed out twice."""

    kube: Kube
    node: str
    namespace: str
    old_uid: str = ""
    held: frozenset[str] = frozenset()  # the old pod's devices, as DRA names them
    looks: int = 0
    claims: list[JSON] = field(default_factory=list)

    async def look(self) -> list[JSON]:
        claims = await self.kube.list(RESOURCE_CLAIMS)
        old = await get_or_none(self.kube, PODS, "old", self.namespace)
        self.looks += 1
        self.claims = claims
        if not self.held or old is None or old["status"].get("phase") in ("Succeeded", "Failed"):
            return claims
        for c in claims:
            mine = set(_devices(c, self.node)) & self.held
            if not mine or _is_adoption_of(c, self.old_uid):
                continue
            states = [s.get("state") for s in old["status"].get("containerStatuses") or []]
            pytest.fail(
                f"device(s) {sorted(mine)} of pod {self.namespace}/old (phase {old['status'].get('phase')}, "
                f"deletionTimestamp {old['metadata'].get('deletionTimestamp')}, containers {states}) are "
                f"in claim {c['metadata']['namespace']}/{c['metadata']['name']}: {c.get('status')}"
            )
        return claims

    def adoption(self) -> list[JSON]:
        return [c for c in self.claims if _is_adoption_of(c, self.old_uid)]

    async def pending(self, name: str) -> bool:
        await self.look()
        return not (await self.kube.get(PODS, name, self.namespace))["spec"].get("nodeName")


class Agent:
    """``draxr node-agent`` on the host, as its DaemonSet's pod would run it; restartable."""

    def __init__(self, cmd: list[str], env: dict[str, str], log: Path) -> None:
        self.cmd, self.env, self.log = cmd, env, log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = start_agent(self.cmd, self.env, self.log)

    def check(self) -> None:
        assert self.proc is not None
        assert self.proc.poll() is None, self.log.read_text()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    async def stop(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(self.proc.wait, 20) == 0, self.log.read_text()


@dataclass
class Moved:
    """What the move leaves: the old pod running with its devices adopted, the node full."""

    w: Watcher
    agent: Agent
    resource: str
    claim: JSON  # the adoption claim, as first seen allocated
    signal_dir: Path
    taken: dict[str, str]  # pod -> its one device
    recorded: list[JSON]  # the old pod's containers in the node's record


def _devices(claim: JSON, node: str) -> list[str]:
    """The claim's allocated devices of the real node's DRA plugin."""
    results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
    return sorted(r["device"] for r in results if r["driver"] == realnode.DRIVER and r["pool"] == node)


def _is_adoption_of(claim: JSON, uid: str) -> bool:
    meta = claim["metadata"]
    owners = [o["uid"] for o in meta.get("ownerReferences") or []]
    return bool((meta.get("labels") or {}).get(ADOPTION_LABEL)) and owners == [uid]


def _pod(name: str, resource: str, count: int, scheduler: str, command: str = SIDECAR) -> JSON:
    body = node_pod(name, [container("main", 0, command)], scheduler=scheduler)
    body["spec"]["containers"][0]["resources"] = {"limits": {resource: str(count)}}
    return body


async def _uuids(kube: Kube, node: str) -> dict[str, str]:
    """The DRA plugin's devices on the node by their ``uuid`` attribute."""
    selector = f"spec.nodeName={node},spec.driver={realnode.DRIVER}"
    out = {}
    for s in await kube.list(RESOURCE_SLICES, fieldSelector=selector):
        for d in s["spec"].get("devices") or []:
            out[d["attributes"]["uuid"]["string"]] = d["name"]
    return out


async def _log_env(cp: ControlPlane, namespace: str, name: str, key: str) -> dict[str, str]:
    """The pod's DRAXR_* variables, once its log shows ``key``."""

    async def printed() -> dict[str, str] | None:
        try:
            env = _draxr_env(await _logs(cp, namespace, name, "main"))
        except AssertionError:  # (no log yet)
            return None
        return env if any(k.startswith(key) for k in env) else None

    return dict(await eventually(printed, timeout=120))


async def _failed_scheduling(kube: Kube, namespace: str, name: str, w: Watcher) -> list[str]:
    await w.look()
    events = await kube.list(EVENTS, namespace)
    return [e["note"] for e in events if e["reason"] == "FailedScheduling" and e["regarding"]["name"] == name]


async def _placed(kube: Kube, cp: ControlPlane, w: Watcher, name: str) -> str:
    """The one device the pod's claim holds once it is bound, checked against what its container
    printed (and no device-plugin device)."""
    namespace = w.namespace

    async def bound() -> str | None:
        await w.look()
        p = await kube.get(PODS, name, namespace)
        status = p["status"].get("extendedResourceClaimStatus")
        if not p["spec"].get("nodeName") or not status:
            return None
        key = (namespace, status["resourceClaimName"])
        claim = next((c for c in w.claims if (c["metadata"]["namespace"], c["metadata"]["name"]) == key), None)
        devices = _devices(claim, w.node) if claim else []
        return devices[0] if len(devices) == 1 else None

    device = str(await eventually(bound, timeout=90))
    env = await _log_env(cp, namespace, name, "DRAXR_DEVICES_")
    assert [v for k, v in env.items() if k.startswith("DRAXR_DEVICES_")] == [device], env
    assert "DRAXR_DP_DEVICES" not in env
    return device


@asynccontextmanager
async def _moved(
    kube: Kube,
    cp: ControlPlane,
    real_node: RealNode,
    namespace: str,
    names: str,
    tmp_path: Path,
    old_command: str,
    *,
    keep_kube_scheduler_pending: bool = False,
) -> AsyncIterator[Moved]:
    """Steps 1-4 of the move (see the module's docstring), checked; undone on the way out: the pods
    gone, the DeviceClass deleted, the device plugin serving again, the node's ResourceSlice there,
    the agent and its objects gone. ``keep_kube_scheduler_pending``: leave "late-kube-scheduler"
    pending too (else it is deleted: only draxr's "late" waits for the old pod's devices)."""
    node, resource, served, w, signal_dir, dra_class, objs = await _scene(
        kube, cp, real_node, namespace, names, tmp_path
    )
    agent: Agent | None = None
    plugin_stopped = False
    try:
        # 1. The device plugin serves the name: draxr binds "old" (no claim), kubelet's device
        # manager gives it two devices, its container prints their IDs and keeps running.
        ids = await _old_pod(kube, cp, w, resource, signal_dir, old_command)

        # 2. The device plugin stops (allocatable 0; the pod keeps its devices); DRA serves the name
        # with the same devices: a DeviceClass of the DRA plugin's devices the device plugin served,
        # with the identity attribute. The DRA plugin's devices of those IDs are the old pod's.
        await asyncio.to_thread(real_node.stop_device_plugin)
        plugin_stopped = True
        by_uuid = await _uuids(kube, node)
        assert {f"dev-{i}" for i in range(served)} <= set(by_uuid), by_uuid
        w.held = frozenset(by_uuid[i] for i in ids)
        await _device_class(kube, dra_class, resource, served)
        # No record yet: draxr hands out none of the class's devices on the node.
        await kube.create(PODS, _pod("early", resource, 1, "draxr"), namespace)

        await _waits_for_adoption(kube, w, "early")
        assert await w.pending("early")

        # 3. The node agent publishes what kubelet reports: "old" with its IDs; the migrator writes
        # the adoption claim, allocated with exactly the devices whose uuid is one of those IDs.
        agent = await _agent(kube, cp, real_node, names, tmp_path)
        recorded = await eventually(lambda: _recorded(w, agent), timeout=60)
        assert recorded == [{"name": "main", "devices": [{"resourceName": resource, "deviceIDs": ids}]}]
        claim = await eventually(lambda: _adopted(w), timeout=60)
        assert len(w.adoption()) == 1
        assert _devices(claim, node) == sorted(w.held)
        assert len(claim["status"]["allocation"]["devices"]["results"]) == OLD_DEVICES
        assert claim["metadata"]["namespace"] == namespace
        assert claim["status"]["reservedFor"][0]["resource"] == "devicepluginrecords"

        # 4. Fill the node, one pod after the other (two schedulers allocating on one node at the
        # same moment can race each other, migration or not): "early" (draxr, waiting until now)
        # and "by-kube-scheduler" take the other devices, and their containers get exactly those.
        free = {by_uuid[f"dev-{i}"] for i in range(served)} - w.held
        taken: dict[str, str] = {}
        for name, scheduler in (("early", "draxr"), ("by-kube-scheduler", "default-scheduler")):
            if name != "early":
                await kube.create(PODS, _pod(name, resource, 1, scheduler), namespace)
            taken[name] = await _placed(kube, cp, w, name)
        assert set(taken.values()) == free, taken
        # Full: one more pod from each scheduler stays Pending, and kube-controller-manager leaves
        # the adoption claim as it is.
        await kube.create(PODS, _pod("late", resource, 1, "draxr"), namespace)
        await kube.create(PODS, _pod("late-kube-scheduler", resource, 1, "default-scheduler"), namespace)
        for name in ("late", "late-kube-scheduler"):
            await eventually(lambda n=name: _failed_scheduling(kube, namespace, n, w), timeout=60)  # type: ignore[misc]
        await asyncio.sleep(10)
        for name in ("late", "late-kube-scheduler"):
            assert await w.pending(name), name
        assert [c["status"] for c in w.adoption()] == [claim["status"]]
        if not keep_kube_scheduler_pending:  # (two schedulers at once: see above)
            await kube.delete(PODS, "late-kube-scheduler", namespace)
        yield Moved(w, agent, resource, claim, signal_dir, taken, recorded)
    finally:
        await _undo(kube, cp, real_node, namespace, names, agent, dra_class, objs, plugin_stopped=plugin_stopped)


async def _scene(
    kube: Kube, cp: ControlPlane, real_node: RealNode, namespace: str, names: str, tmp_path: Path
) -> tuple[str, str, int, Watcher, Path, str, list[JSON]]:
    """What every flow starts from: the node, the device plugin's resource and device count (it
    serves them all), a Watcher, the old pod's signal directory, the DeviceClass's name, and the
    node agent's component installed (its objects, to remove)."""
    resource = real_node.options.device_plugin_resource
    served = real_node.options.device_plugin_devices
    assert real_node.allocatable(resource) == served
    signal_dir = tmp_path / "signal"
    signal_dir.mkdir()
    objs = await asyncio.to_thread(install_component, cp)
    w = Watcher(kube, real_node.name, namespace)
    return real_node.name, resource, served, w, signal_dir, f"{names}-dp", objs


async def _waits_for_adoption(kube: Kube, w: Watcher, name: str) -> None:
    """The pod is pending with the true reason: the node's device-plugin pods are not adopted yet."""

    async def not_adopted() -> list[str]:
        return [n for n in await _failed_scheduling(kube, w.namespace, name, w) if NOT_ADOPTED in n]

    await eventually(not_adopted, timeout=60)


async def _old_pod(
    kube: Kube, cp: ControlPlane, w: Watcher, resource: str, signal_dir: Path, command: str
) -> list[str]:
    """Step 1: draxr binds "old" (no claim: allocatable serves the name), kubelet's device manager
    gives it two devices, its container prints their IDs and runs until ``signal_dir/finish``."""
    namespace = w.namespace
    old = _pod("old", resource, OLD_DEVICES, "draxr", command)
    old["spec"]["terminationGracePeriodSeconds"] = 40
    old["spec"]["volumes"] = [{"name": "signal", "hostPath": {"path": str(signal_dir), "type": "Directory"}}]
    old["spec"]["containers"][0]["volumeMounts"] = [{"name": "signal", "mountPath": "/signal"}]
    w.old_uid = (await kube.create(PODS, old, namespace))["metadata"]["uid"]
    ids = sorted((await _log_env(cp, namespace, "old", "DRAXR_DP_DEVICES"))["DRAXR_DP_DEVICES"].split(","))
    assert len(ids) == OLD_DEVICES
    bound = await kube.get(PODS, "old", namespace)
    assert bound["spec"]["nodeName"] == w.node
    assert "extendedResourceClaimStatus" not in bound["status"]
    assert await kube.list(RESOURCE_CLAIMS, namespace) == []
    return ids


async def _device_class(kube: Kube, name: str, resource: str, served: int) -> None:
    """DRA serves the name with the device plugin's devices (index < served), identity ``uuid``."""
    selector = f'device.driver == "{realnode.DRIVER}" && device.attributes["{realnode.DRIVER}"].index < {served}'
    await kube.create(
        DEVICE_CLASSES,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": name, "annotations": {ID_ATTRIBUTE_ANNOTATION: "uuid"}},
            "spec": {"extendedResourceName": resource, "selectors": [{"cel": {"expression": selector}}]},
        },
    )


async def _agent(kube: Kube, cp: ControlPlane, real_node: RealNode, names: str, tmp_path: Path) -> Agent:
    """The node agent started on the host with a token bound to a pod on the node (its DaemonSet's)."""
    sleeper = node_pod(f"{names}-agent", [container("agent", 0, SIDECAR)], scheduler="default-scheduler")
    token = await pod_bound_token(kube, real_node.name, f"{names}-agent", sleeper["spec"])
    sa_dir = await asyncio.to_thread(write_sa_dir, cp, tmp_path / "sa", token)
    socket = real_node.kubelet_root / "pod-resources" / "kubelet.sock"
    cmd = agent_command(cp, sa_dir, real_node.name, socket, free_port(), refresh=2)
    agent = Agent(*cmd, tmp_path / "node-agent.log")
    agent.start()
    return agent


async def _undo(
    kube: Kube,
    cp: ControlPlane,
    real_node: RealNode,
    namespace: str,
    names: str,
    agent: Agent | None,
    dra_class: str,
    objs: list[JSON],
    *,
    plugin_stopped: bool,
) -> None:
    """The pods gone, the DeviceClass deleted, the device plugin serving again, the node's
    ResourceSlice there, the agent and its objects gone."""
    if agent is not None:
        agent.kill()
    for p in await kube.list(PODS, namespace):
        await kube.delete_if_exists(PODS, p["metadata"]["name"], namespace)

    async def pods_gone() -> bool:
        return not await kube.list(PODS, namespace)

    await eventually(pods_gone, timeout=120)
    for c in await kube.list(RESOURCE_CLAIMS, namespace):  # (the pods' own claims)
        await kube.delete_if_exists(RESOURCE_CLAIMS, c["metadata"]["name"], namespace)

    async def slice_back() -> bool:  # (kubelet wipes it when it starts; the plugin republishes)
        return len(await _uuids(kube, real_node.name)) == real_node.options.devices

    await eventually(slice_back, timeout=90)
    await kube.delete_if_exists(DEVICE_CLASSES, dra_class)
    if plugin_stopped:
        await asyncio.to_thread(real_node.start_device_plugin)
    await kube.delete_if_exists(PODS, f"{names}-agent", AGENT)
    await kube.delete_if_exists(RECORDS, real_node.name)
    await asyncio.to_thread(remove_component, cp, objs)


async def _recorded(w: Watcher, agent: Agent, after: str = "") -> list[JSON] | None:
    """The containers of "old" in the node's record, once it lists it (observed after ``after``)."""
    agent.check()
    await w.look()
    rec = await get_or_none(w.kube, RECORDS, w.node)
    if rec is None or rec["spec"]["observedTime"] <= after:
        return None
    pods = rec["spec"].get("pods") or []
    mine = [p["containers"] for p in pods if (p["namespace"], p["name"]) == (w.namespace, "old")]
    return mine[0] if mine else None


async def _adopted(w: Watcher) -> JSON | None:
    await w.look()
    claims = [c for c in w.adoption() if (c.get("status") or {}).get("allocation")]
    return claims[0] if claims else None


async def _hand_out(kube: Kube, cp: ControlPlane, m: Moved, pending: str = "late") -> None:
    """The old pod is finished: its adoption claim goes, the ``pending`` pod gets one of its
    devices, then a kube-scheduler pod the other; at the end no claim of the namespace is left
    once its pods are gone."""
    w = m.w

    async def released() -> bool:
        await w.look()
        return not w.adoption()

    await eventually(released, timeout=90)
    m.taken[pending] = await _placed(kube, cp, w, pending)
    await kube.create(PODS, _pod("last", m.resource, 1, "default-scheduler"), w.namespace)
    m.taken["last"] = await _placed(kube, cp, w, "last")
    assert {m.taken[pending], m.taken["last"]} == w.held, m.taken
    await m.agent.stop()
    for p in await kube.list(PODS, w.namespace):
        await kube.delete(PODS, p["metadata"]["name"], w.namespace)

    async def no_claim_left() -> bool:
        await w.look()
        return not await kube.list(RESOURCE_CLAIMS, w.namespace)

    await eventually(no_claim_left, timeout=120)
    print(f"\n[draxr] {w.looks} looks at every claim; devices {m.taken}")


@pytest.mark.timeout(600)
async def test_running_device_plugin_pods_keep_their_devices_when_the_node_moves_to_dra(
    kube: Kube,
    control_plane: ControlPlane,
    real_node: RealNode,
    operator: Operator,
    namespace: str,
    names: str,
    tmp_path: Path,
) -> None:
    async with _moved(kube, control_plane, real_node, namespace, names, tmp_path, UNTIL_FINISHED) as m:
        # 5. The old pod's container exits: the pod Succeeds and its devices are handed out.
        (m.signal_dir / "finish").touch()

        async def finished() -> JSON | None:
            await m.w.look()
            p = await kube.get(PODS, "old", namespace)
            return p if p["status"].get("phase") in ("Succeeded", "Failed") else None

        assert (await eventually(finished, timeout=60))["status"]["phase"] == "Succeeded"
        await _hand_out(kube, control_plane, m)


@pytest.mark.timeout(600)
async def test_the_agent_killed_and_restarted_mid_move_neither_frees_nor_leaks_a_device(
    kube: Kube,
    control_plane: ControlPlane,
    real_node: RealNode,
    operator: Operator,
    namespace: str,
    names: str,
    tmp_path: Path,
) -> None:
    """With the node full and a pod pending, the agent is killed (SIGKILL): its record goes stale,
    the adoption claim stays and nothing is handed out. A new agent finds the same pod and devices,
    and the same claim stays (not written again). The old pod then finishes: its devices are handed
    out, and no claim is left behind."""
    async with _moved(kube, control_plane, real_node, namespace, names, tmp_path, UNTIL_FINISHED) as m:
        w = m.w
        uid = m.claim["metadata"]["uid"]
        m.agent.kill()
        killed = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        loop = asyncio.get_running_loop()
        until = loop.time() + 15  # (the record, refreshed every 2 s, is stale after 6 s)
        while loop.time() < until:
            assert await w.pending("late")
            assert [c["metadata"]["uid"] for c in w.adoption()] == [uid]
            await asyncio.sleep(0.5)
        rec = await kube.get(RECORDS, real_node.name)
        assert rec["spec"]["observedTime"] <= killed

        m.agent.start()
        restarted = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        assert await eventually(lambda: _recorded(w, m.agent, after=restarted), timeout=60) == m.recorded
        until = loop.time() + 10  # (several passes of the migrator over the fresh record)
        while loop.time() < until:
            assert await w.pending("late")
            assert [c["metadata"]["uid"] for c in w.adoption()] == [uid]
            await asyncio.sleep(0.5)
        [claim] = w.adoption()
        assert claim["status"] == m.claim["status"]

        (m.signal_dir / "finish").touch()
        await _hand_out(kube, control_plane, m)


@pytest.mark.timeout(600)
async def test_a_kubelet_restart_mid_move_keeps_the_adoption_claim(
    kube: Kube,
    control_plane: ControlPlane,
    real_node: RealNode,
    operator: Operator,
    namespace: str,
    names: str,
    tmp_path: Path,
) -> None:
    """With the node full and a pod from each scheduler pending, kubelet restarts (the agent keeps
    running). The old pod keeps running with its devices, so its adoption claim must stay, the same
    object, all along: while kubelet's wipe of the node's ResourceSlice lasts and after the DRA
    plugin republished it; nothing is handed out."""
    async with _moved(
        kube, control_plane, real_node, namespace, names, tmp_path, UNTIL_FINISHED, keep_kube_scheduler_pending=True
    ) as m:
        w = m.w
        uid = m.claim["metadata"]["uid"]
        seen: list[tuple[float, int, list[str]]] = []  # (when, devices in the slice, adoption claims)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        start = loop.time()

        async def keep_looking() -> None:
            while not stop.is_set():
                await w.look()
                seen.append(
                    (
                        round(loop.time() - start, 1),
                        len(await _uuids(kube, w.node)),
                        [c["metadata"]["uid"] for c in w.adoption()],
                    )
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 0.5)

        looker = asyncio.create_task(keep_looking())
        try:
            await asyncio.to_thread(real_node.restart_kubelet)
            # kubelet deletes the node's ResourceSlices when it starts (no DRA driver has registered
            # with it yet: pkg/kubelet/cm/dra/plugin NewDRAPluginManager); our plugin republishes
            # them 30 s later (the resourceslice controller's sync delay). That wipe runs in the
            # background, and once in four runs here the slice was there all along: do it again,
            # as kubelet does it, so that the window is certain.
            selector = f"spec.nodeName={w.node}"
            await kube.request("DELETE", RESOURCE_SLICES.path(), query={"fieldSelector": selector})

            async def slice_back() -> bool:
                return len(await _uuids(kube, w.node)) == real_node.options.devices

            await eventually(slice_back, timeout=90)
            await asyncio.sleep(15)
        finally:
            stop.set()
            await looker
        transitions = [s for i, s in enumerate(seen) if i == 0 or s[1:] != seen[i - 1][1:]]
        print(f"\n[draxr] (seconds, devices in the slice, adoption claims) after the restart began: {transitions}")
        changed = [s for s in seen if s[2] != [uid]]
        assert not changed, f"the adoption claim {uid} was not there all along: {changed[:3]} ... {changed[-3:]}"
        for name in ("late", "late-kube-scheduler"):
            assert await w.pending(name), name
        old = await kube.get(PODS, "old", namespace)
        assert old["status"]["phase"] == "Running", old["status"]


@pytest.mark.timeout(600)
async def test_a_deleted_device_plugin_pod_keeps_its_devices_while_its_container_stops(
    kube: Kube,
    control_plane: ControlPlane,
    real_node: RealNode,
    operator: Operator,
    namespace: str,
    names: str,
    tmp_path: Path,
) -> None:
    """The old pod is deleted; its container, given 40 s to stop, goes on for 15 s after SIGTERM
    (kubelet keeps reporting its devices meanwhile). Its devices must stay held until it has
    stopped: upstream's resourceclaim controller frees a scheduled pod's claims only once the pod
    is terminal or gone, and kube-scheduler counts a terminating pod's resources until it is gone.
    The pod waiting for a device is kube-scheduler's (draxr's own waits while the pod is there:
    its devices are "not adopted")."""
    async with _moved(
        kube, control_plane, real_node, namespace, names, tmp_path, SLOW_TO_STOP, keep_kube_scheduler_pending=True
    ) as m:
        w = m.w
        await kube.delete(PODS, "late", namespace)  # (two schedulers at once: see above)
        await kube.delete(PODS, "old", namespace)

        async def old_gone() -> bool:
            await w.look()  # fails as soon as "late" holds one of its devices while it is there
            return await get_or_none(kube, PODS, "old", namespace) is None

        await eventually(old_gone, timeout=90)
        await _hand_out(kube, control_plane, m, pending="late-kube-scheduler")


def _claim_pod(name: str, dra_class: str, scheduler: str) -> tuple[JSON, JSON]:
    """A pod that asks DRA by a ResourceClaim of its own (one device of the class), and that claim."""
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": f"{name}-gpu"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": dra_class, "count": 1}}]}},
    }
    body = node_pod(name, [container("main", 0, SIDECAR)], scheduler=scheduler)  # (runs until deleted)
    body["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": f"{name}-gpu"}]
    body["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    return body, claim


async def _claim_placed(kube: Kube, w: Watcher, name: str) -> str:
    """The one device of the pod's own claim, once the pod is bound and running."""

    async def running() -> str | None:
        await w.look()
        p = await kube.get(PODS, name, w.namespace)
        if p["status"].get("phase") != "Running":
            return None
        claim = next(c for c in w.claims if c["metadata"]["name"] == f"{name}-gpu")
        devices = _devices(claim, w.node)
        return devices[0] if len(devices) == 1 else None

    return str(await eventually(running, timeout=120))


@pytest.mark.timeout(600)
async def test_with_both_plugins_serving_dra_claims_never_get_the_device_plugin_pods_devices(
    kube: Kube,
    control_plane: ControlPlane,
    real_node: RealNode,
    operator: Operator,
    namespace: str,
    names: str,
    tmp_path: Path,
) -> None:
    """Both at once (allocatable > 0): the name stays the device plugin's, as upstream, and pods that
    ask DRA by claims of their own (from draxr and from kube-scheduler) share the node. Until the
    agent reports the device-plugin pod's devices, draxr gives out none of the class's devices there;
    then its adoption claim keeps them from every DRA claim; a new device-plugin pod is refused by
    draxr while DRA claims hold devices the plugin could hand out (kubelet's device manager would
    choose without knowing them); once the old pod finishes its devices go to a DRA claim."""
    cp = control_plane
    node, resource, served, w, signal_dir, dra_class, objs = await _scene(
        kube, cp, real_node, namespace, names, tmp_path
    )
    agent: Agent | None = None
    try:
        ids = await _old_pod(kube, cp, w, resource, signal_dir, UNTIL_FINISHED)
        await _device_class(kube, dra_class, resource, served)
        by_uuid = await _uuids(kube, node)
        w.held = frozenset(by_uuid[i] for i in ids)

        async def create(name: str, scheduler: str) -> None:
            pod, claim = _claim_pod(name, dra_class, scheduler)
            await kube.create(RESOURCE_CLAIMS, claim, namespace)
            await kube.create(PODS, pod, namespace)

        # No record yet: draxr's claim pod waits, with the true reason.
        await create("dra-early", "draxr")

        await _waits_for_adoption(kube, w, "dra-early")
        assert await w.pending("dra-early")

        agent = await _agent(kube, cp, real_node, names, tmp_path)
        claim = await eventually(lambda: _adopted(w), timeout=60)
        assert _devices(claim, node) == sorted(w.held)
        assert real_node.allocatable(resource) == served  # the device plugin still serves the name

        # DRA claims, one scheduler after the other, fill the other devices of the class.
        taken = {"dra-early": await _claim_placed(kube, w, "dra-early")}
        await create("dra-kube-scheduler", "default-scheduler")
        taken["dra-kube-scheduler"] = await _claim_placed(kube, w, "dra-kube-scheduler")
        free = {by_uuid[f"dev-{i}"] for i in range(served)} - w.held
        assert set(taken.values()) == free, taken

        # A new device-plugin pod: the plugin has 2 devices it thinks free, both held by DRA claims.
        await kube.create(PODS, _pod("dp-new", resource, 1, "draxr"), namespace)

        async def refused() -> list[str]:
            return [n for n in await _failed_scheduling(kube, namespace, "dp-new", w) if DRA_HOLDS_DEVICES in n]

        await eventually(refused, timeout=60)
        await create("dra-late", "draxr")
        await eventually(lambda: _failed_scheduling(kube, namespace, "dra-late", w), timeout=60)
        for name in ("dp-new", "dra-late"):
            assert await w.pending(name), name

        # The old pod finishes: its adoption claim goes and its devices are handed out.
        (signal_dir / "finish").touch()

        async def released() -> bool:
            await w.look()
            return not w.adoption()

        await eventually(released, timeout=90)
        taken["dra-late"] = await _claim_placed(kube, w, "dra-late")
        assert taken["dra-late"] in w.held, taken
        assert await w.pending("dp-new")  # DRA claims still hold devices the plugin serves
        print(f"\n[draxr] {w.looks} looks at every claim; devices {taken}")
    finally:
        await _undo(kube, cp, real_node, namespace, names, agent, dra_class, objs, plugin_stopped=False)


@pytest.mark.timeout(600)
async def test_the_leader_failing_over_mid_move_neither_frees_nor_doubles_a_device(
    kube: Kube,
    control_plane: ControlPlane,
    real_node: RealNode,
    operator_thread: OperatorThread,
    namespace: str,
    names: str,
    tmp_path: Path,
) -> None:
    """Two replicas of draxr (the Deployment's pods: in-cluster, its ServiceAccount, a Lease) in place
    of the session's operator. The leader is killed (SIGKILL) the moment the agent's record lists the
    device-plugin pod, in the middle of the adoption; the standby takes the Lease over, adopts the
    pod's devices (one adoption claim at any moment, never two), places the waiting pod and the
    next on the other devices only, hands the old pod's devices out once it finishes, and leaves no
    claim behind."""
    cp = control_plane
    node, resource, served, w, signal_dir, dra_class, objs = await _scene(
        kube, cp, real_node, namespace, names, tmp_path
    )
    await asyncio.to_thread(operator_thread.pause, "two replicas of draxr take its place (leader failover)")
    replicas: dict[str, Draxr] = {}
    agent: Agent | None = None
    plugin_stopped = False
    try:
        sa_dir = await service_account_dir(kube, cp, NAMESPACE, "draxr", tmp_path / "draxr-sa")
        for name in ("draxr-a", "draxr-b"):
            replicas[name] = Draxr(cp, sa_dir, SCHEDULER, tmp_path / f"{name}.log", pod_name=name, extra=FAST_LEASE)

        async def leader() -> str | None:
            lease = await get_or_none(kube, LEASES, SCHEDULER, NAMESPACE) or {}
            holder = (lease.get("spec") or {}).get("holderIdentity")
            return next((n for n in replicas if holder and holder.startswith(n + "_")), None)

        first = str(await eventually(leader, timeout=60))
        ids = await _old_pod(kube, cp, w, resource, signal_dir, UNTIL_FINISHED)
        await asyncio.to_thread(real_node.stop_device_plugin)
        plugin_stopped = True
        await _device_class(kube, dra_class, resource, served)
        by_uuid = await _uuids(kube, node)
        w.held = frozenset(by_uuid[i] for i in ids)
        await kube.create(PODS, _pod("early", resource, 1, "draxr"), namespace)

        await _waits_for_adoption(kube, w, "early")

        adoption_uids: set[str] = set()

        async def adopted_once() -> JSON | None:
            claim = await _adopted(w)
            assert len(w.adoption()) <= 1, w.adoption()
            adoption_uids.update(c["metadata"]["uid"] for c in w.adoption())
            return claim

        agent = await _agent(kube, cp, real_node, names, tmp_path)
        await eventually(lambda: _recorded(w, agent), timeout=60)
        replicas[first].send_signal(signal.SIGKILL)
        standby = next(n for n in replicas if n != first)

        async def taken_over() -> bool:
            await w.look()
            return await leader() == standby

        await replicas[standby].until(taken_over, timeout=90)
        claim = await replicas[standby].until(adopted_once, timeout=90)
        assert _devices(claim, node) == sorted(w.held)
        taken = {"early": await _placed(kube, cp, w, "early")}
        await kube.create(PODS, _pod("second", resource, 1, "draxr"), namespace)
        taken["second"] = await _placed(kube, cp, w, "second")
        assert set(taken.values()) == {by_uuid[f"dev-{i}"] for i in range(served)} - w.held, taken
        await kube.create(PODS, _pod("late", resource, 1, "draxr"), namespace)
        await eventually(lambda: _failed_scheduling(kube, namespace, "late", w), timeout=60)
        assert await w.pending("late")
        await adopted_once()

        (signal_dir / "finish").touch()

        async def released() -> bool:
            await adopted_once()
            return not w.adoption()

        await eventually(released, timeout=90)
        taken["late"] = await _placed(kube, cp, w, "late")
        assert taken["late"] in w.held, taken
        print(f"\n[draxr] adoption claims seen {sorted(adoption_uids)}; {w.looks} looks; devices {taken}")
        assert len(adoption_uids) <= 2  # a claim the killed leader created may be replaced, never doubled
        for p in await kube.list(PODS, namespace):
            await kube.delete(PODS, p["metadata"]["name"], namespace)

        async def no_claim_left() -> bool:
            await w.look()
            return not await kube.list(RESOURCE_CLAIMS, namespace)

        await replicas[standby].until(no_claim_left, timeout=120)
    finally:
        for r in replicas.values():
            await asyncio.to_thread(r.stop)
        try:
            await _undo(kube, cp, real_node, namespace, names, agent, dra_class, objs, plugin_stopped=plugin_stopped)
        finally:
            await asyncio.to_thread(operator_thread.restart)


async def _fence(w: Watcher) -> list[str]:
    """The devices of the node that draxr's DeviceTaintRules fence (one look at the claims too)."""
    await w.look()
    rules = await w.kube.list(DEVICE_TAINT_RULES, labelSelector=FENCE_SELECTOR)
    return sorted(
        r["spec"]["deviceSelector"]["device"]
        for r in rules
        if r["metadata"]["annotations"][FENCE_NODE_ANNOTATION] == w.node
    )


@pytest.mark.timeout(600)
async def test_kube_scheduler_is_fenced_off_without_a_record_with_an_unmatched_id_and_a_stale_one(
    kube: Kube,
    control_plane: ControlPlane,
    real_node: RealNode,
    operator: Operator,
    namespace: str,
    names: str,
    tmp_path: Path,
) -> None:
    """Issue 39, as a new user met it: a kube-scheduler pod runs on two device-plugin devices, the
    device plugin stops, the class maps its name and declares the identity, and no record says
    which devices the pod holds. kube-scheduler gave one of them to a new pod. Now draxr's
    DeviceTaintRules fence every device of the class on the node, through three scenes in turn:
    no record (no agent), an ID that matches no device (the class names the wrong attribute), and a
    stale record (the agent stopped); kube-scheduler's new pod waits all along. The agent back and
    the attribute fixed, the pod is adopted, the fence goes and kube-scheduler's pods get the other
    devices; the old pod finishes and its devices are handed out. Every look checks every claim."""
    cp = control_plane
    node, resource, served, w, signal_dir, dra_class, objs = await _scene(
        kube, cp, real_node, namespace, names, tmp_path
    )
    agent: Agent | None = None
    plugin_stopped = False
    try:
        # kube-scheduler's pod on two of the device plugin's devices.
        old = _pod("old", resource, OLD_DEVICES, "default-scheduler", UNTIL_FINISHED)
        old["spec"]["volumes"] = [{"name": "signal", "hostPath": {"path": str(signal_dir), "type": "Directory"}}]
        old["spec"]["containers"][0]["volumeMounts"] = [{"name": "signal", "mountPath": "/signal"}]
        w.old_uid = (await kube.create(PODS, old, namespace))["metadata"]["uid"]
        ids = sorted((await _log_env(cp, namespace, "old", "DRAXR_DP_DEVICES"))["DRAXR_DP_DEVICES"].split(","))
        assert len(ids) == OLD_DEVICES
        await asyncio.to_thread(real_node.stop_device_plugin)
        plugin_stopped = True
        by_uuid = await _uuids(kube, node)
        w.held = frozenset(by_uuid[i] for i in ids)
        every = sorted(by_uuid[f"dev-{i}"] for i in range(served))

        async def fenced_all() -> bool:
            return await _fence(w) == every

        async def report() -> JSON:
            out = await kubectl_plugin.run(["migration", node, "--kubeconfig", str(cp.kubeconfig), "-o", "json"])
            [found] = json.loads(out)
            return dict(found)

        # 1. No record: the class declares the identity, nobody can tell which devices "old" holds.
        await _device_class(kube, dra_class, resource, served)
        await eventually(fenced_all, timeout=60)
        seen = await report()
        assert (seen["safe"], seen["record"]) == (False, "missing")
        assert sorted(seen["fence"]["devices"]) == sorted(f"{realnode.DRIVER}/{node}/{d}" for d in every)
        await kube.create(PODS, _pod("waiting", resource, 1, "default-scheduler"), namespace)
        await eventually(lambda: _failed_scheduling(kube, namespace, "waiting", w), timeout=60)
        assert await w.pending("waiting")

        # 2. An ID that matches no device: the class names an attribute the devices do not have.
        await kube.patch(DEVICE_CLASSES, dra_class, {"metadata": {"annotations": {ID_ATTRIBUTE_ANNOTATION: "serial"}}})
        agent = await _agent(kube, cp, real_node, names, tmp_path)
        await eventually(lambda: _recorded(w, agent), timeout=60)

        async def unmatched() -> JSON | None:
            await w.look()
            found = await report()
            return found if found["unmatched"] and found["record"].startswith("fresh") else None

        seen = await eventually(unmatched, timeout=60)
        assert sorted(u["deviceID"] for u in seen["unmatched"]) == ids
        assert await fenced_all()
        assert await w.pending("waiting")
        assert not w.adoption()

        # 3. A stale record: the agent stops; the attribute fixed meanwhile adopts nothing.
        agent.kill()

        async def stale() -> bool:
            await w.look()
            return (await report())["record"].startswith("stale")

        await eventually(stale, timeout=60)
        await kube.patch(DEVICE_CLASSES, dra_class, {"metadata": {"annotations": {ID_ATTRIBUTE_ANNOTATION: "uuid"}}})
        loop = asyncio.get_running_loop()
        until = loop.time() + 10  # (two migrator passes over the stale record)
        while loop.time() < until:
            assert await fenced_all()
            assert await w.pending("waiting")
            assert not w.adoption()
            await asyncio.sleep(0.5)

        # The agent back: "old" adopted, the fence lifted, kube-scheduler's pods get the other devices.
        agent.start()
        claim = await eventually(lambda: _adopted(w), timeout=60)
        assert _devices(claim, node) == sorted(w.held)

        async def lifted() -> bool:
            return await _fence(w) == []

        await eventually(lifted, timeout=60)
        assert (await report())["safe"] is True
        taken = {"waiting": await _placed(kube, cp, w, "waiting")}
        await kube.create(PODS, _pod("second", resource, 1, "default-scheduler"), namespace)
        taken["second"] = await _placed(kube, cp, w, "second")
        assert set(taken.values()) == set(every) - w.held, taken
        events = await kube.list(EVENTS, "default")
        reasons = [e["reason"] for e in events if e["regarding"]["name"] == node]
        assert "DevicesFenced" in reasons
        assert "FenceLifted" in reasons

        # "old" finishes: its devices go to kube-scheduler's next pod.
        (signal_dir / "finish").touch()

        async def released() -> bool:
            await w.look()
            return not w.adoption()

        await eventually(released, timeout=90)
        await kube.create(PODS, _pod("after", resource, 1, "default-scheduler"), namespace)
        taken["after"] = await _placed(kube, cp, w, "after")
        assert taken["after"] in w.held, taken
        print(f"\n[draxr] {w.looks} looks at every claim; devices {taken}")
    finally:
        await _undo(kube, cp, real_node, namespace, names, agent, dra_class, objs, plugin_stopped=plugin_stopped)
