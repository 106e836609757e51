#!/usr/bin/env bash
# Overhead of `cargo llmreplay test` over plain `cargo nextest run`, timed with hyperfine on
# generated workspaces: 200 tests that call nothing, and 50 tests that each replay 4 recordings
# (baseline: the same tests calling the floor server directly).
#   bench/overhead.sh [RUNS]        (default 10)
# Needs hyperfine (apt-get install hyperfine).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
command -v hyperfine >/dev/null || { echo "hyperfine is missing: apt-get install -y hyperfine" >&2; exit 1; }
floor_src=${BENCH_FLOOR:-$root/../shared/bench-floor}
cargo build --release --quiet -p cargo-llmreplay
cargo build --release --quiet --manifest-path "$floor_src/Cargo.toml" --target-dir "$root/target/bench-floor"
mkdir -p "$root/bench/out"
exec python3 "$root/bench/overhead.py" \
  --llmreplay "$root/target/release/cargo-llmreplay" \
  --floor "$root/target/bench-floor/release/bench-floor" \
  --client "$root/examples/quickstart/src/lib.rs" \
  --runs "${1:-10}" --work "$root/bench/out"
