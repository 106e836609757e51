"""Drives bench/sessions.sh: records one Realtime text session of about 200 frames from aimock
through `serve --mode record`, then has N clients (bench/floor's ws_load, in Rust) run that
session back to back against `serve` replaying it and against aimock mocking it, warmed, in
interleaved rounds; prints sessions/s as min/median/max and frame latency p50/p99."""
import argparse, json, os, shutil, subprocess, sys, tempfile

from common import free_port, start_serve, stop, wait_port

PROMPT = "bench session"


def load(ws_load, url, clients, seconds):
    out = subprocess.run([ws_load, url, str(clients), str(seconds), PROMPT], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def main():
    ap = argparse.ArgumentParser()
    for a in ("llmreplay", "aimock", "ws-load", "work"):
        ap.add_argument("--" + a, required=True)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="llmreplay-sessions-", dir=a.work)
    procs = []
    try:
        # aimock answers the turn with 190 deltas of 7 characters: about 200 frames a session.
        fixtures = os.path.join(tmp, "fixtures.json")
        content = "".join(f"word{i:03d}"[:7] for i in range(190))
        json.dump({"fixtures": [{"match": {"userMessage": PROMPT}, "response": {"content": content}}]}, open(fixtures, "w"))
        aport = free_port()
        aimock = subprocess.Popen([a.aimock, "-p", str(aport), "-f", fixtures, "-c", "7", "--log-level", "silent", "--journal-max", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(aimock)
        wait_port(aport, aimock)
        aimock_url = f"ws://127.0.0.1:{aport}/v1/realtime?model=gpt-realtime"

        # Record aimock's session through serve, as a user records a provider's.
        rec, base, _ = start_serve(a.llmreplay, ["--mode", "record", "--cassette-dir", "cas", "--upstream", f"openai=http://127.0.0.1:{aport}"], tmp)
        path = "/t/bench/openai/v1/realtime?model=gpt-realtime"
        once = load(a.ws_load, base.replace("http://", "ws://") + path, 1, 0)
        stop(rec)
        assert once["errors"] == 0, once
        cassette = json.load(open(os.path.join(tmp, "cas/bench/openai.json")))
        frames = cassette["interactions"][0]["frames"]
        print(f"recorded session: {len(frames)} frames ({sum(f['from'] == 'client' for f in frames)} from the client)", file=sys.stderr)

        serve, base, _ = start_serve(a.llmreplay, ["--cassette-dir", "cas", "--allow-repeats"], tmp)
        procs.append(serve)
        targets = {"llmreplay": base.replace("http://", "ws://") + path, "aimock": aimock_url}
        for url in targets.values():
            load(a.ws_load, url, 4, 1)
        runs = {}
        for round_ in range(a.rounds):
            for clients in (1, 16):
                names = list(targets)
                names = names[round_ % 2:] + names[:round_ % 2]
                for name in names:
                    runs.setdefault((clients, name), []).append(load(a.ws_load, targets[name], clients, a.seconds))
        stop(serve)
        procs.remove(serve)

        med = lambda xs: sorted(xs)[len(xs) // 2]
        print(f"\nA {len(frames)}-frame Realtime session, replayed by ws_load (Rust) clients back to back: {a.seconds:g}s per run, {a.rounds} interleaved rounds after a warm-up, all on this machine's 2 cores.")
        print("sessions/s as min / median / max; frame latency (a server frame after the client frame it answers) as the median run's p50/p99 in ms.\n")
        print("| clients | llmreplay sessions/s | llmreplay p50/p99 ms | aimock sessions/s | aimock p50/p99 ms | llmreplay/aimock |")
        print("|---|---|---|---|---|---|")
        for clients in (1, 16):
            cells = {}
            for name in targets:
                rs = runs[(clients, name)]
                rate = [r["sessions_per_s"] for r in rs]
                mid = sorted(rs, key=lambda r: r["sessions_per_s"])[len(rs) // 2]
                errors = sum(r["errors"] for r in rs)
                cells[name] = (f"{min(rate):,.0f} / {med(rate):,.0f} / {max(rate):,.0f}" + (f" ({errors} errors)" if errors else ""), f"{mid['p50_us'] / 1000:.2f}/{mid['p99_us'] / 1000:.2f}", med(rate))
            l, m = cells["llmreplay"], cells["aimock"]
            print(f"| {clients} | {l[0]} | {l[1]} | {m[0]} | {m[1]} | {l[2] / m[2]:.1f}x |")
    finally:
        for p in procs:
            p.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
