"""What `cargo llmreplay mcp` adds per MCP message against a direct stdio pipe, in one run:
the demo server of tests/sdk/mcp_server.py driven with raw JSON-RPC lines (`tools/call add`,
one at a time), directly, through the shim while recording, and through the shim in replay
(no server). Prints the median round trip of each and the differences.

    python3 bench/mcp_overhead.py [N]    # N calls each, default 300

Needs the venv of .ci/run (target/sdk-venv, with `mcp`) and a built cargo-llmreplay
(target/debug or target/release; CARGO_LLMREPLAY names another)."""

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import llmreplay_binary, mcp_session  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = os.path.join(ROOT, "target/sdk-venv/bin/python")
SERVER = os.path.join(ROOT, "tests/sdk/mcp_server.py")
N = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1] != "inner" else 300


def drive(command, n):
    """Round trips of n `tools/call` lines after the handshake, in seconds."""
    proc, ask = mcp_session(command)
    times = []
    for i in range(1, n + 1):
        started = time.perf_counter()
        answer = ask({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "add", "arguments": {"a": 2, "b": 3}}})
        times.append(time.perf_counter() - started)
        assert answer["result"]["content"][0]["text"] == "5", answer
    proc.stdin.close()
    proc.wait()
    return times


def inner():
    """Under `cargo llmreplay run`: the shim's figures, written where the outer run says."""
    shim = [llmreplay_binary(), "llmreplay", "mcp", "--name", "bench", "--", PYTHON, SERVER]
    times = drive(shim, N)
    with open(os.environ["BENCH_OUT"], "w") as f:
        json.dump(times, f)


def main():
    if sys.argv[1:2] == ["inner"] or sys.argv[2:3] == ["inner"]:
        return inner()
    direct = drive([PYTHON, SERVER], N)
    work = tempfile.mkdtemp()
    subprocess.run(["git", "init", "-q", work], check=True)
    out = os.path.join(work, "times.json")
    figures = {"direct pipe": direct}
    for label, flags in (("shim, recording", ["--record"]), ("shim, replay (no server)", [])):
        env = dict(os.environ, BENCH_OUT=out, CARGO_TARGET_DIR=os.path.join(work, "target"))
        env.pop("CI", None)
        subprocess.run([llmreplay_binary(), "llmreplay", "run", *flags, "--", sys.executable, os.path.abspath(__file__), str(N), "inner"],
                       cwd=work, env=env, check=True, stderr=subprocess.DEVNULL)
        with open(out) as f:
            figures[label] = json.load(f)
    shutil.rmtree(work)
    base = statistics.median(direct)
    print(f"{N} tools/call round trips each, median:")
    for label, times in figures.items():
        median = statistics.median(times)
        extra = "" if label == "direct pipe" else f"  ({(median - base) * 1e3:+.3f} ms against the direct pipe)"
        print(f"  {label:<26} {median * 1e3:8.3f} ms{extra}")


main()
