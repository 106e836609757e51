"""A stdio MCP server in the standard library: answers initialize and tools/call (with the
arguments it was given), and with SILENT_ON set never answers a tools/call whose argument `x`
is that value; it exits when its stdin closes."""
import json
import os
import sys

for line in sys.stdin:
    message = json.loads(line)
    if "id" not in message:
        continue
    method = message["method"]
    if method == "initialize":
        result = {
            "protocolVersion": message["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "quiet", "version": "1"},
        }
    elif method == "tools/call":
        x = message["params"]["arguments"]["x"]
        if os.environ.get("SILENT_ON") == str(x):
            continue
        result = {"content": [{"type": "text", "text": f"x is {x}"}]}
    else:
        result = {}
    print(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}), flush=True)
