"""The real-node demo of docs/getting-started.md, ``bash hack/demo.sh --real-node``, run as the page
writes it (tests/integration/test_docs.py runs the page's other commands): a control plane of its
own, node ``localhost`` run by kubelet + containerd + our DRA kubelet plugin, draxr, and the pod
whose containers print the devices they got. ``bash hack/demo.sh down`` (as the page says) stops it.

The demo's kubelet and the session's real node cannot run at once (one kubelet port, one cgroup
tree): this module's name sorts first in tests/realnode, so it runs before any test asks for the
session's node, and it fails (rather than clash) if that node is already up.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from ..doc_commands import ROOT, bash_blocks
from ..integration.test_docs import DEMO_DOWN, _state, command, run, user_env
from . import conftest

PAGE = "docs/getting-started.md"
REAL_NODE_DEMO = "bash hack/demo.sh --real-node"


@pytest.mark.timeout(900)
def test_the_real_node_demo_runs_as_the_page_says() -> None:
    assert not conftest._started, "the session's real node is up: this module must run before the others"
    [demo] = [b for b in bash_blocks(PAGE) if command(b) == REAL_NODE_DEMO]
    [down] = [b for b in bash_blocks(PAGE) if command(b) == DEMO_DOWN]
    # A short path: the plugins' unix sockets live below it (at most 108 bytes).
    dev = Path(tempfile.mkdtemp(prefix="draxr-demo."))
    env = user_env(DRAXR_DEV_DIR=str(dev))
    try:
        out = run(demo, env, timeout=840)
        # What the page shows: the special claim's request mappings, the pod Succeeded, and each
        # container's devices from the plugin's CDI spec (the init container borrows a's request).
        status = next(line for line in out.splitlines() if line.startswith('{"requestMappings"'))
        mappings = {m["containerName"]: m["requestName"] for m in json.loads(status)["requestMappings"]}
        assert mappings == {"init": "container-1-request-0", "a": "container-1-request-0", "b": "container-2-request-0"}
        assert "# phase: Succeeded" in out, out[-3000:]
        # The CRDs, as the other demo: the node agent's records and mappings can be written (issue 39).
        assert "customresourcedefinition.apiextensions.k8s.io/devicepluginrecords.draxr.io" in out, out[:3000]
        a_devices = [line for line in out.splitlines() if line.startswith("DRAXR_DEVICES_CONTAINER_1_REQUEST_0=")]
        b_devices = [line for line in out.splitlines() if line.startswith("DRAXR_DEVICES_CONTAINER_2_REQUEST_0=")]
        assert len(a_devices) == 2, out[-3000:]  # printed by init and by a: the same two devices
        assert len(set(a_devices)) == 1, a_devices
        assert len(a_devices[0].split("=", 1)[1].split(",")) == 2, a_devices
        assert len(b_devices) == 1, out[-3000:]
        assert b_devices[0].split("=", 1)[1] not in a_devices[0], (a_devices, b_devices)
        pids = [int((dev / "draxr.pid").read_text())]
        pids += [int(p) for p in json.loads((dev / "state.json").read_text())["pids"].values()]
    finally:
        stopped = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", down.text], cwd=ROOT, env=env, capture_output=True, text=True,
            timeout=300, check=False,
        )  # fmt: skip
    if stopped.returncode == 0 and not os.environ.get("DRAXR_KEEP_RUN_DIR"):
        shutil.rmtree(dev, ignore_errors=True)
    assert stopped.returncode == 0, stopped.stdout[-2000:] + stopped.stderr[-2000:]
    assert "real node" in stopped.stdout, stopped.stdout
    alive = [p for p in pids if Path(f"/proc/{p}").exists() and "zombie" not in _state(p)]
    assert not alive, alive
