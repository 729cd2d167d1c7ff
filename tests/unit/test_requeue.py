"""draxr.core.requeue: the kinds of cluster change ClusterState reports, and which a pod rejected
by given plugins waits for (upstream's EventsToRegister; the queue differential proves draxr
retries every pod upstream retries)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from draxr.core.allocator import DEFAULT_FEATURES
from draxr.core.placement import Unschedulable, schedule
from draxr.core.requeue import ANY, PLUGIN_CHANGES, Change, ChangeLog, interest
from draxr.core.state import ClusterState
from tests.unit.cluster_builders import DRIVER, allocation, cluster, gpu_class, gpu_slice, node, pod, special_claim

KINDS = list(Change)


@given(st.lists(st.sampled_from(KINDS), max_size=30), st.integers(0, 30))
def test_since_names_exactly_the_kinds_recorded_after_a_generation(recorded: list[Change], cut: int) -> None:
    log = ChangeLog()
    for change in recorded:
        log.record(change)
    assert log.generation == len(recorded)
    expected = Change(0)
    for change in recorded[cut:]:
        expected |= change
    assert log.since(cut) == expected
    assert log.since(log.generation) == Change(0)


def test_interest_is_the_union_of_the_plugins_kinds() -> None:
    both = interest(["NodeResourcesFit", "DynamicResources"])
    assert both == PLUGIN_CHANGES["NodeResourcesFit"] | PLUGIN_CHANGES["DynamicResources"]
    assert Change.POD_FREED in interest(["NodeResourcesFit"])
    assert Change.POD_FREED not in interest(["DynamicResources"])  # devices come back with claims
    assert Change.CLAIM_FREED in interest(["DynamicResources"])
    assert interest(["DefaultPreemption"]) == Change(0)  # its own gate: ungated, not requeued
    assert interest(["DefaultPreemption", "NodePorts"]) == PLUGIN_CHANGES["NodePorts"]


def test_unknown_or_unnamed_plugins_wait_for_any_change() -> None:
    assert interest([]) == ANY
    assert interest(["NodeResourcesFit", "OutOfTree"]) == ANY
    assert all(kind in ANY for kind in KINDS)


def _bound(name: str, node_name: str, **kw: object) -> dict[str, object]:
    return pod(name, node_name=node_name, phase="Running", **kw)  # type: ignore[arg-type]


def _state() -> ClusterState:
    s = cluster({"n1": 2})
    s.upsert_pod(_bound("a", "n1", requests={"cpu": "1"}, rv="1"))
    s.upsert_claim(special_claim("a-gpu", "a", "uid-a", alloc=allocation("n1", "gpu-0"), reserved=True, rv="1"))
    return s


CASES: list[tuple[str, Callable[[ClusterState], object], Change]] = [
    ("node added", lambda s: s.upsert_node(node("n2")), Change.NODE_ADDED),
    ("node labels", lambda s: s.upsert_node(node("n1", labels={"zone": "b"})), Change.NODE_UPDATED),
    ("node removed", lambda s: s.remove_node("n1"), Change.NODE_REMOVED),
    ("assigned pod deleted", lambda s: s.remove_pod("uid-a"), Change.POD_FREED),
    (
        "assigned pod ended",
        lambda s: s.upsert_pod(pod("a", node_name="n1", phase="Succeeded", requests={"cpu": "1"}, rv="2")),
        Change.POD_FREED,
    ),
    (
        "claim deallocated",
        lambda s: s.upsert_claim(special_claim("a-gpu", "a", "uid-a", rv="2")),
        Change.CLAIM_FREED,
    ),
    ("claim deleted", lambda s: s.remove_claim("ns", "a-gpu"), Change.CLAIM_FREED),
    ("slice added", lambda s: s.upsert_slice(gpu_slice("n2", 2)), Change.SLICE),
    ("class added", lambda s: s.upsert_class(gpu_class("other.example.com", "example.com/other")), Change.CLASS),
    ("storage", lambda s: s.storage_changed(), Change.STORAGE),
]


@pytest.mark.parametrize(("what", "event", "kind"), CASES, ids=[c[0] for c in CASES])
def test_each_state_change_is_recorded_as_its_kind(
    what: str, event: Callable[[ClusterState], object], kind: Change
) -> None:
    s = _state()
    before = s.generation
    event(s)
    assert s.changes.since(before) == kind


def test_a_pod_short_of_devices_waits_for_a_freed_claim_not_a_freed_pod() -> None:
    """End to end through placement: the rejection names DynamicResources, whose kinds do not
    include a pod deleted elsewhere (upstream registers no AssignedPod event for it)."""
    s = _state()
    s.upsert_pod(pod("big", gpus=2, rv="1"))
    result = schedule(s.pods["uid-big"], s, features=DEFAULT_FEATURES)
    assert isinstance(result, Unschedulable)
    assert result.rejecting_plugins() == {"DynamicResources"}
    wants = interest(result.rejecting_plugins())
    parked_at = s.generation
    s.upsert_pod(_bound("c", "n1", requests={"cpu": "1"}, rv="1"))
    s.remove_pod("uid-c")
    assert not s.changes.since(parked_at) & wants
    s.remove_claim("ns", "a-gpu")
    assert s.changes.since(parked_at) & wants


def _no_change(s: ClusterState, event: Callable[[ClusterState], object]) -> Change:
    before = s.generation
    event(s)
    return s.changes.since(before)


def test_an_assumption_replaced_by_its_committed_claim_frees_nothing() -> None:
    """A binding's end: the special claim written (committed), then the in-flight allocation
    under the pod's key forgotten. Its devices stay taken, so no pod short of devices is released
    (recording a free here released them all on every binding: the chaos run's catch-up)."""
    s = _state()
    s.assume_allocation("assumed/uid-b", allocation("n1", "gpu-1"))
    s.upsert_claim(special_claim("b-gpu", "b", "uid-b", alloc=allocation("n1", "gpu-1"), reserved=True, rv="1"))
    assert _no_change(s, lambda s: s.forget_allocation("assumed/uid-b")) == Change(0)
    assert s.tracker.snapshot().is_device_allocated((DRIVER, "n1", "gpu-1"))


def test_a_forgotten_assumption_that_held_devices_frees_them() -> None:
    """A binding that failed: its in-flight allocation was all that held the device."""
    s = _state()
    s.assume_allocation("assumed/uid-b", allocation("n1", "gpu-1"))
    assert _no_change(s, lambda s: s.forget_allocation("assumed/uid-b")) == Change.CLAIM_FREED
    assert _no_change(s, lambda s: s.forget_allocation("assumed/uid-b")) == Change(0)  # (nothing left)


def test_an_unallocated_claim_deleted_frees_nothing() -> None:
    s = _state()
    s.upsert_claim(special_claim("b-gpu", "b", "uid-b", rv="1"))
    assert _no_change(s, lambda s: s.remove_claim("ns", "b-gpu")) == Change(0)


def test_an_assigned_pod_scaled_down_frees_resources() -> None:
    """An in-place resize that lowers a bound pod's requests: upstream's AssignedPod
    UpdatePodScaleDown, which NodeResourcesFit registers (the queue differential's seed 2)."""
    s = _state()
    assert _no_change(s, lambda s: s.upsert_pod(_bound("a", "n1", requests={"cpu": "500m"}, rv="2"))) == (
        Change.POD_FREED
    )
    assert _no_change(s, lambda s: s.upsert_pod(_bound("a", "n1", requests={"cpu": "2"}, rv="3"))) == Change(0)


def _nominated(name: str, node_name: str, rv: str) -> dict[str, object]:
    body = pod(name, requests={"cpu": "1"}, rv=rv)
    body["status"]["nominatedNodeName"] = node_name  # type: ignore[index]
    return body


def test_a_nomination_that_leaves_its_node_frees_room_there() -> None:
    """Upstream's updatePodInSchedulingQueue: a nominatedNodeName that existed and changed
    (moved or cleared) moves pods as an AssignedPod Delete would; the first nomination frees
    nothing (the queue differential's seed 7: the pod's own re-nomination while in flight)."""
    s = _state()
    assert _no_change(s, lambda s: s.upsert_pod(_nominated("p", "n1", rv="1"))) == Change(0)
    assert _no_change(s, lambda s: s.upsert_pod(_nominated("p", "n1", rv="2"))) == Change(0)
    assert _no_change(s, lambda s: s.upsert_pod(_nominated("p", "n2", rv="3"))) == Change.POD_FREED
    assert _no_change(s, lambda s: s.upsert_pod(_nominated("p", "", rv="4"))) == Change.POD_FREED


def test_our_own_renomination_frees_room_at_once_and_not_again_when_its_write_returns() -> None:
    s = _state()
    s.upsert_pod(_nominated("p", "", rv="1"))
    assert _no_change(s, lambda s: s.nominate("uid-p", "n1")) == Change(0)
    assert _no_change(s, lambda s: s.upsert_pod(_nominated("p", "n1", rv="2"))) == Change(0)
    assert _no_change(s, lambda s: s.nominate("uid-p", "n2")) == Change.POD_FREED
    assert _no_change(s, lambda s: s.upsert_pod(_nominated("p", "n2", rv="3"))) == Change(0)
    assert _no_change(s, lambda s: s.nominate("uid-p", "")) == Change.POD_FREED


def test_an_unbound_pod_scaled_down_frees_resources_as_upstreams_target_pod_event() -> None:
    """Upstream records an in-flight pod's own resize down as a TargetPod UpdatePodScaleDown in the
    in-flight event list that every pod in flight replays, and NodeResourcesFit's hint answers it
    with Queue whoever the pod is (the queue differential's seed 12): draxr records a freed pod."""
    s = _state()
    s.upsert_pod(pod("p", requests={"cpu": "100m"}, rv="1"))
    assert _no_change(s, lambda s: s.upsert_pod(pod("p", requests={"cpu": "50m"}, rv="2"))) == Change.POD_FREED
    assert _no_change(s, lambda s: s.upsert_pod(pod("p", requests={"cpu": "200m"}, rv="3"))) == Change(0)


def test_an_allocated_claim_deleted_frees_even_when_another_claim_holds_its_device() -> None:
    """Upstream's DynamicResources queues every pod on an allocated claim's delete without looking
    at the devices (queue differential, seed 854558: two claims allocated the same device)."""
    s = _state()
    s.upsert_claim(special_claim("b-gpu", "b", "uid-b", alloc=allocation("n1", "gpu-0"), reserved=True, rv="1"))
    assert _no_change(s, lambda s: s.remove_claim("ns", "b-gpu")) == Change.CLAIM_FREED
    assert s.tracker.snapshot().is_device_allocated((DRIVER, "n1", "gpu-0"))
