#!/usr/bin/env bash
# Print the Debian archive this machine's apt is configured for, so that builds fetch packages
# from the mirror the machine uses (a company mirror, a caching proxy) and no host is written
# into the project's code.
#
#   scripts/debian-mirror.sh              the archive, e.g. the URL of `deb URL bookworm main`
#   scripts/debian-mirror.sh --security   the security archive (bookworm-security)
#   scripts/debian-mirror.sh --suite S    prefer entries for suite S (default bookworm)
#
# DEBIAN_MIRROR and DEBIAN_SECURITY_MIRROR, when set, are printed instead. The sources read are
# apt's own (apt-config: Dir::Etc::sourcelist and Dir::Etc::sourceparts, one-line *.list and
# deb822 *.sources files); APT_SOURCES (files or folders, space separated) replaces them.
# Exit status 1, with what to set, when no Debian archive is configured.
set -euo pipefail

want=archive
suite=bookworm
while [ $# -gt 0 ]; do
  case "$1" in
    --security) want=security ;;
    --suite) suite="${2:?--suite needs a value}"; shift ;;
    -h|--help) sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "debian-mirror: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

if [ "$want" = archive ] && [ -n "${DEBIAN_MIRROR:-}" ]; then
  echo "${DEBIAN_MIRROR%/}"; exit 0
fi
if [ "$want" = security ] && [ -n "${DEBIAN_SECURITY_MIRROR:-}" ]; then
  echo "${DEBIAN_SECURITY_MIRROR%/}"; exit 0
fi

# The files apt reads.
sources=()
if [ -n "${APT_SOURCES:-}" ]; then
  read -r -a sources <<<"$APT_SOURCES"
else
  list=/etc/apt/sources.list parts=/etc/apt/sources.list.d
  if command -v apt-config >/dev/null; then
    eval "$(apt-config shell list Dir::Etc::sourcelist/f parts Dir::Etc::sourceparts/d)"
  fi
  sources=("$list" "$parts")
fi
files=()
for source in "${sources[@]}"; do
  if [ -d "$source" ]; then
    for file in "$source"/*.list "$source"/*.sources; do [ -f "$file" ] && files+=("$file"); done
  elif [ -f "$source" ]; then
    files+=("$source")
  fi
done

# entries: one line per enabled `deb` entry and suite: URI SUITE (in the order apt reads them).
entries() {
  local file
  for file in "${files[@]}"; do
    case "$file" in
      *.sources)
        # deb822 stanzas: Types, URIs, Suites, Enabled; continuation lines start with a blank.
        awk '
          function flush(   t, u, s, nt, nu, ns, i, j, k, isdeb) {
            if (enabled != "no") {
              nt = split(types, t, /[ \t]+/); isdeb = 0
              for (i = 1; i <= nt; i++) if (t[i] == "deb") isdeb = 1
              if (isdeb) {
                nu = split(uris, u, /[ \t]+/); ns = split(suites, s, /[ \t]+/)
                for (j = 1; j <= nu; j++) for (k = 1; k <= ns; k++)
                  if (u[j] != "" && s[k] != "") print u[j], s[k]
              }
            }
            types = ""; uris = ""; suites = ""; enabled = ""; field = ""
          }
          /^[ \t]*#/ { next }
          /^[ \t]*$/ { flush(); next }
          /^[ \t]/ {
            if (field == "types") types = types " " $0
            else if (field == "uris") uris = uris " " $0
            else if (field == "suites") suites = suites " " $0
            next
          }
          {
            colon = index($0, ":"); if (colon == 0) next
            field = tolower(substr($0, 1, colon - 1)); value = substr($0, colon + 1)
            if (field == "types") types = value
            else if (field == "uris") uris = value
            else if (field == "suites") suites = value
            else if (field == "enabled") { gsub(/[ \t]/, "", value); enabled = tolower(value) }
          }
          END { flush() }' "$file"
        ;;
      *)
        # One-line entries: deb [options] URI SUITE [COMPONENT...]
        awk '
          { sub(/#.*/, "") }
          $1 != "deb" { next }
          {
            i = 2
            if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
            if (i + 1 <= NF) print $i, $(i + 1)
          }' "$file"
        ;;
    esac
  done | sed 's/[[:space:]]\{1,\}/ /g; s/^ //'
}

# mirror+file:PATH names a file listing mirrors (Debian's cloud images): its first URL.
resolve() {
  local uri="$1"
  case "$uri" in
    mirror+file:*)
      uri="$(awk '!/^[ \t]*(#|$)/ { print $1; exit }' "${uri#mirror+file:}" 2>/dev/null || true)"
      ;;
  esac
  printf '%s\n' "${uri%/}"
}

codenames="buster bullseye bookworm trixie forky duke sid oldoldstable oldstable stable testing unstable"
is_debian_suite() {  # a Debian release, not Ubuntu's or a third party's
  local word
  for word in $codenames; do [ "$1" = "$word" ] && return 0; done
  return 1
}

pick() {
  local uri entry_suite base first="" exact=""
  while read -r uri entry_suite; do
    case "$want" in
      archive)
        base="${entry_suite%-updates}"; base="${base%-backports}"
        is_debian_suite "$base" || continue
        [ -z "$first" ] && first="$uri"
        [ "$entry_suite" = "$suite" ] && [ -z "$exact" ] && exact="$uri"
        ;;
      security)
        base="${entry_suite%-security}"; base="${base%/updates}"
        [ "$base" != "$entry_suite" ] && is_debian_suite "$base" || continue
        [ -z "$first" ] && first="$uri"
        [ "$base" = "$suite" ] && [ -z "$exact" ] && exact="$uri"
        ;;
    esac
  done < <(entries)
  if [ -n "$exact" ]; then resolve "$exact"; elif [ -n "$first" ]; then resolve "$first"; fi
}

found="$(pick)"
if [ -z "$found" ] && [ "$want" = security ]; then
  # No security entry: the archive's sibling, as Debian's mirrors lay them out.
  archive="$(DEBIAN_MIRROR="${DEBIAN_MIRROR:-}" "${BASH_SOURCE[0]}" --suite "$suite" 2>/dev/null || true)"
  case "$archive" in
    */debian) found="${archive%/debian}/debian-security" ;;
  esac
fi
if [ -z "$found" ]; then
  variable=DEBIAN_MIRROR
  [ "$want" = security ] && variable=DEBIAN_SECURITY_MIRROR
  echo "debian-mirror: no Debian ${want} in the apt sources (${files[*]:-none found}); set" \
    "$variable to the URL of a Debian ${want} mirror" >&2
  exit 1
fi
echo "$found"
