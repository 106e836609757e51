#!/usr/bin/env bash
# Overhead of `cargo llmreplay test` over plain `cargo nextest run` on generated workspaces:
# 200 tests that call nothing, and 50 tests that each replay 4 recordings (baseline: the same
# tests calling the floor server directly). The commands run in turn, round after round, and
# are compared by their medians (see overhead.py for why).
#   bench/overhead.sh [ROUNDS]        (default 20)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
floor_src=${BENCH_FLOOR:-$root/bench/floor}
cargo build --release --quiet -p cargo-llmreplay
cargo build --release --quiet --manifest-path "$floor_src/Cargo.toml" --target-dir "$root/target/bench-floor"
mkdir -p "$root/bench/out"
# On Linux, also the target runner linked statically (see README, Performance), installed beside
# a copy of cargo-llmreplay as `cargo install` would put it.
static=()
host=$(rustc -vV | sed -n 's/^host: //p')
if [[ $host == *-linux-gnu ]]; then
  RUSTFLAGS="-C target-feature=+crt-static" cargo build --release --quiet -p cargo-llmreplay \
    --bin cargo-llmreplay-runner --target "$host" --target-dir "$root/target/static-runner"
  inst="$root/bench/out/static-install"
  mkdir -p "$inst"
  cp "$root/target/release/cargo-llmreplay" "$root/target/static-runner/$host/release/cargo-llmreplay-runner" "$inst/"
  static=(--llmreplay-static "$inst/cargo-llmreplay")
fi
exec python3 "$root/bench/overhead.py" "${static[@]}" \
  --llmreplay "$root/target/release/cargo-llmreplay" \
  --runner "$root/target/release/cargo-llmreplay-runner" \
  --floor "$root/target/bench-floor/release/bench-floor" \
  --client "$root/examples/quickstart/src/lib.rs" \
  --runs "${1:-20}" --work "$root/bench/out"
