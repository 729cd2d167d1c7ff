"""The docs' commands, run as they are written (issue 29): every ``bash`` block of README.md and of
the pages listed in ``PAGES``, unchanged, in ``bash -euo pipefail``.

* **The quick start's environment.** ``bash hack/demo.sh`` (README.md, docs/getting-started.md) runs
  for real, with ``DRAXR_DEV_DIR`` in a temp directory: a control plane, fake GPU nodes and
  ``draxr run`` with its webhook, as a user has them after the quick start. The pages' other blocks
  then run in page order with ``KUBECONFIG`` set to the demo's cluster and ``PATH`` holding the
  control plane's kubectl, helm and .venv/bin (draxr, kubectl-draxr). ``bash hack/demo.sh down``
  runs last and must leave no process of the demo.
* **Installs** (docs/install.md, README.md's ``kubectl apply -k manifests/``) run in a control plane
  of their own, started here: they install the objects the demo's draxr runs without, and helm
  refuses to adopt objects ``kubectl apply -k`` made, so the page uninstalls in between as it says.
* **Checked, not run here:** ``bash hack/test.sh`` is the suite itself: its block must be exactly
  the command ``.ci/run`` runs (CI executes it); its variants with pytest arguments must select
  tests (``pytest --collect-only``). ``bash hack/build-image.sh`` runs for real as root (a cache hit
  after hack/test.sh built the image).
* **Run elsewhere:** ``RUN_ELSEWHERE`` names the module that runs a command as written where this
  one cannot (the real-node demo: tests/realnode/test_demo_real_node.py).
* **Not run:** ``NOT_RUN`` lists each command no test can run here and why; the page must still
  carry exactly that block.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from draxr_dev.devcluster.binaries import ensure_binaries, ensure_helm
from draxr_dev.devcluster.controlplane import ControlPlane, Options

from ..doc_commands import ROOT, Block, bash_blocks
from .clusters import extra_control_plane

README = "README.md"
PAGES = [
    README,
    "docs/getting-started.md",
    "docs/concepts/steering.md",
    "docs/concepts/mapping.md",
    "docs/concepts/claim-release.md",
    "docs/reference/kubectl-draxr.md",
    "docs/reference/crd.md",
    "docs/developer/testing.md",
    "docs/developer/image.md",
    "docs/guides/migration.md",
    "docs/install.md",
]
INSTALL_PAGE = "docs/install.md"
DEMO = "bash hack/demo.sh"
DEMO_DOWN = "bash hack/demo.sh down"
TEST = "bash hack/test.sh"
IMAGE = "bash hack/build-image.sh"
# command (comments stripped) -> why no test runs it here
NOT_RUN = {
    "docker build -t ghcr.io/draxr/draxr:0.1.0.dev0 .": "a Docker engine and the base image from Docker Hub "
    "(nothing here connects outside 127.0.0.1); hack/build-image.sh builds the same Dockerfile, tests/image "
    "tests it",
}
# command -> the test module that runs it as written (elsewhere than here)
RUN_ELSEWHERE = {
    # root and a real node named localhost, which the session's real-node tests hold: run by the
    # first module of tests/realnode, before that node starts
    "bash hack/demo.sh --real-node": "tests/realnode/test_demo_real_node.py",
}
_TEST_LINE = re.compile(r"^(?:[A-Z_]+=\S+\s+)*bash hack/test\.sh(?P<args>(?:\s+\S+)*)$")


def command(block: Block) -> str:
    """The block without comments and blank lines, one line per command."""
    lines = [re.sub(r"\s+#.*$", "", line).strip() for line in block.text.splitlines()]
    return "\n".join(line for line in lines if line and not line.startswith("#"))


def kind(block: Block) -> str:
    cmd = command(block)
    if cmd == DEMO:
        return "demo"
    if cmd == DEMO_DOWN:
        return "down"
    if cmd in NOT_RUN:
        return "not-run"
    if cmd in RUN_ELSEWHERE:
        return "elsewhere"
    if cmd == TEST:
        return "ci"
    if all(_TEST_LINE.match(line) for line in cmd.splitlines()):
        return "test-args"
    if cmd == IMAGE:
        return "image"
    if block.page == INSTALL_PAGE or (block.page == README and cmd.startswith("kubectl apply -k manifests/")):
        return "install"
    return "quickstart"


def blocks_of(kinds: set[str], pages: list[str] = PAGES) -> list[Block]:
    return [b for page in pages for b in bash_blocks(page) if kind(b) in kinds]


def run(block: Block, env: dict[str, str], timeout: float = 300) -> str:
    out = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block.text], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip
    assert out.returncode == 0, f"{block.where} failed:\n{block.text}\n{out.stdout[-4000:]}\n{out.stderr[-4000:]}"
    return out.stdout


def user_env(**extra: str) -> dict[str, str]:
    path = f"{ensure_binaries()}:{ensure_helm().parent}:{ROOT / '.venv/bin'}:{os.environ.get('PATH', '')}"
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "DRAXR_DEV_DIR")}
    return {**env, "PATH": path, **extra}


def test_every_block_has_a_way_to_run() -> None:
    """Each page's blocks fall in one of the kinds above, and the special commands are where the
    pages say they are (so a renamed page cannot leave its commands unrun)."""
    found = {kind(b) for page in PAGES for b in bash_blocks(page)}
    assert {"demo", "down", "ci", "install", "quickstart"} <= found, found
    for cmd in NOT_RUN:
        assert any(command(b) == cmd for page in PAGES for b in bash_blocks(page)), cmd
    for cmd, module in RUN_ELSEWHERE.items():
        assert any(command(b) == cmd for page in PAGES for b in bash_blocks(page)), cmd
        source = (ROOT / module).read_text()
        assert cmd in source, f"{module} does not run {cmd!r}"
        assert "bash_blocks" in source, f"{module} does not read the command from its page"


# ---- the commands that are checked --------------------------------------------------------------


def test_the_test_command_is_what_ci_runs() -> None:
    """``bash hack/test.sh`` cannot run inside the suite it runs: CI (.ci/run) executes exactly it."""
    blocks = blocks_of({"ci"})
    assert blocks, "no page shows the test command"
    ci = [line.strip() for line in (ROOT / ".ci/run").read_text().splitlines()]
    runs = [line for line in ci if line and not line.startswith("#") and "hack/" in line]
    assert runs[-1] == TEST, runs


def test_the_test_command_variants_select_tests() -> None:
    """Each ``bash hack/test.sh ARGS`` passes ARGS to pytest: they must select at least one test."""
    blocks = blocks_of({"test-args"})
    assert blocks
    for block in blocks:
        for line in command(block).splitlines():
            args = shlex.split(_TEST_LINE.match(line)["args"] or "")  # type: ignore[index]
            args = [a for a in args if a not in ("-x",)]
            out = subprocess.run(
                [str(ROOT / ".venv/bin/python"), "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                 *args],
                cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
            )  # fmt: skip
            # pytest exits 5 when nothing is collected
            assert out.returncode == 0, f"{block.where}: {line}\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}"


@pytest.mark.skipif(os.geteuid() != 0, reason="hack/build-image.sh needs root")
def test_the_image_build_command() -> None:
    """The page's build command, as written: it prints the OCI archive's path (a cache hit once
    hack/test.sh built the image)."""
    (block,) = blocks_of({"image"})
    out = run(block, user_env(), timeout=900)
    archive = Path(out.strip().splitlines()[-1])
    assert archive.name.endswith(".oci.tar"), out[-2000:]
    assert archive.is_file(), out[-2000:]


# ---- the quick start's environment ---------------------------------------------------------------


@pytest.fixture(scope="module")
def quickstart() -> Iterator[dict[str, str]]:
    """``bash hack/demo.sh`` as README.md and docs/getting-started.md show it, in a temp dir; the
    environment a user has afterwards. Stopped at the end whatever happened."""
    dev = Path(tempfile.mkdtemp(prefix="draxr-docs-demo."))
    env = user_env(DRAXR_DEV_DIR=str(dev))
    demo = blocks_of({"demo"})
    assert {b.page for b in demo} == {README, "docs/getting-started.md"}, [b.where for b in demo]
    try:
        out = run(demo[0], env, timeout=900)
        assert "all pods completed; their claims were released (0 left in the namespace)" in out, out[-3000:]
        assert "supervised as kubelet would" in out, out[-3000:]  # the demo says it restarts draxr
        yield {**env, "KUBECONFIG": str(dev / "admin.kubeconfig")}
    finally:
        subprocess.run(
            ["bash", "hack/demo.sh", "down"], cwd=ROOT, env=env, capture_output=True, timeout=300, check=False
        )
        if not os.environ.get("DRAXR_KEEP_RUN_DIR"):
            subprocess.run(["rm", "-rf", str(dev)], check=False)


@pytest.mark.parametrize("page", [p for p in PAGES if any(kind(b) == "quickstart" for b in bash_blocks(p))])
def test_page_runs_in_the_quick_start_environment(quickstart: dict[str, str], page: str) -> None:
    """The page's blocks, in order, after the quick start."""
    outputs = {b.line: run(b, quickstart) for b in bash_blocks(page) if kind(b) == "quickstart"}
    assert outputs
    text = "\n".join(outputs.values())
    # What the pages say the commands show.
    if page == "docs/concepts/mapping.md":
        assert "example.com/accelerator" in text, text[-2000:]
    if page == "docs/concepts/claim-release.md":
        assert "inference-" in text, text
        assert "train-" not in text, text
    if page == "docs/reference/kubectl-draxr.md":
        assert "is bound to node" in text, text[-2000:]


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _draxr_of(supervisor: int) -> int | None:
    """The ``draxr run`` the demo's supervisor runs now, if any."""
    return next((c for c in _children(supervisor) if "draxr run" in _cmdline(c)), None)


def test_the_demo_starts_draxr_again_when_it_exits(quickstart: dict[str, str]) -> None:
    """draxr exits on lost leadership (an API-server outage longer than its Lease) and counts on
    being restarted, as kubelet does in a cluster: the demo's supervisor starts it again, with
    kubelet's back-off, and the new one serves."""
    dev = Path(quickstart["DRAXR_DEV_DIR"])
    supervisor = int((dev / "draxr.pid").read_text())
    first = _draxr_of(supervisor)
    assert first is not None, (_cmdline(supervisor), _children(supervisor))
    os.kill(first, signal.SIGKILL)
    for _ in range(600):  # the back-off is 10 s; the new draxr then starts its servers
        again = _draxr_of(supervisor)
        if again not in (None, first) and _healthy():
            break
        time.sleep(0.5)
    else:
        raise AssertionError((dev / "draxr.log").read_text()[-4000:])
    log = (dev / "draxr.log").read_text()
    assert re.search(r"draxr: exited \(-9\) after \d+s: restarting in 10s \(restart 1;", log), log[-4000:]


def _healthy() -> bool:
    try:
        with urllib.request.urlopen("http://127.0.0.1:18081/healthz", timeout=5) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def test_demo_down_stops_everything(quickstart: dict[str, str]) -> None:
    """``bash hack/demo.sh down``, as written, last: draxr (its supervisor and the draxr it runs) and
    every control-plane process are gone."""
    downs = blocks_of({"down"})
    assert downs
    dev = Path(quickstart["DRAXR_DEV_DIR"])
    pids = [int((dev / "draxr.pid").read_text())]
    pids += _children(pids[0])
    pids += [int(p) for p in json.loads((dev / "state.json").read_text())["pids"].values()]
    assert len(pids) >= 5, pids  # draxr, etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok
    run(downs[0], quickstart)
    alive = [p for p in pids if Path(f"/proc/{p}").exists() and "zombie" not in _state(p)]
    assert not alive, alive


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().lower()
    except OSError:
        return "zombie"


# ---- installs, in a control plane of their own ---------------------------------------------------


@pytest.fixture(scope="module")
def install_cluster() -> Iterator[ControlPlane]:
    """No kube-scheduler: the Deployment's pods are admitted and stay Pending (no image here)."""
    with extra_control_plane("docs", Options(kwok=True)) as cp:
        yield cp


def test_install_commands(install_cluster: ControlPlane, tmp_path: Path) -> None:
    """README.md's install, then docs/install.md's blocks in order (kustomize, uninstall, Helm)."""
    env = user_env(
        KUBECONFIG=str(install_cluster.kubeconfig),
        HELM_CACHE_HOME=str(tmp_path / "helm-cache"),
        HELM_CONFIG_HOME=str(tmp_path / "helm-config"),
        HELM_DATA_HOME=str(tmp_path / "helm-data"),
    )
    readme = [b for b in blocks_of({"install"}, [README])]
    page = [b for b in blocks_of({"install"}, [INSTALL_PAGE])]
    assert len(readme) == 1, [b.where for b in readme]
    assert page, INSTALL_PAGE
    outputs = [run(b, env, timeout=600) for b in (*readme, *page)]
    joined = "\n".join(outputs)
    assert "deployment.apps/draxr created" in outputs[0], outputs[0]
    assert "STATUS: deployed" in joined, joined[-3000:]
    assert 'release "draxr" uninstalled' in outputs[-1], outputs[-1]
