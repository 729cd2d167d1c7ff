"""Event-loop fairness: how late the main loop runs other work while the scheduling loop works off a
burst of pending pods. Printed figures, not a test.

    .venv/bin/python bench/event_loop_lag.py --nodes 5000 --pods 10000 [--turn 0.05]

The operator's real Scheduler runs its loop (``Scheduler.run``) on an in-memory cluster of N nodes
× 8 fake GPUs (25 classes) with P pending pods queued at once. The API is a stand-in that answers
every write after --api-latency (this measures the loop, not the API server). Beside it, the operator's own
lag probe (``Health.measure_lag``, a 0.5 s timer) and a probe that stands for the watches: a task
that wakes every 10 ms and records how late it woke. The run ends when every pod is bound (or
--seconds pass), and is repeated with the turn budget off (``--turn`` huge) for comparison.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from typing import Any

from draxr import logs, metrics
from draxr.events import Recorder
from draxr.health import Health
from draxr.scheduler import Scheduler
from draxr.settings import Settings
from scheduling_decisions import build, pod


class InstantApi:
    """Answers every write as the API server would, after ``latency`` seconds (a round trip), without
    one: enough for the binder's path."""

    def __init__(self, latency: float) -> None:
        self.latency = latency
        self.writes = 0

    async def _call(self) -> None:
        self.writes += 1
        await asyncio.sleep(self.latency)

    async def create(self, res: Any, body: dict[str, Any], namespace: str | None = None, **_: Any) -> dict[str, Any]:
        await self._call()
        meta = dict(body.get("metadata") or {})
        if "generateName" in meta and "name" not in meta:
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        meta.setdefault("uid", str(uuid.uuid4()))
        meta["resourceVersion"] = str(self.writes)
        meta.setdefault("namespace", namespace)
        return {**body, "metadata": meta}

    async def replace(self, res: Any, body: dict[str, Any], namespace: str | None = None, **_: Any) -> dict[str, Any]:
        await self._call()
        return {**body, "metadata": {**body["metadata"], "resourceVersion": str(self.writes)}}

    async def patch(self, *_: Any, **__: Any) -> dict[str, Any]:
        await self._call()
        return {}

    async def request(self, *_: Any, **__: Any) -> dict[str, Any]:
        await self._call()
        return {}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


async def one_run(args: argparse.Namespace, turn: float) -> dict[str, Any]:
    state = build(args.nodes, 8, 25, selector=False)
    api = InstantApi(args.api_latency)
    settings = Settings(scheduler_turn_seconds=turn, bind_concurrency=64)
    scheduler = Scheduler(api, state, settings, Recorder(api, "draxr"))  # type: ignore[arg-type]
    for i in range(args.pods):
        info = state.upsert_pod(pod(i, 25, 1))
        scheduler.pod_changed(info)
    health = Health([], watch_deadline=1e9, scheduling_stall=1e9)
    lags: list[float] = []
    watch_lateness: list[float] = []

    async def probe() -> None:
        loop = asyncio.get_running_loop()
        while True:
            t0 = loop.time()
            await asyncio.sleep(0.01)
            watch_lateness.append(loop.time() - t0 - 0.01)

    async def lag() -> None:
        while True:
            await asyncio.sleep(0.5)
            lags.append(health.lag)

    tasks = [asyncio.create_task(c) for c in (health.measure_lag(), probe(), lag())]
    await asyncio.sleep(0)  # the probes take their first timestamps before the scheduler starts
    tasks.append(asyncio.create_task(scheduler.run()))
    attempts0 = {
        r: metrics.SCHEDULE_ATTEMPTS.labels(result=r)._value.get() for r in ("scheduled", "unschedulable", "error")
    }
    yields0 = metrics.SCHEDULER_YIELDS._value.get()
    t0 = time.monotonic()
    cpu0 = time.process_time()
    try:
        while time.monotonic() - t0 < args.seconds:
            await asyncio.sleep(0.2)
            if scheduler.queue.waiting and not scheduler._tasks:
                break
        await asyncio.sleep(0.6)  # let both probes fire once more (a starved probe records its one late wake-up)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await scheduler.drain()
    elapsed = time.monotonic() - t0
    attempts = {
        r: metrics.SCHEDULE_ATTEMPTS.labels(result=r)._value.get() - attempts0[r]
        for r in ("scheduled", "unschedulable", "error")
    }
    yields = metrics.SCHEDULER_YIELDS._value.get() - yields0
    bound = sum(1 for p in state.pods.values() if p.uid in state.assumed_nodes or p.node_name)
    return {
        "turn": turn,
        "bound": bound,
        "seconds": elapsed,
        "cpu": time.process_time() - cpu0,
        "lag_p50": percentile(lags, 0.5),
        "lag_p99": percentile(lags, 0.99),
        "lag_max": max(lags, default=0.0),
        "watch_p50": statistics.median(watch_lateness) if watch_lateness else 0.0,
        "watch_p99": percentile(watch_lateness, 0.99),
        "watch_max": max(watch_lateness, default=0.0),
        "watch_wakeups": len(watch_lateness),
        "attempts": attempts,
        "yields": yields,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--pods", type=int, default=10000)
    ap.add_argument("--turn", type=float, default=0.05, help="the scheduling loop's turn budget, seconds")
    ap.add_argument("--seconds", type=float, default=600, help="stop a run after this long")
    ap.add_argument("--api-latency", type=float, default=0.005, help="seconds each stand-in API call takes")
    ap.add_argument("--log-level", default="warning", help="the operator's log level (info: one line per pod)")
    args = ap.parse_args()
    logs.configure(args.log_level, "json")
    print(f"{args.nodes} nodes x 8 devices, {args.pods} pending pods queued at once")
    print(
        "| turn budget | pods bound | s | pods/s | loop lag p50 / p99 / max (ms) "
        "| 10 ms timer late p50 / p99 / max (ms) |"
    )
    print("|---|---|---|---|---|---|")
    for turn in (args.turn, 1e9):
        r = asyncio.run(one_run(args, turn))
        label = f"{turn * 1000:.0f} ms" if turn < 1e6 else "off"
        print(
            f"| {label} | {r['bound']} | {r['seconds']:.1f} | {r['bound'] / r['seconds']:.0f} | "
            f"{r['lag_p50'] * 1000:.1f} / {r['lag_p99'] * 1000:.1f} / {r['lag_max'] * 1000:.1f} | "
            f"{r['watch_p50'] * 1000:.1f} / {r['watch_p99'] * 1000:.1f} / {r['watch_max'] * 1000:.1f} "
            f"({r['watch_wakeups']} wake-ups) |",
            flush=True,
        )
        print(f"  attempts {r['attempts']}, scheduler yields {r['yields']:.0f}", flush=True)


if __name__ == "__main__":
    main()
