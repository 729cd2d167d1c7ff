"""plugins.image_locality: upstream's ImageLocality score (imagelocality/image_locality.go) and its
column for one pod over the feasible nodes. Upstream's own answers for generated cases:
tests/differential/test_scheduling_differential.py."""

from __future__ import annotations

from draxr.core.gomath import go_div
from draxr.core.limits import MAX_NODE_SCORE
from draxr.core.plugins import image_locality
from draxr.core.plugins.image_locality import MAX_CONTAINER_THRESHOLD, MIN_THRESHOLD, normalized_image_name, score
from draxr.core.state import ClusterState
from tests.unit.cluster_builders import node

MB = 1024 * 1024


def test_an_untagged_name_gets_latest_and_a_registry_port_is_no_tag() -> None:
    assert normalized_image_name("app") == "app:latest"
    assert normalized_image_name("app:1") == "app:1"
    assert normalized_image_name("registry:5000/app") == "registry:5000/app:latest"
    assert normalized_image_name("registry:5000/app:2") == "registry:5000/app:2"


def test_the_size_is_scaled_by_the_share_of_nodes_that_hold_it_and_clamped() -> None:
    sizes = {"a:1": 500 * MB, "b:1": 5000 * MB, "c:1": 1000 * MB}
    # 500 MB on 1 node of 2: 250 MB counted, between the thresholds.
    assert score(["a:1"], {"a:1"}, sizes, {"a:1": 1}, 2) == (
        MAX_NODE_SCORE * (250 * MB - MIN_THRESHOLD) // (MAX_CONTAINER_THRESHOLD - MIN_THRESHOLD)
    )
    assert score(["a:1"], {"a:1"}, sizes, {"a:1": 2}, 2) > score(["a:1"], {"a:1"}, sizes, {"a:1": 1}, 2)
    assert score(["b:1"], {"b:1"}, sizes, {"b:1": 2}, 2) == MAX_NODE_SCORE  # the sum clamped at 1000 MB a container
    assert score(["a:1"], set(), sizes, {"a:1": 1}, 2) == 0  # not on this node
    # Two containers: the ceiling doubles, so one 1000 MB image scores about half.
    two = score(["c:1", "d:1"], {"c:1"}, sizes, {"c:1": 2}, 2)
    assert two == go_div(
        MAX_NODE_SCORE * (MAX_CONTAINER_THRESHOLD - MIN_THRESHOLD), 2 * MAX_CONTAINER_THRESHOLD - MIN_THRESHOLD
    )


def _cluster() -> ClusterState:
    s = ClusterState()
    with_image = node("a")
    with_image["status"]["images"] = [{"names": ["registry.example/app:1"], "sizeBytes": 500 * MB}]
    s.upsert_node(with_image)
    s.upsert_node(node("b"))
    return s


def test_the_column_scores_each_node_or_is_one_zero_when_no_node_has_an_image() -> None:
    s = _cluster()
    nodes = [s.nodes["a"], s.nodes["b"]]
    assert image_locality.column(["registry.example/app:1"], nodes, s) == [
        score(
            ["registry.example/app:1"],
            {"registry.example/app:1"},
            {"registry.example/app:1": 500 * MB},
            {"registry.example/app:1": 1},
            2,
        ),
        0,
    ]
    assert image_locality.column(["registry.example/other:1"], nodes, s) == 0
    assert image_locality.column([], nodes, s) == 0
