#!/usr/bin/env bash
# Builds the Python wheel OUTDIR/spotvisor-<version>-py3-none-manylinux_2_17_x86_64.whl:
# BINARY (the portable, fully static spotvisor) as the `spotvisor` command, installed by pip
# into the environment's bin/ as it is (a wheel script: no Python wrapper), and the helper
# package python/spotvisor_helper. <version> is the second word of `BINARY --version`.
# Usage: packaging/wheel/build-wheel.sh BINARY OUTDIR
# Builds offline with setuptools from the pinned PyPI environment (scripts/python-env.sh,
# which makes it the first time): `python -m build --wheel --no-isolation` in a temporary
# staging directory holding pyproject.toml, setup.py and README.md from here, the binary as
# scripts/spotvisor, spotvisor_helper/ and COPYRIGHT (packaging/deb/copyright: the
# licenses of what the static binary contains). Zip timestamps come from SOURCE_DATE_EPOCH
# (default: the checkout's last commit), so the same inputs give the same wheel.
set -euo pipefail

die() { echo "build-wheel.sh: $*" >&2; exit 1; }

usage() { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; }
if [[ $# -eq 1 && ($1 == -h || $1 == --help) ]]; then
  usage
  exit 0
fi
if [[ $# -ne 2 ]]; then
  usage >&2
  exit 64
fi
binary=$1
outdir=$2
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
helper=$repo/python/spotvisor_helper
copyright=$repo/packaging/deb/copyright
platform=manylinux_2_17_x86_64   # setup.py says the same; checked below

[[ -f $binary ]] || die "$binary: no such file"
[[ -x $binary ]] || die "$binary: not executable"
# An x86-64 ELF: the tag promises x86_64.
magic=$(head -c 20 "$binary" | od -An -tx1 | tr -d ' \n')
[[ ${magic:0:8} == 7f454c46 && ${magic:8:2} == 02 && ${magic:36:4} == 3e00 ]] ||
  die "$binary is not an x86-64 ELF executable"
# The manylinux tag holds for a static binary only (the test's auditwheel check refuses
# anything else); a dynamic build is fine for trying the packaging out.
elf_info=$(readelf -lW -dW "$binary" 2>/dev/null || true)
if grep -qE 'Requesting program interpreter|\(NEEDED\)' <<<"$elf_info"; then
  echo "build-wheel.sh: warning: $binary is dynamically linked: the $platform tag does not hold for it" >&2
fi

version_line=$("$binary" --version) || die "$binary --version failed"
version_line=${version_line%%$'\n'*}
[[ $version_line =~ ^spotvisor\ ([^ ]+) ]] ||
  die "$binary --version printed '$version_line', not 'spotvisor <version> ...'"
version=${BASH_REMATCH[1]}
[[ $version =~ ^[0-9]+(\.[0-9]+)*((a|b|rc)[0-9]+)?(\.post[0-9]+)?(\.dev[0-9]+)?$ ]] ||
  die "$binary --version printed '$version_line': '$version' is not a version like 0.1.0"
helper_version=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$helper/__init__.py")
[[ $helper_version == "$version" ]] ||
  die "the binary is $version but $helper/__init__.py says __version__ = \"$helper_version\": make them agree"
subdirs=$(find "$helper" -mindepth 1 -type d ! -name __pycache__)
[[ -z $subdirs ]] || die "$helper has subpackages ($subdirs): list them in pyproject.toml and here"
[[ -f $copyright ]] || die "$copyright is missing (the licenses of what the binary contains)"

py=$("$repo/scripts/python-env.sh" | tail -1) || die "scripts/python-env.sh failed (output above)"
[[ -x $py ]] || die "scripts/python-env.sh printed '$py', which is not a python"

stage=$(mktemp -d "${TMPDIR:-/tmp}/spotvisor-wheel.XXXXXX")
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/src/scripts" "$stage/src/spotvisor_helper" "$stage/dist"
cp "$here/pyproject.toml" "$here/setup.py" "$here/README.md" "$stage/src/"
cp "$copyright" "$stage/src/COPYRIGHT"
cp "$binary" "$stage/src/scripts/spotvisor"
chmod 0755 "$stage/src/scripts/spotvisor"
find "$helper" -maxdepth 1 -type f -name '*.py' -exec cp {} "$stage/src/spotvisor_helper/" \;
chmod 0644 "$stage/src/spotvisor_helper/"*.py "$stage/src/"{pyproject.toml,setup.py,README.md,COPYRIGHT}

if [[ -z ${SOURCE_DATE_EPOCH:-} ]]; then
  SOURCE_DATE_EPOCH=$(git -C "$repo" log -1 --format=%ct 2>/dev/null || date +%s)
fi
export SOURCE_DATE_EPOCH
# Offline: no build isolation (nothing is downloaded), and setuptools' pyproject validation
# must not fetch PyPI's list of classifiers (the trove-classifiers package is not pinned).
if ! (cd "$stage/src" &&
      SPOTVISOR_WHEEL_VERSION=$version VALIDATE_PYPROJECT_NO_NETWORK=1 \
        "$py" -m build --wheel --no-isolation --outdir "$stage/dist" .) >"$stage/build.log" 2>&1; then
  cat "$stage/build.log" >&2
  die "the build failed (its log above)"
fi

name=spotvisor-$version-py3-none-$platform.whl
built=("$stage/dist/"*.whl)
[[ ${#built[@]} -eq 1 && $(basename "${built[0]}") == "$name" ]] ||
  die "expected $name, the build made: $(cd "$stage/dist" && ls)"
mkdir -p "$outdir"
mv -f "${built[0]}" "$outdir/$name"
echo "build-wheel.sh: $outdir/$name ($(stat -c %s "$outdir/$name") bytes)"
