"""draxr.heap: the collector is off while the watches list, and the sync's objects are frozen."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator

import pytest

from draxr.heap import ProcessHeap


@pytest.fixture(autouse=True)
def restored_collector() -> Iterator[None]:
    was = gc.isenabled()
    yield
    gc.unfreeze()
    if was:
        gc.enable()


async def test_the_collector_is_off_during_the_sync_and_the_view_frozen_after_it() -> None:
    heap = ProcessHeap()
    heap.sync_started()
    assert not gc.isenabled()
    kept = [[f"pod-{i}"] for i in range(1000)]  # what a sync builds (lists: always tracked)
    before = gc.get_freeze_count()
    heap.sync_done()
    assert gc.isenabled()
    assert gc.get_freeze_count() >= before + len(kept)
    collected = {id(o) for g in range(3) for o in gc.get_objects(generation=g)}  # what collections walk
    assert all(gc.is_tracked(o) and id(o) not in collected for o in kept)


async def test_a_sync_that_takes_too_long_turns_the_collector_back_on() -> None:
    heap = ProcessHeap(off_seconds=0.05)
    heap.sync_started()
    assert not gc.isenabled()
    await asyncio.sleep(0.2)
    assert gc.isenabled()
    heap.sync_done()  # (later: still frozen, still on)
    assert gc.isenabled()


async def test_a_collector_turned_off_by_someone_else_stays_off() -> None:
    gc.disable()
    heap = ProcessHeap(off_seconds=0.05)
    heap.sync_started()
    await asyncio.sleep(0.1)
    assert not gc.isenabled()
    heap.sync_done()
    assert not gc.isenabled()
