#!/usr/bin/env bash
# The test command: sets up .venv, builds (or reuses) the control-plane binaries, runs ruff, mypy and pytest
# (unit and integration against a real etcd + kube-apiserver + kube-controller-manager + kwok).
# Extra arguments go to pytest, e.g. hack/test.sh tests/unit -x
set -euo pipefail
cd "$(dirname "$0")/.."
bash hack/setup.sh
DRAXR_BIN_DIR=$(bash hack/build-control-plane.sh | tail -n 1)
export DRAXR_BIN_DIR
# Kubernetes 1.35 as well: adoption mode's tests need a kube-scheduler without DRAExtendedResource.
K8S_VERSION=v1.35.4 bash hack/build-control-plane.sh >/dev/null
echo "[test] control-plane binaries: $DRAXR_BIN_DIR" >&2
.venv/bin/ruff check operator tests bench hack
.venv/bin/mypy
set +e
.venv/bin/python -m pytest "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "[test] pytest collected no tests: that is a failure" >&2
  exit 1
fi
exit "$rc"
