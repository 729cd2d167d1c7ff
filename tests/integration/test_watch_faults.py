"""draxr behind the fault proxy: its watches recover from 410s, cut streams, dropped connections,
stalls, throttling and server errors, and it keeps binding pods, its state free of objects deleted
while it could not watch.

The operator runs embedded with the manifests' ServiceAccount, in-cluster style, reaching the API
server only through the proxy (tests/faultproxy.py)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from draxr import metrics
from draxr.app import Operator
from draxr.kube import PODS, Kube
from draxr_dev.devcluster import fakedriver
from draxr_dev.devcluster.controlplane import ControlPlane

from ..faultproxy import FaultProxy, watches
from . import manifests
from .clusters import service_account_dir
from .embedded import embedded_operator, fast_settings
from .test_platform import eventually, pod


@pytest.fixture
async def behind_proxy(
    control_plane: ControlPlane, kube: Kube, names: str, tmp_path: Path
) -> AsyncIterator[tuple[FaultProxy, Operator, str]]:
    """A second draxr (its own scheduler name, no leader election) that sees the cluster only
    through a fault proxy."""
    applied = manifests.apply(control_plane)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    sa_dir = await service_account_dir(kube, control_plane, "draxr-system", "draxr", tmp_path / "sa")
    scheduler = f"draxr-{names}"
    settings = fast_settings(
        kubeconfig=None,
        serviceaccount_dir=str(sa_dir),
        scheduler_name=scheduler,
        leader_elect=False,
        backoff_max_seconds=2,
        unschedulable_flush_seconds=5,
        release_sweep_seconds=2,
        watch_idle_seconds=10,
    )
    with FaultProxy.for_control_plane(control_plane) as proxy:
        with proxy.in_cluster():
            ctx = embedded_operator(settings)
            _, op = await ctx.__aenter__()
        try:
            yield proxy, op, scheduler
        finally:
            proxy.clear()
            await ctx.__aexit__(None, None, None)


@contextlib.asynccontextmanager
async def gpus(kube: Kube, names: str) -> AsyncIterator[str]:
    fleet = fakedriver.Fleet(
        prefix=names,
        dra_nodes=2,
        devices_per_node=4,
        driver=f"{names}.example.com",
        classes={f"{names}-gpu": f"{names}.example.com/gpu"},
    )
    async with fakedriver.deployed(kube, fleet):
        yield f"{names}.example.com/gpu"


async def _bound(kube: Kube, name: str, namespace: str) -> dict[str, Any] | None:
    p = await kube.get(PODS, name, namespace)
    return p if p["spec"].get("nodeName") and (p.get("status") or {}).get("extendedResourceClaimStatus") else None


def _relists(watch: str, reason: str) -> float:
    return metrics.WATCH_RELISTS.labels(watch=watch, reason=reason)._value.get()


async def test_410_on_every_watch_and_list_continuation_for_30s(
    kube: Kube, namespace: str, names: str, behind_proxy: tuple[FaultProxy, Operator, str]
) -> None:
    proxy, op, scheduler = behind_proxy
    async with gpus(kube, names) as ext:
        await kube.create(PODS, pod("before", {ext: "1"}, scheduler=scheduler), namespace)
        await eventually(lambda: _bound(kube, "before", namespace), timeout=30)
        doomed = await kube.create(PODS, pod("doomed", {}, scheduler="nobody"), namespace)
        await eventually(lambda: _known(op, doomed["metadata"]["uid"]), timeout=20)
        expired = _relists("pods", "expired")

        with proxy.gone(30, lists=True, watches=True, unversioned_watches=True):
            await proxy.until_count("gone", 1, timeout=30)  # the watches met the 410
            await kube.create(PODS, pod("during", {ext: "1"}, scheduler=scheduler), namespace)
            await kube.delete(PODS, "doomed", namespace, gracePeriodSeconds=0)
            bound_during = await eventually(lambda: _bound(kube, "during", namespace), timeout=30)

        assert bound_during["spec"]["nodeName"].startswith(names)
        assert _relists("pods", "expired") > expired
        # A pod deleted while every watch answered 410 is gone from the state: the re-list saw it missing.
        assert await eventually(lambda: _forgotten(op, doomed["metadata"]["uid"]), timeout=30)
        assert proxy.counts["gone"] >= 6  # every kind's watch was refused at least once
        # After the outage the watches stream again: a new pod is bound from a watch event.
        await kube.create(PODS, pod("after", {ext: "1"}, scheduler=scheduler), namespace)
        await eventually(lambda: _bound(kube, "after", namespace), timeout=30)
        assert all(inf.synced.is_set() for inf in op.informers)
        assert op.health.problems() == []


async def _known(op: Operator, uid: str) -> bool:
    return uid in op.state.pods


async def _forgotten(op: Operator, uid: str) -> bool:
    return uid not in op.state.pods


@pytest.mark.parametrize(
    "fault",
    ["cut-watches", "drop-all", "stall", "throttle", "errors-503", "errors-500-watches"],
)
async def test_binds_again_after_each_fault(
    kube: Kube, namespace: str, names: str, behind_proxy: tuple[FaultProxy, Operator, str], fault: str
) -> None:
    proxy, op, scheduler = behind_proxy
    async with gpus(kube, names) as ext:
        await kube.create(PODS, pod("warm", {ext: "1"}, scheduler=scheduler), namespace)
        await eventually(lambda: _bound(kube, "warm", namespace), timeout=30)
        before = proxy.counts.copy()
        kind = {
            "cut-watches": "cut",
            "drop-all": "drop",
            "stall": "stall",
            "throttle": "throttle",
            "errors-503": "error",
            "errors-500-watches": "error",
        }[fault]
        if fault == "cut-watches":
            proxy.cut_watches(mid_event=True)
        elif fault == "drop-all":
            with proxy.drop_all(refuse_seconds=3):
                await kube.create(PODS, pod("probe", {ext: "1"}, scheduler=scheduler), namespace)
        elif fault == "stall":
            proxy.stall(4)
            await kube.create(PODS, pod("probe", {ext: "1"}, scheduler=scheduler), namespace)
        elif fault == "throttle":
            proxy.throttle(4, retry_after=1)
            await kube.create(PODS, pod("probe", {ext: "1"}, scheduler=scheduler), namespace)
        elif fault == "errors-503":
            proxy.errors(4, code=503, retry_after=1)
            await kube.create(PODS, pod("probe", {ext: "1"}, scheduler=scheduler), namespace)
        else:  # open streams are cut, and every watch re-opened in the next 10 s gets a 500
            proxy.errors(10, code=500, match=watches)
            proxy.cut_watches(mid_event=False)
        if fault in ("cut-watches", "errors-500-watches"):
            await proxy.until_count(kind, before[kind] + 1, timeout=20)
            await kube.create(PODS, pod("probe", {ext: "1"}, scheduler=scheduler), namespace)
        probe = await eventually(lambda: _bound(kube, "probe", namespace), timeout=45)
        assert proxy.counts[kind] > before[kind], f"the proxy applied no {kind} fault: {proxy.counts}"
        assert probe["status"]["extendedResourceClaimStatus"]["resourceClaimName"]
        assert op.health.problems() == []
        restarts = sum(
            metrics.WATCH_RESTARTS.labels(watch=inf.name, reason=r)._value.get()
            for inf in op.informers
            for r in ("error", "cut", "idle", "timeout")
        )
        assert restarts >= 1
