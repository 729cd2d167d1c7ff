"""Claim release (kubernetes#134311) with and without kube-controller-manager's resourceclaim
controller. Without it (``bare``: a second control plane), draxr alone frees the devices: its own
pods' claims after a short grace (1 s), kube-scheduler's after the longer one. With it (the session
cluster), the controller releases both within the grace and draxr races it for neither."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from prometheus_client import REGISTRY

from draxr.app import Operator
from draxr.core.gc import ClaimAction
from draxr.core.state import ClusterState
from draxr.kube import NAMESPACES, PODS, RESOURCE_CLAIMS, Kube
from draxr_dev.devcluster.controlplane import RUN_FOR_ANNOTATION, ControlPlane, Options

from .clusters import extra_control_plane
from .embedded import embedded_operator, fast_settings
from .helpers import eventually, gpus, pod

NO_CLAIM_CONTROLLER = "*,-resourceclaim-controller"
KUBE_SCHEDULER = "default-scheduler"
GRACE = 2.0  # the bare cluster's --release-foreign-grace-seconds


@pytest.fixture(scope="module")
def bare_cluster() -> Iterator[ControlPlane]:
    options = Options(scheduler=True, kwok=True, kcm_controllers=NO_CLAIM_CONTROLLER)
    with extra_control_plane("noclaimctl", options) as cp:
        yield cp


@pytest.fixture(scope="module")
async def bare(bare_cluster: ControlPlane) -> AsyncIterator[tuple[Kube, Operator]]:
    settings = fast_settings(
        kubeconfig=str(bare_cluster.kubeconfig), release_sweep_seconds=5, release_foreign_grace_seconds=GRACE
    )
    async with embedded_operator(settings) as running:
        yield running


def _errors(operation: str) -> float:
    total = 0.0
    for metric in REGISTRY.collect():
        if metric.name == "draxr_api_errors":
            total += sum(
                s.value for s in metric.samples if s.labels.get("operation") == operation and s.name.endswith("_total")
            )
    return total


async def _start(kube: Kube, namespace: str, name: str, resource: str, count: int, scheduler: str) -> str:
    """A pod that holds ``count`` devices for 2 s; returns its claim's name once it has one."""
    body = pod(name, {resource: str(count)}, scheduler=scheduler, annotations={RUN_FOR_ANNOTATION: "2s"})
    await kube.create(PODS, body, namespace)

    async def claim_name() -> str | None:
        p = await kube.get(PODS, name, namespace)
        return (p.get("status", {}).get("extendedResourceClaimStatus") or {}).get("resourceClaimName")

    return str(await eventually(claim_name))


async def _finished_and_released(kube: Kube, namespace: str, name: str, claim: str) -> None:
    """The pod Succeeded and its claim is gone, while the pod object is still there: the claim went
    because of the release, not because the garbage collector followed a deleted pod."""

    async def done() -> bool:
        p = await kube.get(PODS, name, namespace)
        left = [c["metadata"]["name"] for c in await kube.list(RESOURCE_CLAIMS, namespace)]
        return p["status"].get("phase") == "Succeeded" and claim not in left

    await eventually(done, timeout=60)
    assert (await kube.get(PODS, name, namespace))["status"]["phase"] == "Succeeded"


async def _run_to_completion(kube: Kube, namespace: str, scheduler: str = "draxr") -> tuple[str, list[str]]:
    """A pod that holds two devices for 2 s; returns its claim name and the claims left afterwards."""
    async with gpus(kube, namespace) as resource:
        name = await _start(kube, namespace, "job", resource, 2, scheduler)
        await _finished_and_released(kube, namespace, "job", name)
        return name, [c["metadata"]["name"] for c in await kube.list(RESOURCE_CLAIMS, namespace)]


def _record(op: Operator, monkeypatch: pytest.MonkeyPatch) -> list[ClaimAction]:
    """Every release the operator's plan hands to its releaser from now until the test ends."""
    plan = op.release_plan
    due, seen = plan.due, list[ClaimAction]()

    def recording(state: ClusterState, now: float) -> list[ClaimAction]:
        actions = due(state, now)
        seen.extend(actions)
        return actions

    monkeypatch.setattr(plan, "due", recording)
    return seen


def _first(actions: list[ClaimAction], claim: str) -> ClaimAction | None:
    return next((a for a in actions if a.name == claim), None)


# ---- without the resourceclaim controller ---------------------------------------------------------


async def test_draxr_releases_claims_without_the_kcm_controller(
    bare: tuple[Kube, Operator], bare_cluster: ControlPlane, names: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    kube, op = bare
    handed_out = _record(op, monkeypatch)
    assert "Starting resource claim controller" not in bare_cluster.log_path("kube-controller-manager").read_text()
    await kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": names}})
    claim, left = await _run_to_completion(kube, names)
    assert left == []
    # draxr's own pod: handed out once the short grace for a resourceclaim controller had passed.
    first = _first(handed_out, claim)
    assert first is not None
    assert (first.foreign, first.reason) == (False, "pod Succeeded; not released by KCM within 1s")


async def test_draxr_releases_kube_schedulers_claims_after_the_grace_period(
    bare: tuple[Kube, Operator], names: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kube-scheduler wrote this claim and nobody else releases it: draxr does, once the grace
    period in which a resourceclaim controller would have done it has passed."""
    kube, op = bare
    handed_out = _record(op, monkeypatch)
    await kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": names}})
    async with gpus(kube, names) as resource:
        claim = await _start(kube, names, "ks", resource, 2, KUBE_SCHEDULER)
        await _finished_and_released(kube, names, "ks", claim)
    first = _first(handed_out, claim)
    assert first is not None
    assert first.foreign
    assert first.reason == f"pod Succeeded; not released by KCM within {GRACE:g}s"


# ---- with the resourceclaim controller (the session cluster) ----------------------------------------


def _kcm_failures(cp: ControlPlane, claim: str) -> list[str]:
    """kube-controller-manager's failed work items that name the claim (a race lost to someone
    deleting the claim first shows up as "Work item failed ... delete unused generated claim ...")."""
    lines = cp.log_path("kube-controller-manager").read_text(errors="replace").splitlines()
    return [line for line in lines if "Work item failed" in line and claim in line]


async def test_kcm_releases_kube_schedulers_claims_and_draxr_leaves_them(
    kube: Kube,
    operator: Operator,
    control_plane: ControlPlane,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    handed_out = _record(operator, monkeypatch)
    assert "Starting resource claim controller" in control_plane.log_path("kube-controller-manager").read_text()
    async with gpus(kube, namespace, devices=2) as resource:
        ks = await _start(kube, namespace, "ks", resource, 1, KUBE_SCHEDULER)
        own = await _start(kube, namespace, "own", resource, 1, "draxr")
        await _finished_and_released(kube, namespace, "ks", ks)
        await _finished_and_released(kube, namespace, "own", own)
    # kube-scheduler's pod: released by the resourceclaim controller alone; draxr never touched it.
    # draxr's own pod too: the controller released it within draxr's short grace. (The controller
    # may still log a "not found" for either claim: two of its own work items for one claim, seen
    # with draxr handing out nothing. Any other failure would be a real conflict.)
    assert _first(handed_out, ks) is None
    assert _first(handed_out, own) is None
    for claim in (ks, own):
        assert [line for line in _kcm_failures(control_plane, claim) if "not found" not in line] == []


def _sweeps(op: Operator, monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """One entry per release sweep the operator starts from now until the test ends."""
    plan, started = op.release_plan, list[float]()
    due = plan.due

    def counting(state: ClusterState, now: float) -> list[ClaimAction]:
        started.append(now)
        return due(state, now)

    monkeypatch.setattr(plan, "due", counting)
    return started


async def test_release_races_the_kcm_controller_without_errors(
    kube: Kube, operator: Operator, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _errors("claim-release")
    sweeps = _sweeps(operator, monkeypatch)
    _, left = await _run_to_completion(kube, namespace)
    assert left == []
    after = len(sweeps)

    async def one_more_sweep_done() -> bool:  # the next one started, so the one after the run is over
        return len(sweeps) >= after + 2

    await eventually(one_more_sweep_done, timeout=60)  # nothing left to do, nothing retried
    assert _errors("claim-release") == before
