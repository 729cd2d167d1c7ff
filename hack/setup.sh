#!/usr/bin/env bash
# Creates .venv with the pinned dependencies (hack/constraints.txt) and installs draxr in editable mode.
# Idempotent: a warm run only checks that the pins are satisfied.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv with $($PY --version)" >&2
  "$PY" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
fi
stamp=.venv/.draxr-deps
want=$(cat pyproject.toml hack/constraints.txt | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "[setup] installing pinned dependencies" >&2
  .venv/bin/python -m pip install -q -c hack/constraints.txt -e '.[dev]'
  echo "$want" > "$stamp"
fi
# draxr_dev (dev cluster, case generators) is not part of the wheel; the venv finds it in operator/.
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$PWD/operator" > "$site/draxr-dev.pth"
