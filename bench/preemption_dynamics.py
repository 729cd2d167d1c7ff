"""Preemption under churn (issue 34, item 5): draxr and kube-scheduler 1.37 on the same fresh
control plane, many preemptors arriving over full nodes while lower-priority pods keep retrying.

    nice -n 5 .venv/bin/python bench/preemption_dynamics.py   # 500 nodes x 8, 4,000 running, 200 preemptors
    .venv/bin/python bench/preemption_dynamics.py --ci       # 20 nodes x 8, 160 running, 20 preemptors

One control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok; bench/e2e.py's)
in a temp dir; ``--nodes`` kwok nodes with one ResourceSlice of ``--devices`` fake GPUs each, served
as ``example.com/gpu`` by one DeviceClass (``extendedResourceName``). The fleet is split in two
halves by the node label ``draxr.io/bench-half``: ``cpu`` (the first nodes // 2) and ``devices``.
Every node has k = ``--running`` / ``--nodes`` cpus (8 at the default size), so that the fill
saturates the cpu of every node and the devices of the device half. PriorityClasses ``pd-low`` (0)
and ``pd-high`` (100000).

Per scheduler, kube-scheduler first, each on its own namespace (``pd-ks``, ``pd-dx``) and on the
same nodes after a full clean-up of the phase before (its pods and claims gone, its namespace
deleted); draxr (``draxr run``, a subprocess) runs during its own phase only:

1. fill: ``--running`` bare low pods, bound and Running; on the cpu half each asks ``cpu: 1``, on
   the device half ``cpu: 1`` and ``example.com/gpu: 1`` (node selector on the half);
2. retrying: per half a Deployment of ``--retrying`` low replicas like the fill pods, which do not
   fit: they keep being retried (the issue's scene: they must not take the room freed for a
   nominated preemptor);
3. preemptors: ``--preemptors`` high pods created evenly over ``--arrival-seconds``, alternately
   ``cpu: 2`` on the cpu half and ``cpu: 2`` + ``example.com/gpu: 2`` on the device half, each the
   room of two low pods. kube-scheduler gets only the cpu half (it cannot preempt for devices),
   at the same times as in draxr's phase; the bench waits until all are bound (``--timeout``).

Measured per scheduler and half, from the bench's own pod watch of the namespace and the Events:

* victims per preemptor: the ``Preempted`` Events ("Preempted by pod <uid> on node <node>",
  reportingController the scheduler's name);
* the dry runs' sum: each nomination's "preemption: found a potential placement for pod on node
  <node>, preempting <N> victims" (both schedulers' wording), taken from the preemptor's
  PodScheduled condition each time the watch sees its message change (kube-scheduler's event
  broadcaster folds a pod's later FailedScheduling Events into the first one's series, which keeps
  the first note: its Events alone would miss a second nomination; draxr's Events are counted as
  well, as a cross-check);
* preemptors whose victims were on more than one node, preemptors bound on a node where they
  evicted nothing, low pods bound while the preemptors came (room taken from them);
* latency from the last victim gone (the watch's DELETED event of the preemptor's last victim) to
  the preemptor seen bound: p50, p99, max; and from the preemptor's creation to bound;
* the phase's span (first preemptor created to last bound), the scheduler's CPU seconds in it.

A table (kube-scheduler and draxr side by side, ratios of the latencies) and the JSON
(bench/results/preemption-dynamics-<nodes>x<devices>.json, ``--out``), with every preemptor's
nominations, victims (node, eviction time, gone time) and, for a suspicious one (more victims than
its dry runs named, victims on several nodes, unbound), draxr's log lines about it. Everything
listens on and talks to 127.0.0.1; every wait is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from draxr.kube import EVENTS, ApiException, Kube, Resource
from draxr_dev.devcluster import fakedriver
from draxr_dev.devcluster.binaries import ensure_binaries
from draxr_dev.devcluster.controlplane import ControlPlane, Options
from e2e import (
    RESULTS,
    SCHEDULER_NAMES,
    Draxr,
    Http,
    Phase,
    apply_fleet,
    draxr_kubeconfig,
    gather_bounded,
    log,
    percentile,
    pod_body,
    proc_figures,
    tolerant,
)

REPO = Path(__file__).resolve().parents[1]
PRIORITY_CLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses", False)
DEPLOYMENTS = Resource("apps", "v1", "deployments", True)
EXT = "example.com/gpu"
HALF_LABEL = "draxr.io/bench-half"
HALVES = ("cpu", "devices")
SHORT = {"cpu": "cpu", "devices": "dev"}
LOW, HIGH = "pd-low", "pd-high"
NAMESPACES_OF = {"kube-scheduler": "pd-ks", "draxr": "pd-dx"}
DRY_RUN = re.compile(r"preemption: found a potential placement for pod on node ([^,\s]+), preempting (\d+) victims")
PREEMPTED = re.compile(r"Preempted by pod (\S+) on node (\S+)")
JSON = dict[str, Any]


# ---- pure: what the figures are made of ------------------------------------------------------------------


def dry_run(message: str) -> tuple[str, int] | None:
    """(node, victims) of a nomination's message, as both schedulers word it; None otherwise."""
    m = DRY_RUN.search(message)
    return (m.group(1), int(m.group(2))) if m else None


@dataclass
class Victim:
    name: str
    node: str
    evicted_at: str = ""  # the Preempted Event's eventTime
    gone: float | None = None  # the bench's watch saw it DELETED (epoch seconds)


def preempted_by(events: Iterable[JSON], reporter: str) -> dict[str, list[Victim]]:
    """Preemptor uid -> its victims, from the ``Preempted`` Events (events.k8s.io/v1) that
    ``reporter`` wrote; a victim named twice counts once."""
    out: dict[str, list[Victim]] = {}
    for e in events:
        if e.get("reason") != "Preempted" or e.get("reportingController") != reporter:
            continue
        m = PREEMPTED.fullmatch((e.get("note") or "").strip())
        if m is None:
            continue
        victims = out.setdefault(m.group(1), [])
        name = (e.get("regarding") or {}).get("name", "")
        if all(v.name != name for v in victims):
            victims.append(Victim(name, m.group(2), e.get("eventTime") or ""))
    return out


def event_dry_runs(events: Iterable[JSON], reporter: str) -> dict[str, list[tuple[str, int, int]]]:
    """Pod name -> [(node, victims, times)] of its FailedScheduling Events naming a nomination
    (times: the series count, 1 without one)."""
    out: dict[str, list[tuple[str, int, int]]] = {}
    for e in events:
        if e.get("reason") != "FailedScheduling" or e.get("reportingController") != reporter:
            continue
        found = dry_run(e.get("note") or "")
        if found is None:
            continue
        times = int(((e.get("series") or {}).get("count")) or 1)
        out.setdefault((e.get("regarding") or {}).get("name", ""), []).append((*found, times))
    return out


@dataclass
class Seen:
    """One pod as the bench's watch saw it (epoch seconds)."""

    uid: str = ""
    bound: float | None = None
    node: str = ""
    running: float | None = None
    gone: float | None = None
    message: str = ""  # the last PodScheduled=False message
    nominated_node: str = ""
    nominations: list[tuple[float, str, int]] = field(default_factory=list)  # (seen, node, victims)
    nominated: list[tuple[float, str]] = field(default_factory=list)  # status.nominatedNodeName changes


class Tracker:
    """The namespace's pods from the bench's watch."""

    def __init__(self) -> None:
        self.pods: dict[str, Seen] = {}

    def on_event(self, now: float, pod: JSON) -> None:
        meta = pod.get("metadata") or {}
        seen = self.pods.setdefault(meta.get("name", ""), Seen())
        seen.uid = meta.get("uid", seen.uid)
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        if spec.get("nodeName") and seen.bound is None:
            seen.bound, seen.node = now, spec["nodeName"]
        if status.get("phase") == "Running" and seen.running is None:
            seen.running = now
        nominated = status.get("nominatedNodeName") or ""
        if nominated != seen.nominated_node:
            seen.nominated_node = nominated
            seen.nominated.append((now, nominated))
        for cond in status.get("conditions") or ():
            if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
                message = cond.get("message") or ""
                if message != seen.message:
                    seen.message = message
                    if (found := dry_run(message)) is not None:
                        seen.nominations.append((now, *found))

    def on_deleted(self, now: float, pod: JSON) -> None:
        seen = self.pods.setdefault((pod.get("metadata") or {}).get("name", ""), Seen())
        if seen.gone is None:
            seen.gone = now

    def bound(self, names: Iterable[str]) -> int:
        return sum(1 for n in names if (s := self.pods.get(n)) is not None and s.bound is not None)

    def running(self, names: Iterable[str]) -> int:
        return sum(1 for n in names if (s := self.pods.get(n)) is not None and s.running is not None)


@dataclass
class Preemptor:
    name: str
    half: str
    created: float
    bound: float | None
    node: str
    nominations: list[tuple[float, str, int]]
    victims: list[Victim]
    nominated: list[tuple[float, str]] = field(default_factory=list)  # status.nominatedNodeName changes

    @property
    def dry_run_victims(self) -> int:
        return sum(n for _, _, n in self.nominations)

    @property
    def victim_nodes(self) -> list[str]:
        return sorted({v.node for v in self.victims})

    @property
    def after_last_victim(self) -> float | None:
        """Seconds from its last victim gone to it bound (None: unbound, no victim, or a victim not
        seen gone)."""
        if self.bound is None or not self.victims or any(v.gone is None for v in self.victims):
            return None
        return self.bound - max(v.gone for v in self.victims if v.gone is not None)


def _quantiles(values: list[float]) -> JSON:
    s = sorted(values)
    out: JSON = {"n": len(s)}
    for q in (0.5, 0.99):
        v = percentile(s, q)
        out[f"p{int(q * 100)}"] = round(v, 3) if v is not None else None
    out["max"] = round(s[-1], 3) if s else None
    return out


def half_figures(
    preemptors: list[Preemptor],
    low_bound_meanwhile: int = 0,
    event_runs: Mapping[str, list[tuple[str, int, int]]] | None = None,
) -> JSON:
    """The figures of one half (cpu or devices) of one scheduler's preemptors. ``event_runs``: the
    dry runs of the FailedScheduling Events (``event_dry_runs``), summed with their series counts:
    they also count a nomination repeated with the same message, which leaves the pod unchanged."""
    bound = [p for p in preemptors if p.bound is not None]
    victims = sum(len(p.victims) for p in preemptors)
    dry = sum(p.dry_run_victims for p in preemptors)
    per = Counter(len(p.victims) for p in preemptors)
    lat = [x for p in preemptors if (x := p.after_last_victim) is not None]
    start = min((p.created for p in preemptors), default=0.0)
    end = max((p.bound for p in bound if p.bound is not None), default=start)
    return {
        "preemptors": len(preemptors),
        "bound": len(bound),
        "unbound": sorted(p.name for p in preemptors if p.bound is None),
        "victims": victims,
        "dry_run_victims": dry,
        "dry_run_victims_events": (
            sum(n * times for p in preemptors for _, n, times in event_runs.get(p.name, ()))
            if event_runs is not None
            else None
        ),
        "nominations": sum(len(p.nominations) for p in preemptors),
        "victims_per_preemptor": {str(k): per[k] for k in sorted(per)},
        "victims_per_preemptor_mean": round(victims / len(preemptors), 3) if preemptors else None,
        "victims_not_dry_run": sorted(p.name for p in preemptors if len(p.victims) != p.dry_run_victims),
        "nominated_more_than_once": sorted(p.name for p in preemptors if len(p.nominations) > 1),
        "multi_node": sorted(p.name for p in preemptors if len(p.victim_nodes) > 1),
        "bound_where_it_evicted_nothing": sorted(p.name for p in bound if p.victims and p.node not in p.victim_nodes),
        "bound_without_victims": sorted(p.name for p in bound if not p.victims),
        "victims_not_seen_gone": sum(1 for p in preemptors for v in p.victims if v.gone is None),
        "low_bound_meanwhile": low_bound_meanwhile,
        "after_last_victim_s": _quantiles(lat),
        "created_to_bound_s": _quantiles([p.bound - p.created for p in bound if p.bound is not None]),
        "span_s": round(end - start, 2) if bound else None,
    }


def suspicious(preemptors: list[Preemptor]) -> list[str]:
    """Names of the preemptors to look at: unbound, more or fewer victims than their dry runs
    named, victims on several nodes, or bound where they evicted nothing."""
    return sorted(
        p.name
        for p in preemptors
        if p.bound is None
        or len(p.victims) != p.dry_run_victims
        or len(p.victim_nodes) > 1
        or (p.victims and p.node not in p.victim_nodes)
    )


def _sig(v: float | None) -> str:
    return "-" if v is None else f"{v:.3g}"


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a is not None and b else "-"


def render(result: JSON) -> str:
    """One markdown table: a row per scheduler and half, then draxr / kube-scheduler on the cpu half."""
    head = (
        "| scheduler, half | bound | victims | dry runs' sum (pods / Events) | victims/preemptor | multi-node "
        "| bound where it evicted nothing | low pods bound meanwhile | gone → bound p50 s | p99 s | max s "
        "| created → bound p50 s | p99 s | span s |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    rows = [head]
    phases = {p["scheduler"]: p for p in result.get("phases", [])}
    for sched, phase in phases.items():
        for half, f in phase["halves"].items():
            a, c = f["after_last_victim_s"], f["created_to_bound_s"]
            per = ", ".join(f"{k}: {n}" for k, n in f["victims_per_preemptor"].items())
            events = f.get("dry_run_victims_events")
            elsewhere = len(f["bound_where_it_evicted_nothing"]) + len(f["bound_without_victims"])
            rows.append(
                f"| {sched}, {half} | {f['bound']}/{f['preemptors']} | {f['victims']} "
                f"| {f['dry_run_victims']} / {'-' if events is None else events} | {per} | {len(f['multi_node'])} "
                f"| {elsewhere} | {f['low_bound_meanwhile']} | {_sig(a['p50'])} "
                f"| {_sig(a['p99'])} | {_sig(a['max'])} | {_sig(c['p50'])} | {_sig(c['p99'])} | {_sig(f['span_s'])} |"
            )
    if "draxr" in phases and "kube-scheduler" in phases:
        d, k = phases["draxr"]["halves"].get("cpu"), phases["kube-scheduler"]["halves"].get("cpu")
        if d and k:
            a, b = d["after_last_victim_s"], k["after_last_victim_s"]
            c, e = d["created_to_bound_s"], k["created_to_bound_s"]
            rows.append(
                f"| **draxr / kube-scheduler, cpu** | | | | | | | | {_ratio(a['p50'], b['p50'])} "
                f"| {_ratio(a['p99'], b['p99'])} | {_ratio(a['max'], b['max'])} | {_ratio(c['p50'], e['p50'])} "
                f"| {_ratio(c['p99'], e['p99'])} | {_ratio(d['span_s'], k['span_s'])} |"
            )
    return "\n".join(rows)


def schedule(preemptors: int, arrival_seconds: float) -> list[tuple[float, str, str]]:
    """(offset s, name, half) of every preemptor: evenly over the arrival window, the halves in turn."""
    step = arrival_seconds / preemptors if preemptors else 0.0
    out = []
    for k in range(preemptors):
        half = HALVES[k % 2]
        out.append((round(k * step, 6), f"hi-{SHORT[half]}-{k}", half))
    return out


def sizes(nodes: int, devices: int, running: int) -> JSON:
    """The fleet's split and the fill: k pods per node (cpu k per node), the cpu half the first
    nodes // 2. The device half's devices are full when k == devices."""
    if nodes < 2:
        raise ValueError("--nodes must be at least 2 (two halves)")
    per_node = running // nodes
    if per_node < 2:
        raise ValueError(f"--running {running} is fewer than 2 pods per node: a preemptor needs the room of two")
    if per_node > devices:
        raise ValueError(f"--running {running} puts {per_node} pods per node on {devices} devices")
    cpu_nodes = nodes // 2
    return {
        "per_node": per_node,
        "node_cpu": per_node,
        "cpu_nodes": cpu_nodes,
        "device_nodes": nodes - cpu_nodes,
        "fill": {"cpu": per_node * cpu_nodes, "devices": per_node * (nodes - cpu_nodes)},
        "devices_full": per_node == devices,
    }


# ---- the cluster -------------------------------------------------------------------------------------------


def fleet_objects(nodes: int, devices: int, node_cpu: int, cpu_nodes: int) -> list[JSON]:
    fleet = fakedriver.Fleet(prefix="pd", dra_nodes=nodes, devices_per_node=devices, classes={"gpu.example.com": EXT})
    objs = fleet.manifests()
    for i, obj in enumerate(o for o in objs if o["kind"] == "Node"):
        obj["metadata"]["labels"][HALF_LABEL] = "cpu" if i < cpu_nodes else "devices"
        obj["status"]["allocatable"]["cpu"] = obj["status"]["capacity"]["cpu"] = str(node_cpu)
    return objs


def resources(half: str, preemptor: bool) -> dict[str, str]:
    n = 2 if preemptor else 1
    return {"cpu": str(n)} | ({EXT: str(n)} if half == "devices" else {})


def body(name: str, scheduler: str, half: str, preemptor: bool) -> JSON:
    b = pod_body(name, scheduler, "cpu", 1, None)
    spec = b["spec"]
    spec["containers"][0]["resources"] = {"limits": resources(half, preemptor)}
    spec["priorityClassName"] = HIGH if preemptor else LOW
    spec["nodeSelector"] = {HALF_LABEL: half}
    return b


def deployment(name: str, replicas: int, scheduler: str, half: str) -> JSON:
    template = body(name, scheduler, half, preemptor=False)
    template["spec"]["restartPolicy"] = "Always"
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": template["spec"]},
        },
    }


async def create_priority_classes(kube: Kube) -> None:
    for name, value in ((LOW, 0), (HIGH, 100000)):
        obj = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
        }
        try:
            await kube.create(PRIORITY_CLASSES, obj)
        except ApiException as e:
            if e.status != 409:
                raise


async def wait_for(
    what: str,
    done: Callable[[], bool],
    timeout: float,
    stall: float | None = None,
    progress: Callable[[], object] | None = None,
) -> bool:
    """Poll ``done()`` every 0.2 s until true, ``timeout``, or (with ``progress()``, a count) no progress
    for ``stall`` seconds; False when it gave up."""
    t0 = time.monotonic()
    last, last_at = progress() if progress else 0, t0
    while not done():
        now = time.monotonic()
        if progress is not None and (p := progress()) != last:
            last, last_at = p, now
        if now - t0 > timeout or (stall is not None and now - last_at > stall):
            log(f"  {what}: gave up after {now - t0:.0f}s" + (f" ({last})" if progress else ""))
            return False
        await asyncio.sleep(0.2)
    return True


async def settled_events(kube: Kube, ns: str, reporter: str, timeout: float = 60) -> list[JSON]:
    """The namespace's Events once the scheduler's Preempted ones stop changing (3 s alike)."""
    t0, last, same = time.monotonic(), -1, 0
    events: list[JSON] = []
    while time.monotonic() - t0 < timeout:
        events = await kube.list(EVENTS, ns, limit=500)
        n = sum(1 for e in events if e.get("reason") == "Preempted" and e.get("reportingController") == reporter)
        same = same + 1 if n == last else 0
        last = n
        if same >= 3:
            break
        await asyncio.sleep(1)
    return events


def room_taken(preemptors: list[Preemptor], tracker: Tracker) -> dict[str, list[tuple[str, str, float]]]:
    """Per preemptor: the pods bound on a node where it evicted but was not bound, after its first
    victim there was gone: (pod, node, seconds after that)."""
    out: dict[str, list[tuple[str, str, float]]] = {}
    for p in preemptors:
        for node in p.victim_nodes:
            if node == p.node:
                continue
            gone = [v.gone for v in p.victims if v.node == node and v.gone is not None]
            if not gone:
                continue
            for name, seen in tracker.pods.items():
                if seen.node == node and seen.bound is not None and seen.bound >= min(gone):
                    out.setdefault(p.name, []).append((name, node, round(seen.bound - min(gone), 3)))
    return out


def log_lines(path: Path, needles: Iterable[str], limit: int = 40) -> dict[str, list[str]]:
    """draxr's log lines naming each needle (a pod's namespace/name), the first ``limit`` of each."""
    out: dict[str, list[str]] = {n: [] for n in needles}
    if not out or not path.exists():
        return out
    with path.open(errors="replace") as f:
        for line in f:
            for n, lines in out.items():
                if len(lines) < limit and (f"{n}'" in line or f'{n}"' in line or f"{n} " in line):
                    lines.append(line.rstrip()[:600])
    return out


# ---- one scheduler's phase ---------------------------------------------------------------------------------


async def run_phase(
    args: argparse.Namespace, http: Http, kube: Kube, sched: str, draxr: Draxr | None, ks_pid: int | None
) -> JSON:
    size = sizes(args.nodes, args.devices, args.running)
    ns, name_of = NAMESPACES_OF[sched], SCHEDULER_NAMES[sched]
    fig: JSON = {"scheduler": sched, "namespace": ns, "load_before": os.getloadavg()}
    phase = Phase(http, kube, ns)
    await phase.create_namespace()
    if draxr is not None:
        fig["draxr_start"] = await draxr.start()
        fig["draxr_log"] = str(draxr.log_path)
        log(f"draxr started: {fig['draxr_start']}")
    pid = draxr.pid if draxr is not None else ks_pid
    tracker = Tracker()
    watch = asyncio.create_task(http.watch_pods(ns, tracker.on_event, tracker.on_deleted))
    deployments = [f"retry-{SHORT[h]}" for h in HALVES]
    try:
        await asyncio.sleep(0.5)  # the watch is established
        # 1. fill
        fill = [
            body(f"low-{SHORT[h]}-{i}", name_of, h, preemptor=False) for h in HALVES for i in range(size["fill"][h])
        ]
        names = [b["metadata"]["name"] for b in fill]
        t0 = time.monotonic()
        log(f"{sched}: fill, {len(fill)} low pods ({size['fill']})")
        await gather_bounded([phase.create(b) for b in fill], limit=32)
        ok = await wait_for(
            "fill",
            lambda: tracker.running(names) == len(names),
            args.fill_timeout,
            stall=120,
            progress=lambda: (tracker.bound(names), tracker.running(names)),
        )
        fig["fill"] = {"pods": len(fill), "bound": tracker.bound(names), "running": tracker.running(names)}
        fig["fill"]["seconds"] = round(time.monotonic() - t0, 1)
        log(f"  fill: {fig['fill']}")
        if not ok:
            fig["aborted"] = "the fill did not complete"
            return fig
        # 2. lower-priority pods that keep retrying
        for d, h in zip(deployments, HALVES, strict=True):
            await kube.create(DEPLOYMENTS, deployment(d, args.retrying, name_of, h), ns)

        def retry_pods() -> list[str]:
            return [n for n in tracker.pods if n.startswith("retry-")]

        def tried() -> int:
            return sum(1 for n in retry_pods() if dry_run(tracker.pods[n].message) is None and tracker.pods[n].message)

        await wait_for("retrying pods tried", lambda: tried() >= 2 * args.retrying, 120)
        await asyncio.sleep(2)
        bound_before = {n for n in retry_pods() if tracker.pods[n].bound is not None}
        fig["retrying"] = {"replicas_per_half": args.retrying, "tried": tried(), "bound_before": len(bound_before)}
        # 3. preemptors
        plan = schedule(args.preemptors, args.arrival_seconds)
        if sched == "kube-scheduler":
            plan = [(t, n, h) for t, n, h in plan if h == "cpu"]
        cpu_before = proc_figures(pid).get("cpu_s", 0.0)
        created: dict[str, float] = {}
        log(f"{sched}: {len(plan)} preemptors over {args.arrival_seconds:.0f}s")
        start = time.monotonic()
        epoch0 = time.time()

        async def create(name: str, half: str) -> None:
            created[name] = time.time()
            await phase.create(body(name, name_of, half, preemptor=True))

        tasks = []
        for offset, name, half in plan:
            delay = start + offset - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(create(name, half)))
        await asyncio.gather(*tasks)
        want = [n for _, n, _ in plan]
        await wait_for(
            "preemptors bound",
            lambda: tracker.bound(want) == len(want),
            args.timeout,
            progress=lambda: tracker.bound(want),
        )
        fig["preempt_seconds"] = round(time.monotonic() - start, 1)
        fig["cpu_s"] = round(proc_figures(pid).get("cpu_s", 0.0) - cpu_before, 2)
        fig["load_after"] = os.getloadavg()
        await asyncio.sleep(2)  # the last victims' DELETED events
        events = await settled_events(kube, ns, name_of)
        by_uid = preempted_by(events, name_of)
        runs = event_dry_runs(events, name_of)
        fig["events_dry_runs"] = {n: v for n, v in runs.items() if n in created}
        preemptors: list[Preemptor] = []
        for _, name, half in plan:
            seen = tracker.pods.get(name, Seen())
            victims = by_uid.get(seen.uid, []) if seen.uid else []
            for v in victims:
                v.gone = (tracker.pods.get(v.name) or Seen()).gone
            preemptors.append(
                Preemptor(name, half, created[name], seen.bound, seen.node, seen.nominations, victims, seen.nominated)
            )
        uids = {tracker.pods[p.name].uid for p in preemptors if p.name in tracker.pods}
        fig["preempted_by_others"] = sum(len(v) for u, v in by_uid.items() if u not in uids)
        fig["halves"] = {}
        for h in HALVES:
            mine = [p for p in preemptors if p.half == h]
            if not mine:
                continue
            meanwhile = sum(
                1
                for n in retry_pods()
                if n.startswith(f"retry-{SHORT[h]}-")
                and n not in bound_before
                and (b := tracker.pods[n].bound) is not None
                and b >= epoch0
            )
            fig["halves"][h] = half_figures(mine, meanwhile, runs)
        fig["preemptors"] = [
            asdict(p) | {"after_last_victim_s": p.after_last_victim, "victim_nodes": p.victim_nodes} for p in preemptors
        ]
        odd = suspicious(preemptors)
        fig["suspicious"] = odd
        fig["room_taken"] = room_taken([p for p in preemptors if p.name in odd], tracker)
        if odd and draxr is not None:
            fig["suspicious_log"] = log_lines(draxr.log_path, [f"{ns}/{n}" for n in odd])
        for h, f in fig["halves"].items():
            log(
                f"  {h}: {f['bound']}/{f['preemptors']} bound, victims {f['victims']} "
                f"(dry runs {f['dry_run_victims']}), "
                f"multi-node {len(f['multi_node'])}, gone->bound {f['after_last_victim_s']}"
            )
        return fig
    finally:
        watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watch
        for d in deployments:
            await tolerant(
                f"delete {d}", functools.partial(kube.delete_if_exists, DEPLOYMENTS, d, ns), time.monotonic() + 60
            )
        await asyncio.sleep(1)  # (the ReplicaSets go with their Deployment; their pods are deleted below)
        seconds, clean = await phase.cleanup(max(600.0, 0.05 * args.running))
        fig["cleanup"] = {"seconds": round(seconds, 1), "clean": clean}
        if draxr is not None:  # (after the clean-up: it releases its pods' claims)
            draxr.stop()
        log(f"  cleaned up in {seconds:.1f}s ({'clean' if clean else 'NOT CLEAN'})")


async def bench(args: argparse.Namespace, cp: ControlPlane, holder: list[Draxr]) -> JSON:
    size = sizes(args.nodes, args.devices, args.running)
    result: JSON = {
        "config": {k: v for k, v in vars(args).items() if k != "out"},
        "sizes": size,
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "commit": _commit(),
        "draxr_code": args.draxr_pythonpath or "this checkout's operator/",
        "phases": [],
    }
    if not size["devices_full"]:
        log(f"note: {size['per_node']} pods per node on {args.devices} devices: the device half is not full")
    kube = await Kube.from_kubeconfig(cp.kubeconfig)
    http = Http(cp)
    try:
        await apply_fleet(
            kube, fleet_objects(args.nodes, args.devices, size["node_cpu"], size["cpu_nodes"]), args.nodes, 900
        )
        await create_priority_classes(kube)
        draxr = None
        if "draxr" in args.schedulers:
            kubeconfig = await draxr_kubeconfig(kube, cp)
            draxr = Draxr(kubeconfig, cp.run_dir, args.qps, args.burst, args.draxr_args.split(), args.draxr_pythonpath)
            holder.append(draxr)
        for sched in args.schedulers:
            fig = await run_phase(
                args, http, kube, sched, draxr if sched == "draxr" else None, cp.pids.get("kube-scheduler")
            )
            result["phases"].append(fig)
            if fig.get("aborted") or not fig.get("cleanup", {}).get("clean", True):
                result["aborted"] = f"{sched}: {fig.get('aborted') or 'pods or claims left after the clean-up'}"
                log(f"stopping the run: {result['aborted']}")
                break
    finally:
        await http.close()
        await kube.close()
    return result


def _commit() -> str:
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        dirty = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "operator"], capture_output=True, text=True
        )
    except OSError:
        return ""
    return head.stdout.strip() + ("+operator-changes" if dirty.stdout.strip() else "")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=500)
    p.add_argument("--devices", type=int, default=8)
    p.add_argument("--running", type=int, default=0, help="low pods running before (default: nodes x devices)")
    p.add_argument("--preemptors", type=int, default=200, help="high pods, half cpu, half devices")
    p.add_argument("--arrival-seconds", type=float, default=20, help="the preemptors arrive evenly over this")
    p.add_argument("--retrying", type=int, default=10, help="low replicas per half that do not fit (a Deployment)")
    p.add_argument("--schedulers", default="kube-scheduler,draxr", type=lambda s: s.split(","), help="in this order")
    p.add_argument("--qps", type=float, default=500, help="client QPS of both schedulers")
    p.add_argument("--burst", type=int, default=1000, help="client burst of both schedulers")
    p.add_argument("--draxr-args", default="", help="more `draxr run` flags")
    p.add_argument(
        "--draxr-pythonpath", default="", help="PYTHONPATH of the draxr process only (another tree's operator/)"
    )
    p.add_argument("--fill-timeout", type=float, default=900, help="seconds for the fill to be bound and Running")
    p.add_argument("--timeout", type=float, default=600, help="seconds for the preemptors to be bound")
    p.add_argument("--ci", action="store_true", help="a quick check: 20 nodes x 8, 160 running, 20 preemptors in 5 s")
    p.add_argument("--keep", action="store_true", help="keep the run directory (logs)")
    p.add_argument("--out", default=None, help="JSON path (default bench/results/preemption-dynamics-<n>x<d>.json)")
    args = p.parse_args(argv)
    if args.ci:
        args.nodes, args.devices, args.running, args.preemptors = 20, 8, 160, 20
        args.arrival_seconds, args.retrying = 5, 4
    args.running = args.running or args.nodes * args.devices
    for s in args.schedulers:
        if s not in NAMESPACES_OF:
            p.error(f"unknown scheduler {s!r} (kube-scheduler, draxr)")
    try:
        sizes(args.nodes, args.devices, args.running)
    except ValueError as e:
        p.error(str(e))

    binaries = ensure_binaries()
    run_dir = Path(tempfile.mkdtemp(prefix="draxr-preemption."))
    options = Options(
        scheduler="kube-scheduler" in args.schedulers,
        kwok=True,
        scheduler_qps=args.qps,
        scheduler_burst=args.burst,
    )
    cp = ControlPlane(binaries=binaries, run_dir=run_dir, options=options)
    holder: list[Draxr] = []
    result: JSON = {}
    t0 = time.monotonic()
    try:
        cp.start()
        log(f"control plane up in {cp.timings['total']:.1f}s ({run_dir})")
        result = asyncio.run(bench(args, cp, holder))
    finally:
        for d in holder:
            d.stop()
        cp.stop()
    result["wall_s"] = round(time.monotonic() - t0, 1)
    result["run_dir"] = str(run_dir) if args.keep else None
    out = Path(args.out) if args.out else RESULTS / f"preemption-dynamics-{args.nodes}x{args.devices}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    if result.get("phases"):
        print(render(result))
        for ph in result["phases"]:
            if ph.get("suspicious"):
                print(f"\n{ph['scheduler']}: look at {', '.join(ph['suspicious'])} (details in the JSON)")
    if result.get("aborted"):
        print(f"\nRUN STOPPED EARLY: {result['aborted']}")
    log(f"results in {out}")
    if args.keep:
        log(f"run directory kept: {run_dir}")
    else:
        shutil.rmtree(run_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
