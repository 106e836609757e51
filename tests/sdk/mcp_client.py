"""An agent's tool side through the official Python `mcp` SDK's client, printing one JSON line per
answer: `mcp_client.py demo SHIM PYTHON SERVER_SCRIPT` (stdio through `cargo llmreplay mcp`),
`mcp_client.py http` (Streamable HTTP at `$WEB_MCP_URL`), `mcp_client.py captured` (at the
hard-coded https://tools.example/mcp, through capture), `mcp_client.py everything SHIM NODE
INDEX_JS` (the reference server-everything through the shim). `MCP_B` changes an argument; `MCP_TIMEOUT` is how long the client waits for `whoami`."""

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


async def main():
    kind = sys.argv[1]
    if kind in ("http", "captured"):
        # A hard-coded URL reaches the daemon through the proxy the environment names.
        url = os.environ["WEB_MCP_URL"] if kind == "http" else "https://tools.example/mcp"
        async with streamable_http_client(url) as (r, w, *_):
            async with ClientSession(r, w, sampling_callback=sampling, logging_callback=on_log) as s:
                await demo(s)
        return
    shim, program, script = sys.argv[2:5]
    name = "demo" if kind == "demo" else "everything"
    # As the SDK does by default, the server gets a short list of variables only (no
    # LLMREPLAY_*): the two the demo server reads are passed on by name.
    passed = {k: os.environ[k] for k in ("MCP_SCHEMA", "MCP_ANSWER") if k in os.environ}
    params = StdioServerParameters(
        command=shim, args=["llmreplay", "mcp", "--name", name, "--", program, script], env=passed or None
    )
    async with stdio_client(params) as (r, w):
        async with ClientSession(r, w, sampling_callback=sampling, logging_callback=on_log) as s:
            await (demo(s) if kind == "demo" else everything(s))


asyncio.run(main())
