"""draxr.core.pod_view: a pod's scheduling inputs read once into an immutable view, kept exactly as
long as the pod object (while it can be scheduled)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from draxr.core.pod_view import Toleration, pod_view
from draxr.core.state import PodInfo, PodObjectDropped
from tests.unit.cluster_builders import pod

GPU = "example.com/gpu"


def _with_spec(p: dict[str, Any], **spec: Any) -> dict[str, Any]:
    p["spec"].update(spec)
    return p


def test_reads_the_filters_inputs() -> None:
    required = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}
    p = _with_spec(
        pod("p", gpus=2),
        nodeName="n1",
        nodeSelector={"pool": "gpu"},
        affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}},
        tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
    )
    view = pod_view(p)
    assert view.node_name == "n1"
    assert dict(view.node_selector) == {"pool": "gpu"}
    assert view.required_node_affinity == required
    assert view.tolerations == (Toleration("gpu", "Exists", "", "NoSchedule"),)
    assert dict(view.extended) == {GPU: 2}
    assert view.unsupported == ()
    assert not view.tolerates_unschedulable


def test_containers_keep_only_positive_int64_device_counts_and_every_request_name() -> None:
    p = pod("p")
    p["spec"]["initContainers"] = [
        {"name": "side", "restartPolicy": "Always", "resources": {"requests": {GPU: "1", "cpu": "1"}}},
        {"name": "init", "resources": {"limits": {GPU: "0"}}},
    ]
    p["spec"]["containers"] = [{"name": "main", "resources": {"requests": {GPU: "1.5", "example.com/fpga": "3"}}}]
    side, init, main = pod_view(p).containers
    assert (side.index, side.name, side.long_lived, dict(side.device_counts)) == (0, "side", True, {GPU: 1})
    assert side.request_names == ("cpu", GPU)
    assert (init.long_lived, dict(init.device_counts), init.request_names) == (False, {}, (GPU,))
    assert (main.index, dict(main.device_counts)) == (2, {"example.com/fpga": 3})  # 1.5 is no int64
    assert main.request_names == ("example.com/fpga", GPU)


def test_the_view_cannot_be_changed() -> None:
    view = pod_view(_with_spec(pod("p", gpus=1), nodeSelector={"a": "b"}))
    with pytest.raises(dataclasses.FrozenInstanceError, match="node_name"):
        view.node_name = "other"  # type: ignore[misc]
    with pytest.raises(TypeError, match="does not support item assignment"):
        view.node_selector["a"] = "c"  # type: ignore[index]
    with pytest.raises(TypeError, match="does not support item assignment"):
        view.containers[0].device_counts[GPU] = 9  # type: ignore[index]


def test_kept_exactly_while_the_pod_object_is() -> None:
    pending = PodInfo.from_api(pod("p", gpus=1))
    assert pending.view == pod_view(pod("p", gpus=1))
    bound = PodInfo.from_api(pod("p", gpus=1, node_name="n1", phase="Running"))
    assert bound.obj is None
    with pytest.raises(PodObjectDropped, match="only its summary is kept"):
        _ = bound.view
    assert PodInfo.from_api(pod("p", node_name="n1", phase="Running"), keep_object=True).view.node_name == "n1"


_taints = st.fixed_dictionaries(
    {
        "key": st.sampled_from(["a", "b"]),
        "value": st.sampled_from(["", "x"]),
        "effect": st.sampled_from(["NoSchedule", "NoExecute", "PreferNoSchedule"]),
    }
)
_tolerations = st.fixed_dictionaries(
    {},
    optional={
        "key": st.sampled_from(["", "a", "b"]),
        "operator": st.sampled_from(["Equal", "Exists"]),
        "value": st.sampled_from(["", "x"]),
        "effect": st.sampled_from(["", "NoSchedule", "NoExecute"]),
    },
)


@given(taint=_taints, toleration=_tolerations)
def test_toleration_matches_the_api_rule(taint: dict[str, str], toleration: dict[str, str]) -> None:
    """Against a literal transcription of v1 Toleration.ToleratesTaint (k8s.io/api core/v1)."""
    effect, key = toleration.get("effect", ""), toleration.get("key", "")
    op, value = toleration.get("operator") or "Equal", toleration.get("value", "")
    expected = (not effect or effect == taint["effect"]) and (not key or key == taint["key"])
    expected = expected and (op == "Exists" or value == taint["value"])
    assert Toleration.from_api(toleration).tolerates(taint) is expected
