"""Liveness that means it (/healthz), readiness (/readyz), and the event loop's lag.

/healthz fails when a watch has ended or made no progress past its deadline, when a long-running
task has ended, when the webhook's server process is down (being restarted), or when the scheduling
loop (leader only) has pods ready but has not cycled for a while. The supervisor in ``app`` ends
the process when a problem persists, so that Kubernetes restarts it even without a probe. /readyz
answers 200 once every watch has listed its kind and, with the webhook on, once it serves (a replica
in the Service's endpoints that refused the API server's calls would let pods through unsteered:
failurePolicy Ignore). The server runs on the main event loop on
purpose: a loop wedged for longer than the probe's timeout is itself a liveness failure.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from aiohttp import web

from draxr import logs, metrics
from draxr.watch import Informer

log = logs.get("draxr.health")


@dataclass
class Health:
    informers: Sequence[Informer]
    watch_deadline: float
    scheduling_stall: float
    # Seconds the scheduling loop has had pods ready without cycling; 0 when idle or not leading.
    scheduler_stalled_for: Callable[[], float] = lambda: 0.0
    tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict)  # long-running tasks that must not end
    checks: list[Callable[[], list[str]]] = field(default_factory=list)  # more problems (the webhook's process)
    # More reasons not to be ready (the webhook not serving yet: no Service traffic for it until it does).
    readiness: list[Callable[[], list[str]]] = field(default_factory=list)
    lag: float = 0.0  # the event loop's latest lag, seconds

    def problems(self) -> list[str]:
        out = []
        for name, task in self.tasks.items():
            if task.done():
                out.append(f"task {name} ended")
        for inf in self.informers:
            idle = inf.idle_for()
            if idle > self.watch_deadline:
                out.append(
                    f"watch {inf.name}: no progress for {idle:.0f}s (deadline {self.watch_deadline:.0f}s, "
                    f"{inf.phase.value})"
                )
        for check in self.checks:
            out.extend(check())
        stalled = self.scheduler_stalled_for()
        if stalled > self.scheduling_stall:
            out.append(f"scheduling loop: pods ready but no cycle for {stalled:.0f}s")
        return out

    def not_ready(self) -> list[str]:
        out = [f"watch {inf.name} not synced" for inf in self.informers if not inf.synced.is_set()]
        for check in self.readiness:
            out.extend(check())
        return out

    async def measure_lag(self, interval: float = 0.5) -> None:
        """How late a timer fires: the time other work held the loop."""
        loop = asyncio.get_running_loop()
        while True:
            t0 = loop.time()
            await asyncio.sleep(interval)
            self.lag = max(0.0, loop.time() - t0 - interval)
            metrics.EVENT_LOOP_LAG.observe(self.lag)

    def application(self) -> web.Application:
        async def healthz(_: web.Request) -> web.Response:
            problems = self.problems()
            if problems:
                return web.Response(status=503, text="\n".join(problems) + "\n")
            return web.Response(text=f"ok (event loop lag {self.lag * 1000:.1f} ms)\n")

        async def readyz(_: web.Request) -> web.Response:
            waiting = self.not_ready()
            return web.Response(status=503, text="\n".join(waiting) + "\n") if waiting else web.Response(text="ok\n")

        app = web.Application()
        app.router.add_get("/healthz", healthz)
        app.router.add_get("/readyz", readyz)
        return app

    async def serve(self, host: str, port: int) -> None:
        runner = web.AppRunner(self.application(), access_log=None)
        await runner.setup()
        try:
            await web.TCPSite(runner, host, port).start()
            log.info("health endpoints serving", address=host, port=port, paths=["/healthz", "/readyz"])
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()


class Unhealthy(SystemExit):
    """Liveness failed for longer than the grace: exit non-zero, to be restarted."""


async def supervise(health: Health, exit_after: float, interval: float = 1.0) -> None:
    """Return never; raise ``Unhealthy`` once liveness has failed for ``exit_after`` seconds, or at
    once with the error of a long-running task that ended."""
    since: float | None = None
    while True:
        await asyncio.sleep(interval)
        for name, task in health.tasks.items():
            if task.done():
                error = None if task.cancelled() else task.exception()
                log.error("long-running task ended: exiting", task=name, error=repr(error))
                raise Unhealthy(f"draxr: task {name} ended: {error!r}") from error
        problems = health.problems()
        now = time.monotonic()
        if not problems:
            if since is not None:
                log.info("healthy again")
            since = None
            continue
        if since is None:
            since = now
            log.error("liveness failing", problems=problems, exit_in=exit_after)
        elif now - since >= exit_after:
            log.error("liveness failed: exiting", problems=problems)
            raise Unhealthy("draxr: liveness failed: " + "; ".join(problems))
