"""One real control plane per test run (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
kwok on 127.0.0.1), and a namespace plus unique names per test.

A cold machine builds the binaries on first use (20-40 min, progress on stderr). The tests never skip
for want of a control plane: if it cannot be built or started, they error.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import secrets
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from draxr.app import Operator, connect
from draxr.devcluster import fakedriver
from draxr.devcluster.binaries import ensure_binaries
from draxr.devcluster.controlplane import ControlPlane, Options
from draxr.kube import NAMESPACES, Kube
from draxr.settings import Settings


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def control_plane(request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    binaries = ensure_binaries()
    run_dir = Path(tempfile.mkdtemp(prefix="draxr-cp."))
    cp = ControlPlane(binaries=binaries, run_dir=run_dir, options=Options(scheduler=True, kwok=True))
    atexit.register(cp.stop)  # also on an interrupted session
    cp.start()
    print(f"\n[draxr] control plane up in {cp.timings['total']:.1f}s: {cp.api_url} ({run_dir})", file=sys.__stderr__)
    try:
        yield cp
    finally:
        rss = cp.rss_mib()
        cp.stop()
        summary = ", ".join(f"{k}={v:.0f}MiB" for k, v in sorted(rss.items()) if k.endswith(".peak"))
        print(f"\n[draxr] control plane peak memory: {summary}", file=sys.__stderr__)
        if request.session.testsfailed or os.environ.get("DRAXR_KEEP_RUN_DIR"):
            print(f"[draxr] logs kept in {run_dir}", file=sys.__stderr__)
        else:
            shutil.rmtree(run_dir, ignore_errors=True)


@pytest.fixture(scope="session")
async def kube(control_plane: ControlPlane) -> AsyncIterator[Kube]:
    async with await Kube.from_kubeconfig(control_plane.kubeconfig) as k:
        yield k


def unique(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(3)}"


@pytest.fixture
def names(request: pytest.FixtureRequest) -> str:
    """A short unique stem for the cluster-scoped objects of one test."""
    stem = request.node.name.removeprefix("test_").replace("_", "-").lower()[:20].strip("-")
    return unique(stem)


@pytest.fixture
async def namespace(kube: Kube, names: str) -> AsyncIterator[str]:
    await kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": names}})
    yield names
    await kube.delete_if_exists(NAMESPACES, names)


@pytest.fixture
async def fleet(kube: Kube, names: str) -> AsyncIterator[fakedriver.Fleet]:
    """Two DRA nodes with 4 devices each, one DeviceClass per test, all with unique names."""
    f = fakedriver.Fleet(
        prefix=names,
        dra_nodes=2,
        devices_per_node=4,
        driver=f"{names}.example.com",
        classes={f"{names}-gpu": f"{names}.example.com/gpu"},
    )
    objs = f.manifests()
    await fakedriver.apply(kube, objs)
    yield f
    await fakedriver.delete(kube, objs)


@pytest.fixture(scope="session")
async def operator(control_plane: ControlPlane) -> AsyncIterator[Operator]:
    """draxr running embedded in the test process with the admin identity (scheduler name "draxr")."""
    settings = Settings(
        kubeconfig=str(control_plane.kubeconfig),
        metrics_port=0,
        health_port=0,
        backoff_initial_seconds=0.2,
        backoff_max_seconds=5,
        unschedulable_flush_seconds=10,
        release_sweep_seconds=5,
        log_format="console",
    )
    kube, cfg = await connect(settings)
    op = Operator(settings, kube, cfg)
    stop = asyncio.Event()
    task = asyncio.create_task(op.run(stop))
    await asyncio.wait_for(op.synced.wait(), 60)
    yield op
    stop.set()
    await asyncio.wait_for(task, 60)
    await kube.close()
