#!/usr/bin/env bash
# Copies the files the chart renders from outside its directory into charts/sidecar-debug/files/
# (Helm's .Files cannot read outside the chart):
#   policies/                  -> files/policies/      (the policy ConfigMap)
#   webhook/data/profiles.yaml -> files/profiles.yaml  (the built-in profiles, for the profiles
#                                 ConfigMap and the per-profile RBAC roles)
# Usage: scripts/sync-chart-files.sh          copy (the chart's copies are replaced)
#        scripts/sync-chart-files.sh --check  exit 1 with a diff when the copies are stale (CI)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
files="$root/charts/sidecar-debug/files"

mode="sync"
case "${1:-}" in
  "") ;;
  --check) mode="check" ;;
  -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

# Builds the expected tree in $1: what files/ must contain.
expected_tree() {
  local out="$1"
  mkdir -p "$out/policies"
  if [ -d "$root/policies" ]; then
    cp -R "$root/policies/." "$out/policies/"
  fi
  # Caches and editor droppings are not policy.
  find "$out/policies" \( -name '__pycache__' -o -name '*.pyc' -o -name '*~' -o -name '.*.swp' \) \
    -prune -exec rm -rf {} +
  cp "$root/webhook/data/profiles.yaml" "$out/profiles.yaml"
}

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
expected_tree "$work/files"

if [ "$mode" = "check" ]; then
  # Git does not keep empty folders, so they cannot count as a difference.
  mkdir -p "$work/actual"
  if [ -d "$files" ]; then cp -R "$files/." "$work/actual/"; fi
  find "$work/files" "$work/actual" -mindepth 1 -type d -empty -delete
  if diff -r "$work/files" "$work/actual" >"$work/diff" 2>&1; then
    echo "chart files in sync: charts/sidecar-debug/files"
    exit 0
  fi
  sed -e "s|$work/files|expected|g" -e "s|$work/actual|charts/sidecar-debug/files|g" "$work/diff" >&2
  echo "charts/sidecar-debug/files is out of sync with policies/ and webhook/data/profiles.yaml;" \
    "run scripts/sync-chart-files.sh and commit the result" >&2
  exit 1
fi

rm -rf "$files"
mkdir -p "$(dirname "$files")"
cp -R "$work/files" "$files"
echo "synced charts/sidecar-debug/files from policies/ and webhook/data/profiles.yaml"
