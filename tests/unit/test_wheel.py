"""The runtime wheel (what the image installs) holds the operator and nothing of the dev tooling, and
the operator's code imports nothing from ``draxr_dev``."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "operator" / "draxr"
DEV = ROOT / "operator" / "draxr_dev"


@pytest.fixture(scope="module")
def wheel_files(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    # Built from a copy of what the Dockerfile copies: setuptools writes build/ into the source.
    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("wheel")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "operator", src / "operator", ignore=shutil.ignore_patterns("*.egg-info", "__pycache__"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), str(src)],
        check=True,
        timeout=300,
        capture_output=True,
    )
    (wheel,) = out.glob("draxr-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        return zf.namelist()


def test_wheel_holds_every_runtime_module_and_no_dev_tooling(wheel_files: list[str]) -> None:
    packaged = {name for name in wheel_files if name.endswith(".py")}
    runtime = {str(p.relative_to(ROOT / "operator")) for p in RUNTIME.rglob("*.py")}
    assert packaged == runtime
    assert not [name for name in wheel_files if name.startswith("draxr_dev") or "devcluster" in name]
    tops = {name.split("/")[0] for name in wheel_files}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"draxr"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_runtime_imports_nothing_from_the_dev_tooling() -> None:
    offenders = {
        str(path.relative_to(ROOT)): sorted(m for m in _imports(path) if m.split(".")[0] == "draxr_dev")
        for path in RUNTIME.rglob("*.py")
    }
    assert {k: v for k, v in offenders.items() if v} == {}
    # The dev tooling does use the runtime (one direction): the check above can see an import.
    assert "draxr.kube" in _imports(DEV / "devcluster" / "fakedriver.py")
