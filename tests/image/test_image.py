"""draxr's container image, built for real from the Dockerfile (hack/build-image.sh: buildah on a
local debootstrap bookworm base), looked into and run the way kubelet runs the Deployment's pod:
runc, uid 65532, a read-only root filesystem, no capabilities, no new privileges, a tmpfs /tmp."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from draxr import __version__
from draxr_dev.devcluster import ociarchive
from draxr_dev.devcluster.binaries import ensure_image

ROOT = Path(__file__).resolve().parents[2]
UID = GID = 65532
SITE = "usr/local/lib/python3.11/dist-packages"
STICKY_WORLD_WRITABLE = {"tmp", "var/tmp", "run/lock", "var/lock"}


@pytest.fixture(scope="module")
def archive() -> Path:
    return ensure_image()


@pytest.fixture(scope="module")
def unpacked(archive: Path) -> Iterator[tuple[ociarchive.Image, Path]]:
    # Unpacked as root (owners and modes kept) into a bundle directory runc can use.
    bundle = Path(tempfile.mkdtemp(prefix="draxr-image."))
    try:
        image = ociarchive.unpack(archive, bundle / "rootfs")
        yield image, bundle
    finally:
        shutil.rmtree(bundle, ignore_errors=True)


def test_config_runs_draxr_as_the_unprivileged_user(archive: Path) -> None:
    image = ociarchive.read(archive)
    meta = json.loads(archive.with_name(archive.name + ".json").read_text())
    assert meta["ref"] == f"ghcr.io/draxr/draxr:{__version__}"  # the tag manifests/kustomization.yaml names
    assert image.descriptor["annotations"]["org.opencontainers.image.ref.name"] in (meta["ref"], __version__)
    cfg = image.config["config"]
    assert cfg["User"] == f"{UID}:{GID}"
    assert cfg["Entrypoint"] == ["draxr"]
    assert cfg["Cmd"] == ["version"]
    env = dict(e.split("=", 1) for e in cfg["Env"])
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert env["PYTHONUNBUFFERED"] == "1"
    assert env["PATH"].split(":")[0] == "/usr/local/sbin"
    assert image.config["os"] == "linux"
    assert image.config["architecture"] == "amd64"
    # The base layer and what the final stage added on top of it; the build stage left nothing.
    assert 2 <= len(image.layers) <= 4
    assert meta["size_bytes"] > 50 * 1024 * 1024


def test_rootfs_holds_this_checkout_and_nothing_of_the_build(unpacked: tuple[ociarchive.Image, Path]) -> None:
    _, bundle = unpacked
    rootfs = bundle / "rootfs"
    # The installed package is exactly operator/draxr of this checkout, without the dev tooling.
    installed = {p.relative_to(rootfs / SITE): p.read_bytes() for p in (rootfs / SITE / "draxr").rglob("*.py")}
    source = {p.relative_to(ROOT / "operator"): p.read_bytes() for p in (ROOT / "operator" / "draxr").rglob("*.py")}
    assert installed.keys() == source.keys()
    assert [str(p) for p in source if installed[p] != source[p]] == []
    assert not (rootfs / SITE / "draxr_dev").exists()
    assert (rootfs / "usr/local/bin/draxr").is_file()
    assert (rootfs / "usr/local/bin/kubectl-draxr").is_file()
    for gone in ("wheels", "src", "root/.cache/pip", "usr/lib/python3.11/EXTERNALLY-MANAGED"):
        assert not (rootfs / gone).exists(), gone
    passwd = {line.split(":")[0]: line.split(":") for line in (rootfs / "etc/passwd").read_text().splitlines()}
    # (useradd --system gives the user a system group, 999 here; the image runs as USER 65532:65532,
    # numerically, and no file belongs to either id, checked below.)
    assert passwd["draxr"][2] == str(UID)
    assert passwd["draxr"][6] == "/usr/sbin/nologin"
    # Nothing belongs to the runtime user, and nothing but the sticky scratch directories is
    # writable by it: the image works read-only because it never needed to write.
    owned, writable = [], []
    for dirpath, dirnames, filenames in os.walk(rootfs):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = path.lstat()
            rel = str(path.relative_to(rootfs))
            if st.st_uid == UID or st.st_gid == GID:
                owned.append(rel)
            if not stat.S_ISLNK(st.st_mode) and st.st_mode & stat.S_IWOTH and rel not in STICKY_WORLD_WRITABLE:
                writable.append(rel)
    assert owned == []
    assert writable == []
    for rel in STICKY_WORLD_WRITABLE & {str(p.relative_to(rootfs)) for p in rootfs.glob("**/tmp")}:
        assert (rootfs / rel).lstat().st_mode & stat.S_ISVTX


def _pem_bodies(text: str) -> set[str]:
    blocks = re.findall(r"-----BEGIN CERTIFICATE-----(.*?)-----END CERTIFICATE-----", text, re.DOTALL)
    return {"".join(b.split()) for b in blocks}


def test_trusts_only_debians_certificates_not_the_build_hosts(unpacked: tuple[ociarchive.Image, Path]) -> None:
    # The build mounts the host's CA bundle (a TLS-intercepting proxy's CA among them) for pip only:
    # the image's bundle is the one update-ca-certificates made from Debian's ca-certificates.
    _, bundle = unpacked
    rootfs = bundle / "rootfs"
    trusted = _pem_bodies((rootfs / "etc/ssl/certs/ca-certificates.crt").read_text())
    debian: set[str] = set()
    for crt in (rootfs / "usr/share/ca-certificates").rglob("*.crt"):
        debian |= _pem_bodies(crt.read_text())
    assert len(trusted) > 100
    assert trusted - debian == set()


def _runc_config(image: ociarchive.Image, args: list[str]) -> dict[str, Any]:
    """What kubelet would give the Deployment's container, in runc's terms (runc spec's defaults,
    then the pod's securityContext): uid/gid 65532, read-only root, no capabilities, no new
    privileges, a tmpfs /tmp for the emptyDir, a network namespace of its own (loopback only)."""
    cfg = image.config["config"]
    return {
        "ociVersion": "1.0.2-dev",
        "process": {
            "terminal": False,
            "user": {"uid": UID, "gid": GID},
            "args": args,
            "env": cfg["Env"],
            "cwd": "/",
            "capabilities": {"bounding": [], "effective": [], "inheritable": [], "permitted": [], "ambient": []},
            "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
            "noNewPrivileges": True,
        },
        "root": {"path": "rootfs", "readonly": True},
        "hostname": "draxr-image-test",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {
                "destination": "/dev",
                "type": "tmpfs",
                "source": "tmpfs",
                "options": ["nosuid", "strictatime", "mode=755", "size=65536k"],
            },
            {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", "ro"]},
            {
                "destination": "/tmp",
                "type": "tmpfs",
                "source": "tmpfs",
                "options": ["nosuid", "nodev", "mode=1777", "size=65536k"],
            },
        ],
        "linux": {
            "namespaces": [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount")],
            "maskedPaths": ["/proc/kcore", "/proc/keys", "/sys/firmware"],
            "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"],
        },
    }


def _run(unpacked: tuple[ociarchive.Image, Path], args: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    image, bundle = unpacked
    cfg = image.config["config"]
    argv = args if args is not None else cfg["Entrypoint"] + cfg["Cmd"]
    (bundle / "config.json").write_text(json.dumps(_runc_config(image, argv)))
    state = Path(tempfile.mkdtemp(prefix="draxr-runc."))
    cid = f"draxr-image-test-{os.getpid()}"
    try:
        # `runc run` (without --keep) deletes the container when its process exits.
        return subprocess.run(
            ["runc", "--root", str(state), "run", "--bundle", str(bundle), cid],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    finally:
        subprocess.run(["runc", "--root", str(state), "delete", "--force", cid], capture_output=True, check=False)
        shutil.rmtree(state, ignore_errors=True)


def test_default_command_prints_the_version_as_uid_65532_on_a_read_only_root(
    unpacked: tuple[ociarchive.Image, Path],
) -> None:
    out = _run(unpacked)
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.fullmatch(rf"draxr {re.escape(__version__)} \(python 3\.11\.\d+\)\n", out.stdout), out.stdout


PROBE = """
import errno, importlib, json, os, pkgutil
import draxr
mods = [m.name for m in pkgutil.walk_packages(draxr.__path__, "draxr.") if m.name != "draxr.__main__"]
for m in mods:
    importlib.import_module(m)
try:
    open("/usr/local/lib/draxr-write-test", "w")
    root = "writable"
except OSError as e:
    root = errno.errorcode[e.errno]
caps = {k: v.strip() for k, v in (l.split(":", 1) for l in open("/proc/self/status")) if k.startswith("Cap")}
with open("/tmp/scratch", "w") as f:
    f.write("ok")
print(json.dumps({"uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(), "modules": len(mods),
                  "root": root, "caps": caps}))
"""


def test_every_module_imports_without_root_capabilities_or_a_writable_root(
    unpacked: tuple[ociarchive.Image, Path],
) -> None:
    # Every module of the package imports in the image (the native wheels too: cryptography, orjson,
    # google-re2, cel-expr-python, pydantic-core), as the pod's user, with nothing to write but /tmp.
    out = _run(unpacked, ["python", "-c", PROBE])
    assert out.returncode == 0, out.stdout + out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert (got["uid"], got["gid"]) == (UID, GID)
    source = [p for p in (ROOT / "operator" / "draxr").rglob("*.py") if p.name not in ("__init__.py", "__main__.py")]
    assert got["modules"] >= len(source)
    assert got["root"] == "EROFS"
    assert got["caps"]["CapEff"] == got["caps"]["CapPrm"] == got["caps"]["CapBnd"] == "0000000000000000"
