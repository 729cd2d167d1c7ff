#!/usr/bin/env bash
# Builds what a real node of the dev cluster runs, from the Go module proxy, into
# ~/.cache/draxr/node/<key>/ and publishes it atomically: containerd, containerd-shim-runc-v2 and ctr
# (containerd 2.x: Debian's 1.6 has no CDI), kubelet, our DRA kubelet plugin (hack/node/draplugin),
# device plugin (hack/node/deviceplugin) and pause program (hack/node/pause), and the OCI image tars
# images/busybox.tar (draxr.local/busybox:1, from Debian's busybox-static) and images/pause.tar
# (draxr.local/pause:1), written offline by operator/draxr_dev/devcluster/ociimage.py.
# First installs the Debian packages the node needs (hack/setup-node.sh: runc, CNI plugins,
# busybox-static). Returns at once when the cache is complete. Prints the directory on the last line
# of stdout. Settings: CONTAINERD_VERSION (v2.4.2), K8S_VERSION (v1.37.2), DRAXR_CACHE.
set -euo pipefail

CONTAINERD_VERSION=${CONTAINERD_VERSION:-v2.4.2}
K8S_VERSION=${K8S_VERSION:-v1.37.2}
STAGING_VERSION="v0.${K8S_VERSION#v1.}"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-modcacherw
HACK=$(cd "$(dirname "$0")" && pwd)
OCIIMAGE="$HACK/../operator/draxr_dev/devcluster/ociimage.py"
CACHE=${DRAXR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/draxr}

log() { echo "[build-node] $*" >&2; }

bash "$HACK/setup-node.sh"

# The key: versions, Go, our Go sources and the image inputs (the builder and the busybox package).
src_hash=$(cd "$HACK/node" && find . -type f \( -name '*.go' -o -name go.mod -o -name go.sum \) -print0 \
  | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-12)
busybox_version=$(dpkg-query -W -f='${Version}' busybox-static 2>/dev/null || echo none)
img_hash=$( { sha256sum < "$OCIIMAGE"; echo "$busybox_version"; } | sha256sum | cut -c1-8)
KEY="containerd-${CONTAINERD_VERSION}_kubelet-${K8S_VERSION}_src-${src_hash}_img-${img_hash}_$(go env GOVERSION)_$(go env GOOS)-$(go env GOARCH)"
OUT="$CACHE/node/$KEY"
# kubelet's wrapper module: built like build-control-plane.sh's, in a directory of its own (so that the
# two scripts never write the same go.mod; the Go build cache is shared anyway).
SRC="$CACHE/src/node-kubelet-${K8S_VERSION}_$(go env GOVERSION)"

if [ -f "$OUT/.complete" ]; then
  echo "$OUT"
  exit 0
fi

mkdir -p "$CACHE/node"
exec 9>"$CACHE/node/.lock"
log "waiting for the build lock $CACHE/node/.lock"
flock 9
if [ -f "$OUT/.complete" ]; then echo "$OUT"; exit 0; fi

avail_kb=$(df -Pk "$CACHE" | awk 'NR==2 {print $4}')
if [ "$avail_kb" -lt $((4 * 1024 * 1024)) ]; then
  log "less than 4 GiB free under $CACHE; the build needs about 4 GiB"; exit 1
fi

log "building containerd ${CONTAINERD_VERSION}, kubelet ${K8S_VERSION} (staging ${STAGING_VERSION}), our plugins (src ${src_hash})"
log "a cold build takes about 4 minutes on 2 cores; later runs reuse $OUT"
start=$(date +%s)
step=$start
times=()
mark() { local now; now=$(date +%s); times+=("$1=$((now - step))s"); log "$1 done after $((now - start))s"; step=$now; }
rm -rf "$OUT.tmp"
mkdir -p "$SRC" "$OUT.tmp/images"

# --- containerd 2.x: no replace directives, so go install works.
CDV="-s -w -X github.com/containerd/containerd/v2/version.Version=${CONTAINERD_VERSION}"
GOBIN="$OUT.tmp" go install -trimpath -ldflags "$CDV" \
  "github.com/containerd/containerd/v2/cmd/containerd@${CONTAINERD_VERSION}" \
  "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@${CONTAINERD_VERSION}" \
  "github.com/containerd/containerd/v2/cmd/ctr@${CONTAINERD_VERSION}"
mark containerd

# --- kubelet: a wrapper module that replaces every staging module with its published version
# (exactly as build-control-plane.sh does for the control plane).
cd "$SRC"
[ -f go.mod ] || go mod init draxrbuild/kubelet >/dev/null 2>&1
go mod edit -go=1.26.0
KMOD=$(cd "$(mktemp -d)" && go mod download -json "k8s.io/kubernetes@${K8S_VERSION}" \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
for m in $(sed -nE 's#^[[:space:]]*(replace[[:space:]]+)?(k8s\.io/[A-Za-z0-9._-]+)[[:space:]]*=>[[:space:]]*\./staging/.*#\2#p' "$KMOD"); do
  go mod edit -replace="${m}=${m}@${STAGING_VERSION}"
done
other=$(grep -nE '=>' "$KMOD" | grep -v '\./staging/' || true)
[ -z "$other" ] || log "k8s.io/kubernetes has non-staging replaces (not copied): $other"
go get "k8s.io/kubernetes/cmd/kubelet@${K8S_VERSION}" >&2
MINOR=$(echo "$K8S_VERSION" | cut -d. -f2)
LDF="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  LDF="$LDF -X $p.gitVersion=${K8S_VERSION} -X $p.gitMajor=1 -X $p.gitMinor=${MINOR} -X $p.gitTreeState=clean"
done
go build -trimpath -ldflags "$LDF" -o "$OUT.tmp/kubelet" k8s.io/kubernetes/cmd/kubelet
mark kubelet

# --- our own programs: each its own module with a committed go.sum.
for prog in draplugin deviceplugin pause; do
  (cd "$HACK/node/$prog" && go build -mod=readonly -trimpath -ldflags "-s -w" -o "$OUT.tmp/draxr-$prog" .)
done
mark plugins

# --- images, offline.
python3 "$OCIIMAGE" busybox "$OUT.tmp/images/busybox.tar" --binary /bin/busybox >&2
python3 "$OCIIMAGE" pause "$OUT.tmp/images/pause.tar" --binary "$OUT.tmp/draxr-pause" >&2
mark images

for b in containerd containerd-shim-runc-v2 ctr kubelet draxr-draplugin draxr-deviceplugin draxr-pause images/busybox.tar images/pause.tar; do
  test -s "$OUT.tmp/$b" || { log "missing $b"; exit 1; }
done
"$OUT.tmp/containerd" --version >&2
"$OUT.tmp/kubelet" --version >&2
echo "$(( $(date +%s) - start ))" > "$OUT.tmp/.build-seconds"
printf '%s\n' "${times[@]}" > "$OUT.tmp/.build-times"
touch "$OUT.tmp/.complete"
rm -rf "$OUT"
mv "$OUT.tmp" "$OUT"
log "published $OUT after $(( $(date +%s) - start ))s (${times[*]})"
echo "$OUT"
