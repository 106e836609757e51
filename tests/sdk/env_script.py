"""A script that knows nothing of cargo-llmreplay: the official SDKs configured by the
environment alone, as `cargo llmreplay serve --env` leaves it once sourced."""

import json

import anthropic
import openai

chat = openai.OpenAI().chat.completions.create(
    model="gpt-4o-mini", messages=[{"role": "user", "content": "Hello from a script"}]
)
message = anthropic.Anthropic().messages.create(
    model="claude-x", max_tokens=50, messages=[{"role": "user", "content": "Bonjour"}]
)
print(json.dumps({"openai": chat.choices[0].message.content, "anthropic": message.content[0].text}))
