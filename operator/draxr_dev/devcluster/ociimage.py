"""Write OCI image layouts as tar files, offline: the real node's images without a registry.

An image is one uncompressed layer (a tar of ``Entry``), its config and its manifest, stored in an
OCI image layout (``oci-layout``, ``index.json``, ``blobs/sha256/<digest>``) that ``ctr -n k8s.io
images import`` accepts. Everything is deterministic (mtime 0, root-owned, sorted): the same inputs
give the same digests. Standard library only, so ``hack/build-node.sh`` runs it with any python3:

    python3 ociimage.py busybox OUT.tar [--binary /bin/busybox] [--name draxr.local/busybox:1]
    python3 ociimage.py pause OUT.tar --binary PAUSE [--name draxr.local/pause:1]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import subprocess
import sys
import tarfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
INDEX_MEDIA_TYPE = "application/vnd.oci.image.index.v1+json"
CONFIG_MEDIA_TYPE = "application/vnd.oci.image.config.v1+json"
LAYER_MEDIA_TYPE = "application/vnd.oci.image.layer.v1.tar"
IMAGE_NAME_ANNOTATION = "io.containerd.image.name"
REF_NAME_ANNOTATION = "org.opencontainers.image.ref.name"

BUSYBOX_IMAGE = "draxr.local/busybox:1"
PAUSE_IMAGE = "draxr.local/pause:1"
# What the tests run at least; the image links every applet `busybox --list` names.
REQUIRED_APPLETS = ("sh", "env", "cat", "ls", "sleep", "echo", "sort")
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class Entry:
    """One member of a layer: ``kind`` is "dir", "file" (``data``) or "symlink" (``target``)."""

    path: str
    kind: str
    mode: int = 0o755
    data: bytes = b""
    target: str = ""


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _info(name: str, type_: bytes, mode: int, size: int = 0, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = type_
    info.mode = mode
    info.size = size
    info.linkname = linkname
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def layer_tar(entries: Iterable[Entry]) -> bytes:
    """A deterministic tar of ``entries``, parents before children."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for e in sorted(entries, key=lambda e: e.path):
            name = e.path.strip("/")
            if e.kind == "dir":
                tar.addfile(_info(name, tarfile.DIRTYPE, e.mode))
            elif e.kind == "file":
                tar.addfile(_info(name, tarfile.REGTYPE, e.mode, len(e.data)), io.BytesIO(e.data))
            elif e.kind == "symlink":
                tar.addfile(_info(name, tarfile.SYMTYPE, 0o777, linkname=e.target))
            else:
                raise ValueError(f"unknown entry kind {e.kind!r} for {e.path}")
    return buf.getvalue()


def _json(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def image_layout(name: str, entries: Iterable[Entry], config: dict[str, Any]) -> dict[str, bytes]:
    """The files of an OCI image layout (path -> content) holding one image ``name`` (a full
    reference such as ``draxr.local/busybox:1``) of one layer. ``config`` is the image config's
    ``config`` part (Entrypoint, Cmd, Env, ...)."""
    layer = layer_tar(entries)
    layer_digest = sha256(layer)
    config_blob = _json(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": config,
            "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
            "history": [{"created_by": "draxr_dev.devcluster.ociimage"}],
        }
    )
    manifest = _json(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST_MEDIA_TYPE,
            "config": {"mediaType": CONFIG_MEDIA_TYPE, "digest": sha256(config_blob), "size": len(config_blob)},
            "layers": [{"mediaType": LAYER_MEDIA_TYPE, "digest": layer_digest, "size": len(layer)}],
        }
    )
    tag = name.rsplit(":", 1)[1] if ":" in name.rsplit("/", 1)[-1] else "latest"
    index = _json(
        {
            "schemaVersion": 2,
            "mediaType": INDEX_MEDIA_TYPE,
            "manifests": [
                {
                    "mediaType": MANIFEST_MEDIA_TYPE,
                    "digest": sha256(manifest),
                    "size": len(manifest),
                    "platform": {"architecture": "amd64", "os": "linux"},
                    "annotations": {IMAGE_NAME_ANNOTATION: name, REF_NAME_ANNOTATION: tag},
                }
            ],
        }
    )
    files = {"oci-layout": _json({"imageLayoutVersion": "1.0.0"}), "index.json": index}
    for blob in (layer, config_blob, manifest):
        files["blobs/sha256/" + sha256(blob).removeprefix("sha256:")] = blob
    return files


def write_image(out: Path, name: str, entries: Iterable[Entry], config: dict[str, Any]) -> str:
    """Write the layout as a tar to ``out`` (atomically); returns the manifest's digest."""
    files = image_layout(name, entries, config)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("blobs", "blobs/sha256"):
            tar.addfile(_info(d, tarfile.DIRTYPE, 0o755))
        for path in sorted(files):
            tar.addfile(_info(path, tarfile.REGTYPE, 0o644, len(files[path])), io.BytesIO(files[path]))
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_bytes(buf.getvalue())
    tmp.replace(out)
    index = json.loads(files["index.json"])
    return str(index["manifests"][0]["digest"])


def _base_dirs() -> list[Entry]:
    dirs = ["bin", "dev", "etc", "proc", "sys", "usr", "usr/bin", "var", "root"]
    return [Entry(d, "dir") for d in dirs] + [Entry("tmp", "dir", mode=0o1777)]


def busybox_applets(binary: Path) -> list[str]:
    out = subprocess.run([str(binary), "--list"], check=True, capture_output=True, text=True).stdout
    return sorted({a.strip() for a in out.split() if a.strip() and "/" not in a})


def busybox_entries(binary: Path, applets: Sequence[str] | None = None) -> list[Entry]:
    """``/bin/busybox`` (a static binary) and ``/bin/<applet>`` symlinks to it."""
    names = list(applets) if applets is not None else busybox_applets(binary)
    missing = [a for a in REQUIRED_APPLETS if a not in names]
    if missing:
        raise ValueError(f"{binary} lacks applets {missing}")
    entries = [*_base_dirs(), Entry("bin/busybox", "file", data=binary.read_bytes())]
    entries += [Entry(f"bin/{a}", "symlink", target="busybox") for a in names if a != "busybox"]
    entries += [
        Entry("etc/passwd", "file", mode=0o644, data=b"root:x:0:0:root:/root:/bin/sh\n"),
        Entry("etc/group", "file", mode=0o644, data=b"root:x:0:\n"),
    ]
    return entries


def pause_entries(binary: Path) -> list[Entry]:
    return [*_base_dirs(), Entry("pause", "file", data=binary.read_bytes())]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("image", choices=["busybox", "pause"])
    p.add_argument("out", type=Path)
    p.add_argument("--binary", type=Path, help="the static binary (busybox: default /bin/busybox)")
    p.add_argument("--name", help="image reference (default draxr.local/<image>:1)")
    args = p.parse_args(argv)
    if args.image == "busybox":
        binary = args.binary or Path("/bin/busybox")
        digest = write_image(
            args.out, args.name or BUSYBOX_IMAGE, busybox_entries(binary), {"Env": [PATH_ENV], "Cmd": ["sh"]}
        )
    else:
        if args.binary is None:
            p.error("pause needs --binary")
        digest = write_image(args.out, args.name or PAUSE_IMAGE, pause_entries(args.binary), {"Entrypoint": ["/pause"]})
    print(f"{args.out} {digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
