"""End to end: draxr against kube-scheduler 1.37, side by side on the same fresh control plane.

    nice -n 5 .venv/bin/python bench/e2e.py --nodes 500 --devices 8 --classes 25 --pods 3200

One control plane (etcd, kube-apiserver with an audit log of the two schedulers' requests,
kube-controller-manager, kube-scheduler, kwok) in a temp dir; N kwok nodes with one ResourceSlice of
M fake GPUs each; C DeviceClasses ``gpu-<i>`` with ``extendedResourceName: example.com/gpu-<i>``
(upstream scheduler_perf ExtendedResource_25Classes). ``draxr run`` runs as a subprocess beside it
(ServiceAccount token with cluster-admin, so that the audit log tells its requests apart). Both
schedulers get the same client rate limit (``--qps``/``--burst``). kube-scheduler runs the whole time
(it is part of the control plane); draxr is started for each of its phases and stopped after it, so
that it does not load the machine during kube-scheduler's. Each phase runs once per scheduler on a
fresh namespace, kube-scheduler first:

* burst:  P pods created as fast as the bench client can (or ``--burst-rate`` a second), pod k asks for
          1 ``example.com/gpu-<k mod C>``;
* steady: pods arrive at ``--steady-rate``/s for ``--steady-seconds`` and complete after ``--run-for``
          (kwok, annotation ``draxr.io/run-for``), so devices keep coming back;
* mixed:  pods ask for 1, 2, 4 or 8 devices in turn (``--mixed-fill`` of the devices).

Between phases the pods are deleted and the bench waits until their claims are gone. Per phase and
scheduler: pods/s, latency (bench create request -> the bench's pod watch sees spec.nodeName), API
requests of the scheduler's own user (audit log) and all writes (apiserver_request_total), CPU seconds
and peak RSS of the scheduler process. The JSON goes to bench/results/; bench/plot.py draws it.
``--schedulers draxr`` runs draxr alone (then no kube-scheduler is started); ``--restart-draxr``
restarts it at the end and measures its resync; ``--profile`` records the draxr burst with py-spy.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import aiohttp

from draxr.kube import (
    CLUSTER_ROLE_BINDINGS,
    NAMESPACES,
    NODES,
    PODS,
    RESOURCE_CLAIMS,
    SERVICE_ACCOUNTS,
    ApiException,
    Kube,
)
from draxr_dev.devcluster import fakedriver
from draxr_dev.devcluster.binaries import ensure_binaries
from draxr_dev.devcluster.controlplane import LOOPBACK, RUN_FOR_ANNOTATION, ControlPlane, Options, free_port
from draxr_dev.devcluster.process import DraxrProcess

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
CLK_TCK = os.sysconf("SC_CLK_TCK")
DRAXR_NS, DRAXR_SA = "draxr-bench", "draxr"
USERS = {
    "kube-scheduler": "system:kube-scheduler",
    "draxr": f"system:serviceaccount:{DRAXR_NS}:{DRAXR_SA}",
    "ceiling": f"system:serviceaccount:{DRAXR_NS}:{DRAXR_SA}",  # (its phases are its own: windows tell apart)
}
SCHEDULER_NAMES = {"kube-scheduler": "default-scheduler", "draxr": "draxr", "ceiling": "draxr-ceiling"}
NAMESPACE_PREFIX = {"kube-scheduler": "ks", "draxr": "dx", "ceiling": "cl"}
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}
METRIC_WRITE_VERBS = {"POST", "PUT", "PATCH", "DELETE", "APPLY"}

AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived", "ResponseStarted"],
    "rules": [{"level": "Metadata", "users": sorted(USERS.values())}, {"level": "None"}],
}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---- process figures ------------------------------------------------------------------------------


def proc_figures(pid: int | None) -> dict[str, float]:
    """CPU seconds (utime + stime), VmRSS and VmHWM (MiB) of a process; empty when it is gone."""
    if pid is None:
        return {}
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return {}
    fields = stat.rsplit(")", 1)[1].split()
    out = {"cpu_s": (int(fields[11]) + int(fields[12])) / CLK_TCK}
    for line in status.splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[{"VmRSS": "rss_mib", "VmHWM": "peak_rss_mib"}[key]] = int(value.split()[0]) / 1024
    return out


# ---- raw HTTP for the hot paths (pod creation, the pod watch, /metrics) --------------------------------


class Http:
    def __init__(self, cp: ControlPlane) -> None:
        ctx = ssl.create_default_context(cafile=str(cp.pki.ca_crt))
        ctx.load_cert_chain(str(cp.pki.client_crt("admin")), str(cp.pki.client_key("admin")))
        self.base = cp.api_url
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=ctx, limit=64),
            headers={"User-Agent": "draxr-bench"},
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
        )

    async def close(self) -> None:
        await self.session.close()

    async def create_pod(self, ns: str, body: dict[str, Any]) -> None:
        for attempt in range(20):
            async with self.session.post(f"{self.base}/api/v1/namespaces/{ns}/pods", json=body) as resp:
                if resp.status in (200, 201):
                    await resp.read()
                    return
                text = await resp.text()
                if resp.status == 409:
                    return
                if resp.status in (429, 500, 503, 504) or "serviceaccount" in text.lower():
                    await asyncio.sleep(0.2 * (attempt + 1))
                    continue
                raise RuntimeError(f"creating pod {body['metadata']['name']}: {resp.status} {text[:300]}")
        raise RuntimeError(f"creating pod {body['metadata']['name']}: gave up")

    async def write_counts(self) -> dict[str, int]:
        """apiserver_request_total summed by verb and resource[/subresource], writes only (all clients)."""
        async with self.session.get(f"{self.base}/metrics") as resp:
            text = await resp.text()
        out: Counter[str] = Counter()
        for line in text.splitlines():
            if not line.startswith("apiserver_request_total{"):
                continue
            labels_text, _, value = line[len("apiserver_request_total{") :].rpartition("} ")
            labels = dict(part.split("=", 1) for part in _split_labels(labels_text))
            verb = labels.get("verb", "").strip('"')
            if verb not in METRIC_WRITE_VERBS:
                continue
            res = labels.get("resource", "").strip('"')
            sub = labels.get("subresource", "").strip('"')
            out[f"{verb} {res}{'/' + sub if sub else ''}"] += int(float(value))
        return dict(out)

    async def watch_pods(
        self,
        ns: str,
        on_event: Callable[[float, dict[str, Any]], None],
        on_deleted: Callable[[float, dict[str, Any]], None] | None = None,
    ) -> None:
        """Streams the namespace's pod events until cancelled; reconnects from the last resourceVersion.
        ``on_event`` gets ADDED and MODIFIED, ``on_deleted`` (when given) DELETED."""
        rv = ""
        while True:
            params = {"watch": "1", "allowWatchBookmarks": "true", "timeoutSeconds": "1800"}
            if rv:
                params["resourceVersion"] = rv
            try:
                async with self.session.get(f"{self.base}/api/v1/namespaces/{ns}/pods", params=params) as resp:
                    if resp.status == 410:
                        rv = ""
                        continue
                    resp.raise_for_status()
                    async for line in resp.content:
                        now = time.time()
                        event = json.loads(line)
                        obj = event.get("object") or {}
                        rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
                        if event.get("type") == "ERROR":
                            rv = ""
                            break
                        if event.get("type") in ("ADDED", "MODIFIED"):
                            on_event(now, obj)
                        elif event.get("type") == "DELETED" and on_deleted is not None:
                            on_deleted(now, obj)
            except (TimeoutError, aiohttp.ClientError) as e:
                log(f"pod watch of {ns} interrupted ({e!r}); reconnecting")
                await asyncio.sleep(0.5)


def _split_labels(text: str) -> list[str]:
    parts, cur, quoted = [], "", False
    for ch in text:
        if ch == '"':
            quoted = not quoted
        if ch == "," and not quoted:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        parts.append(cur)
    return [p for p in parts if "=" in p]


# ---- cluster set-up -------------------------------------------------------------------------------------


async def gather_bounded(coros: list[Awaitable[Any]], limit: int = 32) -> None:
    sem = asyncio.Semaphore(limit)

    async def one(c: Awaitable[Any]) -> None:
        async with sem:
            await c

    await asyncio.gather(*(one(c) for c in coros))


async def create_fleet(kube: Kube, nodes: int, devices: int, classes: int, ready_timeout: float = 300) -> None:
    fleet = fakedriver.Fleet(
        prefix="bench",
        dra_nodes=nodes,
        devices_per_node=devices,
        classes={f"gpu-{i}": f"example.com/gpu-{i}" for i in range(classes)},
    )
    await apply_fleet(kube, fleet.manifests(), nodes, ready_timeout)


async def apply_fleet(kube: Kube, objs: list[dict[str, Any]], nodes: int, ready_timeout: float = 300) -> None:
    """Create a fleet's objects (fakedriver manifests, perhaps edited) and wait for its ``nodes`` kwok
    nodes to be Ready."""
    t0 = time.monotonic()
    await gather_bounded([fakedriver.apply(kube, [o]) for o in objs])
    log(f"created {fakedriver.summary(objs)} in {time.monotonic() - t0:.1f}s")
    deadline = time.monotonic() + ready_timeout
    while True:
        # From the API server's cache, every few seconds: listing thousands of nodes every second
        # took the CPU kwok needs to renew their Leases (nodes went NotReady faster than Ready).
        listed = await kube.request("GET", NODES.path(), query={"labelSelector": "type=kwok", "resourceVersion": "0"})
        ready = sum(1 for n in listed.get("items") or () if fakedriver._ready(n))
        if ready >= nodes:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {ready}/{nodes} nodes Ready after {ready_timeout:.0f}s")
        await asyncio.sleep(5 if nodes > 1000 else 1)
    log(f"{nodes} nodes Ready after {time.monotonic() - t0:.1f}s")


async def draxr_kubeconfig(kube: Kube, cp: ControlPlane) -> Path:
    """A ServiceAccount with cluster-admin: draxr's requests carry their own user in the audit log."""
    await kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": DRAXR_NS}})
    sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": DRAXR_SA}}
    await kube.create(SERVICE_ACCOUNTS, sa, DRAXR_NS)
    crb = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "draxr-bench"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": DRAXR_SA, "namespace": DRAXR_NS}],
    }
    await kube.create(CLUSTER_ROLE_BINDINGS, crb)
    req = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 86400}}
    token = (await kube.create(SERVICE_ACCOUNTS, req, DRAXR_NS, name=DRAXR_SA, subresource="token"))["status"]["token"]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": cp.api_url, "certificate-authority": str(cp.pki.ca_crt)}}],
        "users": [{"name": "draxr", "user": {"token": token}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "draxr"}}],
        "current-context": "c",
    }
    path = cp.run_dir / "draxr.kubeconfig"
    path.write_text(json.dumps(config))
    path.chmod(0o600)
    return path


# ---- draxr subprocess ---------------------------------------------------------------------------------------


class Draxr:
    def __init__(
        self, kubeconfig: Path, run_dir: Path, qps: float, burst: int, extra: list[str], pythonpath: str = ""
    ) -> None:
        self.kubeconfig, self.run_dir, self.qps, self.burst, self.extra = kubeconfig, run_dir, qps, burst, extra
        self.pythonpath = pythonpath  # another draxr's code (e.g. main's operator/), for before/after runs
        self.proc: DraxrProcess | None = None
        self.metrics_port = 0
        self.starts = 0

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    @property
    def log_path(self) -> Path:
        return self.run_dir / f"draxr-{self.starts}.log"

    def args(self) -> list[str]:
        self.metrics_port = free_port()
        return [
            "--scheduler-name", "draxr",
            "--leader-elect", "false",
            "--kubeconfig", str(self.kubeconfig),
            "--bind-address", LOOPBACK,
            "--metrics-port", str(self.metrics_port),
            "--health-port", str(free_port()),
            "--client-qps", str(self.qps),
            "--client-burst", str(self.burst),
            *self.extra,
        ]  # fmt: skip

    async def start(self, timeout: float = 900, spawned: Callable[[int], None] | None = None) -> dict[str, float]:
        """Start and wait for the initial sync and leadership; returns the start-up timings.
        ``spawned``: called with the new process's pid at once (a profiler)."""
        self.starts += 1
        t0 = time.monotonic()
        env = {**os.environ, "PYTHONPATH": self.pythonpath} if self.pythonpath else None
        self.proc = DraxrProcess(self.args(), log=self.log_path, environ=env)
        if spawned is not None and self.pid is not None:
            spawned(self.pid)
        timings: dict[str, float] = {}
        while time.monotonic() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"draxr exited with {self.proc.proc.returncode}; see {self.log_path}")
            text = self.proc.text()
            if "initial sync done" in text and "synced_s" not in timings:
                timings["synced_s"] = time.monotonic() - t0
            if "leading: scheduling" in text:
                timings["leading_s"] = time.monotonic() - t0
                return timings
            await asyncio.sleep(0.1)
        raise TimeoutError(f"draxr not leading after {timeout:.0f}s")

    def stop(self, grace: float = 20) -> None:
        if self.proc is not None:
            self.proc.stop(grace)


class CeilingProcess:
    """bench/api_ceiling.py for one phase: the writes of a scheduler without its decisions."""

    def __init__(self, kubeconfig: Path, run_dir: Path, qps: float, burst: int, concurrency: int, phase: str) -> None:
        self.concurrency = concurrency
        self.log_path = run_dir / f"ceiling-{phase}-{concurrency}.log"
        argv = [
            sys.executable, str(REPO / "bench" / "api_ceiling.py"),
            "--kubeconfig", str(kubeconfig),
            "--scheduler-name", SCHEDULER_NAMES["ceiling"],
            "--concurrency", str(concurrency),
            "--qps", str(qps),
            "--burst", str(burst),
        ]  # fmt: skip
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, env=os.environ.copy())

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc.poll() is None else None

    async def started(self, timeout: float = 120) -> None:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"api_ceiling.py exited with {self.proc.returncode}; see {self.log_path}")
            if "ceiling ready" in self.log_path.read_text(errors="replace"):
                return
            await asyncio.sleep(0.1)
        raise TimeoutError(f"api_ceiling.py not ready after {timeout:.0f}s")

    def stop(self, grace: float = 20) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def best_ceiling_concurrency(phases: list[JSONish], tried: list[int]) -> int:
    """The concurrency at which the ceiling bound the most pods/s in the burst (the largest tried
    when it did not run there)."""
    burst = [p for p in phases if p["phase"] == "burst" and p["scheduler"] == "ceiling"]
    return max(burst, key=lambda p: p["pods_per_s"])["concurrency"] if burst else max(tried)


def ceiling_fractions(phases: list[JSONish]) -> JSONish:
    """Per phase the ceiling ran in: its best pods/s over the concurrencies tried, and each
    scheduler's pods/s as a fraction of it."""
    out: JSONish = {}
    for phase in dict.fromkeys(p["phase"] for p in phases):
        tried = [p for p in phases if p["phase"] == phase and p["scheduler"] == "ceiling"]
        if not tried:
            continue
        best = max(tried, key=lambda p: p["pods_per_s"])
        entry: JSONish = {
            "pods_per_s": best["pods_per_s"],
            "concurrency": best["concurrency"],
            "tried": {str(p["concurrency"]): p["pods_per_s"] for p in tried},
            "cpu_s": best["process"].get("ceiling", {}).get("cpu_s"),
            "duration_s": best["duration_s"],
        }
        for p in phases:
            if p["phase"] == phase and p["scheduler"] != "ceiling" and best["pods_per_s"]:
                entry[f"{p['scheduler']}_fraction"] = round(p["pods_per_s"] / best["pods_per_s"], 3)
                if (p99 := p["latency_s"]["p99"]) and (floor := best["latency_s"]["p99"]):
                    entry[f"{p['scheduler']}_p99_over_ceiling"] = round(p99 / floor, 3)
        out[phase] = entry
    return out


# ---- workload ---------------------------------------------------------------------------------------------------


def pod_body(name: str, scheduler: str, resource: str, count: int, run_for: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if run_for:
        meta["annotations"] = {RUN_FOR_ANNOTATION: run_for}
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 0,
        "containers": [
            {"name": "c", "image": "registry.invalid/bench:1", "resources": {"limits": {resource: str(count)}}}
        ],
    }
    if scheduler != "default-scheduler":
        spec["schedulerName"] = scheduler
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def percentile(sorted_values: list[float], q: float) -> float | None:
    if not sorted_values:
        return None
    idx = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[idx]


class Phase:
    """One workload through one scheduler in its own namespace."""

    def __init__(self, http: Http, kube: Kube, ns: str) -> None:
        self.http, self.kube, self.ns = http, kube, ns
        self.sent: dict[str, float] = {}
        self.bound: dict[str, float] = {}
        self.nodes: dict[str, str] = {}

    def on_event(self, now: float, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        node = (pod.get("spec") or {}).get("nodeName")
        if node and name not in self.bound:
            self.bound[name] = now
            self.nodes[name] = node

    async def create_namespace(self) -> None:
        await self.kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.ns}})
        for _ in range(200):  # pods need the default ServiceAccount (admission)
            with contextlib.suppress(ApiException):
                await self.kube.get(SERVICE_ACCOUNTS, "default", self.ns)
                return
            await asyncio.sleep(0.1)

    async def create(self, body: dict[str, Any]) -> None:
        self.sent[body["metadata"]["name"]] = time.time()
        await self.http.create_pod(self.ns, body)

    async def run(self, bodies: list[dict[str, Any]], rate: float | None, stall: float, timeout: float) -> None:
        """Create the pods (all at once, or ``rate`` per second) and wait until every pod is bound, no
        pod got bound for ``stall`` seconds after the last creation, or ``timeout``."""
        watch = asyncio.create_task(self.http.watch_pods(self.ns, self.on_event))
        try:
            await asyncio.sleep(0.5)  # the watch is established
            t0 = time.monotonic()
            if rate is None:
                await gather_bounded([self.create(b) for b in bodies], limit=32)
            else:
                tasks = []
                for k, body in enumerate(bodies):
                    delay = t0 + k / rate - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    tasks.append(asyncio.create_task(self.create(body)))
                await asyncio.gather(*tasks)
            created_at = time.monotonic()
            last_progress, seen = time.monotonic(), len(self.bound)
            while len(self.bound) < len(bodies):
                now = time.monotonic()
                if len(self.bound) != seen:
                    last_progress, seen = now, len(self.bound)
                if now - max(last_progress, created_at) > stall or now - t0 > timeout:
                    log(f"  {self.ns}: stopped waiting with {len(self.bound)}/{len(bodies)} pods bound")
                    break
                await asyncio.sleep(0.2)
        finally:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch

    def figures(self) -> dict[str, Any]:
        lat = sorted(self.bound[n] - self.sent[n] for n in self.bound if n in self.sent)
        start = min(self.sent.values()) if self.sent else 0.0
        end = max(self.bound.values()) if self.bound else start
        bound_times = sorted(t - start for t in self.bound.values())
        per_second: Counter[int] = Counter(int(t) for t in bound_times)
        span = max(end - start, 1e-9)
        return {
            "pods": len(self.sent),
            "bound": len(self.bound),
            "nodes_used": len(set(self.nodes.values())),
            "duration_s": round(span, 3),
            "pods_per_s": round(len(self.bound) / span, 2) if self.bound else 0.0,
            "latency_s": {
                f"p{int(q * 100)}": round(v, 4) if (v := percentile(lat, q)) is not None else None
                for q in (0.5, 0.9, 0.99)
            }
            | {"max": round(lat[-1], 4) if lat else None, "mean": round(sum(lat) / len(lat), 4) if lat else None},
            "bound_per_second": [per_second.get(i, 0) for i in range(int(span) + 1)],
            "latencies_s": [round(v, 4) for v in lat],
            "window": [start, end],
        }

    async def cleanup(self, timeout: float = 600) -> tuple[float, bool]:
        """Delete the pods, wait until they and their claims are gone, delete the namespace: the
        seconds it took, and whether they were gone (a phase after an incomplete clean-up would find
        devices held). The API server may drop a connection or time out while it deletes thousands
        of pods: every request is retried until the deadline.

        The pods this phase created are deleted one by one, 32 at a time, first: a collection delete
        goes through kube-apiserver's single delete-collection worker, and with 40,000 pods it
        managed ~11 pods/s and timed out on every attempt (2026-12-03). Collection deletes then
        take what is left (pods of another creator, a delete that failed)."""
        t0 = time.monotonic()
        deadline = t0 + timeout
        path = PODS.path(self.ns)
        delete = {"gracePeriodSeconds": 0}
        complete = True

        async def delete_one(name: str) -> None:
            with contextlib.suppress(ApiException, aiohttp.ClientError, TimeoutError):  # (mopped up below)
                await asyncio.wait_for(self.kube.request("DELETE", f"{path}/{name}", query=delete), timeout=60)

        await gather_bounded([delete_one(name) for name in self.sent], limit=32)
        await tolerant(f"{self.ns}: delete pods", lambda: self.kube.request("DELETE", path, query=delete), deadline)
        while time.monotonic() < deadline:
            pods = await tolerant(
                f"{self.ns}: list pods", lambda: self.kube.request("GET", path, query={"limit": 1}), deadline
            )
            claims = await tolerant(
                f"{self.ns}: list claims",
                lambda: self.kube.request("GET", RESOURCE_CLAIMS.path(self.ns), query={"limit": 1}),
                deadline,
            )
            if pods is not None and claims is not None and not pods.get("items") and not claims.get("items"):
                break
            if pods is None or pods.get("items"):
                await tolerant(
                    f"{self.ns}: delete pods", lambda: self.kube.request("DELETE", path, query=delete), deadline
                )
            await asyncio.sleep(1)
        else:
            log(f"  {self.ns}: pods or claims still present after {timeout:.0f}s")
            complete = False
        await tolerant(
            f"{self.ns}: delete namespace",
            lambda: self.kube.delete_if_exists(NAMESPACES, self.ns),
            time.monotonic() + 120,
        )
        return time.monotonic() - t0, complete


def cleanup_timeout(args: argparse.Namespace, work: Sequence[object]) -> float:
    """--cleanup-timeout, or by default 600 s and 50 ms per pod above that (40,000 pods: 2,000 s)."""
    return float(args.cleanup_timeout) if args.cleanup_timeout else max(600.0, 0.05 * len(work))


T = TypeVar("T")
# Transient failures of a busy API server: a dropped connection, a client or server timeout, overload.
RETRIED_STATUS = {429, 500, 502, 503, 504}


async def tolerant(what: str, call: Callable[[], Awaitable[T]], deadline: float, pause: float = 2.0) -> T | None:
    """``call()``, retried on transient failures until ``deadline`` (at least once); None if it never
    succeeded. Other API errors are raised."""
    attempt = 0
    while True:
        attempt += 1
        try:
            return await asyncio.wait_for(call(), timeout=max(5.0, min(120.0, deadline - time.monotonic())))
        except ApiException as e:
            if e.status not in RETRIED_STATUS:
                raise
            error = f"{e.status} {e.reason}"
        except (aiohttp.ClientError, TimeoutError) as e:
            error = repr(e)
        if time.monotonic() + pause > deadline:
            log(f"  {what}: gave up after {attempt} attempts ({error})")
            return None
        log(f"  {what}: {error}; retrying")
        await asyncio.sleep(pause)


# ---- audit log ----------------------------------------------------------------------------------------------------


def parse_audit(run_dir: Path) -> list[tuple[float, str, str, str]]:
    """(time, user, verb, resource[/subresource]) of every logged request (the two schedulers only)."""
    out = []
    for path in sorted(run_dir.glob("audit*.log")):
        with path.open() as f:
            for line in f:
                try:
                    ev = json.loads(line)
                except ValueError:
                    continue
                if ev.get("stage") != "ResponseComplete":
                    continue
                ref = ev.get("objectRef") or {}
                res = ref.get("resource", "") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
                ts = datetime.fromisoformat(ev["requestReceivedTimestamp"]).timestamp()
                out.append((ts, ev["user"]["username"], ev["verb"], res or ev.get("requestURI", "")))
    return out


def audit_figures(events: list[tuple[float, str, str, str]], user: str, window: list[float], pods: int) -> JSONish:
    start, end = window
    writes: Counter[str] = Counter()
    reads = 0
    for ts, u, verb, res in events:
        if u != user or not start <= ts <= end:
            continue
        if verb in WRITE_VERBS:
            writes[f"{verb} {res}"] += 1
        else:
            reads += 1
    total = sum(writes.values())
    return {
        "writes": total,
        "writes_per_pod": round(total / pods, 2) if pods else None,
        "reads": reads,
        "by_request": dict(writes.most_common()),
    }


JSONish = dict[str, Any]


# ---- main ------------------------------------------------------------------------------------------------------------


async def bench(args: argparse.Namespace, cp: ControlPlane, draxr_holder: list[Draxr]) -> JSONish:
    result: JSONish = {
        "config": {k: v for k, v in vars(args).items() if k not in ("out",)},
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "phases": [],
    }
    kube = await Kube.from_kubeconfig(cp.kubeconfig)
    http = Http(cp)
    try:
        await create_fleet(kube, args.nodes, args.devices, args.classes, args.nodes_ready_timeout)
        kubeconfig = await draxr_kubeconfig(kube, cp)
        draxr = Draxr(kubeconfig, cp.run_dir, args.qps, args.burst, args.draxr_args.split(), args.draxr_pythonpath)
        draxr_holder.append(draxr)
        devices = args.nodes * args.devices
        pods = args.pods or int(devices * args.fill)
        if pods > devices:
            raise SystemExit(f"--pods {pods} exceeds the {devices} devices")
        phases: list[tuple[str, list[tuple[str, int]], float | None, str | None]] = []
        one = [(f"example.com/gpu-{k % args.classes}", 1) for k in range(pods)]
        phases.append(("burst", one, args.burst_rate or None, None))
        if args.steady_seconds > 0:
            n = int(args.steady_rate * args.steady_seconds)
            steady = [(f"example.com/gpu-{k % args.classes}", 1) for k in range(n)]
            phases.append(("steady", steady, args.steady_rate, args.run_for))
        if args.mixed_fill > 0:
            sizes = [1, 2, 4, 8]
            mixed, used, k = [], 0, 0
            while used + sizes[k % 4] <= devices * args.mixed_fill:
                mixed.append((f"example.com/gpu-{k % args.classes}", sizes[k % 4]))
                used += sizes[k % 4]
                k += 1
            phases.append(("mixed", mixed, None, None))
        # The ceiling runs once per concurrency tried in the burst (its best is the ceiling), then in
        # the other phases of --ceiling-phases at the burst's best concurrency.
        runs = [
            (sched, c) for sched in args.schedulers for c in (args.ceiling_concurrency if sched == "ceiling" else [0])
        ]
        for phase_name, work, rate, run_for in phases:
            for sched, concurrency in runs:
                if sched == "ceiling" and phase_name not in args.ceiling_phases:
                    continue
                if sched == "ceiling" and phase_name != "burst":
                    if concurrency != args.ceiling_concurrency[0]:
                        continue  # one run in this phase, at the burst's best
                    concurrency = best_ceiling_concurrency(result["phases"], args.ceiling_concurrency)
                ns = f"{NAMESPACE_PREFIX[sched]}-{phase_name}" + (f"-{concurrency}" if concurrency else "")
                if sched == "draxr":  # draxr runs for its own phases only: it does not load the other's
                    timings = await draxr.start()
                    log(f"draxr started: {timings}")
                    result.setdefault("draxr_start", []).append(timings | proc_figures(draxr.pid))
                ceiling = None
                if sched == "ceiling":
                    ceiling = CeilingProcess(
                        draxr.kubeconfig, cp.run_dir, args.qps, args.burst, concurrency, phase_name
                    )
                    await ceiling.started()
                pids = {
                    "kube-scheduler": cp.pids.get("kube-scheduler"),
                    "draxr": draxr.pid,
                    "ceiling": ceiling.pid if ceiling else None,
                }
                bodies = [
                    pod_body(f"p-{k}", SCHEDULER_NAMES[sched], res, cnt, run_for) for k, (res, cnt) in enumerate(work)
                ]
                phase = Phase(http, kube, ns)
                await phase.create_namespace()
                before = {s: proc_figures(pid) for s, pid in pids.items()}
                writes_before = await http.write_counts()
                profiler = None
                if args.profile and sched == "draxr" and phase_name == "burst" and draxr.pid:
                    profiler = start_profiler(draxr.pid, cp.run_dir / "draxr.pyspy.txt")
                log(f"{phase_name} via {sched}: {len(bodies)} pods" + (f" at {rate}/s" if rate else ""))
                try:
                    await phase.run(bodies, rate, stall=args.stall, timeout=args.phase_timeout)
                finally:
                    if profiler is not None:
                        result["profile"] = stop_profiler(profiler, cp.run_dir / "draxr.pyspy.txt", args.out_profile)
                after = {s: proc_figures(pid) for s, pid in pids.items()}
                writes_after = await http.write_counts()
                fig = phase.figures()
                all_writes = {
                    k: writes_after.get(k, 0) - writes_before.get(k, 0)
                    for k in writes_after
                    if writes_after.get(k, 0) != writes_before.get(k, 0)
                }
                fig |= {
                    "phase": phase_name,
                    "scheduler": sched,
                    "concurrency": concurrency or None,
                    "rate": rate,
                    "run_for": run_for,
                    "all_writes": sum(all_writes.values()),
                    "all_writes_per_pod": round(sum(all_writes.values()) / max(1, fig["bound"]), 2),
                    "all_writes_by_request": dict(sorted(all_writes.items(), key=lambda kv: -kv[1])),
                    "process": {
                        s: {
                            "cpu_s": round(after[s].get("cpu_s", 0) - before[s].get("cpu_s", 0), 2),
                            "rss_mib": round(after[s].get("rss_mib", 0), 1),
                            "peak_rss_mib": round(after[s].get("peak_rss_mib", 0), 1),
                        }
                        for s in pids
                        if after.get(s)
                    },
                }
                log(
                    f"  {fig['bound']}/{fig['pods']} bound in {fig['duration_s']:.1f}s: {fig['pods_per_s']} pods/s, "
                    "latency p50/p90/p99 "
                    f"{fig['latency_s']['p50']}/{fig['latency_s']['p90']}/{fig['latency_s']['p99']}s, "
                    f"CPU {fig['process'].get(sched, {}).get('cpu_s')}s"
                )
                if args.restart_draxr and sched == "draxr" and phase_name == "burst":
                    others = {name: pid for name, pid in cp.pids.items() if pid}
                    result["restart"] = await restart(args, draxr, fig, others)
                last = phase_name == phases[-1][0] and (sched, concurrency) == runs[-1]
                cleanup_s, clean = (
                    (0.0, True)
                    if (last and args.skip_final_cleanup)
                    else await phase.cleanup(cleanup_timeout(args, work))
                )
                if ceiling is not None:
                    ceiling.stop()
                fig["cleanup_s"] = round(cleanup_s, 1)
                # The scheduler's requests are counted from the first pod created to the end of the
                # clean-up: they include releasing the claims of completed and deleted pods.
                fig["audit_window"] = [fig["window"][0], time.time()]
                log(f"  cleaned up in {cleanup_s:.1f}s")
                if sched == "draxr":  # the clean-up counts too; after --restart-draxr the higher of both processes
                    peak = proc_figures(draxr.pid).get("peak_rss_mib", 0)
                    restarted = args.restart_draxr and phase_name == "burst"
                    before = result.get("restart", {}).get("before_restart", {}) if restarted else {}
                    peak = max(peak, before.get("peak_rss_mib", 0), fig["process"]["draxr"]["peak_rss_mib"])
                    fig["process"]["draxr"]["peak_rss_mib"] = round(peak, 1)
                    draxr.stop()
                result["phases"].append(fig)
                if not clean:  # the next phase would find devices held: its figures would be wrong
                    result["aborted"] = f"{ns}: pods or claims left after the clean-up ({cleanup_s:.0f}s)"
                    log(f"stopping the run: {result['aborted']}")
                    break
            else:
                continue
            break
        if "ceiling" in args.schedulers:
            result["ceiling"] = ceiling_fractions(result["phases"])
    finally:
        await http.close()
        await kube.close()
    return result


async def restart(args: argparse.Namespace, draxr: Draxr, fig: JSONish, others: Mapping[str, int | None]) -> JSONish:
    """Restart draxr with the burst's pods and claims still in place: time to resync, memory after,
    and the CPU seconds the other processes (``others``: name -> pid) spent from the stop to leading."""
    await asyncio.sleep(5)  # the last claim and pod events reach draxr
    before = proc_figures(draxr.pid)
    others_before = {name: proc_figures(pid).get("cpu_s", 0.0) for name, pid in others.items()}
    draxr.stop()
    profilers: list[subprocess.Popen[bytes]] = []
    raw = draxr.run_dir / "draxr-restart.pyspy.txt"
    spawned = (lambda pid: profilers.append(start_profiler(pid, raw))) if args.profile_restart else None
    timings = await draxr.start(spawned=spawned)
    cpu_to_leading = {
        "draxr": proc_figures(draxr.pid).get("cpu_s", 0.0),
        **{n: round(proc_figures(pid).get("cpu_s", 0.0) - others_before[n], 2) for n, pid in others.items()},
    }
    profile = {}
    if profilers:  # the process start to leading
        keep = f"{args.out_profile}.restart" if args.out_profile else None
        profile = stop_profiler(profilers[0], raw, keep)
    await asyncio.sleep(args.settle)  # memory after the watches have settled
    after = proc_figures(draxr.pid)
    out = {"pods_bound": fig["bound"], "before_restart": before, "restart": timings, "after_restart": after}
    out["cpu_s_to_leading"] = cpu_to_leading
    if profile:
        out["profile"] = profile
    log(f"  restart: {out}")
    return out


def start_profiler(pid: int, out: Path) -> subprocess.Popen[bytes]:
    py_spy = Path(sys.executable).parent / "py-spy"
    return subprocess.Popen(
        [str(py_spy), "record", "--pid", str(pid), "--format", "raw", "--rate", "100", "--nonblocking", "-o", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def stop_profiler(proc: subprocess.Popen[bytes], raw: Path, keep: str | None) -> JSONish:
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if keep and raw.exists():
        shutil.copy(raw, keep)
    return summarize_profile(raw) if raw.exists() else {}


def summarize_profile(raw: Path, top: int = 25) -> JSONish:
    """Self and inclusive sample shares per function from py-spy's collapsed stacks."""
    own: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        n = int(count_text)
        total += n
        frames = [_short(f) for f in stack.split(";")]
        own[frames[-1]] += n
        for f in set(frames):
            incl[f] += n
    if not total:
        return {}
    return {
        "samples": total,
        "self": [(f, round(100 * n / total, 1)) for f, n in own.most_common(top)],
        "inclusive": [(f, round(100 * n / total, 1)) for f, n in incl.most_common(top * 2)],
    }


def _short(frame: str) -> str:
    # "func (path/to/module.py:123)" -> "func (module.py)"
    name, _, where = frame.partition(" (")
    file = where.rsplit(":", 1)[0].rstrip(")")
    parts = Path(file).parts
    short = "/".join(parts[parts.index("draxr") :]) if "draxr" in parts else Path(file).name
    return f"{name} ({short})"


def print_table(result: JSONish) -> str:
    """One markdown table per phase (workload): the ceiling, both schedulers, then the ratios."""
    phases = result["phases"]
    head = (
        "| scheduler | pods bound | pods/s | p50 s | p90 s | p99 s | sched writes/pod | all writes/pod "
        "| sched CPU s | CPU ms/pod | peak RSS MiB |\n|---|---|---|---|---|---|---|---|---|---|---|"
    )
    out: list[str] = []
    for phase in dict.fromkeys(p["phase"] for p in phases):
        rows = [p for p in phases if p["phase"] == phase]
        out += [f"\n{phase}:\n", head]
        for p in rows:
            s = p["scheduler"]
            proc = p["process"].get(s, {})
            cpu = proc.get("cpu_s", 0)
            label = f"{s}@{p['concurrency']}" if p.get("concurrency") else s
            lat = {q: _sig(p["latency_s"][q]) for q in ("p50", "p90", "p99")}
            out.append(
                f"| {label} | {p['bound']}/{p['pods']} | {p['pods_per_s']} | {lat['p50']} "
                f"| {lat['p90']} | {lat['p99']} | {p['audit']['writes_per_pod']} "
                f"| {p['all_writes_per_pod']} | {cpu} | {1000 * cpu / max(1, p['bound']):.1f} "
                f"| {proc.get('peak_rss_mib')} |"
            )
        ceiling = (result.get("ceiling") or {}).get(phase)
        best = next(
            (p for p in rows if p["scheduler"] == "ceiling" and ceiling and p["concurrency"] == ceiling["concurrency"]),
            None,
        )
        by = {p["scheduler"]: p for p in rows if p["scheduler"] != "ceiling"}
        pairs = [("draxr", "kube-scheduler")] + [(s, "ceiling") for s in ("draxr", "kube-scheduler") if best]
        for a_name, b_name in pairs:
            a, b = by.get(a_name), best if b_name == "ceiling" else by.get(b_name)
            if a and b:
                out.append(_ratio_row(a, b, a_name, b_name))
        if ceiling:
            cpu = ceiling.get("cpu_s") or 0
            core = f", its CPU {cpu / max(ceiling['duration_s'], 1e-9):.0%} of a core" if cpu else ""
            out.append(
                f"\nAPI ceiling {ceiling['pods_per_s']} pods/s (concurrency {ceiling['concurrency']} of "
                f"{', '.join(ceiling['tried'])}{core})"
            )
    if result.get("aborted"):
        out.append(f"\nRUN STOPPED EARLY: {result['aborted']}; the phases after it did not run")
    return "\n".join(out)


def _sig(v: float | None) -> str:
    """Three significant digits: latencies span milliseconds to minutes."""
    return "-" if v is None else f"{v:.3g}"


def _ratio_row(a: JSONish, b: JSONish, a_name: str, b_name: str) -> str:
    def ratio(x: float | None, y: float | None) -> str:
        return f"{x / y:.2f}" if x and y else "-"

    ca, cb = a["process"][a_name]["cpu_s"], b["process"][b_name]["cpu_s"]
    ra, rb = a["process"][a_name]["peak_rss_mib"], b["process"][b_name]["peak_rss_mib"]
    return (
        f"| **{a_name} / {b_name}** | | {ratio(a['pods_per_s'], b['pods_per_s'])} "
        f"| {ratio(a['latency_s']['p50'], b['latency_s']['p50'])} "
        f"| {ratio(a['latency_s']['p90'], b['latency_s']['p90'])} "
        f"| {ratio(a['latency_s']['p99'], b['latency_s']['p99'])} "
        f"| {ratio(a['audit']['writes_per_pod'], b['audit']['writes_per_pod'])} "
        f"| {ratio(a['all_writes_per_pod'], b['all_writes_per_pod'])} "
        f"| {ratio(ca, cb)} | {ratio(ca / max(1, a['bound']), cb / max(1, b['bound']))} | {ratio(ra, rb)} |"
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=50)
    p.add_argument("--devices", type=int, default=8)
    p.add_argument("--classes", type=int, default=25)
    p.add_argument("--pods", type=int, default=0, help="burst pods (default: --fill of the devices)")
    p.add_argument("--fill", type=float, default=0.8)
    p.add_argument(
        "--burst-rate", type=float, default=0, help="create the burst pods at this rate (pods/s; 0: all at once)"
    )
    p.add_argument("--qps", type=float, default=500, help="client QPS of both schedulers")
    p.add_argument("--burst", type=int, default=1000, help="client burst of both schedulers")
    p.add_argument("--steady-seconds", type=float, default=60, help="0: no steady-state phase")
    p.add_argument("--steady-rate", type=float, default=40, help="pods/s arriving in the steady phase")
    p.add_argument("--run-for", default="10s", help="how long a steady-state pod runs (kwok completes it)")
    p.add_argument("--mixed-fill", type=float, default=0.6, help="0: no mixed phase")
    p.add_argument(
        "--schedulers",
        default="ceiling,kube-scheduler,draxr",
        type=lambda s: s.split(","),
        help="ceiling: bench/api_ceiling.py, the same writes without decisions",
    )
    p.add_argument(
        "--ceiling-concurrency",
        default=[16, 64],
        type=lambda s: [int(x) for x in s.split(",")],
        help="the ceiling's concurrencies to try in the burst (its best pods/s is the ceiling)",
    )
    p.add_argument(
        "--ceiling-phases",
        default="burst,steady,mixed",
        type=lambda s: s.split(","),
        help="phases the ceiling runs in (after the burst at the burst's best concurrency)",
    )
    p.add_argument("--draxr-args", default="", help="more `draxr run` flags, e.g. '--bind-concurrency 64'")
    p.add_argument(
        "--draxr-pythonpath", default="", help="PYTHONPATH of the draxr process only (another tree's operator/)"
    )
    p.add_argument("--stall", type=float, default=30, help="stop waiting after this long without a binding")
    p.add_argument("--phase-timeout", type=float, default=1200)
    p.add_argument(
        "--cleanup-timeout",
        type=float,
        default=0,
        help="wait this long for a phase's pods and claims to be gone (0: 600 s, or 50 ms per pod if more); "
        "the run stops when they are not",
    )
    p.add_argument("--nodes-ready-timeout", type=float, default=300, help="wait this long for the kwok nodes")
    p.add_argument(
        "--node-grace-seconds",
        type=int,
        default=0,
        help="KCM's node-monitor-grace-period (0: 40, or 600 above 1,000 nodes, where kwok renews Leases late)",
    )
    p.add_argument("--restart-draxr", action="store_true", help="after the draxr burst: restart draxr, time its resync")
    p.add_argument("--settle", type=float, default=30, help="seconds after a restart before RSS is read")
    p.add_argument("--profile", action="store_true", help="py-spy the draxr burst phase")
    p.add_argument(
        "--profile-restart", action="store_true", help="with --restart-draxr: py-spy the restart, start to leading"
    )
    p.add_argument("--out-profile", default=None, help="also keep py-spy's raw collapsed stacks here")
    p.add_argument("--out", default=None, help="JSON path (default bench/results/e2e-<nodes>x<devices>-<pods>.json)")
    p.add_argument("--skip-final-cleanup", action="store_true", help="the last phase leaves its pods (scale runs)")
    p.add_argument("--keep", action="store_true", help="keep the run directory (logs, audit log)")
    args = p.parse_args()
    for s in args.schedulers:
        if s not in SCHEDULER_NAMES:
            p.error(f"unknown scheduler {s!r}")

    binaries = ensure_binaries()
    run_dir = Path(tempfile.mkdtemp(prefix="draxr-bench."))
    (run_dir / "audit-policy.json").write_text(json.dumps(AUDIT_POLICY))
    options = Options(
        scheduler="kube-scheduler" in args.schedulers,
        kwok=True,
        scheduler_qps=args.qps,
        scheduler_burst=args.burst,
        node_monitor_grace_seconds=args.node_grace_seconds or (600 if args.nodes > 1000 else 40),
        apiserver_extra_args=(
            f"--audit-policy-file={run_dir / 'audit-policy.json'}",
            f"--audit-log-path={run_dir / 'audit.log'}",
            "--audit-log-format=json",
            "--audit-log-maxsize=100000",
            "--audit-log-mode=batch",
            "--audit-log-batch-max-wait=1s",
        ),
    )
    cp = ControlPlane(binaries=binaries, run_dir=run_dir, options=options)
    holder: list[Draxr] = []
    result: JSONish = {}
    t0 = time.monotonic()
    try:
        cp.start()
        log(f"control plane up in {cp.timings['total']:.1f}s ({run_dir})")
        result = asyncio.run(bench(args, cp, holder))
        result["control_plane_peak_rss_mib"] = {k: round(v) for k, v in cp.rss_mib().items() if k.endswith(".peak")}
    finally:
        for d in holder:
            d.stop()
        cp.stop()
    events = parse_audit(run_dir)
    for ph in result.get("phases", []):
        ph["audit"] = audit_figures(events, USERS[ph["scheduler"]], ph["audit_window"], ph["bound"])
        ph["audit_other"] = {
            s: audit_figures(events, u, ph["audit_window"], ph["bound"])["writes"]
            for s, u in USERS.items()
            if s != ph["scheduler"]
        }
    result["wall_s"] = round(time.monotonic() - t0, 1)
    out = Path(args.out) if args.out else RESULTS / f"e2e-{args.nodes}x{args.devices}-{args.pods or 'fill'}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    if result.get("phases"):
        print(print_table(result))
    if result.get("profile"):
        print("\ndraxr profile (self %):")
        for f, pct in result["profile"]["self"][:15]:
            print(f"  {pct:5.1f}%  {f}")
    log(f"results in {out}")
    if args.keep:
        log(f"run directory kept: {run_dir}")
    else:
        shutil.rmtree(run_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
