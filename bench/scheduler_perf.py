"""scheduler_perf's extended-resource workloads as an external bench: draxr, kube-scheduler 1.37.2 and
the API server's ceiling, one after the other on one control plane with kwok nodes.

    nice -n 10 .venv/bin/python bench/scheduler_perf.py --workloads \\
        ExtendedResource/Explicit_25classes_5000pods_500nodes,ExtendedResource/Explicit_50classes_5000pods_500nodes

Upstream's test cases are read at run time from the Go module cache (``go env GOMODCACHE``,
k8s.io/kubernetes@v1.37.2, test/integration/scheduler_perf/dra/extendedresource/): the
performance-config.yaml (test case, workload, its params and threshold), the ops of its
workloadTemplate (createNodes, createAny, createPods) and the templates they name. The templates are
rendered by Go's text/template with scheduler_perf's own function map and environment
(bench/scheduler_perf_render.go, built at run time): the objects are upstream's, with three
differences that an out-of-process scheduler needs: every Node carries kwok's annotation
``kwok.x-k8s.io/node: fake`` (kwok keeps its Lease and Ready condition; scheduler_perf runs no
node lifecycle controller), pods are not run (kwok has no pod stages here: a bound pod stays Pending,
as in scheduler_perf, which has no kubelet), and the pods are created through the API server by this
process (30 at a time, as scheduler_perf's CreatePod).

Each scheduler serves ``default-scheduler`` (the pods are upstream's, with no schedulerName) and runs
alone: kube-scheduler (this bench starts the control plane's binary itself, with upstream's
``schedulerConfigPath`` if the test case has one), ``draxr run``, and ``bench/api_ceiling.py`` (the
four writes per pod a scheduler must make, no decisions: the API server's ceiling). Per scheduler and
workload, in fresh namespaces: the ``init`` pods are created and waited for, then the ``test`` pods
(``collectMetrics: true``) are created with the throughput collector running, and waited for.

SchedulingThroughput is upstream's (util.go, throughputCollector): a ticker every second counts the
measured namespace's pods seen going from no nodeName to a nodeName; the first non-zero sample is
dropped; an interval with no new pod is not recorded but merged into the next, which is recorded once
per interval it spans; collection stops when the wait (a poll every second from the end of the
creation) sees every pod scheduled. Average, Perc50/90/95/99 as upstream's DataItem (index
ceil(n*q/100)-1 of the sorted samples). Upstream's threshold (its in-process CI's lower bound on
Average) is printed beside it for context only: that run has no API server round trip per write.
Results: JSON under bench/results/ with the load average at the start and end of each phase.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from draxr.kube import ApiException, Kube
from draxr_dev.devcluster import fakedriver
from draxr_dev.devcluster.binaries import ensure_binaries
from draxr_dev.devcluster.controlplane import LOOPBACK, ControlPlane, Options, free_port
from e2e import Draxr, Http, Phase, draxr_kubeconfig, gather_bounded, proc_figures

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
K8S_VERSION = "v1.37.2"
CONFIGS = {
    "ExtendedResource": "dra/extendedresource/performance-config.yaml",
    "ExtendedResourceScoring": "dra/extendedresource/scoring/performance-config.yaml",
}
SCHEDULER_NAME = "default-scheduler"
PLURALS = {"Node": "nodes", "ResourceSlice": "resourceslices", "DeviceClass": "deviceclasses", "Pod": "pods"}
PREFIX = {"kube-scheduler": "ks", "draxr": "dx", "ceiling": "cl"}  # of the namespaces
IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().strip()


# ---- upstream's configuration (pure) ------------------------------------------------------------------


@dataclass
class Op:
    """One op of a workloadTemplate with its params resolved (scheduler_perf's patchParams)."""

    index: int
    opcode: str
    count: int
    template: Path | None = None  # nodeTemplatePath / templatePath / podTemplatePath, absolute
    params: dict[str, Any] = field(default_factory=dict)  # templateParams, resolved
    namespace: str | None = None
    collect_metrics: bool = False


@dataclass
class Workload:
    test_case: str
    name: str
    params: dict[str, Any]
    threshold: float | None
    ops: list[Op]
    scheduler_config: Path | None
    labels: list[str]

    @property
    def full_name(self) -> str:
        return f"{self.test_case}/{self.name}"


def resolve_param(value: Any, params: dict[str, Any]) -> Any:
    """scheduler_perf's resolveTemplateParams for one value: "$key" is the workload's param key,
    "$key|default" falls back to the YAML-decoded default; anything else is itself."""
    if not (isinstance(value, str) and value.startswith("$")):
        return value
    key, sep, default = value[1:].partition("|")
    if key in params:
        return params[key]
    if sep and key:
        return yaml.safe_load(default)
    raise KeyError(f"parameter {key!r} not found")


def op_count(op: dict[str, Any], params: dict[str, Any]) -> int:
    if "countParam" in op:
        return int(resolve_param(op["countParam"], params))
    return int(op.get("count", 0))


def load_workload(
    config_path: Path, test_case: str, workload: str, overrides: dict[str, Any] | None = None
) -> Workload:
    """The test case and workload of an upstream performance-config.yaml, ops unrolled with the
    workload's params (``overrides`` replace some, for smaller runs; then there is no threshold)."""
    cases = yaml.safe_load(config_path.read_text())
    case = next((c for c in cases if c["name"] == test_case), None)
    if case is None:
        raise KeyError(f"{config_path}: no test case {test_case!r} (have {[c['name'] for c in cases]})")
    wl = next((w for w in case["workloads"] if w["name"] == workload), None)
    if wl is None:
        raise KeyError(f"{test_case}: no workload {workload!r} (have {[w['name'] for w in case['workloads']]})")
    params = {**(wl.get("params") or {}), **(overrides or {})}
    base = config_path.parent
    ops = []
    for i, raw in enumerate(case["workloadTemplate"]):
        path = raw.get("nodeTemplatePath") or raw.get("templatePath") or raw.get("podTemplatePath")
        ops.append(
            Op(
                index=i,
                opcode=raw["opcode"],
                count=op_count(raw, params),
                template=(base / path).resolve() if path else None,
                params={k: resolve_param(v, params) for k, v in (raw.get("templateParams") or {}).items()},
                namespace=raw.get("namespace"),
                collect_metrics=bool(raw.get("collectMetrics")),
            )
        )
    threshold = wl.get("threshold")
    sched_config = case.get("schedulerConfigPath")
    return Workload(
        test_case=test_case,
        name=workload,
        params=params,
        threshold=None if overrides else (float(threshold) if threshold else None),
        ops=ops,
        scheduler_config=(base / sched_config).resolve() if sched_config else None,
        labels=list(wl.get("labels") or []),
    )


def throughput_samples(ticks: list[tuple[float, int]]) -> list[float]:
    """upstream's throughputCollector.run over (tick time, pods scheduled so far) pairs."""
    samples: list[float] = []
    started, last_count, last_time, skipped = False, 0, 0.0, 0
    for now, scheduled in ticks:
        if scheduled == 0:
            continue
        if not started:
            started, last_count, last_time = True, scheduled, now
            continue
        new = scheduled - last_count
        if new == 0:
            skipped += 1
            continue
        rate = new / (now - last_time)
        samples += [rate] * (skipped + 1)
        last_count, last_time, skipped = scheduled, now, 0
    return samples


def throughput_summary(samples: list[float]) -> dict[str, float] | None:
    """upstream's throughputCollector.collect: Average and Perc50/90/95/99 (None: no sample, upstream's
    'Failed to measure SchedulingThroughput')."""
    if not samples:
        return None
    s = sorted(samples)
    n = len(s)
    out = {"Average": sum(s) / n}
    for q in (50, 90, 95, 99):
        out[f"Perc{q}"] = s[math.ceil(n * q / 100) - 1]
    return out


def kube_path(obj: dict[str, Any], namespace: str | None = None) -> str:
    group, _, version = obj["apiVersion"].rpartition("/")
    base = f"/apis/{group}/{version}" if group else f"/api/{version}"
    if namespace:
        base += f"/namespaces/{namespace}"
    return f"{base}/{PLURALS[obj['kind']]}"


def extended_resource_classes(classes: list[dict[str, Any]]) -> dict[str, str]:
    """Extended resource name -> DeviceClass (explicit names, first class by name when several share
    one, then the implicit deviceclass.resource.kubernetes.io/<class>), for the ceiling's claims."""
    out: dict[str, str] = {}
    for c in sorted(classes, key=lambda c: c["metadata"]["name"]):
        name = c["metadata"]["name"]
        if ern := (c.get("spec") or {}).get("extendedResourceName"):
            out.setdefault(ern, name)
        out[IMPLICIT_PREFIX + name] = name
    return out


# ---- rendering through Go's text/template -------------------------------------------------------------


def upstream_dir() -> Path:
    gomodcache = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True, check=True).stdout
    path = Path(gomodcache.strip()) / f"k8s.io/kubernetes@{K8S_VERSION}" / "test/integration/scheduler_perf"
    if not path.is_dir():
        raise SystemExit(f"{path} missing: the Go module k8s.io/kubernetes@{K8S_VERSION} (hack/build-control-plane.sh)")
    return path


class Renderer:
    def __init__(self, run_dir: Path) -> None:
        self.binary = run_dir / "scheduler-perf-render"
        env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "", "CGO_ENABLED": "0"}
        src = Path(__file__).resolve().parent / "scheduler_perf_render.go"
        subprocess.run(["go", "build", "-o", str(self.binary), str(src)], check=True, env=env, cwd=run_dir)

    def render(self, op: Op) -> list[dict[str, Any]]:
        if op.template is None or op.count == 0:
            return []
        req = [{"path": str(op.template), "params": op.params, "count": op.count}]
        out = subprocess.run([str(self.binary)], input=json.dumps(req), capture_output=True, text=True, check=True)
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: 500 slices in seconds, not a minute
        return [yaml.load(text, Loader=loader) for text in json.loads(out.stdout)[0]]


def default_node(op_index: int, i: int) -> dict[str, Any]:
    """scheduler_perf's makeBaseNode (generateName node-<op>-, named here)."""
    res = {"pods": "110", "cpu": "4", "memory": "32Gi"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": f"node-{op_index}-{i}"},
        "status": {
            "capacity": dict(res),
            "allocatable": dict(res),
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def as_kwok_node(node: dict[str, Any]) -> dict[str, Any]:
    meta = node.setdefault("metadata", {})
    meta.setdefault("annotations", {})[fakedriver.KWOK_ANNOTATION] = "fake"
    meta.setdefault("labels", {})["kubernetes.io/hostname"] = meta["name"]  # as PrepareNodes does
    return node


# ---- the schedulers --------------------------------------------------------------------------------------


def _ready(url: str, ctx: ssl.SSLContext) -> bool:
    errors = (urllib.error.URLError, ConnectionError, TimeoutError, ssl.SSLError)
    with contextlib.suppress(*errors), urllib.request.urlopen(url, context=ctx, timeout=2) as resp:  # loopback
        return bool(resp.status == 200)
    return False


class KubeScheduler:
    """The control plane's kube-scheduler binary, started for its own phases only, with upstream's
    profile (schedulerConfigPath) when the test case has one."""

    def __init__(self, cp: ControlPlane, qps: float, burst: int, profile_config: Path | None, tag: str) -> None:
        kubeconfig = cp.kubeconfig_for("kube-scheduler")
        config: dict[str, Any] = {}
        if profile_config is not None:
            config = yaml.safe_load(profile_config.read_text())
        config |= {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": str(kubeconfig), "qps": qps, "burst": burst},
            "leaderElection": {"leaderElect": False},
            "enableProfiling": False,
        }
        path = cp.run_dir / f"kube-scheduler-{tag}.yaml"
        path.write_text(json.dumps(config, indent=2))
        self.port = free_port()
        self.log_path = cp.run_dir / f"kube-scheduler-{tag}.log"
        argv = [
            str(cp.binaries / "kube-scheduler"),
            f"--config={path}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
            f"--bind-address={LOOPBACK}",
            f"--secure-port={self.port}",
            "--v=1",
        ]
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc.poll() is None else None

    async def started(self, timeout: float = 120) -> None:
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"kube-scheduler exited with {self.proc.returncode}; see {self.log_path}")
            if await asyncio.to_thread(_ready, f"https://{LOOPBACK}:{self.port}/readyz", ctx):
                return
            await asyncio.sleep(0.3)
        raise TimeoutError(f"kube-scheduler not ready after {timeout:.0f}s")

    def stop(self, grace: float = 20) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


class Ceiling:
    """bench/api_ceiling.py serving default-scheduler, its claims naming upstream's DeviceClasses."""

    def __init__(
        self,
        cp: ControlPlane,
        kubeconfig: Path,
        qps: float,
        burst: int,
        concurrency: int,
        classes: dict[str, str],
        tag: str,
    ) -> None:
        self.log_path = cp.run_dir / f"ceiling-{tag}.log"
        argv = [
            sys.executable, str(Path(__file__).resolve().parent / "scheduler_perf_ceiling.py"),
            "--classes", json.dumps(classes),
            "--kubeconfig", str(kubeconfig),
            "--scheduler-name", SCHEDULER_NAME,
            "--concurrency", str(concurrency),
            "--qps", str(qps),
            "--burst", str(burst),
        ]  # fmt: skip
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc.poll() is None else None

    async def started(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"api_ceiling exited with {self.proc.returncode}; see {self.log_path}")
            if "ceiling ready" in self.log_path.read_text(errors="replace"):
                return
            await asyncio.sleep(0.2)
        raise TimeoutError("api_ceiling not ready")

    def stop(self, grace: float = 20) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def snapshot_operator(run_dir: Path) -> tuple[Path, dict[str, Any]]:
    """A copy of the working tree's operator/ for the draxr process (PYTHONPATH): the run measures
    one code, whatever is edited in the tree meanwhile. Returns it and what it was taken from."""
    dest = run_dir / "operator"
    shutil.copytree(REPO / "operator", dest, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))

    def git(*a: str) -> str:
        return subprocess.run(["git", *a], capture_output=True, text=True, cwd=REPO).stdout.strip()

    dirty = [line.split(maxsplit=1)[-1] for line in git("status", "--porcelain", "--", "operator").splitlines()]
    return dest, {"commit": git("rev-parse", "--short", "HEAD"), "operator_uncommitted": dirty}


def draxr_has_config(pythonpath: Path) -> bool:
    env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    out = subprocess.run([sys.executable, "-m", "draxr", "run", "--help"], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise SystemExit(f"draxr run --help failed in the snapshot of operator/:\n{out.stderr[-2000:]}")
    return "--config" in out.stdout


# ---- the workload --------------------------------------------------------------------------------------


class Collector:
    """The measured namespace's pods seen scheduled, sampled once a second (upstream's ticker)."""

    def __init__(self) -> None:
        self.scheduled: set[str] = set()
        self.ticks: list[tuple[float, int]] = []

    def on_event(self, _now: float, pod: dict[str, Any]) -> None:
        if (pod.get("spec") or {}).get("nodeName"):
            self.scheduled.add(pod["metadata"]["name"])

    async def tick(self) -> None:
        t0 = time.monotonic()
        k = 0
        while True:
            k += 1
            await asyncio.sleep(max(0.0, t0 + k - time.monotonic()))
            self.ticks.append((time.monotonic(), len(self.scheduled)))


async def create_objects(kube: Kube, objs: list[dict[str, Any]]) -> None:
    async def one(obj: dict[str, Any]) -> None:
        try:
            await kube.request("POST", kube_path(obj), body=obj)
        except ApiException as e:
            if e.status != 409:
                raise

    await gather_bounded([one(o) for o in objs], limit=32)


async def delete_objects(kube: Kube, objs: list[dict[str, Any]]) -> None:
    async def one(obj: dict[str, Any]) -> None:
        with contextlib.suppress(ApiException):
            await kube.request("DELETE", f"{kube_path(obj)}/{obj['metadata']['name']}")

    await gather_bounded([one(o) for o in objs], limit=32)


async def wait_nodes_ready(kube: Kube, names: set[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        listed = await kube.request("GET", "/api/v1/nodes", query={"resourceVersion": "0"})
        ready = {n["metadata"]["name"] for n in listed.get("items") or () if fakedriver._ready(n)}
        if names <= ready:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(names - ready)} of {len(names)} nodes not Ready after {timeout:.0f}s")
        await asyncio.sleep(2)


class PodsPhase(Phase):
    """A createPods op: create ``bodies`` 30 at a time, wait (poll every second) until all are scheduled."""

    async def run_op(
        self, http: Http, bodies: list[dict[str, Any]], collector: Collector | None, timeout: float
    ) -> dict[str, Any]:
        def on_event(now: float, pod: dict[str, Any]) -> None:
            self.on_event(now, pod)
            if collector is not None:
                collector.on_event(now, pod)

        watch = asyncio.create_task(http.watch_pods(self.ns, on_event))
        ticker = asyncio.create_task(collector.tick()) if collector is not None else None
        figures: dict[str, Any] = {"pods": len(bodies), "loadavg_start": loadavg()}
        try:
            await asyncio.sleep(0.5)  # the watch is established
            t0 = time.monotonic()
            await gather_bounded([self.create(b) for b in bodies], limit=30)
            created = time.monotonic()
            # upstream's waitUntilPodsScheduledInNamespace: a poll every second
            while len(self.bound) < len(bodies) and time.monotonic() - created < timeout:  # noqa: ASYNC110
                await asyncio.sleep(1)
            figures |= {"create_s": round(created - t0, 2), "wait_s": round(time.monotonic() - created, 2)}
        finally:
            for task in (watch, ticker):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
        figures["loadavg_end"] = loadavg()
        figures |= {k: v for k, v in self.figures().items() if k not in ("latencies_s", "bound_per_second")}
        return figures


async def run_scheduler(
    args: argparse.Namespace,
    cp: ControlPlane,
    kube: Kube,
    http: Http,
    workload: Workload,
    sched: str,
    objs: dict[int, list[dict[str, Any]]],
    classes: dict[str, str],
    draxr_kc: Path,
    number: int = 0,
    last: bool = False,
) -> dict[str, Any]:
    """One scheduler through one workload's createPods ops; ``number``: the workload's place in the
    run (its namespaces' suffix: a namespace of the previous one may still be terminating);
    ``last``: no clean-up after it (the control plane goes)."""
    tag = f"{workload.name}-{sched}"
    result: dict[str, Any] = {"scheduler": sched, "loadavg_start": loadavg(), "ops": []}
    proc: Any
    if sched == "kube-scheduler":
        proc = KubeScheduler(cp, args.qps, args.burst, workload.scheduler_config, tag)
        await proc.started()
    elif sched == "ceiling":
        proc = Ceiling(cp, draxr_kc, args.qps, args.burst, args.ceiling_concurrency, classes, tag)
        await proc.started()
    else:
        extra = ["--scheduler-name", SCHEDULER_NAME, *args.draxr_args.split()]
        if workload.scheduler_config is not None:
            extra += ["--config", str(workload.scheduler_config)]
        proc = Draxr(draxr_kc, cp.run_dir, args.qps, args.burst, extra, str(args.draxr_pythonpath))
        result["start"] = await proc.start()
    log(f"{workload.full_name} via {sched}: started")
    phases: list[PodsPhase] = []
    try:
        for op in workload.ops:
            if op.opcode != "createPods":
                continue
            ns = f"{PREFIX[sched]}{number or ''}-{op.namespace or f'namespace-{op.index}'}"
            phase = PodsPhase(http, kube, ns)
            phases.append(phase)
            await phase.create_namespace()
            bodies = objs[op.index]
            for i, b in enumerate(bodies):
                b.setdefault("metadata", {}).setdefault("labels", {})["signature"] = f"signature-label-{i}"
            collector = Collector() if op.collect_metrics else None
            before = proc_figures(proc.pid)
            fig = await phase.run_op(http, bodies, collector, args.pods_timeout)
            after = proc_figures(proc.pid)
            fig |= {
                "namespace": ns,
                "collect_metrics": op.collect_metrics,
                "cpu_s": round(after.get("cpu_s", 0) - before.get("cpu_s", 0), 2),
                "peak_rss_mib": round(after.get("peak_rss_mib", 0), 1),
            }
            if collector is not None:
                samples = throughput_samples(collector.ticks)
                fig["SchedulingThroughput"] = throughput_summary(samples)
                fig["samples"] = [round(s, 2) for s in samples]
                fig["ticks"] = collector.ticks
            log(
                f"  {ns}: {fig['bound']}/{fig['pods']} scheduled, {fig['pods_per_s']} pods/s overall"
                + (f", SchedulingThroughput {fmt(fig['SchedulingThroughput'])}" if collector else "")
                + f", CPU {fig['cpu_s']} s, load {fig['loadavg_end']}"
            )
            result["ops"].append(fig)
            if fig["bound"] < fig["pods"]:
                log(f"  {ns}: not all pods scheduled in {args.pods_timeout:.0f}s; stopping this scheduler's run")
                break
    finally:
        if last:
            phases = []
        done = await asyncio.gather(*(ph.cleanup(max(600.0, 0.05 * len(ph.sent))) for ph in phases))
        for phase, (t, clean) in zip(phases, done, strict=True):
            log(f"  {phase.ns}: cleaned up in {t:.0f}s")
            if not clean:
                result["cleanup_incomplete"] = phase.ns
        proc.stop()
    result["loadavg_end"] = loadavg()
    return result


def fmt(s: dict[str, float] | None) -> str:
    if not s:
        return "none (no sample)"
    return ", ".join(f"{k} {v:.1f}" for k, v in s.items())


async def bench(
    args: argparse.Namespace, cp: ControlPlane, renderer: Renderer, workloads: list[Workload], result: dict[str, Any]
) -> None:
    """Runs the workloads, filling ``result`` as it goes (written even if the run fails)."""
    result["workloads"] = []
    kube = await Kube.from_kubeconfig(cp.kubeconfig)
    http = Http(cp)
    try:
        draxr_kc = await draxr_kubeconfig(kube, cp)
        current: dict[str, dict[str, Any]] = {}  # cluster objects (nodes, slices, classes) by kind/name
        for number, wl in enumerate(workloads):
            objs: dict[int, list[dict[str, Any]]] = {}
            cluster: dict[str, dict[str, Any]] = {}
            for op in wl.ops:
                if op.opcode == "createNodes":
                    rendered = (
                        renderer.render(op) if op.template else [default_node(op.index, i) for i in range(op.count)]
                    )
                    rendered = [as_kwok_node(n) for n in rendered]
                elif op.opcode in ("createAny", "createPods"):
                    rendered = renderer.render(op)
                else:
                    raise SystemExit(f"{wl.full_name}: op {op.opcode} not supported by this bench")
                objs[op.index] = rendered
                if op.opcode != "createPods":
                    for o in rendered:
                        cluster[f"{o['kind']}/{o['metadata']['name']}"] = o
            stale = [o for k, o in current.items() if k not in cluster or cluster[k] != o]
            await delete_objects(kube, [o for o in stale if o["kind"] != "Node"])
            await delete_objects(kube, [o for o in stale if o["kind"] == "Node"])
            t0 = time.monotonic()
            fresh = [o for k, o in cluster.items() if k not in current or current[k] != o]
            for kind in ("Node", "ResourceSlice", "DeviceClass"):
                await create_objects(kube, [o for o in fresh if o["kind"] == kind])
            current = cluster
            nodes = {o["metadata"]["name"] for o in cluster.values() if o["kind"] == "Node"}
            await wait_nodes_ready(kube, nodes, args.nodes_ready_timeout)
            kinds = Counter(o["kind"] for o in cluster.values())
            log(
                f"{wl.full_name}: {len(nodes)} nodes Ready, {kinds['ResourceSlice']} slices, "
                f"{kinds['DeviceClass']} classes ({time.monotonic() - t0:.0f}s)"
            )
            classes = extended_resource_classes([o for o in cluster.values() if o["kind"] == "DeviceClass"])
            entry: dict[str, Any] = {
                "workload": wl.full_name,
                "params": wl.params,
                "threshold": wl.threshold,
                "scheduler_config": str(wl.scheduler_config) if wl.scheduler_config else None,
                "runs": [],
            }
            result["workloads"].append(entry)
            for sched in args.schedulers:
                if sched == "draxr" and wl.scheduler_config is not None and not args.draxr_has_config:
                    log(f"{wl.full_name}: draxr has no --config yet; its row waits for it")
                    entry["runs"].append({"scheduler": "draxr", "skipped": "draxr run has no --config"})
                    continue
                try:
                    last = number == len(workloads) - 1 and sched == args.schedulers[-1]
                    run = await run_scheduler(args, cp, kube, http, wl, sched, objs, classes, draxr_kc, number, last)
                except (RuntimeError, TimeoutError) as e:  # a scheduler that did not start: the others run
                    log(f"{wl.full_name} via {sched}: {e}")
                    run = {"scheduler": sched, "error": str(e)}
                entry["runs"].append(run)
                if run.get("cleanup_incomplete"):
                    result["aborted"] = f"pods or claims left in {run['cleanup_incomplete']}"
                    break
            if result.get("aborted"):
                break
    finally:
        await http.close()
        await kube.close()


def table(result: dict[str, Any]) -> str:
    out = [
        "| workload | scheduler | pods | Average | Perc50 | Perc90 | Perc99 | created/s | pods/s overall | CPU s "
        "| upstream threshold |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for wl in result["workloads"]:
        for run in wl["runs"]:
            if run.get("skipped") or run.get("error"):
                why = run.get("skipped") or run["error"]
                out.append(f"| {wl['workload']} | {run['scheduler']} | | {why} | | | | | | | |")
                continue
            m = next((o for o in run["ops"] if o["collect_metrics"]), None)
            if m is None:
                continue
            st = m.get("SchedulingThroughput") or {}
            cells = [f"{st[k]:.1f}" if k in st else "-" for k in ("Average", "Perc50", "Perc90", "Perc99")]
            thr = wl["threshold"]
            out.append(
                f"| {wl['workload']} | {run['scheduler']} | {m['bound']}/{m['pods']} | {' | '.join(cells)} "
                f"| {m['pods'] / max(m['create_s'], 1e-9):.0f} | {m['pods_per_s']} | {m['cpu_s']} | {thr or '-'} |"
            )
    return "\n".join(out)


def parse_overrides(text: str) -> dict[str, Any]:
    """'nodesWithDRA=50,initPods=250' -> {'nodesWithDRA': 50, 'initPods': 250} (YAML scalars)."""
    out: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep:
            raise ValueError(f"override {part!r}: want key=value")
        out[key.strip()] = yaml.safe_load(value)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--workloads",
        default="ExtendedResource/Explicit_25classes_5000pods_500nodes",
        help="comma-separated <test case>/<workload> of upstream's performance-config.yaml files",
    )
    p.add_argument(
        "--params",
        default="",
        help="override workload params for a smaller run, e.g. "
        "'nodesWithDRA=50,initPods=250,measurePods=250' (then no threshold applies)",
    )
    p.add_argument("--schedulers", default="ceiling,kube-scheduler,draxr", type=lambda s: s.split(","))
    p.add_argument("--qps", type=float, default=5000, help="client QPS of every scheduler (scheduler_perf's: 5000)")
    p.add_argument("--burst", type=int, default=5000)
    p.add_argument("--ceiling-concurrency", type=int, default=64)
    p.add_argument(
        "--draxr-args",
        default="",
        help="more `draxr run` flags (without --config: kube-scheduler's default profile)",
    )
    p.add_argument("--pods-timeout", type=float, default=600, help="per createPods op (upstream: 10 min)")
    p.add_argument("--nodes-ready-timeout", type=float, default=300)
    p.add_argument("--out", default=None)
    p.add_argument("--keep", action="store_true", help="keep the run directory (logs)")
    args = p.parse_args()
    for s in args.schedulers:
        if s not in ("ceiling", "kube-scheduler", "draxr"):
            p.error(f"unknown scheduler {s!r}")
    upstream = upstream_dir()
    overrides = parse_overrides(args.params)
    workloads = []
    for spec in args.workloads.split(","):
        case, _, name = spec.partition("/")
        if case not in CONFIGS:
            p.error(f"test case {case!r}: one of {sorted(CONFIGS)}")
        workloads.append(load_workload(upstream / CONFIGS[case], case, name, overrides))
    binaries = ensure_binaries()
    run_dir = Path(tempfile.mkdtemp(prefix="draxr-scheduler-perf."))
    args.draxr_pythonpath, tree = snapshot_operator(run_dir)
    args.draxr_has_config = draxr_has_config(args.draxr_pythonpath)
    options = Options(
        scheduler=False,
        kwok=True,
        kwok_stages=("node-initialize", "node-heartbeat-with-lease"),
        # scheduler_perf serves resource.k8s.io's betas too: the DeviceClass templates are v1beta2
        apiserver_extra_args=("--runtime-config=resource.k8s.io/v1beta2=true",),
    )
    cp = ControlPlane(binaries=binaries, run_dir=run_dir, options=options)
    result: dict[str, Any] = {
        "config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if k != "out"},
        "upstream": str(upstream),
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "tree": tree,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "loadavg_start": loadavg(),
    }
    log(f"load {result['loadavg_start']}; draxr --config: {args.draxr_has_config}")
    t0 = time.monotonic()
    name = "-".join(w.name for w in workloads) if len(workloads) < 3 else f"{len(workloads)}-workloads"
    out = Path(args.out) if args.out else RESULTS / f"scheduler-perf-{name}.json"
    try:
        renderer = Renderer(run_dir)
        cp.start()
        log(f"control plane up in {cp.timings['total']:.1f}s ({run_dir})")
        asyncio.run(bench(args, cp, renderer, workloads, result))
    finally:
        cp.stop()
        result["loadavg_end"] = loadavg()
        result["wall_s"] = round(time.monotonic() - t0, 1)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1) + "\n")
    print(table(result))
    log(f"load {result['loadavg_end']}; results in {out}")
    if args.keep:
        log(f"run directory kept: {run_dir}")
    else:
        shutil.rmtree(run_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
