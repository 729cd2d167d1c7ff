"""Differential test of the scheduling queue: draxr's (operator/draxr/queue.py, fed by its real
watch handlers: draxr.app.Operator, draxr.handlers.targets, draxr.scheduler.Scheduler) against
kube-scheduler 1.37.2's own PriorityQueue (tests/scheduler_harness, ``-queue``: the default
profile's queueing hints and PreEnqueue plugins, a fake clock), on the same generated sequences
(draxr_dev.queue_diff.casegen): pods added, updated, deleted, bound and nominated; nodes, claims,
slices, classes, PVs and PVCs changing; attempts ending unschedulable (with the rejecting plugins)
or with an error, events landing while a pod is in flight; the clock advancing (backoff, and the
unschedulable-pods flush).

After every step the pods each side would pop are compared (draxr_dev.queue_diff.compare):
a pod upstream would pop (activeQ, or backoffQ after a rejection: SchedulerPopFromBackoffQ) and
draxr would not, even once its backoff is over, is ``missing``: a lost wake-up, a failure. Pods
draxr would pop and upstream would not are ``extra`` (a retry upstream saves: CPU, not
correctness), counted and printed; ``late`` pods (draxr's longer backoff after an error) and the
``tolerated`` kinds (upstream's flush wildcard for pods in flight; draxr's unresolvable-until-the-
inventory-changes pods) are printed too. Both queues back off 1 s doubling to 60 s and flush
unschedulable pods after 60 s: upstream is configured with draxr's values.

The same comparison must find missing pods once draxr's real code is mutated to drop claim events,
node events or what arrives while a pod is in flight (draxr's side re-run on the first
DRAXR_QUEUE_DIFF_MUTATION_SEQUENCES sequences, default 120, of the reference seed 1 whatever the
run's seed, against the same upstream results).

Knobs: DRAXR_QUEUE_DIFF_SEED (else the run's DRAXR_TEST_SEED, else 1: tests/seeds.py),
DRAXR_QUEUE_DIFF_SEQUENCES (default 250), DRAXR_QUEUE_DIFF_STEPS (steps per sequence, default 40).
A failure writes cases.json, go.json and mismatches.json and names them;
`python -m draxr_dev.queue_diff.shrink --seed S --count N` shrinks every distinct cause of a run to
a minimal sequence.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from draxr_dev.queue_diff import casegen, compare, runner
from draxr_dev.queue_diff.runner import PySequence
from draxr_dev.scheduling import harness as go_harness
from tests import seeds
from tests.differential.report import fail as report_fail

SEED = seeds.seed("DRAXR_QUEUE_DIFF_SEED", 1)
COUNT = int(os.environ.get("DRAXR_QUEUE_DIFF_SEQUENCES", "250"))
STEPS = int(os.environ.get("DRAXR_QUEUE_DIFF_STEPS", "40"))

Results = tuple[list[dict[str, Any]], list[PySequence]]


@pytest.fixture(scope="module")
def harness() -> Path:
    return go_harness.build()


@pytest.fixture(scope="module")
def sequences() -> list[dict[str, Any]]:
    return casegen.generate(SEED, COUNT, STEPS)


def _run(harness: Path, sequences: list[dict[str, Any]], factory: Any = runner.default_operator_factory) -> Results:
    start = time.monotonic()
    go = runner.run_go(harness, sequences)
    go_seconds = time.monotonic() - start
    py, py_seconds = runner.run_python(sequences, go, factory)
    print(
        f"\n[queue-differential] {len(sequences)} sequences, {sum(len(s['steps']) for s in sequences)} steps: "
        f"Go {go_seconds:.1f}s, python {py_seconds:.1f}s"
    )
    return go, py


@pytest.fixture(scope="module")
def results(harness: Path, sequences: list[dict[str, Any]]) -> Results:
    return _run(harness, sequences)


def _report(harness: Path, sequences: list[dict[str, Any]], results: Results) -> compare.Report:
    go, py = results
    rep = compare.compare(sequences, go, py)
    compare.settle_in_flight(rep, sequences, lambda seqs: runner.run_go(harness, seqs))
    return rep


def test_sequences_are_deterministic_and_cover_every_step(sequences: list[dict[str, Any]]) -> None:
    assert casegen.generate(SEED, COUNT, STEPS) == sequences
    kinds = casegen.step_kinds(sequences)
    print(f"\n[queue-differential] steps: {kinds}")
    expected = {
        "pop",
        "fail",
        "bind",
        "nominate",
        "advance",
        "upsert:Pod",
        "delete:Pod",
        "upsert:Node",
        "delete:Node",
        "upsert:ResourceClaim",
        "delete:ResourceClaim",
        "upsert:ResourceSlice",
        "delete:ResourceSlice",
        "upsert:DeviceClass",
        "delete:DeviceClass",
        "upsert:PersistentVolume",
        "upsert:PersistentVolumeClaim",
    }
    thin = {k: kinds.get(k, 0) for k in expected if kinds.get(k, 0) < min(10, COUNT)}
    assert not thin, f"step kinds with too few steps: {thin}"


def test_upstream_runs_every_sequence_through_every_queue(results: Results) -> None:
    go, py = results
    errors = [g for g in go if g.get("error")]
    assert not errors, f"{len(errors)} sequences failed in the harness:\n" + "\n".join(
        f"{g['name']}: {g['error'][:800]}" for g in errors[:3]
    )
    assert not [p for p in py if p.error]
    seen = {q: 0 for q in ("active", "backoff", "errorBackoff", "unschedulable", "inFlight")}
    for g in go:
        for st in g["steps"]:
            for q in seen:
                seen[q] += bool(st[q])
    popped = sum(1 for g in go for st in g["steps"] if st.get("popped"))
    print(f"[queue-differential] upstream steps with a pod in each queue: {seen}; pods popped: {popped}")
    assert all(n >= min(20, len(go)) for n in seen.values()), seen


def test_draxr_releases_every_pod_upstream_releases(
    harness: Path, sequences: list[dict[str, Any]], results: Results, tmp_path: Path
) -> None:
    go, _ = results
    rep = _report(harness, sequences, results)
    print(f"[queue-differential] {rep.summary()}")
    if not rep.missing:
        return
    by_name = {s["name"]: s for s in sequences}
    report_fail(
        tmp_path / "queue-differential",
        sequences,
        go,
        rep.missing,
        headline=f"{len(rep.missing)} times a pod kube-scheduler's queue would pop stays parked in draxr's "
        f"(lost wake-ups; {len(rep.causes())} distinct causes).",
        rerun="draxr_dev.queue_diff.shrink --seed {SEED} --count {COUNT} --steps {STEPS} #",
        format_mismatch=lambda m: compare.format_missing(by_name[m["name"]], m, rep.upstream[m["name"]]),
        report=rep.summary(),
    )


# ---- the comparison catches a queue that loses wake-ups (mutations of draxr's real code) --------


def _mutated(mutate: Callable[[Any], None]) -> Callable[[], Callable[[], Any]]:
    def factory() -> Callable[[], Any]:
        make = runner.default_operator_factory()

        def build() -> Any:
            op = make()
            mutate(op)
            return op

        return build

    return factory


def _drop_claim_events(op: Any) -> None:
    """A Scheduler that ignores claim events (no pod is retried when its claim appears or changes)."""
    op.scheduler.claim_changed = lambda key, before, after: None


def _forget_in_flight_events(op: Any) -> None:
    """A queue that parks a pod at the generation of its attempt's *end*: what changed while it
    was in flight is forgotten."""
    sched = op.scheduler
    failed = sched.queue.failed

    def at_end(uid: str, generation: int, **kw: Any) -> None:
        failed(uid, sched.state.generation, **kw)

    sched.queue.failed = at_end


def _drop_node_events(op: Any) -> None:
    """Node events that update the state but wake nothing (the generation is put back)."""
    state = op.state
    upsert = state.upsert_node

    def quiet(node: Any) -> None:
        before = (state.changes.generation, list(state.changes._last))
        upsert(node)
        state.changes.generation, state.changes._last = before

    state.upsert_node = quiet  # (the watch targets are built after this: DraxrSide)


MUTATIONS = {
    "claim events dropped": _drop_claim_events,
    "node events dropped": _drop_node_events,
    "in-flight events forgotten": _forget_in_flight_events,
}


MUTATION_SEQUENCES = int(os.environ.get("DRAXR_QUEUE_DIFF_MUTATION_SEQUENCES", "120"))


MUTATION_SEED = 1  # the reference seed: the mutations' power is a property of the comparison, measured there


@pytest.fixture(scope="module")
def mutation_sequences(sequences: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The first sequences of the reference seed, whatever the run's: how many pods a mutation
    loses depends on the draw (dropping claim events lost 0 of 120 sequences at seed 20), and the
    question here is whether the comparison sees a lost wake-up at all."""
    if SEED == MUTATION_SEED:
        return sequences[:MUTATION_SEQUENCES]
    return casegen.generate(MUTATION_SEED, COUNT, STEPS)[:MUTATION_SEQUENCES]


@pytest.fixture(scope="module")
def mutation_results(harness: Path, results: Results, mutation_sequences: list[dict[str, Any]]) -> Results:
    """Upstream's side (a mutation changes draxr only) and draxr's unmutated side."""
    if SEED == MUTATION_SEED:
        go, py = results
        return go[: len(mutation_sequences)], py[: len(mutation_sequences)]
    return _run(harness, mutation_sequences)


@pytest.fixture(scope="module")
def mutation_go(mutation_results: Results) -> list[dict[str, Any]]:
    return mutation_results[0]


@pytest.fixture(scope="module")
def mutation_baseline(
    harness: Path, mutation_sequences: list[dict[str, Any]], mutation_results: Results
) -> compare.Report:
    return _report(harness, mutation_sequences, mutation_results)


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_a_queue_that_loses_wake_ups_has_missing_pods(
    harness: Path,
    mutation_sequences: list[dict[str, Any]],
    mutation_go: list[dict[str, Any]],
    mutation_baseline: compare.Report,
    mutation: str,
) -> None:
    """The same sequences with draxr's real code mutated: more missing pods than unmutated."""
    py, _ = runner.run_python(mutation_sequences, mutation_go, _mutated(MUTATIONS[mutation]))
    rep = _report(harness, mutation_sequences, (mutation_go, py))
    print(f"[queue-differential] mutation {mutation!r}: {rep.summary()}")
    assert len(rep.missing) > len(mutation_baseline.missing), (
        f"the comparison did not notice draxr's queue with {mutation}: "
        f"{len(rep.missing)} missing, {len(mutation_baseline.missing)} without it"
    )
