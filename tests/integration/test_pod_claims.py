"""Pods with ResourceClaims of their own (``spec.resourceClaims``, by name and from templates) on a
real control plane: draxr allocates them with the special claim in one allocator call, writes each
claim as kube-scheduler 1.37.2's DynamicResources PreBind does (finalizer, allocation,
allocationTimestamp, reservedFor), then the special claim and the Binding. kube-controller-manager's
resourceclaim controller makes the template claims and names them in the pod's status, and releases
them; the same pods through kube-scheduler on the same cluster give the same shape.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from pathlib import Path
from typing import Any

import pytest

from draxr.app import Operator
from draxr.faults import POD_CLAIM_STEPS
from draxr.kube import PODS, RESOURCE_CLAIMS, ApiException, Kube, Resource
from draxr_dev.devcluster import fakedriver
from draxr_dev.devcluster.controlplane import ControlPlane

from .helpers import DELETE_PROTECTION, Draxr, eventually, exact_request, pod

JSON = dict[str, Any]
RESOURCE_CLAIM_TEMPLATES = Resource("resource.k8s.io", "v1", "resourceclaimtemplates", True)
HOLD = "test.draxr.dev/hold"  # a finalizer of the test's own: keeps a deleted claim in deletion
LEASE = ["--lease-duration-seconds", "3", "--renew-deadline-seconds", "2", "--retry-period-seconds", "0.5"]


# ---- bodies ---------------------------------------------------------------------------------------


def claim_body(name: str, cls: str, count: int = 1) -> JSON:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [exact_request("gpu", cls, count)]}},
    }


def template_body(name: str, cls: str, count: int = 1) -> JSON:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [exact_request("gpu", cls, count)]}}},
    }


def claim_pod(
    name: str, scheduler: str, *, template: str | None = None, claim: str | None = None, ext: str | None = None
) -> JSON:
    """One container using the pod claim ``gpu`` (from ``template`` or the claim ``claim``), plus
    one device of the extended resource ``ext`` when given."""
    body = pod(name, {ext: "1"} if ext else {}, scheduler=scheduler)
    entry: JSON = {"name": "gpu"}
    if template is not None:
        entry["resourceClaimTemplateName"] = template
    else:
        entry["resourceClaimName"] = claim
    body["spec"]["resourceClaims"] = [entry]
    container = body["spec"]["containers"][0]
    container["resources"]["claims"] = [{"name": "gpu"}]
    if not ext:
        del container["resources"]["limits"]
    return body


# ---- reading back -----------------------------------------------------------------------------------


async def bound_pod(kube: Kube, name: str, namespace: str) -> JSON | None:
    p = await kube.get(PODS, name, namespace)
    return p if p["spec"].get("nodeName") else None


async def pending_message(kube: Kube, name: str, namespace: str, contains: str = "") -> str | None:
    p = await kube.get(PODS, name, namespace)
    for c in (p.get("status") or {}).get("conditions") or ():
        if c["type"] == "PodScheduled" and c["status"] == "False" and contains in (c.get("message") or ""):
            return str(c["message"])
    return None


def pod_claim_name(p: JSON, entry: str = "gpu") -> str:
    [status] = [s for s in p["status"]["resourceClaimStatuses"] if s["name"] == entry]
    return str(status["resourceClaimName"])


def devices(claim: JSON) -> list[tuple[str, str, str]]:
    alloc = (claim.get("status") or {}).get("allocation") or {}
    return [(r["driver"], r["pool"], r["device"]) for r in alloc.get("devices", {}).get("results", [])]


def no_device_twice(claims: list[JSON]) -> None:
    seen: dict[tuple[str, str, str], str] = {}
    for c in claims:
        for d in devices(c):
            assert d not in seen, f"{d} in {seen[d]} and {c['metadata']['name']}"
            seen[d] = c["metadata"]["name"]


def shape(p: JSON, claims: list[JSON]) -> JSON:
    """What kube-scheduler and draxr must agree on for a pod and its claims: names, uids, nodes,
    devices and times replaced by what they are."""
    meta = p["metadata"]
    subst = {meta["name"]: "<pod>", meta["uid"]: "<pod-uid>", p["spec"]["nodeName"]: "<node>"}
    for c in claims:
        subst[c["metadata"]["name"]] = (
            f"<claim:{'special' if c['metadata']['name'].startswith(meta['name'] + '-extended') else 'gpu'}>"
        )
        subst[c["metadata"]["uid"]] = "<claim-uid>"

    def norm(v: Any, key: str = "") -> Any:
        if isinstance(v, dict):
            return {k: norm(x, k) for k, x in sorted(v.items()) if k not in DROP}
        if isinstance(v, list):
            return [norm(x, key) for x in v]
        if key in ("allocationTimestamp", "creationTimestamp", "lastTransitionTime"):
            return "<time>"
        if key == "device":
            return "<device>"
        if key == "generateName":  # <pod>-gpu- (kube-controller-manager), <pod>-extended-resources-
            return "<pod>" + v.removeprefix(meta["name"])
        if isinstance(v, str):
            return subst.get(v, v)
        return v

    status = p["status"]
    out = {
        "pod": norm({k: status.get(k) for k in ("resourceClaimStatuses", "extendedResourceClaimStatus")}),
        "claims": sorted(
            (
                norm(
                    {
                        "metadata": {k: c["metadata"].get(k) for k in CLAIM_META},
                        "spec": c["spec"],
                        "status": c.get("status"),
                    }
                )
                for c in claims
            ),
            key=repr,
        ),
    }
    return out


DROP = {"resourceVersion", "managedFields", "generation"}
CLAIM_META = ("name", "annotations", "labels", "finalizers", "ownerReferences", "generateName")


async def claims_of(kube: Kube, namespace: str, p: JSON) -> list[JSON]:
    uid = p["metadata"]["uid"]
    return [
        c for c in await kube.list(RESOURCE_CLAIMS, namespace)
        if any(r.get("uid") == uid for r in (c.get("status") or {}).get("reservedFor") or ())
    ]  # fmt: skip


# ---- scenarios ----------------------------------------------------------------------------------------


async def test_template_claim_and_extended_resource_are_allocated_together_as_kube_scheduler_does(
    kube: Kube, operator: Operator, fleet: fakedriver.Fleet, namespace: str
) -> None:
    await fakedriver.wait_nodes_ready(kube, fleet.node_names())
    [(cls, ext)] = fleet.classes.items()
    assert ext is not None
    await kube.create(RESOURCE_CLAIM_TEMPLATES, template_body("one-gpu", cls), namespace)
    ours = await kube.create(PODS, claim_pod("p", "draxr", template="one-gpu", ext=ext), namespace)
    bound = await eventually(lambda: bound_pod(kube, "p", namespace))
    assert bound["status"].get("extendedResourceClaimStatus"), bound["status"]
    claims = await claims_of(kube, namespace, bound)
    assert len(claims) == 2, claims  # the template's claim and the special claim
    template_claim = next(c for c in claims if c["metadata"]["name"] == pod_claim_name(bound))
    assert template_claim["metadata"]["finalizers"] == [DELETE_PROTECTION]
    assert template_claim["status"]["reservedFor"] == [
        {"resource": "pods", "name": "p", "uid": ours["metadata"]["uid"]}
    ]
    assert template_claim["status"]["allocation"]["allocationTimestamp"]
    no_device_twice(claims)
    for c in claims:  # both on the pod's node, one device each
        [(_, pool, _)] = devices(c)
        assert pool == bound["spec"]["nodeName"]

    # The same pod through kube-scheduler: the same shape.
    await kube.create(PODS, claim_pod("p-k", "default-scheduler", template="one-gpu", ext=ext), namespace)
    theirs = await eventually(lambda: bound_pod(kube, "p-k", namespace))
    await eventually(lambda: _with_status(kube, "p-k", namespace))
    theirs = await kube.get(PODS, "p-k", namespace)
    their_claims = await claims_of(kube, namespace, theirs)
    assert shape(theirs, their_claims) == shape(bound, claims)
    no_device_twice(claims + their_claims)


async def _with_status(kube: Kube, name: str, namespace: str) -> bool:
    p = await kube.get(PODS, name, namespace)
    return bool(p["status"].get("extendedResourceClaimStatus") and p["status"].get("resourceClaimStatuses"))


async def test_a_claim_shared_by_two_pods_is_reserved_for_the_second_not_reallocated(
    kube: Kube, operator: Operator, fleet: fakedriver.Fleet, namespace: str
) -> None:
    await fakedriver.wait_nodes_ready(kube, fleet.node_names())
    [cls] = fleet.classes
    await kube.create(RESOURCE_CLAIMS, claim_body("shared", cls), namespace)
    a = await kube.create(PODS, claim_pod("a", "draxr", claim="shared"), namespace)
    first = await eventually(lambda: bound_pod(kube, "a", namespace))
    claim = await kube.get(RESOURCE_CLAIMS, "shared", namespace)
    allocation = claim["status"]["allocation"]
    assert claim["metadata"]["finalizers"] == [DELETE_PROTECTION]
    b = await kube.create(PODS, claim_pod("b", "draxr", claim="shared"), namespace)
    second = await eventually(lambda: bound_pod(kube, "b", namespace))
    assert second["spec"]["nodeName"] == first["spec"]["nodeName"]  # where the claim's devices are
    claim = await kube.get(RESOURCE_CLAIMS, "shared", namespace)
    assert claim["status"]["allocation"] == allocation  # the same allocation, same timestamp
    assert [r["uid"] for r in claim["status"]["reservedFor"]] == [a["metadata"]["uid"], b["metadata"]["uid"]]
    assert not (await kube.list(RESOURCE_CLAIMS, namespace))[1:]  # no special claim: no extended resource


async def test_a_pod_whose_template_claim_does_not_exist_yet_is_bound_once_kcm_makes_it(
    kube: Kube, operator: Operator, fleet: fakedriver.Fleet, namespace: str
) -> None:
    await fakedriver.wait_nodes_ready(kube, fleet.node_names())
    [(cls, ext)] = fleet.classes.items()
    assert ext is not None
    # No template yet: kube-controller-manager cannot make the claim, the pod's status names none.
    await kube.create(PODS, claim_pod("p", "draxr", template="later", ext=ext), namespace)
    message = await eventually(lambda: pending_message(kube, "p", namespace, "ResourceClaim not created yet"))
    assert 'pod "' + namespace + '/p": ResourceClaim not created yet' in message, message
    assert await bound_pod(kube, "p", namespace) is None
    await kube.create(RESOURCE_CLAIM_TEMPLATES, template_body("later", cls), namespace)
    bound = await eventually(lambda: bound_pod(kube, "p", namespace), timeout=90)
    claims = await claims_of(kube, namespace, bound)
    assert pod_claim_name(bound) in {c["metadata"]["name"] for c in claims}
    assert len(claims) == 2
    no_device_twice(claims)


async def test_a_claim_being_deleted_keeps_the_pod_pending_with_upstreams_message(
    kube: Kube, operator: Operator, fleet: fakedriver.Fleet, namespace: str
) -> None:
    await fakedriver.wait_nodes_ready(kube, fleet.node_names())
    [cls] = fleet.classes
    body = claim_body("doomed", cls)
    body["metadata"]["finalizers"] = [HOLD]
    await kube.create(RESOURCE_CLAIMS, body, namespace)
    await kube.delete(RESOURCE_CLAIMS, "doomed", namespace)
    try:
        await kube.create(PODS, claim_pod("p", "draxr", claim="doomed"), namespace)
        await kube.create(PODS, claim_pod("k", "default-scheduler", claim="doomed"), namespace)
        want = 'resourceclaim "doomed" is being deleted'
        ours = await eventually(lambda: pending_message(kube, "p", namespace, want))
        assert ours.startswith("0/"), ours
        assert f"nodes are available: {want}." in ours, ours
        # kube-scheduler turns it away in PreEnqueue (foreachPodResourceClaim, the same words):
        # no attempt, so no condition of its own; it stays unbound like ours.
        await asyncio.sleep(3)
        theirs = await kube.get(PODS, "k", namespace)
        assert not theirs["spec"].get("nodeName")
        for c in theirs["status"].get("conditions") or ():
            assert c["type"] != "PodScheduled" or want in (c.get("message") or ""), c
        claim = await kube.get(RESOURCE_CLAIMS, "doomed", namespace)
        assert not (claim.get("status") or {}).get("allocation")  # nothing written to it
        assert await bound_pod(kube, "p", namespace) is None
    finally:
        with contextlib.suppress(ApiException):
            await kube.patch(RESOURCE_CLAIMS, "doomed", {"metadata": {"finalizers": None}}, namespace)


@pytest.mark.parametrize("step", POD_CLAIM_STEPS)
async def test_sigkill_between_the_pod_claim_write_and_the_binding(
    kube: Kube,
    control_plane: ControlPlane,
    fleet: fakedriver.Fleet,
    namespace: str,
    names: str,
    step: str,
    tmp_path: Path,
) -> None:
    await fakedriver.wait_nodes_ready(kube, fleet.node_names())
    [(cls, ext)] = fleet.classes.items()
    assert ext is not None
    scheduler = f"draxr-{names}"
    await kube.create(RESOURCE_CLAIM_TEMPLATES, template_body("one-gpu", cls), namespace)
    log = tmp_path / "draxr.log"
    proc = Draxr(control_plane, None, scheduler, log, extra=LEASE, env={"DRAXR_CRASH_AFTER": step})
    try:
        made = await kube.create(PODS, claim_pod("p", scheduler, template="one-gpu", ext=ext), namespace)
        rc = await asyncio.get_running_loop().run_in_executor(None, proc.proc.wait, 90)
        assert rc == -signal.SIGKILL, log.read_text()[-3000:]
        assert await bound_pod(kube, "p", namespace) is None  # killed before the Binding
        name = pod_claim_name(await kube.get(PODS, "p", namespace))
        written = await kube.get(RESOURCE_CLAIMS, name, namespace)
        assert DELETE_PROTECTION in written["metadata"]["finalizers"]  # the pod claim's write happened
        if step == "pod-claim":
            assert written["status"]["reservedFor"] == [
                {"resource": "pods", "name": "p", "uid": made["metadata"]["uid"]}
            ]
        assert not [c for c in await kube.list(RESOURCE_CLAIMS, namespace) if c["metadata"]["name"] != name]

        proc = Draxr(control_plane, None, scheduler, log, extra=LEASE)
        bound = await proc.until(lambda: bound_pod(kube, "p", namespace), timeout=90)
        await proc.until(lambda: _with_status(kube, "p", namespace))
        bound = await kube.get(PODS, "p", namespace)
        claim = await kube.get(RESOURCE_CLAIMS, name, namespace)
        if step == "pod-claim":  # reserved already: kept, not reallocated
            assert claim["status"]["allocation"] == written["status"]["allocation"]
        assert [r["uid"] for r in claim["status"]["reservedFor"]] == [made["metadata"]["uid"]]
        [(_, pool, _)] = devices(claim)
        assert pool == bound["spec"]["nodeName"]
        claims = await kube.list(RESOURCE_CLAIMS, namespace)
        assert len(claims) == 2, claims  # the pod's claim and the one special claim it uses
        special = bound["status"]["extendedResourceClaimStatus"]["resourceClaimName"]
        assert {c["metadata"]["name"] for c in claims} == {name, special}
        no_device_twice(await kube.list(RESOURCE_CLAIMS))  # across the cluster
    finally:
        proc.stop()
