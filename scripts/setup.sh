#!/usr/bin/env bash
# Installs everything spotvisor needs to build, test and demo on Debian 12 (as root, or
# with sudo). Idempotent and quick when everything is already there: apt is only asked
# for what is missing. Packages come from Debian's archive; the npm clients used by the
# protocol tests come from the npm registry (tests/npm/setup.sh).
set -euo pipefail

packages=(
  # build
  build-essential cmake ninja-build ccache pkg-config git
  # libraries (README: dependency table)
  libboost1.81-dev libboost-filesystem1.81-dev libspdlog-dev libyaml-cpp-dev libcli11-dev
  nlohmann-json3-dev libxxhash-dev libssl-dev
  # tests
  libgtest-dev libgmock-dev clang libclang-rt-14-dev
  python3 python3-torch python3-numpy
  xxhash unzip
  # benchmarks: the alternatives users would pick
  supervisor
)
# Extra packages other parts of the suite need are listed one per line here.
extra_file="$(dirname "$0")/setup-packages.txt"
if [[ -f "$extra_file" ]]; then
  while read -r pkg _; do
    [[ -z "$pkg" || "$pkg" == \#* ]] || packages+=("$pkg")
  done <"$extra_file"
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  missing+=(nodejs npm)
fi

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [[ $(id -u) -eq 0 ]] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "setup: all packages present"
fi
