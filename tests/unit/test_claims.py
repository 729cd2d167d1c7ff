"""draxr.core.claims: the special ResourceClaim and pod status as kube-scheduler writes them
(contract §1.3, §1.4, §2.4, §2.5)."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from draxr.core.claims import (
    DELETE_PROTECTION_FINALIZER,
    EXTENDED_RESOURCE_CLAIM_ANNOTATION,
    allocated_status,
    is_special_claim_of,
    pod_status_patch,
    rfc3339,
    special_claim,
    special_claim_owner,
)
from tests.unit.cluster_builders import allocation, pod

REQUESTS = [
    {
        "name": "container-0-request-0",
        "exactly": {"deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 2},
    },
    {
        "name": "container-1-request-1",
        "exactly": {"deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 1},
    },
]


def test_constants_are_the_upstream_names() -> None:
    assert EXTENDED_RESOURCE_CLAIM_ANNOTATION == "resource.kubernetes.io/extended-resource-claim"
    assert DELETE_PROTECTION_FINALIZER == "resource.kubernetes.io/delete-protection"


def test_special_claim_shape() -> None:
    p = pod("trainer-0", uid="u-123", namespace="team-a")
    claim = special_claim(p, REQUESTS)
    assert claim["apiVersion"] == "resource.k8s.io/v1"
    assert claim["kind"] == "ResourceClaim"
    meta = claim["metadata"]
    assert meta["generateName"] == "trainer-0-extended-resources-"
    assert "name" not in meta
    assert meta["namespace"] == "team-a"
    assert meta["annotations"] == {"resource.kubernetes.io/extended-resource-claim": "true"}
    assert "labels" not in meta
    assert meta["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": "trainer-0", "uid": "u-123", "controller": True}
    ]
    assert "blockOwnerDeletion" not in meta["ownerReferences"][0]
    assert meta["finalizers"] == ["resource.kubernetes.io/delete-protection"]
    assert claim["spec"] == {"devices": {"requests": REQUESTS}}
    assert set(claim["spec"]["devices"]) == {"requests"}  # no constraints, no config
    assert "status" not in claim


def test_special_claim_copies_the_requests() -> None:
    reqs = copy.deepcopy(REQUESTS)
    claim = special_claim(pod(), reqs)
    out = claim["spec"]["devices"]["requests"]
    assert out == REQUESTS
    assert out is not reqs
    assert all(a is not b for a, b in zip(out, reqs, strict=True))
    reqs.append({"name": "late"})
    reqs[0]["name"] = "renamed"
    assert [r["name"] for r in out] == ["container-0-request-0", "container-1-request-1"]


def test_special_claim_is_recognised_as_the_pods_own() -> None:
    p = pod("web", uid="u-1")
    claim = special_claim(p, REQUESTS)
    assert special_claim_owner(claim) == ("web", "u-1")
    assert is_special_claim_of(claim, p)
    assert not is_special_claim_of(claim, pod("web", uid="u-2"))  # a replacement pod with the same name
    assert not is_special_claim_of(claim, pod("other", uid="u-1"))


@pytest.mark.parametrize(
    ("ts", "expected"),
    [
        (datetime(2026, 3, 4, 5, 6, 7, 891234, tzinfo=UTC), "2026-03-04T05:06:07Z"),
        (datetime(2026, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), "2026-12-31T23:59:59Z"),  # truncated, not rounded
        # metav1.Time is always written in UTC: an aware time in another zone is converted.
        (datetime(2026, 3, 4, 7, 6, 7, tzinfo=timezone(timedelta(hours=2))), "2026-03-04T05:06:07Z"),
    ],
)
def test_rfc3339(ts: datetime, expected: str) -> None:
    assert rfc3339(ts) == expected


def test_allocated_status_stamps_and_reserves() -> None:
    p = pod("web", uid="u-1")
    alloc = allocation("n1", "gpu-0", "gpu-1")
    before = copy.deepcopy(alloc)
    now = datetime(2026, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    status = allocated_status(p, alloc, now)
    assert status == {
        "allocation": {**before, "allocationTimestamp": "2026-05-06T07:08:09Z"},
        "reservedFor": [{"resource": "pods", "name": "web", "uid": "u-1"}],
    }
    assert "apiGroup" not in status["reservedFor"][0]
    assert alloc == before  # the decision's allocation is not modified


def test_allocated_status_without_stamp() -> None:
    p = pod("web", uid="u-1")
    alloc = allocation("n1", "gpu-0")
    status = allocated_status(p, alloc, datetime(2026, 1, 1, tzinfo=UTC), stamp=False)
    assert status["allocation"] == alloc
    assert "allocationTimestamp" not in status["allocation"]
    assert status["reservedFor"] == [{"resource": "pods", "name": "web", "uid": "u-1"}]


def test_pod_status_patch() -> None:
    mappings = [
        {"containerName": "c", "resourceName": "example.com/gpu", "requestName": "container-0-request-0"},
        {"containerName": "init", "resourceName": "example.com/gpu", "requestName": "container-0-request-0"},
    ]
    patch = pod_status_patch("web-extended-resources-abcde", mappings)
    assert patch == {
        "status": {
            "extendedResourceClaimStatus": {
                "requestMappings": mappings,
                "resourceClaimName": "web-extended-resources-abcde",
            }
        }
    }
    out = patch["status"]["extendedResourceClaimStatus"]["requestMappings"]
    assert all(a is not b for a, b in zip(out, mappings, strict=True))


# --------------------------------------------------------------------------- identity


def _claim(annotations: dict[str, str] | None, refs: list[dict[str, Any]] | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "c", "namespace": "ns"}
    if annotations is not None:
        meta["annotations"] = annotations
    if refs is not None:
        meta["ownerReferences"] = refs
    return {"metadata": meta}


POD_REF = {"apiVersion": "v1", "kind": "Pod", "name": "web", "uid": "u-1", "controller": True}
ANN = {EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"}


@pytest.mark.parametrize(
    "annotations",
    [None, {}, {EXTENDED_RESOURCE_CLAIM_ANNOTATION: "True"}, {EXTENDED_RESOURCE_CLAIM_ANNOTATION: "web"},
     {EXTENDED_RESOURCE_CLAIM_ANNOTATION: ""}, {"resource.kubernetes.io/pod-claim-name": "true"}],
)  # fmt: skip
def test_owner_requires_the_annotation_exactly_true(annotations: dict[str, str] | None) -> None:
    assert special_claim_owner(_claim(annotations, [POD_REF])) is None
    assert not is_special_claim_of(_claim(annotations, [POD_REF]), pod("web", uid="u-1"))


@pytest.mark.parametrize(
    "refs",
    [
        None,
        [],
        [{**POD_REF, "controller": False}],
        [{k: v for k, v in POD_REF.items() if k != "controller"}],
        [{**POD_REF, "kind": "Job"}],
        [{**POD_REF, "apiVersion": "batch/v1"}],
    ],
)
def test_owner_requires_a_controller_pod_reference(refs: list[dict[str, Any]] | None) -> None:
    assert special_claim_owner(_claim(ANN, refs)) is None


def test_non_controller_references_are_ignored() -> None:
    other = {"apiVersion": "v1", "kind": "Pod", "name": "decoy", "uid": "u-9"}  # not a controller
    job = {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u-j", "controller": False}
    claim = _claim(ANN, [other, job, POD_REF])
    assert special_claim_owner(claim) == ("web", "u-1")
    assert is_special_claim_of(claim, pod("web", uid="u-1"))
    assert not is_special_claim_of(claim, pod("decoy", uid="u-9"))


def test_is_special_claim_of_tolerates_sparse_objects() -> None:
    assert not is_special_claim_of({}, pod())
    assert not is_special_claim_of(_claim(ANN, [POD_REF]), {})


@given(
    name=st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True),
    uid=st.uuids().map(str),
    other_uid=st.uuids().map(str),
)
def test_round_trip_identity(name: str, uid: str, other_uid: str) -> None:
    p = pod(name, uid=uid)
    claim = special_claim(p, REQUESTS)
    assert claim["metadata"]["generateName"] == f"{name}-extended-resources-"
    assert special_claim_owner(claim) == (name, uid)
    assert is_special_claim_of(claim, p)
    assert is_special_claim_of(claim, pod(name, uid=other_uid)) == (uid == other_uid)
