#!/usr/bin/env bash
# Builds the differential-test harness tests/allocator_harness (upstream's DRA structured allocator,
# k8s.io/dynamic-resource-allocation as pinned in its go.mod) into
# ~/.cache/draxr/bin/allocator-harness-<hash>_<go version>/allocator-harness and publishes it
# atomically. <hash> is a short sha256 of go.mod + go.sum + main.go, so any change rebuilds.
# Returns at once when the cache is complete. Prints the binary path on the last line of stdout;
# progress goes to stderr.
# Settings: DRAXR_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/draxr).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SRC="$ROOT/tests/allocator_harness"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-modcacherw
CACHE=${DRAXR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/draxr}

log() { echo "[build-allocator-harness] $*" >&2; }

command -v go >/dev/null || { log "go is not installed"; exit 1; }
HASH=$(cat "$SRC/go.mod" "$SRC/go.sum" "$SRC/main.go" | sha256sum | cut -c1-12)
KEY="allocator-harness-${HASH}_$(go env GOVERSION)_$(go env GOOS)-$(go env GOARCH)"
OUT="$CACHE/bin/$KEY"
BIN="$OUT/allocator-harness"

if [ -f "$OUT/.complete" ]; then
  echo "$BIN"
  exit 0
fi

mkdir -p "$CACHE/bin"
exec 9>"$CACHE/.allocator-harness.lock"
log "waiting for the build lock $CACHE/.allocator-harness.lock"
flock 9
if [ -f "$OUT/.complete" ]; then echo "$BIN"; exit 0; fi

log "building $SRC -> $BIN (a cold build downloads modules and takes 1-3 minutes on 2 cores)"
start=$(date +%s)
rm -rf "$OUT.tmp"
mkdir -p "$OUT.tmp"
cd "$SRC"
# -mod=readonly: go.mod and go.sum are committed and must already be complete.
nice go build -mod=readonly -buildvcs=false -trimpath -ldflags "-s -w" -o "$OUT.tmp/allocator-harness" . >&2
"$OUT.tmp/allocator-harness" -print-default-features >&2
echo "$(( $(date +%s) - start ))" > "$OUT.tmp/.build-seconds"
touch "$OUT.tmp/.complete"
rm -rf "$OUT"
mv "$OUT.tmp" "$OUT"
log "published $OUT after $(( $(date +%s) - start ))s"
echo "$BIN"
