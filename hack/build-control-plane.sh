#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, etcd and kwok from the Go
# module proxy into ~/.cache/draxr/bin/<key>/ and publishes them atomically. Returns at once when the
# cache is complete. Prints the directory on the last line of stdout.
# Settings: K8S_VERSION (v1.37.2), ETCD_VERSION (v3.7.3), KWOK_VERSION (v0.8.0), DRAXR_CACHE.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.37.2}
STAGING_VERSION="v0.${K8S_VERSION#v1.}"
ETCD_VERSION=${ETCD_VERSION:-v3.7.3}
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-modcacherw
CACHE=${DRAXR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/draxr}
KEY="k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}_$(go env GOVERSION)_$(go env GOOS)-$(go env GOARCH)"
OUT="$CACHE/bin/$KEY"
SRC="$CACHE/src/$KEY"

log() { echo "[build-control-plane] $*" >&2; }

if [ -f "$OUT/.complete" ]; then
  echo "$OUT"
  exit 0
fi

mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
log "waiting for the build lock $CACHE/.lock"
flock 9
if [ -f "$OUT/.complete" ]; then echo "$OUT"; exit 0; fi

avail_kb=$(df -Pk "$CACHE" | awk 'NR==2 {print $4}')
if [ "$avail_kb" -lt $((8 * 1024 * 1024)) ]; then
  log "less than 8 GiB free under $CACHE; the build needs about 8 GiB"; exit 1
fi

log "building Kubernetes ${K8S_VERSION} (staging ${STAGING_VERSION}), etcd ${ETCD_VERSION}, kwok ${KWOK_VERSION}"
log "a cold build takes about 9 minutes on 2 cores (Go caches empty); later runs reuse $OUT"
start=$(date +%s)
rm -rf "$OUT.tmp"
mkdir -p "$SRC/k8s" "$SRC/etcd" "$OUT.tmp"

# --- Kubernetes: a wrapper module that replaces every staging module with its published version.
cd "$SRC/k8s"
[ -f go.mod ] || go mod init draxrbuild/k8s >/dev/null 2>&1
go mod edit -go=1.26.0
KMOD=$(cd "$(mktemp -d)" && go mod download -json "k8s.io/kubernetes@${K8S_VERSION}" \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
for m in $(sed -nE 's#^[[:space:]]*(replace[[:space:]]+)?(k8s\.io/[A-Za-z0-9._-]+)[[:space:]]*=>[[:space:]]*\./staging/.*#\2#p' "$KMOD"); do
  go mod edit -replace="${m}=${m}@${STAGING_VERSION}"
done
other=$(grep -nE '=>' "$KMOD" | grep -v '\./staging/' || true)
[ -z "$other" ] || log "k8s.io/kubernetes has non-staging replaces (not copied): $other"
log "resolving modules"
go get "k8s.io/kubernetes/cmd/kube-apiserver@${K8S_VERSION}" \
       "k8s.io/kubernetes/cmd/kube-controller-manager@${K8S_VERSION}" \
       "k8s.io/kubernetes/cmd/kube-scheduler@${K8S_VERSION}" \
       "k8s.io/kubernetes/cmd/kubectl@${K8S_VERSION}" >&2
MINOR=$(echo "$K8S_VERSION" | cut -d. -f2)
LDF="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  LDF="$LDF -X $p.gitVersion=${K8S_VERSION} -X $p.gitMajor=1 -X $p.gitMinor=${MINOR} -X $p.gitTreeState=clean"
done
log "compiling kube-apiserver, kube-controller-manager, kube-scheduler, kubectl"
go build -trimpath -ldflags "$LDF" -o "$OUT.tmp/" \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler \
  k8s.io/kubernetes/cmd/kubectl
log "kubernetes done after $(( $(date +%s) - start ))s"

# --- etcd: its server module root is package main; its own replaces are ignored in a wrapper.
cd "$SRC/etcd"
[ -f go.mod ] || go mod init draxrbuild/etcd >/dev/null 2>&1
go mod edit -go=1.26.0
go get "go.etcd.io/etcd/server/v3@${ETCD_VERSION}" >&2
go build -trimpath -ldflags "-s -w" -o "$OUT.tmp/etcd" go.etcd.io/etcd/server/v3
log "etcd done after $(( $(date +%s) - start ))s"

# --- kwok: no replace directives, so go install works; its stage files come from the module.
GOBIN="$OUT.tmp" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION}"
KW="$(go env GOMODCACHE)/sigs.k8s.io/kwok@${KWOK_VERSION}/kustomize/stage"
mkdir -p "$OUT.tmp/stages"
cp "$KW/node/fast/node-initialize.yaml" \
   "$KW/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml" \
   "$KW/pod/fast/pod-ready.yaml" "$KW/pod/fast/pod-delete.yaml" "$OUT.tmp/stages/"
chmod -R u+w "$OUT.tmp/stages"
log "kwok done after $(( $(date +%s) - start ))s"

for b in kube-apiserver kube-controller-manager kube-scheduler kubectl etcd kwok; do
  test -x "$OUT.tmp/$b" || { log "missing $b"; exit 1; }
done
"$OUT.tmp/kube-apiserver" --version >&2
"$OUT.tmp/etcd" --version >&2 | head -1
echo "$(( $(date +%s) - start ))" > "$OUT.tmp/.build-seconds"
touch "$OUT.tmp/.complete"
rm -rf "$OUT"
mv "$OUT.tmp" "$OUT"
log "published $OUT after $(( $(date +%s) - start ))s"
echo "$OUT"
