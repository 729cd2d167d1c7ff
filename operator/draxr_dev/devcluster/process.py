"""``draxr run`` as a subprocess beside a dev control plane: the one launcher the tests and the
benchmarks share.

In-cluster (``in_cluster``), as the Deployment's pod runs it: the API server's address in
KUBERNETES_SERVICE_HOST/PORT, a mounted ServiceAccount directory, the pod's name and namespace, and
neither a kubeconfig nor a ``DRAXR_`` setting of the calling shell in its environment. Otherwise with
whatever flags the caller gives (``--kubeconfig ...``) and the environment it chooses.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from draxr_dev.devcluster.controlplane import LOOPBACK, ControlPlane

__all__ = ["DraxrProcess", "clean_environ", "in_cluster"]


def clean_environ() -> dict[str, str]:
    """This process's environment without draxr's settings (``DRAXR_*``) and kubeconfig: what an
    operator under test must not inherit from the shell that runs the tests."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("DRAXR_", "KUBECONFIG"))}


def in_cluster(
    cp: ControlPlane,
    serviceaccount_dir: Path,
    *,
    pod_name: str,
    namespace: str = "draxr-system",
    environ: Mapping[str, str] | None = None,
) -> tuple[list[str], dict[str, str]]:
    """The flags and the environment of ``draxr run`` as the Deployment's pod: ``environ`` (default:
    ``clean_environ()``) plus what the kubelet sets; ``namespace`` is the pod's (the leader-election
    Lease lives there)."""
    env = dict(clean_environ() if environ is None else environ)
    env.update(
        KUBERNETES_SERVICE_HOST=LOOPBACK,
        KUBERNETES_SERVICE_PORT=str(cp.ports["api"]),
        POD_NAME=pod_name,
        POD_NAMESPACE=namespace,
    )
    return ["--serviceaccount-dir", str(serviceaccount_dir)], env


class DraxrProcess:
    """``python -m draxr run ARGS`` with this interpreter, started at once. Its output (stdout and
    stderr) is appended to ``log``, or goes where this process's goes when ``log`` is None; its
    environment is ``environ`` (default: this process's). ``new_session``: in a session of its own,
    out of reach of the terminal's signals; ``send_signal`` then signals the whole group."""

    def __init__(
        self,
        args: Sequence[str],
        *,
        log: Path | None = None,
        environ: Mapping[str, str] | None = None,
        new_session: bool = False,
    ) -> None:
        self.log = log
        self.new_session = new_session
        cmd = [sys.executable, "-m", "draxr", "run", *args]
        env = dict(os.environ if environ is None else environ)
        if log is None:
            self.proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, start_new_session=new_session)
        else:
            with log.open("ab") as out:  # the child keeps its own descriptor
                self.proc = subprocess.Popen(
                    cmd,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=new_session,
                )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def poll(self) -> int | None:
        return self.proc.poll()

    def send_signal(self, sig: int) -> None:
        if self.new_session:
            os.killpg(self.proc.pid, sig)
        else:
            self.proc.send_signal(sig)

    def stop(self, grace: float = 20.0) -> None:
        """SIGTERM, then SIGKILL if it has not exited within ``grace`` seconds; returns once it is gone."""
        if self.proc.poll() is not None:
            return
        self.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            self.send_signal(signal.SIGKILL)
            self.proc.wait()

    def text(self) -> str:
        """The log so far ("" without a log file)."""
        return self.log.read_text(errors="replace") if self.log is not None and self.log.exists() else ""

    def lines(self) -> list[dict[str, Any]]:
        """The log's JSON lines (``--log-format json``); other lines are skipped."""
        out = []
        for line in self.text().splitlines():
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict):
                out.append(obj)
        return out
