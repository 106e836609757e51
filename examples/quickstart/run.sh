#!/usr/bin/env bash
# The quickstart: replays this folder's committed cassettes through `cargo llmreplay serve`,
# offline and with no key, as CI would. Exits non-zero if any answer is missing or differs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
if cargo llmreplay --version >/dev/null 2>&1; then cmd=(cargo llmreplay); else cmd=("$here/../../target/debug/cargo-llmreplay" llmreplay); fi
out=$(mktemp)
CI=true "${cmd[@]}" serve --cassette-dir cassettes >"$out" &
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -f "$out"' EXIT
# The first stdout line is the base URL, printed once the daemon listens.
for _ in $(seq 500); do grep -q LLMREPLAY_BASE_URL "$out" && break; kill -0 $pid || exit 1; sleep 0.01; done
base=$(sed -n 's/^LLMREPLAY_BASE_URL=//p' "$out")
echo "daemon: $base (replay mode, no network)"
python3 - "$base" <<'PY'
import json, sys, urllib.request, urllib.error
base = sys.argv[1]
def ask(test, body):
    req = urllib.request.Request(base + "/openai/v1/chat/completions", json.dumps(body).encode(),
                                 {"content-type": "application/json", "x-test-id": test})
    try:
        with urllib.request.urlopen(req) as r:
            return r.read().decode()
    except urllib.error.HTTPError as e:
        return e.read().decode()
answer = json.loads(ask("quickstart$explains_cassettes", {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "What is a cassette?"}]}))
print("replayed answer:  ", answer["choices"][0]["message"]["content"])
stream = ask("quickstart$streams_a_greeting", {"model": "gpt-4o-mini", "stream": True, "messages": [{"role": "user", "content": "Say hello in three languages."}]})
chunks = [json.loads(l[6:]) for l in stream.splitlines() if l.startswith("data: {")]
print("replayed stream:  ", "".join(c["choices"][0]["delta"].get("content", "") for c in chunks).strip(), f"({len(chunks)} chunks)")
assert answer["choices"][0]["message"]["content"].startswith("A cassette is")
assert len(chunks) == 3
miss = json.loads(ask("quickstart$explains_cassettes", {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "What is a casette?"}]}))
print("a changed prompt is a miss, never a stale answer:\n  " + miss["error"]["message"].replace("\n", "\n  "))
PY
kill -TERM $pid; wait $pid || true
