#!/usr/bin/env bash
# Test cluster control: scripts/cluster.sh up|down|status|kubeconfig|env|load-image [--mode lite|full]
#   up           start (default --mode full); prints the admin kubeconfig path
#   down         stop everything it started and clean the host (bridge, iptables, pods, mounts)
#   kubeconfig   print the kubeconfig path (--user admin|alice|bob|carol)
#   env          print `export KUBECONFIG=... PATH=...` lines: eval "$(scripts/cluster.sh env)"
#   load-image   import podman images into the node's containerd
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
python="$root/.venv/bin/python"
[ -x "$python" ] || python=python3
cd "$root"
exec "$python" -m tests.cluster "$@"
