#!/usr/bin/env bash
# Builds helm (cmd/helm only) from the Go module proxy into ~/.cache/draxr/bin/<key>/helm and
# publishes it atomically, like hack/build-control-plane.sh. Returns at once when the cache is
# complete. Prints the binary's path on the last line of stdout; progress goes to stderr.
# The chart (manifests/helm/draxr) is linted, rendered and installed with it by the tests.
# Settings: HELM_VERSION (v3.22.0), HELM_K8S_STAGING (v0.37.2), DRAXR_CACHE.
set -euo pipefail

HELM_VERSION=${HELM_VERSION:-v3.22.0}
# The Kubernetes libraries helm is built with: the control plane's (hack/build-control-plane.sh).
K8S_STAGING=${HELM_K8S_STAGING:-v0.37.2}
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-modcacherw
CACHE=${DRAXR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/draxr}

log() { echo "[build-helm] $*" >&2; }

command -v go >/dev/null || { log "go is not installed"; exit 1; }
KEY="helm-${HELM_VERSION}-k8s${K8S_STAGING}_$(go env GOVERSION)_$(go env GOOS)-$(go env GOARCH)"
OUT="$CACHE/bin/$KEY"

if [ -f "$OUT/.complete" ]; then
  echo "$OUT/helm"
  exit 0
fi

mkdir -p "$CACHE/bin"
exec 9>"$CACHE/.helm.lock"
log "waiting for the build lock $CACHE/.helm.lock"
flock 9
if [ -f "$OUT/.complete" ]; then echo "$OUT/helm"; exit 0; fi

log "building helm ${HELM_VERSION} (a cold build downloads modules and takes about 3 minutes on 2 cores after the control plane; later runs reuse the cache)"
start=$(date +%s)
rm -rf "$OUT.tmp"
mkdir -p "$OUT.tmp"
HMOD=$(cd "$(mktemp -d)" && go mod download -json "helm.sh/helm/v3@${HELM_VERSION}" \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
if grep -qE '^[[:space:]]*replace' "$HMOD"; then
  log "helm.sh/helm/v3@${HELM_VERSION} has replace directives, which a wrapper module would ignore"; exit 1
fi
# A wrapper module (helm has no replace directives, so it builds as a dependency) that raises helm's
# Kubernetes libraries to the control plane's patch release (helm v3.22.0: v0.37.0 -> v0.37.2). Their
# compiled packages are then the very ones hack/build-control-plane.sh left in the Go build cache:
# about half of a cold helm build is not done twice.
SRC="$CACHE/src/$KEY"
mkdir -p "$SRC"
cd "$SRC"
[ -f go.mod ] || go mod init draxrbuild/helm >/dev/null 2>&1
go mod edit -go=1.26.0
pins=()
for m in $(sed -nE 's#^[[:space:]]*(k8s\.io/(api|apiextensions-apiserver|apimachinery|apiserver|cli-runtime|client-go|component-base|kubectl)) v0\.[0-9]+\..*#\1#p' "$HMOD"); do
  pins+=("${m}@${K8S_STAGING}")
done
go get "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}" "${pins[@]}" >&2
# The Kubernetes version helm assumes without a cluster (helm template, lint) comes from its
# client-go, as helm's Makefile sets it: client-go v0.N.x is Kubernetes 1.N.
K8S_MINOR=$(go list -m -f '{{.Version}}' k8s.io/client-go | sed -nE 's#^v0\.([0-9]+)\..*#\1#p')
LDF="-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION} -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for p in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
  LDF="$LDF -X $p.k8sVersionMajor=1 -X $p.k8sVersionMinor=${K8S_MINOR}"
done
nice go build -trimpath -ldflags "$LDF" -o "$OUT.tmp/helm" helm.sh/helm/v3/cmd/helm >&2
test -x "$OUT.tmp/helm" || { log "missing helm"; exit 1; }
"$OUT.tmp/helm" version --short >&2
echo "$(( $(date +%s) - start ))" > "$OUT.tmp/.build-seconds"
touch "$OUT.tmp/.complete"
rm -rf "$OUT"
mv "$OUT.tmp" "$OUT"
log "published $OUT after $(( $(date +%s) - start ))s"
echo "$OUT/helm"
