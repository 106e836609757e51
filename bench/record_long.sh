#!/usr/bin/env bash
# Recording cost as a test grows (bench/record_long.py): N = 10, 100, 1,000 calls in one test,
# over HTTP and through the MCP stdio shim, against direct calls; added ms per call and bytes
# written against the cassette's size.
#   bench/record_long.sh [N ...]
# Needs the venv of .ci/run (target/sdk-venv).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cargo build --release --quiet -p cargo-llmreplay
CARGO_LLMREPLAY="$root/target/release/cargo-llmreplay" exec python3 "$root/bench/record_long.py" "$@"
