"""Allocated state: what kube-scheduler's claim tracker feeds the allocator (allocateddevices.go, 1.37.2)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from draxr.core.allocator import AllocatedState, AllocationTracker
from draxr_dev.allocator.builders import claim

DEV = ("driver-a", "pool-1", "dev-0")


def allocated(*results: dict[str, Any]) -> dict[str, Any]:
    return claim("c", allocation={"devices": {"results": list(results)}})


def result(device: str = "dev-0", **extra: Any) -> dict[str, Any]:
    return {"request": "r", "driver": "driver-a", "pool": "pool-1", "device": device, **extra}


def test_dedicated_result_marks_device() -> None:
    t = AllocationTracker()
    t.set_claim("a", allocated(result()))
    s = t.snapshot()
    assert s.allocated_devices == {DEV}
    assert s.is_device_allocated(DEV)


def test_claim_without_allocation_counts_nothing() -> None:
    t = AllocationTracker()
    t.set_claim("a", claim("c"))
    assert t.snapshot().allocated_devices == frozenset()


def test_admin_access_results_are_not_allocated() -> None:
    t = AllocationTracker()
    t.set_claim("a", allocated(result(adminAccess=True)))
    assert not t.snapshot().is_device_allocated(DEV)


def test_shared_result_records_share_and_capacity() -> None:
    t = AllocationTracker()
    t.set_claim("a", allocated(result(shareID="s1", consumedCapacity={"mem": "1Gi"})))
    t.set_claim("b", allocated(result(shareID="s2", consumedCapacity={"mem": "512Mi"})))
    s = t.snapshot()
    assert s.allocated_devices == frozenset()
    assert s.shared_device_ids == {(DEV, "s1"), (DEV, "s2")}
    assert s.aggregated_capacity[DEV]["mem"].value == Decimal(1536 * 2**20)
    assert s.is_device_allocated(DEV)


def test_shared_result_is_dedicated_without_consumable_capacity() -> None:
    t = AllocationTracker(consumable_capacity=False)
    t.set_claim("a", allocated(result(shareID="s1", consumedCapacity={"mem": "1Gi"})))
    s = t.snapshot()
    assert s.allocated_devices == {DEV}
    assert not s.aggregated_capacity


def test_removing_claims_releases_devices_and_capacity() -> None:
    t = AllocationTracker()
    t.set_claim("a", allocated(result("dev-0"), result("dev-1", shareID="s", consumedCapacity={"mem": "1"})))
    t.remove_claim("a")
    s = t.snapshot()
    assert not s.allocated_devices
    assert not s.shared_device_ids
    assert not s.aggregated_capacity


def test_deallocation_by_update_releases() -> None:
    t = AllocationTracker()
    t.set_claim("a", allocated(result()))
    t.set_claim("a", claim("c"))  # status.allocation removed
    assert not t.snapshot().allocated_devices


def test_assumed_allocations_count_until_forgotten() -> None:
    t = AllocationTracker()
    t.assume("a", {"devices": {"results": [result()]}})
    assert t.snapshot().allocated_devices == {DEV}
    t.forget("a")
    assert not t.snapshot().allocated_devices


def test_assumed_then_committed_is_counted_once() -> None:
    t = AllocationTracker()
    alloc = {"devices": {"results": [result(shareID="s", consumedCapacity={"mem": "1"})]}}
    t.assume("a", alloc)
    t.set_claim("a", claim("c", allocation=alloc))
    assert t.snapshot().aggregated_capacity[DEV]["mem"].value == 1
    t.forget("a")
    assert t.snapshot().aggregated_capacity[DEV]["mem"].value == 1


def test_device_held_by_two_claims_stays_allocated_until_both_go() -> None:
    t = AllocationTracker()
    t.set_claim("a", allocated(result()))
    t.set_claim("b", allocated(result()))
    t.remove_claim("a")
    assert t.snapshot().allocated_devices == {DEV}


def test_revision_and_snapshot_cache() -> None:
    t = AllocationTracker()
    first = t.snapshot()
    assert t.snapshot() is first
    t.set_claim("a", allocated(result()))
    assert t.revision == 1
    assert t.snapshot() is not first
    t.remove_claim("missing")
    assert t.revision == 1


def test_empty_consumed_capacity_still_marks_capacity_in_use() -> None:
    t = AllocationTracker()
    t.set_claim("a", allocated(result(shareID="s", consumedCapacity={})))
    s = t.snapshot()
    assert DEV in s.aggregated_capacity
    assert s.has_shared_allocation(DEV)


def test_build_helper() -> None:
    s = AllocatedState.build(shared_device_ids=[(DEV, "x")])
    assert s.is_device_allocated(DEV)
    assert s.has_shared_allocation(DEV)


def test_snapshot_is_a_view_of_this_revision_and_the_frozen_one_a_copy() -> None:
    """snapshot() shares the tracker's tables (no copy per cycle); frozen_snapshot() does not."""
    t = AllocationTracker()
    t.set_claim("a", allocated(result("dev-0"), result("dev-1", shareID="s1")))
    live, frozen = t.snapshot(), t.frozen_snapshot()
    want = {DEV, ("driver-a", "pool-1", "dev-1")}
    assert (live.revision, frozen.revision) == (t.revision, t.revision)
    for s in (live, frozen):
        assert s.allocated_devices == {DEV}
        assert all(s.is_device_allocated(d) for d in want)
        assert s.has_shared_allocation(("driver-a", "pool-1", "dev-1"))
    t.remove_claim("a")
    assert live.revision != t.revision  # stale: the allocator never keeps one across a change
    assert not any(live.is_device_allocated(d) for d in want)
    assert all(frozen.is_device_allocated(d) for d in want)
    shared = ("driver-a", "pool-1", "dev-1")
    t.set_claim("b", allocated(result("dev-1", shareID="s1")))
    t.set_claim("c", allocated(result("dev-1", shareID="s2")))
    t.remove_claim("b")
    assert t.snapshot().has_shared_allocation(shared)  # still shared by c
    t.remove_claim("c")
    assert not t.snapshot().has_shared_allocation(shared)
