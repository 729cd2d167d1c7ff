#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, etcd and kwok from the Go
# module proxy into ~/.cache/draxr/bin/<key>/ and publishes them atomically. Returns at once when the
# cache is complete. Prints the directory on the last line of stdout.
# Settings: K8S_VERSION (v1.37.2), ETCD_VERSION (v3.7.3), KWOK_VERSION (v0.8.0), DRAXR_CACHE, and
# K8S_BINARIES (all four: "kube-apiserver kube-controller-manager kube-scheduler kubectl"): the
# Kubernetes binaries wanted, for a version the tests need only a part of (tests/integration/
# test_versions.py: no kubectl, the default version's serves every cluster); a later call that wants
# more adds the missing ones to the same directory.
set -euo pipefail

DEFAULT_K8S_VERSION=v1.37.2
K8S_VERSION=${K8S_VERSION:-$DEFAULT_K8S_VERSION}
# The Kubernetes libraries kwok is built with: the default control plane's (shared build cache).
KWOK_STAGING="v0.${DEFAULT_K8S_VERSION#v1.}"
STAGING_VERSION="v0.${K8S_VERSION#v1.}"
ETCD_VERSION=${ETCD_VERSION:-v3.7.3}
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-modcacherw
CACHE=${DRAXR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/draxr}
TOOLS="etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}-k8s${KWOK_STAGING}_$(go env GOVERSION)_$(go env GOOS)-$(go env GOARCH)"
KEY="k8s-${K8S_VERSION}_${TOOLS}"
OUT="$CACHE/bin/$KEY"
SRC="$CACHE/src/$KEY"
ALL_BINARIES="kube-apiserver kube-controller-manager kube-scheduler kubectl"
K8S_BINARIES=${K8S_BINARIES:-$ALL_BINARIES}

log() { echo "[build-control-plane] $*" >&2; }

for b in $K8S_BINARIES; do
  case " $ALL_BINARIES " in *" $b "*) ;; *) log "K8S_BINARIES: unknown binary $b"; exit 1 ;; esac
done
have_all() {  # the cache holds every wanted binary
  [ -f "$OUT/.complete" ] || return 1
  for b in $K8S_BINARIES; do [ -x "$OUT/$b" ] || return 1; done
}

if have_all; then
  echo "$OUT"
  exit 0
fi

mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
log "waiting for the build lock $CACHE/.lock"
flock 9
if have_all; then echo "$OUT"; exit 0; fi

avail_kb=$(df -Pk "$CACHE" | awk 'NR==2 {print $4}')
if [ "$avail_kb" -lt $((8 * 1024 * 1024)) ]; then
  log "less than 8 GiB free under $CACHE; the build needs about 8 GiB"; exit 1
fi

log "building Kubernetes ${K8S_VERSION} (staging ${STAGING_VERSION}), etcd ${ETCD_VERSION}, kwok ${KWOK_VERSION}"
log "a cold build takes about 15 minutes on 2 cores (Go caches empty); later runs reuse $OUT"
start=$(date +%s)
rm -rf "$OUT.tmp"
mkdir -p "$SRC/k8s" "$SRC/etcd" "$OUT.tmp"
# A directory with some of the binaries: keep them (etcd, kwok included), build the missing ones.
if [ -f "$OUT/.complete" ]; then cp -a "$OUT/." "$OUT.tmp/"; rm -f "$OUT.tmp/.complete"; fi
missing=()
for b in $K8S_BINARIES; do [ -x "$OUT.tmp/$b" ] || missing+=("$b"); done

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
pkgs=()
for b in "${missing[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
go get "${pkgs[@]/%/@${K8S_VERSION}}" >&2
MINOR=$(echo "$K8S_VERSION" | cut -d. -f2)
LDF="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  LDF="$LDF -X $p.gitVersion=${K8S_VERSION} -X $p.gitMajor=1 -X $p.gitMinor=${MINOR} -X $p.gitTreeState=clean"
done
log "compiling ${missing[*]}"
go build -trimpath -ldflags "$LDF" -o "$OUT.tmp/" "${pkgs[@]}"
log "kubernetes done after $(( $(date +%s) - start ))s"

# --- etcd and kwok do not depend on K8S_VERSION: a second Kubernetes version (the 1.35 control
# plane of the adoption tests) copies them from a build that has them, rather than link them again.
donor=""
for d in "$CACHE"/bin/k8s-*"_${TOOLS}"; do
  if [ "$d" != "$OUT" ] && [ -f "$d/.complete" ] && [ -x "$d/etcd" ] && [ -x "$d/kwok" ]; then donor=$d; break; fi
done
if [ -x "$OUT.tmp/etcd" ] && [ -x "$OUT.tmp/kwok" ]; then
  log "etcd and kwok kept from the earlier build"
elif [ -n "$donor" ]; then
  cp -r "$donor/etcd" "$donor/kwok" "$donor/stages" "$OUT.tmp/"
  log "etcd and kwok copied from $donor"
else
  # etcd: its server module root is package main; its own replaces are ignored in a wrapper.
  cd "$SRC/etcd"
  [ -f go.mod ] || go mod init draxrbuild/etcd >/dev/null 2>&1
  go mod edit -go=1.26.0
  go get "go.etcd.io/etcd/server/v3@${ETCD_VERSION}" >&2
  go build -trimpath -ldflags "-s -w" -o "$OUT.tmp/etcd" go.etcd.io/etcd/server/v3
  log "etcd done after $(( $(date +%s) - start ))s"
  # kwok: a wrapper module that raises its Kubernetes libraries (v0.36.1 in kwok v0.8.0) to the
  # default control plane's patch release, so that they come compiled from the Go build cache the
  # Kubernetes build above left (about 2 minutes less of a cold build); never lowered.
  mkdir -p "$SRC/kwok"
  cd "$SRC/kwok"
  [ -f go.mod ] || go mod init draxrbuild/kwok >/dev/null 2>&1
  go mod edit -go=1.26.0
  KWMOD=$(cd "$(mktemp -d)" && go mod download -json "sigs.k8s.io/kwok@${KWOK_VERSION}" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
  pins=()
  for req in $(sed -nE 's#^[[:space:]]*(k8s\.io/[A-Za-z0-9._-]+) v0\.([0-9]+)\.[0-9]+( //.*)?$#\1@\2#p' "$KWMOD"); do
    if [ "${req#*@}" -le "$(echo "$KWOK_STAGING" | cut -d. -f2)" ]; then pins+=("${req%@*}@${KWOK_STAGING}"); fi
  done
  go get "sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION}" "${pins[@]}" >&2
  go build -trimpath -ldflags "-s -w" -o "$OUT.tmp/kwok" sigs.k8s.io/kwok/cmd/kwok
  # kwok's stage files come from its module.
  KW="$(go env GOMODCACHE)/sigs.k8s.io/kwok@${KWOK_VERSION}/kustomize/stage"
  mkdir -p "$OUT.tmp/stages"
  cp "$KW/node/fast/node-initialize.yaml" \
     "$KW/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml" \
     "$KW/pod/fast/pod-ready.yaml" "$KW/pod/fast/pod-delete.yaml" "$OUT.tmp/stages/"
  chmod -R u+w "$OUT.tmp/stages"
  log "kwok done after $(( $(date +%s) - start ))s"
fi

for b in $K8S_BINARIES etcd kwok; do
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
