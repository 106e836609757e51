"""Drives bench/replay.sh: records the floor's answers through `serve --mode record`, then runs
wrk against the floor, `serve` in replay mode and aimock serving the same answers, warmed and in
interleaved rounds, and prints requests/s as min/median/max, p50/p99 and the ratios. Servers are found ready by polling their port, not by sleeping
a fixed time."""
import argparse, json, os, re, shutil, subprocess, sys, tempfile, urllib.request

from common import free_port, start_floor, start_serve, stop, wait_port

SHORT = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "short"}]}
SPEECH = {"model": "gpt-4o-mini-tts", "input": "bench", "voice": "alloy"}
STREAM = {"model": "gpt-4o-mini", "stream": True, "messages": [{"role": "user", "content": "stream"}]}


def post(url, body, headers=None):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"content-type": "application/json", **(headers or {})})
    with urllib.request.urlopen(req) as r:
        return r.status, r.read()


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))


def to_ms(v):
    num, unit = re.match(r"([\d.]+)(\w+)", v).groups()
    return float(num) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def wrk(url, body, conns, secs, work):
    script = os.path.join(work, "post.lua")
    with open(script, "w") as f:
        f.write('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\nwrk.body = %s\n' % json.dumps(json.dumps(body)))
    out = subprocess.run(["wrk", "-t1", f"-c{conns}", f"-d{secs}s", "--latency", "-s", script, url], capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    p50 = to_ms(re.search(r"^\s+50%\s+(\S+)", out, re.M).group(1))
    p99 = to_ms(re.search(r"^\s+99%\s+(\S+)", out, re.M).group(1))
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = re.search(r"Socket errors: (.*)", out)
    return {"rps": rps, "p50": p50, "p99": p99, "non2xx": int(bad.group(1)) if bad else 0, "socket_errors": errors.group(1) if errors else ""}


def main():
    ap = argparse.ArgumentParser()
    for a in ("llmreplay", "floor", "aimock", "work"):
        ap.add_argument("--" + a, required=True)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="llmreplay-bench-", dir=a.work)
    procs = []
    try:
        floor, floor_url = start_floor(a.floor)
        procs.append(floor)

        # Record the floor's two answers, as a user would record a provider's.
        rec, base, _ = start_serve(a.llmreplay, ["--mode", "record", "--cassette-dir", "cas", "--upstream", f"openai={floor_url}"], tmp)
        short_path, stream_path = "/t/bench/openai/v1/chat/completions", "/t/bench/openai/v1/stream"
        assert post(base + short_path, SHORT)[0] == 200
        status, streamed = post(base + stream_path, STREAM)
        assert status == 200 and streamed.count(b"data: ") == 49, streamed[:200]
        speech_path = "/t/bench/openai/v1/audio/speech"
        status, audio = post(base + speech_path, SPEECH)
        assert status == 200 and len(audio) == 1 << 20
        stop(rec)
        cassette = json.load(open(os.path.join(tmp, "cas/bench/openai.json")))
        assert len(cassette["interactions"]) == 3
        assert "body_blob" in cassette["interactions"][2]["response"], "1 MiB goes to a blob"
        speech = cassette["interactions"].pop()

        # aimock serves the same answers: 48 content chunks of 7 characters for the stream.
        words = "".join(f"word{i:02d} " for i in range(48))
        fixtures = os.path.join(tmp, "fixtures.json")
        json.dump({"fixtures": [
            {"match": {"userMessage": "short"}, "response": {"content": "Hi there! How can I help you today?"}},
            {"match": {"userMessage": "stream"}, "response": {"content": words}},
        ]}, open(fixtures, "w"))
        aport = free_port()
        aimock = subprocess.Popen([a.aimock, "-p", str(aport), "-f", fixtures, "-c", "7", "--log-level", "silent", "--journal-max", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(aimock)
        wait_port(aport, aimock)
        aimock_url = f"http://127.0.0.1:{aport}/v1/chat/completions"
        _, body = post(aimock_url, STREAM)
        print(f"aimock stream: {body.count(b'data: ')} SSE frames", file=sys.stderr)

        serve, base, _ = start_serve(a.llmreplay, ["--cassette-dir", "cas", "--allow-repeats"], tmp)
        procs.append(serve)
        assert post(base + stream_path, STREAM)[1] == streamed, "replay is byte for byte"
        assert post(base + speech_path, SPEECH)[1] == audio, "binary replay is byte for byte"
        rss_before = rss_kb(serve.pid)

        targets = {
            "floor": {"short": floor_url + "/v1/chat/completions", "stream": floor_url + "/v1/stream", "speech": floor_url + "/v1/audio/speech"},
            "llmreplay": {"short": base + short_path, "stream": base + stream_path, "speech": base + speech_path},
            "aimock": {"short": aimock_url, "stream": aimock_url},
        }
        scenarios = [("short JSON", "short", SHORT, 1), ("short JSON", "short", SHORT, 32), ("48-chunk SSE", "stream", STREAM, 1), ("48-chunk SSE", "stream", STREAM, 32), ("1 MiB binary", "speech", SPEECH, 8)]
        # Every server warmed on every scenario first (aimock's JIT most of all), then rounds in
        # which each scenario runs every server in turn, the order rotating from round to round:
        # a noisy second on this shared machine lands on all of them alike.
        for label, kind, body, conns in scenarios:
            for name, t in targets.items():
                if kind in t:
                    wrk(t[kind], body, conns, 1, tmp)
        runs = {}
        for round_ in range(a.rounds):
            for label, kind, body, conns in scenarios:
                names = [n for n, t in targets.items() if kind in t]
                shift = round_ % len(names)
                for name in names[shift:] + names[:shift]:
                    runs.setdefault((label, conns, name), []).append(wrk(targets[name][kind], body, conns, a.seconds, tmp))
        rss_after = rss_kb(serve.pid)
        stop(serve)
        procs.remove(serve)

        med = lambda xs: sorted(xs)[len(xs) // 2]
        print(f"\nwrk -t1, {a.seconds}s per run, {a.rounds} interleaved rounds after a warm-up of every server; all on this machine's 2 cores with wrk.")
        print("rps as min / median / max over the rounds, latency as the median run's p50/p99 in ms; ratios of medians.")
        print("The 48-chunk SSE rows compare llmreplay's one prepared write of the recorded stream (it replays at recorded pace only with --realtime) with aimock's 48 writes.\n")
        print("| scenario | c | floor rps | llmreplay rps | aimock rps | llmreplay/floor | llmreplay/aimock |")
        print("|---|---|---|---|---|---|---|")
        for label, kind, body, conns in scenarios:
            def cell(name):
                rs = runs.get((label, conns, name))
                if not rs:
                    return "n/a", None
                rps = [r["rps"] for r in rs]
                mid = sorted(rs, key=lambda r: r["rps"])[len(rs) // 2]
                bad = sum(r["non2xx"] for r in rs)
                errors = "; ".join(r["socket_errors"] for r in rs if r["socket_errors"])
                text = f"{min(rps):,.0f} / {med(rps):,.0f} / {max(rps):,.0f} ({mid['p50']:.2f}/{mid['p99']:.2f})"
                text += f" {bad} non-2xx" if bad else ""
                text += f" errors: {errors}" if errors else ""
                return text, med(rps)
            (f_text, f_rps), (l_text, l_rps), (a_text, a_rps) = cell("floor"), cell("llmreplay"), cell("aimock")
            vs_aimock = f"{l_rps / a_rps:.1f}x" if a_rps else "n/a"
            print(f"| {label} | {conns} | {f_text} | {l_text} | {a_text} | {l_rps / f_rps:.2f} | {vs_aimock} |")
        print(f"\nllmreplay RSS: {rss_before / 1024:.1f} MiB after its first request, {rss_after / 1024:.1f} MiB after the runs (the journal keeps up to 100,000 hits one by one, then counts)")

        # Ready time and memory with 10,000 cassette folders: they must load lazily.
        big = os.path.join(tmp, "big")
        one = json.dumps(cassette, indent=2)
        for i in range(10_000):
            d = os.path.join(big, f"crate--t{i}")
            os.makedirs(d)
            with open(os.path.join(d, "openai.json"), "w") as f:
                f.write(one.replace('"test": "bench"', f'"test": "crate$t{i}"'))
        for folders, cdir in (("0", os.path.join(tmp, "empty")), ("10,000", big)):
            os.makedirs(cdir, exist_ok=True)
            readies = []
            for _ in range(5):
                p, b, ready = start_serve(a.llmreplay, ["--cassette-dir", cdir], tmp)
                readies.append(ready)
                if cdir == big:
                    status, _ = post(b + "/t/crate%24t42/openai/v1/chat/completions", SHORT)
                    assert status == 200
                rss = rss_kb(p.pid)
                stop(p)
            readies.sort()
            print(f"serve with {folders} cassette folders: ready (spawn to first stdout line) median {readies[2] * 1000:.1f} ms, RSS {rss / 1024:.1f} MiB" + (" after replaying one test" if cdir == big else ""))
    finally:
        for p in procs:
            p.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
