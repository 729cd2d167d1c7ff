"""/readyz: ready once the watches listed and every readiness check (the webhook serving) passes."""

from __future__ import annotations

from aiohttp.test_utils import TestClient, TestServer

from draxr.health import Health


async def test_readyz_waits_for_the_readiness_checks() -> None:
    waiting = ["webhook: no serving certificate loaded yet"]
    health = Health(informers=[], watch_deadline=60, scheduling_stall=60)
    health.readiness.append(lambda: list(waiting))
    async with TestClient(TestServer(health.application(), host="127.0.0.1")) as client:
        resp = await client.get("/readyz")
        assert (resp.status, await resp.text()) == (503, "webhook: no serving certificate loaded yet\n")
        assert (await client.get("/healthz")).status == 200  # not ready is no liveness failure
        waiting.clear()
        resp = await client.get("/readyz")
        assert (resp.status, await resp.text()) == (200, "ok\n")
