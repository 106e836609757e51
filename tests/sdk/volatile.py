"""Prompts as tests really write them, through the official `openai` SDK: the mode is the first
argument. `time_and_uuid` embeds the current time and a fresh UUID; `minted_ids` has a tool
mint two order ids in turn 1 that turn 2 sends back; `stream` streams a greeting, with the SDK's
`stream_options={"include_usage": True}` when SAMPLE_USAGE is set, `n=1` (its default, made
explicit) when SAMPLE_N is, and the prompt SAMPLE_PROMPT names; `twice` streams a greeting, then
the prompt SAMPLE_SECOND_PROMPT names (a farewell), with `n=1` when SAMPLE_N is; `word` asks
about a random word. Prints the answers, as JSON."""
import datetime
import json
import os
import random
import secrets
import sys
import uuid

import openai

client = openai.OpenAI(max_retries=0)
mode = sys.argv[1]


def ask(messages, **options):
    answer = client.chat.completions.create(model="gpt-4o-mini", messages=messages, **options)
    return answer.choices[0].message.content


def order_id():
    # As a tool mints them: a prefix, then random letters and digits.
    return f"ord_{random.randint(1, 9)}k{secrets.token_hex(5)}"


if mode == "time_and_uuid":
    now = datetime.datetime.now(datetime.timezone.utc).isoformat()
    prompt = f"It is {now}. Request {uuid.uuid4()}: say hello"
    print(json.dumps({"answer": ask([{"role": "user", "content": prompt}])}))
elif mode == "minted_ids":
    first = [{"role": "user", "content": "Create two orders"}]
    said = ask(first)
    made = f"The tool made orders {order_id()} and {order_id()}. Confirm both."
    second = first + [{"role": "assistant", "content": said}, {"role": "user", "content": made}]
    print(json.dumps({"turn1": said, "turn2": ask(second)}))
elif mode == "word":
    # A value of no known shape, drawn anew each run: only two runs tell it is volatile.
    word = "".join(random.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(8))
    print(json.dumps({"answer": ask([{"role": "user", "content": f"Tell me about {word} please"}])}))
elif mode in ("stream", "twice"):

    def stream(prompt, **options):
        chunks = client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": prompt}], stream=True, **options
        )
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)

    options = {}
    if os.environ.get("SAMPLE_USAGE"):
        options["stream_options"] = {"include_usage": True}
    if os.environ.get("SAMPLE_N"):
        options["n"] = 1
    if mode == "stream":
        print(json.dumps({"answer": stream(os.environ.get("SAMPLE_PROMPT", "Stream a greeting"), **options)}))
    else:
        first = stream("Stream a greeting")
        second = stream(os.environ.get("SAMPLE_SECOND_PROMPT", "Stream a farewell"), **options)
        print(json.dumps({"first": first, "second": second}))
else:
    sys.exit(f"unknown mode {mode}")
