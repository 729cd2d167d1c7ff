"""The AdmissionReview exchange (the HTTP app in-process) and adoption's version gate."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from draxr.app import adoption_refused
from draxr.core.mapping import build_mapping
from draxr.core.state import PodInfo
from draxr.scheduler import wants_us
from draxr.webhook import PATH, application, malformed, review_response

MAPPING = build_mapping([{"metadata": {"name": "gpu"}, "spec": {"extendedResourceName": "example.com/gpu"}}])


def review(pod: dict[str, Any], operation: str = "CREATE", kind: str = "Pod", sub: str | None = None) -> dict[str, Any]:
    request: dict[str, Any] = {
        "uid": "u-1",
        "kind": {"group": "", "version": "v1", "kind": kind},
        "operation": operation,
        "namespace": "ml",
        "object": pod,
    }
    if sub:
        request["subResource"] = sub
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def gpu_pod(requests: dict[str, str] | None = None) -> dict[str, Any]:
    resources = {"requests": requests or {"example.com/gpu": "1"}}
    return {
        "metadata": {"name": "p", "namespace": "ml"},
        "spec": {"schedulerName": "default-scheduler", "containers": [{"name": "c", "resources": resources}]},
    }


def decoded_patch(out: dict[str, Any]) -> list[dict[str, Any]]:
    return json.loads(base64.b64decode(out["response"]["patch"]))  # type: ignore[no-any-return]


def test_steered_pod_gets_a_json_patch() -> None:
    out = review_response(review(gpu_pod()), MAPPING, "draxr")
    assert out["kind"] == "AdmissionReview"
    assert out["response"]["uid"] == "u-1"
    assert out["response"]["allowed"] is True
    assert out["response"]["patchType"] == "JSONPatch"
    assert decoded_patch(out)[0] == {"op": "add", "path": "/spec/schedulerName", "value": "draxr"}


@pytest.mark.parametrize(
    ("rev", "mapping"),
    [
        (review(gpu_pod({"nvidia.com/gpu": "1"})), MAPPING),  # device plugin only
        (review(gpu_pod(), operation="UPDATE"), MAPPING),
        (review(gpu_pod(), sub="status"), MAPPING),
        (review(gpu_pod(), kind="Deployment"), MAPPING),
        (review(gpu_pod()), None),  # not synced yet
    ],
)
def test_everything_else_is_allowed_unchanged(rev: dict[str, Any], mapping: Any) -> None:
    out = review_response(rev, mapping, "draxr")
    assert out["response"] == {"uid": "u-1", "allowed": True}


async def test_http_app_answers_reviews_and_rejects_garbage() -> None:
    async with TestClient(TestServer(application(lambda: MAPPING, "draxr"))) as client:
        resp = await client.post(PATH, json=review(gpu_pod()))
        assert resp.status == 200
        assert decoded_patch(await resp.json())[0]["value"] == "draxr"
        bad = await client.post(PATH, data=b"{not json", headers={"Content-Type": "application/json"})
        assert bad.status == 400
        assert (await client.get("/healthz")).status == 200


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ([], "not a JSON object"),
        (
            {**review(gpu_pod()), "apiVersion": "admission.k8s.io/v1beta1"},
            "expected an AdmissionReview of admission.k8s.io/v1, got 'AdmissionReview' of 'admission.k8s.io/v1beta1'",
        ),
        (gpu_pod(), "expected an AdmissionReview of admission.k8s.io/v1, got None of None"),
        ({**review(gpu_pod()), "request": None}, "request is missing or not an object"),
        ({**review(gpu_pod()), "request": "x"}, "request is missing or not an object"),
        (
            {**review(gpu_pod()), "request": {**review(gpu_pod())["request"], "uid": ""}},
            "request.uid must be a non-empty string",
        ),
        (
            {**review(gpu_pod()), "request": {**review(gpu_pod())["request"], "uid": 7}},
            "request.uid must be a non-empty string",
        ),
        (
            {**review(gpu_pod()), "request": {**review(gpu_pod())["request"], "object": []}},
            "request.object is not an object",
        ),
        (
            {**review(gpu_pod()), "request": {**review(gpu_pod())["request"], "kind": "Pod"}},
            "request.kind is not an object",
        ),
        (review(gpu_pod()), None),
        ({**review(gpu_pod()), "request": {**review(gpu_pod())["request"], "object": None}}, None),
    ],
)
def test_malformed_reviews_are_named(body: Any, why: str | None) -> None:
    assert malformed(body) == why


async def test_http_app_says_why_a_review_is_refused() -> None:
    async with TestClient(TestServer(application(lambda: MAPPING, "draxr"))) as client:
        deep = await client.post(PATH, data=b"[" * 100_000 + b"]" * 100_000)
        assert (deep.status, await deep.json()) == (400, {"error": "malformed AdmissionReview: nested too deeply"})
        array = await client.post(PATH, json=[1])
        assert (array.status, await array.json()) == (400, {"error": "malformed AdmissionReview: not a JSON object"})
        text = await client.post(PATH, data=b"\xff")
        assert text.status == 400
        assert (await text.json())["error"].startswith("malformed AdmissionReview: 'utf-8' codec can't decode")


async def test_a_decision_bug_still_admits_the_pod() -> None:
    def broken() -> Any:
        raise RuntimeError("boom")

    async with TestClient(TestServer(application(broken, "draxr"))) as client:
        resp = await client.post(PATH, json=review(gpu_pod()))
        assert resp.status == 200
        assert (await resp.json())["response"] == {"uid": "u-1", "allowed": True}


@pytest.mark.parametrize(
    ("version", "refused"),
    [
        ({"major": "1", "minor": "34"}, False),
        ({"major": "1", "minor": "35"}, False),
        ({"major": "1", "minor": "35+"}, False),  # vendor builds
        ({"major": "1", "minor": "36"}, True),
        ({"major": "1", "minor": "37"}, True),
        ({"major": "2", "minor": "0"}, True),
        ({}, True),  # unknown: refuse rather than race kube-scheduler
    ],
)
def test_adoption_refused_from_136(version: dict[str, str], refused: bool) -> None:
    assert (adoption_refused(version) is not None) is refused


def test_wants_us_adopts_only_in_adoption_mode() -> None:
    pod = gpu_pod()
    pod["metadata"].update(uid="u", creationTimestamp="2026-11-30T00:00:00Z")
    pod["status"] = {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
    info = PodInfo.from_api(pod)
    assert not wants_us(info, "draxr")
    assert wants_us(info, "draxr", MAPPING)
    assert not wants_us(PodInfo.from_api({**pod, "spec": {**pod["spec"], "nodeName": "n"}}), "draxr", MAPPING)
