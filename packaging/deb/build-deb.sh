#!/usr/bin/env bash
# Builds the Debian package OUTDIR/spotvisor_<version>_amd64.deb from a spotvisor binary and
# this repository's unit, docs, example job files and Python helper, with dpkg-deb alone.
#   packaging/deb/build-deb.sh BINARY OUTDIR
# BINARY must be the fully static build (the package declares no dependencies); the version
# is the second word of `BINARY --version`. Reproducible: every timestamp is
# SOURCE_DATE_EPOCH (default: the last commit's time), files 0644, executables and
# directories 0755, owned by root. Needs dpkg-deb, help2man, gzip, strip (binutils), git.
# SPOTVISOR_DEB_ALLOW_DYNAMIC=1 packages a dynamically linked binary anyway (trial builds
# only: such a package lacks its Depends and lintian says so).
set -euo pipefail
umask 022

die() {
  echo "build-deb.sh: $*" >&2
  exit 1
}

[[ $# -eq 2 ]] || die "usage: $0 BINARY OUTDIR"
binary="$(readlink -f "$1")"
outdir="$2"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

for tool in dpkg-deb help2man gzip strip readelf; do
  command -v "$tool" >/dev/null || die "$tool is not installed (scripts/setup.sh installs it)"
done
[[ -f "$binary" && -x "$binary" ]] || die "$1: not an executable file"
[[ "$(head -c 4 "$binary" | od -An -c | tr -d ' ')" == '177ELF' ]] || die "$1: not an ELF file"
readelf -h "$binary" | grep -q 'Machine:.*X86-64' || die "$1: not an x86-64 binary (the package is amd64)"
if readelf -l "$binary" | grep -q 'Requesting program interpreter'; then
  [[ "${SPOTVISOR_DEB_ALLOW_DYNAMIC:-0}" == 1 ]] ||
    die "$1 is dynamically linked; the package declares no Depends, so it needs the static build"
  echo "build-deb.sh: warning: $1 is dynamically linked (SPOTVISOR_DEB_ALLOW_DYNAMIC=1): a trial package" >&2
fi

version_line="$("$binary" --version)" || die "$1 --version failed"
read -r name version _ <<<"$version_line"
[[ "$name" == spotvisor ]] || die "$1 --version printed '$version_line', not 'spotvisor VERSION ...'"
[[ "$version" =~ ^[0-9][A-Za-z0-9.+~]*$ ]] || die "'$version' (from $1 --version) is not a Debian version"
commit="$(sed -n 's/.*(commit \([0-9a-f]*\).*/\1/p' <<<"$version_line")"

if [[ -z "${SOURCE_DATE_EPOCH:-}" ]]; then
  SOURCE_DATE_EPOCH="$(git -C "$repo" log -1 --format=%ct 2>/dev/null)" ||
    die "cannot read the last commit's time from $repo; set SOURCE_DATE_EPOCH"
fi
export SOURCE_DATE_EPOCH

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
root="$stage/root"
doc="$root/usr/share/doc/spotvisor"
mkdir -p "$root/DEBIAN" "$root/usr/bin" "$root/lib/systemd/system" "$root/etc/spotvisor" \
  "$doc/examples" "$root/usr/share/man/man1" "$root/usr/share/lintian/overrides" \
  "$root/usr/lib/python3/dist-packages/spotvisor_helper"

# The binary, stripped as dh_strip strips an executable.
strip --remove-section=.comment --remove-section=.note -o "$root/usr/bin/spotvisor" "$binary"

# The unit: the packaged binary's path and the packaged runbook.
unit_src="$repo/systemd/spotvisor@.service"
grep -q '^ExecStart=/usr/local/bin/spotvisor ' "$unit_src" ||
  die "$unit_src: no ExecStart=/usr/local/bin/spotvisor line to rewrite"
grep -q '^Documentation=' "$unit_src" || die "$unit_src: no Documentation= line to rewrite"
sed -e 's|^ExecStart=/usr/local/bin/spotvisor |ExecStart=/usr/bin/spotvisor |' \
  -e 's|^Documentation=.*|Documentation=file:///usr/share/doc/spotvisor/operations.md|' \
  "$unit_src" >"$root/lib/systemd/system/spotvisor@.service"

# Documentation, example job files, copyright, changelog.
cp "$repo/README.md" "$repo/docs/operations.md" "$doc/"
cp "$repo"/config/*.yaml "$doc/examples/"
cp "$here/copyright" "$doc/copyright"
sed -e "s|@VERSION@|$version|g" -e "s|@COMMIT@|${commit:-unknown}|g" \
  -e "s|@DATE@|$(LC_ALL=C date -u -R -d "@$SOURCE_DATE_EPOCH")|g" "$here/changelog.in" |
  gzip -9n >"$doc/changelog.gz" # a native package (no Debian revision): changelog.gz
cp "$here/lintian-overrides" "$root/usr/share/lintian/overrides/spotvisor"

# The man page, from --help and --version (help2man reads SOURCE_DATE_EPOCH for its date),
# with every command's --help under COMMANDS, verbatim (roff-escaped), and spotvisor.h2m's
# sections.
roff_verbatim() { sed -e 's/\\/\\e/g' -e 's/^\([.'\'']\)/\\\&\1/' -e 's/—/\\(em/g'; }
{
  echo "[COMMANDS]"
  "$binary" --help | sed -n '/^Subcommands:/,$p' | awk 'NF > 1 && $1 ~ /^[a-z][a-z-]*$/ { print $1 }' |
    while read -r command; do
      printf '.SS "spotvisor %s"\n.nf\n' "$command"
      "$binary" "$command" --help | roff_verbatim
      printf '.fi\n'
    done
  cat "$here/spotvisor.h2m"
} >"$stage/include.h2m"
grep -q '^\.SS "spotvisor run"' "$stage/include.h2m" || die "$1 --help lists no 'run' command for the man page"
help2man --no-info --no-discard-stderr --locale=C.UTF-8 --section=1 \
  --name="supervise training jobs on spot and preemptible GPU VMs" \
  --include="$stage/include.h2m" --output="$stage/spotvisor.1" "$binary" ||
  die "help2man failed on $binary"
sed -i 's/—/\\(em/g' "$stage/spotvisor.1"
gzip -9n <"$stage/spotvisor.1" >"$root/usr/share/man/man1/spotvisor.1.gz"

# The Python helper, for Debian's python3 (bytecode is compiled by postinst).
cp "$repo"/python/spotvisor_helper/*.py "$root/usr/lib/python3/dist-packages/spotvisor_helper/"

# Modes, times, control files.
find "$root" -type d -exec chmod 0755 {} +
find "$root" -type f -exec chmod 0644 {} +
chmod 0755 "$root/usr/bin/spotvisor"
for script in postinst prerm postrm; do
  install -m 0755 "$here/$script" "$root/DEBIAN/$script"
done
installed_size="$(du -sk --apparent-size --exclude=DEBIAN "$root" | cut -f1)"
sed -e "s|@VERSION@|$version|" -e "s|@INSTALLED_SIZE@|$installed_size|" "$here/control.in" >"$root/DEBIAN/control"
(cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z |
  xargs -0 md5sum) >"$root/DEBIAN/md5sums"
chmod 0644 "$root/DEBIAN/control" "$root/DEBIAN/md5sums"
find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +

mkdir -p "$outdir"
deb="$outdir/spotvisor_${version}_amd64.deb"
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb.tmp" >/dev/null
mv -f "$deb.tmp" "$deb"
echo "$deb"
