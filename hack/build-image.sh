#!/usr/bin/env bash
# Builds draxr's container image from the Dockerfile with Debian's buildah (no Docker engine needed)
# and writes it as an OCI archive: ~/.cache/draxr/image/draxr-<version>-<key>.oci.tar, whose path is
# the last line of stdout (the image reference, ghcr.io/draxr/draxr:<version>, is in the archive and
# in <archive>.json with the sizes and the build time).
#
# The Dockerfile is built unchanged but for its BASE_IMAGE argument (default: the public
# python:3.11-slim-bookworm, which no registry here serves): the base is made locally, a debootstrap
# of a minimal bookworm with Debian's python3 (3.11), pip and python-is-python3 from the host's apt
# mirror, brought up to date and cleaned by hack/image/base-setup.sh, and cached (the downloaded
# packages, and the image in a private buildah store under ~/.cache/draxr/image/). What the build's pip needs to
# reach PyPI from this machine (its CA bundle, SSL_CERT_FILE or PIP_CERT) is bind-mounted for the
# RUN steps only, never written into a layer.
#
# Idempotent: an archive for the same inputs (the Dockerfile, .dockerignore, pyproject.toml,
# README.md, hack/constraints.txt, operator/, the base) is reused at once. Needs root (buildah's store,
# debootstrap); installs buildah, runc and debootstrap when missing. Settings: DRAXR_CACHE,
# DRAXR_IMAGE_NAME (ghcr.io/draxr/draxr), DRAXR_IMAGE_TAG (the package version),
# DRAXR_BUILDAH_ISOLATION (oci: runc; chroot where runc cannot run), DRAXR_IMAGE_NO_CACHE=1 (rebuild
# the image, keep the base), DRAXR_IMAGE_FRESH_BASE=1 (debootstrap the base anew).
set -euo pipefail

HACK=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HACK/.." && pwd)
CACHE=${DRAXR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/draxr}
IMG="$CACHE/image"
SUITE=bookworm
BASE_PACKAGES=python3,python3-pip,python-is-python3,ca-certificates
VERSION=$(sed -nE 's/^version = "([^"]+)"/\1/p' "$ROOT/pyproject.toml" | head -n 1)
NAME=${DRAXR_IMAGE_NAME:-ghcr.io/draxr/draxr}
TAG=${DRAXR_IMAGE_TAG:-$VERSION}
REF="$NAME:$TAG"
ISOLATION=${DRAXR_BUILDAH_ISOLATION:-oci}

log() { echo "[build-image] $*" >&2; }

if [ "$(id -u)" != 0 ]; then
  log "needs root (buildah's store and debootstrap); run it as root"; exit 1
fi

# --- tools: Debian's buildah (and runc, its OCI runtime) and debootstrap.
missing=()
for p in buildah runc debootstrap; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get -o DPkg::Lock::Timeout=900 install -y -q --no-install-recommends "${missing[@]}" >&2; then
    log "apt-get install failed; updating the package lists once and retrying"
    apt-get -o DPkg::Lock::Timeout=900 update -q >&2
    apt-get -o DPkg::Lock::Timeout=900 install -y -q --no-install-recommends "${missing[@]}" >&2
  fi
fi

# A private store: nothing of ours in /var/lib/containers. vfs needs neither overlayfs nor fuse and
# leaves no mount behind.
mkdir -p "$IMG"
STORE=(--root "$IMG/storage" --runroot "$IMG/run" --storage-driver vfs)
bh() { buildah "${STORE[@]}" "$@"; }

# The CA bundle the host trusts (this machine reaches PyPI through a TLS-intercepting proxy): mounted
# read-only over the base's bundle during the Dockerfile's RUN steps, where Debian's pip reads it;
# the layers keep the base's own bundle (tests/image checks it).
CA=${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}
BUILD_MOUNTS=()
if [ -s "$CA" ]; then
  BUILD_MOUNTS+=(--volume "$CA:/etc/ssl/certs/ca-certificates.crt:ro")
fi

exec 9>"$IMG/.lock"
log "waiting for the build lock $IMG/.lock"
flock 9

start=$(date +%s)

# --- the base: debootstrap (into a rootfs tar), then base-setup.sh in a container, committed
# to the private store as localhost/draxr-base:<key> (the rootfs tar only lives until then).
debootstrap_version=$(dpkg-query -W -f='${Version}' debootstrap)
BASE_KEY=$( { echo "$SUITE minbase $BASE_PACKAGES $(dpkg --print-architecture) debootstrap-$debootstrap_version"
              cat "$HACK/image/base-setup.sh"; } | sha256sum | cut -c1-12)
BASE_REF="localhost/draxr-base:$SUITE-$BASE_KEY"
BASE_TAR="$IMG/base-$SUITE-$BASE_KEY.tar"
if [ "${DRAXR_IMAGE_FRESH_BASE:-0}" = 1 ]; then
  rm -f "$BASE_TAR"
  bh rmi -f "$BASE_REF" >/dev/null 2>&1 || true
fi

# The mirror and the suites the host's apt uses (nothing is named here): bookworm main from its
# package lists, and the updates and security suites where the host has them.
apt_uri() {  # suite -> the URI of its main component in the host's apt sources, or nothing
  apt-get indextargets --format '$(SITE) $(RELEASE) $(COMPONENT) $(IDENTIFIER)' 2>/dev/null \
    | awk -v s="$1" '$2 == s && $3 == "main" && $4 == "Packages" {print $1; exit}'
}

rootfs=""
cleanup() {
  # Whatever debootstrap mounted under the target (it unmounts itself; an interrupted run may not).
  if [ -n "$rootfs" ] && [ -d "$rootfs" ]; then
    awk -v r="$rootfs" '$5 == r || index($5, r "/") == 1 {print $5}' /proc/self/mountinfo | sort -r \
      | while read -r m; do umount -l "$m" 2>/dev/null || true; done
    rm -rf "$rootfs"
  fi
  rm -f "$BASE_TAR.tmp"
  for c in $(bh containers -q 2>/dev/null); do bh rm "$c" >/dev/null 2>&1 || true; done
}
trap cleanup EXIT

if ! bh inspect --type image "$BASE_REF" >/dev/null 2>&1; then
  if [ ! -s "$BASE_TAR" ]; then
    mirror=$(apt_uri "$SUITE")
    if [ -z "$mirror" ]; then
      apt-get -o DPkg::Lock::Timeout=900 update -q >&2
      mirror=$(apt_uri "$SUITE")
    fi
    [ -n "$mirror" ] || { log "the host's apt has no $SUITE main source to debootstrap from"; exit 1; }
    rootfs=$(mktemp -d "$IMG/rootfs.XXXXXX")
    log "debootstrap --variant=minbase $SUITE (+ $BASE_PACKAGES) from the host's mirror; about 2 minutes"
    mkdir -p "$IMG/debs"   # debootstrap keeps the .debs it fetched here: a rebuild of the base downloads nothing
    debootstrap --variant=minbase --include="$BASE_PACKAGES" --components=main --cache-dir="$IMG/debs" \
      "$SUITE" "$rootfs" "$mirror" \
      > "$IMG/debootstrap.log" 2>&1 || { tail -n 30 "$IMG/debootstrap.log" >&2; log "debootstrap failed"; exit 1; }
    {
      echo "deb $mirror $SUITE main"
      updates=$(apt_uri "$SUITE-updates"); [ -z "$updates" ] || echo "deb $updates $SUITE-updates main"
      security=$(apt_uri "$SUITE-security"); [ -z "$security" ] || echo "deb $security $SUITE-security main"
    } > "$rootfs/etc/apt/sources.list"
    tar --numeric-owner --xattrs -C "$rootfs" \
      --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' --exclude='./run/*' \
      -cf "$BASE_TAR.tmp" .
    mv "$BASE_TAR.tmp" "$BASE_TAR"
    rm -rf "$rootfs"
    rootfs=""
    log "base rootfs: $BASE_TAR ($(du -m "$BASE_TAR" | cut -f1) MiB) after $(( $(date +%s) - start ))s"
  fi
  c=$(bh from --pull-never scratch)
  bh add "$c" "$BASE_TAR" / >/dev/null
  bh copy "$c" "$HACK/image/base-setup.sh" /tmp/base-setup.sh >/dev/null
  # apt fetches over the mirror's own scheme; the host's CA bundle is not mounted here (the
  # ca-certificates upgrade rewrites the image's bundle).
  log "updating the base from $SUITE-updates and $SUITE-security (hack/image/base-setup.sh)"
  bh run --isolation "$ISOLATION" --network host "$c" -- sh /tmp/base-setup.sh > "$IMG/base-setup.log" 2>&1 \
    || { tail -n 30 "$IMG/base-setup.log" >&2; log "base-setup.sh failed (log: $IMG/base-setup.log)"; exit 1; }
  # What python:3.11-slim-bookworm sets that the Dockerfile may rely on.
  bh config --env LANG=C.UTF-8 --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --cmd '["python3"]' --label "org.opencontainers.image.description=draxr's local base: debootstrap $SUITE minbase + $BASE_PACKAGES" \
    "$c"
  bh commit --rm -q "$c" "$BASE_REF" >/dev/null
  rm -f "$BASE_TAR"   # the store holds the base now; debootstrap's packages stay in $IMG/debs
  log "base image $BASE_REF after $(( $(date +%s) - start ))s"
fi

# --- the image: the Dockerfile with BASE_IMAGE pointing at the local base.
src_hash=$(cd "$ROOT" && { ls Dockerfile .dockerignore pyproject.toml README.md hack/constraints.txt
    find operator -type f ! -path '*/__pycache__/*' ! -path '*.egg-info/*' ! -name '*.pyc'; } \
  | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-12)
KEY="src-${src_hash}_base-${BASE_KEY}"
OUT="$IMG/draxr-$TAG-$KEY.oci.tar"
if [ "${DRAXR_IMAGE_NO_CACHE:-0}" != 1 ] && [ -s "$OUT" ] && [ -s "$OUT.json" ]; then
  log "reusing $OUT ($REF)"
  echo "$OUT"
  exit 0
fi

log "building $REF from $ROOT/Dockerfile (BASE_IMAGE=$BASE_REF)"
build_start=$(date +%s)
bh bud --isolation "$ISOLATION" --network host --pull-never --layers=false \
  --build-arg "BASE_IMAGE=$BASE_REF" "${BUILD_MOUNTS[@]}" \
  -f "$ROOT/Dockerfile" -t "$REF" "$ROOT" >&2
build_seconds=$(( $(date +%s) - build_start ))

rm -f "$OUT.tmp"
bh push -q "$REF" "oci-archive:$OUT.tmp:$REF" >&2
sizes=$(python3 "$ROOT/operator/draxr_dev/devcluster/ociarchive.py" sizes "$OUT.tmp")
read -r layers size_bytes compressed_bytes base_bytes < <(echo "$sizes" | python3 -c 'import json, sys
d = json.load(sys.stdin); print(d["layers"], d["unpacked_bytes"], d["compressed_bytes"], d["layer_unpacked_bytes"][0])')
image_id=$(bh inspect --type image --format '{{.FromImageID}}' "$REF" 2>/dev/null || echo unknown)
mv "$OUT.tmp" "$OUT"
total_seconds=$(( $(date +%s) - start ))
cat > "$OUT.json" <<JSON
{"ref": "$REF", "archive": "$OUT", "image_id": "$image_id", "base": "$BASE_REF", "layers": $layers,
 "size_bytes": $size_bytes, "compressed_bytes": $compressed_bytes, "sizes": $sizes,
 "build_seconds": $build_seconds, "total_seconds": $total_seconds}
JSON
# Older archives of this tag and dangling images (the build stage) go; the base stays.
for old in "$IMG"/draxr-"$TAG"-*.oci.tar; do
  [ "$old" = "$OUT" ] || rm -f "$old" "$old.json"
done
bh rmi --prune >/dev/null 2>&1 || true
log "image $REF: $layers layers, $((size_bytes / 1000000)) MB unpacked, $((compressed_bytes / 1000000)) MB compressed (the base layer $((base_bytes / 1000000)) MB unpacked); build ${build_seconds}s, ${total_seconds}s in all"
echo "$OUT"
