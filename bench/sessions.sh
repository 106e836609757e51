#!/usr/bin/env bash
# Session replay benchmark: one ~200-frame Realtime session recorded from aimock, then replayed
# by N concurrent clients from cargo-llmreplay serve and mocked by aimock, in the same run.
#   bench/sessions.sh [SECONDS_PER_RUN] [ROUNDS]        (defaults 5 and 3)
# Needs npm; installs aimock into bench/out/ on first use.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-5}
rounds=${2:-3}
out="$root/bench/out"
mkdir -p "$out"
if [[ ! -x "$out/aimock/node_modules/.bin/llmock" ]]; then
  npm install --silent --prefix "$out/aimock" @copilotkit/aimock@1.43 >&2
fi
cargo build --release --quiet -p cargo-llmreplay
cargo build --release --quiet --manifest-path "$root/bench/floor/Cargo.toml" --target-dir "$root/target/bench-floor"
exec python3 "$root/bench/sessions.py" \
  --llmreplay "$root/target/release/cargo-llmreplay" \
  --aimock "$out/aimock/node_modules/.bin/llmock" \
  --ws-load "$root/target/bench-floor/release/ws_load" \
  --seconds "$secs" --rounds "$rounds" --work "$out"
