"""One text turn of an OpenAI Realtime session through the official SDK's client (over the
`websockets` package), as a voice agent's test would make it. OPENAI_BASE_URL points at the
daemon; PROMPT is the user's message. Prints the server events' types, the text the deltas
assemble, any error event's message and the close code, as JSON."""
import json
import os

import openai
from websockets.exceptions import ConnectionClosed

client = openai.OpenAI(max_retries=0)
out = {"types": [], "text": "", "error": None, "closed": None}
with client.realtime.connect(model="gpt-realtime") as conn:
    try:
        conn.session.update(session={"type": "realtime", "instructions": "Answer in one line."})
        conn.conversation.item.create(
            item={
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": os.environ["PROMPT"]}],
            }
        )
        conn.response.create()
    except ConnectionClosed as e:
        # Refused mid-way: what the server said before closing is still to be read.
        out["closed"] = e.rcvd.code if e.rcvd else None
    try:
        for event in conn:
            out["types"].append(event.type)
            if event.type == "response.output_text.delta":
                out["text"] += event.delta
            if event.type == "error":
                out["error"] = event.error.message
                break
            if event.type == "response.done":
                break
    except ConnectionClosed as e:
        out["closed"] = e.rcvd.code if e.rcvd else None
print(json.dumps(out))
