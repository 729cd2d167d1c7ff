"""`draxr run --config FILE` against a real kube-apiserver: a bin-packing KubeSchedulerConfiguration
places pods differently than kube-scheduler's default profile (the default spreads by cpu, the file
packs by NodeResourcesFit MostAllocated over cpu and the DRA-served GPU), and an invalid file is
refused at start, non-zero, with kube-scheduler's message. `draxr explain --config` explains under
the file's profile.

draxr runs as a subprocess (devcluster.process, the launcher of the tests and benchmarks) with a
scheduler name of its own, so the session's operator leaves these pods alone.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from draxr.explain import explain
from draxr.kube import PODS, Kube
from draxr.settings import profile_of
from draxr_dev.devcluster import fakedriver
from draxr_dev.devcluster.controlplane import ControlPlane
from draxr_dev.devcluster.process import DraxrProcess, clean_environ

from .helpers import eventually, pod

HEAD = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration"}


def _draxr(cp: ControlPlane, scheduler: str, log: Path, *extra: str) -> DraxrProcess:
    args = [
        "--kubeconfig", str(cp.kubeconfig),
        "--scheduler-name", scheduler,
        "--leader-elect", "false",
        "--metrics-port", "0",
        "--health-port", "0",
        "--log-format", "json",
        *extra,
    ]  # fmt: skip
    return DraxrProcess(args, log=log, environ=clean_environ())


async def _place_two(
    kube: Kube, cp: ControlPlane, fleet: fakedriver.Fleet, namespace: str, tmp_path: Path, *extra: str
) -> list[str]:
    """Two pods, one after the other, each asking for 8 of a node's 32 cpus and one GPU: the nodes
    they land on."""
    scheduler = f"{namespace}-sched"
    [gpu] = [r for r in fleet.classes.values() if r]
    draxr = _draxr(cp, scheduler, tmp_path / "draxr.log", *extra)
    try:
        await fakedriver.wait_nodes_ready(kube, fleet.node_names())
        placed: list[str] = []
        for name in ("first", "second"):
            await kube.create(PODS, pod(name, {"cpu": "8", gpu: "1"}, scheduler=scheduler), namespace=namespace)

            async def bound(name: str = name) -> str | None:
                if draxr.poll() is not None:
                    pytest.fail(f"draxr exited with {draxr.poll()}:\n{draxr.text()[-3000:]}")
                node: str | None = (await kube.get(PODS, name, namespace)).get("spec", {}).get("nodeName")
                return node

            placed.append(await eventually(bound, timeout=90))
        return placed
    finally:
        draxr.stop()


async def test_default_profile_spreads_by_cpu(
    installed: Any, control_plane: ControlPlane, kube: Kube, fleet: fakedriver.Fleet, namespace: str, tmp_path: Path
) -> None:
    """kube-scheduler's default (LeastAllocated over cpu and memory; a GPU is not scored): the
    second pod goes to the emptier node."""
    first, second = await _place_two(kube, control_plane, fleet, namespace, tmp_path)
    assert {first, second} == set(fleet.node_names())


async def test_bin_packing_config_packs(
    installed: Any, control_plane: ControlPlane, kube: Kube, fleet: fakedriver.Fleet, namespace: str, tmp_path: Path
) -> None:
    """NodeResourcesFit MostAllocated over cpu and the GPU (its devices counted per DeviceClass):
    the second pod joins the first."""
    [gpu] = [r for r in fleet.classes.values() if r]
    config = {
        **HEAD,
        "profiles": [
            {
                "schedulerName": f"{namespace}-sched",
                "pluginConfig": [
                    {
                        "name": "NodeResourcesFit",
                        "args": {
                            "scoringStrategy": {
                                "type": "MostAllocated",
                                "resources": [{"name": "cpu", "weight": 1}, {"name": gpu, "weight": 3}],
                            }
                        },
                    }
                ],
            }
        ],
    }
    path = tmp_path / "scheduler-config.yaml"
    path.write_text(json.dumps(config))
    first, second = await _place_two(kube, control_plane, fleet, namespace, tmp_path, "--config", str(path))
    assert first == second
    assert first in fleet.node_names()


def _refused(control_plane: ControlPlane, config: dict[str, Any], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "bad.yaml"
    path.write_text(json.dumps(config))
    return subprocess.run(
        [sys.executable, "-m", "draxr", "run", "--kubeconfig", str(control_plane.kubeconfig), "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_environ(),
        check=False,
    )


def test_invalid_file_is_refused_with_upstreams_message(control_plane: ControlPlane, tmp_path: Path) -> None:
    out = _refused(
        control_plane,
        {
            **HEAD,
            "profiles": [
                {
                    "schedulerName": "draxr",
                    "plugins": {"score": {"enabled": [{"name": "NodeResourcesFitt", "weight": 2}]}},
                    "pluginConfig": [
                        {"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "MostAllocated"}}},
                    ],
                }
            ],
        },
        tmp_path,
    )
    assert out.returncode == 1, out.stdout + out.stderr
    assert (
        "initializing profiles: creating profile for scheduler name draxr: "
        'ScorePlugin "NodeResourcesFitt" does not exist' in out.stderr
    )
    out = _refused(
        control_plane,
        {
            **HEAD,
            "podInitialBackoffSeconds": 0,
            "profiles": [
                {
                    "schedulerName": "draxr",
                    "pluginConfig": [
                        {
                            "name": "NodeResourcesFit",
                            "args": {
                                "scoringStrategy": {
                                    "type": "LeastAllocated",
                                    "resources": [{"name": "cpu", "weight": 101}],
                                }
                            },
                        }
                    ],
                }
            ],
        },
        tmp_path,
    )
    assert out.returncode == 1, out.stdout + out.stderr
    assert "podInitialBackoffSeconds: Invalid value: 0: must be greater than 0" in out.stderr
    # The removed flags are refused with the way forward.
    legacy = subprocess.run(
        [
            sys.executable,
            "-m",
            "draxr",
            "run",
            "--kubeconfig",
            str(control_plane.kubeconfig),
            "--scoring",
            "MostAllocated",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_environ(),
        check=False,
    )
    assert legacy.returncode == 2
    assert "--scoring / DRAXR_SCORING was removed" in legacy.stderr
    assert "scoringStrategy" in legacy.stderr


async def test_explain_under_the_files_profile(
    kube: Kube, fleet: fakedriver.Fleet, namespace: str, tmp_path: Path
) -> None:
    """With a pod using 8 of the first node's 32 cpus, a pending one asking for 8: kube-scheduler's
    default (LeastAllocated) would choose the other node, the file's MostAllocated the first."""
    first, other = fleet.node_names()
    await fakedriver.wait_nodes_ready(kube, fleet.node_names())
    running = pod("running", {"cpu": "8"}, scheduler="nobody")
    running["spec"]["nodeName"] = first
    await kube.create(PODS, running, namespace=namespace)
    pending = pod("pending", {"cpu": "8"}, scheduler="nobody")
    pending["spec"]["nodeSelector"] = {fakedriver.FLEET_LABEL: fleet.prefix}  # these two nodes only
    await kube.create(PODS, pending, namespace=namespace)
    config = {
        **HEAD,
        "profiles": [
            {
                "schedulerName": "draxr",
                "pluginConfig": [
                    {"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "MostAllocated"}}},
                ],
            }
        ],
    }
    path = tmp_path / "scheduler-config.yaml"
    path.write_text(json.dumps(config))
    packed = await explain(kube, namespace, "pending", profile_of(str(path), "draxr"))
    spread = await explain(kube, namespace, "pending")
    assert f"draxr would choose node {first}" in packed, packed
    assert f"draxr would choose node {other}" in spread, spread
