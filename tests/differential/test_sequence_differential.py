"""Differential test of sequences: pods placed one after another, draxr against kube-scheduler
1.37.2's default profile (tests/scheduler_harness), decision by decision.

Each case (draxr_dev.scheduling.casegen_sequences: 10 to 50 pods of two or three shapes on a small
cluster, some asking for extended resources a DeviceClass serves) runs on one state: the Python
side (draxr_dev.scheduling.evaluate.evaluate_sequence) evaluates each pod as the single-pod
differential does (every node's status, every score, the message, placement.schedule() with and
without the equivalence cache, the cache shared by the whole sequence as in production), then
assumes its production decision (ClusterState.assume_pod / assume_allocation, as draxr.scheduler
does) before the next pod. The harness is then given the nodes draxr chose (``assumeOn``) and, for
each pod, schedules it on its snapshot and assumes it on that node (the scheduler cache's AssumePod
and the Reserve plugins, as assumeAndReserve does) before the next: a node upstream does not find
feasible is an error of the case. Every step is compared as a single case is
(tests/differential/compare_scheduling.py), so draxr's choice is one of upstream's best at every
step, on the same state.

The known deviation (compare_scheduling.two_phase_scoring) is pinned by case and signature in
tests/differential/known_deviations.json, as in test_scheduling_differential.

Knobs: DRAXR_SCHED_DIFF_SEED (default: DRAXR_TEST_SEED, else 1),
DRAXR_SCHED_DIFF_SEQUENCES (default 150 cases).
Reproducing a mismatch: the failure names a directory with cases.json (with ``assumeOn``), go.json
and mismatches.json; `python -m tests.differential.compare_scheduling --sequences DIR/cases.json
DIR/go.json` re-runs the Python side.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from draxr_dev.scheduling import harness as go_harness
from draxr_dev.scheduling.casegen import feature_tally, format_tally
from draxr_dev.scheduling.casegen_sequences import SEQUENCE_TAGS, generate_sequences
from tests.differential import known
from tests.differential.compare_scheduling import compare, format_mismatch, run_python, two_phase_scoring
from tests.differential.report import by_field
from tests.differential.report import fail as report_fail
from tests.seeds import seed

SEED = seed("DRAXR_SCHED_DIFF_SEED", 1)
CI_COUNT = 150
COUNT = int(os.environ.get("DRAXR_SCHED_DIFF_SEQUENCES", str(CI_COUNT)))
AT_REFERENCE = known.reference_seed() == SEED and COUNT == CI_COUNT
MIN_CASES_PER_TAG = max(1, min(10, COUNT // 15))


@pytest.fixture(scope="module")
def harness() -> Path:
    return go_harness.build()


@pytest.fixture(scope="module")
def cases() -> list[dict[str, Any]]:
    return generate_sequences(SEED, COUNT)


@pytest.fixture(scope="module")
def results(harness: Path, cases: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]], float]:
    """Python's results (run first: they say where each pod is assumed), then upstream's."""
    py, py_seconds, _ = run_python(cases, sequences=True)
    assumed = [{**case, "assumeOn": p.get("assumeOn", [])} for case, p in zip(cases, py, strict=True)]
    start = time.monotonic()
    go = go_harness.run(harness, assumed)
    steps = sum(1 + len(c["sequence"]) for c in cases)
    print(
        f"\n[seq-differential] {len(cases)} sequences, {steps} pods: python {py_seconds:.1f}s, "
        f"Go {time.monotonic() - start:.1f}s"
    )
    return go, py, py_seconds


def test_sequences_are_deterministic_and_cover_every_feature(cases: list[dict[str, Any]]) -> None:
    assert generate_sequences(SEED, COUNT) == cases
    assert all(10 <= 1 + len(c["sequence"]) <= 50 for c in cases)
    tally = feature_tally(cases)
    thin = {t: tally.get(t, 0) for t in SEQUENCE_TAGS if tally.get(t, 0) < MIN_CASES_PER_TAG}
    assert not thin, f"sequence features with fewer than {MIN_CASES_PER_TAG} cases: {thin}\n{format_tally(tally)}"


def test_sequences_place_pods_and_fill_nodes(results: tuple[list[Any], list[Any], float]) -> None:
    go, py, _ = results
    errors = [r for r in go if "error" in r]
    assert not errors, f"{len(errors)} sequences failed in the harness:\n" + "\n".join(
        f"{r['name']}: {r['error'][:600]}" for r in errors[:5]
    )
    outcomes: Counter[str] = Counter()
    for r in go:
        for step in [r, *r["steps"]]:
            outcomes["placed" if any(s is None for s in step["filter"].values()) else "unschedulable"] += 1
    placed_after_first = sum(1 for p in py for node in p.get("assumeOn", [])[1:] if node)
    print(f"[seq-differential] outcomes per pod: {dict(outcomes)}; placed after an assumed pod: {placed_after_first}")
    assert outcomes["placed"] >= 0.15 * sum(outcomes.values()), outcomes
    assert outcomes["unschedulable"] >= 0.15 * sum(outcomes.values()), outcomes


def classify(m: Any) -> str | None:
    return "two_phase_scoring" if two_phase_scoring(m) else None


def _run(harness: Path, cases: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    py, _, _ = run_python(cases, sequences=True)
    assumed = [{**case, "assumeOn": p.get("assumeOn", [])} for case, p in zip(cases, py, strict=True)]
    return go_harness.run(harness, assumed), py


def test_the_known_deviation_stays_as_pinned(harness: Path) -> None:
    """The listed sequences of the reference seed, alone, on every run: each still mismatches with
    its pinned differences (the deviation of test_scheduling_differential: draxr normalises the
    scores of a pod whose extended resources DRA serves before the allocator runs)."""
    listed = {case for cases in known.pinned("sequences").values() for case in cases}
    assert listed, "no sequence pinned"
    picked = [c for c in generate_sequences(known.reference_seed(), CI_COUNT) if c["name"] in listed]
    go, py = _run(harness, picked)
    failures = known.check_pinned("sequences", compare(picked, go, py), [c["name"] for c in picked])
    assert not failures, "\n".join(failures)


def test_sequences_match_upstream_decision_by_decision(
    cases: list[dict[str, Any]], results: tuple[list[Any], list[Any], float], tmp_path: Path
) -> None:
    go, py, _ = results
    unexpected, failures, deviations = known.check(
        "sequences", compare(cases, go, py), at_reference=AT_REFERENCE, classify=classify
    )
    print("\n".join(f"[seq-differential] {line}" for line in deviations))
    assert not failures, "the known deviation's pins (tests/differential/known_deviations.json):\n" + "\n".join(
        failures
    )
    if not unexpected:
        return
    report_fail(
        tmp_path / "sequence-differential",
        cases,
        go,
        unexpected,
        headline=f"{len(unexpected)} of {len(cases)} sequences differ from kube-scheduler's decisions "
        f"(by field: {by_field(unexpected)}; seed {SEED}, replay: DRAXR_SCHED_DIFF_SEED={SEED}).",
        rerun="tests.differential.compare_scheduling --sequences",
        format_mismatch=format_mismatch,
    )
