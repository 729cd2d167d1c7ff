"""SIGKILL the operator right after each write step of a binding, restart it: no leaked claim, no
device allocated twice, and the pod ends up bound with exactly one claim."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import pytest

from draxr.faults import STEPS
from draxr.kube import PODS, RESOURCE_CLAIMS, Kube
from draxr_dev.devcluster import fakedriver
from draxr_dev.devcluster.controlplane import ControlPlane

from .helpers import Draxr, eventually, pod

# The killed process holds the Lease: keep its expiry short so that the restart leads soon.
LEASE = ["--lease-duration-seconds", "3", "--renew-deadline-seconds", "2", "--retry-period-seconds", "0.5"]


def _start(cp: ControlPlane, scheduler: str, log: Path, crash_after: str | None) -> Draxr:
    env = {"DRAXR_CRASH_AFTER": crash_after} if crash_after else {}
    return Draxr(cp, None, scheduler, log, extra=LEASE, env=env)


async def _bound(kube: Kube, name: str, namespace: str) -> dict[str, Any] | None:
    p = await kube.get(PODS, name, namespace)
    return p if p["spec"].get("nodeName") else None


@pytest.mark.parametrize("step", STEPS)
async def test_sigkill_after_each_write_step(
    kube: Kube, control_plane: ControlPlane, namespace: str, names: str, step: str, tmp_path: Path
) -> None:
    scheduler = f"draxr-{names}"
    fleet = fakedriver.Fleet(
        prefix=names,
        dra_nodes=1,
        devices_per_node=2,
        driver=f"{names}.example.com",
        classes={f"{names}-gpu": f"{names}.example.com/gpu"},
    )
    objs = fleet.manifests()
    await fakedriver.apply(kube, objs)
    log = tmp_path / "draxr.log"
    proc = _start(control_plane, scheduler, log, crash_after=step)
    try:
        await fakedriver.wait_nodes_ready(kube, fleet.node_names())
        await kube.create(PODS, pod("p", {f"{names}.example.com/gpu": "1"}, scheduler=scheduler), namespace)
        rc = await asyncio.get_running_loop().run_in_executor(None, proc.proc.wait, 60)
        assert rc == -signal.SIGKILL, log.read_text()[-2000:]

        proc = _start(control_plane, scheduler, log, crash_after=None)
        bound = await eventually(lambda: _bound(kube, "p", namespace), timeout=60)
        used = bound["status"]["extendedResourceClaimStatus"]["resourceClaimName"]

        async def only_the_used_claim() -> list[dict[str, Any]] | None:
            claims = await kube.list(RESOURCE_CLAIMS, namespace)
            return claims if [c["metadata"]["name"] for c in claims] == [used] else None

        [claim] = await eventually(only_the_used_claim, timeout=30)
        assert claim["status"]["reservedFor"][0]["uid"] == bound["metadata"]["uid"]
        # A second pod takes the other device: nothing is held twice or leaked.
        await kube.create(PODS, pod("q", {f"{names}.example.com/gpu": "1"}, scheduler=scheduler), namespace)
        q = await eventually(lambda: _bound(kube, "q", namespace), timeout=60)
        claims = {c["metadata"]["name"]: c for c in await kube.list(RESOURCE_CLAIMS, namespace)}
        q_claim = claims[q["status"]["extendedResourceClaimStatus"]["resourceClaimName"]]
        devices = [r["device"] for c in (claim, q_claim) for r in c["status"]["allocation"]["devices"]["results"]]
        assert sorted(devices) == ["gpu-0", "gpu-1"]
    finally:
        proc.stop()
        await fakedriver.delete(kube, objs)
