"""Inter-pod affinity, topology spreading and the default scores on small hand-made clusters, with
outcomes worked out from upstream's code by hand (the differential test checks thousands more
against the plugins themselves)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from draxr.core.labels import EVERYTHING, NOTHING, Selector
from draxr.core.spread import REASON_MISSING_LABEL, REASON_NOT_MATCH
from draxr_dev.scheduling.evaluate import evaluate_case

JSON = dict[str, Any]


def node(name: str, **labels: str) -> JSON:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}},
    }


def pod(name: str, node_name: str = "", ns: str = "default", **spec: Any) -> JSON:
    labels = spec.pop("labels", {})
    meta: JSON = {"name": name, "namespace": ns, "labels": labels}
    if "owner" in spec:
        meta["ownerReferences"] = [spec.pop("owner")]
    body: JSON = {"containers": [{"name": "c", "image": "app:1"}], **spec}
    if node_name:
        body["nodeName"] = node_name
    return {"metadata": meta, "spec": body}


def case(nodes: list[JSON], pods: list[JSON], incoming: JSON, **extra: Any) -> JSON:
    return {"name": "t", "nodes": nodes, "pods": pods, "pod": incoming, **extra}


def failing(result: JSON) -> dict[str, str]:
    return {n: r["reasons"][0] for n, r in result["filter"].items() if r is not None}


SPREAD_HOST = {
    "maxSkew": 1,
    "topologyKey": "kubernetes.io/hostname",
    "whenUnsatisfiable": "DoNotSchedule",
    "labelSelector": {"matchLabels": {"app": "web"}},
}


def test_hard_spread_over_hostname_rejects_the_fuller_node() -> None:
    r = evaluate_case(
        case(
            [node("a"), node("b")],
            [pod("w1", "a", labels={"app": "web"})],
            pod("w2", labels={"app": "web"}, topologySpreadConstraints=[SPREAD_HOST]),
        )
    )
    assert failing(r) == {"a": REASON_NOT_MATCH}  # 1 + 1 - 0 > 1
    assert r["filter"]["a"]["code"] == "Unschedulable"


def test_spread_counts_only_the_pods_namespace_and_not_terminating_pods() -> None:
    other_ns = pod("x", "a", ns="other", labels={"app": "web"})
    leaving = pod("y", "a", labels={"app": "web"})
    leaving["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    r = evaluate_case(
        case(
            [node("a"), node("b")],
            [other_ns, leaving],
            pod("w", labels={"app": "web"}, topologySpreadConstraints=[SPREAD_HOST]),
        )
    )
    assert failing(r) == {}


def test_a_node_without_the_topology_key_is_unresolvable() -> None:
    zone = {**SPREAD_HOST, "topologyKey": "zone"}
    r = evaluate_case(
        case([node("a", zone="z1"), node("b")], [], pod("w", labels={"app": "web"}, topologySpreadConstraints=[zone]))
    )
    assert failing(r) == {"b": REASON_MISSING_LABEL}
    assert r["filter"]["b"]["code"] == "UnschedulableAndUnresolvable"


def test_min_domains_counts_missing_domains_as_zero() -> None:
    # Two zones with one pod each; minDomains 3 makes the global minimum 0: skew 2 > 1 everywhere.
    zone = {**SPREAD_HOST, "topologyKey": "zone", "minDomains": 3}
    pods = [pod("w1", "a", labels={"app": "web"}), pod("w2", "b", labels={"app": "web"})]
    incoming = pod("w3", labels={"app": "web"}, topologySpreadConstraints=[zone])
    r = evaluate_case(case([node("a", zone="z1"), node("b", zone="z2")], pods, incoming))
    assert failing(r) == {"a": REASON_NOT_MATCH, "b": REASON_NOT_MATCH}
    zone["minDomains"] = 2
    assert failing(evaluate_case(case([node("a", zone="z1"), node("b", zone="z2")], pods, incoming))) == {}


ANTI = {
    "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"}
        ]
    }
}


def test_required_anti_affinity_and_its_symmetry() -> None:
    nodes = [node("a"), node("b")]
    r = evaluate_case(
        case(nodes, [pod("db1", "a", labels={"app": "db"})], pod("db2", labels={"app": "db"}, affinity=ANTI))
    )
    assert failing(r) == {"a": "node(s) didn't match pod anti-affinity rules"}
    # The existing pod carries the anti-affinity: the incoming pod (which has none) stays off its node.
    r = evaluate_case(
        case(nodes, [pod("db1", "a", labels={"app": "x"}, affinity=ANTI)], pod("db2", labels={"app": "db"}))
    )
    assert failing(r) == {"a": "node(s) didn't satisfy existing pods anti-affinity rules"}


def test_first_pod_of_a_group_may_go_anywhere_its_topology_key_exists() -> None:
    affinity = {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": "zone"}
            ]
        }
    }
    nodes = [node("a", zone="z1"), node("b", zone="z2"), node("c")]
    first = pod("c1", labels={"app": "cache"}, affinity=affinity)
    assert failing(evaluate_case(case(nodes, [], first))) == {"c": "node(s) didn't match pod affinity rules"}
    # Once one runs in z1, the next must join it; a pod not matching its own terms cannot start a group.
    second = evaluate_case(case(nodes, [pod("c0", "a", labels={"app": "cache"})], first))
    assert set(failing(second)) == {"b", "c"}
    stranger = pod("s", labels={"app": "other"}, affinity=affinity)
    assert set(failing(evaluate_case(case(nodes, [], stranger)))) == {"a", "b", "c"}


def test_system_default_spreading_scores_replicas_away_from_each_other() -> None:
    owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "controller": True}
    rs = {"metadata": {"name": "web-1", "namespace": "default"}, "spec": {"selector": {"matchLabels": {"app": "web"}}}}
    pods = [pod("w1", "a", labels={"app": "web"}, owner=owner), pod("w2", "a", labels={"app": "web"}, owner=owner)]
    r = evaluate_case(
        case([node("a"), node("b")], pods, pod("w3", labels={"app": "web"}, owner=owner), replicaSets=[rs])
    )
    spread = r["scores"]["PodTopologySpread"]
    # hostname: a has 2 matching pods, weight log(2+2); zone: no zone labels, so no score term.
    # raw a = round(2*log 4 + 2) = 5, b = round(0 + 2) = 2; normalised 100*(5+2-s)/5.
    assert spread == {"a": 100 * 2 // 5, "b": 100 * 5 // 5}
    assert r["total"]["b"] > r["total"]["a"]
    # Without the ReplicaSet (nothing selects the pod) there are no default constraints.
    assert (
        "PodTopologySpread"
        not in evaluate_case(case([node("a"), node("b")], pods, pod("w3", labels={"app": "web"}, owner=owner)))[
            "scores"
        ]
    )


def test_prefer_no_schedule_taints_and_preferred_node_affinity() -> None:
    tainted = node("a", disk="hdd")
    tainted["spec"] = {"taints": [{"key": "spot", "value": "true", "effect": "PreferNoSchedule"}]}
    preferred = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 30,
                    "preference": {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]},
                }
            ]
        }
    }
    r = evaluate_case(case([tainted, node("b", disk="ssd")], [], pod("p", affinity=preferred)))
    assert r["scores"]["TaintToleration"] == {"a": 0, "b": 100}
    assert r["scores"]["NodeAffinity"] == {"a": 0, "b": 100}


def test_image_locality_prefers_the_node_that_has_the_image() -> None:
    with_image = node("a")
    with_image["status"]["images"] = [{"names": ["registry.example/app:1"], "sizeBytes": 500 * 1024 * 1024}]
    incoming = pod("p")
    incoming["spec"]["containers"][0]["image"] = "registry.example/app:1"
    r = evaluate_case(case([with_image, node("b")], [], incoming))
    # sum = 500 MiB * (1 node of 2) = 250 MiB; 100 * (250 - 23) / (1000 - 23) = 23
    assert r["scores"]["ImageLocality"] == {"a": 100 * (250 - 23) // (1000 - 23), "b": 0}


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        (None, {}, False),  # nil: Nothing
        ({}, {"a": "1"}, True),  # empty: Everything
        ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {}, True),
        ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": "1"}, False),
        ({"matchLabels": {"a": "1"}, "matchExpressions": [{"key": "b", "operator": "Exists"}]}, {"a": "1"}, False),
    ],
)
def test_label_selector_semantics(selector: JSON | None, labels: dict[str, str], expected: bool) -> None:
    assert Selector.from_api(selector).matches(labels) is expected


def test_nothing_is_not_empty_and_everything_is() -> None:
    assert EVERYTHING.empty
    assert not NOTHING.empty
    with pytest.raises(ValueError, match="values set can't be empty"):
        Selector.from_api({"matchExpressions": [{"key": "a", "operator": "In", "values": []}]})


@given(st.dictionaries(st.sampled_from("abc"), st.sampled_from("12"), max_size=3), st.sampled_from("abc"))
def test_in_and_notin_are_complements(labels: dict[str, str], key: str) -> None:
    sel_in = Selector.from_api({"matchExpressions": [{"key": key, "operator": "In", "values": ["1"]}]})
    sel_out = Selector.from_api({"matchExpressions": [{"key": key, "operator": "NotIn", "values": ["1"]}]})
    assert sel_in.matches(labels) != sel_out.matches(labels)
