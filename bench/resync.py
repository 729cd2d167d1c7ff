"""draxr's restart with many bound pods, without scheduling them first: synced and leading times.

    nice -n 5 .venv/bin/python bench/resync.py --nodes 5000 --devices 8 --pods 40000 \\
        --before /work/main/operator --out bench/results/resync-5000x8-40000.json

A fresh control plane (etcd, kube-apiserver, kube-controller-manager; no kwok, no kube-scheduler:
the nodes are plain Node objects that nothing heartbeats, and KCM's node grace is an hour so that
no taint evicts the pods), N nodes with one ResourceSlice of M devices each, C DeviceClasses, then P
pods already bound, written exactly as a scheduler writes them (bench/api_ceiling.py's ``bind``: the
special claim with its finalizer, its allocation status with a round-robin device, the pod's
``extendedResourceClaimStatus``, the Binding). Then ``draxr run`` (leader election on, its own
ServiceAccount) is started once per variant, in this order, and timed to "initial sync done" and
"leading":

* ``before``: the code at ``--before`` (a checkout's ``operator`` dir on PYTHONPATH), if given;
* ``after``:  this checkout, restarted cleanly after the one before (the lease was released);
* ``crash``:  this checkout after the one before it was SIGKILLed (the lease is held: draxr waits
  for it to expire, then catches up), with ``--crash``.

Per variant: synced/leading seconds, draxr's CPU seconds to leading, RSS and peak RSS at leading
and ``--settle`` seconds later, and the CPU seconds kube-apiserver and etcd spent meanwhile (the
API server's share of the resync); ``--profile`` records the ``after`` start with py-spy. Also the
size of each kind's objects as listed (JSON bytes). No pod is scheduled: this measures resync only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from api_ceiling import Ceiling, device_slots
from draxr.kube import (
    NAMESPACES,
    NODES,
    PODS,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    SERVICE_ACCOUNTS,
    ApiException,
    Kube,
    set_default_rate_limit,
)
from draxr_dev.devcluster import fakedriver
from draxr_dev.devcluster.binaries import ensure_binaries
from draxr_dev.devcluster.controlplane import LOOPBACK, ControlPlane, Options, free_port
from draxr_dev.devcluster.process import DraxrProcess
from e2e import (
    DRAXR_NS,
    draxr_kubeconfig,
    gather_bounded,
    pod_body,
    proc_figures,
    start_profiler,
    stop_profiler,
)

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
NS = "rs"
JSONish = dict[str, Any]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


async def load(kube: Kube, args: argparse.Namespace) -> JSONish:
    """The fleet, then the bound pods; returns the timings and counts."""
    fleet = fakedriver.Fleet(
        prefix="bench",
        dra_nodes=args.nodes,
        devices_per_node=args.devices,
        classes={f"gpu-{i}": f"example.com/gpu-{i}" for i in range(args.classes)},
    )
    t0 = time.monotonic()
    objs = fleet.manifests()
    await gather_bounded([fakedriver.apply(kube, [o]) for o in objs], limit=args.concurrency)
    fleet_s = time.monotonic() - t0
    log(f"created {fakedriver.summary(objs)} in {fleet_s:.1f}s")
    await kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    for _ in range(120):  # KCM's serviceaccount controller: pods need the namespace's "default"
        try:
            await kube.get(SERVICE_ACCOUNTS, "default", NS)
            break
        except ApiException:
            await asyncio.sleep(0.5)
    nodes = {n["metadata"]["name"] for n in await kube.list(NODES)}
    ceiling = Ceiling(kube, "draxr", args.concurrency, device_slots(await kube.list(RESOURCE_SLICES), nodes))
    t1 = time.monotonic()
    done = 0

    async def one(k: int) -> None:
        nonlocal done
        if time.monotonic() - t1 > args.load_seconds:
            return  # (the time budget: resync with the pods written so far)
        body = pod_body(f"p-{k}", "draxr", f"example.com/gpu-{k % args.classes}", 1, None)
        for attempt in range(5):
            try:
                created = await kube.create(PODS, body, NS)
                break
            except ApiException as e:
                if attempt == 4 or e.status not in (429, 500, 503, 504):
                    raise
                await asyncio.sleep(1 + attempt)
        await ceiling.bind(created)
        done += 1
        if done % 5000 == 0:
            log(f"  {done} pods bound ({done / (time.monotonic() - t1):.0f}/s)")

    await gather_bounded([one(k) for k in range(args.pods)], limit=args.concurrency)
    pods_s = time.monotonic() - t1
    log(f"{done} bound pods written in {pods_s:.1f}s ({done / pods_s:.0f}/s)")
    return {"fleet_s": round(fleet_s, 1), "pods_s": round(pods_s, 1), "pods": done}


async def sizes(kube: Kube) -> JSONish:
    """Objects and JSON bytes per kind, as a list returns them (the informers' initial lists)."""
    out: JSONish = {}
    for res in (NODES, RESOURCE_SLICES, RESOURCE_CLAIMS, PODS):
        t0 = time.monotonic()
        count = size = 0
        async for page in kube.pages(res, limit=500):
            count += len(page)
            size += sum(len(json.dumps(o, separators=(",", ":"))) for o in page)
        out[res.plural] = {"objects": count, "mib": round(size / 2**20, 1), "list_s": round(time.monotonic() - t0, 1)}
    return out


class Run:
    """One ``draxr run`` with leader election, from a given code tree."""

    def __init__(self, kubeconfig: Path, run_dir: Path, label: str, operator_dir: str | None) -> None:
        self.kubeconfig, self.run_dir, self.label = kubeconfig, run_dir, label
        env = dict(os.environ)
        if operator_dir:
            env["PYTHONPATH"] = os.pathsep.join([operator_dir, *filter(None, [env.get("PYTHONPATH")])])
        args = [
            "--scheduler-name", "draxr",
            "--leader-elect", "true",
            "--leader-election-namespace", DRAXR_NS,
            "--kubeconfig", str(kubeconfig),
            "--bind-address", LOOPBACK,
            "--metrics-port", str(free_port()),
            "--health-port", str(free_port()),
        ]  # fmt: skip
        self.log_path = run_dir / f"draxr-{label}.log"
        self.proc = DraxrProcess(args, log=self.log_path, environ=env)
        self.t0, self.wall0 = time.monotonic(), time.time()

    def timeline(self) -> JSONish:
        """Seconds from the start to each step in draxr's log: every watch synced (and its
        objects), the initial sync, the lease, the catch-up (objects listed), leading."""
        out: JSONish = {}
        for line in self.proc.lines():
            event, stamp = str(line.get("event", "")), line.get("timestamp")
            if not stamp:
                continue
            at = round(datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp() - self.wall0, 2)
            if event == "watch synced":
                out[f"synced.{line.get('watch')}"] = [at, line.get("objects")]
            elif event == "caught up with the API server":
                out["caught_up"] = [at, line.get("objects")]
            elif event in ("initial sync done", "became leader") or event.startswith(("leading:", "listed since")):
                out.setdefault(event.split(":")[0], at)
        return out

    async def wait(self, cp_pids: dict[str, int], timeout: float, settle: float) -> JSONish:
        cp0 = {k: proc_figures(p).get("cpu_s", 0.0) for k, p in cp_pids.items()}
        out: JSONish = {"variant": self.label}
        while time.monotonic() - self.t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"draxr ({self.label}) exited; see {self.log_path}")
            text = self.proc.text()
            if "initial sync done" in text and "synced_s" not in out:
                out["synced_s"] = round(time.monotonic() - self.t0, 1)
            if "leading: scheduling" in text:
                out["leading_s"] = round(time.monotonic() - self.t0, 1)
                break
            await asyncio.sleep(0.1)
        else:
            raise TimeoutError(f"draxr ({self.label}) not leading after {timeout:.0f}s")
        out["at_leading"] = proc_figures(self.proc.pid)
        out["control_plane_cpu_s"] = {
            k: round(proc_figures(p).get("cpu_s", 0.0) - cp0[k], 1) for k, p in cp_pids.items()
        }
        out["caught_up"] = "caught up with the API server" in text and "no catch-up for" not in text
        out["timeline"] = self.timeline()
        await asyncio.sleep(settle)
        out["after_settle"] = proc_figures(self.proc.pid)
        log(f"  {self.label}: {out}")
        return out

    def stop(self, kill: bool = False) -> None:
        if kill:
            self.proc.proc.send_signal(signal.SIGKILL)
            self.proc.proc.wait()
        else:
            self.proc.stop(30)


async def bench(args: argparse.Namespace, cp: ControlPlane) -> JSONish:
    set_default_rate_limit(4000, 8000)
    result: JSONish = {"args": vars(args), "runs": []}
    async with await Kube.from_kubeconfig(cp.kubeconfig) as kube:
        result["load"] = await load(kube, args)
        result["sizes"] = await sizes(kube)
        log(f"sizes: {result['sizes']}")
        kubeconfig = await draxr_kubeconfig(kube, cp)
    pids = {k: v for k, v in cp.pids.items() if k in ("kube-apiserver", "etcd")}
    variants: list[tuple[str, str | None]] = []
    if args.before:
        variants.append(("before", args.before))
    variants.append(("after", None))
    if args.crash:
        variants.append(("crash", None))
    previous: Run | None = None
    for label, tree in variants:
        if previous is not None:
            previous.stop(kill=label == "crash")
        run = Run(kubeconfig, cp.run_dir, label, tree)
        profiler = None
        if args.profile and label == "after":
            profiler = start_profiler(run.proc.pid, cp.run_dir / "resync.pyspy")
        result["runs"].append(await run.wait(pids, args.timeout, args.settle))
        if profiler is not None:
            result["profile"] = stop_profiler(profiler, cp.run_dir / "resync.pyspy", args.out_profile)
        previous = run
    if previous is not None:
        previous.stop()
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=5000)
    p.add_argument("--devices", type=int, default=8)
    p.add_argument("--classes", type=int, default=25)
    p.add_argument("--pods", type=int, default=40000, help="bound pods (at most nodes x devices)")
    p.add_argument("--concurrency", type=int, default=96, help="pods written at once")
    p.add_argument("--load-seconds", type=float, default=900, help="stop writing pods after this long")
    p.add_argument("--before", default=None, help="an 'operator' dir with the code to compare against")
    p.add_argument("--crash", action="store_true", help="also: SIGKILL, then a start that must catch up")
    p.add_argument("--settle", type=float, default=20, help="seconds after leading before RSS is read again")
    p.add_argument("--timeout", type=float, default=600, help="per draxr start")
    p.add_argument("--profile", action="store_true", help="py-spy the 'after' start")
    p.add_argument("--out-profile", default=None, help="also keep py-spy's raw collapsed stacks here")
    p.add_argument("--out", default=None, help="JSON path (default bench/results/resync-<n>x<d>-<pods>.json)")
    p.add_argument("--keep", action="store_true", help="keep the run directory (logs)")
    args = p.parse_args()
    if args.pods > args.nodes * args.devices:
        p.error("--pods exceeds the devices")
    run_dir = Path(tempfile.mkdtemp(prefix="draxr-resync."))
    options = Options(scheduler=False, kwok=False, node_monitor_grace_seconds=3600)
    cp = ControlPlane(binaries=ensure_binaries(), run_dir=run_dir, options=options)
    t0 = time.monotonic()
    result: JSONish = {}
    try:
        cp.start()
        log(f"control plane up in {cp.timings['total']:.1f}s ({run_dir})")
        result = asyncio.run(bench(args, cp))
        result["control_plane_peak_rss_mib"] = {k: round(v) for k, v in cp.rss_mib().items() if k.endswith(".peak")}
    finally:
        cp.stop()
    result["wall_s"] = round(time.monotonic() - t0, 1)
    out = Path(args.out) if args.out else RESULTS / f"resync-{args.nodes}x{args.devices}-{args.pods}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    for r in result.get("runs", []):
        at, later = r.get("at_leading", {}), r.get("after_settle", {})
        log(
            f"{r['variant']:>6}: synced {r.get('synced_s')} s, leading {r.get('leading_s')} s,"
            f" catch-up {r['caught_up']},"
            f" draxr {at.get('cpu_s', 0):.1f} CPU-s, RSS {at.get('rss_mib', 0):.0f} MiB (peak"
            f" {later.get('peak_rss_mib', 0):.0f}, {later.get('rss_mib', 0):.0f} after settle), control plane"
            f" CPU-s {r['control_plane_cpu_s']}"
        )
    if result.get("profile"):
        print("\ndraxr 'after' start, py-spy (self %):")
        for f, pct in result["profile"]["self"][:20]:
            print(f"  {pct:5.1f}%  {f}")
    log(f"results in {out}")
    if args.keep:
        log(f"run directory kept: {run_dir}")
    else:
        shutil.rmtree(run_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
