#!/usr/bin/env bash
# Builds one of the differential-test harnesses, tests/<name with - as _>, into
# ~/.cache/draxr/bin/<name>-<hash>_<go version>_<os>-<arch>/<name> and publishes it atomically:
#   allocator-harness   tests/allocator_harness: upstream's DRA structured allocator
#                       (k8s.io/dynamic-resource-allocation as pinned in its go.mod)
#   scheduler-harness   tests/scheduler_harness: kube-scheduler's filter and score plugins
#                       (k8s.io/kubernetes as pinned in its go.mod, default profile)
# <hash> is a short sha256 of the harness's go.mod, go.sum and *.go files, so any change
# rebuilds. Returns at once when the cache is complete. Prints the binary path on the last line
# of stdout; progress (and what the harness reports about itself: feature gates, profile) goes
# to stderr.
# Usage: hack/build-harness.sh <name>
# Settings: DRAXR_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/draxr).
set -euo pipefail

NAME=${1:?usage: build-harness.sh <allocator-harness|scheduler-harness>}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SRC="$ROOT/tests/${NAME//-/_}"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-modcacherw
CACHE=${DRAXR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/draxr}

log() { echo "[build-$NAME] $*" >&2; }

case "$NAME" in
  allocator-harness) REPORT_FLAGS=(-print-default-features); EXPECT="1-3 minutes" ;;
  scheduler-harness) REPORT_FLAGS=(-print-default-features -print-profile); EXPECT="4-8 minutes" ;;
  *) log "unknown harness $NAME"; exit 2 ;;
esac
[ -f "$SRC/go.mod" ] || { log "$SRC/go.mod not found"; exit 2; }
command -v go >/dev/null || { log "go is not installed"; exit 1; }
# go.mod, go.sum, then the Go files in name order (for the allocator harness: the same bytes as
# before this script was shared, so its cache key did not change).
HASH=$(cd "$SRC" && cat go.mod go.sum $(LC_ALL=C ls -- *.go) | sha256sum | cut -c1-12)
KEY="${NAME}-${HASH}_$(go env GOVERSION)_$(go env GOOS)-$(go env GOARCH)"
OUT="$CACHE/bin/$KEY"
BIN="$OUT/$NAME"

if [ -f "$OUT/.complete" ]; then
  echo "$BIN"
  exit 0
fi

mkdir -p "$CACHE/bin"
exec 9>"$CACHE/.$NAME.lock"
log "waiting for the build lock $CACHE/.$NAME.lock"
flock 9
if [ -f "$OUT/.complete" ]; then echo "$BIN"; exit 0; fi

log "building $SRC -> $BIN (a cold build downloads modules and takes $EXPECT on 2 cores)"
start=$(date +%s)
rm -rf "$OUT.tmp"
mkdir -p "$OUT.tmp"
cd "$SRC"
# -mod=readonly: go.mod and go.sum are committed and must already be complete.
nice go build -mod=readonly -buildvcs=false -trimpath -ldflags "-s -w" -o "$OUT.tmp/$NAME" . >&2
for flag in "${REPORT_FLAGS[@]}"; do
  "$OUT.tmp/$NAME" "$flag" >&2
done
echo "$(( $(date +%s) - start ))" > "$OUT.tmp/.build-seconds"
touch "$OUT.tmp/.complete"
rm -rf "$OUT"
mv "$OUT.tmp" "$OUT"
log "published $OUT after $(( $(date +%s) - start ))s"
echo "$BIN"
