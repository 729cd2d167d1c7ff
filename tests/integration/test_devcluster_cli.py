"""The dev cluster command: up creates a working cluster with fake GPU nodes, down leaves no process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from draxr_dev.devcluster.binaries import ensure_binaries


def _run(*args: str, run_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "draxr_dev.devcluster", "--dir", str(run_dir), *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_up_status_kubectl_down(tmp_path: Path) -> None:
    run_dir = tmp_path / "dev"
    up = _run("up", "--nodes", "1", "--devices", "2", "--device-plugin-nodes", "1", run_dir=run_dir)
    state = json.loads((run_dir / "state.json").read_text()) if (run_dir / "state.json").exists() else {}
    pids = list(state.get("pids", {}).values())
    try:
        assert up.returncode == 0, up.stderr[-3000:]
        assert "2 fake nodes Ready" in up.stdout
        assert set(state["pids"]) == {"etcd", "kube-apiserver", "kube-controller-manager", "kwok"}

        status = _run("status", run_dir=run_dir)
        assert status.returncode == 0, status.stdout
        assert "NOT RUNNING" not in status.stdout

        kubectl = ensure_binaries() / "kubectl"
        env = {**os.environ, "KUBECONFIG": str(run_dir / "admin.kubeconfig")}
        out = subprocess.run(
            [str(kubectl), "get", "nodes,deviceclasses,resourceslices", "-o", "name"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=True,
        ).stdout.split()
        assert sorted(out) == sorted(
            [
                "node/gpu-node-0",
                "node/gpu-node-1",
                "deviceclass.resource.k8s.io/gpu.example.com",
                "resourceslice.resource.k8s.io/gpu-node-0-gpu-example-com",
            ]
        )
    finally:
        down = _run("down", run_dir=run_dir)
    assert down.returncode == 0
    assert not (run_dir / "state.json").exists()
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
    # Stopping twice is harmless.
    assert _run("down", run_dir=run_dir).returncode == 0
