#!/usr/bin/env bash
# A bounded soak of the daemon: mixed replays, misses and record-missing against a flaky fake
# upstream, with idle connections that exhaust each daemon's 256 file descriptors once a
# minute; prints requests served, answers by kind, RSS at start and end, and health latency
# once descriptors free up. Everything stays on 127.0.0.1 and ends by itself.
#   bench/soak.sh [SECONDS]        (default 600)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-600}
out="$root/bench/out"
mkdir -p "$out"
cargo build --release --quiet -p cargo-llmreplay
exec python3 "$root/bench/soak.py" --llmreplay "$root/target/release/cargo-llmreplay" \
  --seconds "$secs" --work "$out"
