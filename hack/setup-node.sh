#!/usr/bin/env bash
# Installs the Debian packages a real node needs when they are missing: runc (the OCI runtime),
# containernetworking-plugins (the loopback CNI plugin in /usr/lib/cni) and busybox-static (the
# busybox image's only binary). Idempotent and quiet when everything is present. Needs root and apt.
set -euo pipefail

PACKAGES=(runc containernetworking-plugins busybox-static)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

log() { echo "[setup-node] $*" >&2; }
if [ "$(id -u)" != 0 ]; then
  log "missing Debian packages: ${missing[*]}; install them as root (apt-get install ${missing[*]})"; exit 1
fi
command -v apt-get >/dev/null || { log "missing ${missing[*]} and no apt-get"; exit 1; }
log "installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
if ! apt-get -o DPkg::Lock::Timeout=900 install -y -q --no-install-recommends "${missing[@]}" >&2; then
  log "apt-get install failed; updating the package lists once and retrying"
  apt-get -o DPkg::Lock::Timeout=900 update -q >&2
  apt-get -o DPkg::Lock::Timeout=900 install -y -q --no-install-recommends "${missing[@]}" >&2
fi
