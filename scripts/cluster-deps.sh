#!/usr/bin/env bash
# Installs what the test clusters need from Debian (once; a no-op when all are present), and
# builds the Kubernetes binaries (scripts/build-kubernetes.sh) and fetches helm/kubectl.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
packages=(etcd-server containerd runc containernetworking-plugins podman catatonit
          iptables conntrack iproute2 golang-go rsync dpkg-dev golang-github-modern-go-reflect2-dev)
if ! dpkg -s "${packages[@]}" >/dev/null 2>&1; then
  echo "[cluster-deps] apt-get install ${packages[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq "${packages[@]}" >&2
fi
# A distribution containerd may be running with its own config; ours runs beside it.
bash "$here/build-kubernetes.sh" >/dev/null
bash "$here/fetch-helm-kubectl.sh" >/dev/null
echo "[cluster-deps] ready" >&2
