"""A real node next to a dev control plane: containerd 2.x, kubelet and our DRA kubelet plugin (and
optionally our device plugin) on this machine, registered as node ``localhost``.

Pods really run (runc, hostNetwork only: the CNI configuration is loopback-only) and get their
devices from kubelet through CDI, so the claims and pod status draxr writes are proven against
kubelet itself. Everything lives in a private run directory (containerd's root, state and sockets,
kubelet's root and cert dirs, CDI specs, pod logs); the processes are tracked by PID (state.json).

The settings are those of /work/shared/reference/real-node-recipe.md, which worked on this machine kind
(Firecracker VM, cgroup v1 hybrid, no CAP_SYS_RESOURCE): containerd ``restrict_oom_score_adj``,
``cdi_spec_dirs``, NRI off, stream server on 127.0.0.1; kubelet ``cgroupfs``, ``failCgroupV1: false``,
every server on 127.0.0.1, AlwaysAllow (this test node only), tiny eviction thresholds, image GC at
100/99. The node carries the taint ``draxr.dev/real-node=true:NoSchedule`` (pods of other tests never
land on it; tests tolerate it) and no kwok annotation, so kwok (which manages only nodes annotated
``kwok.x-k8s.io/node=fake``) leaves it and its pods alone.

Nothing may connect to the VM's own address, which kubelet reports as the node's InternalIP and
gives hostNetwork pods: kube-apiserver reaches kubelet by the Hostname address ``localhost`` (the
control plane's ``Options.real_node``), and tests use no httpGet probes.

Host-global things kubelet and containerd touch whatever their settings (the device-plugin socket
dir ``/var/lib/kubelet/device-plugins``, shim sockets in ``/run/containerd/s``, ``/var/log/containers``,
the ``/kubepods`` and ``/k8s.io`` cgroups) are recorded before the start and removed by ``stop()``
when this node created them. ``stop()`` is idempotent and registered with atexit.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import functools
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import ociimage
from .controlplane import LOOPBACK, REAL_NODE_NAME, ControlPlane, free_port, proc_status, rss_mib
from .pki import issue_serving_cert

DRIVER = "gpu.draxr.dev"
DEVICE_CLASS = "draxr-real-gpu"
EXTENDED_RESOURCE = "draxr.dev/real-gpu"
DEVICE_PLUGIN_RESOURCE = "draxr.dev/dp-gpu"
TAINT_KEY = "draxr.dev/real-node"
NODE_LABEL = "draxr.dev/real-node"
TOLERATION = {"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}
BUSYBOX_IMAGE = ociimage.BUSYBOX_IMAGE
PAUSE_IMAGE = ociimage.PAUSE_IMAGE
RUNC = "/usr/sbin/runc"
CNI_BIN_DIR = "/usr/lib/cni"
CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_TREES = ("kubepods", "k8s.io")
LOCK_FILE = Path("/run/lock/draxr-realnode.lock")
# Host paths kubelet or containerd may create whatever their configured roots: each one that did
# not exist before the start is removed at stop; of those that did, only the new entries. Deepest first.
HOST_PATHS = (
    "/var/lib/kubelet/device-plugins",
    "/var/lib/kubelet",
    "/var/lib/cni/results",
    "/var/lib/cni",
    "/run/containerd",
    "/run/netns",
    "/var/log/containers",
    "/var/log/pods",
    "/opt/containerd",
    "/var/lib/containerd",
    "/etc/cni",
    "/run/nri",
    "/run/cdi",
    "/etc/cdi",
    "/usr/libexec/kubernetes",
    "/etc/kubernetes",
    "/run/mount",  # util-linux's utab, written by the teardown's own umount
)


class RealNodeError(RuntimeError):
    pass


@dataclass
class NodeOptions:
    """What the node serves. ``device_class``: a DeviceClass of that name selecting ``driver`` with
    ``extendedResourceName: extended_resource`` is created at start and deleted at stop (None: none).
    ``device_plugin``: also run our device plugin for ``device_plugin_resource``."""

    devices: int = 4
    driver: str = DRIVER
    device_class: str | None = DEVICE_CLASS
    extended_resource: str = EXTENDED_RESOURCE
    device_plugin: bool = False
    device_plugin_resource: str = DEVICE_PLUGIN_RESOURCE
    device_plugin_devices: int = 4
    kubelet_verbosity: int = 2


@dataclass
class RealNode:
    control_plane: ControlPlane
    binaries: Path
    run_dir: Path
    options: NodeOptions = field(default_factory=NodeOptions)
    pids: dict[str, int] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    host_before: dict[str, list[str] | None] = field(default_factory=dict)
    created_class: bool = False
    _procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict, repr=False)
    _lock_fd: int | None = field(default=None, repr=False)
    _active: bool = field(default=False, repr=False)

    name = REAL_NODE_NAME

    # ---- paths -------------------------------------------------------------------------------
    @property
    def kubelet_root(self) -> Path:
        return self.run_dir / "kubelet"

    @property
    def containerd_dir(self) -> Path:
        return self.run_dir / "containerd"

    @property
    def containerd_socket(self) -> Path:
        return self.containerd_dir / "containerd.sock"

    @property
    def cdi_dir(self) -> Path:
        return self.run_dir / "cdi"

    @property
    def plugin_dir(self) -> Path:
        return self.kubelet_root / "plugins" / self.options.driver

    @property
    def registrar_dir(self) -> Path:
        return self.kubelet_root / "plugins_registry"

    @property
    def kubeconfig(self) -> Path:
        """The node's identity (system:node:localhost): kubelet's and the DRA plugin's."""
        return self.control_plane.kubeconfig_for(f"node-{self.name}")

    def log_path(self, name: str) -> Path:
        return self.run_dir / f"{name}.log"

    # ---- lifecycle ---------------------------------------------------------------------------
    def start(self, timeout: float = 120.0) -> None:
        """Start containerd, import the images, start kubelet and wait for the node to be Ready,
        then the DRA plugin (and its ResourceSlice), the device plugin if asked, the DeviceClass.
        On any failure everything started is torn down."""
        if not self.control_plane.options.real_node or not self.kubeconfig.exists():
            raise RealNodeError("the control plane was not started with Options(real_node=True)")
        if os.geteuid() != 0:
            raise RealNodeError("a real node needs root (containerd, runc, cgroups, mounts)")
        self._lock()
        t0 = time.monotonic()
        try:
            self._preflight()
            self.host_before = _snapshot(HOST_PATHS)
            self._active = True
            atexit.register(self.stop)
            self._save_state()
            self._start(timeout, t0)
        except BaseException:
            self.stop()
            raise
        self.timings["total"] = time.monotonic() - t0
        self._save_state()

    def _start(self, timeout: float, t0: float) -> None:
        for d in (self.kubelet_root, self.containerd_dir, self.cdi_dir, self.run_dir / "cni", self.run_dir / "pods"):
            d.mkdir(parents=True, exist_ok=True, mode=0o750)
        self._write_containerd_config()
        config = self.containerd_dir / "config.toml"
        self._spawn("containerd", [str(self.binaries / "containerd"), f"--config={config}"])
        self._wait("containerd", lambda: self._ctr("version").returncode == 0, timeout)
        self.timings["containerd_ready"] = time.monotonic() - t0
        for tar in ("pause.tar", "busybox.tar"):
            out = self._ctr("images", "import", str(self.binaries / "images" / tar))
            if out.returncode != 0:
                raise RealNodeError(f"ctr images import {tar} failed: {out.stdout}{out.stderr}")
        self.timings["images_imported"] = time.monotonic() - t0

        self.ports = {"kubelet": free_port(), "kubelet_healthz": free_port()}
        self._write_kubelet_config()
        self._spawn("kubelet", self._kubelet_argv())
        self._wait("kubelet", self._node_ready, timeout, what=f"node {self.name} Ready")
        self.timings["node_ready"] = time.monotonic() - t0

        self._spawn("draplugin", self._draplugin_argv())
        self._wait("draplugin", self._slice_published, timeout, what=f"the ResourceSlice of {self.options.driver}")
        self.timings["slice_published"] = time.monotonic() - t0
        if self.options.device_plugin:
            self.start_device_plugin(timeout)
            self.timings["device_plugin_ready"] = time.monotonic() - t0
        if self.options.device_class:
            self._create_device_class()
        self._save_state()

    def start_device_plugin(self, timeout: float = 120.0) -> None:
        """Start the device plugin; returns once the node's allocatable shows its devices."""
        self._spawn("deviceplugin", self._deviceplugin_argv())
        self._wait(
            "deviceplugin",
            lambda: self.allocatable(self.options.device_plugin_resource) == self.options.device_plugin_devices,
            timeout,
            what=f"allocatable {self.options.device_plugin_resource}",
        )

    def stop_device_plugin(self, timeout: float = 120.0) -> None:
        """Stop the device plugin (SIGTERM); returns once kubelet reports allocatable 0 for it
        (its next node status; the capacity stays until kubelet's 5-minute endpoint grace)."""
        self._stop("deviceplugin", grace=10.0)
        deadline = time.monotonic() + timeout
        while self.allocatable(self.options.device_plugin_resource) != 0:
            if time.monotonic() > deadline:
                raise RealNodeError(
                    f"allocatable {self.options.device_plugin_resource} still not 0 after {timeout:.0f}s"
                )
            time.sleep(0.5)

    def restart_kubelet(self, timeout: float = 120.0) -> None:
        """Stop kubelet (SIGTERM) and start it again with the same configuration; returns once the
        node is Ready again. Containers, the plugins and containerd keep running meanwhile."""
        self._stop("kubelet", grace=20.0)
        assert not self._kubelet_healthy()
        self._spawn("kubelet", self._kubelet_argv())
        self._wait("kubelet", self._kubelet_healthy, timeout, what="kubelet's /healthz after a restart")
        self._wait("kubelet", self._node_ready, timeout, what=f"node {self.name} Ready after a kubelet restart")

    def _kubelet_healthy(self) -> bool:
        url = f"http://{LOOPBACK}:{self.ports['kubelet_healthz']}/healthz"
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def stop(self, grace: float = 20.0) -> list[str]:
        """Tear everything down; idempotent (a second call, or one after a failed start, does what is
        left). Returns what could not be cleaned (also printed to stderr), empty when all went."""
        if not self._active:
            self._unlock()
            return []
        problems: list[str] = []

        def step(what: str, fn: Callable[[], None]) -> None:
            try:
                fn()
            except Exception as e:
                problems.append(f"{what}: {e}")

        api_up = self._api("GET", "/readyz")[0] == 200
        if api_up:
            step("delete pods", lambda: self._delete_pods(grace))
            if self.created_class and self.options.device_class:
                step("delete DeviceClass", self._delete_device_class)
        for name in ("deviceplugin", "draplugin", "kubelet"):
            step(f"stop {name}", functools.partial(self._stop, name, grace))
        step("kill containers", self._kill_containers)
        step("stop containerd", lambda: self._stop("containerd", grace))
        step("kill shims", self._kill_shims)
        step("unmount", self._unmount)
        step("remove cgroups", functools.partial(_remove_cgroups, kill=True))
        step("remove host paths", lambda: _restore(self.host_before))
        if api_up:
            step("delete node objects", self._delete_node_objects)
        problems += self.leftovers()
        self._active = False
        self.pids.clear()
        self._procs.clear()
        with contextlib.suppress(FileNotFoundError):
            (self.run_dir / "state.json").unlink()
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
        self._unlock()
        for p in problems:
            print(f"[draxr] real node teardown: {p}", file=sys.__stderr__)
        return problems

    # ---- introspection -----------------------------------------------------------------------
    def leftovers(self) -> list[str]:
        """What of this node is still on the machine: processes, mounts, cgroups, host paths."""
        out = [f"process {n} (pid {pid}) still runs" for n, pid in self.pids.items() if _alive(pid)]
        out += [f"process {pid} still runs ({cmd})" for pid, cmd in self._own_processes()]
        out += [f"mount {m} left" for m in _mounts_under((self.run_dir, Path("/var/lib/kubelet")))]
        out += [f"cgroup {c} left" for c in _cgroups_left()]
        for path, before in self.host_before.items():
            p = Path(path)
            if before is None and p.exists():
                out.append(f"host path {path} left")
            elif before is not None and p.is_dir():
                out += [f"host path {path}/{c} left" for c in sorted(set(os.listdir(p)) - set(before))]
        return out

    def alive(self) -> dict[str, bool]:
        return {name: _alive(pid) for name, pid in self.pids.items()}

    def rss_mib(self) -> dict[str, float]:
        return rss_mib(self.pids)

    def plugin_events(self, name: str = "draplugin") -> list[dict[str, Any]]:
        """The JSON lines the DRA plugin (or ``deviceplugin``) logged: prepare/unprepare (allocate)."""
        events = []
        with contextlib.suppress(FileNotFoundError):
            for line in self.log_path(name).read_text(errors="replace").splitlines():
                if line.startswith("{"):
                    with contextlib.suppress(ValueError):
                        obj = json.loads(line)
                        if isinstance(obj, dict) and "event" in obj:
                            events.append(obj)
        return events

    def ctr(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``ctr`` against this node's containerd, in kubelet's namespace (k8s.io)."""
        return self._ctr(*args)

    def import_image(self, archive: Path) -> list[str]:
        """Import an OCI archive into this node's containerd (kubelet's namespace), as its pods
        then find it without a registry; returns the image references it holds afterwards."""
        out = self._ctr("images", "import", str(archive))
        if out.returncode != 0:
            raise RealNodeError(f"ctr images import {archive} failed: {out.stdout}{out.stderr}")
        listed = self._ctr("images", "ls", "-q")
        return sorted(listed.stdout.split())

    def allocatable(self, resource: str) -> int:
        status, node = self._api("GET", f"/api/v1/nodes/{self.name}")
        if status != 200 or node is None:
            return -1
        return int(node.get("status", {}).get("allocatable", {}).get(resource, "0"))

    def describe(self) -> str:
        lines = [f"real node         {self.name} (run directory {self.run_dir})"]
        for name, pid in self.pids.items():
            lines.append(f"{name:<17} pid {pid}, log {self.log_path(name)}")
        if self.options.device_class:
            lines.append(
                f"device class      {self.options.device_class}: {self.options.extended_resource} -> "
                f"{self.options.driver} x{self.options.devices}"
            )
        lines.append(f"pods need         toleration {TAINT_KEY}:NoSchedule, image {BUSYBOX_IMAGE}, hostNetwork")
        return "\n".join(lines)

    @classmethod
    def load(cls, control_plane: ControlPlane, run_dir: Path) -> RealNode:
        """Re-attach to a node started by another process (reads state.json), e.g. to stop it."""
        state = json.loads((run_dir / "state.json").read_text())
        node = cls(
            control_plane=control_plane,
            binaries=Path(state["binaries"]),
            run_dir=run_dir,
            options=NodeOptions(**state["options"]),
        )
        node.pids = {k: int(v) for k, v in state["pids"].items()}
        node.ports = {k: int(v) for k, v in state["ports"].items()}
        node.host_before = state["host_before"]
        node.created_class = bool(state["created_class"])
        node._active = True
        return node

    # ---- internals: processes ----------------------------------------------------------------
    def _lock(self) -> None:
        """One real node per machine (kubelet's device-plugin socket and the /kubepods cgroups are
        host-global). The lock file names the holder's run directory, so that a node whose process
        died without its teardown (SIGKILL) is found and stopped by the next one."""
        if self._lock_fd is not None:
            return
        LOCK_FILE.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = Path(LOCK_FILE).read_text().strip()
            os.close(fd)
            raise RealNodeError(f"another real node runs on this machine ({LOCK_FILE}: {holder})") from None
        previous = os.read(fd, 4096).decode(errors="replace").strip()
        self._lock_fd = fd
        if previous and Path(previous) != self.run_dir and (Path(previous) / "state.json").exists():
            print(f"[draxr] stopping the real node left in {previous} (its process died)", file=sys.__stderr__)
            orphan = RealNode.load(_control_plane_of(Path(previous)), Path(previous))
            orphan.stop()  # (it holds no lock fd of its own: ours stays held)
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(self.run_dir).encode(), 0)

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._lock_fd, 0)
            os.close(self._lock_fd)
            self._lock_fd = None

    def _preflight(self) -> None:
        for hierarchy in _hierarchies():
            for tree in CGROUP_TREES:
                if (hierarchy / tree).exists():
                    # Left by a node whose teardown never ran: empty cgroups go, busy ones stop us.
                    _remove_cgroups(kill=False)
                    if (hierarchy / tree).exists():
                        raise RealNodeError(
                            f"{hierarchy / tree} exists with processes: another kubelet runs, or a node that "
                            "was not stopped (python -m draxr_dev.devcluster --dir <its control plane's run dir> down)"
                        )
        for exe in (RUNC, f"{CNI_BIN_DIR}/loopback"):
            if not Path(exe).exists():
                raise RealNodeError(f"{exe} is missing: run hack/setup-node.sh")

    def _save_state(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True, mode=0o750)
        state = {
            "binaries": str(self.binaries),
            "options": asdict(self.options),
            "pids": self.pids,
            "ports": self.ports,
            "timings": self.timings,
            "host_before": self.host_before,
            "created_class": self.created_class,
            "control_plane_dir": str(self.control_plane.run_dir),
        }
        (self.run_dir / "state.json").write_text(json.dumps(state, indent=2))

    def _env(self) -> dict[str, str]:
        # containerd finds containerd-shim-runc-v2 on PATH.
        return {**os.environ, "PATH": f"{self.binaries}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}

    def _spawn(self, name: str, argv: list[str]) -> None:
        with self.log_path(name).open("ab") as log:
            proc = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=self._env(),
            )
        self._procs[name] = proc
        self.pids[name] = proc.pid
        self._save_state()

    def _stop(self, name: str, grace: float) -> None:
        pid = self.pids.get(name)
        if pid is None:
            return
        proc = self._procs.get(name)
        if proc is not None:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(grace)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        elif _alive(pid) and _exe_under(pid, self.binaries):
            _term_then_kill(pid, grace)
        self.pids.pop(name, None)
        self._procs.pop(name, None)

    def _wait(self, name: str, ready: Callable[[], bool], timeout: float, what: str | None = None) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            proc = self._procs.get(name)
            if proc is not None and proc.poll() is not None:
                raise RealNodeError(f"{name} exited with {proc.returncode}; last log lines:\n{self._tail(name)}")
            if ready():
                return
            time.sleep(0.5)
        raise RealNodeError(f"timed out after {timeout:.0f}s waiting for {what or name}:\n{self._tail(name)}")

    def _tail(self, name: str, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path(name).read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    def _ctr(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.binaries / "ctr"), f"--address={self.containerd_socket}", "--namespace=k8s.io", *args],
            capture_output=True,
            text=True,
            timeout=180,  # (an image import of ~100 MB on 2 busy cores)
            check=False,
        )

    def _own_processes(self) -> Iterator[tuple[int, str]]:
        """Processes of this node that are not tracked by PID: containerd's shims (they run our shim
        binary with our containerd's address) and containers (in the /kubepods or /k8s.io cgroups)."""
        me = os.getpid()
        address = str(self.containerd_socket)
        for pid in _pids():
            if pid == me or pid in self.pids.values():
                continue
            cmdline = _cmdline(pid)
            if _exe_under(pid, self.binaries) and address in " ".join(cmdline):
                yield pid, " ".join(cmdline)[:120]
        for pid in _cgroup_pids():
            yield pid, " ".join(_cmdline(pid))[:120]

    def _kill_containers(self) -> None:
        if "containerd" in self.pids and _alive(self.pids["containerd"]):
            listed = self._ctr("tasks", "ls", "-q")
            for task in listed.stdout.split():
                self._ctr("tasks", "kill", "--signal", "SIGKILL", task)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            pids = list(_cgroup_pids())
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)

    def _kill_shims(self) -> None:
        for pid, _ in list(self._own_processes()):
            _term_then_kill(pid, 5)

    def _unmount(self) -> None:
        # kubelet bind-mounts its root dir onto itself (rshared) and leaves tmpfs of projected volumes;
        # containerd leaves overlay rootfs and /dev/shm mounts of sandboxes.
        for _ in range(3):
            mounts = _mounts_under((self.run_dir, Path("/var/lib/kubelet")))
            if not mounts:
                return
            for m in sorted(mounts, key=lambda p: (len(Path(p).parts), p), reverse=True):
                if subprocess.run(["umount", m], capture_output=True, check=False).returncode != 0:
                    subprocess.run(["umount", "-l", m], capture_output=True, check=False)
        left = _mounts_under((self.run_dir,))
        if left:
            raise RealNodeError(f"mounts left: {left}")

    # ---- internals: the API ------------------------------------------------------------------
    def _api(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any] | None]:
        cp = self.control_plane
        if "api" not in cp.ports or not cp.pki.ca_crt.exists():
            return 0, None  # (an orphan's control plane is gone)
        ctx = ssl.create_default_context(cafile=str(cp.pki.ca_crt))
        ctx.load_cert_chain(str(cp.pki.client_crt("admin")), str(cp.pki.client_key("admin")))
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(cp.api_url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
                raw = resp.read()
                return resp.status, (json.loads(raw) if raw.startswith(b"{") else None)
        except urllib.error.HTTPError as e:
            return e.code, None
        except (urllib.error.URLError, ConnectionError, TimeoutError, ssl.SSLError):
            return 0, None

    def _node_ready(self) -> bool:
        status, node = self._api("GET", f"/api/v1/nodes/{self.name}")
        if status != 200 or node is None:
            return False
        conds = node.get("status", {}).get("conditions", [])
        return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)

    def _slice_selector(self) -> str:
        return urllib.parse.quote(f"spec.nodeName={self.name},spec.driver={self.options.driver}")

    def _slice_published(self) -> bool:
        path = f"/apis/resource.k8s.io/v1/resourceslices?fieldSelector={self._slice_selector()}"
        status, lst = self._api("GET", path)
        if status != 200 or lst is None:
            return False
        devices = [d for s in lst.get("items", []) for d in s.get("spec", {}).get("devices", [])]
        return len(devices) == self.options.devices

    def _create_device_class(self) -> None:
        name = self.options.device_class
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": name, "labels": {NODE_LABEL: "true"}},
            "spec": {
                "selectors": [{"cel": {"expression": f'device.driver == "{self.options.driver}"'}}],
                "extendedResourceName": self.options.extended_resource,
            },
        }
        status, _ = self._api("POST", "/apis/resource.k8s.io/v1/deviceclasses", body)
        if status not in (201, 409):
            raise RealNodeError(f"creating DeviceClass {name} failed: HTTP {status}")
        self.created_class = status == 201

    def _delete_device_class(self) -> None:
        self._api("DELETE", f"/apis/resource.k8s.io/v1/deviceclasses/{self.options.device_class}")

    def _pods_on_node(self) -> list[tuple[str, str]]:
        sel = urllib.parse.quote(f"spec.nodeName={self.name}")
        status, lst = self._api("GET", f"/api/v1/pods?fieldSelector={sel}")
        if status != 200 or lst is None:
            return []
        return [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in lst.get("items", [])]

    def _delete_pods(self, grace: float) -> None:
        """Delete the node's pods while kubelet runs (it stops their containers and unprepares their
        claims), wait up to ``grace`` seconds, then force the rest out of the API."""
        pods = self._pods_on_node()
        for ns, name in pods:
            self._api("DELETE", f"/api/v1/namespaces/{ns}/pods/{name}", {"gracePeriodSeconds": 2})
        deadline = time.monotonic() + grace
        while pods and time.monotonic() < deadline:
            time.sleep(0.5)
            pods = self._pods_on_node()
        for ns, name in pods:
            self._api("DELETE", f"/api/v1/namespaces/{ns}/pods/{name}", {"gracePeriodSeconds": 0})

    def _delete_node_objects(self) -> None:
        self._api("DELETE", f"/apis/resource.k8s.io/v1/resourceslices?fieldSelector={self._slice_selector()}")
        self._api("DELETE", f"/api/v1/nodes/{self.name}")
        status, _ = self._api("GET", f"/api/v1/nodes/{self.name}")
        if status not in (404, 0):
            raise RealNodeError(f"node {self.name} still in the API (HTTP {status})")

    # ---- internals: configuration ------------------------------------------------------------
    def _write_containerd_config(self) -> None:
        d = self.containerd_dir
        cni_dir = self.run_dir / "cni"
        (cni_dir / "10-loopback.conflist").write_text(
            json.dumps({"cniVersion": "1.0.0", "name": "loopback-only", "plugins": [{"type": "loopback"}]})
        )
        q = json.dumps  # TOML basic strings are JSON strings for our paths
        (d / "config.toml").write_text(
            f"""version = 3
root = {q(str(d / "root"))}
state = {q(str(d / "state"))}
disabled_plugins = ["io.containerd.nri.v1.nri"]

[grpc]
  address = {q(str(self.containerd_socket))}

[ttrpc]
  address = {q(str(d / "containerd.sock.ttrpc"))}

[debug]
  level = "info"

[plugins."io.containerd.internal.v1.opt"]
  path = {q(str(d / "opt"))}

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = {q(PAUSE_IMAGE)}

[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  cdi_spec_dirs = [{q(str(self.cdi_dir))}]
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = {q(RUNC)}
        Root = {q(str(d / "runc"))}
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = [{q(CNI_BIN_DIR)}]
    conf_dir = {q(str(cni_dir))}
    max_conf_num = 1

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = {q(LOOPBACK)}
  stream_server_port = "0"
"""
        )

    def _kubelet_config(self) -> dict[str, Any]:
        cp = self.control_plane
        certs = self.run_dir / "kubelet-pki"
        sock = f"unix://{self.containerd_socket}"
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": LOOPBACK,
            "port": self.ports["kubelet"],
            "readOnlyPort": 0,
            "healthzBindAddress": LOOPBACK,
            "healthzPort": self.ports["kubelet_healthz"],
            "tlsCertFile": str(certs / "kubelet.crt"),
            "tlsPrivateKeyFile": str(certs / "kubelet.key"),
            # A test node only: anyone reaching 127.0.0.1:<port> may use it.
            "authentication": {
                "anonymous": {"enabled": True},
                "webhook": {"enabled": False},
                "x509": {"clientCAFile": str(cp.pki.ca_crt)},
            },
            "authorization": {"mode": "AlwaysAllow"},
            "cgroupDriver": "cgroupfs",
            "failCgroupV1": False,
            "failSwapOn": False,
            "containerRuntimeEndpoint": sock,
            "imageServiceEndpoint": sock,
            "podLogsDir": str(self.run_dir / "pods"),
            "volumePluginDir": str(self.kubelet_root / "volume-plugins"),
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "1%",
                "nodefs.inodesFree": "1%",
                "imagefs.available": "1%",
                "imagefs.inodesFree": "1%",
            },
            "nodeStatusUpdateFrequency": "5s",
            "nodeStatusReportFrequency": "10s",
            "syncFrequency": "10s",
            "registerWithTaints": [{"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"}],
            "serializeImagePulls": False,
            "maxPods": 32,
            "shutdownGracePeriod": "0s",
        }

    def _write_kubelet_config(self) -> None:
        certs = self.run_dir / "kubelet-pki"
        certs.mkdir(parents=True, exist_ok=True, mode=0o700)
        issue_serving_cert(self.control_plane.pki, certs, "kubelet", cn=self.name, hosts=(self.name, LOOPBACK))
        (self.run_dir / "kubelet.yaml").write_text(json.dumps(self._kubelet_config(), indent=2))

    def _kubelet_argv(self) -> list[str]:
        return [
            str(self.binaries / "kubelet"),
            f"--config={self.run_dir / 'kubelet.yaml'}",
            f"--kubeconfig={self.kubeconfig}",
            f"--root-dir={self.kubelet_root}",
            f"--cert-dir={self.run_dir / 'kubelet-pki'}",
            f"--hostname-override={self.name}",
            f"--node-labels={NODE_LABEL}=true",
            f"--v={self.options.kubelet_verbosity}",
        ]

    def _draplugin_argv(self) -> list[str]:
        return [
            str(self.binaries / "draxr-draplugin"),
            f"--driver={self.options.driver}",
            f"--node-name={self.name}",
            f"--devices={self.options.devices}",
            f"--kubeconfig={self.kubeconfig}",
            f"--cdi-dir={self.cdi_dir}",
            f"--registrar-dir={self.registrar_dir}",
            f"--plugin-dir={self.plugin_dir}",
        ]

    def _deviceplugin_argv(self) -> list[str]:
        return [
            str(self.binaries / "draxr-deviceplugin"),
            f"--resource={self.options.device_plugin_resource}",
            f"--devices={self.options.device_plugin_devices}",
        ]


# ---- host helpers -------------------------------------------------------------------------------


def _control_plane_of(node_dir: Path) -> ControlPlane:
    """The control plane a node's state names, re-attached; a bare one when it is gone."""
    state = json.loads((node_dir / "state.json").read_text())
    cp_dir = Path(state.get("control_plane_dir", node_dir.parent))
    if (cp_dir / "state.json").exists():
        return ControlPlane.load(cp_dir)
    return ControlPlane(binaries=Path("/nonexistent"), run_dir=cp_dir)


def _alive(pid: int) -> bool:
    state = proc_status(pid).get("State", "")
    return bool(state) and not state.startswith("Z")


def _cmdline(pid: int) -> list[str]:
    try:
        return [a.decode(errors="replace") for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
    except (FileNotFoundError, ProcessLookupError):
        return []


def _exe_under(pid: int, directory: Path) -> bool:
    try:
        return os.readlink(f"/proc/{pid}/exe").startswith(str(directory) + "/")
    except OSError:
        return False


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _term_then_kill(pid: int, grace: float) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not _alive(pid):
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _hierarchies() -> list[Path]:
    """Every cgroup hierarchy mounted under /sys/fs/cgroup (v1 controllers and the unified one), or
    the root itself on a pure v2 host."""
    if (CGROUP_ROOT / "cgroup.procs").exists():
        return [CGROUP_ROOT]
    if not CGROUP_ROOT.is_dir():
        return []
    return sorted(p for p in CGROUP_ROOT.iterdir() if p.is_dir() and (p / "cgroup.procs").exists())


def _cgroup_dirs() -> list[Path]:
    """The node's cgroups (/kubepods and /k8s.io in every hierarchy), deepest first."""
    out: list[Path] = []
    for hierarchy in _hierarchies():
        for tree in CGROUP_TREES:
            top = hierarchy / tree
            if top.is_dir():
                out += [Path(dirpath) for dirpath, _, _ in os.walk(top, topdown=False)]
    return out


def _cgroup_pids() -> Iterator[int]:
    seen: set[int] = set()
    for d in _cgroup_dirs():
        with contextlib.suppress(OSError):
            for line in (d / "cgroup.procs").read_text().split():
                pid = int(line)
                if pid not in seen:
                    seen.add(pid)
                    yield pid


def _cgroups_left() -> list[str]:
    return [str(d) for d in _cgroup_dirs()]


def _remove_cgroups(kill: bool) -> None:
    """rmdir the node's cgroups, deepest first; ``kill``: SIGKILL what runs in them first (only this
    node's containers live there) and retry while they exit."""
    if kill:
        for pid in _cgroup_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    for _ in range(20 if kill else 1):
        busy = False
        for d in _cgroup_dirs():
            try:
                d.rmdir()
            except FileNotFoundError:
                pass
            except OSError as e:
                if e.errno not in (errno.EBUSY, errno.ENOTEMPTY):
                    raise
                busy = True
        if not busy:
            return
        if kill:
            time.sleep(0.2)
    left = _cgroups_left()
    if left:
        raise RealNodeError(f"cgroups left: {left[:5]}")


def _unescape_mountinfo(s: str) -> str:
    out, i = [], 0
    while i < len(s):
        if s[i] == "\\" and i + 3 < len(s) and s[i + 1 : i + 4].isdigit():
            out.append(chr(int(s[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


def _mounts_under(prefixes: tuple[Path, ...]) -> list[str]:
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except FileNotFoundError:
        return []
    out = []
    for line in lines:
        fields = line.split()
        if len(fields) < 5:
            continue
        point = _unescape_mountinfo(fields[4])
        for prefix in prefixes:
            p = str(prefix)
            if point == p or point.startswith(p + "/"):
                out.append(point)
                break
    return sorted(set(out))


def _snapshot(paths: tuple[str, ...]) -> dict[str, list[str] | None]:
    """For each path: None when it does not exist, else its entries (a file: [])."""
    out: dict[str, list[str] | None] = {}
    for path in paths:
        p = Path(path)
        if not p.exists() and not p.is_symlink():
            out[path] = None
        elif p.is_dir() and not p.is_symlink():
            out[path] = sorted(os.listdir(p))
        else:
            out[path] = []
    return out


def _restore(before: dict[str, list[str] | None]) -> None:
    """Remove what appeared since ``_snapshot``: paths that did not exist, new entries of the others.
    Deeper paths come first in ``HOST_PATHS`` so that a created parent goes after its children."""
    for path, entries in before.items():
        p = Path(path)
        if entries is None:
            if p.is_symlink() or p.is_file():
                p.unlink()
            elif p.is_dir():
                shutil.rmtree(p)
        elif p.is_dir() and not p.is_symlink():
            for name in set(os.listdir(p)) - set(entries):
                child = p / name
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                else:
                    child.unlink()
