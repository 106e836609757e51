"""A test that records one call through the official OpenAI SDK (a module-level client, as users
write them), says so in SAMPLE_MARKER, then waits to be interrupted (Ctrl-C): its end must say
`interrupted`, never `passed`."""

import os
import time

import openai

client = openai.OpenAI(max_retries=0)


def test_waits_after_a_call():
    prompt = os.environ.get("SAMPLE_PROMPT", "old")
    answer = client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": prompt}])
    assert prompt in answer.choices[0].message.content
    marker = os.environ.get("SAMPLE_MARKER")
    if marker:
        with open(marker, "w") as f:
            f.write("called")
        while True:
            time.sleep(0.05)
