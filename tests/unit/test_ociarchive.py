"""The OCI archive reader the image tests use: layers applied in order, whiteouts and opaque
directories honoured, gzip and plain layers, sizes."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path

from draxr_dev.devcluster import ociarchive


def _tar(members: list[tuple[str, bytes | None]]) -> bytes:
    """A layer: (name, data) files, (name/, None) directories."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name.rstrip("/"))
            if data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.size, info.mode = len(data), 0o644
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _archive(path: Path, layers: list[tuple[str, bytes]], config: dict[str, object]) -> None:
    blobs: dict[str, bytes] = {}

    def put(data: bytes) -> dict[str, object]:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return {"digest": digest, "size": len(data)}

    descs = [{"mediaType": media, **put(data)} for media, data in layers]
    cfg = {"mediaType": "application/vnd.oci.image.config.v1+json", **put(json.dumps(config).encode())}
    manifest = json.dumps({"schemaVersion": 2, "config": cfg, "layers": descs}).encode()
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                **put(manifest),
                "annotations": {"org.opencontainers.image.ref.name": "x.local/a:1"},
            }
        ],
    }
    with tarfile.open(path, "w") as tar:
        files = {"oci-layout": b'{"imageLayoutVersion":"1.0.0"}', "index.json": json.dumps(index).encode()}
        files |= {f"blobs/sha256/{d.removeprefix('sha256:')}": b for d, b in blobs.items()}
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


PLAIN = "application/vnd.oci.image.layer.v1.tar"
GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"


def test_layers_apply_in_order_with_whiteouts(tmp_path: Path) -> None:
    base = _tar(
        [
            ("etc/", None),
            ("etc/keep", b"1"),
            ("etc/gone", b"2"),
            ("opaque/", None),
            ("opaque/old", b"3"),
            ("wheels/", None),
            ("wheels/a.whl", b"w"),
        ]
    )
    top = _tar(
        [
            ("etc/.wh.gone", b""),
            ("etc/keep", b"changed"),
            ("opaque/", None),
            ("opaque/.wh..wh..opq", b""),
            ("opaque/new", b"4"),
            (".wh.wheels", b""),
        ]
    )
    archive = tmp_path / "img.tar"
    top_gz = gzip.compress(top)
    _archive(archive, [(PLAIN, base), (GZIP, top_gz)], {"config": {"User": "65532:65532"}})
    image = ociarchive.unpack(archive, tmp_path / "root")
    root = tmp_path / "root"
    assert image.config["config"]["User"] == "65532:65532"
    assert image.descriptor["annotations"]["org.opencontainers.image.ref.name"] == "x.local/a:1"
    assert (root / "etc/keep").read_bytes() == b"changed"
    assert not (root / "etc/gone").exists()
    assert sorted(p.name for p in (root / "opaque").iterdir()) == ["new"]
    assert not (root / "wheels").exists()
    assert not list(root.rglob(".wh.*"))
    got = ociarchive.sizes(archive)
    assert got["layers"] == 2
    assert got["layer_unpacked_bytes"] == [len(base), len(top)]
    assert got["unpacked_bytes"] == len(base) + len(top)
    assert got["compressed_bytes"] == len(base) + len(top_gz) + image.manifest["config"]["size"]
