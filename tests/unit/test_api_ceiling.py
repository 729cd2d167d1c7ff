"""bench/api_ceiling.py writes what a scheduler writes: the special claim's requests and the pod's
request mappings are those draxr's core computes for the bench's pods; its round-robin devices
are each used once while the burst has fewer pods than devices."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from draxr.core.mapping import build_mapping
from draxr.core.requests import prepare_pod

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


ceiling, e2e = _load("api_ceiling"), _load("e2e")


@pytest.mark.parametrize("count", [1, 2, 8])
def test_requests_and_mappings_are_the_cores(count: int) -> None:
    pod = e2e.pod_body("p-7", "draxr-ceiling", "example.com/gpu-7", count, None)
    pod["metadata"] |= {"namespace": "ns", "uid": "u-7"}
    classes = [
        {"metadata": {"name": f"gpu-{k}"}, "spec": {"extendedResourceName": f"example.com/gpu-{k}"}} for k in range(25)
    ]
    mapping = build_mapping(classes)
    core = prepare_pod(pod, mapping).for_allocatable({})
    requests, mappings = ceiling.requested(pod)
    assert requests == [r.to_api() for r in core.dra_requests]
    assert mappings == [m.to_api() for m in core.mappings]


def _slices(nodes: int, devices: int) -> list[dict[str, Any]]:
    return [
        {
            "metadata": {"name": f"n{i}-slice"},
            "spec": {
                "driver": "gpu.example.com",
                "nodeName": f"n{i}",
                "pool": {"name": f"n{i}"},
                "devices": [{"name": f"gpu-{d}"} for d in range(devices)],
            },
        }
        for i in range(nodes)
    ]


def test_round_robin_uses_every_device_once_and_over_every_node() -> None:
    slots = ceiling.device_slots(_slices(3, 4), {"n0", "n1", "n2"})
    assert [s[0] for s in slots[:3]] == ["n0", "n1", "n2"]
    request = [{"name": "container-0-request-0", "exactly": {"count": 1}}]
    chosen = []
    for k in range(len(slots)):
        alloc = ceiling.allocation(request, slots, k)
        [result] = alloc["devices"]["results"]
        node = alloc["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"][0]
        assert result["pool"] == node
        chosen.append((node, result["device"]))
    assert len(set(chosen)) == len(chosen) == 12
    assert ceiling.device_slots(_slices(3, 4), {"n1"}) == [s for s in slots if s[0] == "n1"]  # Ready nodes only


def _phase(phase: str, scheduler: str, pods_per_s: float, p99: float, concurrency: int | None = None) -> dict:
    proc = {scheduler: {"cpu_s": 10.0, "peak_rss_mib": 100.0}}
    return {
        "phase": phase,
        "scheduler": scheduler,
        "concurrency": concurrency,
        "pods": 100,
        "bound": 100,
        "pods_per_s": pods_per_s,
        "duration_s": 100 / pods_per_s,
        "latency_s": {"p50": p99 / 2, "p90": p99 * 0.9, "p99": p99},
        "audit": {"writes_per_pod": 5.0},
        "all_writes_per_pod": 7.0,
        "process": proc,
    }


def test_the_ceiling_is_the_best_concurrency_per_phase_and_both_schedulers_are_fractions_of_it() -> None:
    burst = [_phase("burst", "ceiling", 40.0, 30.0, 16), _phase("burst", "ceiling", 60.0, 20.0, 64)]
    assert e2e.best_ceiling_concurrency(burst, [16, 64]) == 64
    assert e2e.best_ceiling_concurrency([], [16, 64]) == 64  # no burst run: the largest tried
    phases = [
        *burst,
        _phase("burst", "kube-scheduler", 24.0, 80.0),
        _phase("burst", "draxr", 45.0, 40.0),
        _phase("steady", "ceiling", 30.0, 0.5, 64),
        _phase("steady", "draxr", 29.0, 1.0),
    ]
    fractions = e2e.ceiling_fractions(phases)
    assert fractions["burst"]["pods_per_s"] == 60.0
    assert fractions["burst"]["concurrency"] == 64
    assert fractions["burst"]["draxr_fraction"] == 0.75
    assert fractions["burst"]["kube-scheduler_fraction"] == 0.4
    assert fractions["burst"]["draxr_p99_over_ceiling"] == 2.0
    assert fractions["steady"]["draxr_p99_over_ceiling"] == 2.0
    assert "kube-scheduler_fraction" not in fractions["steady"]
    table = e2e.print_table({"phases": phases, "ceiling": fractions})
    burst_table, steady_table = table.split("\nsteady:")
    assert "| **draxr / kube-scheduler** | | 1.88 |" in burst_table
    assert "| **draxr / ceiling** | | 0.75 |" in burst_table
    assert "| **kube-scheduler / ceiling** | | 0.40 |" in burst_table
    assert "| **draxr / ceiling** | | 0.97 |" in steady_table
    assert "kube-scheduler" not in steady_table


def test_a_big_phase_waits_longer_for_its_clean_up_and_an_unclean_one_is_reported() -> None:
    """40,000 pods cannot be deleted with their claims in 600 s on this box (2026-12-02: 30,453
    claims left): the default deadline grows with the phase, and a run that stopped says so."""
    args = argparse.Namespace(cleanup_timeout=0)
    assert e2e.cleanup_timeout(args, [None] * 3200) == 600.0
    assert e2e.cleanup_timeout(args, [None] * 40000) == 2000.0
    assert e2e.cleanup_timeout(argparse.Namespace(cleanup_timeout=90), [None] * 40000) == 90.0
    phases = [_phase("burst", "ceiling", 60.0, 20.0, 64)]
    stopped = e2e.print_table(
        {"phases": phases, "aborted": "cl-burst-64: pods or claims left after the clean-up (600s)"}
    )
    assert stopped.endswith(
        "RUN STOPPED EARLY: cl-burst-64: pods or claims left after the clean-up (600s); the phases after it did not run"
    )
    assert "STOPPED" not in e2e.print_table({"phases": phases})
