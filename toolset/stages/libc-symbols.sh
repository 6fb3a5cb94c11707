#!/bin/sh
# The symbol tables of this Debian release's glibc (libc, libm, the dynamic loader), by
# build-id under /out: what names glibc's static functions (__libc_start_call_main is in every
# stack) in an app on the same glibc build. libc6-dbg of the installed glibc version, its
# DWARF dropped (objcopy --strip-debug: 11 MB become about 1 MB); nothing of it but /out
# reaches the toolset image. Run in a stage FROM the release's base (toolset/Dockerfile).
set -eu
apt-get update
# The base's own glibc build (the samples' and every app built FROM the same base); when the
# archive no longer has it (a point release replaced it), the current one.
version="$(dpkg-query -W -f='${Version}' libc6)"
apt-get install -y --no-install-recommends binutils "libc6-dbg=$version" \
  || apt-get install -y --no-install-recommends binutils libc6-dbg
for lib in libc.so.6 libm.so.6 ld-linux-x86-64.so.2; do
  id="$(readelf -n "/usr/lib/x86_64-linux-gnu/$lib" | sed -n 's/.*Build ID: //p')"
  dir="${id%"${id#??}"}" rest="${id#??}"
  [ -n "$dir" ] && [ -n "$rest" ] || { echo "no build-id in $lib" >&2; exit 1; }
  mkdir -p "/out/$dir"
  objcopy --strip-debug "/usr/lib/debug/.build-id/$dir/$rest.debug" "/out/$dir/$rest.debug"
done
rm -rf /var/lib/apt/lists/*
