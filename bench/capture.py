"""Drives bench/capture.sh: records the floor's short answer for test `bench`, starts `serve`
in replay mode with capture on (`--env` prints where the run's CA is), then runs the load
client against the base-URL route and through the proxy in interleaved rounds, and prints
requests/s (min/median/max) and the ratio; then the same with a new connection per request."""
import argparse, json, os, statistics, subprocess, tempfile, urllib.request

from common import start_floor, start_serve, stop

SHORT = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "short"}]}


def load(binary, mode, addr, ca, conns, secs, fresh=False):
    args = [binary, mode, addr, "bench", ca, str(conns), str(secs)] + (["--fresh"] if fresh else [])
    return json.loads(subprocess.run(args, capture_output=True, text=True, check=True).stdout)["rps"]


def main():
    ap = argparse.ArgumentParser()
    for a in ("llmreplay", "floor", "load", "work"):
        ap.add_argument("--" + a, required=True)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="llmreplay-capture-", dir=a.work)
    procs = []
    try:
        floor, floor_url = start_floor(a.floor)
        procs.append(floor)
        rec, base, _ = start_serve(a.llmreplay, ["--mode", "record", "--cassette-dir", "cas", "--upstream", f"openai={floor_url}"], tmp)
        req = urllib.request.Request(base + "/t/bench/openai/v1/chat/completions", data=json.dumps(SHORT).encode(), headers={"content-type": "application/json"})
        assert urllib.request.urlopen(req).status == 200
        stop(rec)
        # Replay with capture: the first lines are the environment, the CA among them.
        env = dict(os.environ, CARGO_TARGET_DIR=os.path.join(tmp, "target"))
        p = subprocess.Popen([a.llmreplay, "llmreplay", "serve", "--env", "--test-id", "bench", "--cassette-dir", "cas", "--allow-repeats"], cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        procs.append(p)
        ca = url = None
        while url is None:
            line = p.stdout.readline()
            assert line, "serve ended"
            name, _, value = line.removeprefix("export ").strip().partition("=")
            value = value.strip("'")
            if name == "NODE_EXTRA_CA_CERTS":
                ca = value
            if name == "LLMREPLAY_BASE_URL":
                url = value
        addr = url.removeprefix("http://").split("/")[0]
        for mode in ("direct", "proxy"):
            load(a.load, mode, addr, ca, 4, 1)  # warm up, and check both answer 200
        results = {}
        for label, conns, fresh in (("keep-alive, 32 connections", 32, False), ("a new connection per request, 4 at a time", 4, True)):
            rps = {"direct": [], "proxy": []}
            for _ in range(a.rounds):
                for mode in ("direct", "proxy"):
                    rps[mode].append(load(a.load, mode, addr, ca, conns, a.seconds, fresh))
            d, x = statistics.median(rps["direct"]), statistics.median(rps["proxy"])
            results[label] = {"direct_rps": rps["direct"], "proxy_rps": rps["proxy"], "ratio": round(x / d, 3)}
            print(f"{label}:")
            print(f"  base-URL route  req/s min {min(rps['direct']):8.0f}  median {d:8.0f}  max {max(rps['direct']):8.0f}")
            print(f"  through proxy   req/s min {min(rps['proxy']):8.0f}  median {x:8.0f}  max {max(rps['proxy']):8.0f}")
            print(f"  proxy / base-URL: {x / d:.2f}")
            if fresh:
                print(f"  per new connection: {1000 * 4 / x:.2f} ms through the proxy (CONNECT + TLS + request), {1000 * 4 / d:.2f} ms plain; the tunnel and handshake cost {1000 * 4 / x - 1000 * 4 / d:.2f} ms")
        json.dump(results, open(os.path.join(a.work, "capture.json"), "w"), indent=2)
    finally:
        for p in procs:
            try:
                stop(p)
            except Exception:
                p.kill()


if __name__ == "__main__":
    main()
