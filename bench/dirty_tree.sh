#!/usr/bin/env bash
# What a large untracked file costs every run: `cargo llmreplay run -- true` in a fresh git
# repository, with and without a 200 MB untracked file beside the cassettes, interleaved, the
# median wall time of each and their difference. A run with no miss fingerprints no sources.
#   bench/dirty_tree.sh [ROUNDS]                (default 15)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rounds=${1:-15}
cargo build --release --quiet -p cargo-llmreplay
# CARGO_LLMREPLAY measures another build (an older one, for a before and after).
bin="${CARGO_LLMREPLAY:-$root/target/release/cargo-llmreplay}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git init -q "$work/repo"
mkdir -p "$work/repo/tests/cassettes"
exec python3 - "$bin" "$work/repo" "$rounds" <<'PY'
import os, statistics, subprocess, sys, time
binary, repo, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
big = os.path.join(repo, "big.bin")
away = os.path.join(os.path.dirname(repo), "big.away")
env = dict(os.environ, CARGO_TARGET_DIR=os.path.join(repo, "target"))
env.pop("CI", None)

def once():
    started = time.perf_counter()
    subprocess.run([binary, "llmreplay", "run", "--", "true"], cwd=repo, env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started

with open(big, "wb") as f:
    f.write(os.urandom(1 << 20) * 200)
once()
times = {"with": [], "without": []}
for _ in range(rounds):
    times["with"].append(once())
    os.rename(big, away)
    times["without"].append(once())
    os.rename(away, big)
os.remove(big)
w, wo = statistics.median(times["with"]), statistics.median(times["without"])
print(f"run -- true, median of {rounds}: with a 200 MB untracked file {w * 1e3:.1f} ms, without {wo * 1e3:.1f} ms, difference {(w - wo) * 1e3:+.1f} ms")
PY
