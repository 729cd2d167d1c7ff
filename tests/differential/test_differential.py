"""Differential test: draxr's Python allocator against upstream's Go allocator.

The Go side is tests/allocator_harness (k8s.io/dynamic-resource-allocation v0.37.2, the version
kube-scheduler 1.37.2 uses, with its default features), built and cached by
hack/build-allocator-harness.sh. Both run the same generated cases (draxr_dev.allocator.casegen)
and must give the same outcome kind (allocated / nofit / node_failure / fatal); when allocated, the
same AllocationResults (shareID values aside, they are random UUIDs: only their presence counts);
when fatal or failed on the node, the same error class and subject (compare.error_class).

Like the integration tests, this never skips for want of a Go toolchain: if the harness cannot be
built, the test errors. Knobs: DRAXR_DIFF_SEED (default: DRAXR_TEST_SEED, else 1; tests/seeds.py),
DRAXR_DIFF_SCALE (default 1.0, the number of cases per family is multiplied by it). The coverage
floors hold at every seed (casegen.GUARANTEED tops up the kinds the recipes draw too rarely). No
allocator deviation is known (tests/differential/known_deviations.json has none), so every
mismatch fails, at any seed.

Reproducing a mismatch: the failure message names a directory holding cases.json, go-outcomes.json
and mismatches.json; `python -m tests.differential.compare DIR/cases.json DIR/go-outcomes.json`
re-runs the Python side, and `<harness> -v=7 < one-case-list.json` shows upstream's decisions.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from draxr_dev.allocator.casegen import feature_tally, format_tally, generate
from tests.differential.compare import build_harness, compare, error_class, format_mismatch, run_go, run_python
from tests.differential.report import by_family
from tests.differential.report import fail as report_fail
from tests.seeds import seed

SEED = seed("DRAXR_DIFF_SEED", 1)
SCALE = float(os.environ.get("DRAXR_DIFF_SCALE", "1"))
MIN_CASES = 500
MIN_CASES_PER_FEATURE = 5

# Every feature the differential test must exercise (tags of casegen.scan_tags and the recipes).
REQUIRED_TAGS = (
    "pools:multiple",
    "pools:multi-slice",
    "pools:multiple-drivers",
    "generations:mixed",
    "generations:outdated",
    "generations:newer-elsewhere",
    "completeness:incomplete",
    "completeness:spans-nodes",
    "completeness:inconsistent-slice-count",
    "invalid:dup-device",
    "invalid:dup-counterset",
    "invalid:missing-counterset",
    "invalid:missing-counter",
    "node:nodeName",
    "node:nodeSelector",
    "node:allNodes",
    "node:perDeviceNodeSelection",
    "node:slice-for-other-node",
    "request:ExactCount",
    "request:All",
    "request:firstAvailable",
    "cel:class-selector",
    "cel:request-selector",
    "cel:runtime-error",
    "cel:compile-error",
    "cel:battery",
    "constraint:matchAttribute",
    "constraint:distinctAttribute",
    "counters:shared-counters",
    "counters:consumes-counters",
    "counters:allocated",
    "counters:span-nodes",
    "taints:device-taint",
    "taints:toleration",
    "adminAccess",
    "adminAccess:allocated",
    "consumable:allowMultipleAllocations",
    "consumable:capacity-request",
    "consumable:requestPolicy",
    "consumable:allocated-share",
    "binding:bindsToNode",
    "binding:bindingConditions",
    "config:class",
    "config:claim",
    "claims:multiple",
    "state:allocated-claims",
    "limits:more-than-32-devices",
    "limits:count-33",
    "limits:near-32",
    "features:AdminAccess=off",
    "features:PrioritizedList=off",
    "features:PartitionableDevices=off",
    "features:DeviceTaints=off",
    "features:DeviceBindingAndStatus=off",
    "features:ConsumableCapacity=off",
    "features:FractionalCapacityRange=on",
)


@pytest.fixture(scope="module")
def harness() -> Path:
    """Builds (or reuses) the Go harness; errors, never skips, when that is impossible."""
    start = time.monotonic()
    binary = build_harness()
    print(f"\n[differential] allocator harness {binary} ready after {time.monotonic() - start:.1f}s")
    return binary


@pytest.fixture(scope="module")
def cases() -> list[dict[str, Any]]:
    return generate(SEED, SCALE)


@pytest.fixture(scope="module")
def go_outcomes(harness: Path, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Upstream's outcome for every case, from one harness process."""
    start = time.monotonic()
    outcomes = run_go(harness, cases)
    print(f"[differential] Go: {len(outcomes)} cases in {time.monotonic() - start:.2f}s")
    return outcomes


def test_generator_is_deterministic_and_covers_every_feature(cases: list[dict[str, Any]]) -> None:
    assert generate(SEED, SCALE) == cases, "the case generator is not deterministic"
    assert len(cases) >= MIN_CASES
    assert len({c["name"] for c in cases}) == len(cases), "case names are not unique"
    tally = feature_tally(cases)
    thin = {t: tally.get(t, 0) for t in REQUIRED_TAGS if tally.get(t, 0) < MIN_CASES_PER_FEATURE}
    assert not thin, f"features with fewer than {MIN_CASES_PER_FEATURE} cases: {thin}\n{format_tally(tally)}"


def test_cases_reach_every_outcome_kind(cases: list[dict[str, Any]], go_outcomes: list[dict[str, Any]]) -> None:
    kinds = Counter(o["kind"] for o in go_outcomes)
    bad = [o for o in go_outcomes if o["kind"] in ("invalid_case", "panic")]
    assert not bad, "the harness rejected cases or upstream panicked:\n" + "\n".join(
        f"{o['name']}: {o['kind']}: {o.get('error', '')[:500]}" for o in bad[:5]
    )
    for kind in ("allocated", "nofit", "node_failure", "fatal"):
        assert kinds[kind] >= 5, f"only {kinds[kind]} cases end in {kind!r}: {dict(kinds)}"
    variants = Counter(o.get("variant") for o in go_outcomes if o.get("variant"))
    assert set(variants) == {"incubating"}, f"upstream allocator variants used: {dict(variants)}"


def test_python_allocator_matches_upstream(
    cases: list[dict[str, Any]], go_outcomes: list[dict[str, Any]], tmp_path: Path
) -> None:
    py_outcomes, py_seconds, runner = run_python(cases)
    mismatches = compare(cases, go_outcomes, py_outcomes)

    tally = feature_tally(cases)
    kinds = Counter(o["kind"] for o in go_outcomes)
    errors = Counter(error_class(o.get("error", ""))[0] for o in go_outcomes if o["kind"] in ("fatal", "node_failure"))
    families = Counter(c["family"] for c in cases)
    report = "\n".join(
        [
            f"[differential] seed {SEED}, scale {SCALE}: {len(cases)} cases in {len(families)} families; "
            f"python ({runner}) took {py_seconds:.2f}s; replay: DRAXR_DIFF_SEED={SEED}",
            f"[differential] upstream outcomes: {dict(sorted(kinds.items()))}",
            f"[differential] upstream error classes: {dict(sorted(errors.items()))}",
            "[differential] feature coverage (cases per tag):",
            format_tally(tally),
        ]
    )
    print(report)
    if not mismatches:
        return

    report_fail(
        tmp_path / "differential",
        cases,
        go_outcomes,
        mismatches,
        headline=f"{len(mismatches)} of {len(cases)} cases differ between upstream Go and the Python allocator "
        f"(by family: {by_family(mismatches)}; seed {SEED}, replay: DRAXR_DIFF_SEED={SEED}).",
        rerun="tests.differential.compare",
        format_mismatch=format_mismatch,
        report=report,
    )
