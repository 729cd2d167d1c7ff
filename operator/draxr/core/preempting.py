"""The victims draxr's preemption chose whose DisruptionTarget and deletion the API does not show
yet: they count as terminating by preemption from the choice on (preemption's eligibility reads
it), so that a preemptor nominated to their node waits for them instead of preempting again
elsewhere while the evictions are on their way."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from draxr.core.state import PodInfo


class Preempting:
    def __init__(self) -> None:
        self._uids: set[str] = set()

    def seen(self, info: PodInfo) -> PodInfo:
        """The pod as the API shows it, marked preempted while the API does not show it yet."""
        if info.uid not in self._uids:
            return info
        if info.preempted or info.terminal:
            self._uids.discard(info.uid)  # the API says it now (or it ended)
            return info
        return replace(info, preempted=True)

    def mark(self, pods: dict[str, PodInfo], uids: Iterable[str], preempted: bool) -> None:
        """Our preemption chose these victims (``preempted``; False: their eviction failed)."""
        for uid in uids:
            pod = pods.get(uid)
            if pod is None:
                continue
            if preempted and not pod.preempted:
                self._uids.add(uid)
                pods[uid] = replace(pod, preempted=True)
            elif not preempted and uid in self._uids:
                self._uids.discard(uid)
                pods[uid] = replace(pod, preempted=False)

    def forget(self, uid: str) -> None:
        self._uids.discard(uid)
