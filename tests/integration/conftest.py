"""The integration tests' own fixtures; the shared ones (``control_plane``, ``kube``, ``names``,
``namespace``, ``fleet``, ``operator``) are in tests/conftest.py."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from draxr_dev.devcluster.controlplane import ControlPlane

from ..conftest import unique as unique  # (test_faultproxy.py imports it from here)
from . import manifests
from .helpers import install
from .test_mapping_crd import CRD, CRD_NAME


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def installed(control_plane: ControlPlane) -> Iterator[subprocess.CompletedProcess[str]]:
    """The install on the session control plane, shared by the modules that need it (HA test too),
    removed at the end of the session."""
    out = install(control_plane)
    yield out
    manifests.delete(control_plane)


@pytest.fixture(scope="module")
def mapping_crd(control_plane: ControlPlane) -> None:
    """The ExtendedResourceMapping CRD (left installed: other modules apply the same file)."""
    out = manifests.kubectl(control_plane, "apply", "-f", str(CRD))
    assert out.returncode == 0, out.stderr
    done = manifests.kubectl(control_plane, "wait", "--for=condition=Established", f"crd/{CRD_NAME}", "--timeout=60s")
    assert done.returncode == 0, done.stderr
