"""The offline OCI image builder of the real node: every digest and size in the layout is right, the
layer holds what the image needs, and the output is deterministic."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from draxr_dev.devcluster import ociimage

APPLETS = ["busybox", "cat", "echo", "env", "ls", "sh", "sleep", "sort"]


def _fake_busybox(tmp_path: Path) -> Path:
    binary = tmp_path / "busybox"
    binary.write_bytes(b"\x7fELF not really busybox")
    return binary


def _read_layout(tar_path: Path) -> dict[str, bytes]:
    with tarfile.open(tar_path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def _blob(files: dict[str, bytes], digest: str) -> bytes:
    data = files["blobs/sha256/" + digest.removeprefix("sha256:")]
    assert "sha256:" + hashlib.sha256(data).hexdigest() == digest
    return data


def test_layout_digests_sizes_and_layer(tmp_path: Path) -> None:
    out = tmp_path / "busybox.tar"
    entries = ociimage.busybox_entries(_fake_busybox(tmp_path), APPLETS)
    manifest_digest = ociimage.write_image(out, "draxr.local/busybox:1", entries, {"Cmd": ["sh"]})
    files = _read_layout(out)

    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    for name, data in files.items():  # every blob is named by its digest
        if name.startswith("blobs/sha256/"):
            assert hashlib.sha256(data).hexdigest() == name.rsplit("/", 1)[1]
    (desc,) = json.loads(files["index.json"])["manifests"]
    assert desc["digest"] == manifest_digest
    assert desc["annotations"][ociimage.IMAGE_NAME_ANNOTATION] == "draxr.local/busybox:1"
    assert desc["annotations"][ociimage.REF_NAME_ANNOTATION] == "1"
    manifest_blob = _blob(files, desc["digest"])
    assert desc["size"] == len(manifest_blob)
    manifest = json.loads(manifest_blob)
    assert manifest["mediaType"] == desc["mediaType"] == ociimage.MANIFEST_MEDIA_TYPE
    config_blob = _blob(files, manifest["config"]["digest"])
    assert manifest["config"]["size"] == len(config_blob)
    (layer_desc,) = manifest["layers"]
    layer = _blob(files, layer_desc["digest"])
    assert layer_desc["size"] == len(layer)
    config = json.loads(config_blob)
    assert config["rootfs"] == {"type": "layers", "diff_ids": [layer_desc["digest"]]}  # uncompressed layer
    assert config["config"] == {"Cmd": ["sh"]}
    assert len(files) == 5  # oci-layout, index.json, three blobs

    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert members["bin/busybox"].isfile()
    assert members["bin/busybox"].mode == 0o755
    for applet in ("sh", "env", "cat", "ls", "sleep", "echo"):
        assert members[f"bin/{applet}"].issym()
        assert members[f"bin/{applet}"].linkname == "busybox"
    assert members["tmp"].isdir()
    assert members["tmp"].mode == 0o1777
    assert all(m.mtime == 0 and m.uid == 0 for m in members.values())


def test_output_is_deterministic(tmp_path: Path) -> None:
    binary = _fake_busybox(tmp_path)
    a = ociimage.write_image(tmp_path / "a.tar", "x.local/a:1", ociimage.busybox_entries(binary, APPLETS), {})
    b = ociimage.write_image(tmp_path / "b.tar", "x.local/a:1", ociimage.busybox_entries(binary, APPLETS), {})
    assert a == b
    assert (tmp_path / "a.tar").read_bytes() == (tmp_path / "b.tar").read_bytes()


def test_missing_applets_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="lacks applets"):
        ociimage.busybox_entries(_fake_busybox(tmp_path), ["sh", "cat"])


def test_script_runs_with_a_bare_python(tmp_path: Path) -> None:
    """hack/build-node.sh runs the module as a script with any python3 (no venv, no draxr)."""
    pause = tmp_path / "pause"
    pause.write_bytes(b"pause")
    out = tmp_path / "pause.tar"
    script = Path(ociimage.__file__)
    res = subprocess.run(
        [sys.executable, "-I", str(script), "pause", str(out), "--binary", str(pause)],
        capture_output=True,
        text=True,
        check=True,
    )
    files = _read_layout(out)
    (desc,) = json.loads(files["index.json"])["manifests"]
    assert res.stdout.split() == [str(out), desc["digest"]]
    config = json.loads(_blob(files, json.loads(_blob(files, desc["digest"]))["config"]["digest"]))
    assert config["config"] == {"Entrypoint": ["/pause"]}
