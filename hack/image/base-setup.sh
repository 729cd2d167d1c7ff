#!/bin/sh
# Runs inside the freshly debootstrapped bookworm (hack/build-image.sh, `buildah run`, host network):
# brings it up to date from bookworm-updates and bookworm-security and makes it behave like the
# public python:3.11-slim-bookworm for our Dockerfile: `python` and `pip` on PATH, `pip install`
# allowed system-wide (no PEP 668 EXTERNALLY-MANAGED marker; Debian's pip then installs into
# /usr/local), `useradd` present (passwd is in minbase); no docs, man pages, locales or apt lists.
set -eu
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get upgrade -y -q --no-install-recommends
apt-get clean
rm -f /usr/lib/python3*/EXTERNALLY-MANAGED
command -v python >/dev/null && command -v pip >/dev/null && command -v useradd >/dev/null
python -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version'
rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/cache/debconf/*-old /var/lib/dpkg/*-old \
  /var/log/apt /var/log/*.log /var/log/alternatives.log \
  /usr/share/doc/* /usr/share/man/* /usr/share/info/* /usr/share/lintian /usr/share/locale/* \
  /tmp/* /root/.cache
