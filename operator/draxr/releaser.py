"""Releasing special claims (kubernetes#134311) and rolling back half-written ones.

Release: clear reservedFor and the allocation (devices free for every scheduler at once), drop the
delete-protection finalizer, delete. Every step tolerates the claim vanishing and retries
conflicts, so kube-controller-manager's resourceclaim controller may do the same concurrently.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from draxr import logs, metrics
from draxr.core.claims import DELETE_PROTECTION_FINALIZER
from draxr.core.gc import ClaimAction
from draxr.core.state import ClusterState, without_managed_fields
from draxr.kube import JSON_PATCH, PODS, RESOURCE_CLAIMS, ApiException, Kube, api_message
from draxr.loops import Kind, classify, retry_conflicts

log = logs.get("draxr.releaser")


async def _current(kube: Kube, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return await kube.get(RESOURCE_CLAIMS, name, namespace)
    except ApiException as e:
        if e.status == 404:
            return None
        raise


async def clear_status(kube: Kube, claim: Mapping[str, Any]) -> dict[str, Any] | None:
    """Remove reservedFor and the allocation; returns the updated claim, None if it is gone."""
    meta = claim["metadata"]

    async def write(current: Mapping[str, Any]) -> dict[str, Any] | None:
        status = dict(current.get("status") or {})
        if not status.get("allocation") and not status.get("reservedFor"):
            return dict(current)
        status.pop("allocation", None)
        status.pop("reservedFor", None)
        try:
            # (managedFields left out: a status update keeps the live object's whatever the body says)
            body = {**without_managed_fields(current), "status": status}
            return await kube.replace(RESOURCE_CLAIMS, body, meta["namespace"], subresource="status")
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    return await retry_conflicts(
        claim, write, lambda: _current(kube, meta["namespace"], meta["name"]), what=_what(meta)
    )


async def drop_finalizer_and_delete(kube: Kube, claim: Mapping[str, Any]) -> None:
    """Remove our finalizer (guarded by a JSON-patch test, so a concurrent change is not clobbered)
    and delete the claim, preconditioned on its uid."""
    meta = claim["metadata"]
    ns, name = meta["namespace"], meta["name"]

    async def unfinalize(current: Mapping[str, Any]) -> bool:
        """True when the claim is still there (finalizer gone now or before)."""
        finalizers = list((current.get("metadata") or {}).get("finalizers") or ())
        if DELETE_PROTECTION_FINALIZER not in finalizers:
            return True
        i = finalizers.index(DELETE_PROTECTION_FINALIZER)
        ops = [
            {"op": "test", "path": f"/metadata/finalizers/{i}", "value": DELETE_PROTECTION_FINALIZER},
            {"op": "remove", "path": f"/metadata/finalizers/{i}"},
        ]
        try:
            await kube.patch(RESOURCE_CLAIMS, name, ops, ns, content_type=JSON_PATCH)
        except ApiException as e:
            if e.status == 404:
                return False
            raise
        return True

    # 422: the test op failed, someone changed the list; read it again like a conflict.
    there = await retry_conflicts(
        claim, unfinalize, lambda: _current(kube, ns, name), what=_what(meta), codes=frozenset({409, 422})
    )
    if not there:
        return
    try:
        await kube.request(
            "DELETE",
            RESOURCE_CLAIMS.path(ns, name),
            {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": meta["uid"]}},
        )
    except ApiException as e:
        if e.status not in (404, 409):  # gone, or a different claim now has that name
            raise


def _what(meta: Mapping[str, Any]) -> str:
    return f"claim {meta['namespace']}/{meta['name']}"


class Releaser:
    def __init__(self, kube: Kube, state: ClusterState) -> None:
        self.kube = kube
        self.state = state
        self._busy: set[str] = set()

    async def run(self, action: ClaimAction, kind: str) -> bool:
        """Release or roll back one claim; True when the claim is gone. Idempotent, one at a time per claim."""
        if action.key in self._busy:
            return False
        self._busy.add(action.key)
        try:
            if action.confirm_pod_gone and await self._pod_alive(action):
                return False
            known = self.state.claims.get(action.key)
            claim = known.object() if known is not None else await _current(self.kube, action.namespace, action.name)
            if claim is None:
                self.state.remove_claim(action.namespace, action.name)
                return True
            if kind == "release":
                claim = await clear_status(self.kube, claim)
            if claim is not None:
                await drop_finalizer_and_delete(self.kube, claim)
            self.state.remove_claim(action.namespace, action.name)
            metrics.CLAIMS_RELEASED.labels(reason=kind).inc()
            log.info(
                "claim released" if kind == "release" else "claim rolled back",
                claim=action.key,
                pod=f"{action.namespace}/{action.pod_name}",
                why=action.reason,
            )
            return True
        except Exception as e:  # API errors, dropped connections, timeouts: the next sweep retries
            code = str(getattr(e, "status", "") or "")
            metrics.API_ERRORS.labels(operation=f"claim-{kind}", code=code).inc()
            error = api_message(e) if isinstance(e, ApiException) else f"{type(e).__name__}: {e}"
            log.warning(f"claim {kind} failed, will retry", claim=action.key, error=error, kind=classify(e).value)
            if classify(e) is Kind.BUG:
                raise  # not an API hiccup: let the loop's policy count and escalate it
            return False
        finally:
            self._busy.discard(action.key)

    async def _pod_alive(self, action: ClaimAction) -> bool:
        try:
            pod = await self.kube.get(PODS, action.pod_name, action.namespace)
        except ApiException as e:
            if e.status == 404:
                return False
            raise
        same = pod["metadata"]["uid"] == action.pod_uid
        return same and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")

    async def run_all(self, actions: list[ClaimAction], kind: str) -> int:
        done = await asyncio.gather(*(self.run(a, kind) for a in actions))
        return sum(done)
