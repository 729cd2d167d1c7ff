#!/usr/bin/env bash
# The builds only the suite's last modules need (tests/late_builds.py), one after the other, in the
# order those modules run: helm (test_helm, test_docs; the real-node Helm install), Kueue
# (test_kueue), Kubernetes 1.35 (test_adoption, and the version matrix), 1.34 and 1.36 (the version
# matrix, test_versions). hack/test.sh starts it in the background at the lowest CPU priority while
# pytest runs beside it. Each build returns at once when cached.
# Usage: build-late.sh WHAT... (helm, kueue, k8s-1.35, versions); DONE=FILE: each WHAT's status is
# written into FILE.WHAT when it ends, and the chain's into FILE at the end (the tests' signal that
# the builds they need have ended: tests/late_builds.py).
set -uo pipefail
cd "$(dirname "$0")/.."
rc=0
step() {  # step NAME COMMAND...: runs it, its last stdout line (the built path) on ours
  local out
  echo "[build-late] $1: start $(date -u +%T)" >&2
  if out=$("${@:2}" | tail -n 1); then
    echo "[build-late] $1: $out ($(date -u +%T))" >&2
  else
    echo "[build-late] $1: failed" >&2
    rc=1
  fi
}
for what in "$@"; do
  case "$what" in
    helm) step helm bash hack/build-helm.sh ;;
    kueue) step kueue bash hack/build-kueue.sh ;;
    k8s-1.35) step k8s-1.35 env K8S_VERSION=v1.35.4 bash hack/build-control-plane.sh ;;
    versions)
      # The version matrix: each with only the binaries its cluster runs (1.35 whole, as above; 1.37
      # is the default).
      step k8s-1.35 env K8S_VERSION=v1.35.4 bash hack/build-control-plane.sh
      step k8s-1.34 env K8S_VERSION=v1.34.4 K8S_BINARIES="kube-apiserver kube-controller-manager kube-scheduler" \
        bash hack/build-control-plane.sh
      step k8s-1.36 env K8S_VERSION=v1.36.3 K8S_BINARIES="kube-apiserver kube-controller-manager" \
        bash hack/build-control-plane.sh ;;
    *) echo "[build-late] unknown build $what" >&2; rc=1 ;;
  esac
  if [ -n "${DONE:-}" ]; then echo "$rc" > "$DONE.$what"; fi
done
if [ -n "${DONE:-}" ]; then echo "$rc" > "$DONE"; fi
exit "$rc"
