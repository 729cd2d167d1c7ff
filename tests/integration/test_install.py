"""The install (``kubectl apply -k manifests/``) and the operator run the way its Deployment runs it:
in-cluster configuration with the ``draxr-system/draxr`` ServiceAccount token, no kubeconfig.

The scenario with that token runs on a module-scoped control plane without kube-controller-manager's
resourceclaim controller (and without kube-scheduler), so that draxr alone releases the claim and
every write path of draxr (claim, claim status, pod status, binding, events, release) is made with
the least-privilege ClusterRole. Everything listens on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from draxr.kube import (
    CLUSTER_ROLE_BINDINGS,
    CLUSTER_ROLES,
    EVENTS,
    NAMESPACES,
    PODS,
    RESOURCE_CLAIMS,
    SERVICE_ACCOUNTS,
    Kube,
    Resource,
)
from draxr_dev.devcluster import fakedriver
from draxr_dev.devcluster.binaries import ensure_binaries
from draxr_dev.devcluster.controlplane import RUN_FOR_ANNOTATION, ControlPlane, Options

from . import manifests
from .clusters import extra_control_plane, service_account_dir
from .conftest import installed as installed  # the fixture, also under its old path (test_liveness.py)
from .helpers import NAMESPACE, Draxr, eventually, get_or_none, install, pod
from .manifests import kubectl

SERVICE_ACCOUNT = "draxr"
DEPLOYMENTS = Resource("apps", "v1", "deployments", True)
NO_CLAIM_CONTROLLER = "*,-resourceclaim-controller"
# What a permission problem looks like in the operator's log (ours and the API's).
REFUSALS = ("forbidden", "api request refused", "not enough permissions", "(403)", '"status": 403')


@pytest.fixture(scope="module")
def bare_cluster() -> Iterator[ControlPlane]:
    """A second control plane: no resourceclaim controller (draxr alone releases claims), no
    kube-scheduler (the Deployment's own pod stays Pending and never competes), draxr installed."""
    with extra_control_plane("install", Options(kwok=True, kcm_controllers=NO_CLAIM_CONTROLLER)) as cp:
        install(cp)
        yield cp


@pytest.fixture(scope="module")
async def bare(bare_cluster: ControlPlane) -> AsyncIterator[Kube]:
    async with await Kube.from_kubeconfig(bare_cluster.kubeconfig) as k:
        yield k


def _http_get(port: int, path: str) -> tuple[int, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
        return resp.status, resp.read().decode()


def _fleet(names: str) -> fakedriver.Fleet:
    return fakedriver.Fleet(
        prefix=names,
        dra_nodes=1,
        devices_per_node=2,
        driver=f"{names}.example.com",
        classes={f"{names}-gpu": f"{names}.example.com/gpu"},
    )


# ---- a) the install --------------------------------------------------------------------------------


async def test_kubectl_apply_k_installs_and_is_idempotent(
    kube: Kube, control_plane: ControlPlane, installed: subprocess.CompletedProcess[str]
) -> None:
    created = installed.stdout
    for obj in (
        "customresourcedefinition.apiextensions.k8s.io/extendedresourcemappings.draxr.io",
        "customresourcedefinition.apiextensions.k8s.io/devicepluginrecords.draxr.io",
        "namespace/draxr-system",
        "serviceaccount/draxr",
        "clusterrole.rbac.authorization.k8s.io/draxr",
        "clusterrolebinding.rbac.authorization.k8s.io/draxr",
        "role.rbac.authorization.k8s.io/draxr-leader-election",
        "rolebinding.rbac.authorization.k8s.io/draxr-leader-election",
        "deployment.apps/draxr",
        "configmap/draxr-scheduler-config",
        "service/draxr-metrics",
        "service/draxr-webhook",
        "mutatingwebhookconfiguration.admissionregistration.k8s.io/draxr",
        "role.rbac.authorization.k8s.io/draxr-webhook-certs",
        "rolebinding.rbac.authorization.k8s.io/draxr-webhook-certs",
        "clusterrole.rbac.authorization.k8s.io/draxr-webhook",
        "clusterrolebinding.rbac.authorization.k8s.io/draxr-webhook",
    ):
        assert obj in created, created

    # Applying the same base again changes nothing (server-side dry run, then for real), also after
    # the operator has written the caBundle (a field the manifests leave out).
    for args in (("--dry-run=server",), ()):
        again = await asyncio.to_thread(manifests.apply, control_plane, *args)
        assert again.returncode == 0, again.stderr
        lines = [line for line in again.stdout.splitlines() if line.strip()]
        assert len(lines) == 17, again.stdout
        assert all("unchanged" in line for line in lines), again.stdout

    dep = await kube.get(DEPLOYMENTS, "draxr", NAMESPACE)
    spec = dep["spec"]["template"]["spec"]
    [container] = spec["containers"]
    assert container["image"].startswith("ghcr.io/draxr/draxr:")
    assert container["command"] == ["draxr", "run"]
    assert spec["serviceAccountName"] == SERVICE_ACCOUNT
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = container["securityContext"]
    assert sc["runAsNonRoot"] is True
    assert sc["runAsUser"] == 65532
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert set(container["resources"]["requests"]) == {"cpu", "memory"}
    assert set(container["resources"]["limits"]) == {"cpu", "memory"}
    assert {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}} in (
        container["env"]
    )
    assert dep["spec"]["replicas"] == 2  # active and standby, by Lease-based leader election
    assert dep["spec"]["strategy"]["rollingUpdate"]["maxSurge"] == 0
    svc = await kube.get(Resource("", "v1", "services", True), "draxr-metrics", NAMESPACE)
    assert [(p["name"], p["port"]) for p in svc["spec"]["ports"]] == [("metrics", 8080)]
    crb = await kube.get(CLUSTER_ROLE_BINDINGS, "draxr")
    assert crb["subjects"] == [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}]
    rules = (await kube.get(CLUSTER_ROLES, "draxr"))["rules"]
    assert not any("*" in r.get(k, []) for r in rules for k in ("apiGroups", "resources", "verbs"))

    # The namespace enforces the "restricted" Pod Security Standard: the ReplicaSet's pod is admitted.
    async def admitted() -> list[dict[str, Any]]:
        return await kube.list(PODS, NAMESPACE, labelSelector="app.kubernetes.io/name=draxr")

    await eventually(admitted, timeout=30)
    # This control plane has kube-scheduler and kwok nodes: the Deployment's (fake) pod goes away again.
    scaled = await asyncio.to_thread(
        kubectl, control_plane, "-n", NAMESPACE, "scale", "deployment/draxr", "--replicas=0"
    )
    assert scaled.returncode == 0, scaled.stderr


# ---- b) a whole scenario with the ServiceAccount's token ----------------------------------------------


async def test_operator_schedules_and_releases_with_its_service_account(
    bare: Kube, bare_cluster: ControlPlane, names: str, tmp_path: Path
) -> None:
    kube, ns, scheduler = bare, names, f"draxr-{names}"
    ext = f"{names}.example.com/gpu"
    fleet = _fleet(names)
    objs = fleet.manifests()
    await kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    draxr: Draxr | None = None
    try:
        await fakedriver.apply(kube, objs)
        sa_dir = await service_account_dir(kube, bare_cluster, NAMESPACE, SERVICE_ACCOUNT, tmp_path / "sa")
        # The Lease the manifests' Role lets it get and update (the scheduler's name is the test's).
        lease = ["--leader-election-lease-name", "draxr"]
        draxr = Draxr(bare_cluster, sa_dir, scheduler, tmp_path / "draxr.log", health=True, extra=lease)
        await fakedriver.wait_nodes_ready(kube, fleet.node_names())
        # 1. Bound with its special claim (create, status with allocation, pod status, binding).
        first = pod("first", {ext: "2"}, scheduler=scheduler, annotations={RUN_FOR_ANNOTATION: "2s"})
        await kube.create(PODS, first, ns)

        async def bound(name: str) -> dict[str, Any] | None:
            p = await kube.get(PODS, name, ns)
            return p if p["spec"].get("nodeName") else None

        p1 = await draxr.until(lambda: bound("first"))
        claim_name = p1["status"]["extendedResourceClaimStatus"]["resourceClaimName"]
        claim = await kube.get(RESOURCE_CLAIMS, claim_name, ns)
        assert sorted(r["device"] for r in claim["status"]["allocation"]["devices"]["results"]) == ["gpu-0", "gpu-1"]
        assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": "first", "uid": p1["metadata"]["uid"]}]

        # 2. Cannot fit (3 devices on a 2-device node): PodScheduled=False and a FailedScheduling event.
        await kube.create(PODS, pod("second", {ext: "3"}, scheduler=scheduler), ns)

        async def unschedulable() -> bool:
            p = await kube.get(PODS, "second", ns)
            conds = [c for c in p["status"].get("conditions") or () if c["type"] == "PodScheduled"]
            return bool(conds) and conds[0]["status"] == "False" and conds[0]["reason"] == "Unschedulable"

        async def failed_scheduling() -> list[dict[str, Any]]:
            return [
                e
                for e in await kube.list(EVENTS, ns)
                if e["regarding"]["name"] == "second" and e["reason"] == "FailedScheduling"
            ]

        await draxr.until(unschedulable)
        [event] = await draxr.until(failed_scheduling)
        assert event["type"] == "Warning"
        assert event["reportingController"] == scheduler

        # 3. The first pod completes; draxr (the only one here that can) releases its claim.
        async def released() -> bool:
            p = await kube.get(PODS, "first", ns)
            return (
                p["status"].get("phase") == "Succeeded"
                and await get_or_none(kube, RESOURCE_CLAIMS, claim_name, ns) is None
            )

        await draxr.until(released)
        assert any(
            line.get("event") == "claim released" and line.get("claim") == f"{ns}/{claim_name}"
            for line in draxr.lines()
        ), draxr.text()[-4000:]

        # 4. The freed devices go to the next pod.
        await kube.create(PODS, pod("third", {ext: "2"}, scheduler=scheduler), ns)
        p3 = await draxr.until(lambda: bound("third"))
        assert p3["status"]["extendedResourceClaimStatus"]["resourceClaimName"]

        # The probes' endpoint and the metrics answer.
        status, body = await asyncio.to_thread(_http_get, draxr.health_port, "/healthz")
        assert status == 200
        assert body.startswith("ok (event loop lag ")
        assert await asyncio.to_thread(_http_get, draxr.health_port, "/readyz") == (200, "ok\n")
        _, metrics = await asyncio.to_thread(_http_get, draxr.metrics_port, "/metrics")
        assert 'draxr_schedule_attempts_total{result="scheduled"} 2.0' in metrics
        assert 'draxr_resourceclaims_released_total{reason="release"} 1.0' in metrics

        log = draxr.text().lower()
        assert not [r for r in REFUSALS if r in log], draxr.text()[-4000:]
    finally:
        if draxr is not None:
            draxr.stop()
        await fakedriver.delete(kube, objs)
        await kube.delete_if_exists(NAMESPACES, ns)


# ---- c) a missing permission names the request ------------------------------------------------------


@pytest.mark.parametrize(
    ("drop", "verb", "api_words"),
    [
        # 1.37 refuses in validation (422, a Forbidden cause on status.allocation), checked at cluster scope.
        ("resourceclaims/binding", "PUT", ('resource="resourceclaims/binding"', 'verb="update"')),
        # An ordinary 403: the Scheduled event.
        ("events", "POST", ('cannot create resource "events"',)),
    ],
)
async def test_missing_permission_is_logged_with_verb_and_resource(
    kube: Kube,
    control_plane: ControlPlane,
    installed: subprocess.CompletedProcess[str],
    namespace: str,
    names: str,
    tmp_path: Path,
    drop: str,
    verb: str,
    api_words: tuple[str, ...],
) -> None:
    scheduler, sa, role = f"draxr-{names}", "draxr-partial", f"{names}-partial"
    full = (await kube.get(CLUSTER_ROLES, "draxr"))["rules"]
    assert any(drop in r["resources"] for r in full)
    rules = [{**r, "resources": [x for x in r["resources"] if x != drop]} for r in full]
    rules = [r for r in rules if r["resources"]]
    fleet = _fleet(names)
    objs = fleet.manifests()
    draxr: Draxr | None = None
    try:
        await kube.create(
            CLUSTER_ROLES,
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": role},
                "rules": rules,
            },
        )
        await kube.create(
            CLUSTER_ROLE_BINDINGS,
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": role},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": namespace}],
            },
        )
        await kube.create(
            SERVICE_ACCOUNTS, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa}}, namespace
        )
        await fakedriver.apply(kube, objs)
        sa_dir = await service_account_dir(kube, control_plane, namespace, sa, tmp_path / "sa")
        # No leader election (the manifests' Lease Role names the session operator's Lease only): it
        # leads from the start, so that the refusal under test is reached.
        draxr = Draxr(control_plane, sa_dir, scheduler, tmp_path / "draxr.log", extra=["--leader-elect", "false"])
        await fakedriver.wait_nodes_ready(kube, fleet.node_names())
        await kube.create(PODS, pod("p", {f"{names}.example.com/gpu": "2"}, scheduler=scheduler), namespace)

        async def refusal() -> list[dict[str, Any]]:
            return [
                line
                for line in draxr.lines()
                if line.get("event") == "api request refused"
                and line.get("verb") == verb
                and all(w in str(line.get("error")) for w in api_words)
            ]

        [line, *_] = await draxr.until(refusal, timeout=30)
        assert line["resource"].startswith("/api"), line
        assert line["level"] == "warning"
        if drop == "resourceclaims/binding":
            assert line["resource"].endswith("/status"), line
            assert "/resourceclaims/" in line["resource"], line

            # The binder says so too, and rolls the claim back: nothing bound, nothing left behind.
            async def binder_says_so() -> bool:
                return any(
                    x.get("event") == "binding failed, pod requeued" and "resourceclaims/binding" in str(x.get("error"))
                    for x in draxr.lines()
                )

            await draxr.until(binder_says_so, timeout=30)
            assert not (await kube.get(PODS, "p", namespace))["spec"].get("nodeName")

            async def rolled_back() -> bool:
                return not await kube.list(RESOURCE_CLAIMS, namespace)

            await draxr.until(rolled_back, timeout=30)
        else:
            assert line["resource"] == f"/apis/events.k8s.io/v1/namespaces/{namespace}/events", line
    finally:
        if draxr is not None:
            draxr.stop()
        await fakedriver.delete(kube, objs)
        await kube.delete_if_exists(CLUSTER_ROLE_BINDINGS, role)
        await kube.delete_if_exists(CLUSTER_ROLES, role)


def test_cert_manager_component_hands_the_certificate_over(tmp_path: Path) -> None:
    """The optional component renders: cert-manager's Certificate for the Service's names, the
    caBundle injection annotation, and draxr told to only load the Secret."""
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    base = os.path.relpath(manifests.MANIFESTS, overlay)
    (overlay / "kustomization.yaml").write_text(f"resources: [{base}]\ncomponents: [{base}/components/cert-manager]\n")
    out = subprocess.run(
        [str(ensure_binaries() / "kubectl"), "kustomize", "--load-restrictor", "LoadRestrictionsNone", str(overlay)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    docs = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(out.stdout) if d}
    cert = docs[("Certificate", "draxr-webhook")]
    assert cert["spec"]["secretName"] == "draxr-webhook-tls"
    assert "draxr-webhook.draxr-system.svc" in cert["spec"]["dnsNames"]
    hook = docs[("MutatingWebhookConfiguration", "draxr")]
    assert hook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == "draxr-system/draxr-webhook"
    [container] = docs[("Deployment", "draxr")]["spec"]["template"]["spec"]["containers"]
    assert {"name": "DRAXR_WEBHOOK_SELF_SIGNED", "value": "false"} in container["env"]
