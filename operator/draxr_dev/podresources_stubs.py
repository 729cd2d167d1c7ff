"""Generates the Python gRPC stubs of kubelet's pod-resources API (``draxr.podresources``) from the
``k8s.io/kubelet`` module's own ``api.proto``, fetched from the Go module proxy: no hand-copied proto.
The generated files are in git, so that a wheel built from a clean clone (``pip wheel .``) has them;
``tests/unit/test_node_agent.py`` checks that a regeneration gives the same bytes.

    python operator/draxr_dev/podresources_stubs.py           (after changing VERSION or grpcio-tools' pin)
    python operator/draxr_dev/podresources_stubs.py --check   (exit 1 when the files in git are not fresh)

Steps: the module zip ``k8s.io/kubelet@v0.37.2`` from ``$GOPROXY`` (its first http(s) entry, else
https://proxy.golang.org), cached under ``~/.cache/draxr/proto/``; its
``pkg/apis/podresources/v1/api.proto`` checked against the sha256 pinned here; then grpcio-tools'
protoc (a dev dependency, pinned in hack/constraints.txt: its version is written into the stubs) writes
``api_pb2.py``, ``api_pb2.pyi`` and ``api_pb2_grpc.py`` into ``operator/draxr/podresources/``.

Standard library and grpc_tools only.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import shutil
import sys
import tempfile
import urllib.request
import zipfile
from pathlib import Path

MODULE = "k8s.io/kubelet"
VERSION = "v0.37.2"  # the kubelet release the agent is built against (the control plane's, 1.37.2)
PROTO = "pkg/apis/podresources/v1/api.proto"
PROTO_SHA256 = "b261f07b951c6ae807c90a3137475733a105c085d3fee62ac62199e0d986c823"
DEFAULT_PROXY = "https://proxy.golang.org"
PACKAGE = ("draxr", "podresources")  # the proto is compiled as draxr/podresources/api.proto
OUT_ROOT = Path(__file__).resolve().parents[1]  # operator/
OUT_DIR = OUT_ROOT.joinpath(*PACKAGE)
GENERATED = ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py")


def _log(msg: str) -> None:
    print(f"[podresources-stubs] {msg}", file=sys.stderr)


def proxy() -> str:
    """The first http(s) entry of GOPROXY (as the go command reads it), else the public proxy."""
    for entry in os.environ.get("GOPROXY", "").replace("|", ",").split(","):
        if entry.startswith(("https://", "http://")):
            return entry.rstrip("/")
    return DEFAULT_PROXY


def _cache_dir() -> Path:
    base = os.environ.get("DRAXR_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "draxr"
    )
    return Path(base) / "proto" / f"{MODULE.replace('/', '_')}@{VERSION}"


def fetch_proto() -> bytes:
    """api.proto of k8s.io/kubelet@VERSION, from the cache or the module proxy, digest checked."""
    cached = _cache_dir() / "api.proto"
    if cached.is_file() and hashlib.sha256(cached.read_bytes()).hexdigest() == PROTO_SHA256:
        return cached.read_bytes()
    url = f"{proxy()}/{MODULE}/@v/{VERSION}.zip"
    _log(f"downloading {url}")
    with urllib.request.urlopen(url, timeout=120) as resp:
        data = resp.read()
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        proto = zf.read(f"{MODULE}@{VERSION}/{PROTO}")
    digest = hashlib.sha256(proto).hexdigest()
    if digest != PROTO_SHA256:
        raise SystemExit(f"{MODULE}@{VERSION}/{PROTO}: sha256 {digest}, expected {PROTO_SHA256}")
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_suffix(".tmp")
    tmp.write_bytes(proto)
    tmp.replace(cached)
    return proto


def generate(out_dir: Path = OUT_DIR) -> None:
    """Writes the stubs into ``out_dir``."""
    from grpc_tools import protoc  # a dev dependency only

    proto = fetch_proto()
    with tempfile.TemporaryDirectory(prefix="draxr-proto-") as tmp:
        src = Path(tmp, "src")
        dst = Path(tmp, "out")
        rel = Path(*PACKAGE, "api.proto")
        (src / rel).parent.mkdir(parents=True)
        (src / rel).write_bytes(proto)
        dst.mkdir()
        include = Path(protoc.__file__).parent / "_proto"  # the well-known types grpc_tools ships
        args = [
            "protoc",
            f"-I{src}",
            f"-I{include}",
            f"--python_out={dst}",
            f"--pyi_out={dst}",
            f"--grpc_python_out={dst}",
            str(rel),
        ]
        rc = protoc.main(args)
        if rc != 0:
            raise SystemExit(f"protoc failed ({rc}): {' '.join(args)}")
        out_dir.mkdir(parents=True, exist_ok=True)
        for name in GENERATED:
            shutil.copyfile(dst.joinpath(*PACKAGE, name), out_dir / name)
    _log(f"wrote {', '.join(GENERATED)} in {out_dir} from {MODULE}@{VERSION}/{PROTO}")


def stale(out_dir: Path = OUT_DIR) -> list[str]:
    """The files of ``out_dir`` that a regeneration would change (missing ones included)."""
    with tempfile.TemporaryDirectory(prefix="draxr-stubs-") as tmp:
        generate(Path(tmp))
        return [
            name
            for name in GENERATED
            if not (out_dir / name).is_file() or (out_dir / name).read_bytes() != Path(tmp, name).read_bytes()
        ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 when the stubs are not fresh")
    p.add_argument("--out", type=Path, default=OUT_DIR, help="the package directory (default: draxr/podresources)")
    args = p.parse_args(argv)
    if args.check:
        changed = stale(args.out)
        if changed:
            _log(f"not fresh in {args.out}: {', '.join(changed)} (run {Path(__file__).name} without --check)")
            return 1
        return 0
    generate(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
