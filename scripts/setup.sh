#!/usr/bin/env bash
# Everything a fresh Debian 12 machine needs for the demo and the tests: Debian packages, the
# Python virtual environment with the project, helm and kubectl. Idempotent; quick when done.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  # building Kubernetes 1.20 from Debian's source package
  golang-go rsync dpkg-dev golang-github-modern-go-reflect2-dev
  # control plane and node
  etcd-server containerd runc containernetworking-plugins iptables conntrack socat iproute2
  # images
  podman debootstrap catatonit
  # benchmarks and scripts
  wrk jq curl python3-venv
  # the toolset's debuginfod client is tested against a real server (tests/unit/toolset)
  debuginfod gcc binutils
  # the results page's browser test (headless, DevTools protocol)
  chromium
)

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo ">>> apt-get install ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then echo "need root to install Debian packages" >&2; exit 1; fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

if [ ! -x .venv/bin/python ]; then
  echo ">>> python3 -m venv .venv"
  python3 -m venv .venv
fi
stamp=.venv/.installed-$(sha256sum pyproject.toml | cut -c1-16)
if [ ! -f "$stamp" ]; then
  echo ">>> pip install -e .[dev]"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[dev]'
  rm -f .venv/.installed-*
  touch "$stamp"
fi

echo ">>> helm and kubectl: $(scripts/fetch-helm-kubectl.sh)"
