"""The suite's order around hack/build-late.sh (tests/late_builds.py): the modules that need a build
the script makes in the background run after every other module but the real-node tests, in the
script's order, and the first of them waits for the script."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests import late_builds

ROOT = late_builds.ROOT
INTEGRATION = late_builds.INTEGRATION


def _paths(*names: str) -> list[Path]:
    return [ROOT / "tests" / name for name in names]


def test_late_modules_move_around_the_real_node_in_the_scripts_order() -> None:
    paths = _paths(
        "image/test_image.py",
        "integration/test_adoption.py",
        "integration/test_adoption.py",
        "integration/test_chaos.py",
        "integration/test_helm.py",
        "integration/test_versions.py",
        "integration/test_watch.py",
        "monitoring/test_promtool.py",
        "realnode/test_migration.py",
        "realnode/test_migration.py",
    )
    names = [str(paths[i].relative_to(ROOT / "tests")) for i in late_builds.order(paths)]
    assert names == [
        "image/test_image.py",
        "integration/test_chaos.py",
        "integration/test_watch.py",
        "monitoring/test_promtool.py",
        "integration/test_helm.py",
        "integration/test_adoption.py",
        "integration/test_adoption.py",
        "realnode/test_migration.py",
        "realnode/test_migration.py",
        "integration/test_versions.py",
    ]


def test_the_order_is_a_permutation_that_keeps_each_modules_own_order() -> None:
    paths = _paths("integration/test_kueue.py", "unit/test_a.py", "integration/test_kueue.py")
    permutation = late_builds.order(paths)
    assert sorted(permutation) == [0, 1, 2]
    assert permutation == [1, 0, 2]  # no real-node item: the late ones go last, their order kept
    assert late_builds.order([]) == []


def test_every_module_that_needs_a_late_build_is_a_late_module() -> None:
    """A module that calls for helm, Kueue or another Kubernetes version must run after the
    background script (else it builds it inside a test's timeout, or waits for the lock there)."""
    needing = {p.name for p in INTEGRATION.glob("test_*.py") if _needs_a_late_build(p.read_text())}
    assert needing == set(late_builds.MODULES)


def _needs_a_late_build(source: str) -> bool:
    """Calls ensure_helm or ensure_kueue, or starts an extra control plane of another version."""
    tools = ("ensure_helm", "ensure_kueue")
    for node in ast.walk(ast.parse(source)):
        name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
        if name in tools:
            return True  # called, or handed to asyncio.to_thread
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "extra_control_plane":
            versioned = len(node.args) > 2 or any(k.arg == "k8s_version" for k in node.keywords)
            if versioned:
                return True
    return False


def test_the_script_builds_in_the_modules_order() -> None:
    """hack/build-late.sh builds helm, then Kueue, then the Kubernetes versions, the order of
    late_builds.MODULES; hack/test.sh passes every build its selection needs."""
    script = (ROOT / "hack" / "build-late.sh").read_text()
    steps = re.findall(r"\bstep ([a-z0-9.-]+) ", script)
    assert steps == ["helm", "kueue", "k8s-1.35", "k8s-1.35", "k8s-1.34", "k8s-1.36"]
    test_sh = (ROOT / "hack" / "test.sh").read_text()
    assert re.findall(r"late\+=\((\S+)\)", test_sh) == ["helm", "kueue", "k8s-1.35", "versions"]


def test_an_unknown_build_fails_and_still_writes_its_statuses(tmp_path: Path) -> None:
    done = tmp_path / "done"
    out = subprocess.run(
        ["bash", str(ROOT / "hack" / "build-late.sh"), "nothing-of-the-kind"],
        env={**os.environ, "DONE": str(done)},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert out.returncode == 1
    assert "unknown build nothing-of-the-kind" in out.stderr
    assert (tmp_path / "done.nothing-of-the-kind").read_text().strip() == "1"  # the build's own
    assert done.read_text().strip() == "1"  # the chain's


def _waiter(module: str) -> tuple[threading.Thread, threading.Event]:
    ended = threading.Event()

    def waiting() -> None:
        late_builds.wait_until_built(module, poll=0.01)
        ended.set()

    waiter = threading.Thread(target=waiting, daemon=True)
    waiter.start()
    return waiter, ended


def test_a_module_waits_for_its_own_build_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """test_helm.py goes on once helm is built; test_versions.py waits for the Kubernetes versions,
    and goes on when the chain ends (a build it did not ask for never gets a status of its own)."""
    done = tmp_path / "late.done"
    monkeypatch.setenv(late_builds.DONE_VARIABLE, str(done))
    helm, helm_ended = _waiter("test_helm.py")
    versions, versions_ended = _waiter("test_versions.py")
    time.sleep(0.2)
    assert not helm_ended.is_set()  # nothing written yet: still waiting
    (tmp_path / "late.done.helm").write_text("0\n")
    helm.join(timeout=10)
    assert helm_ended.is_set()
    time.sleep(0.2)
    assert not versions_ended.is_set()
    done.write_text("0\n")  # the chain's end
    versions.join(timeout=10)
    assert versions_ended.is_set()


def test_without_the_variable_nothing_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(late_builds.DONE_VARIABLE, raising=False)
    late_builds.wait_until_built("test_versions.py", poll=3600)  # would block for an hour if it waited


def test_every_late_module_names_a_build_the_script_makes() -> None:
    script = (ROOT / "hack" / "build-late.sh").read_text()
    made = set(re.findall(r"^\s+([a-z0-9.-]+)\)", script, re.M))
    assert set(late_builds.NEEDS.values()) <= made
