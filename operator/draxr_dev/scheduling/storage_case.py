"""The storage objects of a scheduling case (draxr_dev.scheduling's schema) as a StorageState."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from draxr.core.storage import StorageState

__all__ = ["build_storage"]


def build_storage(case: Mapping[str, Any], storage: StorageState | None = None) -> StorageState:
    """PVs, PVCs, classes, CSI objects and attachments into ``storage`` (a ClusterState's, which
    tracks its pods' volumes itself) or, without it, a new one with the volumes of the case's
    existing pods too."""
    with_pods = storage is None
    storage = StorageState() if storage is None else storage
    for obj in case.get("persistentVolumes") or ():
        storage.upsert_pv(obj)
    for obj in case.get("persistentVolumeClaims") or ():
        storage.upsert_pvc(obj)
    for obj in case.get("storageClasses") or ():
        storage.upsert_class(obj)
    for obj in case.get("csiNodes") or ():
        storage.upsert_csi_node(obj)
    for obj in case.get("csiDrivers") or ():
        storage.upsert_csi_driver(obj)
    for obj in case.get("csiStorageCapacities") or ():
        storage.upsert_capacity(obj)
    for obj in case.get("volumeAttachments") or ():
        storage.upsert_attachment(obj)
    for i, pod in enumerate(case.get("pods") or () if with_pods else ()):
        meta = pod.get("metadata") or {}
        if not meta.get("uid"):  # as evaluate's identities
            pod = {**pod, "metadata": {**meta, "uid": f"pod-{i}-{meta.get('name', '')}"}}
        storage.upsert_pod(pod)
    return storage
