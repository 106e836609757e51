"""An agent's turn, as `cargo llmreplay trajectory` reads it back: the model (the official
OpenAI SDK) asks for a tool; the tool is an HTTP API at a hard-coded https host (requests,
through the proxy the environment names) and then the demo MCP server over stdio (the official
`mcp` SDK, through the shim); the model answers last. `python trajectory_agent.py SHIM PYTHON
SERVER` prints the final answer. `AGENT_TOOL` names the tool it offers the model (its API's
path follows the name): `get_forecast` makes a re-recorded run choose another tool."""
import asyncio
import json
import os
import sys

import openai
import requests
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

shim, program, server = sys.argv[1:4]
client = openai.OpenAI(max_retries=0)
tools = [
    {
        "type": "function",
        "function": {
            "name": os.environ.get("AGENT_TOOL", "get_weather"),
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
messages = [{"role": "user", "content": "Weather in Paris, plus 2 and 3?"}]
first = client.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=tools)
call = first.choices[0].message.tool_calls[0]
city = json.loads(call.function.arguments)["city"]

path = call.function.name.removeprefix("get_")
weather = requests.get(f"https://tools.example/tools/{path}", params={"city": city}, timeout=60)
weather.raise_for_status()


async def add():
    params = StdioServerParameters(command=shim, args=["llmreplay", "mcp", "--name", "demo", "--", program, server])
    async with stdio_client(params) as (r, w):
        async with ClientSession(r, w) as s:
            await s.initialize()
            result = await s.call_tool("add", {"a": 2, "b": 3})
            return " ".join(c.text for c in result.content if getattr(c, "text", None))


total = asyncio.run(add())
messages += [
    {"role": "assistant", "tool_calls": [call.model_dump()]},
    {"role": "tool", "tool_call_id": call.id, "content": f"sunny; {total}"},
    {"role": "user", "content": "Say it"},
]
final = client.chat.completions.create(model="gpt-4o-mini", messages=messages)
print(final.choices[0].message.content)
