"""Locate (and build on first use) the control-plane binaries cached under ~/.cache/draxr/bin/<key>/."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
BUILD_SCRIPT = REPO_ROOT / "hack" / "build-control-plane.sh"
KUBERNETES_BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")


def ensure_binaries(k8s_version: str | None = None, kubernetes: tuple[str, ...] = KUBERNETES_BINARIES) -> Path:
    """Return the directory holding the binaries, building them first when the cache is cold.

    ``DRAXR_BIN_DIR`` points at a ready directory of the default version and skips the build script;
    ``k8s_version`` (e.g. "v1.35.4") asks the build script for another one, with only the Kubernetes
    binaries named in ``kubernetes`` (K8S_BINARIES; etcd and kwok always). The build prints its
    progress to the real stderr so that a cold build under pytest's capture is still visible.
    """
    preset = os.environ.get("DRAXR_BIN_DIR")
    if preset and k8s_version is None:
        out = Path(preset)
    else:
        env = {**os.environ, **({"K8S_VERSION": k8s_version} if k8s_version else {})}
        env["K8S_BINARIES"] = " ".join(kubernetes)
        print(f"[draxr] ensuring control-plane binaries via {BUILD_SCRIPT}", file=sys.__stderr__, flush=True)
        proc = subprocess.run(
            ["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, stderr=sys.__stderr__, text=True, check=False, env=env
        )
        if proc.returncode != 0:
            raise RuntimeError(f"building the control plane failed (exit {proc.returncode}); see the log above")
        out = Path(proc.stdout.strip().splitlines()[-1])
    missing = [b for b in ("etcd", "kwok", *kubernetes) if not (out / b).is_file()]
    if missing:
        raise RuntimeError(f"control-plane binaries missing in {out}: {', '.join(missing)}")
    return out


NODE_BUILD_SCRIPT = REPO_ROOT / "hack" / "build-node.sh"
NODE_REQUIRED = (
    "containerd",
    "containerd-shim-runc-v2",
    "ctr",
    "kubelet",
    "draxr-draplugin",
    "draxr-deviceplugin",
    "draxr-pause",
    "images/busybox.tar",
    "images/pause.tar",
)


def ensure_node_binaries() -> Path:
    """The directory of what a real node runs (hack/build-node.sh: containerd, kubelet, our plugins,
    the image tars), built first when the cache is cold; ``DRAXR_NODE_BIN_DIR`` names a ready one.
    The build script also installs the Debian packages the node needs (runc, CNI plugins)."""
    out = built("the real node", "DRAXR_NODE_BIN_DIR", NODE_BUILD_SCRIPT)
    missing = [b for b in NODE_REQUIRED if not (out / b).is_file()]
    if missing:
        raise RuntimeError(f"real-node binaries missing in {out}: {', '.join(missing)}")
    return out


PROMTOOL_BUILD_SCRIPT = REPO_ROOT / "hack" / "build-promtool.sh"
HELM_BUILD_SCRIPT = REPO_ROOT / "hack" / "build-helm.sh"


def ensure_promtool() -> Path:
    """Prometheus' promtool (hack/build-promtool.sh, from the Go module proxy), built first when the
    cache is cold; ``DRAXR_PROMTOOL`` names a ready one (hack/test.sh sets it)."""
    return _ensure_tool("promtool", "DRAXR_PROMTOOL", PROMTOOL_BUILD_SCRIPT)


def built(name: str, variable: str, script: Path) -> Path:
    """What ``variable`` names (hack/test.sh sets it), else what ``script`` prints on its last line
    (a hack/build-*.sh: built first when its cache is cold)."""
    preset = os.environ.get(variable)
    if preset:
        return Path(preset)
    if script in _built:  # the script's answer holds for the process (hack/test.sh builds helm and
        return _built[script]  # Kueue in the background, so their variables are unset)
    print(f"[draxr] ensuring {name} via {script}", file=sys.__stderr__, flush=True)
    proc = subprocess.run(["bash", str(script)], stdout=subprocess.PIPE, stderr=sys.__stderr__, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"building {name} failed (exit {proc.returncode}); see the log above")
    _built[script] = Path(proc.stdout.strip().splitlines()[-1])
    return _built[script]


_built: dict[Path, Path] = {}


def _ensure_tool(name: str, variable: str, script: Path) -> Path:
    out = built(name, variable, script)
    if not out.is_file():
        raise RuntimeError(f"{name} missing at {out}")
    return out


def ensure_helm() -> Path:
    """The helm binary (hack/build-helm.sh, from the Go module proxy), built first when the cache is
    cold; ``DRAXR_HELM`` names a ready one (hack/test.sh sets it)."""
    return _ensure_tool("helm", "DRAXR_HELM", HELM_BUILD_SCRIPT)


IMAGE_BUILD_SCRIPT = REPO_ROOT / "hack" / "build-image.sh"


def ensure_image() -> Path:
    """draxr's image as an OCI archive (hack/build-image.sh: the Dockerfile built by buildah on a local
    debootstrap base), built first when it is missing or stale; ``DRAXR_IMAGE_ARCHIVE`` names a ready
    one (hack/test.sh sets it). ``<archive>.json`` beside it holds the reference and the sizes."""
    out = _ensure_tool("the image", "DRAXR_IMAGE_ARCHIVE", IMAGE_BUILD_SCRIPT)
    if not out.with_name(out.name + ".json").is_file():
        raise RuntimeError(f"image archive's .json missing beside {out}")
    return out
