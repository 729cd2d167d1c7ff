"""Platform smoke tests: the API behaviour draxr relies on, pinned down against the real control plane."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from draxr.kube import (
    CLUSTER_ROLE_BINDINGS,
    CLUSTER_ROLES,
    DEVICE_CLASSES,
    JSON_PATCH,
    NODES,
    PODS,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    ROLE_BINDINGS,
    SERVICE_ACCOUNTS,
    ApiException,
    Kube,
)
from draxr_dev.devcluster import fakedriver
from draxr_dev.devcluster.controlplane import RUN_FOR_ANNOTATION, ControlPlane

from .clusters import bound_token

# These live in helpers.py; other modules may still import them from here (the old path).
from .helpers import DELETE_PROTECTION, EXTENDED_CLAIM_ANNOTATION, eventually, exact_request, pod, special_claim


def causes(err: ApiException) -> set[tuple[str, str]]:
    """(reason, field) of each cause in the API's Status body."""
    details = json.loads(err.body).get("details", {})
    return {(c.get("reason", ""), c.get("field", "")) for c in details.get("causes", [])}


def allocation(node: str, driver: str, request: str, devices: list[str]) -> dict[str, Any]:
    return {
        "devices": {"results": [{"request": request, "driver": driver, "pool": node, "device": d} for d in devices]},
        "nodeSelector": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
        },
    }


def binding(name: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }


# ---- DeviceClass and ResourceSlice --------------------------------------------------------------


async def test_deviceclass_extended_resource_name_round_trips(kube: Kube, names: str) -> None:
    body = fakedriver.device_class(
        f"{names}-gpu", driver="gpu.example.com", extended_resource_name=f"{names}.example.com/gpu"
    )
    await kube.create(DEVICE_CLASSES, body)
    try:
        got = await kube.get(DEVICE_CLASSES, f"{names}-gpu")
        assert got["spec"]["extendedResourceName"] == f"{names}.example.com/gpu"
        assert got["spec"]["selectors"] == body["spec"]["selectors"]
    finally:
        await kube.delete_if_exists(DEVICE_CLASSES, f"{names}-gpu")


async def test_deviceclass_rejects_kubernetes_io_extended_resource_name(kube: Kube, names: str) -> None:
    body = fakedriver.device_class(f"{names}-bad", extended_resource_name="kubernetes.io/gpu")
    with pytest.raises(ApiException) as err:
        await kube.create(DEVICE_CLASSES, body)
    assert err.value.status == 422
    assert "extendedResourceName" in err.value.body


async def test_resourceslice_on_fake_node_is_accepted(kube: Kube, fleet: fakedriver.Fleet) -> None:
    node = fleet.node_names()[0]
    got = await kube.get(RESOURCE_SLICES, f"{node}-{fleet.driver.replace('.', '-')}")
    assert got["spec"]["nodeName"] == node
    assert got["spec"]["pool"] == {"name": node, "generation": 1, "resourceSliceCount": 1}
    dev = got["spec"]["devices"][0]
    assert dev["name"] == "gpu-0"
    assert dev["attributes"]["driverVersion"] == {"version": "1.2.3"}
    assert dev["attributes"]["numa"] == {"int": 0}
    assert dev["capacity"]["memory"] == {"value": "80Gi"}


async def test_malformed_resourceslice_is_rejected_with_the_api_message(kube: Kube, names: str) -> None:
    dup = fakedriver.resource_slice(
        f"{names}-n", [fakedriver.device("gpu-0"), fakedriver.device("gpu-0")], name=f"{names}-dup"
    )
    with pytest.raises(ApiException) as err:
        await kube.create(RESOURCE_SLICES, dup)
    assert err.value.status == 422
    assert ("FieldValueDuplicate", "spec.devices[1]") in causes(err.value)

    no_count = fakedriver.resource_slice(f"{names}-n", [fakedriver.device("gpu-0")], name=f"{names}-nocount")
    no_count["spec"]["pool"]["resourceSliceCount"] = 0
    with pytest.raises(ApiException) as err:
        await kube.create(RESOURCE_SLICES, no_count)
    assert err.value.status == 422
    assert "spec.pool.resourceSliceCount" in {field for _, field in causes(err.value)}


# ---- the special claim, its status, the pod status and the binding --------------------------------


async def test_special_claim_allocation_pod_status_and_binding(
    kube: Kube, namespace: str, fleet: fakedriver.Fleet
) -> None:
    node = fleet.node_names()[0]
    [(cls, ext)] = fleet.classes.items()
    assert ext is not None
    p = await kube.create(PODS, pod("worker", {ext: "2"}), namespace)

    req = "container-0-request-0"
    claim = await kube.create(RESOURCE_CLAIMS, special_claim(p, [exact_request(req, cls, 2)]), namespace)
    name = claim["metadata"]["name"]
    assert name.startswith("worker-extended-resources-")
    assert claim["metadata"]["annotations"] == {EXTENDED_CLAIM_ANNOTATION: "true"}
    assert claim["metadata"]["finalizers"] == [DELETE_PROTECTION]
    assert claim["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": "worker", "uid": p["metadata"]["uid"], "controller": True}
    ]

    status = {
        "allocation": allocation(node, fleet.driver, req, ["gpu-0", "gpu-1"]),
        "reservedFor": [{"resource": "pods", "name": "worker", "uid": p["metadata"]["uid"]}],
    }
    updated = await kube.replace(RESOURCE_CLAIMS, {**claim, "status": status}, namespace, subresource="status")
    assert updated["status"]["allocation"] == status["allocation"]
    assert updated["status"]["reservedFor"] == status["reservedFor"]

    ercs = {
        "resourceClaimName": name,
        "requestMappings": [{"containerName": "main", "resourceName": ext, "requestName": req}],
    }
    await kube.patch(PODS, "worker", {"status": {"extendedResourceClaimStatus": ercs}}, namespace, subresource="status")
    assert (await kube.get(PODS, "worker", namespace))["status"]["extendedResourceClaimStatus"] == ercs

    await kube.create(PODS, binding("worker", node), namespace, name="worker", subresource="binding")
    bound = await kube.get(PODS, "worker", namespace)
    assert bound["spec"]["nodeName"] == node
    # A second binding is refused: the Binding API makes a double bind impossible.
    with pytest.raises(ApiException) as err:
        await kube.create(
            PODS, binding("worker", fleet.node_names()[1]), namespace, name="worker", subresource="binding"
        )
    assert err.value.status == 409


async def test_pod_status_rejects_mapping_to_unknown_container(kube: Kube, namespace: str) -> None:
    await kube.create(PODS, pod("p", {"example.com/gpu": "1"}), namespace)
    bad = {
        "resourceClaimName": "p-extended-resources-abcde",
        "requestMappings": [
            {"containerName": "nope", "resourceName": "example.com/gpu", "requestName": "container-0-request-0"}
        ],
    }
    with pytest.raises(ApiException) as err:
        await kube.patch(PODS, "p", {"status": {"extendedResourceClaimStatus": bad}}, namespace, subresource="status")
    assert err.value.status == 422
    assert "extendedResourceClaimStatus" in err.value.body


# ---- granular claim status authorization (resourceclaims/binding) --------------------------------


async def _service_account_client(kube: Kube, cp: ControlPlane, namespace: str, sa: str) -> Kube:
    await kube.create(
        SERVICE_ACCOUNTS, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa}}, namespace
    )
    return Kube.from_token(cp.api_url, await bound_token(kube, namespace, sa), cp.pki.ca_crt)


async def _grant(
    kube: Kube, role: str, namespace: str, sa: str, rules: list[dict[str, Any]], *, cluster_wide: bool = True
) -> None:
    """A ClusterRole with ``rules`` bound to the ServiceAccount, cluster-wide or in its namespace only."""
    role_body = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": role}}
    await kube.create(CLUSTER_ROLES, {**role_body, "rules": rules})
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding" if cluster_wide else "RoleBinding",
        "metadata": {"name": role},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": namespace}],
    }
    if cluster_wide:
        await kube.create(CLUSTER_ROLE_BINDINGS, binding)
    else:
        await kube.create(ROLE_BINDINGS, binding, namespace)


async def _can(kube: Kube, user: str, verb: str, resource: str, subresource: str, namespace: str) -> bool:
    review = await kube.request(
        "POST",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": user,
                "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}"],
                "resourceAttributes": {
                    "group": "resource.k8s.io",
                    "resource": resource,
                    "subresource": subresource,
                    "verb": verb,
                    "namespace": namespace,
                },
            },
        },
    )
    return bool(review["status"].get("allowed"))


async def test_claim_allocation_needs_resourceclaims_binding(
    kube: Kube, control_plane: ControlPlane, namespace: str, fleet: fakedriver.Fleet, names: str
) -> None:
    node = fleet.node_names()[0]
    [(cls, ext)] = fleet.classes.items()
    assert ext is not None
    base_rules = [
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceclaims"],
            "verbs": ["get", "create", "update", "patch", "delete"],
        },
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims/status"], "verbs": ["update", "patch"]},
    ]
    await _grant(kube, f"{names}-status", namespace, "writer", base_rules)
    sa_kube = await _service_account_client(kube, control_plane, namespace, "writer")
    try:
        p = await kube.create(PODS, pod("w", {ext: "1"}), namespace)
        req = "container-0-request-0"
        claim = await sa_kube.create(RESOURCE_CLAIMS, special_claim(p, [exact_request(req, cls, 1)]), namespace)
        status = {
            "allocation": allocation(node, fleet.driver, req, ["gpu-0"]),
            "reservedFor": [{"resource": "pods", "name": "w", "uid": p["metadata"]["uid"]}],
        }

        user = f"system:serviceaccount:{namespace}:writer"
        assert await _can(kube, user, "update", "resourceclaims", "status", namespace)
        assert not await _can(kube, user, "update", "resourceclaims", "binding", namespace)

        async def refused() -> ApiException:
            with pytest.raises(ApiException) as err:
                await sa_kube.replace(RESOURCE_CLAIMS, {**claim, "status": status}, namespace, subresource="status")
            return err.value

        # 1.37 enforces it in validation: 422 with a Forbidden cause on status.allocation, not a 403.
        err = await refused()
        assert err.status == 422
        assert ("FieldValueForbidden", "status.allocation") in causes(err)
        assert 'requires resource="resourceclaims/binding"' in json.loads(err.body)["message"]

        binding_rules = [
            {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims/binding"], "verbs": ["update", "patch"]}
        ]
        # The check is made at cluster scope: a RoleBinding in the claim's namespace is not enough.
        await _grant(kube, f"{names}-nsbinding", namespace, "writer", binding_rules, cluster_wide=False)
        await eventually(lambda: _can(kube, user, "update", "resourceclaims", "binding", namespace))
        err = await refused()
        assert "at the cluster scope" in json.loads(err.body)["message"]

        await _grant(kube, f"{names}-binding", namespace, "writer", binding_rules)
        written = await eventually(
            lambda: _try_replace_status(sa_kube, {**claim, "status": status}, namespace), timeout=10
        )
        assert written["status"]["allocation"]["devices"]["results"][0]["device"] == "gpu-0"
        assert written["status"]["reservedFor"] == status["reservedFor"]
    finally:
        await sa_kube.close()
        for role in (f"{names}-status", f"{names}-binding", f"{names}-nsbinding"):
            await kube.delete_if_exists(CLUSTER_ROLE_BINDINGS, role)
            await kube.delete_if_exists(CLUSTER_ROLES, role)


async def _try_replace_status(kube: Kube, claim: dict[str, Any], namespace: str) -> dict[str, Any] | None:
    try:
        return await kube.replace(RESOURCE_CLAIMS, claim, namespace, subresource="status")
    except ApiException as e:
        if e.status != 422:  # RBAC caches take a moment to see a new binding
            raise
        return None


# ---- garbage collection ---------------------------------------------------------------------------


async def _claim_state(kube: Kube, name: str, namespace: str) -> str:
    try:
        c = await kube.get(RESOURCE_CLAIMS, name, namespace)
    except ApiException as e:
        return "deleted" if e.status == 404 else f"error {e.status}"
    return "terminating" if c["metadata"].get("deletionTimestamp") else "present"


async def _state_is(kube: Kube, name: str, namespace: str, want: str) -> bool:
    return await _claim_state(kube, name, namespace) == want


async def test_garbage_collector_deletes_the_claim_of_a_deleted_pod_once_finalizers_are_gone(
    kube: Kube, namespace: str, fleet: fakedriver.Fleet
) -> None:
    [(cls, ext)] = fleet.classes.items()
    assert ext is not None
    p = await kube.create(PODS, pod("gone", {ext: "1"}), namespace)
    body = special_claim(p, [exact_request("container-0-request-0", cls, 1)])
    body["metadata"]["finalizers"].append("draxr.io/test-hold")  # nobody but this test removes it
    name = (await kube.create(RESOURCE_CLAIMS, body, namespace))["metadata"]["name"]
    await kube.delete(PODS, "gone", namespace, gracePeriodSeconds=0)

    # The garbage collector deletes the orphan (controller ownerRef), a finalizer holds it.
    assert await eventually(lambda: _state_is(kube, name, namespace, "terminating")) is True
    await asyncio.sleep(2)
    assert await _claim_state(kube, name, namespace) == "terminating"
    await kube.patch(
        RESOURCE_CLAIMS, name, [{"op": "remove", "path": "/metadata/finalizers"}], namespace, content_type=JSON_PATCH
    )
    assert await eventually(lambda: _state_is(kube, name, namespace, "deleted")) is True


async def test_resourceclaim_controller_releases_the_special_claim_of_a_deleted_pod(
    kube: Kube, namespace: str, fleet: fakedriver.Fleet
) -> None:
    """KCM's resourceclaim controller (1.35+, the fix for kubernetes#134311) drops reservedFor, the
    allocation and delete-protection of a special claim whose pod is gone. draxr must coexist with it."""
    node = fleet.node_names()[0]
    [(cls, ext)] = fleet.classes.items()
    assert ext is not None
    p = await kube.create(PODS, pod("done", {ext: "1"}), namespace)
    req = "container-0-request-0"
    claim = await kube.create(RESOURCE_CLAIMS, special_claim(p, [exact_request(req, cls, 1)]), namespace)
    status = {
        "allocation": allocation(node, fleet.driver, req, ["gpu-0"]),
        "reservedFor": [{"resource": "pods", "name": "done", "uid": p["metadata"]["uid"]}],
    }
    await kube.replace(RESOURCE_CLAIMS, {**claim, "status": status}, namespace, subresource="status")
    name = claim["metadata"]["name"]
    await asyncio.sleep(1)
    assert await _claim_state(kube, name, namespace) == "present"  # in use: nothing touches it

    await kube.delete(PODS, "done", namespace, gracePeriodSeconds=0)
    assert await eventually(lambda: _state_is(kube, name, namespace, "deleted")) is True


# ---- kwok: fake nodes and pod lifecycle -----------------------------------------------------------


async def test_kwok_nodes_become_ready_and_run_then_complete_pods(
    kube: Kube, namespace: str, fleet: fakedriver.Fleet
) -> None:
    await fakedriver.wait_nodes_ready(kube, fleet.node_names())
    node = fleet.node_names()[1]
    await kube.create(PODS, pod("short", {}, annotations={RUN_FOR_ANNOTATION: "1s"}), namespace)
    await kube.create(PODS, pod("long", {}), namespace)
    for name in ("short", "long"):
        await kube.create(PODS, binding(name, node), namespace, name=name, subresource="binding")

    async def phase(name: str) -> str:
        return str((await kube.get(PODS, name, namespace)).get("status", {}).get("phase", ""))

    assert await eventually(lambda: _phase_is(phase, "short", "Succeeded")) is True
    assert await phase("long") == "Running"
    n = await kube.get(NODES, node)
    assert n["status"]["allocatable"]["cpu"] == "32"


async def _phase_is(phase: Callable[[str], Awaitable[str]], name: str, want: str) -> bool:
    return await phase(name) == want
