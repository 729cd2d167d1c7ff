#!/usr/bin/env bash
# Builds Kueue's manager (cmd/kueue) from the Go module proxy into ~/.cache/draxr/bin/<key>/kueue and
# publishes it atomically, like hack/build-control-plane.sh and hack/build-helm.sh. Next to it go the
# module's own manifests the tests install (config/components/crd: the CRDs and their conversion
# patches; config/components/webhook: the webhook configurations; config/components/manager: the
# default Configuration), copied from the module zip, never by hand. Returns at once when the cache
# is complete. Prints the directory on the last line of stdout; progress goes to stderr.
# tests/integration/test_kueue.py runs the manager as a local process (draxr_dev.devcluster.kueue).
# Settings: KUEUE_VERSION (v0.17.0), DRAXR_CACHE.
set -euo pipefail

KUEUE_VERSION=${KUEUE_VERSION:-v0.17.0}
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-modcacherw
CACHE=${DRAXR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/draxr}

log() { echo "[build-kueue] $*" >&2; }

command -v go >/dev/null || { log "go is not installed"; exit 1; }
KEY="kueue-${KUEUE_VERSION}_$(go env GOVERSION)_$(go env GOOS)-$(go env GOARCH)"
OUT="$CACHE/bin/$KEY"

if [ -f "$OUT/.complete" ]; then
  echo "$OUT"
  exit 0
fi

mkdir -p "$CACHE/bin"
exec 9>"$CACHE/.kueue.lock"
log "waiting for the build lock $CACHE/.kueue.lock"
flock 9
if [ -f "$OUT/.complete" ]; then echo "$OUT"; exit 0; fi

log "building Kueue ${KUEUE_VERSION} (a cold build downloads modules and takes several minutes on 2 cores; later runs reuse the cache)"
start=$(date +%s)
rm -rf "$OUT.tmp"
mkdir -p "$OUT.tmp"
read -r MOD_DIR MOD_GOMOD < <(cd "$(mktemp -d)" && go mod download -json "sigs.k8s.io/kueue@${KUEUE_VERSION}" \
  | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["Dir"], d["GoMod"])')
# `go install pkg@version` builds with the module's own go.mod and go.sum (the versions Kueue's
# release was built and tested with); it refuses a module with replace directives.
if grep -qE '^[[:space:]]*replace' "$MOD_GOMOD"; then
  log "sigs.k8s.io/kueue@${KUEUE_VERSION} has replace directives: go install pkg@version cannot build it"; exit 1
fi
# The version stamp Kueue's Makefile sets (pkg/version, shown in the manager's first log line).
LDF="-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=${KUEUE_VERSION}"
GOBIN="$OUT.tmp" nice -n 10 go install -trimpath -ldflags "$LDF" "sigs.k8s.io/kueue/cmd/kueue@${KUEUE_VERSION}" >&2
test -x "$OUT.tmp/kueue" || { log "missing kueue"; exit 1; }
# The manifests, from the same module zip the binary was built from.
for part in crd webhook manager; do
  mkdir -p "$OUT.tmp/config/components/$part"
  cp -R "$MOD_DIR/config/components/$part/." "$OUT.tmp/config/components/$part/"
done
chmod -R u+w "$OUT.tmp"
test -f "$OUT.tmp/config/components/webhook/manifests.yaml" || { log "missing the webhook manifests"; exit 1; }
ls "$OUT.tmp"/config/components/crd/bases/kueue.x-k8s.io_*.yaml >/dev/null
echo "${KUEUE_VERSION}" > "$OUT.tmp/VERSION"
echo "$(( $(date +%s) - start ))" > "$OUT.tmp/.build-seconds"
touch "$OUT.tmp/.complete"
rm -rf "$OUT"
mv "$OUT.tmp" "$OUT"
log "published $OUT after $(( $(date +%s) - start ))s"
echo "$OUT"
