"""`python ask.py PROMPT...`: asks the model (OPENAI_BASE_URL, chat completions) each prompt in
turn with the standard library alone, printing each answer: a plain script, no test runner."""
import json
import os
import sys
import urllib.request

for prompt in sys.argv[1:]:
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": prompt}]}
    request = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"].rstrip("/") + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json", "authorization": "Bearer sk-not-a-real-key"},
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        print(json.load(answer)["choices"][0]["message"]["content"], flush=True)
