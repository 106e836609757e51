"""What recording costs as a test grows: one test making N calls, for N = 10, 100 and 1,000,
recorded over HTTP (`serve --mode record`, a chat call a step, each with its own prompt) and
through the MCP stdio shim (`run --record`, `tools/call` to the demo
server), each against the same calls made directly, in one run. Prints the time added per call
(the calls, then writing the cassette, over N) and the bytes the daemon wrote (its /proc io
`wchar`: spool, run log and cassette) against the size of the cassette it left.

    python3 bench/record_long.py [N ...]      # default 10 100 1000

Needs the venv of .ci/run (target/sdk-venv, with `mcp`) and a built cargo-llmreplay
(target/release or target/debug; CARGO_LLMREPLAY names another)."""

import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import llmreplay_binary, mcp_session, start_serve, stop  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = os.path.join(ROOT, "target/sdk-venv/bin/python")
SERVER = os.path.join(ROOT, "tests/sdk/mcp_server.py")
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class Fake(http.server.BaseHTTPRequestHandler):
    """An OpenAI chat completions stand-in: a short answer naming the turn, each answer sent in
    one write (as a provider's server does), so no answer waits on a delayed ACK."""
    protocol_version = "HTTP/1.1"
    wbufsize = -1
    disable_nagle_algorithm = True

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        turn = int(body["messages"][-1]["content"].split()[2].rstrip(":"))
        answer = json.dumps({
            "id": f"chatcmpl-{turn}", "object": "chat.completion", "created": 1, "model": "gpt-4o-mini",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": f"step {turn}: noted, calling the next tool"}}],
            "usage": {"prompt_tokens": turn * 12, "completion_tokens": 8, "total_tokens": turn * 12 + 8},
        }).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


def post(url, body, headers=None):
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"content-type": "application/json", **(headers or {})})
    with OPENER.open(request, timeout=60) as answer:
        return json.load(answer)


def agent(url, n, headers=None):
    """n chat calls, each its own step's prompt: seconds taken."""
    started = time.perf_counter()
    for i in range(n):
        messages = [{"role": "system", "content": "You are a careful agent."},
                    {"role": "user", "content": f"tool result {i}: the weather in city {i} is mild"}]
        answer = post(url, {"model": "gpt-4o-mini", "messages": messages}, headers)
        assert answer["choices"][0]["message"]["content"].startswith(f"step {i}:"), answer
    return time.perf_counter() - started


def wchar(pid):
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            if line.startswith("wchar:"):
                return int(line.split()[1])
    return 0


def cassette_bytes(folder):
    total = 0
    for dirpath, _, files in os.walk(folder):
        total += sum(os.path.getsize(os.path.join(dirpath, f)) for f in files)
    return total


def http_figures(n, fake_url):
    direct = agent(f"{fake_url}/v1/chat/completions", n)
    work = tempfile.mkdtemp()
    try:
        serve, base, _ = start_serve(llmreplay_binary(), ["--cassette-dir", "c", "--mode", "record", "--upstream", f"openai={fake_url}"], work)
        before = wchar(serve.pid)
        started = time.perf_counter()
        agent(f"{base}/openai/v1/chat/completions", n, {"x-test-id": "bench$long"})
        post(f"{base}/__llmreplay/flush", {})
        through = time.perf_counter() - started
        written = wchar(serve.pid) - before
        stop(serve)
        size = cassette_bytes(os.path.join(work, "c"))
        return direct, through, written, size
    finally:
        shutil.rmtree(work)


def drive_mcp(command, n):
    """n `tools/call` round trips after the handshake: seconds taken."""
    proc, ask = mcp_session(command)
    started = time.perf_counter()
    for i in range(1, n + 1):
        answer = ask({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "add", "arguments": {"a": i, "b": 3}}})
        assert answer["result"]["content"][0]["text"] == str(i + 3), answer
    proc.stdin.close()
    proc.wait()
    return time.perf_counter() - started


def mcp_inner(n):
    """Under `cargo llmreplay run --record`: the shim's time and the daemon's bytes written."""
    daemon = os.getppid()
    before = wchar(daemon)
    started = time.perf_counter()
    drive_mcp([llmreplay_binary(), "llmreplay", "mcp", "--name", "bench", "--", PYTHON, SERVER], n)
    root = os.environ["LLMREPLAY_BASE_URL"].split("/t/", 1)[0].rstrip("/")
    post(f"{root}/__llmreplay/flush", {})
    through = time.perf_counter() - started
    with open(os.environ["BENCH_OUT"], "w") as f:
        json.dump({"through": through, "written": wchar(daemon) - before}, f)


def mcp_figures(n):
    direct = drive_mcp([PYTHON, SERVER], n)
    work = tempfile.mkdtemp()
    try:
        subprocess.run(["git", "init", "-q", work], check=True)
        out = os.path.join(work, "figures.json")
        env = dict(os.environ, BENCH_OUT=out, CARGO_TARGET_DIR=os.path.join(work, "target"))
        env.pop("CI", None)
        subprocess.run([llmreplay_binary(), "llmreplay", "run", "--record", "--", sys.executable, os.path.abspath(__file__), "inner", str(n)],
                       cwd=work, env=env, check=True, stderr=subprocess.DEVNULL)
        with open(out) as f:
            got = json.load(f)
        size = cassette_bytes(os.path.join(work, "tests", "cassettes"))
        return direct, got["through"], got["written"], size
    finally:
        shutil.rmtree(work)


def main():
    if sys.argv[1:2] == ["inner"]:
        return mcp_inner(int(sys.argv[2]))
    sizes = [int(a) for a in sys.argv[1:]] or [10, 100, 1000]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Fake)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    fake = f"http://127.0.0.1:{server.server_address[1]}"
    print("one test of N calls, recorded; added = (through the daemon - direct) / N, cassette written at the end included")
    print(f"{'transport':<6} {'N':>5} {'direct ms/call':>15} {'added ms/call':>14} {'bytes written':>14} {'cassette':>10} {'ratio':>6}")
    rows = {}
    for transport, figures in (("http", lambda n: http_figures(n, fake)), ("mcp", mcp_figures)):
        for n in sizes:
            direct, through, written, size = figures(n)
            added = (through - direct) / n * 1e3
            rows[(transport, n)] = added
            print(f"{transport:<6} {n:>5} {direct / n * 1e3:>15.3f} {added:>14.3f} {written:>14} {size:>10} {written / max(size, 1):>6.2f}")
    for transport in ("http", "mcp"):
        if (transport, sizes[0]) in rows and (transport, sizes[-1]) in rows and sizes[0] != sizes[-1]:
            print(f"{transport}: added per call at N={sizes[-1]} is {rows[(transport, sizes[-1])] / rows[(transport, sizes[0])]:.2f}x that at N={sizes[0]}")
    server.shutdown()


main()
