"""A request with no recording, through each official SDK as a test would make it: the
environment is what the runner gives a test process in replay. Prints, per SDK, the exception
it raised, its status and message, as JSON."""
import json

out = {}

import openai

try:
    openai.OpenAI(max_retries=0).chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "never recorded"}]
    )
except openai.APIStatusError as e:
    out["openai"] = {"class": type(e).__name__, "status": e.status_code, "message": e.message}

import anthropic

try:
    anthropic.Anthropic(max_retries=0).messages.create(
        model="claude-sonnet-4-5",
        max_tokens=16,
        messages=[{"role": "user", "content": "never recorded"}],
    )
except anthropic.APIStatusError as e:
    # Its `message` is the body's repr; the parsed body holds the text as sent.
    out["anthropic"] = {
        "class": type(e).__name__,
        "status": e.status_code,
        "message": e.body["error"]["message"],
    }

from google import genai
from google.genai import errors

# Kept in a variable: a client nobody holds is closed under the request.
client = genai.Client()
try:
    client.models.generate_content(model="gemini-2.5-flash", contents="never recorded")
except errors.APIError as e:
    out["gemini"] = {"class": type(e).__name__, "status": e.code, "message": e.message}

print(json.dumps(out))
