"""LeaderElector against an in-memory Lease store with a configurable latency per request: a slow
API server is no lost lease (each renewal may take until the renew deadline, as in client-go), and
the fence refuses writes once the lease is not held or not renewed within the deadline (a process
frozen past its lease). Found by bench/chaos.py; the real API server is in tests/integration."""

from __future__ import annotations

import asyncio
import copy
import time
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from draxr.kube import Kube
from draxr.leader import LeaderElector, NotLeading


class Leases:
    """get/create/replace of one Lease with optimistic concurrency, each request ``latency`` late."""

    def __init__(self, latency: float = 0.0) -> None:
        self.latency = latency
        self.lease: dict[str, Any] | None = None
        self.version = 0
        self.requests = 0

    async def _wait(self) -> None:
        self.requests += 1
        await asyncio.sleep(self.latency)

    async def get(self, res: Any, name: str, namespace: str | None = None) -> dict[str, Any]:
        await self._wait()
        if self.lease is None:
            raise ApiException(status=404, reason="NotFound")
        return copy.deepcopy(self.lease)

    def _store(self, body: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        self.lease = copy.deepcopy(body)
        self.lease["metadata"]["resourceVersion"] = str(self.version)
        return copy.deepcopy(self.lease)

    async def create(self, res: Any, body: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        await self._wait()
        if self.lease is not None:
            raise ApiException(status=409, reason="AlreadyExists")
        return self._store(body)

    async def replace(self, res: Any, body: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        await self._wait()
        assert self.lease is not None
        if body["metadata"].get("resourceVersion") != self.lease["metadata"]["resourceVersion"]:
            raise ApiException(status=409, reason="Conflict")
        return self._store(body)


def elector(store: Leases, who: str = "a") -> LeaderElector:
    return LeaderElector(store, "ns", "lease", who, lease_duration=3, renew_deadline=2, retry_period=0.5)  # type: ignore[arg-type]


async def test_a_slow_api_server_is_no_lost_lease() -> None:
    """Each renewal (a GET and a PUT) takes 0.8 s, longer than the retry period (0.5 s) but well
    within the renew deadline (2 s): the leader keeps leading. (It used to give every attempt one
    retry period only, and lost the lease to any API server slower than that.)"""
    store = Leases(latency=0.4)
    e = elector(store)
    leading = asyncio.Event()

    async def lead() -> None:
        leading.set()
        await asyncio.Event().wait()

    running = asyncio.create_task(e.run(lead))
    await asyncio.wait_for(leading.wait(), 5)
    renewals_before = store.version
    await asyncio.sleep(4)  # two renew deadlines
    try:
        assert not running.done(), "leadership lost to a slow API server"
        assert e.is_leader
        assert store.version >= renewals_before + 3  # it did renew meanwhile
        e.fence()  # and may write
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)


async def test_an_api_server_slower_than_the_renew_deadline_ends_leadership() -> None:
    store = Leases()
    e = elector(store)

    async def lead() -> None:
        store.latency = 1.5  # from now on a renewal (GET + PUT) takes 3 s > the 2 s deadline
        await asyncio.Event().wait()

    await asyncio.wait_for(e.run(lead), 6)
    assert not e.is_leader


async def test_the_fence_refuses_writes_without_a_fresh_lease() -> None:
    store = Leases()
    e = elector(store)
    with pytest.raises(NotLeading, match="not held"):
        e.fence()
    checked = asyncio.Event()

    async def lead() -> None:
        e.fence()  # fresh: allowed
        # A process frozen (SIGSTOP, a VM pause) past its lease: its last renewal is older than the
        # renew deadline when it runs again. Before the renewal loop notices, no write may be sent.
        e.renewed_at -= e.renew_deadline
        with pytest.raises(NotLeading, match="not renewed for 2"):
            e.fence()
        checked.set()
        await asyncio.Event().wait()

    running = asyncio.create_task(e.run(lead))
    try:
        await asyncio.wait_for(checked.wait(), 5)
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)


class _Rest:
    def __init__(self) -> None:
        self.calls: list[str] = []

    async def request(self, method: str, url: str, **_: Any) -> Any:
        self.calls.append(method)
        return SimpleNamespace(status=200, data=b"{}")


class _Api:
    """Just enough of kubernetes_asyncio's ApiClient for Kube.request."""

    def __init__(self) -> None:
        self.rest_client = _Rest()
        self.calls = self.rest_client.calls
        self.default_headers: dict[str, str] = {}
        self.cookie = None
        self.configuration = SimpleNamespace(host="https://127.0.0.1:6443")

    def set_default_header(self, name: str, value: str) -> None:
        self.default_headers[name] = value

    async def update_params_for_auth(self, headers: dict[str, str], *_: Any) -> None:
        headers["authorization"] = "Bearer token"


async def test_kube_sends_no_write_its_fence_refuses() -> None:
    api = _Api()
    kube = Kube(api, limiter=None)  # type: ignore[arg-type]

    def fence() -> None:
        raise NotLeading("not leading")

    kube.fence = fence
    assert await kube.request("GET", "/api/v1/pods") == {}
    for method in ("POST", "PUT", "PATCH", "DELETE"):
        with pytest.raises(NotLeading):
            await kube.request(method, "/api/v1/namespaces/ns/pods")
    assert api.calls == ["GET"]


async def _lead_once(e: LeaderElector) -> float | None:
    """Run ``e`` until it leads; what it knows then of when no other leader could write."""
    seen: list[float | None] = []

    async def lead() -> None:
        seen.append(e.quiet_since())

    await asyncio.wait_for(e.run(lead), 10)
    return seen[0]


async def test_a_lease_released_before_listing_and_taken_as_it_was_is_quiet_since_the_read() -> None:
    """A clean restart: the previous leader released the lease (after draining its writes); this
    replica read it released before its informers listed and replaced that very record."""
    store = Leases()
    old = elector(store, "old")
    await _lead_once(old)
    await old.release()
    new = elector(store, "new")
    await new.observe()
    assert new.quiet_since() is None  # (not leading yet)
    before = time.monotonic()
    quiet = await _lead_once(new)
    assert quiet is not None
    assert quiet <= before


async def test_a_lease_held_or_taken_by_another_in_between_is_no_quiet_time() -> None:
    store = Leases()
    holder = elector(store, "crashed")
    await _lead_once(holder)  # held, never released (a crash, a frozen process): it may still write
    late = elector(store, "late")
    await late.observe()
    assert await _lead_once(late) is None  # (after the lease expired by its observation)

    store2 = Leases()
    first = elector(store2, "first")
    await _lead_once(first)
    await first.release()
    standby = elector(store2, "standby")
    await standby.observe()  # released ...
    other = elector(store2, "other")
    await _lead_once(other)  # ... but another replica led in between
    await other.release()
    assert await _lead_once(standby) is None

    fresh = elector(Leases(), "fresh")
    await fresh.observe()  # no Lease at all: nothing known of a previous leader
    assert await _lead_once(fresh) is None
