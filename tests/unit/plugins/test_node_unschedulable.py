"""plugins.node_unschedulable: upstream's NodeUnschedulable (nodeunschedulable/node_unschedulable.go).
Upstream's own answers for generated cases: tests/differential/test_scheduling_differential.py."""

from __future__ import annotations

from typing import Any

from hypothesis import given

from draxr.core.plugins import node_unschedulable
from draxr.core.state import ClusterState, PodInfo
from draxr.core.status import Code
from tests.unit.cluster_builders import node, pod

from .node_local_laws import PLAIN, TOLERATIONS, ForgetfulKey, clusters, key_breaks, twins

TOLERATES_CORDON = TOLERATIONS[4]  # node.kubernetes.io/unschedulable:NoSchedule


def _cordoned() -> ClusterState:
    state = ClusterState()
    state.upsert_node(node("open"))
    state.upsert_node(node("cordoned", unschedulable=True))
    return state


def test_a_cordoned_node_is_unresolvable_unless_the_pod_tolerates_the_cordon() -> None:
    state = _cordoned()
    check = node_unschedulable.PLUGIN.prefilter(PodInfo.from_api(pod("p")))
    assert check is not None
    assert check(state.nodes["open"], state.usage["open"]) is None
    rejected = check(state.nodes["cordoned"], state.usage["cordoned"])
    assert rejected is not None
    assert (rejected.code, rejected.plugin, rejected.reasons) == (
        Code.UNRESOLVABLE, "NodeUnschedulable", ("node(s) were unschedulable",)
    )  # fmt: skip
    for toleration in (TOLERATES_CORDON, {"operator": "Exists"}):
        assert node_unschedulable.PLUGIN.prefilter(PodInfo.from_api(pod("q", tolerations=[toleration]))) is None


@given(twins(), clusters())
def test_pods_with_the_same_key_get_the_same_verdicts(pair: Any, state: ClusterState) -> None:
    assert not key_breaks(node_unschedulable.PLUGIN, pair, state)


def test_a_key_that_forgets_the_toleration_is_caught() -> None:
    fields = PLAIN
    twin = {**fields, "tolerations": [TOLERATES_CORDON]}
    assert key_breaks(ForgetfulKey(node_unschedulable.PLUGIN), (fields, twin), _cordoned())
