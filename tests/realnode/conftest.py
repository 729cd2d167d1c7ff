"""A real node (containerd, kubelet, our DRA kubelet plugin) beside the session's control plane,
started once per session by the first test that asks for ``real_node`` and torn down at the end.

Its teardown must leave nothing on the machine: the fixture fails at the end of the session when
processes, mounts, cgroups or host paths of the node are left, and the session-finish check below
looks again, independently of the node's own bookkeeping, and fails the run loudly.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from draxr_dev.devcluster import realnode
from draxr_dev.devcluster.binaries import ensure_node_binaries
from draxr_dev.devcluster.controlplane import ControlPlane
from draxr_dev.devcluster.realnode import NodeOptions, RealNode

DEVICES = 8
_started: list[RealNode] = []


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.realnode)


@pytest.fixture(scope="session")
def real_node(control_plane: ControlPlane) -> Iterator[RealNode]:
    binaries = ensure_node_binaries()
    node = RealNode(
        control_plane=control_plane,
        binaries=binaries,
        run_dir=control_plane.run_dir / "node",
        options=NodeOptions(devices=DEVICES, device_plugin=True),
    )
    _started.append(node)
    node.start()  # registers node.stop with atexit, for an interrupted session
    print(f"\n[draxr] real node up in {node.timings['total']:.1f}s ({node.run_dir})", file=sys.__stderr__)
    yield node
    rss = node.rss_mib()
    problems = node.stop()
    summary = ", ".join(f"{k}={v:.0f}MiB" for k, v in sorted(rss.items()) if k.endswith(".peak"))
    print(f"\n[draxr] real node peak memory: {summary}", file=sys.__stderr__)
    assert not problems, "the real node's teardown left: " + "; ".join(problems)


def _host_leftovers(node: RealNode) -> list[str]:
    """What a real node may leave, looked at from the host, not from the node's bookkeeping."""
    out = list(node.leftovers())
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            exe = os.readlink(f"/proc/{pid}/exe")
        except OSError:
            continue
        if exe.startswith(str(node.binaries) + "/"):
            out.append(f"process {pid} runs {exe}")
    mounts = Path("/proc/self/mountinfo").read_text().split("\n")
    out += [f"mount {line.split()[4]}" for line in mounts if str(node.run_dir) in line or "/var/lib/kubelet" in line]
    for hierarchy in realnode._hierarchies():
        out += [f"cgroup {hierarchy / t}" for t in realnode.CGROUP_TREES if (hierarchy / t).exists()]
    return sorted(set(out))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    for node in _started:
        left = _host_leftovers(node)
        if left:
            print("\n[draxr] REAL NODE LEFTOVERS after the session:\n  " + "\n  ".join(left), file=sys.__stderr__)
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
