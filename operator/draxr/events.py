"""Kubernetes Events and the PodScheduled condition, written like kube-scheduler writes them."""

from __future__ import annotations

import os
import secrets
import socket
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import aiohttp

from draxr import logs
from draxr.core.claims import micro_time, rfc3339
from draxr.core.state import PodInfo
from draxr.kube import EVENTS, MERGE_PATCH, PODS, STRATEGIC_MERGE_PATCH, ApiException, Kube

log = logs.get("draxr.events")


@dataclass
class _Series:
    name: str
    note: str
    count: int


class Recorder:
    """Posts events.k8s.io/v1 Events. A repeated FailedScheduling with the same note updates the
    existing Event's series instead of creating a new one (like the client-go event broadcaster).
    Only warnings can repeat: the series of a pod are remembered for those alone, until the pod is
    bound or deleted (``forget``)."""

    def __init__(self, kube: Kube, controller: str) -> None:
        self.kube = kube
        self.controller = controller
        self.instance = f"{controller}-{os.environ.get('POD_NAME') or socket.gethostname()}"
        self._last: dict[str, dict[str, _Series]] = {}  # pod uid -> reason -> latest series

    async def pod_event(self, pod: PodInfo, *, reason: str, action: str, note: str, warning: bool = False) -> None:
        now = datetime.now(UTC)
        last = self._last.get(pod.uid, {}).get(reason)
        try:
            if last is not None and last.note == note:
                last.count += 1
                patch = {"series": {"count": last.count, "lastObservedTime": micro_time(now)}}
                await self.kube.patch(EVENTS, last.name, patch, pod.namespace, content_type=MERGE_PATCH)
                return
            name = f"{pod.name}.{secrets.token_hex(8)}"
            await self.kube.create(EVENTS, self._event(pod, name, reason, action, note, warning, now), pod.namespace)
            if warning:
                self._last.setdefault(pod.uid, {})[reason] = _Series(name, note, 1)
        except ApiException as e:
            log.warning("event not recorded", pod=pod.key, reason=reason, status=e.status, error=e.reason)
        except (aiohttp.ClientError, OSError, TimeoutError) as e:  # no answer (or not leading): best effort
            log.warning("event not recorded", pod=pod.key, reason=reason, error=f"{type(e).__name__}: {e}")

    def forget(self, pod_uid: str) -> None:
        self._last.pop(pod_uid, None)

    def _event(
        self, pod: PodInfo, name: str, reason: str, action: str, note: str, warning: bool, now: datetime
    ) -> dict[str, Any]:
        return {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": pod.namespace},
            "eventTime": micro_time(now),
            "reportingController": self.controller,
            "reportingInstance": self.instance,
            "action": action,
            "reason": reason,
            "type": "Warning" if warning else "Normal",
            "note": note[:1024],
            "regarding": {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": pod.namespace,
                "name": pod.name,
                "uid": pod.uid,
            },
        }


async def set_unschedulable(kube: Kube, pod: PodInfo, message: str) -> None:
    """PodScheduled=False/Unschedulable, written only when it changes (no write per retry)."""
    want = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
    for cond in (pod.raw.get("status") or {}).get("conditions") or ():
        if all(cond.get(k) == v for k, v in want.items()):
            return
    patch = {
        "status": {
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": message,
                    "lastProbeTime": None,
                    "lastTransitionTime": rfc3339(datetime.now(UTC)),
                }
            ]
        }
    }
    try:
        await kube.patch(PODS, pod.name, patch, pod.namespace, subresource="status", content_type=STRATEGIC_MERGE_PATCH)
    except ApiException as e:
        if e.status != 404:
            log.warning("pod condition not written", pod=pod.key, status=e.status, error=e.reason)
    except (aiohttp.ClientError, OSError, TimeoutError) as e:  # written again on the next attempt
        log.warning("pod condition not written", pod=pod.key, error=f"{type(e).__name__}: {e}")
