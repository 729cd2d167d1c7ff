#!/usr/bin/env bash
# Builds promtool (cmd/promtool of github.com/prometheus/prometheus only) from the Go module proxy
# into ~/.cache/draxr/bin/<key>/promtool and publishes it atomically, like hack/build-helm.sh.
# Returns at once when the cache is complete. Prints the binary's path on the last line of stdout;
# progress goes to stderr. tests/unit/test_monitoring.py runs `promtool test rules` and
# `promtool check rules` on manifests/components/monitoring with it.
# The build tag remove_all_sd drops Prometheus' service-discovery plugins (AWS, Azure, GCE,
# Consul, ...: plugins/plugin_*.go); promtool imports file and kubernetes discovery itself.
# Settings: PROMTOOL_VERSION (module version, v0.316.0 = Prometheus 3.16.0), DRAXR_CACHE.
set -euo pipefail

PROMTOOL_VERSION=${PROMTOOL_VERSION:-v0.316.0}
TAGS=remove_all_sd
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-modcacherw
CACHE=${DRAXR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/draxr}

log() { echo "[build-promtool] $*" >&2; }

command -v go >/dev/null || { log "go is not installed"; exit 1; }
KEY="promtool-${PROMTOOL_VERSION}-${TAGS}_$(go env GOVERSION)_$(go env GOOS)-$(go env GOARCH)"
OUT="$CACHE/bin/$KEY"

if [ -f "$OUT/.complete" ]; then
  echo "$OUT/promtool"
  exit 0
fi

mkdir -p "$CACHE/bin"
exec 9>"$CACHE/.promtool.lock"
log "waiting for the build lock $CACHE/.promtool.lock"
flock 9
if [ -f "$OUT/.complete" ]; then echo "$OUT/promtool"; exit 0; fi

log "building promtool ${PROMTOOL_VERSION} -tags ${TAGS} (a cold build downloads modules and takes a few minutes on 2 cores; later runs reuse the cache)"
start=$(date +%s)
rm -rf "$OUT.tmp"
mkdir -p "$OUT.tmp"
PMOD=$(cd "$(mktemp -d)" && go mod download -json "github.com/prometheus/prometheus@${PROMTOOL_VERSION}" \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
if grep -qE '^[[:space:]]*replace' "$PMOD"; then
  log "github.com/prometheus/prometheus@${PROMTOOL_VERSION} has replace directives: go install cannot build it"; exit 1
fi
# Module v0.3MM.P is Prometheus 3.MM.P (the project's own tags are v3.x; the module keeps v0).
REL=$(echo "$PROMTOOL_VERSION" | sed -nE 's/^v0\.3([0-9][0-9])\.([0-9]+)$/3.\1.\2/p' | sed -E 's/^3\.0([0-9])/3.\1/')
REL=${REL:-$PROMTOOL_VERSION}
V=github.com/prometheus/common/version
LDF="-s -w -X $V.Version=${REL} -X $V.Revision=${PROMTOOL_VERSION} -X $V.Branch=module -X $V.BuildUser=draxr"
# No replace directives, so go install builds it as published.
GOBIN="$OUT.tmp" nice go install -trimpath -tags "$TAGS" -ldflags "$LDF" \
  "github.com/prometheus/prometheus/cmd/promtool@${PROMTOOL_VERSION}" >&2
test -x "$OUT.tmp/promtool" || { log "missing promtool"; exit 1; }
"$OUT.tmp/promtool" --version >&2
echo "$(( $(date +%s) - start ))" > "$OUT.tmp/.build-seconds"
touch "$OUT.tmp/.complete"
rm -rf "$OUT"
mv "$OUT.tmp" "$OUT"
log "published $OUT after $(( $(date +%s) - start ))s"
echo "$OUT/promtool"
