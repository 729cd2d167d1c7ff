"""The scrape-time metrics of the cluster (draxr.cluster_metrics): capacity per extended resource,
pending pods per resource and their oldest age, orphaned special claims; and how the collector
reads them on the state's own event loop."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from draxr.cluster_metrics import ClusterCollector, Snapshot, Steps, run_steps, snapshot
from draxr.core.state import ClusterState, PodInfo

from .cluster_builders import GPU, allocation, cluster, node, pod, special_claim

NOW = datetime(2026, 1, 1, 0, 10, 0, tzinfo=UTC)
OWN = frozenset({"draxr"})


def _pending(state: ClusterState) -> list[PodInfo]:
    return [p for p in state.pods.values() if p.schedulable and p.scheduler_name == "draxr"]


def _state() -> ClusterState:
    state = cluster({"n1": 4, "n2": 2})
    state.upsert_node(node("dp", extended={GPU: "4"}))
    state.upsert_pod(pod("user", gpus=3, node_name="dp", phase="Running", scheduler="default-scheduler"))
    # n1: gpu-0 and gpu-1 held by a running pod's claim
    state.upsert_pod(pod("running", gpus=2, node_name="n1", phase="Running", claim_name="c-running"))
    state.upsert_claim(
        special_claim("c-running", "running", "uid-running", alloc=allocation("n1", "gpu-0", "gpu-1"), reserved=True)
    )
    return state


def test_capacity_is_kubectl_draxr_capacity_summed() -> None:
    snap = snapshot(_state(), [], OWN, now=NOW)
    assert snap.total == {(GPU, "DRA"): 6, (GPU, "device plugin"): 4}
    assert snap.allocated == {(GPU, "DRA"): 2, (GPU, "device plugin"): 3}
    assert snap.free == {(GPU, "DRA"): 4, (GPU, "device plugin"): 1}


def test_oldest_pending_per_resource_and_counts() -> None:
    state = _state()
    state.upsert_pod(pod("old", gpus=2, created="2026-01-01T00:00:00Z"))  # 10 minutes
    state.upsert_pod(pod("new", gpus=1, created="2026-01-01T00:09:00Z"))  # 1 minute
    state.upsert_pod(pod("other", resource="example.com/fpga", gpus=1, created="2026-01-01T00:08:00Z"))
    state.upsert_pod(pod("plain", created="2026-01-01T00:05:00Z"))  # no extended resource
    state.upsert_pod(pod("gated", gpus=1, created="2025-01-01T00:00:00Z", schedulingGates=[{"name": "x"}]))
    snap = snapshot(state, _pending(state), OWN, now=NOW)
    assert snap.oldest_pending == {GPU: 600.0, "example.com/fpga": 120.0, "": 300.0}
    assert snap.pending == {GPU: 2, "example.com/fpga": 1, "": 1}
    # Bound, it no longer counts.
    state.upsert_pod(pod("old", gpus=2, created="2026-01-01T00:00:00Z", node_name="n2", phase="Running"))
    snap = snapshot(state, [*_pending(state), state.pods["uid-old"]], OWN, now=NOW)
    assert snap.oldest_pending[GPU] == 60.0
    assert snap.pending[GPU] == 1


def test_orphaned_special_claims_by_reason() -> None:
    state = _state()
    assert snapshot(state, [], OWN, now=NOW).orphans == {"pod-gone": 0, "pod-finished": 0}
    state.upsert_claim(special_claim("c-gone", "gone", "uid-gone", alloc=allocation("n2", "gpu-0"), reserved=True))
    state.upsert_pod(pod("done", gpus=1, node_name="n2", phase="Succeeded", claim_name="c-done"))
    state.upsert_claim(special_claim("c-done", "done", "uid-done", alloc=allocation("n2", "gpu-1"), reserved=True))
    # Deleted and holding nothing: the API server removes it, not an orphan.
    state.upsert_claim(special_claim("c-going", "gone2", "uid-gone2", finalizer=False, deleting=True))
    snap = snapshot(state, [], OWN, now=NOW)
    assert snap.orphans == {"pod-gone": 1, "pod-finished": 1}
    assert snap.free[(GPU, "DRA")] == 2  # the orphans' devices are still taken


def _exposition(collector: ClusterCollector) -> str:
    registry = CollectorRegistry()
    registry.register(collector)
    return generate_latest(registry).decode()


def test_exposition_and_detached_collector() -> None:
    collector = ClusterCollector(min_interval=0)
    assert _exposition(collector) == ""  # nothing attached: no samples
    snap = Snapshot(
        total={(GPU, "DRA"): 6},
        allocated={(GPU, "DRA"): 2},
        free={(GPU, "DRA"): 4},
        oldest_pending={GPU: 30.5},
        pending={GPU: 3},
        orphans={"pod-gone": 1, "pod-finished": 0},
    )

    def source() -> Steps:
        yield
        return snap

    async def attached() -> str:
        collector.attach(source, asyncio.get_running_loop())
        return _exposition(collector)  # from the loop's own thread: computed in place

    text = asyncio.run(attached())
    for line in (
        'draxr_extended_resource_devices{resource="example.com/gpu",served_by="DRA"} 6.0',
        'draxr_extended_resource_allocated_devices{resource="example.com/gpu",served_by="DRA"} 2.0',
        'draxr_extended_resource_free_devices{resource="example.com/gpu",served_by="DRA"} 4.0',
        'draxr_oldest_pending_pod_age_seconds{resource="example.com/gpu"} 30.5',
        'draxr_pending_pods_by_resource{resource="example.com/gpu"} 3.0',
        'draxr_orphaned_special_claims{reason="pod-gone"} 1.0',
        'draxr_orphaned_special_claims{reason="pod-finished"} 0.0',
    ):
        assert line in text.splitlines(), text
    collector.detach(source)
    assert _exposition(collector) == ""


def test_scrape_from_another_thread_runs_on_the_loop_and_is_cached() -> None:
    collector = ClusterCollector(min_interval=60, timeout=5)
    threads: list[int] = []

    def source() -> Steps:
        threads.append(threading.get_ident())
        yield
        return Snapshot(pending={GPU: len(threads)})

    async def main() -> tuple[Snapshot | None, Snapshot | None]:
        collector.attach(source, asyncio.get_running_loop())
        first = await asyncio.to_thread(collector.read)  # the HTTP server's thread, say
        second = await asyncio.to_thread(collector.read)
        return first, second

    loop_thread = threading.get_ident()
    first, second = asyncio.run(main())
    assert first is not None
    assert first.pending == {GPU: 1}
    assert second is first  # within min_interval: the same reading
    assert threads == [loop_thread]
    assert collector.computed == 1


def test_a_wedged_loop_yields_nothing_within_the_timeout() -> None:
    collector = ClusterCollector(min_interval=0, timeout=0.2)
    loop = asyncio.new_event_loop()  # never run: nobody answers
    try:
        collector._source, collector._loop, collector._thread = _nothing, loop, -1
        assert collector.read() is None
        assert collector.computed == 0
    finally:
        loop.close()
    assert collector.read() is None  # closed loop: nothing either


def _nothing() -> Steps:
    yield
    return Snapshot()


def test_a_long_computation_hands_the_loop_back() -> None:
    """Scraped from another thread, the computation pauses every ``turn`` seconds: other work of the
    loop (watch events, the lease renewal, the webhook) runs in between."""
    import time

    collector = ClusterCollector(min_interval=0, timeout=10, turn=0.01)
    ticks: list[int] = []

    def source() -> Steps:
        for step in range(20):
            time.sleep(0.005)  # a node's worth of CEL
            ticks.append(-step)
            yield
        return Snapshot(pending={GPU: 20})

    async def main() -> Snapshot | None:
        collector.attach(source, asyncio.get_running_loop())

        async def other_work() -> None:
            for i in range(1, 1000):
                ticks.append(i)
                await asyncio.sleep(0)

        worker = asyncio.create_task(other_work())
        try:
            return await asyncio.to_thread(collector.read)
        finally:
            worker.cancel()

    snap = asyncio.run(main())
    assert snap is not None
    assert snap.pending == {GPU: 20}
    steps_seen = [i for i, t in enumerate(ticks) if t <= 0]
    first, last = steps_seen[0], steps_seen[-1]
    assert any(t > 0 for t in ticks[first:last]), "the loop ran nothing else during the computation"


@pytest.mark.parametrize("created", ["", "not a time"])
def test_pods_without_a_creation_time_count_but_have_no_age(created: str) -> None:
    state = _state()
    state.upsert_pod(pod("odd", gpus=1, created=created))
    snap = snapshot(state, _pending(state), OWN, now=NOW)
    assert snap.pending == {GPU: 1}
    assert GPU not in snap.oldest_pending


async def test_operator_wiring_leader_gauge_and_snapshot() -> None:
    """The Operator exports 1 while it leads, 0 otherwise (under its Lease's name), and its snapshot
    takes the pending pods from its scheduling queue."""
    from kubernetes_asyncio import client
    from prometheus_client import REGISTRY

    from draxr.app import Operator
    from draxr.kube import Kube
    from draxr.settings import Settings

    cfg = client.Configuration()
    kube = Kube(client.ApiClient(cfg))
    try:
        op = Operator(Settings(scheduler_name="unit-sched", leader_election_lease_name="unit-lease"), kube, cfg)

        def leader() -> float | None:
            return REGISTRY.get_sample_value("draxr_leader_election_master_status", {"name": "unit-lease"})

        assert leader() == 0.0
        op.leading = True
        assert leader() == 1.0
        op.leading = False
        assert leader() == 0.0

        op.pod_upserted(pod("waits", gpus=1, scheduler="unit-sched", created="2020-01-01T00:00:00Z"))
        op.pod_upserted(pod("elsewhere", gpus=1, scheduler="other", created="2020-01-01T00:00:00Z"))
        snap = run_steps(op.cluster_snapshot())
        assert snap.pending == {GPU: 1}
        assert snap.oldest_pending[GPU] > 86400
    finally:
        await kube.close()
