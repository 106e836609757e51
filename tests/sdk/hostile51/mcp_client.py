"""`python mcp_client.py SHIM PYTHON SERVER`: speaks JSON-RPC over stdio to SERVER through
the shim: initialize, notifications/initialized, then tools/call with x=1 and x=2. With
SILENT_ON=2 the server never answers the second call: the client gives up on it, closes the
server's stdin and exits 0 (as a client with a timeout would)."""
import json
import os
import subprocess
import sys

shim, python, server = sys.argv[1:4]
proc = subprocess.Popen(
    [shim, "llmreplay", "mcp", "--name", "quiet", "--", python, server],
    stdin=subprocess.PIPE,
    stdout=subprocess.PIPE,
    text=True,
)


def send(message):
    proc.stdin.write(json.dumps(message) + "\n")
    proc.stdin.flush()


send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}}})
print(proc.stdout.readline().strip(), flush=True)
send({"jsonrpc": "2.0", "method": "notifications/initialized"})
for x in (1, 2):
    send({"jsonrpc": "2.0", "id": 1 + x, "method": "tools/call",
          "params": {"name": "echo", "arguments": {"x": x}}})
    if os.environ.get("SILENT_ON") != str(x):
        print(proc.stdout.readline().strip(), flush=True)
proc.stdin.close()
print("shim exited", proc.wait(), flush=True)
