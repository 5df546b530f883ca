# Sourced by scripts/python-env.sh and scripts/layered-env.sh: make a cached environment
# once, whatever else runs beside it.
#
#   make_once NAME DIR MAKE
#
# Under the lock DIR/../NAME.lock (one maker at a time: test runs side by side share the
# cache), unless DIR/.complete exists: removes DIR (a half-made one, from a run that was
# interrupted), runs the shell function MAKE (which fills DIR), marks DIR complete and says
# on stderr how long it took.
make_once() {
  local name=$1 dir=$2 make=$3 start
  mkdir -p "$(dirname "$dir")"
  exec 9>"$(dirname "$dir")/$name.lock"
  flock 9
  if [[ ! -f "$dir/.complete" ]]; then
    rm -rf "$dir"
    start=$(date +%s)
    "$make"
    touch "$dir/.complete"
    echo "$name: ready in $(($(date +%s) - start)) s" >&2
  fi
  exec 9>&-
}
