"""The chaos run (bench/chaos.py) at CI size on a control plane of its own: 16 kwok nodes × 4
devices, two draxr replicas reaching the API server only through the fault proxy, Jobs and scaled
Deployments in a priority mix (low pods fill the devices, never-preempting ones sit above them, and
high-priority Jobs mostly fit only by evicting), and for 3 minutes every kind of fault at least once
(leader SIGKILL and SIGSTOP, kube-apiserver SIGKILL and restart, and the proxy's drop, stall,
latency, cut, 410, 429, 500, 503). The independent observer must count no violation of any
invariant, preemption's among them (no device in two claims at any claim event, a pod that fits by
evicting bound within 30 s, victims of lower priority than a pod nominated to or bound on their
node), and must have seen preemptions, so that those checks are not vacuous. DRAXR_CHAOS_SEED picks
another seed (the run prints its own); the full-size run is ``bench/chaos.py`` (bench/README.md)."""

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
    assert {k: f["count"] for k, f in result["faults"].items() if f["count"] == 0} == {}, "every kind of fault"
    assert result["pods_bound"] > 0
    assert result["checked"]["placements"] > 0
    assert result["checked"]["true_reasons"] > 0  # the too-large Deployment's pods, at least
    # The priority mix preempted, so the preemption invariants were not vacuous.
    assert result["preemptions"] > 0
    assert result["checked"]["victims"] > 0
    assert result["checked"]["preemptors"] > 0
    assert result["checked"]["claim_events"] > 0
    violations = {k: v for k, v in result["violations"].items() if v}
    assert violations == {}, f"{violations}; logs in {result['run_dir']}; {result['violation_details'][:10]}"
