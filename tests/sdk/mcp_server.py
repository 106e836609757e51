"""A FastMCP-style server of the official Python `mcp` SDK (MCPServer in 2.x), over stdio or
Streamable HTTP: `mcp_server.py [http PORT_FILE] [--json] [--resumable]` (`--resumable`: an
event store, so that a closed stream is resumed with Last-Event-ID). `--login` adds a tool that answers a new
access token as JSON text. `MCP_SCHEMA=v2` gives `add` another
input schema, `MCP_ANSWER` another answer, for the schema drift and --live tests."""

import json
import os
import sys

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.streamable_http import EventMessage, EventStore
from mcp.types import SamplingMessage, TextContent

server = MCPServer("demo")
OFFSET = int(os.environ.get("MCP_ANSWER", "0"))

if os.environ.get("MCP_SCHEMA") == "v2":

    @server.tool()
    def add(a: int, b: int, c: int = 0) -> int:
        """Add numbers."""
        return a + b + c + OFFSET

else:

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b + OFFSET


@server.tool()
def whoami(token: str) -> str:
    """Answers with the secret it was given: a body secret in both directions."""
    return "ok"


@server.tool()
async def summarize(text: str, ctx: Context) -> str:
    """Asks the client's model (sampling), then answers."""
    await ctx.log("info", "summarizing")
    reply = await ctx.session.create_message(
        messages=[SamplingMessage(role="user", content=TextContent(type="text", text=text))],
        max_tokens=20,
    )
    return "summary: " + reply.content.text


async def announce(ctx: Context) -> str:
    """Tells the client its tools changed: a notification of no request's, on the GET
    listening stream."""
    await ctx.session.send_tool_list_changed()
    return "announced"


async def slow_steps(ctx: Context) -> str:
    """Logs, closes its answer stream (the client resumes it with Last-Event-ID), logs
    again and answers."""
    await ctx.log("info", "step 1")
    await ctx.close_sse_stream()
    await ctx.log("info", "step 2")
    return "done in steps"


def login(user: str, password: str) -> str:
    """Issues a new access token, as JSON in the result's text (a vault or an auth tool)."""
    import secrets

    return json.dumps({"access_token": "vault-at-" + secrets.token_hex(16), "token_type": "Bearer", "expires_in": 3600})


# The streams' tools and the token tool, only where they are tried, so that the other tests
# list the same tools.
if "--resumable" in sys.argv:
    server.tool()(announce)
    server.tool()(slow_steps)
if "--login" in sys.argv:
    server.tool()(login)


class Events(EventStore):
    """Every event kept in memory, so that a client resumes a stream with Last-Event-ID."""

    def __init__(self):
        self.events = []

    async def store_event(self, stream_id, message):
        self.events.append((stream_id, message))
        return str(len(self.events))

    async def replay_events_after(self, last_event_id, send_callback):
        at = int(last_event_id)
        stream = self.events[at - 1][0]
        for n, (s, message) in enumerate(self.events[at:], start=at + 1):
            if s == stream and message is not None:
                await send_callback(EventMessage(message, str(n)))
        return stream


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        import socket

        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        sock.close()
        with open(sys.argv[2] + ".tmp", "w") as f:
            f.write(str(port))
        os.rename(sys.argv[2] + ".tmp", sys.argv[2])
        server.run(
            transport="streamable-http",
            port=port,
            json_response="--json" in sys.argv,
            event_store=Events() if "--resumable" in sys.argv else None,
            retry_interval=10,
        )
    else:
        server.run()
