"""plugins.taint_toleration: upstream's TaintToleration (tainttoleration/taint_toleration.go), its
Filter and raw Score. Upstream's own answers for generated cases:
tests/differential/test_scheduling_differential.py."""

from __future__ import annotations

from typing import Any

from hypothesis import given

from draxr.core.plugins import taint_toleration
from draxr.core.state import ClusterState, PodInfo
from draxr.core.status import Code
from tests.unit.cluster_builders import node, pod

from .node_local_laws import PLAIN, TAINTS, TOLERATIONS, ForgetfulKey, clusters, key_breaks, twins

NO_SCHEDULE, NO_EXECUTE, PREFER = TAINTS


def _tainted() -> ClusterState:
    state = ClusterState()
    state.upsert_node(node("clean"))
    state.upsert_node(node("hard", taints=[NO_SCHEDULE]))
    state.upsert_node(node("soft", taints=[PREFER]))
    return state


def _verdicts(tolerations: list[dict[str, Any]], state: ClusterState) -> dict[str, object]:
    info = PodInfo.from_api(pod("p", tolerations=tolerations) if tolerations else pod("p"))
    check = taint_toleration.PLUGIN.prefilter(info)
    return {n: check(state.nodes[n], state.usage[n]) for n in sorted(state.nodes)}


def test_an_untolerated_no_schedule_taint_is_unresolvable_and_prefer_no_schedule_only_scores() -> None:
    state = _tainted()
    verdicts = _verdicts([], state)
    assert verdicts["clean"] is None
    assert verdicts["soft"] is None
    rejected = verdicts["hard"]
    assert rejected is not None
    assert (rejected.code, rejected.plugin, rejected.reasons) == (
        Code.UNRESOLVABLE, "TaintToleration", ("node(s) had untolerated taint(s)",)
    )  # fmt: skip
    assert _verdicts([TOLERATIONS[0]], state)["hard"] is None  # gpu Exists
    # The Score counts the PreferNoSchedule taints the pod does not tolerate.
    score = taint_toleration.PLUGIN.prescore(PodInfo.from_api(pod("p")))
    assert [score(state.nodes[n], state.usage[n]) for n in ("clean", "hard", "soft")] == [0, 0, 1]
    tolerant = taint_toleration.PLUGIN.prescore(PodInfo.from_api(pod("p", tolerations=[TOLERATIONS[2]])))
    assert tolerant(state.nodes["soft"], state.usage["soft"]) == 0


def test_a_no_execute_taint_needs_a_toleration_of_its_value_and_effect() -> None:
    state = ClusterState()
    state.upsert_node(node("n", taints=[NO_EXECUTE]))
    assert _verdicts([TOLERATIONS[1]], state)["n"] is None  # gpu=x:NoExecute
    wrong_value = {**TOLERATIONS[1], "value": "y"}
    assert _verdicts([wrong_value], state)["n"] is not None


@given(twins(), clusters())
def test_pods_with_the_same_key_get_the_same_verdicts_and_scores(pair: Any, state: ClusterState) -> None:
    assert not key_breaks(taint_toleration.PLUGIN, pair, state)


def test_a_key_that_forgets_the_tolerations_is_caught() -> None:
    fields = PLAIN
    twin = {**fields, "tolerations": [TOLERATIONS[0]]}
    assert key_breaks(ForgetfulKey(taint_toleration.PLUGIN), (fields, twin), _tainted())
