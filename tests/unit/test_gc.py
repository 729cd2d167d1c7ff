"""draxr.core.gc: which special claims to release (kubernetes#134311) or roll back."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from draxr.core.gc import (
    ClaimAction,
    ForeignClaims,
    ReleasePlan,
    ReleasePolicy,
    claims_to_release,
    claims_to_roll_back,
    own_schedulers,
)
from draxr.core.state import ClusterState
from draxr.settings import Settings
from tests.unit.cluster_builders import SCHEDULER, allocation, plain_claim, pod, special_claim

JSON = dict[str, Any]
CLAIM = "web-extended-resources-abcde"
KUBE_SCHEDULER = "default-scheduler"
OWN = frozenset({SCHEDULER})


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
    assert claims_to_release(s, OWN) == [ClaimAction("ns", CLAIM, "web", "uid-web", f"pod {phase}")]
    assert claims_to_release(s, OWN)[0].key == f"ns/{CLAIM}"
    assert not claims_to_release(s, OWN)[0].confirm_pod_gone


@pytest.mark.parametrize("phase", ["Running", "Pending", "Unknown"])
def test_live_pod_keeps_its_claim(phase: str) -> None:
    s = state_with(pod("web", node_name="n1", phase=phase, claim_name=CLAIM), held())
    assert claims_to_release(s, OWN) == []


def test_terminating_but_running_pod_keeps_its_claim() -> None:
    p = pod("web", node_name="n1", phase="Running", claim_name=CLAIM)
    p["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert claims_to_release(state_with(p, held()), OWN) == []


def test_unknown_pod_releases_after_confirmation() -> None:
    """Never seen (deleted while draxr was down, or before its claim was seen): whose it was is
    unknown, so it counts as foreign and waits for kube-controller-manager first."""
    s = state_with(held())
    assert claims_to_release(s, OWN) == [
        ClaimAction("ns", CLAIM, "web", "uid-web", "pod deleted", confirm_pod_gone=True, foreign=True)
    ]


def test_replaced_pod_with_the_same_name_does_not_keep_the_claim() -> None:
    s = state_with(pod("web", uid="uid-web-2", node_name="n1", phase="Running"), held())
    [action] = claims_to_release(s, OWN)
    assert (action.pod_name, action.pod_uid, action.confirm_pod_gone) == ("web", "uid-web", True)


def test_claims_going_away_on_their_own_are_skipped() -> None:
    # Deleted, no allocation, no reservedFor, no finalizer: the API server removes it.
    gone = special_claim(CLAIM, "web", "uid-web", finalizer=False, deleting=True)
    s = state_with(pod("web", node_name="n1", phase="Succeeded"), gone)
    assert claims_to_release(s, OWN) == []
    assert claims_to_release(state_with(gone), OWN) == []


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
    assert keys(claims_to_release(s, OWN)) == [f"ns/{CLAIM}"]


def test_release_ignores_ordinary_and_non_controller_claims() -> None:
    s = state_with(
        pod("web", node_name="n1", phase="Succeeded"),
        plain_claim("ordinary", alloc=allocation("n1", "gpu-1")),
        special_claim("not-special", "web", "uid-web", annotation="false", alloc=allocation("n1", "gpu-2")),
        special_claim("not-controller", "web", "uid-web", controller=False, alloc=allocation("n1", "gpu-3")),
        special_claim("orphan", "gone", "uid-gone", annotation="True"),
    )
    assert claims_to_release(s, OWN) == []


def test_release_is_sorted_and_covers_every_claim_of_the_pod() -> None:
    s = state_with(
        pod("web", node_name="n1", phase="Failed", claim_name="web-extended-resources-b"),
        pod("db", node_name="n1", phase="Running"),
        held("web-extended-resources-b"),
        held("web-extended-resources-a"),  # an older attempt's claim
        held("db-extended-resources-a", "db", "uid-db", alloc=allocation("n1", "gpu-1")),
        held("zz-extended-resources-a", "zz", "uid-zz", namespace="other", alloc=allocation("n1", "gpu-2")),
    )
    actions = claims_to_release(s, OWN)
    assert keys(actions) == [
        "ns/web-extended-resources-a",
        "ns/web-extended-resources-b",
        "other/zz-extended-resources-a",
    ]
    assert [a.confirm_pod_gone for a in actions] == [False, False, True]
    assert actions[2].namespace == "other"


def test_pod_removed_from_state_releases() -> None:
    s = state_with(pod("web", node_name="n1", phase="Running"), held())
    assert claims_to_release(s, OWN) == []
    s.remove_pod("uid-web")
    assert [(a.key, a.confirm_pod_gone, a.foreign) for a in claims_to_release(s, OWN)] == [(f"ns/{CLAIM}", True, False)]


# --------------------------------------------------------------------------- whose claim: own or foreign


def test_kube_schedulers_pods_are_foreign_unless_adopting() -> None:
    s = state_with(
        pod("web", node_name="n1", phase="Succeeded", scheduler=KUBE_SCHEDULER, claim_name=CLAIM),
        held(),
        pod("db", node_name="n1", phase="Failed", scheduler="someone-else"),
        held("db-extended-resources-a", "db", "uid-db", alloc=allocation("n1", "gpu-1")),
    )
    assert [(a.pod_name, a.foreign) for a in claims_to_release(s, OWN)] == [("db", True), ("web", True)]
    adopting = own_schedulers(SCHEDULER, adopt=True)
    assert adopting == {SCHEDULER, KUBE_SCHEDULER}
    assert [(a.pod_name, a.foreign) for a in claims_to_release(s, adopting)] == [("db", True), ("web", False)]
    assert own_schedulers("gpu-sched", adopt=False) == {"gpu-sched"}


@pytest.mark.parametrize(("scheduler", "foreign"), [(SCHEDULER, False), (KUBE_SCHEDULER, True)])
def test_a_deleted_pod_is_remembered_by_its_scheduler_until_its_claims_go(scheduler: str, foreign: bool) -> None:
    s = state_with(
        pod("web", node_name="n1", phase="Running", scheduler=scheduler, claim_name=CLAIM),
        held(),
        held("web-extended-resources-old", alloc=allocation("n1", "gpu-1")),
    )
    s.remove_pod("uid-web")
    assert [(a.name, a.foreign) for a in claims_to_release(s, OWN)] == [
        (CLAIM, foreign),
        ("web-extended-resources-old", foreign),
    ]
    s.remove_claim("ns", CLAIM)
    assert s.gone_pod_schedulers == {"uid-web": scheduler}
    s.remove_claim("ns", "web-extended-resources-old")
    assert s.gone_pod_schedulers == {}  # nothing kept for a pod whose claims are gone


def test_a_deleted_pod_without_claims_leaves_no_tombstone() -> None:
    s = state_with(pod("web", node_name="n1", phase="Running"))
    s.remove_pod("uid-web")
    assert s.gone_pod_schedulers == {}


# --------------------------------------------------------------------------- the release plan


def plan(foreign: ForeignClaims, grace: float = 30.0, adopt: bool = False) -> ReleasePlan:
    return ReleasePlan(ReleasePolicy.of(SCHEDULER, adopt, foreign, grace))


def mixed() -> ClusterState:
    """Two finished pods: draxr's ("own") and kube-scheduler's ("ks")."""
    return state_with(
        pod("own", node_name="n1", phase="Succeeded", claim_name="own-extended-resources-a"),
        held("own-extended-resources-a", "own", "uid-own"),
        pod("ks", node_name="n1", phase="Succeeded", scheduler=KUBE_SCHEDULER, claim_name="ks-extended-resources-a"),
        held("ks-extended-resources-a", "ks", "uid-ks", alloc=allocation("n1", "gpu-1")),
    )


def test_policy_from_the_setting() -> None:
    assert ReleasePolicy.of(SCHEDULER, False, ForeignClaims.AUTO, 12) == ReleasePolicy(OWN, 12.0)
    assert ReleasePolicy.of(SCHEDULER, False, ForeignClaims.ALWAYS, 12) == ReleasePolicy(OWN, 0.0)
    assert ReleasePolicy.of(SCHEDULER, True, ForeignClaims.NEVER, 12) == ReleasePolicy(
        frozenset({SCHEDULER, KUBE_SCHEDULER}), None
    )
    assert Settings().release_policy == ReleasePolicy(OWN, 30.0, 1.0)  # auto: 30 s, own claims 1 s
    s = Settings(scheduler_name="gpu", release_foreign_claims="never", adopt_unschedulable=True)
    assert s.release_policy == ReleasePolicy(frozenset({"gpu", KUBE_SCHEDULER}), None, 1.0)
    assert Settings(release_foreign_claims="always").release_policy == ReleasePolicy(OWN, 0.0, 0.0)
    assert Settings(release_own_grace_seconds=0).release_policy == ReleasePolicy(OWN, 30.0, 0.0)


def test_own_claims_wait_their_short_grace_for_kcm_then_draxr_releases_them() -> None:
    """kube-controller-manager's controller releases draxr's claims too (it reads the pod status):
    draxr steps in only when it has not within the own grace, so the two never race."""
    p, s = ReleasePlan(ReleasePolicy.of(SCHEDULER, False, ForeignClaims.AUTO, 30, own_grace=1.0)), mixed()
    assert keys(p.due(s, now=100.0)) == []
    assert p.held_back == {"ns/own-extended-resources-a": 101.0, "ns/ks-extended-resources-a": 130.0}
    assert p.wait_seconds(now=100.0, sweep_seconds=60) == 1.0
    [own] = p.due(s, now=101.0)
    assert (own.key, own.reason) == ("ns/own-extended-resources-a", "pod Succeeded; not released by KCM within 1s")
    assert p.held_back == {"ns/ks-extended-resources-a": 130.0}
    s.remove_claim("ns", "own-extended-resources-a")  # or the controller got to it first
    assert keys(p.due(s, now=102.0)) == []


def test_auto_releases_own_claims_at_once_and_foreign_ones_after_the_grace_period() -> None:
    p, s = plan(ForeignClaims.AUTO, grace=30), mixed()
    assert keys(p.due(s, now=100.0)) == ["ns/own-extended-resources-a"]
    assert p.held_back == {"ns/ks-extended-resources-a": 130.0}
    assert p.wait_seconds(now=101.0, sweep_seconds=60) == 29.0  # woken for the foreign claim's turn
    assert p.wait_seconds(now=101.0, sweep_seconds=10) == 10.0
    assert keys(p.due(s, now=129.9)) == ["ns/own-extended-resources-a"]  # the own one again: not gone yet
    [ks, own] = p.due(s, now=130.0)
    assert (own.key, own.reason) == ("ns/own-extended-resources-a", "pod Succeeded")
    assert (ks.key, ks.foreign) == ("ns/ks-extended-resources-a", True)
    assert ks.reason == "pod Succeeded; not released by KCM within 30s"
    assert p.held_back == {}
    assert p.wait_seconds(now=130.0, sweep_seconds=60) == 60  # a failed release is retried at the sweep's pace


def test_kcm_releasing_the_foreign_claim_first_leaves_nothing_to_do() -> None:
    p, s = plan(ForeignClaims.AUTO, grace=30), mixed()
    p.due(s, now=0.0)
    s.remove_claim("ns", "ks-extended-resources-a")  # kube-controller-manager deleted it
    assert keys(p.due(s, now=31.0)) == ["ns/own-extended-resources-a"]
    assert p.held_back == {}
    assert p.wait_seconds(now=31.0, sweep_seconds=60) == 60


def test_the_grace_period_counts_from_the_first_sweep_that_saw_the_claim() -> None:
    p = plan(ForeignClaims.AUTO, grace=30)
    s = state_with(pod("ks", node_name="n1", phase="Running", scheduler=KUBE_SCHEDULER), held("ks-a", "ks", "uid-ks"))
    assert p.due(s, now=0.0) == []
    assert p.held_back == {}  # running: nothing to wait for
    s.upsert_pod(pod("ks", node_name="n1", phase="Failed", scheduler=KUBE_SCHEDULER))
    assert p.due(s, now=50.0) == []
    assert p.held_back == {"ns/ks-a": 80.0}
    assert keys(p.due(s, now=80.0)) == ["ns/ks-a"]


def test_always_releases_foreign_claims_at_once_and_never_never() -> None:
    assert keys(plan(ForeignClaims.ALWAYS).due(mixed(), now=0.0)) == [
        "ns/ks-extended-resources-a",
        "ns/own-extended-resources-a",
    ]
    never = plan(ForeignClaims.NEVER)
    for now in (0.0, 1e9):
        assert keys(never.due(mixed(), now)) == ["ns/own-extended-resources-a"]
        assert never.held_back == {}
        assert never.wait_seconds(now, sweep_seconds=30) == 30


def test_adoption_mode_releases_default_scheduler_claims_at_once() -> None:
    assert len(plan(ForeignClaims.NEVER, adopt=True).due(mixed(), now=0.0)) == 2


# ---- property: against a model of the plan over random sweeps


@dataclass
class _Pod:
    scheduler: str
    phase: str = "Running"  # Running, Succeeded, or "gone" (removed from the state)
    claim: bool = True  # its claim is still in the state (kube-controller-manager may delete it)


_SCHEDULERS = st.sampled_from([SCHEDULER, KUBE_SCHEDULER, "other"])
_STEP = st.tuples(
    st.floats(min_value=0, max_value=40, allow_nan=False),  # time until the sweep
    st.lists(st.tuples(st.integers(0, 5), st.sampled_from(["finish", "delete", "kcm"])), max_size=3),
)


@settings(max_examples=200, deadline=None)
@given(
    schedulers=st.lists(_SCHEDULERS, min_size=1, max_size=6),
    foreign=st.sampled_from(list(ForeignClaims)),
    grace=st.sampled_from([0.0, 5.0, 30.0]),
    adopt=st.booleans(),
    steps=st.lists(_STEP, min_size=1, max_size=12),
)
def test_plan_property(
    schedulers: list[str], foreign: ForeignClaims, grace: float, adopt: bool, steps: list[Any]
) -> None:
    """Over any sequence of pods finishing, being deleted and KCM deleting claims between sweeps:
    only releasable claims are due; an own claim is due at every sweep that sees it; a foreign one
    exactly when it has been releasable for the policy's delay (None: never); the shell never
    sleeps past the moment a held-back claim falls due, nor longer than the sweep period."""
    s, model = ClusterState(), dict[str, _Pod]()
    for i, sched in enumerate(schedulers):
        model[f"p{i}"] = _Pod(sched)
        s.upsert_pod(pod(f"p{i}", node_name="n1", phase="Running", scheduler=sched))
        s.upsert_claim(held(f"p{i}-c", f"p{i}", f"uid-p{i}", alloc=allocation("n1", f"gpu-{i}")))
    p = plan(foreign, grace, adopt)
    own, delay = own_schedulers(SCHEDULER, adopt), p.policy.foreign_delay
    releasable_since: dict[str, float] = {}  # the model: claim key -> first sweep that saw it releasable
    now = 0.0
    for dt, events in steps:
        for idx, what in events:
            name = f"p{idx % len(schedulers)}"
            mp = model[name]
            if what == "finish" and mp.phase == "Running":
                mp.phase = "Succeeded"
                s.upsert_pod(pod(name, node_name="n1", phase="Succeeded", scheduler=mp.scheduler))
            elif what == "delete" and mp.phase != "gone":
                mp.phase = "gone"
                s.remove_pod(f"uid-{name}")
            elif what == "kcm" and mp.phase != "Running" and mp.claim:
                mp.claim = False
                s.remove_claim("ns", f"{name}-c")
        now += dt
        due = {a.key: a for a in p.due(s, now)}
        releasable = {f"ns/{n}-c": mp for n, mp in model.items() if mp.claim and mp.phase != "Running"}
        releasable_since = {k: releasable_since.get(k, now) for k in releasable}
        for key, mp in releasable.items():
            is_own = mp.scheduler in own
            expected = is_own or (delay is not None and now - releasable_since[key] >= delay)
            assert (key in due) == expected, (key, mp, now, releasable_since[key])
            if key in due:
                assert due[key].foreign is not is_own
        assert set(due) <= set(releasable)
        wait = p.wait_seconds(now, sweep_seconds=30)
        assert 0 <= wait <= 30
        assert all(now + wait <= t for t in p.held_back.values())


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


@pytest.mark.parametrize(("phase", "node"), [("Pending", ""), ("Succeeded", "n1"), ("Failed", "n1")])
def test_the_pods_own_claims_are_left_to_kube_controller_manager(phase: str, node: str) -> None:
    """A template's claim (kube-controller-manager's: owned by the pod, no extended-resource
    annotation) or a claim by name, reserved for a pod of ours that is unbound (a crash between
    its writes and the Binding) or finished: never rolled back nor released by draxr."""
    owner = {"apiVersion": "v1", "kind": "Pod", "name": "web", "uid": "uid-web", "controller": True}
    template_claim = plain_claim("web-gpu-x7k2p", alloc=allocation("n1", "gpu-1"))
    template_claim["metadata"] |= {
        "ownerReferences": [owner],
        "annotations": {"resource.kubernetes.io/pod-claim-name": "gpu"},
        "finalizers": ["resource.kubernetes.io/delete-protection"],
    }
    by_name = plain_claim("shared", alloc=allocation("n1", "gpu-2"))
    for c in (template_claim, by_name):
        c["status"]["reservedFor"] = [{"resource": "pods", "name": "web", "uid": "uid-web"}]
    s = state_with(pod("web", uid="uid-web", node_name=node, phase=phase), template_claim, by_name)
    assert claims_to_release(s, OWN) == []
    assert claims_to_roll_back(s, OWN, ()) == []
