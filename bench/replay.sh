#!/usr/bin/env bash
# Replay-path benchmark: cargo-llmreplay serve (replay mode) against the floor server
# (bench/floor) and aimock, with wrk at 1 and 32 connections, for a short JSON answer
# and a 48-chunk SSE stream; then serve's ready time and RSS with 10,000 cassette folders.
#   bench/replay.sh [SECONDS_PER_RUN] [ROUNDS]        (defaults 5 and 3)
# Needs wrk (apt-get install wrk) and npm; installs aimock into bench/out/ on first use.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-5}
rounds=${2:-3}
out="$root/bench/out"
mkdir -p "$out"
command -v wrk >/dev/null || { echo "wrk is missing: apt-get install -y wrk" >&2; exit 1; }
if [[ ! -x "$out/aimock/node_modules/.bin/llmock" ]]; then
  npm install --silent --prefix "$out/aimock" @copilotkit/aimock@1.43 >&2
fi
floor_src=${BENCH_FLOOR:-$root/bench/floor}
cargo build --release --quiet -p cargo-llmreplay
cargo build --release --quiet --manifest-path "$floor_src/Cargo.toml" --target-dir "$root/target/bench-floor"
exec python3 "$root/bench/replay.py" \
  --llmreplay "$root/target/release/cargo-llmreplay" \
  --floor "$root/target/bench-floor/release/bench-floor" \
  --aimock "$out/aimock/node_modules/.bin/llmock" \
  --seconds "$secs" --rounds "$rounds" --work "$out"
