"""What the device plugin -> DRA migration (core.migration) reads of the cluster, kept as claims and
records come and go: the node agents' DevicePluginRecords, the adoption claims, what each pod's
allocated adoption claims cover, and the device-plugin identities the DeviceClasses declare."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from draxr.core.mapping import ExtendedResourceMapping
from draxr.core.migration import Identity, NodeRecord, identities, parse_record

if TYPE_CHECKING:
    from draxr.core.state import ClaimInfo


class AdoptionIndex:
    def __init__(self, claims: Mapping[str, ClaimInfo]) -> None:
        self._claims = claims  # the cluster's claims by key, as last seen (ClusterState.claims)
        # Per pod uid, the resources its allocated adoption claims cover.
        self.adopted: dict[str, Counter[str]] = {}
        # The node agents' DevicePluginRecords by node: the record, or why it cannot be read.
        self.records: dict[str, NodeRecord | str] = {}
        self._keys: set[str] = set()  # the adoption claims' keys
        self._identities: tuple[object, dict[str, tuple[Identity, str]]] = (None, {})

    def claim_changed(self, key: str, old: ClaimInfo | None, new: ClaimInfo | None) -> bool:
        """Claim ``key`` went from ``old`` to ``new`` (None: absent); True when what a pod's adoption
        claims cover changed (pods waiting for a node's device-plugin pods to be adopted may go on)."""
        if new is not None and new.adoption_node:
            self._keys.add(key)
        else:
            self._keys.discard(key)
        if (old.adopts if old is not None else None) == (new.adopts if new is not None else None):
            return False
        self._count(old, -1)
        self._count(new, +1)
        return True

    def _count(self, claim: ClaimInfo | None, sign: int) -> None:
        if claim is None or claim.adopts is None:
            return
        uid, resources = claim.adopts
        counts = self.adopted.setdefault(uid, Counter())
        counts.update(dict.fromkeys(resources, sign))
        for r in resources:
            if counts[r] <= 0:
                del counts[r]
        if not counts:
            del self.adopted[uid]

    def upsert_record(self, obj: Mapping[str, Any]) -> NodeRecord | str:
        found = parse_record(obj)
        self.records[str((obj.get("metadata") or {}).get("name") or "")] = found
        return found

    def remove_record(self, name: str) -> None:
        self.records.pop(name, None)

    def claims_by_node(self) -> dict[str, dict[str, ClaimInfo]]:
        """The adoption claims by node, then claim key."""
        out: dict[str, dict[str, ClaimInfo]] = {}
        for key in sorted(self._keys):
            claim = self._claims[key]
            out.setdefault(claim.adoption_node, {})[key] = claim
        return out

    def devices_on(self, node: str) -> int:
        """Devices the allocated adoption claims of ``node`` hold."""
        return sum(c.adopted_devices for k in self._keys if (c := self._claims[k]).adoption_node == node)

    def identities(
        self, mapping: ExtendedResourceMapping, classes: Mapping[str, Mapping[str, Any]]
    ) -> dict[str, tuple[Identity, str]]:
        """Per extended resource whose DeviceClass declares a device-plugin identity: the identity
        and that class (core.migration.identities), cached per mapping."""
        if self._identities[0] is not mapping:
            self._identities = (mapping, identities(mapping, classes))
        return self._identities[1]
