"""Drives bench/soak.sh: two `cargo llmreplay serve` daemons, each limited to 256 file
descriptors, under mixed load for a bounded time.

- R (replay mode) answers replays of 50 recorded prompts, and misses of prompts never recorded.
- M (record-missing) serves three tests that ask 200 prompts each, run after run, through a flaky
  fake upstream that answers, fails with 500, resets the connection, stalls past the idle
  timeout, or sends garbage; what it answers is recorded once and replayed in later runs.
- Every minute, 300 idle connections to each daemon exhaust its descriptors for 10 s; then they
  close and the time until health answers again is measured.

Prints requests served, answers by status or error kind, RSS at start and end, and the health
latency after each exhaustion. Everything runs on 127.0.0.1 and stops by itself."""
import argparse, collections, http.client, json, os, random, re, shutil, socket, subprocess, sys
import tempfile, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from common import free_port, wait_port


class Flaky(BaseHTTPRequestHandler):
    """An OpenAI-style upstream that misbehaves one time in five, by a fixed rule per call."""
    protocol_version = "HTTP/1.1"
    calls = 0
    lock = threading.Lock()

    def log_message(self, *a):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        with Flaky.lock:
            Flaky.calls += 1
            n = Flaky.calls
        prompt = json.loads(body)["messages"][-1]["content"]
        fate = n % 20
        if fate == 0:
            return self.answer(500, b'{"error":{"message":"flaky 500","type":"server_error"}}')
        if fate == 1:
            self.connection.shutdown(socket.SHUT_RDWR)  # a reset before any answer
            return
        if fate == 2:
            time.sleep(3)  # past the daemons' idle timeout of 2 s
            return self.answer(200, b'{"late":true}')
        if fate == 3:
            self.wfile.write(b"\x00\xffgarbage, not HTTP\r\n\r\n")
            self.close_connection = True
            return
        answer = {"id": f"chatcmpl-{n}", "object": "chat.completion", "created": n,
                  "choices": [{"index": 0, "message": {"role": "assistant", "content": f"You said: {prompt}"}}]}
        self.answer(200, json.dumps(answer).encode())

    def answer(self, status, body):
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # resets and stalls are the point; their broken pipes are not news


def start_serve(binary, mode, upstream, cwd):
    # The shell lowers the descriptor limit, then becomes the daemon.
    cmd = ["sh", "-c", 'ulimit -n 256 && exec "$0" llmreplay serve "$@"', binary,
           "--mode", mode, "--cassette-dir", "cas", "--upstream", f"openai={upstream}"]
    if mode == "replay":
        cmd.append("--allow-repeats")  # each replay prompt is asked again and again
    p = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline().strip()
    assert line.startswith("LLMREPLAY_BASE_URL="), line
    return p, line.split("=", 1)[1].replace("http://", "")


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))


def thread_count(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"Threads:\s+(\d+)", f.read()).group(1))


class Client:
    """One keep-alive connection, opened again after any failure."""

    def __init__(self, addr):
        self.host, self.port = addr.split(":")
        self.conn = None

    def post(self, path, body):
        try:
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, int(self.port), timeout=10)
            self.conn.request("POST", path, body=json.dumps(body), headers={"content-type": "application/json"})
            r = self.conn.getresponse()
            r.read()
            return str(r.status)
        except Exception as e:  # counted by kind: the soak is about what happens, not to stop
            if self.conn is not None:
                self.conn.close()
            self.conn = None
            return type(e).__name__


def chat(prompt):
    return {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": prompt}]}


def health_ms(addr, limit=30.0):
    """Milliseconds until GET health answers 200, trying every 10 ms."""
    host, port = addr.split(":")
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < limit:
        try:
            c = http.client.HTTPConnection(host, int(port), timeout=1)
            c.request("GET", "/__llmreplay/health")
            if c.getresponse().status == 200:
                return (time.perf_counter() - t0) * 1000
        except Exception:
            time.sleep(0.01)
    return float("inf")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llmreplay", required=True)
    ap.add_argument("--seconds", type=int, default=600)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="llmreplay-soak-", dir=a.work)
    procs = []
    upstream_port = free_port()
    upstream = QuietServer(("127.0.0.1", upstream_port), Flaky)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    up_url = f"http://127.0.0.1:{upstream_port}"
    with open(os.path.join(tmp, "llmreplay.toml"), "w") as f:
        f.write("[upstream]\nidle_timeout_s = 2\n[limits]\nheader_read_timeout_s = 5\n")
    try:
        m, m_addr = start_serve(a.llmreplay, "record-missing", up_url, tmp)
        procs.append(m)
        # The 50 prompts R replays: recorded through M first (retried past the flaky answers).
        rec = Client(m_addr)
        for i in range(50):
            while rec.post("/t/soak%24replay/openai/v1/chat/completions", chat(f"replay {i}")) != "200":
                pass
        r, r_addr = start_serve(a.llmreplay, "replay", up_url, tmp)
        procs.append(r)

        counts = {"R": collections.Counter(), "M": collections.Counter()}
        lock = threading.Lock()
        stop_at = time.time() + a.seconds

        def load(name, addr, pick):
            c = Client(addr)
            local = collections.Counter()
            while time.time() < stop_at:
                path, body = pick()
                local[c.post(path, body)] += 1
            with lock:
                counts[name].update(local)

        def runs(addr, test):
            """One test asking its 200 prompts in order, run after run: as in a suite, the n-th
            ask of a prompt within a run is its n-th recording, and each run starts afresh
            (`begin`), so what was recorded is replayed and what failed is recorded later."""
            c = Client(addr)
            host, port = addr.split(":")
            local = collections.Counter()
            while time.time() < stop_at:
                for i in range(200):
                    if time.time() >= stop_at:
                        break
                    local[c.post(f"/t/soak%24{test}/openai/v1/chat/completions", chat(f"record {i}"))] += 1
                b = http.client.HTTPConnection(host, int(port), timeout=10)
                b.request("POST", f"/__llmreplay/begin?test=soak%24{test}")
                b.getresponse().read()
            with lock:
                counts["M"].update(local)

        rnd = random.Random(7)
        replays = lambda: ("/t/soak%24replay/openai/v1/chat/completions", chat(f"replay {rnd.randrange(50)}"))
        misses = lambda: ("/t/soak%24replay/openai/v1/chat/completions", chat(f"never recorded {rnd.random()}"))
        threads = [threading.Thread(target=load, args=("R", r_addr, replays)) for _ in range(3)]
        threads += [threading.Thread(target=load, args=("R", r_addr, misses))]
        threads += [threading.Thread(target=runs, args=(m_addr, f"rec{i}")) for i in range(3)]
        for t in threads:
            t.start()

        # Warm: cassettes loaded, and the journal at its bounds (it keeps the first 100,000 hits
        # and 10,000 other outcomes one by one, then counts).
        time.sleep(max(10, a.seconds / 5))
        rss_start = {"R": rss_kb(r.pid), "M": rss_kb(m.pid)}
        latencies = {"R": [], "M": []}
        series = {"R": [], "M": []}
        while time.time() < stop_at - 20:
            for name, p in (("R", r), ("M", m)):
                series[name].append(f"{rss_kb(p.pid) / 1024:.0f} ({thread_count(p.pid)} threads)")
            for name, addr in (("R", r_addr), ("M", m_addr)):
                idle = []
                for _ in range(300):
                    try:
                        idle.append(socket.create_connection(tuple([addr.split(":")[0], int(addr.split(":")[1])]), timeout=1))
                    except OSError:
                        break
                time.sleep(10)
                for s in idle:
                    s.close()
                latencies[name].append(health_ms(addr))
            time.sleep(max(0, min(40, stop_at - time.time() - 20)))
        for t in threads:
            t.join()
        rss_end = {"R": rss_kb(r.pid), "M": rss_kb(m.pid)}
        c = http.client.HTTPConnection(*m_addr.split(":"), timeout=30)
        c.request("GET", "/__llmreplay/journal")
        journal = json.loads(c.getresponse().read())
        reasons = collections.Counter(
            re.sub(r"\d+", "N", (line.get("message") or "")[:300]) for line in journal if line["outcome"] in ("error", "broken"))

        print(f"\nsoak: {a.seconds} s, each daemon limited to 256 file descriptors; flaky upstream calls: {Flaky.calls}\n")
        print("| daemon | requests | answers by status or error | RSS start -> end (MiB) | change | health after fd exhaustion (ms, max of n) |")
        print("|---|---|---|---|---|---|")
        for name, label in (("R", "R replay (replays + misses)"), ("M", "M record-missing (flaky upstream)")):
            c = counts[name]
            kinds = ", ".join(f"{k}: {v:,}" for k, v in sorted(c.items()))
            lat = latencies[name]
            print(f"| {label} | {sum(c.values()):,} | {kinds} | {rss_start[name] / 1024:.1f} -> {rss_end[name] / 1024:.1f} "
                  f"| {100 * (rss_end[name] - rss_start[name]) / rss_start[name]:+.1f}% | {max(lat) if lat else float('nan'):.0f} (n={len(lat)}) |")
        for name in ("R", "M"):
            print(f"{name} RSS each minute, MiB: " + ", ".join(series[name]))
        print("\nM's errors and broken streams, by message:")
        for reason, n in reasons.most_common(8):
            print(f"  {n:>6}  {reason}")
        cassette_files = sum(len(fs) for _, _, fs in os.walk(os.path.join(tmp, "cas")))
        print(f"\ncassette files at the end: {cassette_files}")
    finally:
        for p in procs:
            p.kill()
        upstream.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
