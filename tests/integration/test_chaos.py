"""The chaos run (bench/chaos.py) at CI size on a control plane of its own: 16 kwok nodes × 4
devices, two draxr replicas reaching the API server only through the fault proxy, Jobs and scaled
Deployments, and for 3 minutes every kind of fault at least once (leader SIGKILL and SIGSTOP,
kube-apiserver SIGKILL and restart, and the proxy's drop, stall, latency, cut, 410, 429, 500, 503).
The independent observer must count no violation of any invariant. DRAXR_CHAOS_SEED picks another
seed (the run prints its own); the full-size run is ``bench/chaos.py`` (bench/README.md)."""

from __future__ import annotations

import os
import time

import pytest

from ..bench_loader import load

chaos = load("chaos")


@pytest.mark.timeout(480)
async def test_chaos_run_breaks_no_invariant() -> None:
    cfg = chaos.Config.ci(seed=int(os.environ.get("DRAXR_CHAOS_SEED", "11")))
    t0 = time.monotonic()
    result = await chaos.run_chaos(cfg)
    print(f"\n{chaos.table(result)}\n[chaos] wall {time.monotonic() - t0:.0f} s, seed {cfg.seed}")
    assert result["fault_phase_s"] >= 180
    assert {k: f["count"] for k, f in result["faults"].items() if f["count"] == 0} == {}, "every kind of fault"
    assert result["pods_bound"] > 0
    assert result["checked"]["placements"] > 0
    assert result["checked"]["true_reasons"] > 0  # the too-large Deployment's pods, at least
    violations = {k: v for k, v in result["violations"].items() if v}
    assert violations == {}, f"{violations}; logs in {result['run_dir']}; {result['violation_details'][:10]}"
