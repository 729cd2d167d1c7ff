"""Lease-based leader election against the real API server."""

from __future__ import annotations

import asyncio
import time

from draxr.devcluster.controlplane import ControlPlane
from draxr.kube import Kube
from draxr.leader import LEASES, LeaderElector

from .helpers import eventually


async def _leads(e: LeaderElector) -> bool:
    return e.is_leader


async def test_one_leader_and_a_partitioned_leader_stops_before_the_standby_starts(
    kube: Kube, control_plane: ControlPlane, namespace: str
) -> None:
    timeline: list[tuple[str, str, float]] = []
    a_kube = await Kube.from_kubeconfig(control_plane.kubeconfig)

    def elector(k: Kube, who: str) -> LeaderElector:
        return LeaderElector(k, namespace, "lease", who, lease_duration=3, renew_deadline=2, retry_period=0.5)

    def leading(who: str):  # type: ignore[no-untyped-def]
        async def lead() -> None:
            timeline.append((who, "start", time.monotonic()))
            try:
                await asyncio.Event().wait()
            finally:
                timeline.append((who, "stop", time.monotonic()))

        return lead

    a, b = elector(a_kube, "a"), elector(kube, "b")
    task_a = asyncio.create_task(a.run(leading("a")))
    await eventually(lambda: _leads(a))
    task_b = asyncio.create_task(b.run(leading("b")))
    await asyncio.sleep(2)
    assert not b.is_leader  # the lease is held and renewed
    lease = await kube.get(LEASES, "lease", namespace)
    assert lease["spec"]["holderIdentity"] == "a"
    assert lease["spec"]["leaseDurationSeconds"] == 3

    # Partition a: its API client is gone, renewals fail. It must stop leading (renew deadline, 2 s)
    # before b may take over (lease duration, 3 s, counted from b's last observed renewal).
    await a_kube.close()
    await asyncio.wait_for(task_a, 10)
    await eventually(lambda: _leads(b))
    events = {(who, what): t for who, what, t in timeline}
    assert events[("a", "stop")] < events[("b", "start")]
    lease = await kube.get(LEASES, "lease", namespace)
    assert lease["spec"]["holderIdentity"] == "b"
    assert lease["spec"]["leaseTransitions"] == 1

    # A clean shutdown gives the lease up at once.
    task_b.cancel()
    await asyncio.gather(task_b, return_exceptions=True)
    await b.release()
    c = elector(kube, "c")
    t0 = time.monotonic()
    task_c = asyncio.create_task(c.run(leading("c")))
    await eventually(lambda: _leads(c), interval=0.05)
    assert time.monotonic() - t0 < 2.5  # well under the 3 s lease, which it did not have to wait out
    task_c.cancel()
    await asyncio.gather(task_c, return_exceptions=True)
