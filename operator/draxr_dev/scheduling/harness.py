"""Build and run the Go scheduler harness (tests/scheduler_harness: kube-scheduler 1.37.2's own
plugins, default profile) on scheduling cases.

``build()`` runs hack/build-scheduler-harness.sh (which builds once into
~/.cache/draxr/bin/scheduler-harness-<hash>_<go>_<os-arch>/ and reuses it afterwards) and returns
the binary; ``run(binary, cases)`` feeds the cases to it in chunks, one subprocess per chunk, and
returns one result per case, in order (schema: draxr_dev.scheduling). ``stored(binary, cases)``
returns the harness's ``-print-stored`` output: each case's pods as kube-apiserver stores them.
``features(binary)`` and ``profile(binary)`` return what it prints about itself.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["BUILD_SCRIPT", "build", "features", "profile", "run", "stored"]

JSON = dict[str, Any]

BUILD_SCRIPT = Path(__file__).resolve().parents[3] / "hack" / "build-scheduler-harness.sh"
CHUNK = 250


def build(timeout: float = 3600) -> Path:
    """The harness binary, built (or reused); raises RuntimeError if that is impossible."""
    env = dict(os.environ)
    try:
        proc = subprocess.run(
            ["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, timeout=timeout, check=False, env=env
        )
    except FileNotFoundError as exc:  # no bash
        raise RuntimeError(f"cannot run {BUILD_SCRIPT}: {exc}") from exc
    if proc.returncode != 0:
        raise RuntimeError(f"{BUILD_SCRIPT} failed (exit {proc.returncode}):\n{proc.stderr[-6000:]}")
    lines = proc.stdout.strip().splitlines()
    if not lines:
        raise RuntimeError(f"{BUILD_SCRIPT} printed nothing:\n{proc.stderr[-6000:]}")
    binary = Path(lines[-1])
    if not binary.is_file():
        raise RuntimeError(f"{BUILD_SCRIPT} printed {binary}, which is not a file")
    return binary


def _call(binary: Path, args: Sequence[str], payload: str | None, timeout: float) -> Any:
    proc = subprocess.run(
        [str(binary), *args], input=payload, capture_output=True, text=True, timeout=timeout, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"scheduler harness {' '.join(args)} failed (exit {proc.returncode}):\n{proc.stderr[-6000:]}"
        )
    return json.loads(proc.stdout)


def run(
    binary: Path,
    cases: Sequence[Mapping[str, Any]],
    *,
    chunk: int = CHUNK,
    timeout: float = 900,
    args: Sequence[str] = (),
) -> list[JSON]:
    """Upstream's result for every case (in order); `args` go to the harness (e.g. -parallel=2)."""
    results: list[JSON] = []
    for start in range(0, len(cases), chunk):
        part = list(cases[start : start + chunk])
        out = _call(binary, list(args), json.dumps(part, separators=(",", ":")), timeout)
        if not isinstance(out, list) or len(out) != len(part):
            raise RuntimeError(f"scheduler harness returned {type(out).__name__} of {len(out)} for {len(part)} cases")
        for case, res in zip(part, out, strict=True):
            if res.get("name") != case.get("name"):
                raise RuntimeError(f"results out of order: case {case.get('name')!r}, result {res.get('name')!r}")
        results.extend(out)
    return results


def stored(binary: Path, cases: Sequence[Mapping[str, Any]], *, chunk: int = CHUNK, timeout: float = 600) -> list[JSON]:
    """Each case's pods as the harness prepares them (kube-apiserver's PrepareForCreate)."""
    results: list[JSON] = []
    for start in range(0, len(cases), chunk):
        part = list(cases[start : start + chunk])
        results.extend(_call(binary, ["-print-stored"], json.dumps(part, separators=(",", ":")), timeout))
    return results


def features(binary: Path) -> JSON:
    """Feature gates of the harness (kube-scheduler 1.37.2's defaults) and the plugins' feature struct."""
    out: JSON = _call(binary, ["-print-default-features"], None, 60)
    return out


def profile(binary: Path) -> JSON:
    """The default profile: plugins per extension point (score plugins with weights), plugin args."""
    out: JSON = _call(binary, ["-print-profile"], None, 60)
    return out


def check_configs(binary: Path, configs: Sequence[Mapping[str, Any]], *, timeout: float = 600) -> list[JSON]:
    """For each {"config", "schedulerName"}: kube-scheduler's errors for the configuration (none:
    accepted) and, when accepted, the profile of that name as -print-profile reports it
    (tests/scheduler_harness/config.go)."""
    payload = [{"config": c["config"], "schedulerName": c["schedulerName"]} for c in configs]
    out: list[JSON] = _call(binary, ["-check-configs"], json.dumps(payload, separators=(",", ":")), timeout)
    if len(out) != len(payload):
        raise RuntimeError(f"scheduler harness returned {len(out)} results for {len(payload)} configurations")
    return out
