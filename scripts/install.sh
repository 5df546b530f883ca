#!/bin/sh
# Installs a built spotvisor: the binary, the systemd unit template, example job files
# and the operations runbook. Usage (as root, from the repository root):
#   scripts/install.sh [BUILD_DIR] [PREFIX]        # defaults: build, /usr/local
# Then: cp /usr/local/share/spotvisor/examples/aws.yaml /etc/spotvisor/JOB.yaml, edit it,
#       systemctl daemon-reload && systemctl enable --now spotvisor@JOB
set -eu

build_dir=${1:-build}
prefix=${2:-/usr/local}
here=$(cd "$(dirname "$0")/.." && pwd)

if [ ! -x "$build_dir/spotvisor" ]; then
  echo "install.sh: $build_dir/spotvisor not found; build first: cmake -S . -B $build_dir -G Ninja -DCMAKE_BUILD_TYPE=Release && ninja -C $build_dir spotvisor" >&2
  exit 1
fi

# cmake --install puts the binary, unit, examples and runbook under the prefix.
cmake --install "$build_dir" --prefix "$prefix"

unit_dir=/etc/systemd/system
if [ "$prefix" != /usr/local ]; then
  # The unit's ExecStart names /usr/local/bin; point it at this prefix.
  sed "s|/usr/local/bin/spotvisor|$prefix/bin/spotvisor|" "$here/systemd/spotvisor@.service" > "$unit_dir/spotvisor@.service"
else
  install -m 0644 "$here/systemd/spotvisor@.service" "$unit_dir/spotvisor@.service"
fi
install -d -m 0750 /etc/spotvisor
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
  systemctl daemon-reload
fi
echo "installed spotvisor to $prefix/bin, the unit to $unit_dir/spotvisor@.service;"
echo "examples: $prefix/share/spotvisor/examples/ -> copy one to /etc/spotvisor/JOB.yaml"
