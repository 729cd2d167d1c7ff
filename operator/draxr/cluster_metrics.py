"""Metrics of the cluster as draxr sees it, computed at scrape time from the warm state.

* ``draxr_extended_resource_devices`` / ``_allocated_devices`` / ``_free_devices`` ``{resource,
  served_by}``: capacity per extended resource name, the numbers of ``kubectl draxr capacity``
  (``core.capacity.cluster_capacity``) summed over the nodes.
* ``draxr_oldest_pending_pod_age_seconds{resource}``: per extended resource name asked for, how
  long the oldest pod pending for draxr has existed (``resource=""``: pods asking for none, only
  for claims of their own). Gated pods are not pending for draxr yet.
* ``draxr_pending_pods_by_resource{resource}``: how many pods pending for draxr ask for it.
* ``draxr_orphaned_special_claims{reason}``: special claims still held (allocated, reserved or
  with a finalizer) whose pod is gone (``pod-gone``) or finished (``pod-finished``): what the
  releaser (or kube-controller-manager) has not released yet (``core.gc.claims_to_release``).

Nothing is computed when nobody scrapes, and not per event: a scrape (at most one computation
every ``min_interval`` seconds; Prometheus pairs scrape twice) runs one computation on the
operator's event loop, the only thread that may read the state, and waits for it from the
scraping thread (prometheus_client's HTTP server). The computation hands the loop back every
``turn`` seconds (between nodes: with the class-match cache cold, capacity costs a CEL evaluation
per device; warm, about 15 ms at 500 nodes and 40 ms at 2,000). A loop that does not answer
within ``timeout`` yields no samples of these families (the alerts on them then stay quiet, and
``draxr_event_loop_lag_seconds`` shows why).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from draxr import logs
from draxr.core.allocator import DEFAULT_FEATURES, Features
from draxr.core.capacity import iter_cluster_capacity
from draxr.core.gc import claims_to_release
from draxr.core.state import ClusterState, PodInfo

log = logs.get("draxr.metrics")

Key = tuple[str, str]  # (resource, served_by)


@dataclass(frozen=True)
class Snapshot:
    total: dict[Key, int] = field(default_factory=dict)
    allocated: dict[Key, int] = field(default_factory=dict)
    free: dict[Key, int] = field(default_factory=dict)
    oldest_pending: dict[str, float] = field(default_factory=dict)  # resource -> seconds
    pending: dict[str, int] = field(default_factory=dict)  # resource -> pods
    orphans: dict[str, int] = field(default_factory=dict)  # reason -> claims


ORPHAN_REASONS = ("pod-gone", "pod-finished")


def _age(created: str, now: datetime) -> float | None:
    try:
        return max((now - datetime.fromisoformat(created.replace("Z", "+00:00"))).total_seconds(), 0.0)
    except ValueError:
        return None


Steps = Generator[None, None, Snapshot]  # pauses (None) until it returns the reading


def snapshot(
    state: ClusterState,
    pending_pods: Iterable[PodInfo],
    own_schedulers: frozenset[str],
    *,
    features: Features = DEFAULT_FEATURES,
    now: datetime | None = None,
) -> Snapshot:
    """One reading of the state, at once (call it on the thread that owns the state)."""
    return run_steps(steps(state, pending_pods, own_schedulers, features=features, now=now))


def run_steps(gen: Steps) -> Snapshot:
    while True:
        try:
            next(gen)
        except StopIteration as done:
            result: Snapshot = done.value
            return result


async def run_steps_yielding(gen: Steps, turn: float) -> Snapshot:
    """The same, handing the event loop back every ``turn`` seconds."""
    t0 = time.monotonic()
    while True:
        try:
            next(gen)
        except StopIteration as done:
            result: Snapshot = done.value
            return result
        if time.monotonic() - t0 >= turn:
            await asyncio.sleep(0)
            t0 = time.monotonic()


def steps(
    state: ClusterState,
    pending_pods: Iterable[PodInfo],
    own_schedulers: frozenset[str],
    *,
    features: Features = DEFAULT_FEATURES,
    now: datetime | None = None,
) -> Steps:
    """A reading of the state that may pause between nodes (the state may change meanwhile: a
    metric, not a decision). ``pending_pods``: the pods pending for draxr (the scheduling queue's),
    read when the capacity is done."""
    now = now or datetime.now(UTC)
    snap = Snapshot()
    for row in iter_cluster_capacity(state, features=features):
        if row is None:
            yield
            continue
        k = (row.resource_name, row.served_by)
        snap.total[k] = snap.total.get(k, 0) + row.total
        snap.allocated[k] = snap.allocated.get(k, 0) + row.allocated
        snap.free[k] = snap.free.get(k, 0) + row.free
    for pod in pending_pods:
        if not pod.schedulable or pod.gated or pod.inputs is None:
            continue
        age = _age(pod.created, now)
        for resource in pod.view.extended or ("",):
            snap.pending[resource] = snap.pending.get(resource, 0) + 1
            if age is not None and age > snap.oldest_pending.get(resource, -1.0):
                snap.oldest_pending[resource] = age
    for reason in ORPHAN_REASONS:
        snap.orphans[reason] = 0
    for action in claims_to_release(state, own_schedulers):
        reason = "pod-gone" if action.confirm_pod_gone else "pod-finished"
        snap.orphans[reason] += 1
    return snap


def families(snap: Snapshot | None) -> list[GaugeMetricFamily]:
    """The metric families of ``snap`` (without samples when None: for ``describe``)."""
    capacity = [
        (
            "draxr_extended_resource_devices",
            "Devices (DRA) or allocatable units (device plugin) per extended resource name",
            None if snap is None else snap.total,
        ),
        (
            "draxr_extended_resource_allocated_devices",
            "Of those, allocated to claims (DRA) or requested by placed pods (device plugin)",
            None if snap is None else snap.allocated,
        ),
        (
            "draxr_extended_resource_free_devices",
            "Of those, free (summed per node, as kubectl draxr capacity)",
            None if snap is None else snap.free,
        ),
    ]
    out: list[GaugeMetricFamily] = []
    for name, doc, values in capacity:
        fam = GaugeMetricFamily(name, doc, labels=["resource", "served_by"])
        for (resource, served_by), v in sorted((values or {}).items()):
            fam.add_metric([resource, served_by], v)
        out.append(fam)
    oldest = GaugeMetricFamily(
        "draxr_oldest_pending_pod_age_seconds",
        "Age of the oldest pod pending for draxr, per extended resource name it asks for",
        labels=["resource"],
    )
    pending = GaugeMetricFamily(
        "draxr_pending_pods_by_resource",
        "Pods pending for draxr, per extended resource name they ask for",
        labels=["resource"],
    )
    orphans = GaugeMetricFamily(
        "draxr_orphaned_special_claims",
        "Special claims still held whose pod is gone or finished (not released yet)",
        labels=["reason"],
    )
    if snap is not None:
        for resource, age in sorted(snap.oldest_pending.items()):
            oldest.add_metric([resource], age)
        for resource, n in sorted(snap.pending.items()):
            pending.add_metric([resource], n)
        for reason, n in sorted(snap.orphans.items()):
            orphans.add_metric([reason], n)
    return [*out, oldest, pending, orphans]


class ClusterCollector(Collector):
    """Registered once (metrics.CLUSTER); the running operator attaches its snapshot function and
    event loop (the latest one wins, as with ``Gauge.set_function``)."""

    def __init__(self, min_interval: float = 5.0, timeout: float = 10.0, turn: float = 0.02) -> None:
        self.min_interval = min_interval
        self.timeout = timeout
        self.turn = turn
        self._lock = threading.Lock()
        self._source: Callable[[], Steps] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: int | None = None
        self._cached: tuple[float, Snapshot] | None = None
        self.computed = 0  # computations run (tests)

    def attach(self, source: Callable[[], Steps], loop: asyncio.AbstractEventLoop) -> None:
        """Called on ``loop``'s thread."""
        with self._lock:
            self._source, self._loop, self._thread, self._cached = source, loop, threading.get_ident(), None

    def detach(self, source: Callable[[], Steps]) -> None:
        with self._lock:
            if self._source == source:  # (bound methods: equal, not identical)
                self._source = self._loop = self._thread = self._cached = None

    def describe(self) -> Iterator[GaugeMetricFamily]:
        return iter(families(None))

    def collect(self) -> Iterator[GaugeMetricFamily]:
        snap = self.read()
        return iter(families(snap)) if snap is not None else iter(())

    def read(self) -> Snapshot | None:
        with self._lock:
            source, loop, thread, cached = self._source, self._loop, self._thread, self._cached
        if source is None or loop is None:
            return None
        now = time.monotonic()
        if cached is not None and now - cached[0] < self.min_interval:
            return cached[1]
        # (scraped from the loop's own thread, as tests do: computed right here)
        snap = self._compute(source) if thread == threading.get_ident() else self._on_loop(source, loop)
        if snap is not None:
            with self._lock:
                if self._source == source:
                    self._cached = (time.monotonic(), snap)
        return snap

    def _compute(self, source: Callable[[], Steps]) -> Snapshot:
        self.computed += 1
        return run_steps(source())

    async def _compute_yielding(self, source: Callable[[], Steps]) -> Snapshot:
        self.computed += 1
        return await run_steps_yielding(source(), self.turn)

    def _on_loop(self, source: Callable[[], Steps], loop: asyncio.AbstractEventLoop) -> Snapshot | None:
        future: concurrent.futures.Future[Snapshot] = concurrent.futures.Future()

        def start() -> None:  # on the loop; the coroutine is made only if the scrape still waits
            if not future.set_running_or_notify_cancel():
                return
            task = asyncio.ensure_future(self._compute_yielding(source))

            def finished(t: asyncio.Task[Snapshot]) -> None:
                if t.cancelled():
                    future.set_exception(concurrent.futures.CancelledError())
                elif (error := t.exception()) is not None:
                    future.set_exception(error)
                else:
                    future.set_result(t.result())

            task.add_done_callback(finished)

        try:
            loop.call_soon_threadsafe(start)
        except RuntimeError:  # the loop is closed
            return None
        try:
            return future.result(self.timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()  # (once started, it finishes and its reading is dropped)
            log.warning("cluster metrics not computed: the event loop did not answer", timeout=self.timeout)
            return None
        except Exception as e:
            log.exception("cluster metrics failed", error=repr(e))
            return None
