"""hack/test.sh builds only what the selected tests need (``DRAXR_TEST_PLAN=1`` prints its plan and
builds and runs nothing): the fast tier, unit + differential, builds the Go harnesses and no
Kubernetes; the whole suite builds everything."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EVERYTHING = ("cp", "k8s-1.35", "node", "harnesses", "helm", "promtool", "image", "kueue", "versions")


def plan(*args: str) -> set[str]:
    """What ``bash hack/test.sh ARGS`` would build."""
    out = subprocess.run(
        ["bash", "hack/test.sh", *args],
        cwd=ROOT,
        env={**os.environ, "DRAXR_TEST_PLAN": "1"},
        check=True,
        timeout=60,
        capture_output=True,
        text=True,
    ).stdout
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
