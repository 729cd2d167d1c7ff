"""draxr.core.gc: which special claims to release (kubernetes#134311) or roll back."""

from __future__ import annotations

from typing import Any

import pytest

from draxr.core.gc import ClaimAction, claims_to_release, claims_to_roll_back
from draxr.core.state import ClusterState
from tests.unit.cluster_builders import SCHEDULER, allocation, plain_claim, pod, special_claim

JSON = dict[str, Any]
CLAIM = "web-extended-resources-abcde"


def held(name: str = CLAIM, pod_name: str = "web", pod_uid: str = "uid-web", **kw: Any) -> JSON:
    """A special claim in use: allocated, reserved for its pod, finalizer set."""
    kw.setdefault("alloc", allocation("n1", "gpu-0"))
    kw.setdefault("reserved", True)
    return special_claim(name, pod_name, pod_uid, **kw)


def state_with(*objs: JSON) -> ClusterState:
    s = ClusterState()
    for o in objs:
        if o.get("kind") == "Pod":
            s.upsert_pod(o)
        else:
            s.upsert_claim(o)
    return s


def keys(actions: list[ClaimAction]) -> list[str]:
    return [a.key for a in actions]


# --------------------------------------------------------------------------- release


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_terminal_pod_releases_its_claim(phase: str) -> None:
    s = state_with(pod("web", node_name="n1", phase=phase, claim_name=CLAIM), held())
    assert claims_to_release(s) == [ClaimAction("ns", CLAIM, "web", "uid-web", f"pod {phase}")]
    assert claims_to_release(s)[0].key == f"ns/{CLAIM}"
    assert not claims_to_release(s)[0].confirm_pod_gone


@pytest.mark.parametrize("phase", ["Running", "Pending", "Unknown"])
def test_live_pod_keeps_its_claim(phase: str) -> None:
    s = state_with(pod("web", node_name="n1", phase=phase, claim_name=CLAIM), held())
    assert claims_to_release(s) == []


def test_terminating_but_running_pod_keeps_its_claim() -> None:
    p = pod("web", node_name="n1", phase="Running", claim_name=CLAIM)
    p["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert claims_to_release(state_with(p, held())) == []


def test_unknown_pod_releases_after_confirmation() -> None:
    s = state_with(held())
    assert claims_to_release(s) == [ClaimAction("ns", CLAIM, "web", "uid-web", "pod deleted", confirm_pod_gone=True)]


def test_replaced_pod_with_the_same_name_does_not_keep_the_claim() -> None:
    s = state_with(pod("web", uid="uid-web-2", node_name="n1", phase="Running"), held())
    [action] = claims_to_release(s)
    assert (action.pod_name, action.pod_uid, action.confirm_pod_gone) == ("web", "uid-web", True)


def test_claims_going_away_on_their_own_are_skipped() -> None:
    # Deleted, no allocation, no reservedFor, no finalizer: the API server removes it.
    gone = special_claim(CLAIM, "web", "uid-web", finalizer=False, deleting=True)
    s = state_with(pod("web", node_name="n1", phase="Succeeded"), gone)
    assert claims_to_release(s) == []
    assert claims_to_release(state_with(gone)) == []


@pytest.mark.parametrize(
    "kw",
    [
        {"finalizer": True, "deleting": True},  # deleted, but our finalizer still holds it
        {"finalizer": False, "deleting": True, "alloc": allocation("n1", "gpu-0")},  # deleted, devices held
        {"finalizer": False, "deleting": True, "reserved": True},  # deleted, still reserved
        {"finalizer": False},  # released (no allocation, no reservedFor) but not deleted: counts for quota
        {"finalizer": True},  # released by kube-controller-manager halfway
    ],
)
def test_claims_that_need_our_help_are_released(kw: JSON) -> None:
    claim = special_claim(CLAIM, "web", "uid-web", **kw)
    s = state_with(pod("web", node_name="n1", phase="Succeeded"), claim)
    assert keys(claims_to_release(s)) == [f"ns/{CLAIM}"]


def test_release_ignores_ordinary_and_non_controller_claims() -> None:
    s = state_with(
        pod("web", node_name="n1", phase="Succeeded"),
        plain_claim("ordinary", alloc=allocation("n1", "gpu-1")),
        special_claim("not-special", "web", "uid-web", annotation="false", alloc=allocation("n1", "gpu-2")),
        special_claim("not-controller", "web", "uid-web", controller=False, alloc=allocation("n1", "gpu-3")),
        special_claim("orphan", "gone", "uid-gone", annotation="True"),
    )
    assert claims_to_release(s) == []


def test_release_is_sorted_and_covers_every_claim_of_the_pod() -> None:
    s = state_with(
        pod("web", node_name="n1", phase="Failed", claim_name="web-extended-resources-b"),
        pod("db", node_name="n1", phase="Running"),
        held("web-extended-resources-b"),
        held("web-extended-resources-a"),  # an older attempt's claim
        held("db-extended-resources-a", "db", "uid-db", alloc=allocation("n1", "gpu-1")),
        held("zz-extended-resources-a", "zz", "uid-zz", namespace="other", alloc=allocation("n1", "gpu-2")),
    )
    actions = claims_to_release(s)
    assert keys(actions) == [
        "ns/web-extended-resources-a",
        "ns/web-extended-resources-b",
        "other/zz-extended-resources-a",
    ]
    assert [a.confirm_pod_gone for a in actions] == [False, False, True]
    assert actions[2].namespace == "other"


def test_pod_removed_from_state_releases() -> None:
    s = state_with(pod("web", node_name="n1", phase="Running"), held())
    assert claims_to_release(s) == []
    s.remove_pod("uid-web")
    assert [(a.key, a.confirm_pod_gone) for a in claims_to_release(s)] == [(f"ns/{CLAIM}", True)]


# --------------------------------------------------------------------------- roll back


def test_unbound_pod_not_in_flight_rolls_back() -> None:
    s = state_with(pod("web"), held())
    assert claims_to_roll_back(s, {SCHEDULER}, frozenset()) == [
        ClaimAction("ns", CLAIM, "web", "uid-web", "pod not bound: stale claim of an earlier attempt")
    ]


def test_unbound_pod_with_status_naming_the_claim_still_rolls_back() -> None:
    """A crash between the pod status patch and the binding: upstream never reuses the claim."""
    s = state_with(pod("web", claim_name=CLAIM), held())
    assert keys(claims_to_roll_back(s, {SCHEDULER}, frozenset())) == [f"ns/{CLAIM}"]


def test_in_flight_pod_is_left_alone() -> None:
    s = state_with(pod("web"), held())
    assert claims_to_roll_back(s, {SCHEDULER}, frozenset({"uid-web"})) == []
    assert claims_to_roll_back(s, {SCHEDULER}, {"uid-web"}) == []


def test_bound_pod_using_the_claim_is_left_alone() -> None:
    s = state_with(pod("web", node_name="n1", phase="Running", claim_name=CLAIM), held())
    assert claims_to_roll_back(s, {SCHEDULER}, frozenset()) == []


def test_bound_pod_using_another_claim_rolls_back_the_other() -> None:
    s = state_with(
        pod("web", node_name="n1", phase="Running", claim_name=CLAIM),
        held(),
        held("web-extended-resources-old", alloc=allocation("n1", "gpu-1")),
    )
    assert claims_to_roll_back(s, {SCHEDULER}, frozenset()) == [
        ClaimAction("ns", "web-extended-resources-old", "web", "uid-web", f"pod is bound and uses claim {CLAIM}")
    ]


def test_bound_pod_without_claim_status_rolls_back() -> None:
    s = state_with(pod("web", node_name="n1", phase="Running"), held())
    [action] = claims_to_roll_back(s, {SCHEDULER}, frozenset())
    assert action.reason == "pod is bound and uses claim (none)"


def test_kube_schedulers_pods_are_left_alone() -> None:
    s = state_with(
        pod("web", scheduler="default-scheduler"),
        held(),
        pod("db", scheduler="default-scheduler", node_name="n1", phase="Running", claim_name="other"),
        held("db-extended-resources-a", "db", "uid-db"),
    )
    assert claims_to_roll_back(s, {SCHEDULER}, frozenset()) == []
    assert keys(claims_to_roll_back(s, {"default-scheduler"}, frozenset())) == [
        "ns/db-extended-resources-a",
        f"ns/{CLAIM}",
    ]


def test_roll_back_leaves_terminal_unknown_and_going_away_alone() -> None:
    s = state_with(
        pod("done", phase="Succeeded"),
        held("done-extended-resources-a", "done", "uid-done"),
        held("ghost-extended-resources-a", "ghost", "uid-ghost"),
        pod("web"),
        special_claim(CLAIM, "web", "uid-web", finalizer=False, deleting=True),
        plain_claim("ordinary", alloc=allocation("n1", "gpu-3")),
    )
    assert claims_to_roll_back(s, {SCHEDULER}, frozenset()) == []


def test_roll_back_does_not_touch_a_claim_whose_binding_is_assumed() -> None:
    """The binding succeeded and the pod left the queue's in-flight set, but the watch has not yet
    delivered the pod with its nodeName: the state still holds the assumption. The claim is in use
    by a bound pod and must not be rolled back."""
    s = state_with(pod("web", rv="1"), held(rv="3"))
    s.assume_pod("uid-web", "n1")  # the scheduler's decision; kept until the binding is seen
    assert claims_to_roll_back(s, {SCHEDULER}, frozenset()) == []
    # Once the binding is visible, the pod is bound and uses the claim: still nothing to do.
    s.upsert_pod(pod("web", rv="4", node_name="n1", phase="Running", claim_name=CLAIM))
    assert claims_to_roll_back(s, {SCHEDULER}, frozenset()) == []
