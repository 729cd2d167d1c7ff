"""The operator end to end: schedule, allocate, write claim and pod status, bind, release."""

from __future__ import annotations

from typing import Any

import pytest

from draxr.app import Operator
from draxr.kube import EVENTS, PODS, Kube
from draxr_dev.devcluster import fakedriver
from draxr_dev.devcluster.controlplane import RUN_FOR_ANNOTATION

from .helpers import SCHEDULER, bound_with_status, claims_in, eventually, pod


def _container(name: str, limits: dict[str, str], restart_policy: str | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "registry.invalid/fake:1", "resources": {"limits": limits}}
    if restart_policy:
        c["restartPolicy"] = restart_policy
    return c


# Pod shapes from upstream's scenarios (contract §7), by extended resource "a", "b", "c" (explicit
# names) and "implicit" (deviceclass.resource.kubernetes.io/<class c>).
SHAPES: dict[str, dict[str, Any]] = {
    "one-container-one-resource": {"containers": [("main", {"a": "1"})]},
    "one-container-three-resources": {"containers": [("main", {"a": "1", "b": "2", "c": "1", "cpu": "100m"})]},
    "three-containers-one-each": {"containers": [("c0", {"a": "1"}), ("c1", {"b": "1"}), ("c2", {"c": "1"})]},
    "three-containers-several-each": {
        "containers": [("c0", {"a": "1", "b": "1"}), ("c1", {"b": "1", "c": "1"}), ("c2", {"a": "2", "memory": "1Gi"})]
    },
    "implicit-name": {"containers": [("main", {"implicit": "2"})]},
    "init-sidecar-regular-reuse": {
        "init": [("init0", {"a": "3"}, None), ("sidecar", {"a": "1"}, "Always"), ("init1", {"a": "2"}, None)],
        "containers": [("main", {"a": "1"})],
    },
}


def _shape_pod(name: str, shape: dict[str, Any], names: dict[str, str], scheduler: str) -> dict[str, Any]:
    body = pod(name, {}, scheduler=scheduler)
    body["spec"]["containers"] = [
        _container(n, {names.get(k, k): v for k, v in limits.items()}) for n, limits in shape["containers"]
    ]
    if "init" in shape:
        body["spec"]["initContainers"] = [
            _container(n, {names.get(k, k): v for k, v in limits.items()}, rp) for n, limits, rp in shape["init"]
        ]
    return body


@pytest.mark.parametrize("shape", sorted(SHAPES))
async def test_draxr_writes_what_kube_scheduler_writes(
    kube: Kube, operator: Operator, namespace: str, names: str, shape: str
) -> None:
    """Fidelity: the same pod spec on the same node, once through kube-scheduler, once through draxr:
    identical claim metadata, requests, allocation results and pod status mappings. Each pass has a
    pod name of its own (compared as "<pod>"): kwok deletes a pod it saw terminating by name, with
    no uid precondition, so on a loaded box its late delete of the first pod once deleted the second
    pod of the same name while draxr bound it (cold CI of e4d6d79, seed 219135)."""
    classes = {f"{names}-{k}": f"{names}.example.com/{k}" for k in "abc"}
    fleet = fakedriver.Fleet(
        prefix=names, dra_nodes=1, devices_per_node=8, driver=f"{names}.example.com", classes=classes
    )
    resource = {k: f"{names}.example.com/{k}" for k in "abc"}
    resource["implicit"] = f"deviceclass.resource.kubernetes.io/{names}-c"
    async with fakedriver.deployed(kube, fleet):
        outputs = []
        for name, scheduler in (("same-ref", "default-scheduler"), ("same-draxr", SCHEDULER)):
            created = await kube.create(PODS, _shape_pod(name, SHAPES[shape], resource, scheduler), namespace)
            bound = await eventually(lambda name=name: bound_with_status(kube, name, namespace))
            [claim] = await claims_in(kube, namespace)
            outputs.append(_normalise(created, bound, claim))
            uid = created["metadata"]["uid"]
            await kube.request(
                "DELETE",
                PODS.path(namespace, name),
                {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}},
            )
            await eventually(lambda: _gone(kube, namespace))
        ref, ours = outputs
        assert ours == ref


async def _gone(kube: Kube, namespace: str) -> bool:
    pods = await kube.list(PODS, namespace)
    return not pods and not await claims_in(kube, namespace)


def _normalise(created: dict[str, Any], bound: dict[str, Any], claim: dict[str, Any]) -> dict[str, Any]:
    """Everything both schedulers must agree on; uids, names and timestamps replaced by markers."""
    uid, name = created["metadata"]["uid"], created["metadata"]["name"]
    meta = claim["metadata"]
    alloc = dict(claim["status"]["allocation"])
    assert alloc.pop("allocationTimestamp")
    return {
        "node": bound["spec"]["nodeName"],
        "generateName": meta["generateName"].replace(name, "<pod>", 1),
        "annotations": meta.get("annotations"),
        "labels": meta.get("labels"),
        "finalizers": meta.get("finalizers"),
        "ownerReferences": [_marked(r, uid, name) for r in meta["ownerReferences"]],
        "spec": claim["spec"],
        "allocation": alloc,
        "reservedFor": [_marked(r, uid, name) for r in claim["status"]["reservedFor"]],
        "status_keys": sorted(claim["status"]),
        "pod_status": {
            **bound["status"]["extendedResourceClaimStatus"],
            "resourceClaimName": "<claim>"
            if bound["status"]["extendedResourceClaimStatus"]["resourceClaimName"] == meta["name"]
            else "<other>",
        },
    }


def _marked(ref: dict[str, Any], uid: str, name: str) -> dict[str, Any]:
    """A reference to the pod, its uid and name as markers."""
    if ref["uid"] != uid:
        return ref
    return {**ref, "uid": "<pod>", "name": "<pod>" if ref.get("name") == name else ref.get("name")}


async def test_claim_released_when_pod_completes_and_waiting_pod_gets_the_devices(
    kube: Kube, operator: Operator, namespace: str, names: str
) -> None:
    fleet = fakedriver.Fleet(
        prefix=names,
        dra_nodes=1,
        devices_per_node=2,
        driver=f"{names}.example.com",
        classes={f"{names}-gpu": f"{names}.example.com/gpu"},
    )
    async with fakedriver.deployed(kube, fleet):
        ext = f"{names}.example.com/gpu"
        await kube.create(
            PODS, pod("first", {ext: "2"}, scheduler=SCHEDULER, annotations={RUN_FOR_ANNOTATION: "3s"}), namespace
        )
        first = await eventually(lambda: bound_with_status(kube, "first", namespace))
        claim_name = first["status"]["extendedResourceClaimStatus"]["resourceClaimName"]
        await kube.create(PODS, pod("second", {ext: "2"}, scheduler=SCHEDULER), namespace)

        async def waiting() -> dict[str, Any] | None:
            p = await kube.get(PODS, "second", namespace)
            conds = {c["type"]: c for c in p.get("status", {}).get("conditions", [])}
            c = conds.get("PodScheduled")
            return c if c and c["status"] == "False" else None

        cond = await eventually(waiting, timeout=20)
        assert cond["reason"] == "Unschedulable"
        assert cond["message"].startswith("0/1 nodes are available: 1 cannot allocate all claims")

        # The first pod completes (kwok): its claim goes away, the second pod gets the devices.
        second = await eventually(lambda: bound_with_status(kube, "second", namespace), timeout=60)
        assert second["spec"]["nodeName"] == fleet.node_names()[0]
        names_now = {c["metadata"]["name"] for c in await claims_in(kube, namespace)}
        assert claim_name not in names_now
        assert len(names_now) == 1
        events = await kube.list(EVENTS, namespace)
        reasons = {(e["regarding"]["name"], e["reason"]) for e in events if e.get("reportingController") == SCHEDULER}
        assert {("first", "Scheduled"), ("second", "FailedScheduling"), ("second", "Scheduled")} <= reasons
