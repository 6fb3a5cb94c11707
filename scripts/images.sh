#!/usr/bin/env bash
# Build the project's container images with podman, offline from any container registry.
#
#   scripts/images.sh base|base-trixie|webhook|toolset|toolset-slim|samples|all [--force]
#   scripts/images.sh setup        # only install/configure podman
#   scripts/images.sh list         # show the project's images and their sizes
#
# No registry is reachable from CI, so the base image is made with debootstrap and imported;
# every other image is built `--from` it. Each build is labelled with a hash of its inputs
# (build context files, build args, base image id) and skipped when an image with the same hash
# already exists, so running this twice costs nothing. --force rebuilds anyway.
#
# Packages come from where this machine's package managers fetch them: the Debian mirror of its
# apt sources (scripts/debian-mirror.sh), the package index of its pip configuration (the
# webhook's dependencies, the toolset's py-spy wheel). The Python >= 3.12 sample needs Debian 13:
# a second base, debootstrap'ed from the same mirror (base-trixie: those samples, and the
# toolset's copy of Debian 13's glibc symbols).
#
# Environment: SIDECAR_DEBUG_CACHE (default ~/.cache/sidecar-debug), DEBIAN_MIRROR and
# DEBIAN_SECURITY_MIRROR (default: from the apt sources), PIP_INDEX_URL (default: pip's
# configuration), HOST_CA_BUNDLE (CA bundle mounted into builds that reach PyPI over HTTPS).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${SIDECAR_DEBUG_CACHE:-$HOME/.cache/sidecar-debug}"
HOST_CA_BUNDLE="${HOST_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"
VERSION="0.1.0"

BASE_IMAGE="localhost/sidecar-debug/debian-base:bookworm"
TRIXIE_BASE_IMAGE="localhost/sidecar-debug/debian-base:trixie"
WEBHOOK_IMAGE="localhost/sidecar-debug/webhook:${VERSION}"
TOOLSET_IMAGE="localhost/sidecar-debug/toolset:${VERSION}"
TOOLSET_SLIM_IMAGE="localhost/sidecar-debug/toolset-slim:${VERSION}"
# Sample apps, one per runtime the flame graphs are tested with (docs/techniques.md). Those whose
# name ends in -trixie are built from the Debian 13 base; go-trixie from samples/go (one
# Dockerfile, Debian 13's Go instead of Debian 12's).
SAMPLE_IMAGES=(node node-official python c c-stripped go java python-trixie go-trixie nginx)
# Samples that run another sample's app: their build context is samples/ (the Dockerfile copies
# e.g. node/app.js), and that app is one of their inputs.
declare -A SAMPLE_APP=([node-official]=samples/node/app.js [c-stripped]=samples/c/hot.c)
INPUTS_LABEL="io.sidecar-debug.inputs"
FORCE=0

log() { printf '[images] %s\n' "$*" >&2; }
die() { printf '[images] error: %s\n' "$*" >&2; exit 1; }

usage() {
  sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
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

# build_base [SUITE IMAGE]: debootstrap SUITE (default bookworm) and import it as IMAGE.
build_base() {
  local suite="${1:-bookworm}" image="${2:-$BASE_IMAGE}"
  setup_podman
  if [ "$FORCE" -eq 0 ] && podman image exists "$image"; then
    log "$image exists (cached)"
    return 0
  fi
  local dir="$CACHE/debootstrap/$suite"
  local tarball="$CACHE/debootstrap/$suite.tar"
  if [ "$FORCE" -eq 1 ] || [ ! -s "$tarball" ]; then
    local mirror security
    mirror="$("$ROOT/scripts/debian-mirror.sh" --suite "$suite")" || exit 1
    security="$("$ROOT/scripts/debian-mirror.sh" --suite "$suite" --security)" || exit 1
    log "debootstrap --variant=minbase $suite from $mirror (a few minutes)"
    as_root rm -rf "$dir"
    mkdir -p "$dir"
    as_root debootstrap --variant=minbase "$suite" "$dir" "$mirror" >"$CACHE/debootstrap/log" 2>&1 \
      || die "debootstrap $suite failed, see $CACHE/debootstrap/log"
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
deb $mirror $suite main
deb $mirror $suite-updates main
deb $security $suite-security main
EOF
    as_root find "$dir/usr/share/doc" -mindepth 2 ! -name copyright ! -type d -delete 2>/dev/null || true
    as_root rm -rf "$dir"/usr/share/man/* "$dir"/usr/share/info/* "$dir"/usr/share/locale/* \
      "$dir"/var/lib/apt/lists/* "$dir"/var/cache/apt/*.bin "$dir"/var/cache/apt/archives/*.deb \
      "$dir"/var/log/* "$dir/debootstrap"
    as_root tar -C "$dir" --numeric-owner -cf "$tarball.tmp" .
    as_root mv "$tarball.tmp" "$tarball"
  fi
  log "podman import -> $image"
  podman import \
    --change 'ENV=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV=LANG=C.UTF-8' \
    --change 'CMD=["/bin/bash"]' \
    "$tarball" "$image" >/dev/null
  log "built $image"
}

# podman_build IMAGE HASH CONTEXT [podman build args...]
podman_build() {
  local image="$1" hash="$2" context="$3"; shift 3
  log "building $image"
  local logfile="$CACHE/build-logs/${image##*/}.log"
  mkdir -p "$CACHE/build-logs"
  # Intermediate images of multi-stage builds are untagged: no `image prune` here, it would
  # throw away the layer cache that makes the next build quick.
  if ! podman build --from "${FROM_IMAGE:-$BASE_IMAGE}" --label "$INPUTS_LABEL=$hash" --tag "$image" \
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
  local pip_args=()
  read -r -a pip_args <<<"$(pip_index_args)"
  podman_build "$WEBHOOK_IMAGE" "$hash" "$ROOT" --file "$ROOT/Dockerfile" "$(ca_mount)" \
    "${pip_args[@]}"
}

# pip_index_args: `--build-arg PIP_INDEX_URL=...` for the package index this machine's pip is
# configured with (a mirror, a proxy), unless PIP_INDEX_URL says otherwise; nothing when none
# is configured (pip's own default inside the build too).
pip_index_args() {
  local index="${PIP_INDEX_URL:-$(python3 -m pip config get global.index-url 2>/dev/null || true)}"
  if [[ "$index" == http* ]]; then printf -- '--build-arg PIP_INDEX_URL=%s' "$index"; fi
}

build_toolset_target() {
  local target="$1" image="$2"
  build_base
  # Debian 13's glibc symbols come from the trixie base (toolset/Dockerfile).
  build_base trixie "$TRIXIE_BASE_IMAGE"
  local hash pip_args=()
  read -r -a pip_args <<<"$(pip_index_args)"
  hash="$(inputs_hash "base=$(image_id "$BASE_IMAGE") trixie=$(image_id "$TRIXIE_BASE_IMAGE") target=$target${pip_args[*]:+ ${pip_args[*]}}" toolset)"
  if up_to_date "$image" "$hash"; then
    log "$image up to date"
    return 0
  fi
  podman_build "$image" "$hash" "$ROOT/toolset" --file "$ROOT/toolset/Dockerfile" \
    --target "$target" --build-arg "TRIXIE_BASE_IMAGE=$TRIXIE_BASE_IMAGE" "${pip_args[@]}" \
    "$(ca_mount)"
}

# build_samples [NAME...]: the sample apps (default: all). Each prints its build time.
build_samples() {
  build_base
  local name dir image hash base started context names=("$@") args extra=()
  [ "${#names[@]}" -gt 0 ] || names=("${SAMPLE_IMAGES[@]}")
  for name in "${names[@]}"; do
    dir="$name" args=()
    if [ "$name" = go-trixie ]; then
      # Debian 13's golang-go, whatever its version; both stages FROM the trixie base.
      dir=go args=(--build-arg GOLANG_VERSION= --build-arg "BASE_IMAGE=$TRIXIE_BASE_IMAGE")
    fi
    [ -d "$ROOT/samples/$dir" ] || die "no sample $name (samples/: ${SAMPLE_IMAGES[*]})"
    image="localhost/sidecar-debug/sample-$name:$VERSION"
    base="$BASE_IMAGE"
    if [[ "$name" == *-trixie ]]; then
      build_base trixie "$TRIXIE_BASE_IMAGE"
      base="$TRIXIE_BASE_IMAGE"
    fi
    context="$ROOT/samples/$dir"
    [ -z "${SAMPLE_APP[$name]:-}" ] || context="$ROOT/samples"
    # A sample that installs from PyPI (it declares PIP_INDEX_URL) gets this machine's index.
    extra=()
    if grep -q '^ARG PIP_INDEX_URL' "$ROOT/samples/$dir/Dockerfile"; then
      read -r -a extra <<<"$(pip_index_args)"
      extra+=("$(ca_mount)")
    fi
    hash="$(inputs_hash "base=$(image_id "$base") ${args[*]}${extra[*]:+ ${extra[*]}}" \
      "samples/$dir" ${SAMPLE_APP[$name]:+"${SAMPLE_APP[$name]}"})"
    if up_to_date "$image" "$hash"; then
      log "$image up to date"
      continue
    fi
    started=$SECONDS
    FROM_IMAGE="$base" podman_build "$image" "$hash" "$context" \
      --file "$ROOT/samples/$dir/Dockerfile" "${args[@]}" "${extra[@]}"
    log "sample $name: $((SECONDS - started)) s"
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
    base-trixie) build_base trixie "$TRIXIE_BASE_IMAGE" ;;
    webhook) build_webhook ;;
    toolset) build_toolset_target full "$TOOLSET_IMAGE" ;;
    toolset-slim) build_toolset_target slim "$TOOLSET_SLIM_IMAGE" ;;
    samples) build_samples ;;
    sample-*) build_samples "${cmd#sample-}" ;;
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
