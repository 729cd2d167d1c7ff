"""hack/test.sh builds only what the selected tests need (``DRAXR_TEST_PLAN=1`` prints its plan and
builds and runs nothing): the fast tier, unit + differential, builds the Go harnesses and no
Kubernetes; the whole suite builds everything."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EVERYTHING = ("cp", "k8s-1.35", "node", "harnesses", "helm", "promtool", "image", "kueue", "versions")


def _planned(
    *args: str, seed: str | None = None, workers: str | None = None, split: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {
        k: v for k, v in os.environ.items() if k not in ("DRAXR_TEST_SEED", "DRAXR_TEST_WORKERS", "DRAXR_TEST_SPLIT")
    }
    if split is not None:
        env["DRAXR_TEST_SPLIT"] = split
    if seed is not None:
        env["DRAXR_TEST_SEED"] = seed
    if workers is not None:
        env["DRAXR_TEST_WORKERS"] = workers
    return subprocess.run(
        ["bash", "hack/test.sh", *args],
        cwd=ROOT,
        env={**env, "DRAXR_TEST_PLAN": "1"},
        check=True,
        timeout=60,
        capture_output=True,
        text=True,
    )


def plan(*args: str) -> set[str]:
    """What ``bash hack/test.sh ARGS`` would build."""
    out = _planned(*args).stdout
    parts = dict(item.split("=") for item in out.split())
    assert set(parts) == set(EVERYTHING), out
    return {name for name, on in parts.items() if on == "1"}


@pytest.mark.parametrize(
    ("args", "builds"),
    [
        ((), set(EVERYTHING)),
        (("tests/unit", "tests/differential"), {"harnesses"}),  # the fast tier
        (("tests/differential/test_report.py", "-x"), {"harnesses"}),
        (("-k", "queue", "-p", "no:cacheprovider", "tests/differential"), {"harnesses"}),  # options' values
        (("-x",), set(EVERYTHING)),  # options only: pytest runs every test
        (("tests/unit", "-x"), set()),
        (("tests/packaging",), set()),
        (("tests/monitoring",), {"promtool"}),
        (("tests/integration/test_watch.py",), {"cp"}),
        (("tests/integration",), {"cp", "k8s-1.35", "helm", "kueue", "versions"}),
    ],
)
def test_the_test_command_builds_what_its_tests_need(args: tuple[str, ...], builds: set[str]) -> None:
    assert plan(*args) == builds


def _seed_line(*args: str, seed: str | None = None) -> str:
    """The line hack/test.sh prints about the run's seed (before the build, and again after pytest)."""
    lines = [line for line in _planned(*args, seed=seed).stderr.splitlines() if line.startswith("[test] seed")]
    assert len(lines) == 1, lines
    return lines[0]


def test_every_run_draws_a_seed_and_prints_how_to_replay_it() -> None:
    """CI's command (no DRAXR_TEST_SEED) draws a new seed each run; the line names the command that
    replays it, with the run's own arguments; a given seed is kept, and "fixed" leaves each test
    its default (the reference seed)."""
    first = re.fullmatch(r"\[test\] seed (\d+); replay: DRAXR_TEST_SEED=(\d+) bash hack/test\.sh", _seed_line())
    assert first is not None
    assert first.group(1) == first.group(2)
    draws = {_seed_line("tests/unit", "-k", "a b") for _ in range(3)}
    assert len(draws) > 1, draws  # (three draws out of a million all alike: practically never)
    assert all(line.endswith("bash hack/test.sh tests/unit -k a\\ b") for line in draws), draws
    assert _seed_line("tests/differential", seed="123") == (
        "[test] seed 123; replay: DRAXR_TEST_SEED=123 bash hack/test.sh tests/differential"
    )
    assert _seed_line(seed="random").startswith("[test] seed ")
    fixed = _planned("tests/unit", seed="fixed").stderr.splitlines()
    assert (
        "[test] seeds: the tests' fixed defaults; replay: DRAXR_TEST_SEED=fixed bash hack/test.sh tests/unit" in fixed
    )


def test_the_seed_is_printed_again_after_pytest() -> None:
    """The seed line is printed again after pytest (where a red run's reader looks)."""
    script = (ROOT / "hack" / "test.sh").read_text()
    after = script[script.index(".venv/bin/python -m pytest") :]
    assert 'echo "[test] $seed_line" >&2' in after


@pytest.mark.parametrize(
    ("args", "workers", "parallel"),
    [
        (("tests/unit", "tests/differential"), "2", True),  # the fast tier
        (("tests/differential/test_queue_differential.py", "-x", "-k", "queue"), "2", True),
        (("tests/unit", "tests/differential"), "1", False),
        (("tests/unit", "-s"), "2", False),  # the caller's own choices
        (("tests/unit", "-p", "no:xdist"), "2", False),
        (("tests/unit", "-n", "3"), "2", False),
        (("tests/unit", "tests/integration/test_watch.py"), "2", False),  # a control plane per session
        ((), "2", False),  # CI: the whole suite (split: its own line, below)
    ],
)
def test_the_fast_tier_runs_on_xdist_workers(args: tuple[str, ...], workers: str, parallel: bool) -> None:
    lines = [line for line in _planned(*args, workers=workers).stderr.splitlines() if "(the fast tier;" in line]
    assert lines == (
        [f"[test] {workers} pytest-xdist workers (the fast tier; DRAXR_TEST_WORKERS=1: one process)"]
        if parallel
        else []
    )


def _pytest_lines(*args: str, workers: str | None = None, split: str | None = None) -> list[str]:
    out = _planned(*args, workers=workers, split=split).stderr
    return [line for line in out.splitlines() if line.startswith("[test] pytest")]


def test_ci_lists_the_30_slowest_tests() -> None:
    """CI runs the README's command, and its pytest lists the 30 slowest tests (--durations=30):
    the whole suite in two parts, the fast tier on xdist workers (beside the remaining builds) and
    the rest in one process, which leaves out exactly the fast tier's directories."""
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.startswith("bash hack/test.sh")]
    assert ci == ["bash hack/test.sh"]
    assert _pytest_lines(workers="2") == [
        "[test] pytest --durations=30 -n 2 --dist loadfile tests/unit tests/differential",
        "[test] pytest --durations=30 --ignore=tests/unit --ignore=tests/differential",
    ]
    assert _pytest_lines("-x", workers="2") == [
        "[test] pytest --durations=30 -n 2 --dist loadfile -x tests/unit tests/differential",
        "[test] pytest --durations=30 -x --ignore=tests/unit --ignore=tests/differential",
    ]
    for one_process in (_pytest_lines(workers="1"), _pytest_lines(workers="2", split="0"), _pytest_lines("-s")):
        assert len(one_process) == 1, one_process
        assert "--ignore" not in one_process[0]
        assert "tests/unit" not in one_process[0]
    fast = [
        line for line in _planned("tests/unit", workers="2").stderr.splitlines() if line.startswith("[test] pytest")
    ]
    assert fast == ["[test] pytest --durations=30 -n 2 --dist loadfile tests/unit"]
