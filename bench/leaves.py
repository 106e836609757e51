"""Peak memory of the daemon's leaf certificates: `cargo-llmreplay serve` (replay) takes N
CONNECTs, each naming a host of its own, as a client that calls a new host every time would;
each makes a leaf certificate. Prints the daemon's peak RSS (VmHWM) before and after."""

import argparse
import base64
import os
import socket
import subprocess
import tempfile
import time


def rss_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--llmreplay", required=True)
    p.add_argument("--hosts", type=int, default=80_000)
    args = p.parse_args()
    work = tempfile.mkdtemp(prefix="llmreplay-leaves-")
    serve = subprocess.Popen(
        [args.llmreplay, "llmreplay", "serve", "--cassette-dir", "c"],
        cwd=work,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    first = serve.stdout.readline().strip()
    base = first.split("=", 1)[1]
    host, port = base.removeprefix("http://").split(":")
    token = base64.urlsafe_b64encode(b"bench$leaves").decode().rstrip("=")
    auth = base64.b64encode(f"{token}:".encode()).decode()
    # A TLS handshake never follows; the daemon ends each tunnel when its client goes.
    print(f"daemon at start: peak RSS {rss_kib(serve.pid, 'VmHWM') / 1024:.1f} MiB")
    started = time.monotonic()
    for i in range(args.hosts):
        s = socket.create_connection((host, int(port)))
        name = f"h{i}.leaves.example"
        s.sendall(
            f"CONNECT {name}:443 HTTP/1.1\r\nHost: {name}:443\r\nProxy-Authorization: Basic {auth}\r\n\r\n".encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = s.recv(4096)
            if not chunk:
                break
            head += chunk
        assert head.startswith(b"HTTP/1.1 200"), head
        s.close()
    took = time.monotonic() - started
    peak = rss_kib(serve.pid, "VmHWM") / 1024
    now = rss_kib(serve.pid, "VmRSS") / 1024
    print(f"{args.hosts} CONNECTs to distinct hosts in {took:.1f} s: peak RSS {peak:.1f} MiB, RSS now {now:.1f} MiB")
    serve.terminate()
    serve.wait()


main()
