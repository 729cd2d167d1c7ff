"""placement.schedule() with a scheduler profile (core.profile, from a KubeSchedulerConfiguration):
NodeResourcesFit's strategy over a DRA-served extended resource counts the devices of its class on
each node, with the equivalence cache on (its verdicts refreshed when an allocation or a class
changes) and off; score plugins disabled. Upstream's answers: tests/differential/test_config_differential.py."""

from __future__ import annotations

import dataclasses
from typing import Any

from draxr.core.allocator import DEFAULT_FEATURES
from draxr.core.placement import Decision, schedule
from draxr.core.profile import DEFAULT_PROFILE, FitStrategy, ResourceSpec, SchedulerProfile, ScoringType
from draxr.core.state import ClusterState, PodInfo
from draxr_dev.devcluster import fakedriver
from tests.unit.cluster_builders import GPU, GPU_CLASS, cluster, gpu_class, node, pod

JSON = dict[str, Any]
PACK = dataclasses.replace(DEFAULT_PROFILE, fit=FitStrategy(ScoringType.MOST_ALLOCATED, (ResourceSpec(GPU, 1),)))


def _run(state: ClusterState, p: JSON, *, equivalence: bool = True) -> Decision:
    state.upsert_pod(p)
    info = PodInfo.from_api(p, keep_object=True)
    d = schedule(info, state, features=DEFAULT_FEATURES, equivalence=equivalence)
    assert isinstance(d, Decision), d
    return d


def _assume(state: ClusterState, p: JSON, d: Decision) -> None:
    uid = p["metadata"]["uid"]
    state.assume_pod(uid, d.node)
    assert d.allocation is not None
    state.assume_allocation(f"<assumed>/{uid}", d.allocation)


def _place(profile: SchedulerProfile, *, equivalence: bool = True) -> list[str]:
    s = cluster({"n1": 4, "n2": 4})
    s.profile = profile
    out = []
    for name in ("a", "b", "c"):
        p = pod(name, gpus=1)
        d = _run(s, p, equivalence=equivalence)
        _assume(s, p, d)
        out.append(d.node)
    return out


def test_most_allocated_over_the_gpu_packs_and_the_default_does_not_score_it() -> None:
    assert _place(PACK) == ["n1", "n1", "n1"]
    assert _place(PACK, equivalence=False) == ["n1", "n1", "n1"]
    # kube-scheduler's default: LeastAllocated over cpu and memory (each pod's non-zero defaults).
    assert _place(DEFAULT_PROFILE) == ["n1", "n2", "n1"]
    spread = dataclasses.replace(PACK, fit=FitStrategy(ScoringType.LEAST_ALLOCATED, (ResourceSpec(GPU, 1),)))
    assert _place(spread) == ["n1", "n2", "n1"]


def test_the_nodes_fit_score_follows_allocations_and_classes_with_the_cache() -> None:
    """n1: two a100s and two h100s, n2: four h100s. The cached verdicts follow an allocation on
    n1 (its stamp) and a class that starts to select only h100s (the classes' revision)."""
    s = ClusterState()
    s.upsert_class(gpu_class())
    for name, models in (("n1", ("fake-a100", "fake-a100", "fake-h100", "fake-h100")), ("n2", ("fake-h100",) * 4)):
        s.upsert_node(node(name))
        devices = [fakedriver.device(f"gpu-{i}", model=m, uid=f"{name}-{i}") for i, m in enumerate(models)]
        s.upsert_slice(fakedriver.resource_slice(name, devices))
    s.profile = PACK
    first = pod("a", gpus=2)
    d = _run(s, first)
    assert (d.node, d.scores["NodeResourcesFit"]) == ("n1", 50)  # 2 of n1's 4 devices with the pod
    _assume(s, first, d)
    assert sorted(r["device"] for r in (d.allocation or {})["devices"]["results"]) == ["gpu-0", "gpu-1"]
    d2 = _run(s, pod("b", gpus=1))
    assert (d2.node, d2.scores["NodeResourcesFit"]) == ("n1", 75)  # the verdict was refreshed
    s.upsert_class(gpu_class(GPU_CLASS, GPU, 'device.attributes["gpu.example.com"].model == "fake-h100"'))
    d3 = _run(s, pod("c", gpus=1))
    reference = _run(s, pod("c2", gpus=1), equivalence=False)
    assert (d3.node, d3.scores["NodeResourcesFit"]) == ("n1", 50)  # now 1 of n1's 2 h100s
    assert (reference.node, reference.scores) == (d3.node, d3.scores)


def test_a_disabled_score_plugin_is_not_scored() -> None:
    s = cluster({"n1": 4})
    s.profile = dataclasses.replace(
        DEFAULT_PROFILE, weights=tuple((n, w) for n, w in DEFAULT_PROFILE.weights if n != "ImageLocality")
    )
    d = _run(s, pod("a", gpus=1))
    assert "ImageLocality" not in d.scores
    assert "TaintToleration" in d.scores


def test_a_node_counted_full_is_tried_last() -> None:
    """MostAllocated ranks a node whose devices are all taken first (its score caps at 100);
    upstream's DynamicResources Filter turns it down before scoring. draxr's allocator would turn
    it down too, but tries it after the nodes with free devices: the choice is the same, without
    an allocator run on the full node (it is not in the decision's statuses)."""
    s = cluster({"n1": 2, "n2": 4})
    s.profile = PACK
    a = pod("a", gpus=2)
    d = _run(s, a)
    assert d.node == "n1"  # 2 of 2: 100 against 25
    _assume(s, a, d)
    d2 = _run(s, pod("b", gpus=1))
    assert d2.node == "n2"
    assert "n1" not in d2.statuses  # the allocator never ran on n1
    reference = _run(s, pod("b2", gpus=1), equivalence=False)
    assert reference.node == "n2"


def test_pod_level_hugepages_are_not_scored_as_upstreams_fit_leaves_pod_level_requests_out() -> None:
    """Upstream's NodeResourcesFit scorer has no enablePodLevelResources: a pod-level hugepages
    request scores as 0, which leaves the resource out (config differential, seed 546992); a
    container's request counts. MostAllocated over hugepages-2Mi alone: with the request scored
    n1 (1Gi of 1Gi) scores 100, without it nothing scores."""
    s = ClusterState()
    big = node("n1")
    big["status"]["allocatable"]["hugepages-2Mi"] = "1Gi"
    s.upsert_node(big)
    s.profile = dataclasses.replace(
        DEFAULT_PROFILE, fit=FitStrategy(ScoringType.MOST_ALLOCATED, (ResourceSpec("hugepages-2Mi", 1),))
    )
    pod_level = pod("a")
    pod_level["spec"]["resources"] = {"requests": {"cpu": "1", "hugepages-2Mi": "1Gi"}}
    assert _run(s, pod_level).scores["NodeResourcesFit"] == 0
    in_container = pod("b")
    in_container["spec"]["containers"][0].setdefault("resources", {})["requests"] = {"hugepages-2Mi": "1Gi"}
    assert _run(s, in_container).scores["NodeResourcesFit"] == 100
