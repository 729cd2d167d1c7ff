"""What the integration tests share: polling, the bodies of pods and special claims, and ``draxr run``
as a subprocess (in-cluster as its Deployment runs it, or with the control plane's kubeconfig)."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from draxr.app import Operator
from draxr.kube import PODS, RESOURCE_CLAIMS, ApiException, Kube, Resource
from draxr_dev.devcluster import fakedriver
from draxr_dev.devcluster.controlplane import ControlPlane, free_port
from draxr_dev.devcluster.process import DraxrProcess, clean_environ, in_cluster

from . import manifests

EXTENDED_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"
NO_SCHEDULER = "draxr-test-nobody"  # no scheduler serves it: these tests bind by hand
SCHEDULER = "draxr"  # the session operator's (conftest.operator)
NAMESPACE = "draxr-system"  # the install's namespace: its ServiceAccount, the Lease, the webhook's Secret


async def eventually(check: Callable[[], Awaitable[Any]], timeout: float = 60.0, interval: float = 0.25) -> Any:
    """Poll ``check`` until it returns a truthy value; fail with its last value after ``timeout``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last: Any = None
    while loop.time() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(interval)
    pytest.fail(f"condition not met within {timeout}s; last value: {last!r}")


# ---- bodies --------------------------------------------------------------------------------------


def pod(
    name: str, resources: dict[str, str], *, scheduler: str = NO_SCHEDULER, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": dict(annotations or {})},
        "spec": {
            "schedulerName": scheduler,
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "registry.invalid/fake:1", "resources": {"limits": resources}}],
        },
    }


def special_claim(p: dict[str, Any], requests: list[dict[str, Any]], finalizer: bool = True) -> dict[str, Any]:
    meta = p["metadata"]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "generateName": f"{meta['name']}-extended-resources-",
            "annotations": {EXTENDED_CLAIM_ANNOTATION: "true"},
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"], "controller": True}
            ],
            "finalizers": [DELETE_PROTECTION] if finalizer else [],
        },
        "spec": {"devices": {"requests": requests}},
    }


def exact_request(name: str, device_class: str, count: int) -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": device_class, "allocationMode": "ExactCount", "count": count}}


# ---- reading back --------------------------------------------------------------------------------


async def bound_with_status(kube: Kube, name: str, namespace: str) -> dict[str, Any] | None:
    """The pod once it is bound and its extendedResourceClaimStatus is written, else None."""
    p = await kube.get(PODS, name, namespace)
    return p if p["spec"].get("nodeName") and p.get("status", {}).get("extendedResourceClaimStatus") else None


@asynccontextmanager
async def explain_scenario(kube: Kube, namespace: str, names: str) -> AsyncIterator[str]:
    """What `draxr explain` and `kubectl draxr` are tried on: 2 nodes of 2 devices, `<names>-1`
    tainted maintenance=yes:NoSchedule; "small" (1 device) bound by the session operator on
    `<names>-0`, "big" (2 devices) held back by a scheduling gate. Yields the extended resource."""
    ext = f"{names}.example.com/gpu"
    fleet = fakedriver.Fleet(
        prefix=names,
        dra_nodes=2,
        devices_per_node=2,
        driver=f"{names}.example.com",
        classes={f"{names}-gpu": ext},
        node_taints=[],
    )
    objs = fleet.manifests()
    tainted = next(o for o in objs if o["kind"] == "Node" and o["metadata"]["name"].endswith("-1"))
    tainted["spec"]["taints"] = [{"key": "maintenance", "value": "yes", "effect": "NoSchedule"}]
    await fakedriver.apply(kube, objs)
    try:
        await fakedriver.wait_nodes_ready(kube, fleet.node_names())
        await kube.create(PODS, pod("small", {ext: "1"}, scheduler=SCHEDULER), namespace)
        await eventually(lambda: bound_with_status(kube, "small", namespace))
        body: dict[str, Any] = pod("big", {ext: "2"}, scheduler=SCHEDULER)
        body["spec"]["schedulingGates"] = [{"name": "draxr.io/test-hold"}]  # pending for good
        await kube.create(PODS, body, namespace)
        yield ext
    finally:
        await fakedriver.delete(kube, objs)


@asynccontextmanager
async def gpus(kube: Kube, namespace: str, devices: int = 2) -> AsyncIterator[str]:
    """One DRA node with ``devices`` fake GPUs for the test (prefix, driver and class named after
    ``namespace``); yields their extended resource name."""
    fleet = fakedriver.Fleet(
        prefix=namespace,
        dra_nodes=1,
        devices_per_node=devices,
        driver=f"{namespace}.example.com",
        classes={f"{namespace}-gpu": f"{namespace}.example.com/gpu"},
    )
    async with fakedriver.deployed(kube, fleet):
        yield f"{namespace}.example.com/gpu"


async def claims_in(kube: Kube, namespace: str) -> list[dict[str, Any]]:
    return await kube.list(RESOURCE_CLAIMS, namespace)


# ---- the install and the operator as a process ------------------------------------------------------


def install(cp: ControlPlane) -> subprocess.CompletedProcess[str]:
    """``kubectl apply`` of manifests/ (see manifests.py), which must succeed."""
    out = manifests.apply(cp)
    assert out.returncode == 0, out.stdout + out.stderr
    return out


class Draxr(DraxrProcess):
    """``python -m draxr run`` with the tests' settings: in-cluster with the ServiceAccount directory
    ``sa_dir`` as the Deployment's pod (no kubeconfig anywhere in its environment), or, with
    ``sa_dir=None``, with the control plane's admin kubeconfig. Logs JSON lines to ``log``; metrics
    and health served on free loopback ports with ``health``; ``env`` is added to its environment."""

    def __init__(
        self,
        cp: ControlPlane,
        sa_dir: Path | None,
        scheduler: str,
        log: Path,
        *,
        health: bool = False,
        pod_name: str | None = None,
        extra: Sequence[str] = (),
        env: Mapping[str, str] = {},
    ) -> None:
        self.health_port = free_port() if health else 0
        self.metrics_port = free_port() if health else 0
        args = [
            "--scheduler-name", scheduler,
            "--metrics-port", str(self.metrics_port),
            "--health-port", str(self.health_port),
            "--bind-address", "127.0.0.1",
            "--backoff-initial-seconds", "0.2",
            "--release-sweep-seconds", "2",
            "--log-format", "json",
            *extra,
        ]  # fmt: skip
        environ = clean_environ() | dict(env)
        if sa_dir is None:
            connect = ["--kubeconfig", str(cp.kubeconfig)]
        else:
            name = pod_name or f"{scheduler}-0"
            connect, environ = in_cluster(cp, sa_dir, pod_name=name, namespace=NAMESPACE, environ=environ)
        super().__init__([*connect, *args], log=log, environ=environ)

    async def until(self, check: Callable[[], Awaitable[Any]], timeout: float = 60.0) -> Any:
        """``eventually``, failing at once if the operator died, and with its log tail either way."""

        async def alive_check() -> Any:
            if self.proc.poll() is not None:
                pytest.fail(f"draxr exited with {self.proc.returncode}:\n{self.text()[-4000:]}")
            return await check()

        try:
            return await eventually(alive_check, timeout=timeout)
        except pytest.fail.Exception as e:
            pytest.fail(f"{e}\n--- draxr log tail ---\n{self.text()[-4000:]}")


async def certs_loaded(op: Operator, timeout: float = 60) -> None:
    """The operator has its webhook certificate (polled: the Event belongs to the operator's loop)
    and its webhook serves with it (its server process starts once the certificate is there)."""
    assert op.certs is not None
    assert op.webhook is not None
    certs, webhook = op.certs, op.webhook

    async def loaded() -> bool:
        return certs.loaded.is_set() and webhook.alive()

    await eventually(loaded, timeout=timeout)


async def get_or_none(kube: Kube, res: Resource, name: str, namespace: str | None = None) -> dict[str, Any] | None:
    """The object, or None if the API server says it does not exist (any other error raises)."""
    try:
        return await kube.get(res, name, namespace)
    except ApiException as e:
        if e.status == 404:
            return None
        raise
