#!/usr/bin/env bash
# Makes, once, a minimal Debian 12 root for the package tests (tests/package/) and prints the
# path of the tarball that holds it on its last line. Built with debootstrap (minbase, plus
# systemd, python3 and ca-certificates) from the Debian mirror this machine's apt uses, and
# cached as ${XDG_CACHE_HOME:-$HOME/.cache}/spotvisor/debian-root-<hash of this script>.tar:
# a rerun reuses it in a moment, and a change to this script makes a new one. Concurrent runs
# wait on a lock; the tarball appears under its final name only complete (written to a temp
# name, then renamed). Needs root (debootstrap). SPOTVISOR_DEBIAN_MIRROR overrides the mirror.
set -euo pipefail

die() {
  echo "debian_root.sh: $*" >&2
  exit 1
}

# The mirror that serves bookworm in this machine's apt sources (deb822 .sources files and
# one-line .list files); deb.debian.org when none is found.
apt_mirror() {
  local f uri
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -f "$f" ]] || continue
    # Stanzas are separated by blank lines; the first URI of a stanza whose Suites include
    # "bookworm" itself (not bookworm-security or -updates alone).
    uri="$(awk 'BEGIN { RS = ""; FS = "\n" }
                { uri = ""; ok = 0
                  for (i = 1; i <= NF; i++) {
                    if ($i ~ /^URIs:/) { split($i, a, /[ \t]+/); uri = a[2] }
                    if ($i ~ /^Suites:/) {
                      n = split($i, s, /[ \t]+/)
                      for (j = 2; j <= n; j++) if (s[j] == "bookworm") ok = 1
                    }
                  }
                  if (ok && uri != "") { print uri; exit } }' "$f")"
    [[ -n "$uri" ]] && { echo "$uri"; return; }
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -f "$f" ]] || continue
    uri="$(awk '$1 == "deb" { i = 2; if ($2 ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
                              if ($(i + 1) == "bookworm") { print $i; exit } }' "$f")"
    [[ -n "$uri" ]] && { echo "$uri"; return; }
  done
  echo "http://deb.debian.org/debian"
}

[[ $(id -u) -eq 0 ]] || die "needs root (debootstrap makes device nodes and chroots)"
command -v debootstrap >/dev/null || die "debootstrap is not installed (scripts/setup.sh installs it)"

script="$(readlink -f "${BASH_SOURCE[0]}")"
hash="$(sha256sum "$script" | cut -c1-16)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/spotvisor"
tarball="$cache/debian-root-$hash.tar"
mkdir -p "$cache"

if [[ ! -f "$tarball" ]]; then
  exec 9>"$cache/debian-root-$hash.lock"
  flock -w 3600 9 || die "timed out waiting for another run to finish $tarball"
  if [[ ! -f "$tarball" ]]; then # another run may have made it while this one waited
    # debootstrap mounts proc and sys in the target while it works: unmount whatever is
    # still mounted under a work dir before deleting it, never rm -rf through a mount.
    remove_work_dir() {
      local m
      for m in proc sys dev/pts dev; do
        if mountpoint -q "$1/root/$m" 2>/dev/null; then umount -l "$1/root/$m"; fi
      done
      rm -rf --one-file-system "$1"
    }
    # With the lock held, a work dir left here is from a run that was killed: remove it.
    for stale in "$cache/debian-root-$hash.tmp."*; do
      if [[ -d "$stale" ]]; then remove_work_dir "$stale"; fi
    done
    work="$(mktemp -d "$cache/debian-root-$hash.tmp.XXXXXX")"
    trap 'remove_work_dir "$work"' EXIT
    mirror="${SPOTVISOR_DEBIAN_MIRROR:-$(apt_mirror)}"
    echo "debian_root.sh: debootstrap bookworm from $mirror (once; cached as $tarball)" >&2
    start=$SECONDS
    if ! debootstrap --variant=minbase --include=systemd,python3,ca-certificates bookworm \
      "$work/root" "$mirror" >"$work/debootstrap.log" 2>&1; then
      tail -n 40 "$work/debootstrap.log" >&2
      [[ -f "$work/root/debootstrap/debootstrap.log" ]] && tail -n 40 "$work/root/debootstrap/debootstrap.log" >&2
      die "debootstrap failed (output above)"
    fi
    # What the tests expect of the root: the mirror in its apt sources, no package caches.
    echo "deb $mirror bookworm main" >"$work/root/etc/apt/sources.list"
    rm -rf "$work/root/var/cache/apt/archives/"*.deb "$work/root/var/lib/apt/lists/"*_Packages
    tar --numeric-owner --xattrs --one-file-system -C "$work/root" -cf "$work/root.tar" .
    mv -f "$work/root.tar" "$tarball"
    echo "debian_root.sh: made in $((SECONDS - start)) s" >&2
  fi
fi
echo "$tarball"
