"""The webhook's and adoption mode's decisions: which pods draxr takes without their manifest naming it."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch  # type: ignore[import-untyped]
import pytest
from hypothesis import given
from hypothesis import strategies as st

from draxr.core.mapping import OverrideMapping, build_mapping
from draxr.core.steering import (
    STEERED_ANNOTATION,
    admission_verdict,
    adoptable,
    mappable,
    steering_patch,
)

MAPPING = build_mapping(
    [
        {"metadata": {"name": "gpu.example.com"}, "spec": {"extendedResourceName": "example.com/gpu"}},
        {"metadata": {"name": "fpga.example.com"}, "spec": {}},
    ],
    [OverrideMapping("vendor.io/tpu", ("tpu-a", "tpu-b"), origin="tpus")],
)


def pod(
    requests: dict[str, str] | None = None, *, scheduler: str | None = "default-scheduler", **extra: Any
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c", "image": "x"}
    if requests is not None:
        container["resources"] = {"requests": requests, "limits": requests}
    spec: dict[str, Any] = {"containers": [container]}
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    obj: dict[str, Any] = {"metadata": {"generateName": "p-", "namespace": "ns"}, "spec": spec}
    for k, v in extra.items():
        if k == "labels":
            obj["metadata"]["labels"] = v
        elif k == "annotations":
            obj["metadata"]["annotations"] = v
        elif k == "status":
            obj["status"] = v
        else:
            spec[k] = v
    return obj


@pytest.mark.parametrize(
    ("requests", "steer"),
    [
        ({"example.com/gpu": "1"}, True),  # explicit extendedResourceName
        ({"deviceclass.resource.kubernetes.io/fpga.example.com": "2"}, True),  # implicit name
        ({"vendor.io/tpu": "1"}, True),  # ExtendedResourceMapping
        ({"nvidia.com/gpu": "1"}, False),  # device plugin only: no mapping serves it
        ({"cpu": "1", "memory": "1Gi"}, False),
        ({"example.com/gpu": "0"}, False),  # a zero request asks for nothing
        ({"nvidia.com/gpu": "1", "example.com/gpu": "1"}, True),  # one mapped name is enough
    ],
)
def test_steers_only_pods_asking_for_a_mapped_extended_resource(requests: dict[str, str], steer: bool) -> None:
    assert admission_verdict(pod(requests), MAPPING).steer is steer


def test_a_missing_scheduler_name_counts_as_the_default() -> None:
    assert admission_verdict(pod({"example.com/gpu": "1"}, scheduler=None), MAPPING).steer


@pytest.mark.parametrize("scheduler", ["draxr", "volcano", "my-scheduler"])
def test_pods_naming_a_scheduler_are_left_alone(scheduler: str) -> None:
    verdict = admission_verdict(pod({"example.com/gpu": "1"}, scheduler=scheduler), MAPPING)
    assert not verdict.steer
    assert scheduler in verdict.reason


def test_bound_and_skip_labelled_pods_are_left_alone() -> None:
    assert not admission_verdict(pod({"example.com/gpu": "1"}, nodeName="n1"), MAPPING).steer
    skipped = admission_verdict(pod({"example.com/gpu": "1"}, labels={"draxr.io/skip": "true"}), MAPPING)
    assert not skipped.steer
    assert "draxr.io/skip" in skipped.reason
    assert admission_verdict(pod({"example.com/gpu": "1"}, labels={"draxr.io/skip": "false"}), MAPPING).steer


def test_an_unreadable_quantity_is_not_steered() -> None:
    """The API server never sends one (it would not decode); a direct caller gets a verdict, not a crash."""
    verdict = admission_verdict(pod({"example.com/gpu": "lots"}), MAPPING)
    assert not verdict.steer
    assert verdict.reason == "unreadable resources: invalid quantity: 'lots'"


def test_init_container_requests_count() -> None:
    p = pod({"cpu": "1"})
    p["spec"]["initContainers"] = [{"name": "i", "resources": {"requests": {"example.com/gpu": "1"}}}]
    assert mappable(p, MAPPING) == ["example.com/gpu"]


def test_reason_names_resource_class_and_source() -> None:
    verdict = admission_verdict(pod({"example.com/gpu": "1", "vendor.io/tpu": "1"}), MAPPING)
    assert "example.com/gpu -> DeviceClass gpu.example.com (explicit)" in verdict.reason
    assert "vendor.io/tpu -> DeviceClass tpu-a|tpu-b (ExtendedResourceMapping tpus)" in verdict.reason


@pytest.mark.parametrize("annotations", [None, {}, {"team": "ml", "a/b~c": "x"}])
def test_patch_sets_scheduler_name_and_one_annotation_only(annotations: dict[str, str] | None) -> None:
    original = pod({"example.com/gpu": "1"}, **({"annotations": annotations} if annotations is not None else {}))
    patched = jsonpatch.apply_patch(copy.deepcopy(original), steering_patch(original, "draxr", "why"))
    assert patched["spec"]["schedulerName"] == "draxr"
    assert "why" in patched["metadata"]["annotations"][STEERED_ANNOTATION]
    # nothing else changed
    patched["spec"]["schedulerName"] = original["spec"]["schedulerName"]
    del patched["metadata"]["annotations"][STEERED_ANNOTATION]
    if annotations is None:
        assert patched["metadata"].pop("annotations") == {}
    assert patched == original


def test_patch_adds_scheduler_name_when_absent() -> None:
    original = pod({"example.com/gpu": "1"}, scheduler=None)
    patched = jsonpatch.apply_patch(copy.deepcopy(original), steering_patch(original, "draxr", "why"))
    assert patched["spec"]["schedulerName"] == "draxr"


UNSCHEDULABLE = {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}


def test_adoptable_needs_kube_scheduler_to_have_given_up() -> None:
    assert adoptable(pod({"example.com/gpu": "1"}, status=UNSCHEDULABLE), MAPPING)
    assert not adoptable(pod({"example.com/gpu": "1"}), MAPPING)  # not tried yet
    pending = {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulerError"}]}
    assert not adoptable(pod({"example.com/gpu": "1"}, status=pending), MAPPING)


def test_adoptable_only_default_scheduler_pods_with_a_mapped_resource() -> None:
    assert not adoptable(pod({"nvidia.com/gpu": "1"}, status=UNSCHEDULABLE), MAPPING)
    assert not adoptable(pod({"example.com/gpu": "1"}, scheduler="volcano", status=UNSCHEDULABLE), MAPPING)
    assert not adoptable(pod({"example.com/gpu": "1"}, nodeName="n", status=UNSCHEDULABLE), MAPPING)
    gated = pod({"example.com/gpu": "1"}, schedulingGates=[{"name": "kueue"}], status=UNSCHEDULABLE)
    assert not adoptable(gated, MAPPING)
    assert not adoptable(pod({"example.com/gpu": "1"}, labels={"draxr.io/skip": "true"}, status=UNSCHEDULABLE), MAPPING)


_names = st.sampled_from(["example.com/gpu", "vendor.io/tpu", "nvidia.com/gpu", "cpu", "other.org/x"])


@given(
    st.dictionaries(_names, st.integers(0, 3).map(str), max_size=4), st.sampled_from([None, "default-scheduler", "x"])
)
def test_steer_iff_default_scheduler_and_a_mapped_nonzero_request(
    requests: dict[str, str], scheduler: str | None
) -> None:
    mapped = any(int(v) > 0 and k in MAPPING for k, v in requests.items())
    expected = mapped and scheduler in (None, "default-scheduler")
    assert admission_verdict(pod(requests, scheduler=scheduler), MAPPING).steer is expected


SPREAD = [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule"}]
ANTI = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "zone"}]}}
EPHEMERAL = [{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}]
PVC = [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]


def test_a_pod_with_a_field_draxr_cannot_schedule_is_neither_steered_nor_adopted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A made-up field keeps the webhook's "never strand a pod" rule (issue 15 item 0) tested
    whatever draxr learns to run."""
    from draxr.core import steering

    field = "spec.madeUp"
    monkeypatch.setattr(
        steering, "unsupported_fields", lambda p: [f"{field} (a test)"] if (p.get("spec") or {}).get("madeUp") else []
    )
    extra = {"madeUp": True}
    verdict = admission_verdict(pod({"example.com/gpu": "1"}, **extra), MAPPING)
    assert (verdict.steer, verdict.result) == (False, "unsupported")
    assert any(u.startswith(field) for u in verdict.unsupported), verdict.unsupported
    assert field in verdict.reason
    assert "example.com/gpu -> DeviceClass gpu.example.com" in verdict.reason
    assert not adoptable(pod({"example.com/gpu": "1"}, status=UNSCHEDULABLE, **extra), MAPPING)


def test_a_pod_group_member_is_neither_steered_nor_adopted() -> None:
    """Gang pods stay with kube-scheduler (GangScheduling places the group all or nothing)."""
    extra = {"schedulingGroup": {"podGroupName": "train"}}
    verdict = admission_verdict(pod({"example.com/gpu": "1"}, **extra), MAPPING)
    assert (verdict.steer, verdict.result) == (False, "unsupported")
    assert verdict.unsupported == ("spec.schedulingGroup (gang scheduling)",)
    assert not adoptable(pod({"example.com/gpu": "1"}, status=UNSCHEDULABLE, **extra), MAPPING)


@pytest.mark.parametrize(
    "claims",
    [[{"name": "c", "resourceClaimName": "c"}], [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]],
)
def test_pods_with_claims_of_their_own_are_steered_and_adopted(claims: list[dict[str, Any]]) -> None:
    """draxr allocates and reserves them as kube-scheduler's DynamicResources (binder.py)."""
    verdict = admission_verdict(pod({"example.com/gpu": "1"}, resourceClaims=claims), MAPPING)
    assert (verdict.steer, verdict.result, verdict.unsupported) == (True, "steered", ())
    assert adoptable(pod({"example.com/gpu": "1"}, status=UNSCHEDULABLE, resourceClaims=claims), MAPPING)


@pytest.mark.parametrize("volumes", [PVC, EPHEMERAL])
def test_pods_with_claims_and_ephemeral_volumes_are_steered_and_adopted(volumes: list[dict[str, Any]]) -> None:
    """draxr binds their volumes as kube-scheduler's VolumeBinding (binder.py)."""
    verdict = admission_verdict(pod({"example.com/gpu": "1"}, volumes=volumes), MAPPING)
    assert (verdict.steer, verdict.result, verdict.unsupported) == (True, "steered", ())
    assert adoptable(pod({"example.com/gpu": "1"}, status=UNSCHEDULABLE, volumes=volumes), MAPPING)


def test_unsupported_is_only_reported_for_pods_that_would_otherwise_be_steered() -> None:
    # a device-plugin pod with a claim is just "unchanged": draxr would not have taken it anyway
    verdict = admission_verdict(pod({"nvidia.com/gpu": "1"}, resourceClaims=[{"name": "c"}]), MAPPING)
    assert (verdict.steer, verdict.result, verdict.unsupported) == (False, "unchanged", ())
    # spreading and inter-pod (anti-)affinity are draxr's to place as kube-scheduler does: steered
    for extra in ({"topologySpreadConstraints": SPREAD}, {"affinity": ANTI}):
        assert admission_verdict(pod({"example.com/gpu": "1"}, **extra), MAPPING).result == "steered"
