#!/usr/bin/env bash
# Memory bench: the release daemon's peak RSS while it records one large exchange, against the
# size of what crossed it (the target is under 3x): a JSON array of zeros (the worst case for
# a parsed tree) and a Realtime-style session of ~60 KiB audio frames both ways.
#   bench/memory.sh [JSON_MIB] [SESSION_MIB]        (defaults 40 and 90)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
json_mib=${1:-40}
session_mib=${2:-90}
cargo build --release --quiet -p cargo-llmreplay
cargo build --release --quiet --manifest-path "$root/bench/floor/Cargo.toml" --target-dir "$root/target/bench-floor"
load="$root/target/bench-floor/release/mem_load"
bin="$root/target/release/cargo-llmreplay"
echo "json    $("$load" json "$bin" "$json_mib")"
echo "session $("$load" session "$bin" "$session_mib" 60)   (60 KiB frames, inline)"
echo "session $("$load" session "$bin" "$session_mib" 200)   (200 KiB frames, blobs)"
