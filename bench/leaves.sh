#!/usr/bin/env bash
# Leaf-certificate memory: the daemon's peak RSS after N CONNECTs to distinct hosts
# (default 80,000), each of which makes a leaf certificate.
#   bench/leaves.sh [HOSTS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cargo build --release --quiet -p cargo-llmreplay
exec python3 "$root/bench/leaves.py" --llmreplay "$root/target/release/cargo-llmreplay" --hosts "${1:-80000}"
