"""Read an OCI image archive (an image layout in a tar, as ``buildah push oci-archive:`` writes it):
its index, manifest and config, and its layers applied in order onto a directory (OCI whiteouts
honoured), so that tests can look into draxr's image and run it with runc, without a registry or a
container engine. Standard library only, so that hack/build-image.sh runs it with any python3:

    python3 ociarchive.py sizes ARCHIVE   # {"layers": N, "unpacked_bytes": N, "compressed_bytes": N}
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

INDEX_MEDIA_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)
WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"


@dataclass(frozen=True)
class Image:
    index: dict[str, Any]
    descriptor: dict[str, Any]  # the manifest's descriptor in the index (with its annotations)
    manifest: dict[str, Any]
    config: dict[str, Any]

    @property
    def layers(self) -> list[dict[str, Any]]:
        return cast(list[dict[str, Any]], self.manifest["layers"])


def _blob_name(digest: str) -> str:
    algo, _, hexdigest = digest.partition(":")
    return f"blobs/{algo}/{hexdigest}"


def _json_member(tar: tarfile.TarFile, name: str) -> dict[str, Any]:
    f = tar.extractfile(name)
    if f is None:
        raise ValueError(f"{name} is not a file in the archive")
    return cast(dict[str, Any], json.load(f))


def read(archive: Path) -> Image:
    """The archive's one image (the first manifest of its index, descending into nested indexes)."""
    with tarfile.open(archive) as tar:
        index = _json_member(tar, "index.json")
        descriptor = index["manifests"][0]
        manifest = _json_member(tar, _blob_name(descriptor["digest"]))
        while manifest.get("mediaType") in INDEX_MEDIA_TYPES:
            descriptor = manifest["manifests"][0]
            manifest = _json_member(tar, _blob_name(descriptor["digest"]))
        config = _json_member(tar, _blob_name(manifest["config"]["digest"]))
    return Image(index=index, descriptor=descriptor, manifest=manifest, config=config)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def unpack(archive: Path, dest: Path) -> Image:
    """Apply the image's layers in order onto ``dest`` (owners, modes and special bits kept: run as
    root for a faithful copy). Returns the image read by ``read``."""
    image = read(archive)
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as outer:
        for layer in image.layers:
            media = layer["mediaType"]
            if media.endswith("+zstd"):
                raise ValueError(f"zstd layers are not supported: {layer['digest']}")
            blob = outer.extractfile(_blob_name(layer["digest"]))
            if blob is None:
                raise ValueError(f"layer {layer['digest']} missing from {archive}")
            with tarfile.open(fileobj=blob, mode="r|gz" if media.endswith("gzip") else "r|") as tar:
                for member in tar:
                    name = os.path.normpath(member.name.lstrip("/"))
                    if name.startswith(".."):
                        raise ValueError(f"layer member outside the root: {member.name}")
                    parent, base = os.path.split(name)
                    if base == OPAQUE:
                        for child in (dest / parent).iterdir() if (dest / parent).is_dir() else ():
                            _remove(child)
                    elif base.startswith(WHITEOUT):
                        _remove(dest / parent / base[len(WHITEOUT) :])
                    else:
                        if not member.isdir() and (dest / name).is_dir() and not (dest / name).is_symlink():
                            shutil.rmtree(dest / name)
                        tar.extract(member, dest, numeric_owner=True, filter="fully_trusted")
    return image


def sizes(archive: Path) -> dict[str, Any]:
    """The image's layer count, its size unpacked (the layers' tars, uncompressed, added up: what
    ``docker images`` calls SIZE), as pushed (the layer blobs and the config, compressed), and each
    layer's unpacked size."""
    image = read(archive)
    per_layer: list[int] = []
    with tarfile.open(archive) as outer:
        for layer in image.layers:
            blob = outer.extractfile(_blob_name(layer["digest"]))
            if blob is None:
                raise ValueError(f"layer {layer['digest']} missing from {archive}")
            stream = gzip.GzipFile(fileobj=blob) if layer["mediaType"].endswith("gzip") else blob
            per_layer.append(0)
            while chunk := stream.read(1 << 20):
                per_layer[-1] += len(chunk)
    compressed = sum(int(layer["size"]) for layer in image.layers) + int(image.manifest["config"]["size"])
    return {
        "layers": len(image.layers),
        "unpacked_bytes": sum(per_layer),
        "compressed_bytes": compressed,
        "layer_unpacked_bytes": per_layer,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=["sizes"])
    p.add_argument("archive", type=Path)
    args = p.parse_args(argv)
    print(json.dumps(sizes(args.archive)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
