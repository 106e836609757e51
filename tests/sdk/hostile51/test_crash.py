"""Two tests that ask the model; with CRASH set, `test_b` kills its own process between its
two calls, as a segfault in a native extension would: pytest never says how it ended."""
import json
import os
import signal
import urllib.request


def ask(prompt):
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": prompt}]}
    request = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"].rstrip("/") + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json", "authorization": "Bearer sk-not-a-real-key"},
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        return json.load(answer)


def test_a():
    ask("alpha")


def test_b():
    ask("beta one")
    if os.environ.get("CRASH"):
        os.kill(os.getpid(), signal.SIGKILL)
    ask("beta two")
