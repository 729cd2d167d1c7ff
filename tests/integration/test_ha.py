"""High availability: two replicas started as the Deployment's pods would be (in-cluster, with the
manifests' ServiceAccount), a few hundred pods, SIGKILL of the leader. The standby takes the Lease over
once the killed leader's lease has expired (never before, by the Lease's own times) in one transition,
no device is allocated twice and no pod is lost. The Lease is the manifests' own, ``draxr`` (their Role
grants get and update of that one only): the session's operator, its holder, is paused meanwhile."""

from __future__ import annotations

import asyncio
import signal
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from draxr.kube import PODS, RESOURCE_CLAIMS, ApiException, Kube
from draxr.leader import LEASES
from draxr_dev.devcluster import fakedriver
from draxr_dev.devcluster.controlplane import ControlPlane

from .clusters import service_account_dir
from .embedded import OperatorThread
from .helpers import NAMESPACE, SCHEDULER, Draxr, eventually, pod

LEASE_NAME = SCHEDULER  # the one Lease the manifests' Role lets draxr's ServiceAccount get and update
LEASE = [
    "--lease-duration-seconds", "6", "--renew-deadline-seconds", "4", "--retry-period-seconds", "1",
    "--leader-election-lease-name", LEASE_NAME,
]  # fmt: skip
PODS_TOTAL = 300


async def _lease(kube: Kube, lease: str) -> dict[str, Any]:
    """The Lease's spec; {} while it does not exist yet."""
    try:
        obj = await kube.get(LEASES, lease, NAMESPACE)
    except ApiException as e:
        if e.status == 404:
            return {}
        raise
    spec: dict[str, Any] = obj.get("spec") or {}
    return spec


def _time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


async def test_standby_takes_over_after_sigkill_of_the_leader(
    kube: Kube,
    control_plane: ControlPlane,
    operator_thread: OperatorThread,
    namespace: str,
    names: str,
    tmp_path: Path,
) -> None:
    scheduler = f"draxr-{names}"
    await asyncio.to_thread(operator_thread.pause, "test_ha's replicas take its Lease")
    try:
        await _standby_takes_over(kube, control_plane, namespace, names, scheduler, tmp_path)
    finally:
        await asyncio.to_thread(operator_thread.restart)


async def _standby_takes_over(
    kube: Kube, control_plane: ControlPlane, namespace: str, names: str, scheduler: str, tmp_path: Path
) -> None:
    fleet = fakedriver.Fleet(
        prefix=names,
        dra_nodes=40,
        devices_per_node=8,
        driver=f"{names}.example.com",
        classes={f"{names}-gpu": f"{names}.example.com/gpu"},
    )
    objs = fleet.manifests()
    await fakedriver.apply(kube, objs)
    sa_dir = await service_account_dir(kube, control_plane, NAMESPACE, "draxr", tmp_path / "sa")
    replicas = {
        name: Draxr(control_plane, sa_dir, scheduler, tmp_path / f"{name}.log", pod_name=name, extra=LEASE)
        for name in ("draxr-a", "draxr-b")
    }
    try:
        await fakedriver.wait_nodes_ready(kube, fleet.node_names())

        async def held() -> dict[str, Any]:
            spec = await _lease(kube, LEASE_NAME)
            return spec if spec.get("holderIdentity", "").startswith(tuple(n + "_" for n in replicas)) else {}

        first = await eventually(held, timeout=30)
        leader = next(n for n in replicas if first["holderIdentity"].startswith(n + "_"))
        standby = next(n for n in replicas if n != leader)

        ext = f"{names}.example.com/gpu"
        for i in range(PODS_TOTAL):
            await kube.create(PODS, pod(f"p-{i:03d}", {ext: "1"}, scheduler=scheduler), namespace)
            if i == PODS_TOTAL // 3:
                replicas[leader].proc.send_signal(signal.SIGKILL)
                killed_at = time.monotonic()
                last_by_leader = await _lease(kube, LEASE_NAME)

        # Until the standby takes over, the Lease shows the killed leader's last renewal.
        async def standby_leads() -> dict[str, Any]:
            nonlocal last_by_leader
            spec = await _lease(kube, LEASE_NAME)
            if spec.get("holderIdentity") == first["holderIdentity"]:
                last_by_leader = spec
            return spec if spec.get("holderIdentity", "").startswith(standby + "_") else {}

        taken = await eventually(standby_leads, timeout=30)
        failover = time.monotonic() - killed_at
        assert taken["leaseTransitions"] == last_by_leader["leaseTransitions"] + 1  # one takeover, no flapping
        waited = (_time(taken["acquireTime"]) - _time(last_by_leader["renewTime"])).total_seconds()
        assert waited >= last_by_leader["leaseDurationSeconds"] == 6  # the lease expired first: no overlap

        async def all_bound() -> list[dict[str, Any]] | None:
            pods = await kube.list(PODS, namespace)
            bound = [p for p in pods if p["spec"].get("nodeName") and p["status"].get("extendedResourceClaimStatus")]
            return pods if len(bound) == PODS_TOTAL else None

        pods = await replicas[standby].until(all_bound, timeout=180)

        claims = {c["metadata"]["name"]: c for c in await kube.list(RESOURCE_CLAIMS, namespace)}
        devices: list[tuple[str, str]] = []
        for p in pods:
            claim = claims[p["status"]["extendedResourceClaimStatus"]["resourceClaimName"]]
            assert claim["status"]["reservedFor"][0]["uid"] == p["metadata"]["uid"]
            devices += [(r["pool"], r["device"]) for r in claim["status"]["allocation"]["devices"]["results"]]
            assert all(r["pool"] == p["spec"]["nodeName"] for r in claim["status"]["allocation"]["devices"]["results"])
        assert len(devices) == len(set(devices)) == PODS_TOTAL  # no device twice

        async def no_stale_claims() -> bool:
            return len(await kube.list(RESOURCE_CLAIMS, namespace)) == PODS_TOTAL

        assert await eventually(no_stale_claims, timeout=30) is True
        print(
            f"\n[ha] failover (SIGKILL -> standby holds the lease): {failover:.1f}s; by the Lease, "
            f"{waited:.1f}s from the leader's last renewal to the standby's acquireTime"
        )
    finally:
        for r in replicas.values():
            r.stop()
        await fakedriver.delete(kube, objs)
        await asyncio.sleep(0)
