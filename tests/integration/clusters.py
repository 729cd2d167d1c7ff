"""Extra control planes for the modules that need a differently configured cluster than the session's."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from draxr.devcluster.binaries import ensure_binaries
from draxr.devcluster.controlplane import ControlPlane, Options


@contextlib.contextmanager
def extra_control_plane(prefix: str, options: Options, k8s_version: str | None = None) -> Iterator[ControlPlane]:
    """Started in a fresh temp dir, stopped and removed afterwards (kept with DRAXR_KEEP_RUN_DIR)."""
    cp = ControlPlane(ensure_binaries(k8s_version), Path(tempfile.mkdtemp(prefix=f"draxr-cp-{prefix}.")), options)
    try:
        cp.start()
        yield cp
    finally:
        cp.stop()
        if not os.environ.get("DRAXR_KEEP_RUN_DIR"):
            shutil.rmtree(cp.run_dir, ignore_errors=True)
