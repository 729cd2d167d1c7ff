"""A new leader catches up before its first decision (draxr.takeover): the claims and bindings a
previous leader wrote while this replica's watches lagged reach the state; nothing older than what
the state holds wins. Found by bench/chaos.py (drop-all, then a failover: a device in two claims)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from draxr.core.allocator import DEFAULT_FEATURES
from draxr.core.placement import Decision, Unschedulable, schedule
from draxr.kube import PODS, RESOURCE_CLAIMS
from draxr.scheduler import Scheduler
from draxr.settings import Settings
from draxr.takeover import catch_up
from draxr.watch import Informer, Target

from .cluster_builders import allocation, cluster, pod, special_claim


class Lists:
    def __init__(self, items: dict[str, list[dict[str, Any]]]) -> None:
        self.items = items
        self.queries: list[tuple[str, dict[str, Any]]] = []

    async def pages(self, res: Any, namespace: str | None = None, **query: Any) -> AsyncIterator[list[dict[str, Any]]]:
        self.queries.append((res.plural, query))
        yield self.items[res.plural]


async def test_a_new_leader_sees_what_the_previous_one_wrote_before_deciding() -> None:
    state = cluster({"n1": 2})
    claims = Informer(
        Target("resourceclaims", RESOURCE_CLAIMS, state.upsert_claim, lambda o: None),
        None,  # type: ignore[arg-type]  (catch_up does not watch)
    )
    pods = Informer(Target("pods", PODS, state.upsert_pod, lambda o: None), None)  # type: ignore[arg-type]
    waiting = state.upsert_pod(pod("new", gpus=2, rv="7"))
    # The previous leader bound "old" to both devices; this replica's watches never showed it.
    held = special_claim("old-claim", "old", "uid-old", alloc=allocation("n1", "gpu-0", "gpu-1"), rv="10")
    bound = pod("old", gpus=2, node_name="n1", rv="11", claim_name=held["metadata"]["name"])
    stale = pod("new", gpus=2, rv="3")  # an older version than the state's: ignored
    api = Lists({"resourceclaims": [held], "pods": [bound, stale]})
    assert isinstance(schedule(waiting, state, features=DEFAULT_FEATURES), Decision)  # (on the stale view)

    assert await catch_up(api, [claims, pods], "draxr") == 3  # type: ignore[arg-type]

    assert isinstance(schedule(waiting, state, features=DEFAULT_FEATURES), Unschedulable)
    assert state.pods["uid-old"].node_name == "n1"
    assert state.pods["uid-new"].raw["metadata"]["resourceVersion"] == "7"
    assert set(claims.known) == {f"ns/{held['metadata']['name']}"}  # a later re-list reconciles them
    assert [q for _, q in api.queries] == [{"limit": 500}, {"limit": 500, "fieldSelector": "spec.schedulerName=draxr"}]


def test_a_leader_catching_up_is_no_stalled_scheduling_loop() -> None:
    """Liveness counts a stall only while the loop runs: before it starts (a new leader catching
    up and rolling back claims) its last cycle may lie long back (the chaos run saw liveness fail
    for "no cycle for 36s" right after a takeover)."""
    sched = Scheduler(None, cluster({"n1": 2}), Settings(), None)  # type: ignore[arg-type]
    sched.queue.add("uid-p", 0, "2026-01-01T00:00:00Z")
    sched.heartbeat -= 36
    assert sched.stalled_for() == 0.0
    sched.running = True
    assert sched.stalled_for() >= 36


async def test_kinds_listed_since_no_other_leader_could_write_are_not_listed_again() -> None:
    """A list sent after ``quiet_since`` already holds every write of a previous leader; a kind
    listed before it (or never) is caught up as before."""
    state = cluster({"n1": 2})
    claims = Informer(Target("resourceclaims", RESOURCE_CLAIMS, state.upsert_claim, lambda o: None), None)  # type: ignore[arg-type]
    pods = Informer(Target("pods", PODS, state.upsert_pod, lambda o: None), None)  # type: ignore[arg-type]
    held = special_claim("old-claim", "old", "uid-old", alloc=allocation("n1", "gpu-0", "gpu-1"), rv="10")
    bound = pod("old", gpus=2, node_name="n1", rv="11", claim_name=held["metadata"]["name"])
    api = Lists({"resourceclaims": [held], "pods": [bound]})
    claims.listed_since, pods.listed_since = 100.0, 99.0  # pods listed before the quiet time

    assert await catch_up(api, [claims, pods], "draxr", quiet_since=100.0) == 1  # type: ignore[arg-type]
    assert [plural for plural, _ in api.queries] == ["pods"]
    assert state.pods["uid-old"].node_name == "n1"

    pods.listed_since = 100.5
    assert await catch_up(api, [claims, pods], "draxr", quiet_since=100.0) == 0  # type: ignore[arg-type]
    assert await catch_up(api, [claims, pods], "draxr", quiet_since=None) == 2  # type: ignore[arg-type]
    assert [plural for plural, _ in api.queries] == ["pods", "resourceclaims", "pods"]
