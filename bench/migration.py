"""Device plugin → DRA on live nodes at scale (issue 27): how long the leader takes to adopt every
running device-plugin pod once the node agents publish their records, what it writes, what it costs
draxr, and whether scheduling keeps its pace meanwhile. Printed figures, not a test.

    nice -n 5 .venv/bin/python bench/migration.py --nodes 500 --devices 8 --pods 4000     # ~4 min
    .venv/bin/python bench/migration.py --nodes 20 --devices 8 --pods 160 --free-nodes 15 \
        --stream-rate 5 --stream-seconds 10                                            # quick check

One control plane (etcd, kube-apiserver with an audit log of draxr's requests, kube-controller-manager,
kwok; no kube-scheduler) in a temp dir, the DevicePluginRecord CRD, and ``--nodes + --free-nodes`` kwok
nodes with one ResourceSlice of ``--devices`` fake GPUs each (fakedriver.Fleet: device attribute
``uuid`` = uuid5(NAMESPACE_DNS, "<node>.gpu-<i>")); DeviceClass ``gpu.example.com`` serves
``example.com/gpu`` and declares the device plugin's identity (``draxr.io/device-plugin-id-attribute:
uuid``).

1. ``--pods`` pods in namespace ``dp``, bound directly to the first ``--nodes`` nodes (spec.nodeName:
   what a device-plugin node ran, no claim, no scheduler), each asking ``example.com/gpu: 1``;
   pod k runs on node k mod N and holds device gpu-(k div N). kwok runs them.
2. ``draxr run`` starts **after** every one of them is Running and **before** any record exists (as
   when the node agent is rolled out on a cluster where draxr already runs): the migrating nodes
   are "not safe", draxr places nothing of the class there.
3. Baseline: a stream of new draxr pods (``--stream-rate`` a second for ``--stream-seconds``, 1 device
   each) in namespace ``base``; only the ``--free-nodes`` have free devices.
4. Migration: the fake node agent writes each migrating node's DevicePluginRecord (valid per the
   CRD: the node's pods and their device uuids), all at once or in ``--waves`` waves
   ``--wave-interval`` seconds apart, and at the same moment the same stream starts again in
   namespace ``mig``. A watch of the adoption claims measures the time from the first record to
   each claim's allocation (its status write). The audit log counts draxr's writes in ``dp``
   (claim creates, status patches, deletes; Events); /proc gives draxr's CPU seconds and RSS
   (sampled every 0.5 s) for each phase.

At the end every adoption claim is checked: owned by its pod, allocated exactly the device the pod's
uuid names, on its node; no stream pod was placed on a migrating node. Then draxr's CPU while idle
for ``--idle-seconds`` (the migrator's periodic passes with every record fresh). ``--profile`` runs
py-spy (the bench extra) on draxr from the first record to the last adoption. The JSON goes to
bench/results/ (``--out``); bench/NOTEBOOK.md, "Migration", reads it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from draxr.core.migration import ADOPTION_LABEL, ID_ATTRIBUTE_ANNOTATION
from draxr.kube import NODES, PODS, ApiException, Kube
from draxr.migrator import RECORDS
from draxr_dev.devcluster import fakedriver
from draxr_dev.devcluster.binaries import ensure_binaries
from draxr_dev.devcluster.controlplane import ControlPlane, Options
from draxr_dev.devcluster.records import fake_record, one_resource
from e2e import (
    AUDIT_POLICY,
    DRAXR_NS,
    DRAXR_SA,
    RESULTS,
    WRITE_VERBS,
    Draxr,
    Http,
    Phase,
    draxr_kubeconfig,
    gather_bounded,
    log,
    pod_body,
    proc_figures,
    stop_profiler,
)

REPO = Path(__file__).resolve().parents[1]
CRD = REPO / "crds" / "devicepluginrecords.draxr.io.yaml"
CLASS, EXT, PREFIX = "gpu.example.com", "example.com/gpu", "mig"
DP_NS = "dp"
USER = f"system:serviceaccount:{DRAXR_NS}:{DRAXR_SA}"
JSON = dict[str, Any]


def device_uuid(node: str, index: int) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{node}.gpu-{index}"))


def placement(k: int, nodes: int) -> tuple[str, int]:
    """Device-plugin pod k's node and device index."""
    return f"{PREFIX}-{k % nodes}", k // nodes


def dp_pod(k: int, nodes: int) -> JSON:
    node, _ = placement(k, nodes)
    body = pod_body(f"dp-{k}", "default-scheduler", EXT, 1, None)
    body["spec"]["nodeName"] = node  # what the device-plugin node ran: bound by nobody, no claim
    return body


def record(node: str, pods: list[tuple[str, str]]) -> JSON:
    """The node agent's record: ``pods`` (name, device uuid)."""
    return fake_record(node, one_resource(DP_NS, EXT, [(name, [dev]) for name, dev in pods]), refresh_seconds=300)


# ---- set-up ---------------------------------------------------------------------------------------------


async def install_crd(kube: Kube) -> None:
    crd = yaml.safe_load(CRD.read_text())
    path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    await kube.request("POST", path, body=crd)
    for _ in range(600):
        got = await kube.request("GET", f"{path}/{crd['metadata']['name']}")
        if any(
            c["type"] == "Established" and c["status"] == "True"
            for c in (got.get("status") or {}).get("conditions") or ()
        ):
            return
        await asyncio.sleep(0.1)
    raise TimeoutError("the DevicePluginRecord CRD is not Established")


async def create_fleet(kube: Kube, total: int, devices: int, timeout: float) -> None:
    fleet = fakedriver.Fleet(prefix=PREFIX, dra_nodes=total, devices_per_node=devices, classes={CLASS: EXT})
    objs = fleet.manifests()
    for o in objs:
        if o["kind"] == "DeviceClass":
            o["metadata"].setdefault("annotations", {})[ID_ATTRIBUTE_ANNOTATION] = "uuid"
    t0 = time.monotonic()
    await gather_bounded([fakedriver.apply(kube, [o]) for o in objs])
    log(f"created {fakedriver.summary(objs)} in {time.monotonic() - t0:.1f}s")
    while True:
        listed = await kube.request("GET", NODES.path(), query={"labelSelector": "type=kwok", "resourceVersion": "0"})
        ready = sum(1 for n in listed.get("items") or () if fakedriver._ready(n))
        if ready >= total:
            break
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"only {ready}/{total} nodes Ready after {timeout:.0f}s")
        await asyncio.sleep(2)
    log(f"{total} nodes Ready after {time.monotonic() - t0:.1f}s")


async def create_namespace(kube: Kube, name: str) -> None:
    await Phase(None, kube, name).create_namespace()  # type: ignore[arg-type]


async def wait_running(kube: Kube, ns: str, count: int, timeout: float) -> float:
    t0 = time.monotonic()
    while True:
        listed = await kube.request("GET", PODS.path(ns), query={"resourceVersion": "0"})
        running = sum(1 for p in listed.get("items") or () if (p.get("status") or {}).get("phase") == "Running")
        if running >= count:
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"only {running}/{count} device-plugin pods Running after {timeout:.0f}s")
        await asyncio.sleep(2)


# ---- measuring --------------------------------------------------------------------------------------------


class Sampler:
    """draxr's CPU seconds over a phase and its RSS sampled every 0.5 s (VmHWM is the process's life)."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid
        self.start = proc_figures(pid)
        self.peak = self.start.get("rss_mib", 0.0)
        self.task = asyncio.create_task(self._sample())

    async def _sample(self) -> None:
        while True:
            self.peak = max(self.peak, proc_figures(self.pid).get("rss_mib", 0.0))
            await asyncio.sleep(0.5)

    async def stop(self) -> JSON:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        end = proc_figures(self.pid)
        self.peak = max(self.peak, end.get("rss_mib", 0.0))
        return {
            "cpu_s": round(end.get("cpu_s", 0.0) - self.start.get("cpu_s", 0.0), 2),
            "rss_start_mib": round(self.start.get("rss_mib", 0.0), 1),
            "peak_rss_mib": round(self.peak, 1),
            "rss_end_mib": round(end.get("rss_mib", 0.0), 1),
            "lifetime_peak_rss_mib": round(end.get("peak_rss_mib", 0.0), 1),
        }


class ClaimWatch:
    """The adoption claims in ``dp``: when each was first seen allocated."""

    def __init__(self, http: Http) -> None:
        self.http = http
        self.allocated: dict[str, float] = {}
        self.created: dict[str, float] = {}
        self.objects: dict[str, JSON] = {}

    def on_event(self, now: float, claim: JSON) -> None:
        meta = claim["metadata"]
        if (meta.get("labels") or {}).get(ADOPTION_LABEL) is None:
            return
        name = meta["name"]
        self.created.setdefault(name, now)
        self.objects[name] = claim
        if (claim.get("status") or {}).get("allocation") and name not in self.allocated:
            self.allocated[name] = now

    async def run(self) -> None:
        rv = ""
        url = f"{self.http.base}/apis/resource.k8s.io/v1/namespaces/{DP_NS}/resourceclaims"
        while True:
            params = {"watch": "1", "allowWatchBookmarks": "true", "timeoutSeconds": "1800"}
            if rv:
                params["resourceVersion"] = rv
            try:
                async with self.http.session.get(url, params=params) as resp:
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
                            self.on_event(now, obj)
            except (TimeoutError, aiohttp.ClientError) as e:
                log(f"claim watch interrupted ({e!r}); reconnecting")
                await asyncio.sleep(0.5)


def audit_writes(run_dir: Path, window: tuple[float, float]) -> dict[str, Counter[str]]:
    """draxr's writes in the window, by namespace: "verb resource[/subresource]" -> count."""
    out: dict[str, Counter[str]] = {}
    start, end = window
    for path in sorted(run_dir.glob("audit*.log")):
        with path.open() as f:
            for line in f:
                try:
                    ev = json.loads(line)
                except ValueError:
                    continue
                if ev.get("stage") != "ResponseComplete" or ev["user"]["username"] != USER:
                    continue
                if ev["verb"] not in WRITE_VERBS:
                    continue
                ts = datetime.fromisoformat(ev["requestReceivedTimestamp"]).timestamp()
                if not start <= ts <= end:
                    continue
                ref = ev.get("objectRef") or {}
                res = ref.get("resource", "") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
                code = (ev.get("responseStatus") or {}).get("code", 0)
                key = f"{ev['verb']} {res}" + ("" if 200 <= code < 300 else f" ({code})")
                out.setdefault(ref.get("namespace", ""), Counter())[key] += 1
    return out


def start_profiler(pid: int, out: Path) -> subprocess.Popen[bytes]:
    """py-spy (the bench extra) on draxr: from .venv/bin, else on PATH."""
    py_spy = Path(sys.executable).parent / "py-spy"
    exe = str(py_spy) if py_spy.exists() else shutil.which("py-spy")
    if exe is None:
        raise SystemExit("--profile needs py-spy (pip install 'py-spy>=0.4.3', the bench extra)")
    return subprocess.Popen(
        [exe, "record", "--pid", str(pid), "--format", "raw", "--rate", "100", "--nonblocking", "-o", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


SCRAPED = (
    "draxr_schedule_attempts_total",
    "draxr_scheduling_cycle_duration_seconds_sum",
    "draxr_scheduling_cycle_duration_seconds_count",
    "draxr_binding_duration_seconds_sum",
    "draxr_binding_duration_seconds_count",
    "draxr_event_loop_lag_seconds_sum",
    "draxr_event_loop_lag_seconds_count",
    "draxr_event_loop_lag_seconds_bucket",
)


async def scrape(http: Http, draxr: Draxr) -> dict[str, float]:
    """draxr's own counters (its /metrics): scheduling attempts, cycle and binding time, loop lag."""
    out: dict[str, float] = {}
    try:
        async with http.session.get(f"http://127.0.0.1:{draxr.metrics_port}/metrics", ssl=False) as resp:
            text = await resp.text()
    except aiohttp.ClientError:
        return out
    for line in text.splitlines():
        if line.startswith(SCRAPED):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def scraped_figures(before: dict[str, float], after: dict[str, float]) -> JSON:
    def d(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    attempts = {
        k.split('result="')[1].rstrip('"}'): d(k) for k in after if k.startswith("draxr_schedule_attempts_total")
    }
    cycles = d("draxr_scheduling_cycle_duration_seconds_count")
    binds = d("draxr_binding_duration_seconds_count")
    lags = d("draxr_event_loop_lag_seconds_count")
    over = {le: lags - d(f'draxr_event_loop_lag_seconds_bucket{{le="{le}"}}') for le in ("0.1", "0.5", "1.0", "2.5")}
    return {
        "attempts": {k: int(v) for k, v in attempts.items() if v},
        "cycle_ms_mean": round(1000 * d("draxr_scheduling_cycle_duration_seconds_sum") / cycles, 1) if cycles else None,
        "binding_s_mean": round(d("draxr_binding_duration_seconds_sum") / binds, 3) if binds else None,
        "loop_lag_ms_mean": round(1000 * d("draxr_event_loop_lag_seconds_sum") / lags, 1) if lags else None,
        "loop_lag_samples": int(lags),
        "loop_lag_over_s": {le: int(v) for le, v in over.items()},
    }


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


# ---- the phases -------------------------------------------------------------------------------------------


def stream_bodies(prefix: str, count: int) -> list[JSON]:
    return [pod_body(f"{prefix}-{k}", "draxr", EXT, 1, None) for k in range(count)]


async def stream_phase(args: argparse.Namespace, http: Http, kube: Kube, ns: str) -> Phase:
    phase = Phase(http, kube, ns)
    await phase.create_namespace()
    return phase


async def run_stream(args: argparse.Namespace, phase: Phase) -> None:
    count = int(args.stream_rate * args.stream_seconds)
    await phase.run(stream_bodies(phase.ns, count), args.stream_rate, stall=args.stall, timeout=args.timeout)


def stream_figures(phase: Phase) -> JSON:
    fig = phase.figures()
    fig.pop("latencies_s", None)
    return fig


async def write_records(args: argparse.Namespace, kube: Kube, nodes: list[str], held: dict[str, list]) -> list[float]:
    """The fake node agent; returns when each wave started (time.time())."""
    waves = max(1, args.waves)
    per_wave = -(-len(nodes) // waves)
    starts = []
    for w in range(waves):
        if w:
            await asyncio.sleep(args.wave_interval)
        starts.append(time.time())
        batch = nodes[w * per_wave : (w + 1) * per_wave]
        await gather_bounded([kube.create(RECORDS, record(n, held.get(n, []))) for n in batch], limit=32)
        log(f"  wave {w + 1}/{waves}: {len(batch)} records written in {time.time() - starts[-1]:.1f}s")
    return starts


async def bench(args: argparse.Namespace, cp: ControlPlane, holder: list[Draxr]) -> JSON:
    result: JSON = {
        "config": {k: v for k, v in vars(args).items() if k != "out"},
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0], "loadavg_start": os.getloadavg()},
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    kube = await Kube.from_kubeconfig(cp.kubeconfig)
    http = Http(cp)
    try:
        await install_crd(kube)
        await create_fleet(kube, args.nodes + args.free_nodes, args.devices, args.nodes_ready_timeout)
        migrating = [f"{PREFIX}-{i}" for i in range(args.nodes)]
        if args.pods > args.nodes * args.devices:
            raise SystemExit(f"--pods {args.pods} exceeds the migrating nodes' {args.nodes * args.devices} devices")
        held: dict[str, list[tuple[str, str]]] = {}
        for k in range(args.pods):
            node, idx = placement(k, args.nodes)
            held.setdefault(node, []).append((f"dp-{k}", device_uuid(node, idx)))

        await create_namespace(kube, DP_NS)
        t0 = time.monotonic()
        await gather_bounded([http.create_pod(DP_NS, dp_pod(k, args.nodes)) for k in range(args.pods)], limit=32)
        log(f"{args.pods} device-plugin pods created in {time.monotonic() - t0:.1f}s")
        running = await wait_running(kube, DP_NS, args.pods, args.timeout)
        log(f"  ... all Running {running:.1f}s later")

        kubeconfig = await draxr_kubeconfig(kube, cp)
        draxr = Draxr(kubeconfig, cp.run_dir, args.qps, args.burst, args.draxr_args.split())
        holder.append(draxr)
        timings = await draxr.start()
        result["draxr_start"] = {k: round(v, 2) for k, v in timings.items()}
        log(f"draxr leading after {timings.get('leading_s', 0):.1f}s (before any record)")
        await asyncio.sleep(args.settle)

        streaming = args.stream_rate > 0 and args.stream_seconds > 0
        if streaming:
            base = await stream_phase(args, http, kube, "base")
            sampler, counters = Sampler(draxr.pid), await scrape(http, draxr)
            log(f"baseline: {args.stream_rate:g} pods/s for {args.stream_seconds:g}s, no migration")
            await run_stream(args, base)
            result["baseline"] = {
                "stream": stream_figures(base),
                "draxr": await sampler.stop(),
                "draxr_metrics": scraped_figures(counters, await scrape(http, draxr)),
            }
            log(f"  {result['baseline']}")
            await asyncio.sleep(args.settle)

        # ---- the migration, with the stream beside it ----
        claims = ClaimWatch(http)
        watch = asyncio.create_task(claims.run())
        mig = await stream_phase(args, http, kube, "mig") if streaming else None
        await asyncio.sleep(1)  # the claim watch is established
        profiler = start_profiler(draxr.pid, cp.run_dir / "migration.pyspy") if args.profile and draxr.pid else None
        sampler, counters = Sampler(draxr.pid), await scrape(http, draxr)
        first = time.time()
        stream_task = asyncio.create_task(run_stream(args, mig)) if mig is not None else None
        log(f"migration: {len(migrating)} records in {args.waves} wave(s), {args.pods} pods to adopt")
        await write_records(args, kube, migrating, held)
        records_written = time.time() - first
        last_progress, seen, said = time.monotonic(), 0, time.monotonic()
        while len(claims.allocated) < args.pods:
            if len(claims.allocated) != seen:
                last_progress, seen = time.monotonic(), len(claims.allocated)
            if time.monotonic() - said > 10:
                said = time.monotonic()
                log(f"  {seen}/{args.pods} adoption claims allocated, {time.time() - first:.1f}s")
            if time.monotonic() - last_progress > args.stall or time.time() - first > args.timeout:
                log(f"  stopped waiting with {len(claims.allocated)}/{args.pods} adoption claims allocated")
                break
            await asyncio.sleep(0.2)
        adopted_at = max(claims.allocated.values()) if claims.allocated else time.time()
        adoption_draxr = await sampler.stop()
        adoption_metrics = scraped_figures(counters, await scrape(http, draxr))
        if profiler is not None:
            result["profile"] = stop_profiler(profiler, cp.run_dir / "migration.pyspy", args.out_profile)
        stream_sampler = Sampler(draxr.pid)
        if stream_task is not None:
            await stream_task
        after_stream = await stream_sampler.stop()
        end = time.time()
        if args.idle_seconds > 0:
            # Nothing changes any more: what the migrator's periodic passes cost (every record fresh).
            idle = Sampler(draxr.pid)
            await asyncio.sleep(args.idle_seconds)
            result["idle_after"] = {"seconds": args.idle_seconds, "draxr": await idle.stop()}
            log(f"  idle after adoption: {result['idle_after']}")
        await asyncio.sleep(3)  # the last claim events and audit batches
        watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watch

        by_node: dict[str, float] = {}
        for name, at in claims.allocated.items():
            node = (claims.objects[name]["status"]["allocation"]["devices"]["results"] or [{}])[0].get("pool", "")
            by_node[node] = max(by_node.get(node, 0.0), at)
        times = sorted(at - first for at in claims.allocated.values())
        node_times = sorted(at - first for at in by_node.values())
        result["migration"] = {
            "records": len(migrating),
            "waves": args.waves,
            "records_written_s": round(records_written, 2),
            "pods": args.pods,
            "claims_created": len(claims.created),
            "claims_allocated": len(claims.allocated),
            "nodes_adopted": sum(1 for n in migrating if n in by_node),
            "first_claim_s": round(times[0], 2) if times else None,
            "all_adopted_s": round(adopted_at - first, 2),
            "claim_p50_s": round(v, 2) if (v := percentile(times, 0.5)) is not None else None,
            "claim_p90_s": round(v, 2) if (v := percentile(times, 0.9)) is not None else None,
            "node_p50_s": round(v, 2) if (v := percentile(node_times, 0.5)) is not None else None,
            "claims_per_s": round(len(times) / max(1e-9, adopted_at - first), 1) if times else 0.0,
            "window": [first, adopted_at],
            "draxr": adoption_draxr,
            "draxr_metrics": adoption_metrics,
        }
        if mig is not None:
            fig = stream_figures(mig)
            fig["overlap_s"] = round(min(adopted_at, fig["window"][1]) - first, 1)
            result["with_migration"] = {"stream": fig, "draxr_after_adoption": after_stream}
        result["checks"] = await check(kube, args, claims, migrating)
        result["window"] = [first, end]
    finally:
        await http.close()
        await kube.close()
    return result


async def check(kube: Kube, args: argparse.Namespace, claims: ClaimWatch, migrating: list[str]) -> JSON:
    """Every adoption claim names its pod's device; no stream pod landed on a migrating node."""
    pods = {p["metadata"]["name"]: p for p in await kube.list(PODS, DP_NS)}
    wrong: list[str] = []
    owners: Counter[str] = Counter()
    for name, claim in claims.objects.items():
        owner = claim["metadata"]["ownerReferences"][0]
        owners[owner["name"]] += 1
        k = int(owner["name"].removeprefix("dp-"))
        node, idx = placement(k, args.nodes)
        results = ((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") or []
        got = [(r["pool"], r["device"]) for r in results]
        pod = pods.get(owner["name"])
        if got != [(node, f"gpu-{idx}")] or pod is None or pod["metadata"]["uid"] != owner["uid"]:
            wrong.append(f"{name}: {got} (want {node}/gpu-{idx})")
    misplaced = 0
    for ns in ("base", "mig"):
        with contextlib.suppress(ApiException):
            for p in await kube.list(PODS, ns):
                if (p.get("spec") or {}).get("nodeName") in set(migrating):
                    misplaced += 1
    return {
        "claims_wrong": len(wrong),
        "wrong_examples": wrong[:5],
        "pods_with_two_claims": sum(1 for n in owners.values() if n > 1),
        "pods_without_claim": args.pods - len(owners),
        "stream_pods_on_migrating_nodes": misplaced,
    }


# ---- the report -----------------------------------------------------------------------------------------------


def writes_figures(result: JSON, run_dir: Path) -> None:
    mig = result.get("migration")
    if not mig:
        return
    writes = audit_writes(run_dir, tuple(mig["window"]))  # type: ignore[arg-type]
    dp = writes.get(DP_NS, Counter())
    claim_writes = sum(n for k, n in dp.items() if " resourceclaims" in k)
    pods = max(1, mig["pods"])
    mig["draxr_writes_dp"] = dict(dp.most_common())
    mig["claim_writes_per_pod"] = round(claim_writes / pods, 2)
    mig["all_writes_per_pod"] = round(sum(dp.values()) / pods, 2)
    mig["draxr_writes_other_namespaces"] = {ns: sum(c.values()) for ns, c in writes.items() if ns != DP_NS}
    for key in ("baseline", "with_migration"):
        if key in result:
            s = result[key]["stream"]
            w = audit_writes(run_dir, tuple(s["window"]))  # type: ignore[arg-type]
            ns = "base" if key == "baseline" else "mig"
            s["draxr_writes_per_pod"] = round(sum(w.get(ns, Counter()).values()) / max(1, s["bound"]), 2)


def table(result: JSON) -> str:
    m = result["migration"]
    d = m["draxr"]
    lines = [
        f"**Adoption**: {m['records']} records ({m['waves']} wave(s)), {m['pods']} device-plugin pods",
        "",
        "| claims allocated | nodes adopted | first claim s | p50 s | p90 s | all adopted s | claims/s "
        "| claim writes/pod | draxr writes/pod in dp | draxr CPU s | peak RSS MiB (start) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        f"| {m['claims_allocated']}/{m['pods']} | {m['nodes_adopted']}/{m['records']} | {m['first_claim_s']} "
        f"| {m['claim_p50_s']} | {m['claim_p90_s']} | **{m['all_adopted_s']}** | {m['claims_per_s']} "
        f"| {m.get('claim_writes_per_pod')} | {m.get('all_writes_per_pod')} | {d['cpu_s']} "
        f"| {d['peak_rss_mib']} ({d['rss_start_mib']}) |",
        "",
        f"draxr's writes in {DP_NS}: {m.get('draxr_writes_dp')}",
    ]
    if "baseline" in result and "with_migration" in result:
        lines += [
            "",
            "**Scheduling meanwhile**: the same stream of new draxr pods (1 device each)",
            "",
            "| stream | pods bound | pods/s | p50 s | p90 s | p99 s | max s | draxr writes/pod | draxr CPU s "
            "| cycle ms | loop lag ms mean (> 0.5 s) |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for label, key in (("baseline (no migration)", "baseline"), ("during the migration", "with_migration")):
            s = result[key]["stream"]
            cpu = result[key].get("draxr", {}).get("cpu_s", "")
            if key == "with_migration":
                label += f" ({s['overlap_s']} s overlap)"
                cpu = f"{m['draxr']['cpu_s']} + {result[key]['draxr_after_adoption']['cpu_s']} (adoption + after)"
            lat = s["latency_s"]
            dm = (result[key] if key == "baseline" else m).get("draxr_metrics") or {}
            slow = (dm.get("loop_lag_over_s") or {}).get("0.5")
            lines.append(
                f"| {label} | {s['bound']}/{s['pods']} | {s['pods_per_s']} | {lat['p50']} | {lat['p90']} "
                f"| {lat['p99']} | {lat['max']} | {s.get('draxr_writes_per_pod')} | {cpu} "
                f"| {dm.get('cycle_ms_mean')} | {dm.get('loop_lag_ms_mean')} ({slow}) |"
            )
    if "idle_after" in result:
        idle = result["idle_after"]
        lines += ["", f"draxr idle after the adoption: {idle['draxr']['cpu_s']} CPU s in {idle['seconds']:g} s"]
    lines += ["", f"checks: {result['checks']}"]
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=500, help="migrating nodes (device-plugin pods, a record each)")
    p.add_argument("--devices", type=int, default=8)
    p.add_argument("--pods", type=int, default=4000, help="running device-plugin pods, 1 device each")
    p.add_argument(
        "--free-nodes",
        type=int,
        default=150,
        help="nodes without device-plugin pods: the stream's devices (500 x 8 - 4,000 leaves none on the others)",
    )
    p.add_argument("--waves", type=int, default=1, help="write the records in this many waves (1: all at once)")
    p.add_argument("--wave-interval", type=float, default=5.0, help="seconds between waves")
    p.add_argument("--stream-rate", type=float, default=20, help="new draxr pods a second (0: no stream)")
    p.add_argument("--stream-seconds", type=float, default=30, help="how long each stream runs")
    p.add_argument("--qps", type=float, default=500, help="draxr's client QPS")
    p.add_argument("--burst", type=int, default=1000, help="draxr's client burst")
    p.add_argument("--draxr-args", default="", help="more `draxr run` flags")
    p.add_argument("--settle", type=float, default=10, help="seconds of quiet before each phase")
    p.add_argument("--stall", type=float, default=120, help="stop waiting after this long without progress")
    p.add_argument("--timeout", type=float, default=1200, help="stop waiting for a phase after this long")
    p.add_argument("--nodes-ready-timeout", type=float, default=600)
    p.add_argument("--idle-seconds", type=float, default=30, help="then measure draxr idle this long (0: not)")
    p.add_argument("--profile", action="store_true", help="py-spy draxr from the first record to the last adoption")
    p.add_argument("--out-profile", default=None, help="also keep py-spy's raw collapsed stacks here")
    p.add_argument("--out", default=None, help="JSON path (default bench/results/migration-<nodes>x<devices>.json)")
    p.add_argument("--keep", action="store_true", help="keep the run directory (logs, audit log)")
    args = p.parse_args()
    stream_pods = 2 * int(args.stream_rate * args.stream_seconds)
    if stream_pods > args.free_nodes * args.devices:
        free = args.free_nodes * args.devices
        p.error(f"the two streams ({stream_pods} pods) need more than the free nodes' {free} devices")

    binaries = ensure_binaries()
    run_dir = Path(tempfile.mkdtemp(prefix="draxr-migration."))
    (run_dir / "audit-policy.json").write_text(json.dumps(AUDIT_POLICY))
    options = Options(
        scheduler=False,
        kwok=True,
        node_monitor_grace_seconds=600 if args.nodes + args.free_nodes > 1000 else 120,
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
    result: JSON = {}
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
    writes_figures(result, run_dir)
    result["wall_s"] = round(time.monotonic() - t0, 1)
    result["machine"]["loadavg_end"] = os.getloadavg()
    out = Path(args.out) if args.out else RESULTS / f"migration-{args.nodes}x{args.devices}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    if result.get("migration"):
        print(table(result))
    if result.get("profile"):
        print("\ndraxr profile, first record to last adoption (inclusive %):")
        for f, pct in result["profile"]["inclusive"][:30]:
            print(f"  {pct:5.1f}%  {f}")
    log(f"results in {out}")
    if args.keep:
        log(f"run directory kept: {run_dir}")
    else:
        shutil.rmtree(run_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
