#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy 1.20.2
# from Debian's `kubernetes` source package into $SIDECAR_DEBUG_CACHE/k8s-1.20.2/bin (once:
# about 7-10 minutes on 2 cores; later runs return at once). Honours KUBEBUILDER_ASSETS.
# Prints the bin folder on stdout; progress goes to stderr.
set -euo pipefail
cache="${SIDECAR_DEBUG_CACHE:-$HOME/.cache/sidecar-debug}"
version="1.20.2"
names=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy)
dest="${KUBEBUILDER_ASSETS:-$cache/k8s-$version/bin}"

have_all() { for n in "${names[@]}"; do [ -x "$dest/$n" ] || return 1; done; }
if have_all; then echo "$dest"; exit 0; fi
if [ -n "${KUBEBUILDER_ASSETS:-}" ]; then
  echo "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS lacks some of: ${names[*]}" >&2; exit 1
fi
say() { echo "[build-kubernetes $(date +%T)] $*" >&2; }
export DEBIAN_FRONTEND=noninteractive

# Source packages need a deb-src entry; Debian 12 images ship without one. It names the mirror
# the machine's apt sources use (scripts/debian-mirror.sh; DEBIAN_MIRROR overrides).
if ! grep -rqs -e '^deb-src' -e '^Types:.*deb-src' /etc/apt/sources.list /etc/apt/sources.list.d/; then
  mirror="$("$(dirname "${BASH_SOURCE[0]}")/debian-mirror.sh" --suite bookworm)" || exit 1
  say "adding a deb-src entry for bookworm ($mirror)"
  cat > /etc/apt/sources.list.d/sidecar-debug-src.sources <<SRC
Types: deb-src
URIs: $mirror
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  apt-get update -qq >&2
fi
if ! apt-cache showsrc kubernetes >/dev/null 2>&1 || [ -z "$(apt-cache showsrc kubernetes 2>/dev/null)" ]; then
  apt-get update -qq >&2
fi
build_deps=(golang-go rsync dpkg-dev golang-github-modern-go-reflect2-dev)
if ! dpkg -s "${build_deps[@]}" >/dev/null 2>&1; then
  say "installing ${build_deps[*]}"
  apt-get install -y -qq "${build_deps[@]}" >&2
fi

src="$cache/src"
mkdir -p "$src"
tree=$(find "$src" -maxdepth 1 -type d -name 'kubernetes-*' | sort | tail -1)
if [ -z "$tree" ] || [ ! -f "$tree/Makefile" ]; then
  say "fetching Debian's kubernetes source package"
  (cd "$src" && apt-get source -qq kubernetes >&2)
  tree=$(find "$src" -maxdepth 1 -type d -name 'kubernetes-*' | sort | tail -1)
fi
# The vendored reflect2 1.0.1 does not build with Go >= 1.18; Debian's 1.0.2 does.
reflect2=/usr/share/gocode/src/github.com/modern-go/reflect2
if ! diff -rq "$reflect2" "$tree/vendor/github.com/modern-go/reflect2" >/dev/null 2>&1; then
  rm -rf "$tree/vendor/github.com/modern-go/reflect2"
  cp -r "$reflect2" "$tree/vendor/github.com/modern-go/reflect2"
fi

say "building ${names[*]} in $tree (first run only, about 7-10 minutes)"
what=""
for n in "${names[@]}"; do what="$what cmd/$n"; done
start=$(date +%s)
(cd "$tree" && make WHAT="${what# }") 2>&1 | while IFS= read -r line; do
  echo "  $line" >&2
done
[ "${PIPESTATUS[0]}" -eq 0 ] || { say "make failed"; exit 1; }
mkdir -p "$dest"
for n in "${names[@]}"; do install -m 0755 "$tree/_output/bin/$n" "$dest/$n"; done
say "built in $(( $(date +%s) - start ))s into $dest"
echo "$dest"
