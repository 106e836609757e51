#!/usr/bin/env bash
# Scale bench: a suite of TESTS tests (one cassette folder each, INTERACTIONS calls of ~1 KB
# answers, written as the tool writes them: valid, sealed, committed), then the wall time and
# peak RSS of a whole-suite replay (`cargo llmreplay test`) and of the offline commands a pull
# request runs (`status`, `diff --format markdown`, `review --list`) on the clean tree and with
# MODIFIED folders changed.
#   bench/scale.sh [TESTS] [INTERACTIONS] [MODIFIED]        (defaults 10000, 10 and TESTS/10)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tests=${1:-10000}
calls=${2:-10}
modified=${3:-$((tests / 10))}
cargo build --release --quiet -p cargo-llmreplay
cargo build --release --quiet -p llmreplay-cassettes --example scale_suite
# CARGO_LLMREPLAY measures another build (an older one, for a before and after).
bin="${CARGO_LLMREPLAY:-$root/target/release/cargo-llmreplay}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
suite="$work/suite"
mkdir -p "$suite"
"$root/target/release/examples/scale_suite" "$suite" "$tests" "$calls"
cd "$suite"
git init -q .
git add -A
git -c user.name=bench -c user.email=bench@localhost commit -qm suite
export CARGO_TARGET_DIR="$suite/target"
unset CI LLMREPLAY_MODE
echo "suite: $tests tests x $calls interactions, $(du -sh tests/cassettes | cut -f1) of cassettes"
# The build is not what is measured.
cargo build --quiet --tests
# `measure LABEL CMD...`: wall seconds and peak RSS (MiB) of CMD and what it waits for.
measure() {
  local label=$1
  shift
  local out="$work/time.txt"
  if ! /usr/bin/time -f '%e %M' -o "$out" "$@" >/dev/null 2>"$work/err.txt"; then
    echo "$label: failed" >&2
    tail -5 "$work/err.txt" >&2
  fi
  read -r wall kib <"$out"
  printf '  %-44s %8.2f s %8.1f MiB\n' "$label" "$wall" "$(echo "$kib / 1024" | bc -l)"
}
# `daemon_peak`: the whole-suite replay's wall time, and the peak RSS of the process that runs
# the daemon (cargo-llmreplay itself, not nextest nor the tests), read from /proc as it runs.
daemon_peak() {
  local started peak=0 now
  started=$(date +%s.%N)
  "$bin" llmreplay test >/dev/null 2>"$work/err.txt" &
  local pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    now=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
    [ -n "$now" ] && [ "$now" -gt "$peak" ] && peak=$now
    sleep 0.2
  done
  wait "$pid" || { echo "cargo llmreplay test failed" >&2; tail -5 "$work/err.txt" >&2; }
  printf '  %-44s %8.2f s %8.1f MiB (daemon)\n' "cargo llmreplay test (whole-suite replay)" \
    "$(echo "$(date +%s.%N) - $started" | bc -l)" "$(echo "$peak / 1024" | bc -l)"
}
echo "clean tree:"
daemon_peak
measure "cargo llmreplay test, with nextest and tests" "$bin" llmreplay test
measure "status" "$bin" llmreplay status
measure "diff --format markdown" "$bin" llmreplay diff --format markdown
measure "review --list" "$bin" llmreplay review --list
"$root/target/release/examples/scale_suite" "$suite" "$tests" "$calls" --modify "$modified"
echo "$modified of $tests folders modified:"
measure "status" "$bin" llmreplay status
measure "diff --format markdown" "$bin" llmreplay diff --format markdown
measure "review --list" "$bin" llmreplay review --list
