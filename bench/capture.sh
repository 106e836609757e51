#!/usr/bin/env bash
# Capture benchmark: replay through the daemon as an HTTPS proxy (CONNECT, TLS with the run's
# CA, HTTP/1.1 kept alive) against the base-URL route of the same daemon, in the same run, at
# 32 connections; then the cost of a new connection (a new tunnel and TLS handshake per
# request) against a new plain connection.
#   bench/capture.sh [SECONDS_PER_RUN] [ROUNDS]        (defaults 5 and 3)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-5}
rounds=${2:-3}
out="$root/bench/out"
mkdir -p "$out"
cargo build --release --quiet -p cargo-llmreplay
cargo build --release --quiet --manifest-path "$root/bench/floor/Cargo.toml" --target-dir "$root/target/bench-floor"
exec python3 "$root/bench/capture.py" \
  --llmreplay "$root/target/release/cargo-llmreplay" \
  --floor "$root/target/bench-floor/release/bench-floor" \
  --load "$root/target/bench-floor/release/proxy_load" \
  --seconds "$secs" --rounds "$rounds" --work "$out"
