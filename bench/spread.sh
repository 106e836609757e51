#!/usr/bin/env bash
# Spread bench: `serve` replaying a suite of TESTS tests (bench/scale.sh's, 10 interactions
# each), every request to the next test in turn, against every request to one test; wrk at
# c=1 and c=32, after one warm pass over every test, in interleaved rounds. Prints requests/s
# (median of ROUNDS) and spread / one. The cassette cache is set to hold the whole suite
# (BUDGET MiB, 4096 unless set), so that what is measured is replay among many loaded folders,
# not reading them; BUDGET= (empty) writes no llmreplay.toml: the default budget, or a build
# from before there was one (CARGO_LLMREPLAY names another build).
#   bench/spread.sh [TESTS] [SECONDS] [ROUNDS]        (defaults 10000, 5 and 3)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tests=${1:-10000}
secs=${2:-5}
rounds=${3:-3}
cargo build --release --quiet -p cargo-llmreplay
cargo build --release --quiet -p llmreplay-cassettes --example scale_suite
bin="${CARGO_LLMREPLAY:-$root/target/release/cargo-llmreplay}"
work=$(mktemp -d)
serve_pid=
trap '[ -n "$serve_pid" ] && kill "$serve_pid" 2>/dev/null; rm -rf "$work"' EXIT
"$root/target/release/examples/scale_suite" "$work" "$tests" 10
budget=${BUDGET-4096}
if [ -n "$budget" ]; then
  printf '[limits]\ncassette_cache_mib = %s\n' "$budget" >"$work/llmreplay.toml"
fi
cat >"$work/spread.lua" <<LUA
local spread = os.getenv("SPREAD") == "1"
local n = 0
request = function()
  n = n + 1
  local t = spread and (n % $tests) or 0
  local k = spread and (math.floor(n / $tests) % 10) or (n % 10)
  local body = string.format('{"model":"gpt-4o-mini","messages":[{"role":"user","content":"test %d question %d"}]}', t, k)
  local path = string.format("/t/scale%%3A%%3Asuite%%24t%05d/openai/v1/chat/completions", t)
  return wrk.format("POST", path, {["Content-Type"] = "application/json"}, body)
end
LUA
(cd "$work" && exec "$bin" llmreplay serve --allow-repeats >"$work/serve.out" 2>"$work/serve.err") &
serve_pid=$!
until grep -q LLMREPLAY_BASE_URL "$work/serve.out" 2>/dev/null; do
  kill -0 "$serve_pid" || { cat "$work/serve.err" >&2; exit 1; }
  sleep 0.05
done
url=$(grep -o 'http://127.0.0.1:[0-9]*' "$work/serve.out" | head -1)
rps() { SPREAD=$1 wrk -t1 "-c$2" "-d${3}s" -s "$work/spread.lua" "$url" | awk '/Requests\/sec/ {print $2}'; }
# Every test loaded once, on one kept-alive connection.
python3 - "$url" "$tests" <<'PY'
import http.client, sys
url, tests = sys.argv[1], int(sys.argv[2])
conn = http.client.HTTPConnection(url.removeprefix("http://"))
for t in range(tests):
    body = '{"model":"gpt-4o-mini","messages":[{"role":"user","content":"test %d question 0"}]}' % t
    conn.request("POST", "/t/scale%%3A%%3Asuite%%24t%05d/openai/v1/chat/completions" % t, body, {"Content-Type": "application/json"})
    r = conn.getresponse()
    r.read()
    assert r.status == 200, (t, r.status)
PY
declare -A got
for ((r = 1; r <= rounds; r++)); do
  for cell in "0 1" "1 1" "0 32" "1 32"; do
    set -- $cell
    got["$1 $2"]+="$(rps "$1" "$2" "$secs") "
  done
done
median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
for c in 1 32; do
  one=$(echo "${got["0 $c"]}" | median)
  spread=$(echo "${got["1 $c"]}" | median)
  printf 'c=%-3s one test %10.0f req/s   spread over %s tests %10.0f req/s   spread/one %.2f\n' \
    "$c" "$one" "$tests" "$spread" "$(echo "$spread / $one" | bc -l)"
done
