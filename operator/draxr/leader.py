"""Lease-based leader election (coordination.k8s.io/v1), as client-go's leaderelection does it.

Every replica keeps its watches and state warm; only the leader schedules and releases claims. A
leader that cannot renew within ``renew_deadline`` (shorter than ``lease_duration``) stops leading
before any other replica may take the lease over, so a partitioned old leader never writes after a
new one started. Expiry is judged by local observation time (when the record last changed), never by
comparing clocks across machines.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from draxr import logs, metrics
from draxr.core.claims import micro_time
from draxr.kube import ApiException, Kube, Resource, api_message
from draxr.loops import GuardedLoop, classify

LEASES = Resource("coordination.k8s.io", "v1", "leases", True)
log = logs.get("draxr.leader")


def default_identity() -> str:
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4().hex[:8]}"


class NotLeading(ConnectionError):
    """A write refused before it was sent: this replica does not hold the lease, or has not renewed
    it within the renew deadline (a process frozen past its lease must not write on a stale view
    before its renewal loop finds out). Handled like a lost connection; the replica exits soon."""


def _why(e: BaseException) -> str:
    return api_message(e) if isinstance(e, ApiException) else f"{type(e).__name__}: {e}"


@dataclass
class LeaderElector:
    kube: Kube
    namespace: str
    name: str
    identity: str
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    # Makes a client for a renewal thread of its own (its own event loop), as client-go's
    # renewals run beside the scheduling goroutines: a scheduling turn or dry run that holds the
    # event loop past the renew deadline then costs no lease. None: renew on the caller's loop.
    renewer: Callable[[], Awaitable[Kube]] | None = None

    def __post_init__(self) -> None:
        if not self.lease_duration > self.renew_deadline > self.retry_period > 0:
            raise ValueError("need lease_duration > renew_deadline > retry_period > 0")
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self.is_leader = False
        # Fixed retry period as client-go's; the guard counts, logs and escalates repeated bugs.
        self._guard = GuardedLoop("leader-election")
        self.renewed_at = 0.0  # time.monotonic() of the last successful acquire or renewal
        # The lease record read released before this replica's informers listed, and when; and
        # the record this replica's acquisition replaced (see quiet_since).
        self._released: tuple[str, float] | None = None
        self._replaced: str | None = None

    async def run(self, lead: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Wait to become leader, run ``lead()`` while leading; return when leadership is lost (the
        ``lead`` task is cancelled first) or when ``lead`` returns."""
        await self._acquire()
        self.is_leader = True
        log.info("became leader", lease=f"{self.namespace}/{self.name}", identity=self.identity)
        task: asyncio.Task[None] = asyncio.create_task(lead(), name="leading")
        try:
            await self._renew_until_lost(task)
        finally:
            self.is_leader = False
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        if not task.cancelled() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]  # a duty failed: that is no lost lease

    async def _acquire(self) -> None:
        while True:
            try:
                async with asyncio.timeout(self.renew_deadline):  # (not wait_for: see _renew_until_lost)
                    acquired = await self._try_acquire_or_renew()
                if acquired:
                    self.renewed_at = time.monotonic()
                    self._guard.succeeded()
                    return
            except Exception as e:  # any failure: not acquired, try again (a bug repeated ends the process)
                self._guard.failed(e, lease=f"{self.namespace}/{self.name}", step="acquire")
            await asyncio.sleep(self.retry_period)

    async def observe(self) -> None:
        """Read the lease once, before the informers list: if it is released (its last holder
        drained its writes first, ``release``), note its record and the time. Best effort: a
        failure or a held lease only means that ``quiet_since`` stays unknown."""
        at = time.monotonic()
        try:
            async with asyncio.timeout(self.renew_deadline):
                lease = await self.kube.get(LEASES, self.name, self.namespace)
        except Exception as e:  # (no lease yet, an API hiccup: the catch-up lists, as before)
            log.info("lease not read before listing", error=_why(e))
            return
        rv = (lease.get("metadata") or {}).get("resourceVersion")
        if rv and not (lease.get("spec") or {}).get("holderIdentity"):
            self._released = (str(rv), at)

    def quiet_since(self) -> float | None:
        """Once leading: since when (time.monotonic()) no other leader can have written, if known.
        Known when the acquisition replaced exactly the released record ``observe`` read: nobody
        held the lease between that read and this replica's term, and its last holder had stopped
        writing before it released it."""
        if self._released is None or not self.is_leader or self._replaced != self._released[0]:
            return None
        return self._released[1]

    async def release(self) -> None:
        """On clean shutdown: give the lease up so that a standby takes over at once."""
        with contextlib.suppress(Exception):  # best effort: the lease expires anyway
            lease = await self.kube.get(LEASES, self.name, self.namespace)
            if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                lease["spec"]["leaseDurationSeconds"] = 1
                lease["spec"]["renewTime"] = micro_time(datetime.now(UTC))
                lease["spec"]["holderIdentity"] = ""
                await self.kube.replace(LEASES, lease, self.namespace)

    async def _renew_until_lost(self, task: asyncio.Task[None]) -> None:
        if self.renewer is None:
            await self._renew_on_this_loop(task)
            return
        stop = threading.Event()
        thread = threading.Thread(target=self._renew_in_thread, args=(stop,), name="lease-renewal", daemon=True)
        thread.start()
        try:
            while not task.done():
                idle = time.monotonic() - self.renewed_at
                if idle >= self.renew_deadline:  # (the thread failed, or it died: no renewal either way)
                    log.error("leadership lost: lease not renewed within the deadline", deadline=self.renew_deadline)
                    return
                await asyncio.wait([task], timeout=min(self.retry_period, max(0.05, self.renew_deadline - idle)))
        finally:
            stop.set()
            await asyncio.to_thread(thread.join, self.retry_period + self.renew_deadline)

    def _renew_in_thread(self, stop: threading.Event) -> None:
        asyncio.run(self._renewals(stop))

    async def _renewals(self, stop: threading.Event) -> None:
        """The renewal thread: renew every retry period, each attempt bounded by the renew deadline;
        ``renewed_at`` is what the leading loop (and ``fence``) read. Ends when stopped or once the
        deadline passed without a renewal (the leading loop then gives up)."""
        assert self.renewer is not None
        kube = await self.renewer()
        try:
            while not stop.is_set():
                budget = self.renewed_at + self.renew_deadline - time.monotonic()
                if budget <= 0:
                    return
                try:
                    async with asyncio.timeout(budget):
                        ok = await self._try_acquire_or_renew(kube)
                except Exception as e:  # as on the loop: not renewed
                    log.warning("lease renewal failed", error=_why(e))
                    metrics.LOOP_ERRORS.labels(loop="leader-election", kind=classify(e).value).inc()
                    ok = False
                if ok and not stop.is_set():
                    self.renewed_at = time.monotonic()
                left = self.renewed_at + self.renew_deadline - time.monotonic()
                await asyncio.sleep(min(self.retry_period, max(0.05, left)))
        finally:
            with contextlib.suppress(Exception):
                await kube.close()

    async def _renew_on_this_loop(self, task: asyncio.Task[None]) -> None:
        last_ok = self.renewed_at
        while not task.done():
            try:
                # As client-go: an attempt may take until the renew deadline (a slow API server is no
                # lost lease), not just a retry period. asyncio.timeout, not wait_for: on Python 3.11
                # wait_for drops a cancellation that arrives as the attempt completes.
                async with asyncio.timeout(max(0.0, last_ok + self.renew_deadline - time.monotonic())):
                    ok = await self._try_acquire_or_renew()
            except Exception as e:  # any failure (API error, network, closed client, deadline): not renewed
                log.warning("lease renewal failed", error=_why(e))
                metrics.LOOP_ERRORS.labels(loop="leader-election", kind=classify(e).value).inc()
                ok = False
            now = time.monotonic()
            if ok:
                last_ok = self.renewed_at = now
            elif now - last_ok >= self.renew_deadline:
                log.error("leadership lost: lease not renewed within the deadline", deadline=self.renew_deadline)
                return
            # Sleep at most until the deadline, so that a hanging API never keeps us leading.
            await asyncio.wait([task], timeout=min(self.retry_period, max(0.05, last_ok + self.renew_deadline - now)))

    def fence(self) -> None:
        """Raise NotLeading unless this replica holds the lease and renewed it within the renew
        deadline. Installed on the client of the leader's duties: checked before every write."""
        idle = time.monotonic() - self.renewed_at
        if not self.is_leader:
            raise NotLeading(f"not leading: lease {self.namespace}/{self.name} not held")
        if idle >= self.renew_deadline:
            raise NotLeading(f"not leading: lease {self.namespace}/{self.name} not renewed for {idle:.1f}s")

    async def _try_acquire_or_renew(self, kube: Kube | None = None) -> bool:
        kube = kube or self.kube
        now = datetime.now(UTC)
        try:
            lease = await kube.get(LEASES, self.name, self.namespace)
        except ApiException as e:
            if e.status != 404:
                raise
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(now, now, transitions=0),
            }
            try:
                await kube.create(LEASES, body, self.namespace)
            except ApiException as e2:
                if e2.status == 409:
                    return False
                raise
            return True

        spec = lease.get("spec") or {}
        record = (spec.get("holderIdentity"), spec.get("renewTime"), spec.get("leaseDurationSeconds"))
        if record != self._observed:
            self._observed, self._observed_at = record, time.monotonic()
        holder = spec.get("holderIdentity") or ""
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        if holder and holder != self.identity and time.monotonic() < self._observed_at + duration:
            return False  # held by another replica, not expired by our observation
        acquire = spec.get("acquireTime") if holder == self.identity else None
        transitions = int(spec.get("leaseTransitions") or 0) + (0 if holder == self.identity else 1)
        replaced = str((lease.get("metadata") or {}).get("resourceVersion") or "")
        lease["spec"] = self._spec(now, acquire or now, transitions)
        try:
            await kube.replace(LEASES, lease, self.namespace)  # resourceVersion makes this atomic
        except ApiException as e:
            if e.status == 409:
                return False
            raise
        if not self.is_leader:
            self._replaced = replaced
        return True

    def _spec(self, now: datetime, acquired: datetime | str, transitions: int) -> dict[str, Any]:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self.lease_duration)),
            "acquireTime": acquired if isinstance(acquired, str) else micro_time(acquired),
            "renewTime": micro_time(now),
            "leaseTransitions": transitions,
        }
