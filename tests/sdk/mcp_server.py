"""A FastMCP-style server of the official Python `mcp` SDK (MCPServer in 2.x), over stdio or
Streamable HTTP: `mcp_server.py [http PORT_FILE] [--json]`. `MCP_SCHEMA=v2` gives `add` another
input schema, `MCP_ANSWER` another answer, for the schema drift and --live tests."""

import os
import sys

from mcp.server.mcpserver import Context, MCPServer
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
        server.run(transport="streamable-http", port=port, json_response="--json" in sys.argv)
    else:
        server.run()
