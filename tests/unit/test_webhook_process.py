"""The webhook's server process (draxr.webhook_proc + draxr.webhook_child) without a cluster: a
keeper with a certificate of its own, the child on a free loopback port."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import pytest
from prometheus_client import REGISTRY

from draxr.core import certs
from draxr.core.mapping import ExtendedResourceMapping, build_mapping, mapping_to_data
from draxr.loops import Backoff
from draxr.settings import Settings
from draxr.webhook_child import HEARTBEAT
from draxr.webhook_proc import WebhookProcess, start_child
from draxr.webhook_tls import CertKeeper
from draxr_dev.devcluster.controlplane import free_port

GPU = build_mapping([{"metadata": {"name": "gpu"}, "spec": {"extendedResourceName": "example.com/gpu"}}])


class Keeper(CertKeeper):
    """No Secret to read: the test hands certificates in."""

    async def reload_loop(self) -> None:
        await asyncio.Event().wait()


def pki() -> certs.Pki:
    planned = certs.plan(None, ["127.0.0.1"], datetime.now(UTC), timedelta(days=1), timedelta(days=1))
    assert planned is not None
    return planned.pki


def review(resource: str = "example.com/gpu") -> dict[str, Any]:
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "resources": {"limits": {resource: "1"}}}]}}
    request = {"uid": "u", "kind": {"kind": "Pod"}, "operation": "CREATE", "namespace": "ml", "object": pod}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


async def until(check: Callable[[], Any], timeout: float = 30.0) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        got = check()
        if isinstance(got, Awaitable):
            got = await got
        if got:
            return got
        await asyncio.sleep(0.02)
    pytest.fail("condition not met")


class Running:
    def __init__(self, server: WebhookProcess, keeper: Keeper, ca: bytes, port: int) -> None:
        self.server, self.keeper, self.port = server, keeper, port
        self.mapping: ExtendedResourceMapping | None = GPU
        self.trust(ca)

    def trust(self, ca: bytes) -> None:
        self.context = ssl.create_default_context(cadata=ca.decode())

    async def answer(self, body: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """The webhook's response, None while nothing serves (or the handshake fails)."""
        try:
            async with (
                aiohttp.ClientSession(trust_env=False) as http,
                http.post(
                    f"https://127.0.0.1:{self.port}/mutate-pods", json=body or review(), ssl=self.context
                ) as resp,
            ):
                out: dict[str, Any] = (await resp.json())["response"]
                return out
        except (aiohttp.ClientError, OSError):
            return None


@pytest.fixture
async def running() -> AsyncIterator[Running]:
    port = free_port()
    settings = Settings(bind_address="127.0.0.1", webhook_port=port, log_format="console", log_level="warning")
    keeper = Keeper(None, settings)  # type: ignore[arg-type]  # (no API calls: reload_loop is the stub's)
    first = pki()
    keeper._load(first.tls_crt, first.tls_key)
    holder: list[Running] = []
    server = WebhookProcess(keeper, settings, lambda: holder[0].mapping, backoff=Backoff(initial=2.0, maximum=2.0))
    run = Running(server, keeper, first.ca_crt, port)
    holder.append(run)
    task = asyncio.create_task(server.serve())
    try:
        await until(lambda: server.alive() or task.done())
        assert not task.done(), task
        yield run
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def admissions(result: str) -> float:
    return REGISTRY.get_sample_value("draxr_webhook_admissions_total", {"result": result}) or 0.0


def answered() -> float:
    return REGISTRY.get_sample_value("draxr_webhook_duration_seconds_count") or 0.0


async def test_the_process_steers_and_its_counts_land_in_this_process_metrics(running: Running) -> None:
    steered, count = admissions("steered"), answered()
    out = await running.answer()
    assert out is not None
    assert out["patchType"] == "JSONPatch"
    await until(lambda: admissions("steered") == steered + 1 and answered() == count + 1)


async def test_a_mapping_change_reaches_the_process(running: Running) -> None:
    assert "patch" in (await running.answer() or {})
    running.mapping = build_mapping([])
    running.server.mapping_changed()
    await until(lambda: _unchanged(running))
    running.mapping = None  # not synced (the operator lost its view): admitted unchanged, counted as such
    running.server.mapping_changed()
    before = admissions("not-synced")
    await until(lambda: _unchanged(running))
    await until(lambda: admissions("not-synced") > before)


async def _unchanged(running: Running) -> bool:
    out = await running.answer()
    return out is not None and "patch" not in out


async def test_a_new_certificate_reaches_the_process(running: Running) -> None:
    second = pki()
    running.keeper._load(second.tls_crt, second.tls_key)
    running.trust(second.ca_crt)
    assert await until(running.answer)


async def test_a_killed_process_is_down_in_liveness_until_a_new_one_serves(running: Running) -> None:
    server = running.server
    old = server.pid
    assert old is not None
    os.kill(old, signal.SIGKILL)
    problems = await until(server.problems)  # (the restart waits the backoff, 1 to 2 s)
    assert problems[0].startswith("webhook server process down for"), problems
    assert "exited with code -9" in problems[0], problems
    await until(lambda: server.alive() and server.pid != old)
    assert server.problems() == []
    assert server.restarts == 1
    assert await until(running.answer)


async def test_a_port_taken_at_the_first_start_ends_serve() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        settings = Settings(bind_address="127.0.0.1", webhook_port=taken.getsockname()[1], log_format="console")
        keeper = Keeper(None, settings)  # type: ignore[arg-type]
        first = pki()
        keeper._load(first.tls_crt, first.tls_key)
        with pytest.raises(RuntimeError, match="admission webhook server could not start: OSError"):
            await WebhookProcess(keeper, settings, lambda: GPU).serve()


async def test_the_process_ends_cleanly_when_the_operator_closes_with_counts_unread() -> None:
    """A socket closed while the child's counts sit unread on the operator's side reaches the child
    as a reset (the operator stopping, or killed): that is its end, exit 0, not a traceback."""
    first = pki()
    ours, theirs = socket.socketpair()
    proc = await start_child(theirs, stderr=asyncio.subprocess.PIPE)
    theirs.close()
    ours.settimeout(30)  # plain socket calls: asyncio's reader would drain what must stay unread
    config = {"scheduler_name": "draxr", "bind_address": "127.0.0.1", "port": free_port()}
    for msg in (
        {"op": "config", **config, "log_level": "warning", "log_format": "json"},
        {"op": "cert", "tls_crt": first.tls_crt.decode(), "tls_key": first.tls_key.decode()},
        {"op": "mapping", "mapping": mapping_to_data(GPU)},
        {"op": "start"},
    ):
        ours.sendall(json.dumps(msg).encode() + b"\n")
    said = b""
    while b"\n" not in said:
        said += await asyncio.to_thread(ours.recv, 4096)
    assert json.loads(said.split(b"\n")[0])["op"] == "serving"
    await asyncio.sleep(2.5 * HEARTBEAT)  # heartbeats arrive and stay unread
    assert ours.recv(1, socket.MSG_PEEK)  # (the reset needs unread data)
    ours.close()
    assert proc.stderr is not None
    async with asyncio.timeout(30):
        err = await proc.stderr.read()
        code = await proc.wait()
    assert b"Traceback" not in err, err.decode()
    assert code == 0
