"""SIGKILL the operator right after each write step of a binding, restart it: no leaked claim, no
device allocated twice, and the pod ends up bound with exactly one claim."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from draxr.devcluster import fakedriver
from draxr.devcluster.controlplane import ControlPlane
from draxr.faults import STEPS
from draxr.kube import PODS, RESOURCE_CLAIMS, Kube

from .test_platform import eventually, pod


def _start(cp: ControlPlane, scheduler: str, log: Path, crash_after: str | None) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "DRAXR_CRASH_AFTER"}
    if crash_after:
        env["DRAXR_CRASH_AFTER"] = crash_after
    cmd = [
        sys.executable,
        "-m",
        "draxr",
        "run",
        "--kubeconfig",
        str(cp.kubeconfig),
        "--scheduler-name",
        scheduler,
        "--metrics-port",
        "0",
        "--health-port",
        "0",
        "--backoff-initial-seconds",
        "0.2",
        "--release-sweep-seconds",
        "2",
        # The killed process holds the Lease: keep its expiry short so that the restart leads soon.
        "--lease-duration-seconds",
        "3",
        "--renew-deadline-seconds",
        "2",
        "--retry-period-seconds",
        "0.5",
    ]
    return subprocess.Popen(cmd, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT)


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
        rc = await asyncio.get_running_loop().run_in_executor(None, proc.wait, 60)
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
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
        await fakedriver.delete(kube, objs)
