"""The OpenAI Agents SDK (pinned in requirements.txt) running one agent with tracing on, as a
test would: the model calls go to OPENAI_BASE_URL (the daemon), and the SDK posts its traces to
its hard-coded https://api.openai.com/v1/traces/ingest, through the proxy the environment names.
Prints the agent's answer and the trace id, as JSON."""
import json

from agents import Agent, Runner, flush_traces, trace

agent = Agent(name="Greeter", instructions="Answer in one line.", model="gpt-4o-mini")
with trace("greeting") as t:
    result = Runner.run_sync(agent, "Say hello to the tracer")
# Every batch sent before the process ends (the exporter also flushes at exit).
flush_traces()
print(json.dumps({"output": result.final_output, "trace_id": t.trace_id}))
