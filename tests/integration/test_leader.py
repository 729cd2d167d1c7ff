"""Lease-based leader election against the real API server."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from draxr.kube import Kube, Resource
from draxr.leader import LEASES, LeaderElector
from draxr_dev.devcluster.controlplane import ControlPlane

from .helpers import eventually


async def _leads(e: LeaderElector) -> bool:
    return e.is_leader


def _time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


class _LeaseLog:
    """A Kube that records what its user does with Leases: each read it attempts, and each write that
    succeeded with the Lease's spec as written (everything else passes through)."""

    def __init__(self, kube: Kube) -> None:
        self._kube = kube
        self.ops: list[tuple[str, dict[str, Any]]] = []

    async def get(self, res: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        if res is LEASES:
            self.ops.append(("read", {}))
        return await self._kube.get(res, name, namespace)

    async def create(self, res: Resource, body: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        return self._written(res, await self._kube.create(res, body, namespace))

    async def replace(self, res: Resource, body: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        return self._written(res, await self._kube.replace(res, body, namespace))

    def _written(self, res: Resource, lease: dict[str, Any]) -> dict[str, Any]:
        if res is LEASES:
            self.ops.append(("write", lease["spec"]))
        return lease

    def writes(self) -> list[dict[str, Any]]:
        return [spec for op, spec in self.ops if op == "write"]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._kube, name)


async def test_one_leader_and_a_partitioned_leader_stops_before_the_standby_starts(
    kube: Kube, control_plane: ControlPlane, namespace: str
) -> None:
    timeline: list[tuple[str, str]] = []
    a_kube = await Kube.from_kubeconfig(control_plane.kubeconfig)

    def elector(k: _LeaseLog, who: str) -> LeaderElector:
        return LeaderElector(k, namespace, "lease", who, lease_duration=3, renew_deadline=2, retry_period=0.5)  # type: ignore[arg-type]

    def leading(who: str):  # type: ignore[no-untyped-def]
        async def lead() -> None:
            timeline.append((who, "start"))
            try:
                await asyncio.Event().wait()
            finally:
                timeline.append((who, "stop"))

        return lead

    async def lease() -> dict[str, Any]:
        spec: dict[str, Any] = (await kube.get(LEASES, "lease", namespace))["spec"]
        return spec

    a_log, b_log = _LeaseLog(a_kube), _LeaseLog(kube)
    a, b = elector(a_log, "a"), elector(b_log, "b")
    task_a = asyncio.create_task(a.run(leading("a")))
    await eventually(lambda: _leads(a))
    created = a_log.writes()[0]  # the Lease did not exist: a made it
    assert (created["holderIdentity"], created["leaseDurationSeconds"], created["leaseTransitions"]) == ("a", 3, 0)
    assert created["acquireTime"] == created["renewTime"]
    task_b = asyncio.create_task(b.run(leading("b")))

    # b tries while a renews. a's renewals go on past a whole lease duration after b started (the
    # renewTimes are a's own clock, never compared across machines), and b never takes over.
    await eventually(lambda: _has_read_the_lease(b_log), timeout=30)
    since = await lease()

    async def renewed_past_a_lease_duration() -> dict[str, Any] | None:
        spec = await lease()
        elapsed = (_time(spec["renewTime"]) - _time(since["renewTime"])).total_seconds()
        return spec if elapsed > spec["leaseDurationSeconds"] else None

    held = await eventually(renewed_past_a_lease_duration, timeout=30)
    assert not b.is_leader
    assert b_log.writes() == []  # b never wrote the Lease
    assert (held["holderIdentity"], held["acquireTime"], held["leaseTransitions"]) == ("a", created["acquireTime"], 0)

    # Partition a: its API client is gone, renewals fail. It must stop leading (renew deadline, 2 s)
    # before b may take over (lease duration, 3 s, counted from b's last observed renewal).
    await a_kube.close()
    await asyncio.wait_for(task_a, 10)
    last_by_a = a_log.writes()[-1]
    await eventually(lambda: _leads(b))
    assert timeline == [("a", "start"), ("a", "stop"), ("b", "start")]
    taken = b_log.writes()[0]  # b's first write of the Lease: its takeover
    assert (taken["holderIdentity"], taken["leaseTransitions"]) == ("b", 1)
    assert taken["acquireTime"] == taken["renewTime"]
    # b waited out a's lease, counted from a's last renewal (which b can only have seen after it).
    waited = (_time(taken["acquireTime"]) - _time(last_by_a["renewTime"])).total_seconds()
    assert waited >= last_by_a["leaseDurationSeconds"]
    assert (await lease())["holderIdentity"] == "b"

    # A clean shutdown gives the lease up at once: the holder is cleared, and the next candidate takes
    # the Lease on its very first read of it, with no lease to wait out.
    task_b.cancel()
    await asyncio.gather(task_b, return_exceptions=True)
    await b.release()
    released = await lease()
    assert (released["holderIdentity"], released["leaseDurationSeconds"]) == ("", 1)
    c_log = _LeaseLog(kube)
    c = elector(c_log, "c")
    task_c = asyncio.create_task(c.run(leading("c")))
    await eventually(lambda: _leads(c), interval=0.05)
    (first_op, _), (second_op, written) = c_log.ops[:2]
    assert (first_op, second_op) == ("read", "write")
    assert (written["holderIdentity"], written["leaseTransitions"], written["leaseDurationSeconds"]) == ("c", 2, 3)
    assert written["acquireTime"] == written["renewTime"]
    task_c.cancel()
    await asyncio.gather(task_c, return_exceptions=True)


async def _has_read_the_lease(log: _LeaseLog) -> bool:
    return any(op == "read" for op, _ in log.ops)


async def _held_loop(kubeconfig: Path, namespace: str, threaded: bool) -> tuple[bool, int]:
    """Lead, hold the event loop for 3 s (renew deadline 2 s), lead on: (whether lead() ran to its
    end, i.e. the lease was kept; how many renewal clients were made)."""
    lease_kube = await Kube.from_kubeconfig(kubeconfig)
    renewals: list[int] = []
    finished: list[bool] = []

    async def renewer() -> Kube:  # (awaited on the thread's own loop)
        renewals.append(1)
        return await Kube.from_kubeconfig(kubeconfig)

    async def lead() -> None:
        await asyncio.sleep(1.0)  # (leading, renewing)
        time.sleep(3.0)  # noqa: ASYNC251 -- the point: the loop held past the deadline
        await asyncio.sleep(3.0)  # still leading afterwards? (cancelled if the lease was lost)
        finished.append(True)

    e = LeaderElector(
        lease_kube,
        namespace,
        f"held-{str(threaded).lower()}",
        "a",
        lease_duration=3,
        renew_deadline=2,
        retry_period=0.5,
        renewer=renewer if threaded else None,
    )
    try:
        await asyncio.wait_for(e.run(lead), 20)
    finally:
        await lease_kube.close()
    return finished == [True], len(renewals)


async def test_a_leader_whose_event_loop_is_held_past_the_renew_deadline_keeps_its_lease_with_a_renewal_thread(
    control_plane: ControlPlane, namespace: str
) -> None:
    """A scheduling turn (a long dry run on a starved machine) that holds the event loop for longer
    than the renew deadline: with the renewal thread (draxr run's elector) the lease is renewed
    meanwhile and the leader goes on; renewing on the held loop, the same hold costs the lease."""
    assert await _held_loop(control_plane.kubeconfig, namespace, threaded=True) == (True, 1)
    assert await _held_loop(control_plane.kubeconfig, namespace, threaded=False) == (False, 0)
