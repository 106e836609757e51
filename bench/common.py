"""What the bench drivers share: free loopback ports, and starting the floor server (or any
server) and waiting until it listens, by polling its port rather than sleeping a fixed time."""
import os, signal, socket, subprocess, sys, time


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port, proc, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"server exited early with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.01)
    sys.exit(f"nothing listened on {port} within {timeout}s")


def start_floor(binary):
    """Starts bench-floor on a free port; returns the process and its http:// URL."""
    port = free_port()
    floor = subprocess.Popen([binary, f"127.0.0.1:{port}"], stderr=subprocess.DEVNULL)
    wait_port(port, floor)
    return floor, f"http://127.0.0.1:{port}"


def start_serve(binary, args, cwd):
    """Starts `cargo llmreplay serve ARGS`; returns the process, its base URL and how long it
    took to print it (the daemon listens once it has)."""
    t0 = time.perf_counter()
    p = subprocess.Popen([binary, "llmreplay", "serve", *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline().strip()
    ready = time.perf_counter() - t0
    assert line.startswith("LLMREPLAY_BASE_URL="), line
    return p, line.split("=", 1)[1], ready


def stop(p):
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=30)


def mcp_session(command):
    """Starts an MCP server (or the shim) on stdio and says `initialize`; returns the process
    and `ask(message)`, which sends a JSON-RPC message and, for a request, returns its answer."""
    import json
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)

    def ask(message):
        proc.stdin.write(json.dumps(message) + "\n")
        proc.stdin.flush()
        if "id" not in message:
            return None
        while True:
            line = json.loads(proc.stdout.readline())
            if line.get("id") == message["id"] and "method" not in line:
                return line

    ask({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}})
    ask({"jsonrpc": "2.0", "method": "notifications/initialized"})
    return proc, ask


def llmreplay_binary():
    """The cargo-llmreplay to measure: CARGO_LLMREPLAY, else a release build, else a debug one."""
    named = os.environ.get("CARGO_LLMREPLAY")
    if named:
        return named
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for profile in ("release", "debug"):
        path = os.path.join(root, "target", profile, "cargo-llmreplay")
        if os.path.exists(path):
            return path
    sys.exit("build cargo-llmreplay first: cargo build --release")
