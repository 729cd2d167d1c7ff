"""`kubectl draxr` run by kubectl itself (plugin discovery on PATH, the pip-installed
`kubectl-draxr`), with kubectl's flags: --kubeconfig, --context (and its namespace), -n, -A, -o."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from draxr.app import Operator
from draxr.kube import Kube
from draxr_dev.devcluster.binaries import ensure_binaries
from draxr_dev.devcluster.controlplane import ControlPlane

from .helpers import explain_scenario


def kubectl_draxr(*args: str, kubeconfig: Path | None = None) -> str:
    """``kubectl draxr ARGS`` with the venv's bin (where pip put kubectl-draxr) on PATH."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("KUBECONFIG", None)
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    out = subprocess.run(
        [str(ensure_binaries() / "kubectl"), "draxr", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, f"kubectl draxr {' '.join(args)}: {out.returncode}\n{out.stdout}\n{out.stderr}"
    return out.stdout


def two_contexts(cp: ControlPlane, namespace: str, into: Path) -> Path:
    """The control plane's kubeconfig with a second context, "scoped", whose namespace is set."""
    cfg: dict[str, Any] = yaml.safe_load(cp.kubeconfig.read_text())
    current = next(c for c in cfg["contexts"] if c["name"] == cfg["current-context"])
    scoped = {"name": "scoped", "context": {**current["context"], "namespace": namespace}}
    cfg["contexts"] = [*cfg["contexts"], scoped]
    into.write_text(yaml.safe_dump(cfg))
    return into


async def run(*args: str, kubeconfig: Path | None = None) -> str:
    return await asyncio.to_thread(kubectl_draxr, *args, kubeconfig=kubeconfig)


async def test_kubectl_draxr_explain_and_capacity(
    control_plane: ControlPlane, kube: Kube, operator: Operator, namespace: str, names: str, tmp_path: Path
) -> None:
    config = two_contexts(control_plane, namespace, tmp_path / "kubeconfig")
    async with explain_scenario(kube, namespace, names) as ext:
        # The namespace comes from --context's namespace; flags after the subcommand, as kubectl users write.
        text = await run("explain", "small", "--kubeconfig", str(config), "--context", "scoped")
        assert f"pod {namespace}/small is bound to node {names}-0" in text
        assert f"container main: {ext} -> container-0-request-0" in text
        # Without the context's namespace the pod is looked up in "default": not found.
        missing = await asyncio.to_thread(
            subprocess.run,
            [str(ensure_binaries() / "kubectl"), "draxr", "explain", "small", f"--kubeconfig={config}"],
            env={**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert missing.returncode == 1, missing.stdout + missing.stderr
        assert "not found" in missing.stderr

        # -n from $KUBECONFIG; -o wide names the untolerated taint that 1.37's wording leaves out.
        wide = await run("explain", "big", "-n", namespace, "-o", "wide", kubeconfig=config)
        assert f"{names}-1: node(s) had untolerated taint(s) (maintenance=yes:NoSchedule)" in wide
        plain = await run("explain", "big", "-n", namespace, kubeconfig=config)
        assert f"{names}-1: node(s) had untolerated taint(s)\n" in plain + "\n"
        assert "maintenance=yes" not in plain

        report = json.loads(await run("explain", "big", "-n", namespace, "-o", "json", kubeconfig=config))
        assert report["pod"] == f"{namespace}/big"
        assert report["bound"] is False
        by_node = {n["node"]: n for n in report["nodes"]}
        assert by_node[f"{names}-1"]["untoleratedTaint"] == "maintenance=yes:NoSchedule"
        assert by_node[f"{names}-0"]["fits"] is False
        assert "only 1 free" in by_node[f"{names}-0"]["reasons"][0]

        # -A without a pod: every pod pending for draxr, in every namespace.
        listed = yaml.safe_load(await run("explain", "-A", "-o", "yaml", kubeconfig=config))
        assert f"{namespace}/big" in [r["pod"] for r in listed]
        assert f"{namespace}/small" not in [r["pod"] for r in listed]
        # A namespace without pods (other tests may leave pods pending in "default"); a flag before
        # the subcommand.
        empty = f"{names}-empty"
        none_here = await run("-n", empty, "explain", kubeconfig=config)
        assert none_here.strip() == f"no pod is pending for draxr in namespace {empty}"

        rows = json.loads(await run("capacity", "--resource", ext, "-o", "json", kubeconfig=config))
        assert {(r["node"], r["total"], r["allocated"]) for r in rows} == {(f"{names}-0", 2, 1), (f"{names}-1", 2, 0)}
        table = await run("capacity", "--resource", ext, "-o", "wide", kubeconfig=config)
        assert table.splitlines()[0].split()[-1] == "CLASSES"
        assert f"{names}-gpu" in table
        narrow = await run("capacity", "--resource", ext, kubeconfig=config)
        assert "CLASSES" not in narrow
        assert "(all 2 nodes)" in narrow
