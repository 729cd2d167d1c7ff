"""Caches that outlive one Allocate call must never serve stale answers (architecture: performance plan)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from draxr.core.allocator import Allocated, AllocationTracker, Allocator, Inventory, NoFit
from draxr.core.allocator import allocator as allocator_module
from draxr_dev.allocator.builders import claim, device, device_class, node, request, slice_


def versioned(obj: dict[str, Any], rv: str) -> dict[str, Any]:
    obj["metadata"]["resourceVersion"] = rv
    return obj


def model_slice(rv: str, *models: str) -> dict[str, Any]:
    return versioned(slice_("s", [device(f"d{i}", attributes={"model": m}) for i, m in enumerate(models)]), rv)


def model_class(rv: str, model: str) -> dict[str, Any]:
    return versioned(device_class("gpu", f'device.attributes["driver-a"].model == "{model}"'), rv)


def pick(inv: Inventory, tracker: AllocationTracker | None = None, count: int = 1) -> list[str] | None:
    out = Allocator(inv, tracker.snapshot() if tracker else None).allocate(
        node(), [claim("c", request("r", "gpu", count))]
    )
    if isinstance(out, NoFit):
        return None
    assert isinstance(out, Allocated)
    return [r["device"] for r in out.results[0]["devices"]["results"]]


def test_class_change_invalidates_selector_matches() -> None:
    inv = Inventory([model_slice("1", "a", "b")], [model_class("1", "a")])
    assert pick(inv) == ["d0"]
    assert inv.class_matches  # versioned objects are cached
    inv.upsert_class(model_class("2", "b"))
    assert pick(inv) == ["d1"]


def test_slice_change_invalidates_selector_matches() -> None:
    inv = Inventory([model_slice("1", "a", "b")], [model_class("1", "b")])
    assert pick(inv) == ["d1"]
    inv.upsert_slice(model_slice("2", "b", "a"))
    assert pick(inv) == ["d0"]


def test_unversioned_objects_are_not_cached() -> None:
    inv = Inventory([slice_("s", [device("d0", attributes={"model": "a"})])], [device_class("gpu", "true")])
    assert pick(inv) == ["d0"]
    assert not inv.class_matches


def test_fast_path_candidates_follow_pool_and_allocation_changes() -> None:
    inv = Inventory([model_slice("1", "a")], [model_class("1", "a")])
    tracker = AllocationTracker()
    assert pick(inv, tracker, count=2) is None  # only one candidate: rejected by the fast path
    inv.upsert_slice(model_slice("2", "a", "a"))
    assert pick(inv, tracker, count=2) == ["d0", "d1"]
    tracker.assume(
        "x", {"devices": {"results": [{"request": "r", "driver": "driver-a", "pool": "pool-1", "device": "d0"}]}}
    )
    assert pick(inv, tracker, count=2) is None
    assert pick(inv, tracker) == ["d1"]
    tracker.forget("x")
    assert pick(inv, tracker, count=2) == ["d0", "d1"]


@settings(max_examples=40, deadline=None)
@given(
    models=st.lists(st.sampled_from("abc"), min_size=1, max_size=6),
    wanted=st.lists(st.sampled_from("abc"), min_size=1, max_size=4),
    limit=st.integers(1, 4),
)
def test_the_capped_class_match_cache_answers_as_a_fresh_inventory(
    models: list[str], wanted: list[str], limit: int
) -> None:
    """CLASS_MATCH_CACHE_LIMIT bounds the (class, device) outcomes (memory: devices x classes); the
    cache starting over never changes an answer: each pick equals one from a fresh inventory."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(allocator_module, "CLASS_MATCH_CACHE_LIMIT", limit)
        inv = Inventory([model_slice("1", *models)], [])
        for rv, model in enumerate(wanted, start=1):
            inv.upsert_class(model_class(str(rv), model))
            fresh = Inventory([model_slice("1", *models)], [model_class(str(rv), model)])
            assert pick(inv) == pick(fresh)
            assert len(inv.class_matches) <= limit
