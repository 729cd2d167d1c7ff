"""The metrics the alerts of manifests/components/monitoring need, read where Prometheus reads
them: the /metrics endpoint of ``draxr run`` processes (two replicas, one Lease), and the session
operator's registry for its webhook certificate.

* ``draxr_leader_election_master_status{name}``: 1 on the leader, 0 on the standby, and the
  standby's turns 1 when the leader goes;
* capacity per extended resource (``draxr_extended_resource_{devices,allocated_devices,free_devices}``)
  follows a pod that takes devices; a pod that cannot fit shows in
  ``draxr_pending_pods_by_resource`` / ``draxr_oldest_pending_pod_age_seconds`` and leaves them
  when deleted; ``draxr_orphaned_special_claims`` is exposed (its cases: tests/unit);
  all of it read over HTTP, i.e. computed on the operator's loop for the server's thread;
* ``draxr_webhook_certificate_expiration_timestamp_seconds`` is the served certificate's notAfter.
"""

from __future__ import annotations

import asyncio
import base64
import urllib.request
from pathlib import Path

from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from draxr.app import Operator
from draxr.core import certs
from draxr.kube import PODS, Kube
from draxr.webhook_tls import SECRETS
from draxr_dev.devcluster import fakedriver
from draxr_dev.devcluster.controlplane import ControlPlane

from .helpers import Draxr, eventually, pod

LEASE = ["--lease-duration-seconds", "4", "--renew-deadline-seconds", "3", "--retry-period-seconds", "0.5"]
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=15) as resp:
        text = resp.read().decode()
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


async def scrape(d: Draxr) -> Samples | None:
    """The process's /metrics (None until it serves: it starts after the initial sync)."""
    try:
        return await asyncio.to_thread(_scrape, d.metrics_port)
    except OSError:
        return None


def value(samples: Samples, metric: str, /, **labels: str) -> float | None:
    return samples.get((metric, tuple(sorted(labels.items()))))


async def test_leader_capacity_and_pending_metrics_on_two_replicas(
    kube: Kube, control_plane: ControlPlane, namespace: str, names: str, fleet: fakedriver.Fleet, tmp_path: Path
) -> None:
    scheduler = f"draxr-{names}"
    [resource] = [r for r in fleet.classes.values() if r]
    extra = [*LEASE, "--leader-election-namespace", namespace]
    replicas = {
        name: Draxr(control_plane, None, scheduler, tmp_path / f"{name}.log", health=True, pod_name=name, extra=extra)
        for name in ("a", "b")
    }
    try:
        await fakedriver.wait_nodes_ready(kube, fleet.node_names())

        async def one_leader() -> tuple[str, str] | None:
            status = {}
            for name, d in replicas.items():
                samples = await scrape(d)
                if samples is None:
                    return None
                status[name] = value(samples, "draxr_leader_election_master_status", name=scheduler)
            leaders = [n for n, v in status.items() if v == 1.0]
            others = [n for n, v in status.items() if v == 0.0]
            return (leaders[0], others[0]) if len(leaders) == 1 and len(others) == 1 else None

        leader, standby = await replicas["a"].until(one_leader, timeout=60)

        # Capacity: the fleet's 2 nodes x 4 devices, free; the same on both replicas (warm state).
        async def capacity(d: Draxr, want: tuple[float, float, float]) -> bool:
            samples = await scrape(d) or {}
            got = tuple(
                value(samples, f"draxr_extended_resource_{m}", resource=resource, served_by="DRA")
                for m in ("devices", "allocated_devices", "free_devices")
            )
            return got == want

        for d in replicas.values():
            await d.until(lambda d=d: capacity(d, (8.0, 0.0, 8.0)), timeout=30)

        # A pod that takes 2 devices; one that cannot fit anywhere (5 > 4 per node) stays pending.
        await kube.create(PODS, pod("fits", {resource: "2"}, scheduler=scheduler), namespace)
        for d in replicas.values():
            await d.until(lambda d=d: capacity(d, (8.0, 2.0, 6.0)), timeout=60)
        await kube.create(PODS, pod("too-big", {resource: "5"}, scheduler=scheduler), namespace)

        async def pending(d: Draxr) -> float | None:
            samples = await scrape(d) or {}
            if value(samples, "draxr_pending_pods_by_resource", resource=resource) != 1.0:
                return None
            age = value(samples, "draxr_oldest_pending_pod_age_seconds", resource=resource)
            return age if age is not None and age >= 1.0 else None

        for d in replicas.values():  # the standby knows the pending pods too
            await d.until(lambda d=d: pending(d), timeout=60)
        samples = await scrape(replicas[leader]) or {}
        for reason in ("pod-gone", "pod-finished"):  # (other tests' claims may count: exposed is the point)
            assert value(samples, "draxr_orphaned_special_claims", reason=reason) is not None, reason
        await kube.delete(PODS, "too-big", namespace)

        async def none_pending() -> bool:
            samples = await scrape(replicas[leader]) or {}
            return value(samples, "draxr_pending_pods_by_resource", resource=resource) is None

        await replicas[leader].until(none_pending, timeout=30)

        # The leader goes: the standby's gauge turns 1.
        await asyncio.to_thread(replicas[leader].stop)

        async def standby_leads() -> bool:
            samples = await scrape(replicas[standby]) or {}
            return value(samples, "draxr_leader_election_master_status", name=scheduler) == 1.0

        await replicas[standby].until(standby_leads, timeout=60)
    finally:
        for d in replicas.values():
            await asyncio.to_thread(d.stop)


async def test_webhook_certificate_expiry_is_the_served_certificates(webhook_ready: Operator, kube: Kube) -> None:
    s = webhook_ready.settings
    secret = await kube.get(SECRETS, s.webhook_secret_name, s.webhook_namespace)
    want = certs.not_after(base64.b64decode(secret["data"][certs.TLS_CRT])).timestamp()

    async def served() -> bool:
        got = REGISTRY.get_sample_value(
            "draxr_webhook_certificate_expiration_timestamp_seconds", {"secret": s.webhook_secret_name}
        )
        return got == want

    await eventually(served, timeout=30)
