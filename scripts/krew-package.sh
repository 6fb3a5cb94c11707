#!/usr/bin/env bash
# Builds the krew archive of the kubectl plugin and its manifest (plugins/sidecar-debug.yaml
# filled in): OUT/kubectl-sidecar_debug-linux-amd64.tar.gz and OUT/sidecar-debug.yaml
# (OUT: $1, default dist/). The archive holds the package and its dependencies installed for
# this Python (lib/) and the launcher kubectl-sidecar_debug, which runs them with python3 from
# PATH when that is the same Python version, and says what to do otherwise. Nothing is uploaded.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$(mkdir -p "${1:-$root/dist}" && cd "${1:-$root/dist}" && pwd)
python=${PYTHON:-$root/.venv/bin/python}
version=$("$python" -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["project"]["version"])' "$root/pyproject.toml")
pyversion=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
pytuple="${pyversion/./, }"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/src"
# A copy without the worktree's build outputs and virtualenv.
tar -C "$root" --exclude=./.venv --exclude=./dist --exclude=./build --exclude='*.egg-info' \
  --exclude=./.git -cf - pyproject.toml README.md webhook | tar -C "$work/src" -xf -
"$python" -m pip install --quiet --no-compile --target "$work/pkg/lib" "$work/src" >&2
cat > "$work/pkg/kubectl-sidecar_debug" <<LAUNCHER
#!/bin/sh
# kubectl sidecar-debug: runs the bundled sidecar-debug $version with python3 $pyversion.
here=\$(dirname "\$(readlink -f "\$0")")
python=\${SIDECAR_DEBUG_PYTHON:-python3}
if ! "\$python" -c 'import sys; sys.exit(sys.version_info[:2] != ($pytuple))' 2>/dev/null; then
  echo "kubectl sidecar-debug: this archive was built for Python $pyversion; \$python is not it. Set SIDECAR_DEBUG_PYTHON to a python$pyversion, or install the package instead: pip install sidecar-debug (from the repository: pip install .)" >&2
  exit 2
fi
PYTHONPATH="\$here/lib\${PYTHONPATH:+:\$PYTHONPATH}" exec "\$python" -c 'import sys; sys.argv[0] = "kubectl-sidecar_debug"; from webhook.commands.cli import main; sys.exit(main())' "\$@"
LAUNCHER
chmod 0755 "$work/pkg/kubectl-sidecar_debug"
cp "$root/LICENSE" "$work/pkg/" 2>/dev/null || true
archive="$out/kubectl-sidecar_debug-linux-amd64.tar.gz"
tar -C "$work/pkg" --sort=name --owner=0 --group=0 --numeric-owner -czf "$archive" .
sha=$(sha256sum "$archive" | cut -d' ' -f1)
sed -e "s|^  version: .*|  version: v$version|" \
    -e "s|uri: FILLED-IN-BY-scripts/krew-package.sh|uri: file://$archive|" \
    -e "s|sha256: FILLED-IN-BY-scripts/krew-package.sh|sha256: $sha|" \
    "$root/plugins/sidecar-debug.yaml" > "$out/sidecar-debug.yaml"
echo "$archive"
echo "$out/sidecar-debug.yaml"
