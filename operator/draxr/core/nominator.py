"""Upstream's nominator: the unbound pods nominated to each node (status.nominatedNodeName), which
the node's filters count as if placed there, and the nominations draxr's PostFilter made that the
pod's status does not show yet."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from draxr.core.state import PodInfo


class Nominator:
    def __init__(self, touch_node: Callable[[str], None]) -> None:
        self._touch_node = touch_node  # a nomination comes or goes: the node's cached verdicts are stale
        # Node -> the uids nominated to it, in the order they came (the order upstream's NodeInfo
        # lists them).
        self.by_node: dict[str, dict[str, None]] = {}
        # Ours (uid -> node): kept while the API shows none, as upstream's nominator keeps a
        # ModeOverride nomination through updates without nominatedNodeName
        # (updateNominatedPodUnlocked).
        self._ours: dict[str, str] = {}

    def seen(self, info: PodInfo) -> PodInfo:
        """The pod as the API shows it, with our nomination while the API shows none."""
        node = self._ours.get(info.uid)
        if node is None:
            return info
        if info.nominated or not info.schedulable:
            del self._ours[info.uid]  # the API says it now (or it is bound or going)
            return info
        return replace(info, nominated=node)

    def ours(self, uid: str, node: str) -> None:
        """Our PostFilter nominated pod ``uid`` to ``node`` ("": cleared its nomination)."""
        if node:
            self._ours[uid] = node
        else:
            self._ours.pop(uid, None)

    def forget(self, uid: str) -> None:
        self._ours.pop(uid, None)

    def index(self, pod: PodInfo | None, sign: int) -> None:
        """Count the pod's nomination on its node (``sign`` 1) or not any more (-1)."""
        if pod is None or not pod.nominated or not pod.schedulable:
            return
        on = self.by_node.setdefault(pod.nominated, {})
        if sign > 0:
            on[pod.uid] = None
        else:
            on.pop(pod.uid, None)
            if not on:
                del self.by_node[pod.nominated]
        self._touch_node(pod.nominated)

    def pods_on(self, node: str, pods: Mapping[str, PodInfo], assumed: Mapping[str, str]) -> list[PodInfo]:
        """The pods nominated to ``node`` and not yet placed: a nominated pod assumed on a node
        (its binding in flight) counts there as placed only, as upstream's assume drops it from
        the nominator (DeleteNominatedPodIfExists); counted twice, it made room look short and its
        node's other preemptors evict again."""
        return [pods[uid] for uid in self.by_node.get(node, ()) if uid not in assumed]
