#!/usr/bin/env bash
# Build the project's container images with podman, offline from any container registry.
#
#   scripts/images.sh base|webhook|toolset|toolset-slim|samples|all [--force]
#   scripts/images.sh setup        # only install/configure podman
#   scripts/images.sh list         # show the project's images and their sizes
#
# No registry is reachable from CI, so the base image is made with debootstrap and imported;
# every other image is built `--from` it. Each build is labelled with a hash of its inputs
# (build context files, build args, base image id) and skipped when an image with the same hash
# already exists, so running this twice costs nothing. --force rebuilds anyway.
#
# Packages come from where this machine's package managers fetch them: the Debian mirror of its
# apt sources (scripts/debian-mirror.sh), the npm registry of its npm configuration (the toolset's
# d3-flame-graph is `npm pack`ed on the host when npm is installed, else inside the build).
#
# Environment: SIDECAR_DEBUG_CACHE (default ~/.cache/sidecar-debug), DEBIAN_MIRROR and
# DEBIAN_SECURITY_MIRROR (default: from the apt sources), NPM_REGISTRY (only for a build without
# npm on the host), HOST_CA_BUNDLE (CA bundle mounted into builds that reach PyPI/npm over HTTPS).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${SIDECAR_DEBUG_CACHE:-$HOME/.cache/sidecar-debug}"
HOST_CA_BUNDLE="${HOST_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"
VERSION="0.1.0"

BASE_IMAGE="localhost/sidecar-debug/debian-base:bookworm"
WEBHOOK_IMAGE="localhost/sidecar-debug/webhook:${VERSION}"
TOOLSET_IMAGE="localhost/sidecar-debug/toolset:${VERSION}"
TOOLSET_SLIM_IMAGE="localhost/sidecar-debug/toolset-slim:${VERSION}"
SAMPLE_IMAGES=(node python c)
INPUTS_LABEL="io.sidecar-debug.inputs"
FORCE=0

log() { printf '[images] %s\n' "$*" >&2; }
die() { printf '[images] error: %s\n' "$*" >&2; exit 1; }

usage() {
  sed -n '2,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# --- podman setup --------------------------------------------------------------------------

ensure_packages() {
  local missing=()
  command -v podman >/dev/null || missing+=(podman)
  command -v debootstrap >/dev/null || missing+=(debootstrap)
  command -v runc >/dev/null || missing+=(runc)
  if [ "${#missing[@]}" -gt 0 ]; then
    log "installing ${missing[*]}"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
}

# set_toml_key FILE SECTION KEY VALUE: set KEY = VALUE under [SECTION] unless KEY is already set
# there (an operator's own choice wins). containers.conf is TOML: a section may appear only once.
set_toml_key() {
  local file="$1" section="$2" key="$3" value="$4"
  as_root touch "$file"
  if awk -v s="[$section]" -v k="$key" '
      /^[[:space:]]*\[/ { insec = ($1 == s) }
      insec && $1 == k { found = 1 }
      END { exit !found }' "$file"; then
    return 0
  fi
  local tmp
  tmp="$(mktemp)"
  if grep -q "^[[:space:]]*\[$section\][[:space:]]*$" "$file"; then
    awk -v s="[$section]" -v line="$key = $value" '
      { print } $0 ~ "^[[:space:]]*\\[" && $1 == s { print line }' "$file" >"$tmp"
  else
    { cat "$file"; printf '\n[%s]\n%s = %s\n' "$section" "$key" "$value"; } >"$tmp"
  fi
  as_root install -m 0644 "$tmp" "$file"
  rm -f "$tmp"
  log "containers.conf: [$section] $key = $value"
}

setup_podman() {
  ensure_packages
  local conf=/etc/containers/containers.conf
  as_root mkdir -p /etc/containers
  # crun fails on hosts with hybrid cgroups; runc works. Default ulimits keep podman from
  # copying the host's huge nofile limit into containers (some tools choke on it).
  set_toml_key "$conf" engine runtime '"runc"'
  set_toml_key "$conf" containers default_ulimits '["nofile=1024:1024", "nproc=4096:4096"]'
}

# --- input hashing -------------------------------------------------------------------------

# inputs_hash EXTRA PATH...: sha256 over the content and names of the files under PATHs
# (relative to ROOT), plus EXTRA (build args, base image id).
inputs_hash() {
  local extra="$1"; shift
  (
    cd "$ROOT"
    printf '%s\n' "$extra"
    local existing=() path
    for path in "$@"; do [ -e "$path" ] && existing+=("$path"); done
    find "${existing[@]}" -type f \
      ! -path '*/__pycache__/*' ! -name '*.pyc' ! -path '*/.mypy_cache/*' ! -path '*.egg-info/*' \
      -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum
  ) | sha256sum | cut -c1-32
}

image_label() {
  podman image inspect --format "{{ index .Labels \"$INPUTS_LABEL\" }}" "$1" 2>/dev/null || true
}

image_id() {
  podman image inspect --format '{{ .Id }}' "$1" 2>/dev/null || true
}

# inputs_file IMAGE: where the inputs hash of the image's last build is kept beside its id. The
# label alone is not enough: when every layer is cached, podman reuses the earlier image, whose
# label names the earlier inputs (e.g. after a change to a file the build does not use).
inputs_file() {
  printf '%s/inputs/%s\n' "$CACHE" "${1##*/}"
}

up_to_date() {
  local image="$1" hash="$2" file
  [ "$FORCE" -eq 0 ] || return 1
  [ "$(image_label "$image")" = "$hash" ] && return 0
  file="$(inputs_file "$image")"
  [ -f "$file" ] && [ "$(cat "$file")" = "$hash $(image_id "$image")" ]
}

# --- images --------------------------------------------------------------------------------

build_base() {
  setup_podman
  if [ "$FORCE" -eq 0 ] && podman image exists "$BASE_IMAGE"; then
    log "$BASE_IMAGE exists (cached)"
    return 0
  fi
  local dir="$CACHE/debootstrap/bookworm"
  local tarball="$CACHE/debootstrap/bookworm.tar"
  if [ "$FORCE" -eq 1 ] || [ ! -s "$tarball" ]; then
    local mirror security
    mirror="$("$ROOT/scripts/debian-mirror.sh" --suite bookworm)" || exit 1
    security="$("$ROOT/scripts/debian-mirror.sh" --suite bookworm --security)" || exit 1
    log "debootstrap --variant=minbase bookworm from $mirror (a few minutes)"
    as_root rm -rf "$dir"
    mkdir -p "$dir"
    as_root debootstrap --variant=minbase bookworm "$dir" "$mirror" >"$CACHE/debootstrap/log" 2>&1 \
      || die "debootstrap failed, see $CACHE/debootstrap/log"
    # Same slimming as Docker's debian:bookworm-slim: no docs, man pages or translations from
    # later installs, and no downloaded package lists or archives in the image.
    as_root tee "$dir/etc/dpkg/dpkg.cfg.d/docker-slim" >/dev/null <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
EOF
    as_root tee "$dir/etc/apt/apt.conf.d/docker-clean" >/dev/null <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
APT::Install-Recommends "false";
APT::Install-Suggests "false";
EOF
    as_root tee "$dir/etc/apt/sources.list" >/dev/null <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb $security bookworm-security main
EOF
    as_root find "$dir/usr/share/doc" -mindepth 2 ! -name copyright ! -type d -delete 2>/dev/null || true
    as_root rm -rf "$dir"/usr/share/man/* "$dir"/usr/share/info/* "$dir"/usr/share/locale/* \
      "$dir"/var/lib/apt/lists/* "$dir"/var/cache/apt/*.bin "$dir"/var/cache/apt/archives/*.deb \
      "$dir"/var/log/* "$dir/debootstrap"
    as_root tar -C "$dir" --numeric-owner -cf "$tarball.tmp" .
    as_root mv "$tarball.tmp" "$tarball"
  fi
  log "podman import -> $BASE_IMAGE"
  podman import \
    --change 'ENV=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV=LANG=C.UTF-8' \
    --change 'CMD=["/bin/bash"]' \
    "$tarball" "$BASE_IMAGE" >/dev/null
  log "built $BASE_IMAGE"
}

# podman_build IMAGE HASH CONTEXT [podman build args...]
podman_build() {
  local image="$1" hash="$2" context="$3"; shift 3
  log "building $image"
  local logfile="$CACHE/build-logs/${image##*/}.log"
  mkdir -p "$CACHE/build-logs"
  # Intermediate images of multi-stage builds are untagged: no `image prune` here, it would
  # throw away the layer cache that makes the next build quick.
  if ! podman build --from "$BASE_IMAGE" --label "$INPUTS_LABEL=$hash" --tag "$image" \
    --layers "$@" "$context" >"$logfile" 2>&1; then
    tail -n 40 "$logfile" >&2
    die "building $image failed; full log: $logfile"
  fi
  mkdir -p "$CACHE/inputs"
  printf '%s %s\n' "$hash" "$(image_id "$image")" >"$(inputs_file "$image")"
  log "built $image ($(image_size "$image"))"
}

image_size() {
  podman image inspect --format '{{ .Size }}' "$1" 2>/dev/null \
    | awk '{ printf "%.0f MB", $1 / 1000 / 1000 }'
}

ca_mount() {
  [ -r "$HOST_CA_BUNDLE" ] || die "CA bundle $HOST_CA_BUNDLE not readable (set HOST_CA_BUNDLE)"
  printf -- '--volume=%s:/usr/local/share/ca-certificates/host.crt:ro' "$HOST_CA_BUNDLE"
}

build_webhook() {
  build_base
  local hash
  hash="$(inputs_hash "base=$(image_id "$BASE_IMAGE")" Dockerfile .dockerignore pyproject.toml README.md webhook)"
  if up_to_date "$WEBHOOK_IMAGE" "$hash"; then
    log "$WEBHOOK_IMAGE up to date"
    return 0
  fi
  # The package index the machine's pip is configured with (a mirror, a proxy), unless
  # PIP_INDEX_URL says otherwise; none configured means pip's own default inside the build too.
  local index="${PIP_INDEX_URL:-$(python3 -m pip config get global.index-url 2>/dev/null || true)}"
  local pip_args=()
  if [[ "$index" == http* ]]; then pip_args=(--build-arg "PIP_INDEX_URL=$index"); fi
  podman_build "$WEBHOOK_IMAGE" "$hash" "$ROOT" --file "$ROOT/Dockerfile" "$(ca_mount)" \
    "${pip_args[@]}"
}

# dockerfile_arg FILE NAME: the default value of `ARG NAME=VALUE` in a Dockerfile.
dockerfile_arg() {
  sed -n "s/^ARG $2=//p" "$1" | head -n 1
}

# pack_toolset_npm_packages: `npm pack` d3-flame-graph into toolset/vendor/ with this machine's
# npm and its configuration (registry, proxy, CA), its digest checked against the Dockerfile's.
# Without npm here the Dockerfile packs it with Debian's npm instead (NPM_REGISTRY applies).
pack_toolset_npm_packages() {
  local dockerfile="$ROOT/toolset/Dockerfile" vendor="$ROOT/toolset/vendor"
  local version digest tarball tmp
  version="$(dockerfile_arg "$dockerfile" D3_FLAME_GRAPH_VERSION)"
  digest="$(dockerfile_arg "$dockerfile" D3_FLAME_GRAPH_SHA256)"
  tarball="d3-flame-graph-$version.tgz"
  if [ -s "$vendor/$tarball" ] \
    && echo "$digest  $vendor/$tarball" | sha256sum -c --status -; then
    return 0
  fi
  rm -f "$vendor/$tarball"
  if ! command -v npm >/dev/null; then
    log "npm is not installed here: the toolset build packs d3-flame-graph with Debian's npm"
    return 0
  fi
  log "npm pack d3-flame-graph@$version (registry: $(npm config get registry 2>/dev/null))"
  tmp="$(mktemp -d)"
  if ! (cd "$tmp" && npm pack --loglevel=error "d3-flame-graph@$version" >/dev/null 2>npm.log); then
    # npm's own reason: its `code` line and the first message line (not the stack trace).
    grep -E '^npm (error|ERR!) (code |[A-Za-z]*Error|[0-9]{3} |E[A-Z]+ |404)' "$tmp/npm.log" \
      | head -n 3 >&2 || true
    rm -rf "$tmp"
    die "npm pack d3-flame-graph@$version failed: check npm's registry and proxy settings" \
      "(npm config get registry), or uninstall npm to pack it inside the build"
  fi
  if ! echo "$digest  $tmp/$tarball" | sha256sum -c --status -; then
    rm -rf "$tmp"
    die "d3-flame-graph@$version from npm's registry does not have the digest pinned in" \
      "toolset/Dockerfile (D3_FLAME_GRAPH_SHA256): a registry serving another tarball?"
  fi
  mkdir -p "$vendor"
  mv "$tmp/$tarball" "$vendor/$tarball"
  rm -rf "$tmp"
}

build_toolset_target() {
  local target="$1" image="$2"
  build_base
  pack_toolset_npm_packages
  local hash npm_args=()
  if [ -n "${NPM_REGISTRY:-}" ]; then npm_args=(--build-arg "NPM_REGISTRY=$NPM_REGISTRY"); fi
  hash="$(inputs_hash "base=$(image_id "$BASE_IMAGE") target=$target${npm_args[*]:+ ${npm_args[*]}}" toolset)"
  if up_to_date "$image" "$hash"; then
    log "$image up to date"
    return 0
  fi
  podman_build "$image" "$hash" "$ROOT/toolset" --file "$ROOT/toolset/Dockerfile" \
    --target "$target" "${npm_args[@]}" "$(ca_mount)"
}

build_samples() {
  build_base
  local name image hash
  for name in "${SAMPLE_IMAGES[@]}"; do
    image="localhost/sidecar-debug/sample-$name:$VERSION"
    hash="$(inputs_hash "base=$(image_id "$BASE_IMAGE")" "samples/$name")"
    if up_to_date "$image" "$hash"; then
      log "$image up to date"
      continue
    fi
    podman_build "$image" "$hash" "$ROOT/samples/$name" --file "$ROOT/samples/$name/Dockerfile"
  done
}

list_images() {
  podman images --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep '^localhost/sidecar-debug/' || true
}

main() {
  [ $# -ge 1 ] || { usage; exit 2; }
  local cmd="$1"; shift
  while [ $# -gt 0 ]; do
    case "$1" in
      --force) FORCE=1 ;;
      -h|--help) usage; exit 0 ;;
      *) die "unknown option $1" ;;
    esac
    shift
  done
  mkdir -p "$CACHE/debootstrap"
  case "$cmd" in
    setup) setup_podman ;;
    base) build_base ;;
    webhook) build_webhook ;;
    toolset) build_toolset_target full "$TOOLSET_IMAGE" ;;
    toolset-slim) build_toolset_target slim "$TOOLSET_SLIM_IMAGE" ;;
    samples) build_samples ;;
    all)
      build_webhook
      build_toolset_target full "$TOOLSET_IMAGE"
      build_toolset_target slim "$TOOLSET_SLIM_IMAGE"
      build_samples
      list_images
      ;;
    list) list_images ;;
    -h|--help|help) usage ;;
    *) usage; exit 2 ;;
  esac
}

main "$@"
