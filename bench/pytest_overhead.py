#!/usr/bin/env python3
"""What `cargo llmreplay run -- pytest` adds to plain pytest pointed at a running
`cargo llmreplay serve`, on a suite of 100 tests that each replay one call of the official
`openai` SDK (module-level client, the pytest-llmreplay plugin announcing each test).

    python3 bench/pytest_overhead.py [ROUNDS]      # default 7

Needs the venv (.ci/run makes it: target/sdk-venv, with the plugin) and a built cargo-llmreplay
(target/release, else target/debug; LLMREPLAY_BIN names another). Records the suite once from a
stand-in provider on loopback, then runs both ways in interleaved rounds and prints the medians
and their ratio."""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = os.path.join(ROOT, "target/sdk-venv/bin/python")
BIN = os.environ.get("LLMREPLAY_BIN") or next(
    p
    for p in (os.path.join(ROOT, f"target/{k}/cargo-llmreplay") for k in ("release", "debug"))
    if os.path.exists(p)
)
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 7

SUITE = '''
import openai, pytest
client = openai.OpenAI(max_retries=0)

@pytest.mark.parametrize("n", range(100))
def test_call(n):
    answer = client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": f"Call {n}"}])
    assert answer.choices[0].message.content.startswith("You said")
'''


class Provider(BaseHTTPRequestHandler):
    """OpenAI's chat completions, as the recording run's upstream."""

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        said = body["messages"][-1]["content"]
        out = json.dumps({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": f"You said: {said}"},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6},
        }).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


def clean_env():
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith("LLMREPLAY") or k.endswith("_BASE_URL") or k == "CI")}
    env["CARGO_TARGET_DIR"] = os.path.join(project, "target")
    return env


def timed(cmd, env):
    start = time.perf_counter()
    out = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True)
    took = time.perf_counter() - start
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{out.stdout}\n{out.stderr}")
    return took


project = tempfile.mkdtemp(prefix="llmreplay-pytest-bench-")
with open(os.path.join(project, "test_calls.py"), "w") as f:
    f.write(SUITE)
pytest = [PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider"]

server = ThreadingHTTPServer(("127.0.0.1", 0), Provider)
threading.Thread(target=server.serve_forever, daemon=True).start()
env = clean_env()
env["OPENAI_API_KEY"] = "sk-bench-not-real"
timed([BIN, "llmreplay", "run", "--record", "--upstream",
       f"openai=http://127.0.0.1:{server.server_address[1]}", "--"] + pytest, env)
server.shutdown()
folders = len(os.listdir(os.path.join(project, "tests/cassettes")))
assert folders == 100, folders

# Plain pytest against a running serve, its environment as `serve --env` prints it.
serve = subprocess.Popen([BIN, "llmreplay", "serve", "--env"], cwd=project, env=clean_env(),
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
served = clean_env()
for line in serve.stdout:
    line = line.strip()
    if not line.startswith("export "):
        break
    name, value = line[len("export "):].split("=", 1)
    value = value.strip("'\"")
    if value.startswith("${") and value.endswith("}"):  # a key's `${VAR:-placeholder}`
        value = value.split(":-", 1)[1][:-1]
    elif value.startswith("${"):  # NO_PROXY's `${NO_PROXY:+${NO_PROXY},}hosts`
        value = value[value.rindex("}") + 1:]
    served[name] = value
    if name == "LLMREPLAY_BASE_URL":  # the last line serve prints on stdout
        break

ran, plain = [], []
for _ in range(ROUNDS):
    ran.append(timed([BIN, "llmreplay", "run", "--"] + pytest, clean_env()))
    plain.append(timed(pytest, served))
serve.terminate()
serve.wait()
a, b = statistics.median(ran), statistics.median(plain)
print(f"100 replayed pytest tests, {ROUNDS} interleaved rounds, medians:")
print(f"  cargo llmreplay run -- pytest   {a:.3f} s")
print(f"  pytest against a running serve  {b:.3f} s")
print(f"  overhead                        {100 * (a - b) / b:+.1f}%")
