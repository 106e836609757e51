#!/usr/bin/env bash
# Overhead of `cargo llmreplay test` over plain `cargo nextest run` on generated workspaces:
# 200 tests that call nothing, and 50 tests that each replay 4 recordings (baseline: the same
# tests calling the floor server directly). The commands run in turn, round after round, and
# are compared by their medians (see overhead.py for why).
#   bench/overhead.sh [ROUNDS]        (default 20)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
floor_src=${BENCH_FLOOR:-$root/../shared/bench-floor}
cargo build --release --quiet -p cargo-llmreplay
cargo build --release --quiet --manifest-path "$floor_src/Cargo.toml" --target-dir "$root/target/bench-floor"
mkdir -p "$root/bench/out"
exec python3 "$root/bench/overhead.py" \
  --llmreplay "$root/target/release/cargo-llmreplay" \
  --runner "$root/target/release/cargo-llmreplay-runner" \
  --floor "$root/target/bench-floor/release/bench-floor" \
  --client "$root/examples/quickstart/src/lib.rs" \
  --runs "${1:-20}" --work "$root/bench/out"
