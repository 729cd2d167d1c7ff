"""What a user gets from ``pip install`` of the source: a wheel built from a fresh ``git clone`` of this
repository (its committed HEAD, not the working tree), installed into a clean venv, runs ``draxr
node-agent`` through its imports (kubelet's generated pod-resources stubs among them) to a ``List``
call on the pod-resources socket, answered by a fake kubelet.

No Go build and no cluster; it needs PyPI (the wheel's isolated build and its dependencies, pinned by
hack/constraints.txt), as hack/setup.sh does, and reuses pip's cache."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from draxr_dev.devcluster.controlplane import free_port
from draxr_dev.devcluster.podresources import FakeKubelet, pod_resources

ROOT = Path(__file__).resolve().parents[2]


def _run(*cmd: str | Path, cwd: Path | None = None) -> None:
    done = subprocess.run([str(c) for c in cmd], cwd=cwd, check=False, timeout=540, capture_output=True, text=True)
    assert done.returncode == 0, f"{' '.join(map(str, cmd))}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"


@pytest.fixture(scope="module")
def clean_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clean venv with the wheel of a fresh clone (``pip wheel .`` in it) and its dependencies."""
    tmp = tmp_path_factory.mktemp("fresh-clone")
    src, dist, venv = tmp / "src", tmp / "dist", tmp / "venv"
    _run("git", "clone", "-q", "--no-hardlinks", ROOT, src)
    _run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", dist, ".", cwd=src)
    (wheel,) = dist.glob("draxr-*.whl")
    _run(sys.executable, "-m", "venv", venv)
    _run(venv / "bin" / "python", "-m", "pip", "install", "-q", "-c", src / "hack" / "constraints.txt", wheel)
    return venv


def test_the_clean_venv_has_its_own_draxr(clean_venv: Path) -> None:
    """draxr (stubs included) comes from the venv's site-packages, not from this checkout."""
    done = subprocess.run(
        [clean_venv / "bin" / "python", "-c", "import draxr.podresources.api_pb2_grpc as m; print(m.__file__)"],
        cwd=clean_venv,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        check=False,
        timeout=60,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()).is_relative_to(clean_venv / "lib"), done.stdout


async def test_the_installed_node_agent_reaches_the_pod_resources_socket(clean_venv: Path, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"  # an API server that is not there: the agent's writes fail, and retry
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: 'https://127.0.0.1:{free_port()}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    async with FakeKubelet() as kubelet:
        kubelet.lister.pods = [pod_resources("ns", "p", {"c": [("example.com/gpu", ["gpu-0"])]})]
        agent = await asyncio.create_subprocess_exec(
            str(clean_venv / "bin" / "draxr"),
            "node-agent",
            "--node-name=n1",
            f"--socket={kubelet.socket}",
            f"--kubeconfig={kubeconfig}",
            "--health-port=0",
            "--poll-seconds=0.2",
            "--refresh-seconds=1",
            cwd=tmp_path,
            env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KUBECONFIG")},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            for _ in range(1200):  # until kubelet is asked, or the agent is gone (a broken install ends it at once)
                if kubelet.lister.calls or agent.returncode is not None:
                    break
                await asyncio.sleep(0.1)
            calls, exited = kubelet.lister.calls, agent.returncode
        finally:
            if agent.returncode is None:
                agent.terminate()
            output, _ = await agent.communicate()
    log = output.decode(errors="replace")
    assert exited is None, f"draxr node-agent exited {exited}:\n{log}"
    assert calls >= 1, log
    assert '"node agent running"' in log, log
