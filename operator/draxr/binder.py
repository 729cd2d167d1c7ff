"""The write path for one decision: volumes -> the pod's own claims -> special claim (with
finalizer) -> claim status -> pod status -> binding.

Four writes per pod that needs devices, one (the binding) for a pod that needs none. Any failure
rolls back what was written (finalizer off, claim deleted) and hands the pod back for a retry.

The pod's own claims (``spec.resourceClaims``, ``Decision.claims``) come first within
DynamicResources' PreBind, in spec order, as kube-scheduler 1.37.2's claim store keeps the
special claim last (dynamicresources.go PreBind -> bindClaim): for a claim to allocate, the
``resource.kubernetes.io/delete-protection`` finalizer by an Update if it is missing, then
UpdateStatus with the allocation, ``allocationTimestamp`` and the pod appended to ``reservedFor``;
for a claim allocated already only the reservation. A conflict re-reads the claim; a claim being
deleted, or allocated meanwhile, fails the attempt. Each write's answer is recorded before the
claim's in-flight allocation (assumed at Reserve by the scheduler) is forgotten. A later failure
rolls back as Unreserve: the pod is removed from each written claim's ``reservedFor`` (a
strategic-merge patch by uid, in reverse order) and the allocations stay, for
kube-controller-manager to release or the pod's retry to reuse.

Volumes first (VolumeBinding's PreBind, kube-scheduler 1.37.2's binder.BindPodVolumes): the PVs
of static bindings get their claimRef (PUT of the PV as the cycle saw it, so a PV changed since
conflicts), the claims to provision the ``volume.kubernetes.io/selected-node`` annotation (a
merge patch under the claim's resourceVersion); then the binding waits, polling every second
(``wait.PollUntilContextTimeout``, the first check after one interval) until checkBindings
(``core.volumes.binding_progress``) says every claim is Bound, up to ``volume_bind_timeout_seconds``
(VolumeBindingArgs.bindTimeoutSeconds, 600). An error or the timeout fails the binding: the
assumptions are forgotten and the pod retried; the PV and claim writes stay, as upstream ("There
is no API rollback if the actual binding fails": the PV controller completes a claimRef written,
the provisioner clears a selected node it cannot serve). The special claim is only written once
the volumes are bound, so a failed volume binding leaves no claim behind. In 1.37.2 the two PreBind
plugins (VolumeBinding, then DynamicResources) may run in parallel (PreBindPreFlight's
AllowParallel); this order is their sequential one (no parallel PreBind), which upstream also runs.
The wait holds no write slot: bindings of other pods go on meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from draxr import logs, metrics
from draxr.core import claims as shape
from draxr.core.claims import assumed_claim_key
from draxr.core.extended_resources import GATE_RECHECK_SECONDS
from draxr.core.placement import Decision
from draxr.core.plugins.dynamic_resources import ClaimDecision
from draxr.core.state import ClusterState, PodInfo, without_managed_fields
from draxr.core.storage import ANN_SELECTED_NODE, VolumeDecision, bound_pv_object
from draxr.core.volumes import binding_progress
from draxr.events import Recorder
from draxr.faults import crash_point
from draxr.kube import (
    JSON_PATCH,
    MERGE_PATCH,
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    PODS,
    RESOURCE_CLAIMS,
    STRATEGIC_MERGE_PATCH,
    ApiException,
    Kube,
    api_message,
)
from draxr.loops import TooManyConflicts, retry_conflicts
from draxr.releaser import drop_finalizer_and_delete

log = logs.get("draxr.binder")


class BindingFailed(Exception):
    def __init__(self, step: str, message: str, *, pod_gone: bool = False) -> None:
        super().__init__(f"{step}: {message}")
        self.step = step
        self.pod_gone = pod_gone


# kube-apiserver without DRAExtendedResource (off by default in 1.34/1.35, can be turned off in 1.36)
# drops the pod status field without an error; a pod bound without it runs without its devices.
STATUS_DROPPED = (
    "the API server dropped status.extendedResourceClaimStatus: kube-apiserver runs without the "
    "DRAExtendedResource feature gate (Kubernetes 1.34/1.35: turn it on in kube-apiserver, "
    "kube-controller-manager and the kubelets)"
)
VOLUME_BINDING = 'running PreBind plugin "VolumeBinding"'  # how upstream's framework prefixes its errors
DYNAMIC_RESOURCES = 'running PreBind plugin "DynamicResources"'
VOLUME_POLL_SECONDS = 1.0  # the binder's wait.PollUntilContextTimeout interval


@dataclass
class Binder:
    kube: Kube
    state: ClusterState
    recorder: Recorder
    # Bounds the concurrent write phases (the scheduler's bind_concurrency); the volume wait holds none.
    slots: asyncio.Semaphore | None = None
    volume_bind_timeout: float = 600.0
    volume_poll: float = VOLUME_POLL_SECONDS

    def _slot(self) -> contextlib.AbstractAsyncContextManager[Any]:
        return self.slots if self.slots is not None else contextlib.nullcontext()

    async def bind(self, pod: PodInfo, decision: Decision) -> None:
        """Raises BindingFailed after rolling back; the caller requeues the pod."""
        t0 = time.monotonic()
        claim: dict[str, Any] | None = None
        status_written = False
        allocation_unsure = False  # the allocation write was sent and its answer lost
        reserved: list[dict[str, Any]] = []  # the pod's own claims reserved for it, as the API answered
        pending: list[ClaimDecision] = []  # the pod claim being written (its answer may be lost)
        volumes = decision.volumes if decision.volumes is not None and not decision.volumes.empty else None
        try:
            if volumes is not None:  # VolumeBinding's PreBind: before DynamicResources' and the Binding
                async with self._slot():
                    written = await self._write_volumes(pod, volumes, decision.node)
                crash_point("write-volumes")
                await self._wait_volumes(pod, volumes, decision.node, written)
                crash_point("volumes-bound")
            async with self._slot():
                # DynamicResources' PreBind: the pod's own claims in spec order (bindClaim), then the
                # special claim, which upstream's claim store keeps last.
                for cd in decision.claims:
                    pending.append(cd)
                    reserved.append(await self._bind_pod_claim(pod, cd))
                    pending.pop()
                    crash_point("pod-claim")
                if decision.needs_claim:
                    assert decision.allocation is not None
                    claim = await self._create_claim(pod, decision)
                    crash_point("create-claim")
                    allocation_unsure = True
                    claim = await self._write_allocation(pod, claim, decision.allocation)
                    allocation_unsure = False
                    crash_point("write-allocation")
                    await self._patch_pod_status(pod, claim["metadata"]["name"], decision)
                    status_written = True
                    crash_point("pod-status")
                await self._bind(pod, decision.node)
                crash_point("bind")
        except Exception as e:  # API refusals, and dropped connections or timeouts mid-way alike
            failure = e if isinstance(e, BindingFailed) else BindingFailed("write", f"{type(e).__name__}: {e}")
            if volumes is not None:
                self.state.storage.forget(volumes)  # Unreserve: RevertAssumedPodVolumes
            if claim is not None:  # never leave a half-written claim behind
                if status_written:  # (a pod that is gone just fails the conditional patch)
                    await self._clear_pod_status(pod, claim["metadata"]["name"])
                if not await self._roll_back(pod, claim) and allocation_unsure and _maybe_applied(e):
                    # The claim stays, and the API server may have written its allocation (only the
                    # answer was lost): its devices count as allocated until the claims watch shows
                    # the claim or the stale-claim sweep deletes it. Forgetting them gave them to
                    # the next pod (bench/chaos.py: drop-all, a device in two claims).
                    key = f"{pod.namespace}/{claim['metadata']['name']}"
                    self.state.tracker.set_claim(key, {"status": {"allocation": decision.allocation}})
            # Unreserve: the pod's own claims lose their reservation for the pod, in reverse; their
            # allocations stay (kube-controller-manager deallocates, or the pod's retry reuses them).
            for cd in pending:
                if _maybe_applied(e):  # the write's answer was lost: the API server may have applied it
                    await self._unreserve_pod_claim(pod, cd.namespace, cd.name, cd.uid, unsure=cd)
            for done in reversed(reserved):
                meta = done["metadata"]
                await self._unreserve_pod_claim(pod, meta["namespace"], meta["name"], str(meta.get("uid") or ""))
            if failure is e:
                raise
            raise failure from e
        finally:
            self.state.forget_allocation(assumed_claim_key(pod.uid))
            for key, _ in decision.claim_allocations:  # (those written were forgotten after their write)
                if self.state.tracker.is_assumed(key):
                    self.state.forget_allocation(key)
        metrics.BINDING_SECONDS.observe(time.monotonic() - t0)
        _observe_scheduling_latency(pod)
        self.recorder.forget(pod.uid)  # bound: no FailedScheduling series of it can repeat any more
        note = f"Successfully assigned {pod.key} to {decision.node}"
        if decision.claims:
            note += f" with ResourceClaims {', '.join(cd.name for cd in decision.claims)}"
        if claim is not None:
            devices = [r["device"] for r in decision.allocation["devices"]["results"]] if decision.allocation else []
            note += f" with ResourceClaim {claim['metadata']['name']} ({', '.join(devices)})"
        # (queued: the event writer reports it in the background, the binding is done)
        await self.recorder.pod_event(pod, reason="Scheduled", action="Binding", note=note, later=True)
        log.info("pod bound", pod=pod.key, node=decision.node, claim=claim["metadata"]["name"] if claim else None)

    # ---- VolumeBinding's PreBind -------------------------------------------------------------------
    async def _write_volumes(self, pod: PodInfo, volumes: VolumeDecision, node: str) -> dict[str, str]:
        """bindAPIUpdate: each static binding's PV with its claimRef, then each claim to provision
        with the selected node. Returns the resourceVersions written (checkBindings waits until the
        watches have delivered them)."""
        storage = self.state.storage
        written: dict[str, str] = {}
        for pvc, pv in volumes.static_bindings:
            try:
                new = await self.kube.replace(PERSISTENT_VOLUMES, bound_pv_object(pv, pvc))
            except ApiException as e:
                raise BindingFailed(VOLUME_BINDING, api_message(e)) from e
            written[f"pv/{pv.name}"] = str(new["metadata"].get("resourceVersion") or "")
            storage.upsert_pv(without_managed_fields(new))  # the API's object ends the assumption
            log.info("persistent volume bound to claim", pod=pod.key, pv=pv.name, pvc=pvc.key)
        for pvc, _ in volumes.provisions:
            patch: dict[str, Any] = {"metadata": {"annotations": {ANN_SELECTED_NODE: node}}}
            if pvc.resource_version is not None:  # as upstream's Update of the claim it saw: no blind write
                patch["metadata"]["resourceVersion"] = pvc.resource_version
            try:
                new = await self.kube.patch(PERSISTENT_VOLUME_CLAIMS, pvc.name, patch, pvc.namespace)
            except ApiException as e:
                raise BindingFailed(VOLUME_BINDING, api_message(e)) from e
            written[f"pvc/{pvc.key}"] = str(new["metadata"].get("resourceVersion") or "")
            storage.upsert_pvc(without_managed_fields(new))
            log.info("claim annotated for provisioning", pod=pod.key, pvc=pvc.key, node=node)
        return written

    async def _wait_volumes(self, pod: PodInfo, volumes: VolumeDecision, node: str, written: dict[str, str]) -> None:
        """Poll checkBindings (on the watches' view of the API objects) every ``volume_poll``
        seconds until every claim is Bound, an error says the binding failed, or the timeout."""
        deadline = time.monotonic() + self.volume_bind_timeout
        while True:
            await asyncio.sleep(min(self.volume_poll, max(0.0, deadline - time.monotonic())))
            if pod.uid not in self.state.pods:
                raise BindingFailed(VOLUME_BINDING, "binding volumes: pod does not exist any more", pod_gone=True)
            info = self.state.nodes.get(node)
            if info is None:
                raise BindingFailed(VOLUME_BINDING, f'binding volumes: failed to get node "{node}": not found')
            progress = binding_progress(self.state.storage, volumes, node, info.labels, written)
            if progress.error is not None:
                raise BindingFailed(VOLUME_BINDING, f"binding volumes: {progress.error}")
            if progress.done:
                log.info("all claims of the pod are bound", pod=pod.key, node=node)
                return
            if time.monotonic() >= deadline:
                raise BindingFailed(VOLUME_BINDING, "binding volumes: context deadline exceeded")

    # ---- DynamicResources' PreBind for the pod's own claims ----------------------------------------
    async def _bind_pod_claim(self, pod: PodInfo, cd: ClaimDecision) -> dict[str, Any]:
        """bindClaim (kube-scheduler 1.37.2, dynamicresources.go) for one of the pod's own claims:
        with an allocation, the finalizer by a plain Update if it is missing, then UpdateStatus
        with the allocation (stamped with allocationTimestamp) and the pod appended to reservedFor;
        for a claim allocated already, only the reservedFor append. On a conflict it reads the
        claim again (retry.RetryOnConflict) and refuses a claim being deleted, or allocated
        meanwhile. Returns the claim as the status write answered."""
        key = cd.key
        held = self.state.claim_object(key)
        first: dict[str, Any] | None = held if held is not None and held["metadata"].get("uid") == cd.uid else None

        async def reread() -> dict[str, Any]:
            try:
                return await self.kube.get(RESOURCE_CLAIMS, cd.name, cd.namespace)
            except ApiException as e:
                raise BindingFailed(
                    DYNAMIC_RESOURCES, f"get updated claim {key} after conflict: {api_message(e)}"
                ) from e

        async def write(current: dict[str, Any]) -> dict[str, Any]:
            meta = current.get("metadata") or {}
            if meta.get("uid") != cd.uid:  # (a claim of the same name made since: not the one decided on)
                raise BindingFailed(DYNAMIC_RESOURCES, f"claim {key} got deleted in the meantime")
            if meta.get("deletionTimestamp"):
                raise BindingFailed(DYNAMIC_RESOURCES, f"claim {key} got deleted in the meantime")
            status = dict(current.get("status") or {})
            if cd.allocation is not None:
                if status.get("allocation"):
                    raise BindingFailed(DYNAMIC_RESOURCES, f"claim {key} got allocated elsewhere in the meantime")
                finalizers = list(meta.get("finalizers") or ())
                if shape.DELETE_PROTECTION_FINALIZER not in finalizers:
                    body = {
                        **current,
                        "metadata": {**meta, "finalizers": [*finalizers, shape.DELETE_PROTECTION_FINALIZER]},
                    }
                    try:
                        current = await self.kube.replace(RESOURCE_CLAIMS, body, cd.namespace)
                    except ApiException as e:
                        if e.status == 409:
                            raise
                        raise BindingFailed(DYNAMIC_RESOURCES, f"add finalizer to claim {key}: {api_message(e)}") from e
                    crash_point("pod-claim-finalizer")
                    status = dict(current.get("status") or {})
                status["allocation"] = dict(cd.allocation)
            allocation = status.get("allocation")
            if not allocation:
                raise BindingFailed(DYNAMIC_RESOURCES, f"claim {key} got deallocated elsewhere in the meantime")
            if not allocation.get("allocationTimestamp"):
                status["allocation"] = {**allocation, "allocationTimestamp": shape.rfc3339(datetime.now(UTC))}
            ref = {"resource": "pods", "name": pod.name, "uid": pod.uid}
            status["reservedFor"] = [*(status.get("reservedFor") or ()), ref]
            try:
                return await self.kube.replace(
                    RESOURCE_CLAIMS, {**current, "status": status}, cd.namespace, subresource="status"
                )
            except ApiException as e:
                if e.status == 409:
                    raise
                what = "add allocation and reservation to" if cd.allocation is not None else "add reservation to"
                raise BindingFailed(DYNAMIC_RESOURCES, f"{what} claim {key}: {api_message(e)}") from e

        if first is None:
            first = await reread()
        try:
            answer = await retry_conflicts(first, write, reread, what=f"claim {key}")
        except TooManyConflicts as e:
            raise BindingFailed(DYNAMIC_RESOURCES, f"claim {key}: too many conflicts") from e
        assert answer is not None
        self.state.upsert_claim(without_managed_fields(answer))  # the API's object, then the assumption ends
        if cd.allocation is not None:
            self.state.forget_allocation(key)
        log.info("pod claim reserved", pod=pod.key, claim=key, allocated=cd.allocation is not None)
        return answer

    async def _unreserve_pod_claim(
        self, pod: PodInfo, namespace: str, name: str, uid: str, *, unsure: ClaimDecision | None = None
    ) -> None:
        """Unreserve for one of the pod's claims: remove the pod from reservedFor by a
        strategic-merge patch (``$patch: delete`` by uid, preconditioned on the claim's uid), as
        upstream; the allocation stays. The answer is the claim as it is now: recorded, so that a
        claim whose write's answer was lost counts what it holds."""
        patch = {"metadata": {"uid": uid}, "status": {"reservedFor": [{"$patch": "delete", "uid": pod.uid}]}}
        key = f"{namespace}/{name}"
        try:
            answer = await self.kube.patch(
                RESOURCE_CLAIMS, name, patch, namespace, subresource="status", content_type=STRATEGIC_MERGE_PATCH
            )
        except Exception as e:  # (we get here again when the pod is retried: it is still reserved)
            log.warning("unreserve of claim failed", pod=pod.key, claim=key, error=_error(e))
            if unsure is not None and unsure.allocation is not None:
                # Its allocation may have been written: its devices stay counted until the watch shows it.
                self.state.tracker.set_claim(key, {"status": {"allocation": unsure.allocation}})
            return
        self.state.upsert_claim(without_managed_fields(answer))
        log.info("pod claim unreserved", pod=pod.key, claim=key)

    async def _create_claim(self, pod: PodInfo, decision: Decision) -> dict[str, Any]:
        body = shape.special_claim(pod.raw, [r.to_api() for r in decision.requests])
        try:
            created = await self.kube.create(RESOURCE_CLAIMS, body, pod.namespace)
        except ApiException as e:
            metrics.RESOURCECLAIM_CREATES.labels(status="failure").inc()
            raise BindingFailed("create claim", api_message(e), pod_gone=e.status == 404) from e
        metrics.RESOURCECLAIM_CREATES.labels(status="success").inc()
        self.state.upsert_claim(created)
        return created

    async def _write_allocation(self, pod: PodInfo, claim: dict[str, Any], allocation: Any) -> dict[str, Any]:
        status = shape.allocated_status(pod.raw, allocation, datetime.now(UTC))
        name = claim["metadata"]["name"]

        async def write(current: dict[str, Any]) -> dict[str, Any]:
            # Without managedFields: the API server keeps the live object's on a status update
            # whatever the body says, and they are most of the claim's bytes to encode and send.
            body = {**without_managed_fields(current), "status": status}
            try:
                return await self.kube.replace(RESOURCE_CLAIMS, body, pod.namespace, subresource="status")
            except ApiException as e:
                if e.status != 409:
                    raise BindingFailed("write claim allocation", api_message(e)) from e
                raise

        async def reread() -> dict[str, Any]:
            try:
                current = await self.kube.get(RESOURCE_CLAIMS, name, pod.namespace)
            except ApiException as e:
                raise BindingFailed("write claim allocation", api_message(e)) from e
            if current["metadata"].get("deletionTimestamp"):
                raise BindingFailed("write claim allocation", "claim got deleted in the meantime")
            if (current.get("status") or {}).get("allocation"):
                raise BindingFailed("write claim allocation", "claim got allocated elsewhere")
            return current

        try:
            written = await retry_conflicts(claim, write, reread, what=f"claim {pod.namespace}/{name}")
        except TooManyConflicts as e:
            raise BindingFailed("write claim allocation", "too many conflicts") from e
        assert written is not None
        self.state.upsert_claim(written)
        return written

    async def _patch_pod_status(self, pod: PodInfo, claim_name: str, decision: Decision) -> None:
        patch = shape.pod_status_patch(claim_name, [m.to_api() for m in decision.mappings])
        try:
            # Every answer is read (a pod, decoded in microseconds): 1.36 lets an admin turn the
            # gate off, restarting kube-apiserver under a running draxr.
            answer = await self.kube.patch(
                PODS, pod.name, patch, pod.namespace, subresource="status", content_type=MERGE_PATCH
            )
        except ApiException as e:
            raise BindingFailed("write pod status", api_message(e), pod_gone=e.status == 404) from e
        written = (answer.get("status") or {}).get("extendedResourceClaimStatus")
        if written is None:
            # The field itself is gone: kube-scheduler without the gate would not have served the
            # pod's extended resources by DRA either; for a while neither does draxr.
            log.error(
                "pod status dropped by the API server; extended resources are scheduled as node resources "
                f"for {GATE_RECHECK_SECONDS:.0f} s, then a pod tries again",
                pod=pod.key,
                why=STATUS_DROPPED,
            )
            self.state.extended.off(time.monotonic())
            raise BindingFailed("write pod status", STATUS_DROPPED)
        if written.get("resourceClaimName") != claim_name:
            log.error("pod status not kept by the API server", pod=pod.key, found=written)
            raise BindingFailed("write pod status", STATUS_DROPPED)

    async def _clear_pod_status(self, pod: PodInfo, claim_name: str) -> None:
        """A lost binding race (adoption mode: kube-scheduler bound the pod first) must not leave the
        pod's status naming a claim that is about to be deleted. Only if it still names ours."""
        patch = [
            {"op": "test", "path": "/status/extendedResourceClaimStatus/resourceClaimName", "value": claim_name},
            {"op": "remove", "path": "/status/extendedResourceClaimStatus"},
        ]
        try:
            await self.kube.patch(PODS, pod.name, patch, pod.namespace, subresource="status", content_type=JSON_PATCH)
        except Exception as e:  # (the pod's status still names a deleted claim: kubelet refuses to start it)
            log.info("pod status not cleared", pod=pod.key, claim=claim_name, error=_error(e))

    async def _bind(self, pod: PodInfo, node: str) -> None:
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        try:
            await self.kube.create(PODS, binding, pod.namespace, name=pod.name, subresource="binding")
        except ApiException as e:
            raise BindingFailed("bind", api_message(e), pod_gone=e.status in (404, 409)) from e
        except Exception as e:
            # No answer (a dropped connection, a timeout): the binding may have been made. Rolling the
            # claim back under a bound pod would be the worst outcome; look before failing.
            if await self._bound_to(pod, node):
                log.info("binding answer lost, but the pod is bound", pod=pod.key, node=node, error=_error(e))
                return
            raise

    async def _bound_to(self, pod: PodInfo, node: str) -> bool:
        """Whether the pod is bound to ``node``, asked a few times while the API does not answer
        (then, like upstream after a failed bind, it counts as not bound)."""
        for delay in (0.5, 1.0, 2.0, None):
            try:
                current = await self.kube.get(PODS, pod.name, pod.namespace)
            except ApiException:
                return False
            except Exception:
                if delay is None:
                    return False
                await asyncio.sleep(delay)
                continue
            same = (current.get("metadata") or {}).get("uid") == pod.uid
            return same and (current.get("spec") or {}).get("nodeName") == node
        return False

    async def _roll_back(self, pod: PodInfo, claim: dict[str, Any]) -> bool:
        """True when the claim is gone."""
        try:
            await drop_finalizer_and_delete(self.kube, claim)
        except Exception as e:
            # The stale-claim sweep deletes it later; the claim never counts as ours to reuse.
            log.warning("rollback of claim failed", pod=pod.key, claim=claim["metadata"]["name"], error=_error(e))
            return False
        self.state.remove_claim(pod.namespace, claim["metadata"]["name"])
        return True


def _maybe_applied(e: BaseException) -> bool:
    """A failed write the API server may have applied all the same: no answer (a dropped
    connection, a timeout) or a server error; not a refusal or a conflict."""
    cause = e.__cause__ if isinstance(e, BindingFailed) else e
    if cause is None or isinstance(cause, TooManyConflicts | BindingFailed):
        return False
    if isinstance(cause, ApiException):
        return not cause.status or int(cause.status) >= 500
    return True


def _error(e: Exception) -> str:
    return api_message(e) if isinstance(e, ApiException) else f"{type(e).__name__}: {e}"


def _observe_scheduling_latency(pod: PodInfo) -> None:
    try:
        created = datetime.fromisoformat(pod.created)
    except ValueError:
        return
    metrics.POD_SCHEDULING_SECONDS.observe(max(0.0, (datetime.now(UTC) - created).total_seconds()))
