"""bench/scheduler_perf.py reads upstream's performance-config.yaml as scheduler_perf does (params,
"$param|default", counts, thresholds) and computes SchedulingThroughput as upstream's
throughputCollector: the first non-zero sample dropped, empty intervals merged into the next and
recorded once per interval, percentiles at index ceil(n*q/100)-1."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_scheduler_perf", BENCH / "scheduler_perf.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


sp = _load()

CONFIG = """\
- name: ExtendedResource
  workloadTemplate:
  - opcode: createNodes
    countParam: $nodesWithoutDRA
  - opcode: createNodes
    nodeTemplatePath: ../templates/node-with-dra-test-driver.yaml
    countParam: $nodesWithDRA
  - opcode: createAny
    templatePath: ../templates/resourceslice-basic-devices.yaml
    countParam: $nodesWithDRA
    templateParams:
      numDevices: 10
  - opcode: createPods
    namespace: test
    countParam: $measurePods
    podTemplatePath: ../templates/pod-with-extended-resource.yaml
    templateParams:
      class: $class
      classes: $classes
      other: $missing|7
    collectMetrics: true
  workloads:
  - name: small
    threshold: 120
    labels: [performance]
    params:
      class: example.com/gpu
      classes: 25
      nodesWithDRA: 500
      nodesWithoutDRA: 0
      measurePods: 2500
"""


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "extendedresource" / "performance-config.yaml"
    path.parent.mkdir()
    path.write_text(CONFIG)
    return path


def test_workload_ops_are_unrolled_with_the_params(config: Path) -> None:
    wl = sp.load_workload(config, "ExtendedResource", "small")
    assert wl.full_name == "ExtendedResource/small"
    assert wl.threshold == 120
    assert [(op.opcode, op.count) for op in wl.ops] == [
        ("createNodes", 0),
        ("createNodes", 500),
        ("createAny", 500),
        ("createPods", 2500),
    ]
    assert wl.ops[0].template is None
    assert wl.ops[1].template == (config.parent.parent / "templates/node-with-dra-test-driver.yaml").resolve()
    assert wl.ops[2].params == {"numDevices": 10}
    pods = wl.ops[3]
    assert pods.params == {"class": "example.com/gpu", "classes": 25, "other": 7}
    assert (pods.namespace, pods.collect_metrics) == ("test", True)


def test_overridden_params_drop_the_threshold(config: Path) -> None:
    wl = sp.load_workload(config, "ExtendedResource", "small", sp.parse_overrides("nodesWithDRA=20, measurePods=100"))
    assert [op.count for op in wl.ops] == [0, 20, 20, 100]
    assert wl.threshold is None


def test_unknown_names_are_refused(config: Path) -> None:
    with pytest.raises(KeyError, match="no workload"):
        sp.load_workload(config, "ExtendedResource", "large")
    with pytest.raises(KeyError, match="no test case"):
        sp.load_workload(config, "Other", "small")
    with pytest.raises(KeyError, match="'nope' not found"):
        sp.resolve_param("$nope", {})
    with pytest.raises(ValueError, match="key=value"):
        sp.parse_overrides("nodesWithDRA")


def test_throughput_drops_the_first_sample_and_spreads_empty_intervals() -> None:
    ticks = [(1.0, 0), (2.0, 5), (3.0, 25), (4.0, 25), (5.0, 25), (6.0, 55), (7.0, 85)]
    # (2.0, 5) starts the collection; 3.0: 20 pods/s; 4.0 and 5.0 empty; 6.0: 30 pods over 3 s,
    # recorded three times; 7.0: 30 pods/s.
    assert sp.throughput_samples(ticks) == [20.0, 10.0, 10.0, 10.0, 30.0]
    assert sp.throughput_samples([(1.0, 0), (2.0, 50)]) == []


def test_throughput_summary_uses_upstreams_percentile_index() -> None:
    samples = [float(v) for v in range(1, 11)]  # 1..10
    summary = sp.throughput_summary(samples)
    assert summary == {"Average": 5.5, "Perc50": 5.0, "Perc90": 9.0, "Perc95": 10.0, "Perc99": 10.0}
    assert sp.throughput_summary([]) is None
    assert sp.throughput_summary([3.0])["Perc50"] == 3.0


def test_ceiling_classes_by_extended_resource_name() -> None:
    classes = [
        {"metadata": {"name": "test-class-1"}, "spec": {"extendedResourceName": "example.com/gpu-1"}},
        {"metadata": {"name": "scoring-test-class-1"}, "spec": {"extendedResourceName": "example.com/gpu"}},
        {"metadata": {"name": "scoring-test-class-0"}, "spec": {"extendedResourceName": "example.com/gpu"}},
        {"metadata": {"name": "test-class-2"}, "spec": {}},
    ]
    out = sp.extended_resource_classes(classes)
    assert out["example.com/gpu-1"] == "test-class-1"
    assert out["example.com/gpu"] == "scoring-test-class-0"
    assert out["deviceclass.resource.kubernetes.io/test-class-2"] == "test-class-2"


def test_paths_follow_the_objects_api_version() -> None:
    assert sp.kube_path({"apiVersion": "v1", "kind": "Node"}) == "/api/v1/nodes"
    assert sp.kube_path({"apiVersion": "resource.k8s.io/v1beta2", "kind": "DeviceClass"}) == (
        "/apis/resource.k8s.io/v1beta2/deviceclasses"
    )
    assert sp.kube_path({"apiVersion": "v1", "kind": "Pod"}, "test") == "/api/v1/namespaces/test/pods"
