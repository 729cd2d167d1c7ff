"""The Go scheduler harness (tests/scheduler_harness) reproduces known kube-scheduler 1.37.2 outcomes.

Hand-written cases with answers read off upstream's plugin sources (reason strings, score formulas),
so that a broken harness (wrong profile, plugins not run, informers not synced, the API server's
matchLabelKeys merge not applied, scores left weighted) fails here rather than making the
differential test compare against garbage. Needs the harness: built (or reused) by
hack/build-scheduler-harness.sh; errors, never skips, when it cannot be built.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from draxr_dev.scheduling import harness as go_harness

JSON = dict[str, Any]
HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
SPREAD_REASON = "node(s) didn't match pod topology spread constraints"


def node(
    name: str, *, zone: str = "zone-a", cpu: str = "4", memory: str = "8Gi", pods: str = "110", **spec: Any
) -> JSON:
    images = spec.pop("images", None)
    status: JSON = {"allocatable": {"cpu": cpu, "memory": memory, "pods": pods}}
    status["capacity"] = dict(status["allocatable"])
    if images:
        status["images"] = images
    labels = {HOSTNAME: name, ZONE: zone}
    return {"metadata": {"name": name, "labels": labels}, "spec": spec, "status": status}


def pod(name: str, labels: dict[str, str] | None = None, node_name: str = "", **spec: Any) -> JSON:
    spec.setdefault("containers", [{"name": "c", "image": "registry.example.com/app:1"}])
    if node_name:
        spec["nodeName"] = node_name
    meta: JSON = {"name": name, "namespace": "default", "uid": f"uid-{name}"}
    if labels:
        meta["labels"] = labels
    return {"metadata": meta, "spec": spec, "status": {"phase": "Running" if node_name else "Pending"}}


def case(name: str, nodes: list[JSON], incoming: JSON, pods: list[JSON] | None = None, **extra: Any) -> JSON:
    return {
        "name": name,
        "nodes": nodes,
        "pods": pods or [],
        "namespaces": [{"metadata": {"name": "default", "labels": {"kubernetes.io/metadata.name": "default"}}}],
        "services": [],
        "replicationControllers": [],
        "replicaSets": [],
        "statefulSets": [],
        "pod": incoming,
        **extra,
    }


def anti_affinity(term: JSON) -> JSON:
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


CASES: list[JSON] = [
    case(
        "spread-hostname",
        [node("a"), node("b"), node("c")],
        pod(
            "incoming",
            {"app": "web"},
            topologySpreadConstraints=[
                {
                    "maxSkew": 1,
                    "topologyKey": HOSTNAME,
                    "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": {"app": "web"}},
                }
            ],
        ),
        [pod("w1", {"app": "web"}, "a")],
    ),
    case(
        "anti-affinity",
        [node("a"), node("b")],
        pod(
            "incoming",
            {"app": "web"},
            affinity=anti_affinity({"topologyKey": HOSTNAME, "labelSelector": {"matchLabels": {"app": "web"}}}),
        ),
        [pod("w1", {"app": "web"}, "b")],
    ),
    case(
        # matchLabelKeys: kube-apiserver adds `version In [v1]` to the selector, so only w1 counts.
        "anti-affinity-matchLabelKeys",
        [node("a"), node("b")],
        pod(
            "incoming",
            {"app": "web", "version": "v1"},
            affinity=anti_affinity(
                {
                    "topologyKey": HOSTNAME,
                    "labelSelector": {"matchLabels": {"app": "web"}},
                    "matchLabelKeys": ["version"],
                }
            ),
        ),
        [pod("w1", {"app": "web", "version": "v1"}, "b"), pod("w2", {"app": "web", "version": "v2"}, "a")],
    ),
    case(
        "taint-prefer-no-schedule",
        [node("a", taints=[{"key": "spot", "value": "true", "effect": "PreferNoSchedule"}]), node("b")],
        pod("incoming"),
    ),
    case(
        "image-locality",
        [
            node("a", images=[{"names": ["registry.example.com/big:1"], "sizeBytes": 800 * 1024 * 1024}]),
            node("b"),
            node("c"),
        ],
        pod("incoming", containers=[{"name": "c", "image": "registry.example.com/big:1"}]),
    ),
    case(
        "matchFields",
        [node("a"), node("b"), node("c")],
        pod(
            "incoming",
            affinity={
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b"]}]},
                            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gone"]}]},
                        ]
                    }
                }
            },
        ),
    ),
    case(
        "matchFields-conflict",
        [node("a"), node("b")],
        pod(
            "incoming",
            affinity={
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchFields": [
                                    {"key": "metadata.name", "operator": "In", "values": ["a"]},
                                    {"key": "metadata.name", "operator": "In", "values": ["b"]},
                                ]
                            }
                        ]
                    }
                }
            },
        ),
    ),
    case("unschedulable", [node("a", unschedulable=True), node("b")], pod("incoming")),
    case(
        "first-pod-of-group",
        [node("a"), node("b")],
        pod(
            "incoming",
            {"group": "g1"},
            affinity={
                "podAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {"topologyKey": ZONE, "labelSelector": {"matchLabels": {"group": "g1"}}}
                    ]
                }
            },
        ),
    ),
    case(
        "too-many-pods-and-terminal",
        [node("a", pods="1"), node("b", pods="1")],
        pod("incoming"),
        # The Succeeded pod is not in the scheduler's cache: node b keeps its one pod slot.
        [pod("p1", None, "a"), {**pod("p2", None, "b"), "status": {"phase": "Succeeded"}}],
    ),
    case(
        "system-default-spreading",
        [node("a", zone="zone-a"), node("b", zone="zone-b")],
        pod("incoming", {"app": "web"}),
        [pod("w1", {"app": "web"}, "a"), pod("w2", {"app": "web"}, "a")],
        services=[{"metadata": {"name": "web", "namespace": "default"}, "spec": {"selector": {"app": "web"}}}],
    ),
    case(
        # The optional storage objects reach the informers: a PVC bound to a PV pinned to node a.
        "bound-volume",
        [node("a"), node("b")],
        pod("incoming", volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]),
        persistentVolumes=[
            {
                "metadata": {"name": "pv-a"},
                "spec": {
                    "capacity": {"storage": "1Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": "local",
                    "local": {"path": "/mnt/data"},
                    "claimRef": {"namespace": "default", "name": "data", "uid": "pvc-uid"},
                    "nodeAffinity": {
                        "required": {
                            "nodeSelectorTerms": [
                                {"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": ["a"]}]}
                            ]
                        }
                    },
                },
                "status": {"phase": "Bound"},
            }
        ],
        persistentVolumeClaims=[
            {
                "metadata": {
                    "name": "data",
                    "namespace": "default",
                    "uid": "pvc-uid",
                    "annotations": {"pv.kubernetes.io/bind-completed": "yes"},  # set by the PV controller
                },
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": "local",
                    "volumeName": "pv-a",
                    "resources": {"requests": {"storage": "1Gi"}},
                },
                "status": {"phase": "Bound"},
            }
        ],
        storageClasses=[
            {
                "metadata": {"name": "local"},
                "provisioner": "kubernetes.io/no-provisioner",
                "volumeBindingMode": "WaitForFirstConsumer",
            }
        ],
    ),
    {"name": "no-pod", "nodes": [node("a")], "pods": []},
]


@pytest.fixture(scope="module")
def harness() -> Path:
    return go_harness.build()


@pytest.fixture(scope="module")
def results(harness: Path) -> dict[str, JSON]:
    out = go_harness.run(harness, CASES)
    return {r["name"]: r for r in out}


def status(plugin: str, code: str, *reasons: str) -> JSON:
    return {"plugin": plugin, "code": code, "reasons": list(reasons)}


def test_profile_and_features(harness: Path) -> None:
    profile = go_harness.profile(harness)
    weights = {p["name"]: p.get("weight") for p in profile["plugins"]["score"]}
    assert weights == {
        "TaintToleration": 3,
        "NodeAffinity": 2,
        "NodeResourcesFit": 1,
        "VolumeBinding": 1,
        "PodTopologySpread": 2,
        "InterPodAffinity": 2,
        "DynamicResources": 2,
        "NodeResourcesBalancedAllocation": 1,
        "ImageLocality": 1,
    }, weights
    assert profile["schedulerName"] == "default-scheduler"
    assert profile["pluginArgs"]["InterPodAffinity"]["HardPodAffinityWeight"] == 1
    assert profile["pluginArgs"]["PodTopologySpread"]["DefaultingType"] == "System"
    gates = go_harness.features(harness)
    assert gates["emulationVersion"].startswith("1.37")
    assert gates["featureGates"]["MatchLabelKeysInPodAffinity"] is True
    assert gates["featureGates"]["NodeInclusionPolicyInPodTopologySpread"] is True
    assert gates["featureGates"]["DynamicResourceAllocation"] is True


def test_topology_spread_rejects_the_loaded_node(results: dict[str, JSON]) -> None:
    r = results["spread-hostname"]
    assert r["filter"] == {"a": status("PodTopologySpread", "Unschedulable", SPREAD_REASON), "b": None, "c": None}


def test_required_anti_affinity(results: dict[str, JSON]) -> None:
    r = results["anti-affinity"]
    reason = "node(s) didn't match pod anti-affinity rules"
    assert r["filter"] == {"a": None, "b": status("InterPodAffinity", "Unschedulable", reason)}


def test_pod_affinity_matchLabelKeys_are_merged_like_kube_apiserver(results: dict[str, JSON]) -> None:
    r = results["anti-affinity-matchLabelKeys"]
    reason = "node(s) didn't match pod anti-affinity rules"
    assert r["filter"] == {"a": None, "b": status("InterPodAffinity", "Unschedulable", reason)}


def test_taint_toleration_score_is_normalised_and_unweighted(results: dict[str, JSON]) -> None:
    r = results["taint-prefer-no-schedule"]
    assert r["filter"] == {"a": None, "b": None}
    assert r["scores"]["TaintToleration"] == {"a": 0, "b": 100}
    assert r["weights"]["TaintToleration"] == 3
    assert r["total"]["b"] - r["total"]["a"] == 300 + sum(
        r["weights"][p] * (r["scores"][p]["b"] - r["scores"][p]["a"]) for p in r["scores"] if p != "TaintToleration"
    )


def test_image_locality(results: dict[str, JSON]) -> None:
    r = results["image-locality"]
    scores = r["scores"]["ImageLocality"]
    assert scores["a"] > 0
    assert scores["b"] == scores["c"] == 0
    # upstream: (800 MiB * 1/3 - 23 MB) * 100 / (1000 MB - 23 MB), integer arithmetic
    size = 800 * 1024 * 1024 // 3
    assert scores["a"] == (size - 23 * 1024 * 1024) * 100 // ((1000 - 23) * 1024 * 1024)


def test_prefilter_result_narrows_nodes(results: dict[str, JSON]) -> None:
    r = results["matchFields"]
    absent = status("", "UnschedulableAndUnresolvable", "node(s) didn't satisfy plugin(s) [NodeAffinity]")
    assert r["filter"] == {"a": absent, "b": None, "c": absent}
    assert set(r["total"]) == {"b"}


def test_prefilter_rejection_is_reported_on_every_node(results: dict[str, JSON]) -> None:
    r = results["matchFields-conflict"]
    rejected = status("NodeAffinity", "UnschedulableAndUnresolvable", "pod affinity terms conflict")
    assert r["filter"] == {"a": rejected, "b": rejected}
    assert r["total"] == {}


def test_unschedulable_node(results: dict[str, JSON]) -> None:
    r = results["unschedulable"]
    rejected = status("NodeUnschedulable", "UnschedulableAndUnresolvable", "node(s) were unschedulable")
    assert r["filter"] == {"a": rejected, "b": None}


def test_first_pod_of_a_group_may_go_anywhere(results: dict[str, JSON]) -> None:
    assert results["first-pod-of-group"]["filter"] == {"a": None, "b": None}


def test_pod_count_and_terminal_pods(results: dict[str, JSON]) -> None:
    r = results["too-many-pods-and-terminal"]
    assert r["filter"] == {"a": status("NodeResourcesFit", "Unschedulable", "Too many pods"), "b": None}


def test_system_default_spreading_scores(results: dict[str, JSON]) -> None:
    r = results["system-default-spreading"]
    scores = r["scores"]["PodTopologySpread"]
    assert scores["b"] == 100
    assert scores["a"] < 100


def test_storage_objects_are_loaded(results: dict[str, JSON]) -> None:
    r = results["bound-volume"]
    reason = "node(s) didn't match PersistentVolume's node affinity"
    assert r["filter"] == {"a": None, "b": status("VolumeBinding", "UnschedulableAndUnresolvable", reason)}


def test_invalid_case_is_an_error_not_a_crash(results: dict[str, JSON]) -> None:
    assert results["no-pod"] == {"name": "no-pod", "error": "pod is missing"}


# -- the DRA preemption reference (dra_preemption.go) ---------------------------------------------

GPU = "example.com/gpu"
DRIVER = "gpu.example.com"


def _gpu_node(name: str) -> tuple[JSON, JSON]:
    """A node with two GPUs of the driver (its ResourceSlice)."""
    devices = [{"name": f"gpu-{i}"} for i in range(2)]
    pool = {"name": name, "generation": 1, "resourceSliceCount": 1}
    spec = {"driver": DRIVER, "nodeName": name, "pool": pool, "devices": devices}
    return node(name), {"metadata": {"name": f"{name}-gpu"}, "spec": spec}


def _claim(name: str, node_name: str, device: str, consumers: list[JSON], **meta: Any) -> JSON:
    request = {"name": "gpu", "exactly": {"deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": 1}}
    result = {"request": "gpu", "driver": DRIVER, "pool": node_name, "device": device}
    selector = {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}]
    }
    return {
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", **meta},
        "spec": {"devices": {"requests": [request]}},
        "status": {
            "allocation": {"devices": {"results": [result]}, "nodeSelector": selector},
            "reservedFor": consumers,
        },
    }


def _holder(
    name: str, node_name: str, priority: int, start: str, claims: tuple[str, ...] = (), special: str = ""
) -> JSON:
    p = pod(name, None, node_name, priority=priority)
    p["status"]["startTime"] = start
    if claims:
        p["spec"]["resourceClaims"] = [{"name": f"c{i}", "resourceClaimName": c} for i, c in enumerate(claims)]
    if special:
        c = p["spec"]["containers"][0]
        c["resources"] = {"requests": {GPU: "1"}, "limits": {GPU: "1"}}
        mapping = {"containerName": c["name"], "resourceName": GPU, "requestName": "container-0-request-0"}
        p["status"]["extendedResourceClaimStatus"] = {"requestMappings": [mapping], "resourceClaimName": special}
    return p


def _ref(name: str) -> JSON:
    return {"resource": "pods", "name": name, "uid": f"uid-{name}"}


def _dra_case(name: str, want: int, reference: bool) -> JSON:
    """Two nodes of two GPUs each. On a: low-special's special claim (gpu-0) and a claim shared by
    low-shared and high-shared (gpu-1: high-shared stays). On b: low-owner's claim also reserved for
    a non-pod consumer (gpu-0) and low-own's claim (gpu-1). The incoming pod (priority 100) wants
    ``want`` GPUs by the extended resource name."""
    na, sa = _gpu_node("a")
    nb, sb = _gpu_node("b")
    owner = [{"apiVersion": "v1", "kind": "Pod", "name": "low-special", "uid": "uid-low-special", "controller": True}]
    special_meta = {"annotations": {"resource.kubernetes.io/extended-resource-claim": "true"}, "ownerReferences": owner}
    node_consumer = {"resource": "nodes", "name": "b", "uid": "node-uid-b"}
    claims = [
        _claim("low-special-extended-resources-abcde", "a", "gpu-0", [_ref("low-special")], **special_meta),
        _claim("shared", "a", "gpu-1", [_ref("low-shared"), _ref("high-shared")]),
        _claim("with-node", "b", "gpu-0", [_ref("low-owner"), node_consumer]),
        _claim("own", "b", "gpu-1", [_ref("low-own")]),
    ]
    pods = [
        _holder("low-special", "a", 0, "2024-03-01T00:00:00Z", special="low-special-extended-resources-abcde"),
        _holder("low-shared", "a", 0, "2024-03-01T01:00:00Z", ("shared",)),
        _holder("high-shared", "a", 1000, "2024-03-01T02:00:00Z", ("shared",)),
        _holder("low-owner", "b", 0, "2024-03-01T03:00:00Z", ("with-node",)),
        _holder("low-own", "b", 0, "2024-03-01T04:00:00Z", ("own",)),
    ]
    incoming = pod("incoming", priority=100, preemptionPolicy="PreemptLowerPriority")
    incoming["spec"]["containers"][0]["resources"] = {"requests": {GPU: str(want)}, "limits": {GPU: str(want)}}
    cls = {
        "metadata": {"name": DRIVER},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}], "extendedResourceName": GPU},
    }
    return case(
        name,
        [na, nb],
        incoming,
        pods,
        preempt=True,
        draPreemption=reference,
        deviceClasses=[cls],
        resourceSlices=[sa, sb],
        resourceClaims=claims,
    )


@pytest.fixture(scope="module")
def dra_results(harness: Path) -> dict[str, JSON]:
    cases = [
        _dra_case("dra-one", 1, True),
        _dra_case("dra-two", 2, True),
        _dra_case("dra-one-upstream", 1, False),
    ]
    return {r["name"]: r for r in go_harness.run(harness, cases)}


def test_dra_reference_frees_special_and_victims_only_claims(dra_results: dict[str, JSON]) -> None:
    cannot = status("DynamicResources", "UnschedulableAndUnresolvable", "cannot allocate all claims")
    for name in ("dra-one", "dra-two", "dra-one-upstream"):
        assert dra_results[name]["filter"] == {"a": cannot, "b": cannot}, name  # (the codes stay upstream's)
    # One GPU: on a, low-special's special claim frees gpu-0 (the shared claim stays: high-shared
    # outlives the preemption); on b, low-own's claim frees gpu-1 (the non-pod consumer keeps gpu-0).
    # low-shared and low-owner are reprieved. The tie goes to the latest start: b.
    pre = dra_results["dra-one"]["preemption"]
    assert pre["candidates"] == {
        "a": {"victims": ["default/low-special"], "numPDBViolations": 0},
        "b": {"victims": ["default/low-own"], "numPDBViolations": 0},
    }, pre
    assert (pre["nominatedNode"], pre["evicted"]) == ("b", ["default/low-own"]), pre
    # Two GPUs: no node frees two.
    pre = dra_results["dra-two"]["preemption"]
    assert (pre["candidates"], pre["nominatedNode"]) == ({}, ""), pre
    assert pre["statuses"] == {"a": cannot, "b": cannot}, pre
    assert pre["message"] == "preemption: 0/2 nodes are available: 2 cannot allocate all claims.", pre
    # Upstream itself: no candidate (DynamicResources' rejection is unresolvable).
    pre = dra_results["dra-one-upstream"]["preemption"]
    assert pre["message"] == "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.", pre
