"""Start and stop a real control plane on 127.0.0.1: etcd, kube-apiserver, kube-controller-manager and
optionally kube-scheduler and kwok. Every process is tracked by PID (state.json in the run directory),
so a control plane started by one command can be stopped by another without leaving anything behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .pki import Pki, make_pki

LOOPBACK = "127.0.0.1"
# Fake node and service addresses are labels only: nothing ever connects to them.
SERVICE_CIDR = "10.0.0.0/24"
KWOK_POD_CIDR = "10.244.0.0/16"
KWOK_NODE_IP = "10.243.0.1"

# Identities: the admin for tests and kwok; KCM and the scheduler run as their real users, so the
# bootstrap RBAC roles (and their limits) apply to them as in a real cluster.
CLIENTS: dict[str, tuple[str, str | None]] = {
    "admin": ("draxr-admin", "system:masters"),
    "kube-controller-manager": ("system:kube-controller-manager", None),
    "kube-scheduler": ("system:kube-scheduler", None),
}
# A real node (realnode.py) is named "localhost", so that kube-apiserver reaches its kubelet over
# loopback by the Hostname address; it authenticates as that node, kube-apiserver to it by its own cert.
REAL_NODE_NAME = "localhost"
REAL_NODE_CLIENTS: dict[str, tuple[str, str | None]] = {
    f"node-{REAL_NODE_NAME}": (f"system:node:{REAL_NODE_NAME}", "system:nodes"),
    "apiserver-kubelet-client": ("kube-apiserver-kubelet-client", "system:masters"),
}

KWOK_SUCCEED_STAGE = """\
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: draxr-pod-succeed
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: '.metadata.deletionTimestamp', operator: DoesNotExist}
    - {key: '.status.phase', operator: In, values: ['Running']}
    - {key: '.spec.restartPolicy', operator: In, values: ['Never', 'OnFailure']}
    - {key: '.metadata.annotations["draxr.io/run-for"]', operator: Exists}
  delay:
    durationMilliseconds: 1000
    durationFrom:
      expressionFrom: '.metadata.annotations["draxr.io/run-for"]'
  next:
    statusTemplate: |
      {{ $now := Now }}
      phase: Succeeded
      conditions:
      - {type: Ready, status: "False", reason: PodCompleted, lastTransitionTime: {{ $now | Quote }}}
      - {type: ContainersReady, status: "False", reason: PodCompleted, lastTransitionTime: {{ $now | Quote }}}
      containerStatuses:
      {{ range .spec.containers }}
      - name: {{ .name | Quote }}
        image: {{ .image | Quote }}
        ready: false
        started: false
        restartCount: 0
        state:
          terminated: {exitCode: 0, reason: Completed, startedAt: {{ $now | Quote }}, finishedAt: {{ $now | Quote }}}
      {{ end }}
"""
"""Completes a Running pod with restartPolicy Never/OnFailure that carries the annotation
``draxr.io/run-for`` (a Go duration such as ``3s``) after that time. Pods without it run forever, so
tests decide which pods finish. kwok's stock completion stage only handles Job-owned pods."""

RUN_FOR_ANNOTATION = "draxr.io/run-for"
_START_ATTEMPTS = 3


class ControlPlaneError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


@dataclass
class Options:
    """What to run. ``kcm_controllers`` is KCM's ``--controllers`` value; ``feature_gates`` is passed
    to every component (needed for DRAExtendedResource on 1.34/1.35 only). ``scheduler_qps`` and
    ``scheduler_burst`` are kube-scheduler's client rate limit (its clientConnection);
    ``apiserver_extra_args`` are appended to kube-apiserver's flags (the benchmark's audit log).
    ``real_node`` prepares for ``realnode.RealNode``: a client certificate and kubeconfig for node
    ``localhost`` (``system:node:localhost``, ``system:nodes``), and kube-apiserver reaching kubelets by
    their Hostname address with a client certificate of its own, checking their serving certs
    against the cluster CA."""

    scheduler: bool = False
    kwok: bool = True
    kcm_controllers: str = "*"
    feature_gates: str = ""
    scheduler_feature_gates: str | None = None  # None: feature_gates (1.35 adoption tests turn it off there)
    kwok_stages: tuple[str, ...] = ("node-initialize", "node-heartbeat-with-lease", "pod-ready", "pod-delete")
    scheduler_qps: float = 200
    scheduler_burst: int = 400
    apiserver_extra_args: tuple[str, ...] = ()
    real_node: bool = False  # room for a real kubelet (realnode.py): its identity, kubelet address by Hostname
    # KCM marks a node NotReady (and taints it) once its Lease is this old. kwok renews thousands of
    # Leases on a 2-core box slower than a kubelet would: scale runs raise it (bench/e2e.py).
    node_monitor_grace_seconds: int = 40


@dataclass
class ControlPlane:
    binaries: Path
    run_dir: Path
    options: Options = field(default_factory=Options)
    ports: dict[str, int] = field(default_factory=dict)
    pids: dict[str, int] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    _procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict, repr=False)

    # ---- paths -------------------------------------------------------------------------------
    @property
    def clients(self) -> dict[str, tuple[str, str | None]]:
        """The client identities whose certificates and kubeconfigs this control plane writes."""
        return {**CLIENTS, **(REAL_NODE_CLIENTS if self.options.real_node else {})}

    @property
    def pki(self) -> Pki:
        return Pki(self.run_dir / "pki")

    @property
    def kubeconfig(self) -> Path:
        return self.run_dir / "admin.kubeconfig"

    def kubeconfig_for(self, client: str) -> Path:
        return self.run_dir / f"{client}.kubeconfig"

    @property
    def api_url(self) -> str:
        return f"https://{LOOPBACK}:{self.ports['api']}"

    def log_path(self, name: str) -> Path:
        return self.run_dir / f"{name}.log"

    # ---- lifecycle ---------------------------------------------------------------------------
    def start(self, timeout: float = 90.0) -> None:
        """Start every component and wait until the API is ready, KCM is healthy and the default
        ServiceAccount exists. On any failure the components already started are stopped."""
        self.run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        t0 = time.monotonic()
        for attempt in range(1, _START_ATTEMPTS + 1):
            try:
                self._start(timeout)
                break
            except ControlPlaneError as e:
                self.stop()
                # free_port() is racy: another process may bind the port first. Retry with new ports.
                if "address already in use" not in str(e) or attempt == _START_ATTEMPTS:
                    raise
            except BaseException:
                self.stop()
                raise
        self.timings["total"] = time.monotonic() - t0
        self._save_state()

    def _start(self, timeout: float) -> None:
        t0 = time.monotonic()
        # A fresh cluster every time: stale etcd data would bring back old objects and leases.
        shutil.rmtree(self.run_dir / "etcd-data", ignore_errors=True)
        make_pki(self.run_dir / "pki", self.clients)
        self.ports = {k: free_port() for k in ("etcd", "etcd_peer", "api", "kcm", "scheduler", "kwok")}
        for client in self.clients:
            self._write_kubeconfig(client)
        self.timings["pki"] = time.monotonic() - t0

        self._spawn("etcd", self._etcd_argv())
        self._wait("etcd", lambda: _http_ok(f"http://{LOOPBACK}:{self.ports['etcd']}/health"), timeout)
        self.timings["etcd_ready"] = time.monotonic() - t0

        self._spawn("kube-apiserver", self._apiserver_argv())
        self._wait("kube-apiserver", lambda: self._api_get("/readyz") is not None, timeout)
        self.timings["apiserver_ready"] = time.monotonic() - t0

        self._spawn("kube-controller-manager", self._kcm_argv())
        if self.options.scheduler:
            self._spawn("kube-scheduler", self._scheduler_argv())
        if self.options.kwok:
            self._write_kwok_config()
            self._spawn("kwok", self._kwok_argv(), env={"HOME": str(self.run_dir)})
        self._wait(
            "kube-controller-manager",
            lambda: _http_ok(f"https://{LOOPBACK}:{self.ports['kcm']}/healthz", insecure=True),
            timeout,
        )
        if self.options.scheduler:
            self._wait(
                "kube-scheduler",
                lambda: _http_ok(f"https://{LOOPBACK}:{self.ports['scheduler']}/healthz", insecure=True),
                timeout,
            )
        if self.options.kwok:
            self._wait("kwok", lambda: _http_ok(f"http://{LOOPBACK}:{self.ports['kwok']}/healthz"), timeout)
        self._wait(
            "kube-controller-manager",
            lambda: self._api_get("/api/v1/namespaces/default/serviceaccounts/default") is not None,
            timeout,
            what="the default ServiceAccount",
        )
        self.timings["default_serviceaccount"] = time.monotonic() - t0

    def restart_apiserver(self, down_seconds: float = 0.0, timeout: float = 90.0) -> float:
        """SIGKILL kube-apiserver, leave it down ``down_seconds``, start it again with the same flags
        (and so the same port: clients reconnect to the address they know) and wait for /readyz.
        Returns the seconds from the kill until it was ready again (for chaos runs)."""
        t0 = time.monotonic()
        proc = self._procs.get("kube-apiserver")
        if proc is not None:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        elif "kube-apiserver" in self.pids and _pid_is(self.pids["kube-apiserver"], self.binaries):
            os.kill(self.pids["kube-apiserver"], signal.SIGKILL)  # (a control plane re-attached by load())
            _wait_gone(self.pids["kube-apiserver"], self.binaries, timeout)
        time.sleep(max(0.0, down_seconds))
        self._spawn("kube-apiserver", self._apiserver_argv())
        self._wait("kube-apiserver", lambda: self._api_get("/readyz") is not None, timeout)
        return time.monotonic() - t0

    def stop(self, grace: float = 20.0) -> None:
        """SIGTERM every component in reverse start order, SIGKILL after ``grace`` seconds."""
        for name in reversed(list(self.pids)):
            pid = self.pids[name]
            proc = self._procs.get(name)
            if proc is not None:
                _stop_popen(proc, grace)
            else:
                _stop_pid(pid, self.binaries, grace)
        self.pids.clear()
        self._procs.clear()
        with contextlib.suppress(FileNotFoundError):
            (self.run_dir / "state.json").unlink()

    # ---- introspection -----------------------------------------------------------------------
    def alive(self) -> dict[str, bool]:
        return {name: _pid_is(pid, self.binaries) for name, pid in self.pids.items()}

    def rss_mib(self) -> dict[str, float]:
        return rss_mib(self.pids)

    def describe(self) -> str:
        lines = [
            f"run directory     {self.run_dir}",
            f"kubeconfig        {self.kubeconfig}",
            f"kube-apiserver    {self.api_url}",
            f"etcd              http://{LOOPBACK}:{self.ports['etcd']}",
        ]
        for name, pid in self.pids.items():
            lines.append(f"{name:<17} pid {pid}, log {self.log_path(name)}")
        return "\n".join(lines)

    @classmethod
    def load(cls, run_dir: Path) -> ControlPlane:
        """Re-attach to a control plane started by another process (reads state.json)."""
        state = json.loads((run_dir / "state.json").read_text())
        cp = cls(binaries=Path(state["binaries"]), run_dir=run_dir)
        cp.ports = {k: int(v) for k, v in state["ports"].items()}
        cp.pids = {k: int(v) for k, v in state["pids"].items()}
        return cp

    # ---- internals ---------------------------------------------------------------------------
    def _save_state(self) -> None:
        state = {"binaries": str(self.binaries), "ports": self.ports, "pids": self.pids, "timings": self.timings}
        (self.run_dir / "state.json").write_text(json.dumps(state, indent=2))

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        log = self.log_path(name).open("ab")
        proc = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C in the caller does not reach the components first
            env={**os.environ, **(env or {})},
        )
        log.close()
        self._procs[name] = proc
        self.pids[name] = proc.pid
        self._save_state()

    def _wait(self, name: str, ready: Callable[[], bool], timeout: float, what: str | None = None) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            proc = self._procs.get(name)
            if proc is not None and proc.poll() is not None:
                raise ControlPlaneError(
                    f"{name} exited with {proc.returncode} during start-up; last log lines:\n{self._tail(name)}"
                )
            if ready():
                return
            time.sleep(0.2)
        raise ControlPlaneError(
            f"timed out after {timeout:.0f}s waiting for {what or name}; last log lines of {name}:\n{self._tail(name)}"
        )

    def _tail(self, name: str, lines: int = 25) -> str:
        try:
            return "\n".join(self.log_path(name).read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    def _ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.pki.ca_crt))
        ctx.load_cert_chain(str(self.pki.client_crt("admin")), str(self.pki.client_key("admin")))
        return ctx

    def _api_get(self, path: str) -> bytes | None:
        try:
            with urllib.request.urlopen(self.api_url + path, context=self._ssl_context(), timeout=5) as resp:
                return bytes(resp.read())
        except (urllib.error.URLError, ConnectionError, TimeoutError, ssl.SSLError):
            return None

    def _write_kubeconfig(self, client: str) -> None:
        # JSON is valid YAML; kubectl and kubernetes-asyncio both read it.
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "draxr-dev",
                    "cluster": {"server": self.api_url, "certificate-authority": str(self.pki.ca_crt)},
                }
            ],
            "users": [
                {
                    "name": client,
                    "user": {
                        "client-certificate": str(self.pki.client_crt(client)),
                        "client-key": str(self.pki.client_key(client)),
                    },
                }
            ],
            "contexts": [{"name": "draxr-dev", "context": {"cluster": "draxr-dev", "user": client}}],
            "current-context": "draxr-dev",
        }
        path = self.kubeconfig_for(client)
        path.write_text(json.dumps(config, indent=2))
        path.chmod(0o600)

    def _gates(self, gates: str | None = None) -> list[str]:
        value = self.options.feature_gates if gates is None else gates
        return [f"--feature-gates={value}"] if value else []

    def _etcd_argv(self) -> list[str]:
        peer = f"http://{LOOPBACK}:{self.ports['etcd_peer']}"
        client = f"http://{LOOPBACK}:{self.ports['etcd']}"
        return [
            str(self.binaries / "etcd"),
            "--name=draxr0",
            f"--data-dir={self.run_dir / 'etcd-data'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=draxr0={peer}",
            "--initial-cluster-state=new",
            f"--listen-metrics-urls=http://{LOOPBACK}:{free_port()}",
            "--unsafe-no-fsync=true",
            "--auto-compaction-retention=1",
            "--quota-backend-bytes=4294967296",
            "--log-level=warn",
        ]

    def _kubelet_client_args(self) -> list[str]:
        if not self.options.real_node:
            return []
        p = self.pki
        return [
            "--kubelet-preferred-address-types=Hostname",
            f"--kubelet-certificate-authority={p.ca_crt}",
            f"--kubelet-client-certificate={p.client_crt('apiserver-kubelet-client')}",
            f"--kubelet-client-key={p.client_key('apiserver-kubelet-client')}",
        ]

    def _apiserver_argv(self) -> list[str]:
        p = self.pki
        return [
            str(self.binaries / "kube-apiserver"),
            f"--etcd-servers=http://{LOOPBACK}:{self.ports['etcd']}",
            f"--bind-address={LOOPBACK}",
            f"--secure-port={self.ports['api']}",
            f"--advertise-address={LOOPBACK}",
            "--endpoint-reconciler-type=none",
            f"--tls-cert-file={p.apiserver_crt}",
            f"--tls-private-key-file={p.apiserver_key}",
            f"--client-ca-file={p.ca_crt}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={p.sa_pub}",
            f"--service-account-signing-key-file={p.sa_key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--authorization-mode=Node,RBAC",
            "--anonymous-auth=false",
            "--allow-privileged=true",
            "--profiling=false",
            # Tests create many objects quickly from one client; the defaults throttle a 2-core box.
            "--max-requests-inflight=800",
            "--max-mutating-requests-inflight=400",
            "--v=1",
            *self._gates(),
            *self._kubelet_client_args(),
            *self.options.apiserver_extra_args,
        ]

    def _kcm_argv(self) -> list[str]:
        p = self.pki
        return [
            str(self.binaries / "kube-controller-manager"),
            f"--kubeconfig={self.kubeconfig_for('kube-controller-manager')}",
            f"--authentication-kubeconfig={self.kubeconfig_for('kube-controller-manager')}",
            f"--authorization-kubeconfig={self.kubeconfig_for('kube-controller-manager')}",
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
            f"--bind-address={LOOPBACK}",
            f"--secure-port={self.ports['kcm']}",
            "--leader-elect=false",
            f"--controllers={self.options.kcm_controllers}",
            f"--service-account-private-key-file={p.sa_key}",
            f"--root-ca-file={p.ca_crt}",
            "--use-service-account-credentials=true",
            "--node-monitor-period=5s",
            f"--node-monitor-grace-period={self.options.node_monitor_grace_seconds}s",
            "--kube-api-qps=200",
            "--kube-api-burst=400",
            "--profiling=false",
            "--v=1",
            *self._gates(),
        ]

    def _scheduler_argv(self) -> list[str]:
        kubeconfig = self.kubeconfig_for("kube-scheduler")
        config = self.run_dir / "kube-scheduler.yaml"
        config.write_text(
            json.dumps(
                {
                    "apiVersion": "kubescheduler.config.k8s.io/v1",
                    "kind": "KubeSchedulerConfiguration",
                    "clientConnection": {
                        "kubeconfig": str(kubeconfig),
                        "qps": self.options.scheduler_qps,
                        "burst": self.options.scheduler_burst,
                    },
                    "leaderElection": {"leaderElect": False},
                    "enableProfiling": False,
                },
                indent=2,
            )
        )
        return [
            str(self.binaries / "kube-scheduler"),
            f"--config={config}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
            f"--bind-address={LOOPBACK}",
            f"--secure-port={self.ports['scheduler']}",
            "--v=1",
            *self._gates(self.options.scheduler_feature_gates),
        ]

    def _write_kwok_config(self) -> None:
        parts = [(self.binaries / "stages" / f"{s}.yaml").read_text() for s in self.options.kwok_stages]
        (self.run_dir / "kwok.yaml").write_text("\n---\n".join([*parts, KWOK_SUCCEED_STAGE]))

    def _kwok_argv(self) -> list[str]:
        return [
            str(self.binaries / "kwok"),
            f"--kubeconfig={self.kubeconfig}",
            f"--config={self.run_dir / 'kwok.yaml'}",
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            "--node-lease-duration-seconds=40",
            f"--cidr={KWOK_POD_CIDR}",
            f"--node-ip={KWOK_NODE_IP}",
            f"--server-address={LOOPBACK}:{self.ports['kwok']}",
            "--v=WARN",
        ]


# ---- process helpers ------------------------------------------------------------------------


def _http_ok(url: str, insecure: bool = False) -> bool:
    ctx = None
    if url.startswith("https"):
        ctx = ssl.create_default_context()
        if insecure:  # KCM and the scheduler serve a self-signed in-memory cert on loopback
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=5) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError, ssl.SSLError):
        return False


def proc_status(pid: int) -> dict[str, str]:
    """/proc/<pid>/status as a dict ({} when the process is gone)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return {}
    return dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)


def rss_mib(pids: dict[str, int]) -> dict[str, float]:
    """Resident memory (VmRSS) and peak (VmHWM) of each named process, in MiB."""
    out: dict[str, float] = {}
    for name, pid in pids.items():
        status = proc_status(pid)
        for key, label in (("VmRSS", "rss"), ("VmHWM", "peak")):
            if key in status:
                out[f"{name}.{label}"] = int(status[key].split()[0]) / 1024
    return out


def _pid_is(pid: int, binaries: Path) -> bool:
    """True when ``pid`` is alive and runs a binary from ``binaries`` (guards against PID reuse)."""
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0].decode()
    except (FileNotFoundError, ProcessLookupError):
        return False
    state = proc_status(pid).get("State", "")
    return argv0.startswith(str(binaries)) and not state.startswith("Z")


def _stop_popen(proc: subprocess.Popen[bytes], grace: float) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _wait_gone(pid: int, binaries: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while _pid_is(pid, binaries) and time.monotonic() < deadline:
        time.sleep(0.1)


def _stop_pid(pid: int, binaries: Path, grace: float) -> None:
    if not _pid_is(pid, binaries):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not _pid_is(pid, binaries):
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def running(binaries: Path, run_dir: Path, options: Options | None = None) -> Iterator[ControlPlane]:
    cp = ControlPlane(binaries=binaries, run_dir=run_dir, options=options or Options())
    cp.start()
    try:
        yield cp
    finally:
        cp.stop()
