"""Clients with hard-coded https URLs, as a test's code or an agent's tools would use them:
the Mistral SDK (api.mistral.ai), requests to a tool's API, and an OpenAI Realtime session
with no base URL. They reach the network only through the proxy the environment names. The
mode is the first argument; prints what the call answered."""
import json
import os
import sys

mode = sys.argv[1]
# These clients are not pointed at the daemon: they call the real hosts.
for var in ("OPENAI_BASE_URL", "OPENAI_API_BASE"):
    os.environ.pop(var, None)

if mode == "mistral":
    from mistralai.client import Mistral

    client = Mistral(api_key="not-a-real-key")
    answer = client.chat.complete(
        model="mistral-small-latest",
        messages=[{"role": "user", "content": "Bonjour Mistral"}],
    )
    print(answer.choices[0].message.content)
elif mode == "requests":
    import requests

    r = requests.get("https://tools.example/tools/weather", params={"city": "Paris"}, timeout=60)
    r.raise_for_status()
    print(r.text)
elif mode == "realtime":
    import openai

    client = openai.OpenAI(api_key="sk-not-a-real-key", max_retries=0)
    types = []
    with client.realtime.connect(model="gpt-realtime") as conn:
        conn.session.update(session={"type": "realtime", "instructions": "Answer in one line."})
        conn.conversation.item.create(
            item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]}
        )
        conn.response.create()
        for event in conn:
            types.append(event.type)
            if event.type == "response.done":
                break
    print(json.dumps(types))
else:
    sys.exit(f"unknown mode {mode}")
