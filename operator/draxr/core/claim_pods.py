"""Which pods the claims belong to, kept as claims and pods come and go: the special claims by the
pod that owns them, the claims whose status.reservedFor names a pod (the pod's own claims), and the
schedulers of removed pods whose special claims are still here (who releases them:
gc.claims_to_release)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from draxr.core.state import ClaimInfo


class ClaimPods:
    def __init__(self) -> None:
        self.special: dict[str, set[str]] = {}  # pod uid -> its special claims' keys
        self.reserved: dict[str, set[str]] = {}  # pod uid -> keys of the claims reserved for it
        self.gone_schedulers: dict[str, str] = {}  # removed pod's uid -> its schedulerName

    def claim_changed(self, key: str, old: ClaimInfo | None, new: ClaimInfo) -> None:
        self._reserve(key, old, -1)
        self._reserve(key, new, +1)
        if new.owner is not None:
            self.special.setdefault(new.owner[1], set()).add(key)

    def claim_removed(self, key: str, claim: ClaimInfo | None) -> None:
        self._reserve(key, claim, -1)
        if claim is not None and claim.owner is not None:
            keys = self.special.get(claim.owner[1], set())
            keys.discard(key)
            if not keys:
                self.special.pop(claim.owner[1], None)
                self.gone_schedulers.pop(claim.owner[1], None)

    def pod_removed(self, uid: str, scheduler_name: str) -> None:
        if uid in self.special:
            self.gone_schedulers[uid] = scheduler_name

    def _reserve(self, key: str, claim: ClaimInfo | None, sign: int) -> None:
        if claim is None:
            return
        for resource, uid in claim.consumers:
            if resource != "pods":
                continue
            keys = self.reserved.setdefault(uid, set())
            if sign > 0:
                keys.add(key)
            else:
                keys.discard(key)
                if not keys:
                    del self.reserved[uid]
