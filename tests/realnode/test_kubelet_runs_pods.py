"""Pods asking for an extended resource run on a real kubelet with their devices from a real DRA
kubelet plugin: kubelet admits draxr's special claim and pod status, the plugin prepares exactly the
claim's allocation, CDI puts each request's devices into the containers ``requestMappings`` name, and
the claim is released and unprepared when the pod is done. The same pods through kube-scheduler give
kubelet the same objects (modulo names and uids) and the containers the same environment.

The pods are hostNetwork (the node's CNI is loopback-only), use the offline image
``draxr.local/busybox:1`` with ``imagePullPolicy: Never`` and tolerate the node's taint. Nothing
connects to the VM's address: no probes.
"""

from __future__ import annotations

import asyncio
import subprocess
from dataclasses import dataclass
from typing import Any

import pytest

from draxr.app import Operator
from draxr.kube import NODES, PODS, RESOURCE_CLAIMS, Kube
from draxr_dev.devcluster import realnode
from draxr_dev.devcluster.controlplane import ControlPlane
from draxr_dev.devcluster.realnode import RealNode

from ..integration.helpers import (
    DELETE_PROTECTION,
    EXTENDED_CLAIM_ANNOTATION,
    bound_with_status,
    eventually,
    get_or_none,
)

EXT = realnode.EXTENDED_RESOURCE
ENV_AND_SLEEP = "env | sort; sleep 1"
# A sidecar prints its environment and runs until kubelet stops it after the main containers.
SIDECAR = "trap 'exit 0' TERM; env | sort; while true; do sleep 1; done"
JSON = dict[str, Any]


def env_key(s: str) -> str:
    """The plugin's variable-name form of a request or device name (hack/node/draplugin)."""
    return "".join(c if c.isascii() and c.isalnum() else "_" for c in s.upper())


def container(name: str, count: int, command: str = ENV_AND_SLEEP, *, sidecar: bool = False) -> JSON:
    c: JSON = {
        "name": name,
        "image": realnode.BUSYBOX_IMAGE,
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", command],
    }
    if count:
        c["resources"] = {"limits": {EXT: str(count)}}
    if sidecar:
        c["restartPolicy"] = "Always"
    return c


def node_pod(name: str, containers: list[JSON], init: list[JSON] | None = None, *, scheduler: str = "draxr") -> JSON:
    spec: JSON = {
        "schedulerName": scheduler,
        "restartPolicy": "Never",
        "hostNetwork": True,
        "tolerations": [realnode.TOLERATION],
        "terminationGracePeriodSeconds": 2,
        "containers": containers,
    }
    if init:
        spec["initContainers"] = init
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def single(name: str, count: int, scheduler: str = "draxr") -> JSON:
    return node_pod(name, [container("main", count)], scheduler=scheduler)


def multi(name: str, scheduler: str = "draxr") -> JSON:
    """An init container, a sidecar and two containers, asking different counts."""
    return node_pod(
        name,
        [container("a", 2), container("b", 1)],
        init=[container("init", 1, "env | sort"), container("side", 1, SIDECAR, sidecar=True)],
        scheduler=scheduler,
    )


@dataclass
class Outcome:
    pod: JSON  # its last state, Succeeded
    bound: JSON  # as bound (status.extendedResourceClaimStatus)
    claim: JSON  # the special claim while the pod ran
    env: dict[str, dict[str, str]]  # container -> its DRAXR_* variables, from its log
    prepared: list[JSON]  # the plugin's prepare/unprepare lines for the claim
    unprepared: list[JSON]


async def _logs(cp: ControlPlane, namespace: str, pod: str, container: str) -> str:
    """The container's log through kube-apiserver, which fetches it from kubelet over loopback."""
    argv = [str(cp.binaries / "kubectl"), f"--kubeconfig={cp.kubeconfig}", "-n", namespace]
    res = await asyncio.to_thread(
        subprocess.run, [*argv, "logs", pod, "-c", container], capture_output=True, text=True, timeout=30
    )
    assert res.returncode == 0, f"kubectl logs {pod} -c {container}: {res.stderr}"
    return res.stdout


def _draxr_env(log: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in log.splitlines() if line.startswith("DRAXR_") and "=" in line)


async def run_pod(kube: Kube, cp: ControlPlane, node: RealNode, namespace: str, body: JSON) -> Outcome:
    """Create the pod, follow it until it Succeeded and its claim is gone, and collect what kubelet,
    the plugin and the containers saw."""
    name = body["metadata"]["name"]
    await kube.create(PODS, body, namespace)
    bound = await eventually(lambda: bound_with_status(kube, name, namespace))
    assert bound["spec"]["nodeName"] == node.name
    claim_name = bound["status"]["extendedResourceClaimStatus"]["resourceClaimName"]
    claim = await kube.get(RESOURCE_CLAIMS, claim_name, namespace)  # the pod runs >= 1 s: still there

    async def finished() -> JSON | None:
        p = await kube.get(PODS, name, namespace)
        return p if p["status"].get("phase") in ("Succeeded", "Failed") else None

    final = await eventually(finished, timeout=120)
    status = final["status"]
    assert status.get("reason") != "UnexpectedAdmissionError", status
    assert status["phase"] == "Succeeded", f"{status}\nkubelet:\n{node._tail('kubelet')}"
    # kubelet ran it, not kwok: containerd's container IDs.
    all_statuses = status.get("initContainerStatuses", []) + status["containerStatuses"]
    assert all(s["containerID"].startswith("containerd://") for s in all_statuses), all_statuses

    names = [c["name"] for c in body["spec"].get("initContainers", []) + body["spec"]["containers"]]
    env = {c: _draxr_env(await _logs(cp, namespace, name, c)) for c in names}
    await eventually(lambda: _gone(kube, claim_name, namespace), timeout=60)
    uid = claim["metadata"]["uid"]

    async def unprepared() -> list[JSON]:
        return [e for e in node.plugin_events() if e["event"] == "unprepare" and e["claim"]["uid"] == uid]

    done = await eventually(unprepared, timeout=60)
    prepared = [e for e in node.plugin_events() if e["event"] == "prepare" and e["claim"]["uid"] == uid]
    return Outcome(pod=final, bound=bound, claim=claim, env=env, prepared=prepared, unprepared=done)


async def _gone(kube: Kube, claim: str, namespace: str) -> bool:
    return await get_or_none(kube, RESOURCE_CLAIMS, claim, namespace) is None


def _devices(claim: JSON) -> dict[str, list[str]]:
    """request -> sorted devices of the plugin's driver, from the claim's allocation."""
    out: dict[str, list[str]] = {}
    for r in claim["status"]["allocation"]["devices"]["results"]:
        assert (r["driver"], r["pool"]) == (realnode.DRIVER, realnode.REAL_NODE_NAME), r
        out.setdefault(r["request"], []).append(r["device"])
    return {k: sorted(v) for k, v in out.items()}


def expected_env(outcome: Outcome, container: str) -> dict[str, str]:
    """What the plugin's CDI devices put into ``container``: the requests ``requestMappings`` maps to
    it, each with the devices the allocation gives that request."""
    mappings = outcome.bound["status"]["extendedResourceClaimStatus"]["requestMappings"]
    requests = [m["requestName"] for m in mappings if m["containerName"] == container]
    if not requests:
        return {}
    meta = outcome.claim["metadata"]
    devices = _devices(outcome.claim)
    env = {"DRAXR_CLAIM": f"{meta['namespace']}/{meta['name']}/{meta['uid']}"}
    for r in requests:
        k = env_key(r)
        env[f"DRAXR_REQUEST_{k}"] = r
        env[f"DRAXR_DEVICES_{k}"] = ",".join(devices[r])
        env.update({f"DRAXR_DEVICE_{k}_{env_key(d)}": d for d in devices[r]})
    return env


def _check_kubelet_and_plugin(outcome: Outcome) -> None:
    """The plugin prepared exactly the allocation once and unprepared it; every container saw exactly
    the devices of its mapped requests."""
    meta = outcome.claim["metadata"]
    assert meta["annotations"] == {EXTENDED_CLAIM_ANNOTATION: "true"}
    assert len(outcome.prepared) == 1, outcome.prepared
    (prep,) = outcome.prepared
    assert prep["claim"] == {"namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"]}
    assert prep["requests"] == _devices(outcome.claim)
    assert "error" not in prep
    assert [u["requests"] for u in outcome.unprepared] == [prep["requests"]]
    for c, env in outcome.env.items():
        assert env == expected_env(outcome, c), c


@pytest.mark.parametrize("count", [1, 2])
async def test_kubelet_runs_a_draxr_pod_with_its_devices(
    kube: Kube,
    control_plane: ControlPlane,
    real_node: RealNode,
    operator: Operator,
    namespace: str,
    count: int,
) -> None:
    out = await run_pod(kube, control_plane, real_node, namespace, single("p", count))
    _check_kubelet_and_plugin(out)
    assert out.pod["spec"]["schedulerName"] == "draxr"
    devices = out.env["main"]["DRAXR_DEVICES_" + env_key("container-0-request-0")].split(",")
    assert len(devices) == count
    assert set(devices) <= {f"gpu-{i}" for i in range(real_node.options.devices)}


async def test_each_container_sees_the_devices_its_mappings_give_it(
    kube: Kube, control_plane: ControlPlane, real_node: RealNode, operator: Operator, namespace: str
) -> None:
    out = await run_pod(kube, control_plane, real_node, namespace, multi("m"))
    _check_kubelet_and_plugin(out)
    env = out.env
    seen = {c: set(v for k, v in e.items() if k.startswith("DRAXR_DEVICE_")) for c, e in env.items()}
    assert {c: len(s) for c, s in seen.items()} == {"init": 1, "side": 1, "a": 2, "b": 1}
    # What runs at the same time never shares a device: the sidecar and both containers.
    for x, y in (("side", "a"), ("side", "b"), ("a", "b")):
        assert not seen[x] & seen[y], (x, y, seen)
    mapped = {m["containerName"] for m in out.bound["status"]["extendedResourceClaimStatus"]["requestMappings"]}
    assert mapped == {"init", "side", "a", "b"}


def _normalized(outcome: Outcome) -> JSON:
    """What kubelet reads of a scheduled pod, without names, uids and times."""
    claim = outcome.claim
    meta = claim["metadata"]
    alloc = claim["status"]["allocation"]
    pod_uid = outcome.bound["metadata"]["uid"]
    owners = [{**o, "uid": "<pod>"} if o["uid"] == pod_uid else o for o in meta["ownerReferences"]]
    reserved = [{**r, "uid": "<pod>"} if r["uid"] == pod_uid else r for r in claim["status"]["reservedFor"]]
    ref = f"{meta['namespace']}/{meta['name']}/{meta['uid']}"
    env = {c: {k: ("<claim>" if v == ref else v) for k, v in e.items()} for c, e in outcome.env.items()}
    status = dict(outcome.bound["status"]["extendedResourceClaimStatus"])
    if status["resourceClaimName"] == meta["name"]:
        status["resourceClaimName"] = "<claim>"
    return {
        "claim": {
            "generateName": meta["generateName"],
            "annotations": meta.get("annotations"),
            "labels": meta.get("labels"),
            "finalizers": meta.get("finalizers"),
            "ownerReferences": owners,
            "spec": claim["spec"],
            "status": sorted(claim["status"]),
            "allocation": sorted(alloc),
            "results": alloc["devices"]["results"],
            "nodeSelector": alloc.get("nodeSelector"),
            "reservedFor": reserved,
        },
        "pod": status,
        "env": env,
        "prepared": [e["requests"] for e in outcome.prepared],
    }


@pytest.mark.parametrize("shape", ["single", "multi"])
async def test_kube_scheduler_gives_kubelet_the_same(
    kube: Kube, control_plane: ControlPlane, real_node: RealNode, operator: Operator, namespace: str, shape: str
) -> None:
    def body(scheduler: str) -> JSON:
        return single("same", 2, scheduler) if shape == "single" else multi("same", scheduler)

    ours = await run_pod(kube, control_plane, real_node, namespace, body("draxr"))
    await kube.delete(PODS, "same", namespace)
    await eventually(lambda: _pod_gone(kube, "same", namespace))
    theirs = await run_pod(kube, control_plane, real_node, namespace, body("default-scheduler"))
    _check_kubelet_and_plugin(ours)
    _check_kubelet_and_plugin(theirs)
    assert ours.claim["metadata"]["finalizers"] == [DELETE_PROTECTION]
    assert _normalized(ours) == _normalized(theirs)


async def _pod_gone(kube: Kube, name: str, namespace: str) -> bool:
    return await get_or_none(kube, PODS, name, namespace) is None


async def test_kubelet_not_kwok_owns_the_node(kube: Kube, real_node: RealNode) -> None:
    node = await kube.get(NODES, real_node.name)
    meta = node["metadata"]
    assert "kwok.x-k8s.io/node" not in meta.get("annotations", {})
    assert meta["labels"][realnode.NODE_LABEL] == "true"
    assert node["status"]["nodeInfo"]["kubeletVersion"] == "v1.37.2"
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"] == "containerd://2.4.2"
    assert {"type": "Hostname", "address": "localhost"} in node["status"]["addresses"]
    assert realnode.TAINT_KEY in [t["key"] for t in node["spec"].get("taints", [])]
