"""Topology spreading and inter-pod (anti-)affinity on a real control plane: unmodified Deployments
in an opted-in namespace are steered to draxr by its webhook and placed as kube-scheduler places
the same Deployments (created in a namespace without the label) on the same fake fleet.

Pods pin themselves to the test's fleet with a nodeSelector, as GPU workloads usually do: spreading
then counts only the fleet's nodes (nodeAffinityPolicy Honor), for both schedulers alike.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest

from draxr.app import Operator
from draxr.core.steering import STEERED_ANNOTATION
from draxr.kube import NAMESPACES, PODS, Kube, Resource
from draxr_dev.devcluster import fakedriver

from .helpers import eventually

DEPLOYMENTS = Resource("apps", "v1", "deployments", True)
ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"


@pytest.fixture
async def zoned_fleet(kube: Kube, names: str) -> AsyncIterator[fakedriver.Fleet]:
    """Six DRA nodes with 4 devices each over three zones."""
    f = fakedriver.Fleet(
        prefix=f"{names}-z",
        dra_nodes=6,
        devices_per_node=4,
        driver=f"{names}.example.com",
        classes={f"{names}-gpu": f"{names}.example.com/gpu"},
        zones=("z1", "z2", "z3"),
    )
    objs = f.manifests()
    await fakedriver.apply(kube, objs)
    yield f
    await fakedriver.delete(kube, objs)


@contextlib.asynccontextmanager
async def namespace_with(kube: Kube, name: str, labels: dict[str, str]) -> AsyncIterator[str]:
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}
    await kube.create(NAMESPACES, body)
    try:
        yield name
    finally:
        await kube.delete_if_exists(NAMESPACES, name)


def deployment(app: str, fleet: fakedriver.Fleet, replicas: int, **spec: Any) -> dict[str, Any]:
    [resource] = [r for r in fleet.classes.values() if r]
    pod_spec = {
        "nodeSelector": {fakedriver.FLEET_LABEL: fleet.prefix},
        "containers": [{"name": "main", "image": "registry.invalid/app:1", "resources": {"limits": {resource: "1"}}}],
        **spec,
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": app},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": app}},
            "template": {"metadata": {"labels": {"app": app}}, "spec": pod_spec},
        },
    }


async def placed(kube: Kube, ns: str, app: str, count: int) -> list[dict[str, Any]]:
    """The Deployment's pods once ``count`` of them are bound."""

    async def bound() -> list[dict[str, Any]] | None:
        items = await kube.list(PODS, ns, labelSelector=f"app={app}")
        done = [p for p in items if p["spec"].get("nodeName")]
        return items if len(done) >= count else None

    result: list[dict[str, Any]] = await eventually(bound, timeout=90)
    return result


def per_domain(pods: list[dict[str, Any]], fleet: fakedriver.Fleet, key: str) -> list[int]:
    """Bound replicas per topology domain, sorted (the domains' names do not matter)."""
    by_node = {n: (HOSTNAME, n) for n in fleet.node_names()}
    zones = {n: fleet.zones[i % len(fleet.zones)] for i, n in enumerate(fleet.node_names())} if fleet.zones else {}
    counts: Counter[str] = Counter()
    for p in pods:
        node = p["spec"].get("nodeName")
        if node:
            counts[zones[node] if key == ZONE else by_node[node][1]] += 1
    domains = set(zones.values()) if key == ZONE else set(fleet.node_names())
    return sorted(counts.get(d, 0) for d in domains)


async def both(
    kube: Kube, names: str, op: Operator, body: dict[str, Any], count: int, suffix: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The same Deployment through draxr (opted-in namespace) and through kube-scheduler."""
    app = body["metadata"]["name"]
    async with (
        namespace_with(kube, f"{names}-{suffix}-d", {"draxr.io/enabled": "true"}) as via_draxr,
        namespace_with(kube, f"{names}-{suffix}-k", {}) as via_kube,
    ):
        await kube.create(DEPLOYMENTS, body, via_draxr)
        ours = await placed(kube, via_draxr, app, count)
        assert all(p["spec"]["schedulerName"] == "draxr" for p in ours)
        assert all(STEERED_ANNOTATION in p["metadata"]["annotations"] for p in ours)
        await kube.delete(DEPLOYMENTS, app, via_draxr)  # free the devices for kube-scheduler's run

        async def gone() -> bool:
            return not [p for p in await kube.list(PODS, via_draxr) if p["spec"].get("nodeName")]

        await eventually(gone, timeout=60)
        await kube.create(DEPLOYMENTS, body, via_kube)
        theirs = await placed(kube, via_kube, app, count)
        assert all(p["spec"]["schedulerName"] == "default-scheduler" for p in theirs)
        return ours, theirs


SPREAD = {"maxSkew": 1, "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "web"}}}


async def test_hard_spread_over_hostname_and_zone_matches_kube_scheduler(
    kube: Kube, zoned_fleet: fakedriver.Fleet, webhook_ready: Operator, names: str
) -> None:
    host = deployment("web", zoned_fleet, 6, topologySpreadConstraints=[{**SPREAD, "topologyKey": HOSTNAME}])
    ours, theirs = await both(kube, names, webhook_ready, host, 6, "h")
    assert per_domain(ours, zoned_fleet, HOSTNAME) == [1, 1, 1, 1, 1, 1]
    assert per_domain(theirs, zoned_fleet, HOSTNAME) == per_domain(ours, zoned_fleet, HOSTNAME)

    zone = deployment("web", zoned_fleet, 6, topologySpreadConstraints=[{**SPREAD, "topologyKey": ZONE}])
    ours, theirs = await both(kube, names, webhook_ready, zone, 6, "z")
    assert per_domain(ours, zoned_fleet, ZONE) == [2, 2, 2]
    assert per_domain(theirs, zoned_fleet, ZONE) == [2, 2, 2]


async def test_required_anti_affinity_puts_one_replica_per_node_and_the_extra_one_waits(
    kube: Kube, zoned_fleet: fakedriver.Fleet, webhook_ready: Operator, names: str
) -> None:
    anti = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": ZONE}
            ]
        }
    }
    async with namespace_with(kube, f"{names}-anti", {"draxr.io/enabled": "true"}) as ns:
        await kube.create(DEPLOYMENTS, deployment("db", zoned_fleet, 4, affinity=anti), ns)
        pods = await placed(kube, ns, "db", 3)
        assert per_domain(pods, zoned_fleet, ZONE) == [1, 1, 1]

        async def waiting() -> str | None:
            for p in await kube.list(PODS, ns, labelSelector="app=db"):
                for c in (p.get("status") or {}).get("conditions") or ():
                    if c["type"] == "PodScheduled" and c["status"] == "False" and c.get("message"):
                        return str(c["message"])
            return None

        message = await eventually(waiting, timeout=60)
        assert "didn't match pod anti-affinity rules" in message, message


async def test_required_affinity_joins_a_running_pod_and_a_deployment_without_constraints_spreads(
    kube: Kube, zoned_fleet: fakedriver.Fleet, webhook_ready: Operator, names: str
) -> None:
    near = {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": ZONE}
            ]
        }
    }
    async with namespace_with(kube, f"{names}-aff", {"draxr.io/enabled": "true"}) as ns:
        await kube.create(DEPLOYMENTS, deployment("cache", zoned_fleet, 1), ns)
        [cache] = await placed(kube, ns, "cache", 1)
        await kube.create(DEPLOYMENTS, deployment("app", zoned_fleet, 3, affinity=near), ns)
        apps = await placed(kube, ns, "app", 3)
        zone_of = {n: zoned_fleet.zones[i % 3] for i, n in enumerate(zoned_fleet.node_names())}
        assert {zone_of[p["spec"]["nodeName"]] for p in apps} == {zone_of[cache["spec"]["nodeName"]]}

    # No constraints at all: the system default spreading (a ReplicaSet selects the pods) and
    # LeastAllocated spread 6 replicas over the 6 nodes, under both schedulers.
    ours, theirs = await both(kube, names, webhook_ready, deployment("plain", zoned_fleet, 6), 6, "p")
    assert per_domain(ours, zoned_fleet, HOSTNAME) == per_domain(theirs, zoned_fleet, HOSTNAME)
    assert per_domain(ours, zoned_fleet, ZONE) == per_domain(theirs, zoned_fleet, ZONE) == [2, 2, 2]


async def test_a_running_pods_anti_affinity_keeps_new_pods_out_of_its_zone(
    kube: Kube, zoned_fleet: fakedriver.Fleet, webhook_ready: Operator, names: str
) -> None:
    """Symmetry: the new pods carry no affinity at all; the running pod's required anti-affinity
    against them is what keeps them out of its zone."""
    keep_away = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "noisy"}}, "topologyKey": ZONE}
            ]
        }
    }
    zone_of = {n: zoned_fleet.zones[i % 3] for i, n in enumerate(zoned_fleet.node_names())}
    async with namespace_with(kube, f"{names}-sym", {"draxr.io/enabled": "true"}) as ns:
        await kube.create(DEPLOYMENTS, deployment("quiet", zoned_fleet, 1, affinity=keep_away), ns)
        [quiet] = await placed(kube, ns, "quiet", 1)
        await kube.create(DEPLOYMENTS, deployment("noisy", zoned_fleet, 6), ns)
        noisy = await placed(kube, ns, "noisy", 6)
        zones = {zone_of[p["spec"]["nodeName"]] for p in noisy}
        assert zone_of[quiet["spec"]["nodeName"]] not in zones
        assert len(zones) == 2  # the other two zones take all six (system default spreading)
