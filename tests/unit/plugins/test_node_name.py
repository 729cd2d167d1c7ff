"""plugins.node_name: upstream's NodeName (nodename/node_name.go). Upstream's own answers for
generated cases: tests/differential/test_scheduling_differential.py."""

from __future__ import annotations

from typing import Any

from hypothesis import given

from draxr.core.plugins import node_name
from draxr.core.state import ClusterState, PodInfo
from draxr.core.status import Code
from tests.unit.cluster_builders import node, pod

from .node_local_laws import PLAIN, ForgetfulKey, clusters, key_breaks, twins


def test_only_the_named_node_passes_and_the_others_are_unresolvable() -> None:
    state = ClusterState()
    for name in ("n1", "n2"):
        state.upsert_node(node(name))
    check = node_name.PLUGIN.prefilter(PodInfo.from_api(pod("p", node_name="n2"), keep_object=True))
    assert check is not None
    assert check(state.nodes["n2"], state.usage["n2"]) is None
    rejected = check(state.nodes["n1"], state.usage["n1"])
    assert rejected is not None
    assert (rejected.code, rejected.plugin) == (Code.UNRESOLVABLE, "NodeName")
    assert rejected.reasons == ("node(s) didn't match the requested node name",)
    # No name: nothing to check (the PreFilter's Skip).
    assert node_name.PLUGIN.prefilter(PodInfo.from_api(pod("q"))) is None


@given(twins(), clusters())
def test_pods_with_the_same_key_get_the_same_verdicts(pair: Any, state: ClusterState) -> None:
    assert not key_breaks(node_name.PLUGIN, pair, state)


def test_a_key_that_forgets_the_name_is_caught() -> None:
    state = ClusterState()
    for name in ("n1", "n2"):
        state.upsert_node(node(name))
    fields = {**PLAIN, "node_name": "n1"}
    assert key_breaks(ForgetfulKey(node_name.PLUGIN), (fields, {**fields, "node_name": "n2"}), state)
