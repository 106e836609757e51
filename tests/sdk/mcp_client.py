"""An agent's tool side through the official Python `mcp` SDK's client, printing one JSON line per
answer: `mcp_client.py demo SHIM PYTHON SERVER_SCRIPT` (stdio through `cargo llmreplay mcp`),
`mcp_client.py http` (Streamable HTTP at `$WEB_MCP_URL`), `mcp_client.py captured` (at the
hard-coded https://tools.example/mcp, through capture), `mcp_client.py streams` (the GET
listening stream and a resumed answer stream, at `$WEB_MCP_URL`), `mcp_client.py resume` (a
replayed answer stream resumed with Last-Event-ID, on the wire), `mcp_client.py everything SHIM NODE
INDEX_JS` (the reference server-everything through the shim), `mcp_client.py login SHIM PYTHON
SERVER_SCRIPT` (the demo server's token tool, logging in with `$MCP_PASSWORD`, through the shim). `MCP_B` changes an argument; `MCP_TIMEOUT` is how long the client waits for `whoami`."""

import asyncio
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CreateMessageResult, TextContent

B = int(os.environ.get("MCP_B", "3"))
progress = []
logs = []


async def sampling(ctx, params):
    asked = params.messages[0].content.text
    return CreateMessageResult(
        role="assistant", content=TextContent(type="text", text=f"short({asked})"), model="fake"
    )


async def on_log(params):
    logs.append(str(params.data))


async def on_progress(done, total, message):
    progress.append(done)


def say(**fields):
    print(json.dumps(fields, sort_keys=True), flush=True)


def text_of(result):
    return " ".join(c.text for c in result.content if getattr(c, "text", None))


async def demo(session):
    await session.initialize()
    tools = await session.list_tools()
    say(tools=sorted(t.name for t in tools.tools))
    for _ in range(2):
        result = await session.call_tool("add", {"a": 2, "b": B})
        say(add=text_of(result), error=bool(result.is_error))
    timeout = float(os.environ["MCP_TIMEOUT"]) if "MCP_TIMEOUT" in os.environ else None
    try:
        result = await session.call_tool(
            "whoami", {"token": os.environ.get("MCP_TOKEN", "")}, read_timeout_seconds=timeout
        )
        say(whoami=text_of(result))
    except Exception as e:  # a slow answer past MCP_TIMEOUT
        say(whoami=f"failed: {type(e).__name__}")
    result = await session.call_tool("summarize", {"text": "a long text"})
    say(summarize=text_of(result), logs=logs)


async def login(session):
    await session.initialize()
    result = await session.call_tool("login", {"user": "ana", "password": os.environ["MCP_PASSWORD"]})
    say(login=json.loads(text_of(result)), error=bool(result.is_error))


async def everything(session):
    await session.initialize()
    tools = await session.list_tools()
    say(has_sampling="trigger-sampling-request" in {t.name for t in tools.tools})
    result = await session.call_tool("echo", {"message": "hello"})
    say(echo=text_of(result))
    result = await session.call_tool("get-sum", {"a": 2, "b": B})
    say(sum=text_of(result))
    result = await session.call_tool("trigger-sampling-request", {"prompt": "hi", "maxTokens": 5})
    say(sampling=text_of(result))
    result = await session.call_tool(
        "trigger-long-running-operation", {"duration": 0.2, "steps": 2}, progress_callback=on_progress
    )
    say(long=text_of(result), progress=progress)


class Notices:
    def __init__(self):
        self.methods = []
        self.arrived = asyncio.Event()


async def streams(session, notices):
    """The server's other streams: a notification on the GET listening stream, and an answer
    stream the server closes halfway, resumed by the client with Last-Event-ID."""
    await session.initialize()
    result = await session.call_tool("announce", {})
    say(announce=text_of(result))
    # The notification comes on another connection: wait for it, within reason.
    try:
        await asyncio.wait_for(notices.arrived.wait(), 10)
    except asyncio.TimeoutError:
        pass
    say(notices=notices.methods)
    result = await session.call_tool("slow_steps", {})
    say(slow_steps=text_of(result), logs=logs)


def resume():
    """The wire of a client that lost an answer stream after its first event: it reads that
    event's id, drops the connection and resumes with a GET naming it (Last-Event-ID)."""
    import httpx

    url = os.environ["WEB_MCP_URL"]
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    with httpx.Client(timeout=10) as http:
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"},
            },
        }
        answer = http.post(url, json=init, headers=headers)
        session = {"Mcp-Session-Id": answer.headers["mcp-session-id"], "Mcp-Protocol-Version": "2025-11-25"}
        headers.update(session)
        http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "slow_steps", "arguments": {}}}
        # Read up to the first event that carries a message (a server with an event store
        # may first send a priming event, or close the stream before any), then drop it.
        last_id, seen = None, []
        with http.stream("POST", url, json=call, headers=headers) as answer:
            block = []
            for line in answer.iter_lines():
                if line:
                    block.append(line)
                    continue
                fields = dict((k, v.strip()) for k, v in (l.split(":", 1) for l in block if ":" in l))
                block = []
                last_id = fields.get("id", last_id)
                if fields.get("data"):
                    seen.append(json.loads(fields["data"]))
                    break
        rest = http.get(url, headers={**session, "Accept": "text/event-stream", "Last-Event-ID": last_id})
        resumed = [json.loads(l[len("data:"):]) for l in rest.text.splitlines() if l.startswith("data:") and l[5:].strip()]
        said = [m.get("params", {}).get("data") or m["result"]["content"][0]["text"] for m in seen + resumed]
        say(resumed_status=rest.status_code, resumed_some=bool(resumed), messages=said, answer_id=resumed[-1]["id"])
        unknown = http.get(url, headers={**session, "Accept": "text/event-stream", "Last-Event-ID": "999"})
        say(unknown=unknown.status_code)


async def main():
    kind = sys.argv[1]
    if kind == "resume":
        resume()
        return
    if kind == "streams":
        notices = Notices()

        async def on_message(message):
            method = getattr(getattr(message, "root", message), "method", None)
            if method == "notifications/tools/list_changed":
                notices.methods.append(method)
                notices.arrived.set()

        async with streamable_http_client(os.environ["WEB_MCP_URL"]) as (r, w, *_):
            async with ClientSession(r, w, logging_callback=on_log, message_handler=on_message) as s:
                await streams(s, notices)
        return
    if kind in ("http", "captured"):
        # A hard-coded URL reaches the daemon through the proxy the environment names.
        url = os.environ["WEB_MCP_URL"] if kind == "http" else "https://tools.example/mcp"
        async with streamable_http_client(url) as (r, w, *_):
            async with ClientSession(r, w, sampling_callback=sampling, logging_callback=on_log) as s:
                await demo(s)
        return
    shim, program, script = sys.argv[2:5]
    name = {"demo": "demo", "login": "vault"}.get(kind, "everything")
    more = ["--login"] if kind == "login" else []
    # As the SDK does by default, the server gets a short list of variables only (no
    # LLMREPLAY_*): the two the demo server reads are passed on by name.
    passed = {k: os.environ[k] for k in ("MCP_SCHEMA", "MCP_ANSWER") if k in os.environ}
    params = StdioServerParameters(
        command=shim, args=["llmreplay", "mcp", "--name", name, "--", program, script, *more], env=passed or None
    )
    async with stdio_client(params) as (r, w):
        async with ClientSession(r, w, sampling_callback=sampling, logging_callback=on_log) as s:
            await {"demo": demo, "login": login}.get(kind, everything)(s)


asyncio.run(main())
