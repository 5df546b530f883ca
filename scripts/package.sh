#!/usr/bin/env bash
# What users install, built into dist/ (README "Install"):
#   spotvisor-<version>-linux-x86_64 (+ .sha256)  the portable binary: fully static, stripped
#   spotvisor_<version>_amd64.deb                 the Debian package (packaging/deb)
#   spotvisor-<version>-py3-none-manylinux_2_17_x86_64.whl   the wheel (packaging/wheel)
# Usage: scripts/package.sh [--out DIR]     (SPOTVISOR_WERROR=ON makes warnings errors)
# Needs the packages of scripts/setup.sh; the wheel needs the PyPI environment, which
# scripts/python-env.sh makes (and caches) when it is missing.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
out=$here/dist
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=${2:?--out needs a directory}; shift 2 ;;
    -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "package.sh: unknown argument '$1' (see --help)" >&2; exit 64 ;;
  esac
done
build=$here/build-static
max_bytes=$((9 * 1024 * 1024))

mkdir -p "$build"
cmake -S "$here" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSPOTVISOR_STATIC=ON \
  -DSPOTVISOR_TESTS=OFF -DSPOTVISOR_WERROR="${SPOTVISOR_WERROR:-OFF}" </dev/null >"$build/package-cmake.log" 2>&1 ||
  { cat "$build/package-cmake.log" >&2; echo "package.sh: cmake failed (log above)" >&2; exit 1; }
ninja -C "$build" spotvisor </dev/null

version=$("$build/spotvisor" --version | awk '{print $2}')
[ -n "$version" ] || { echo "package.sh: $build/spotvisor --version printed no version" >&2; exit 1; }
mkdir -p "$out"
name=spotvisor-$version-linux-x86_64
strip --strip-all -o "$out/$name" "$build/spotvisor"
# Portable means no program interpreter and no shared library: refuse anything else.
if readelf -l "$out/$name" | grep -q 'Requesting program interpreter' || readelf -d "$out/$name" | grep -q NEEDED; then
  echo "package.sh: $out/$name is not fully static:" >&2
  readelf -ld "$out/$name" | grep -E 'interpreter|NEEDED' >&2
  exit 1
fi
size=$(stat -c %s "$out/$name")
if [ "$size" -gt "$max_bytes" ]; then
  echo "package.sh: $out/$name is $size bytes, over the 9 MiB we promise" >&2
  exit 1
fi
(cd "$out" && sha256sum "$name" >"$name.sha256")
echo "package.sh: $out/$name ($size bytes)"

"$here/packaging/deb/build-deb.sh" "$out/$name" "$out"
"$here/packaging/wheel/build-wheel.sh" "$out/$name" "$out"
ls -l "$out"
