"""A small suite for the ledger, through the official SDKs, each call naming its test with
X-Test-Id (as a client without a runner's help does). Prompts with USAGE get the fake
provider's real usage blocks. `suite`: OpenAI (plain and streamed), Anthropic (plain and
streamed), Gemini, and a model no price table knows. `capped`: four Anthropic calls, each
printed with its status; a refused one does not stop the script."""

import os
import sys
import urllib.parse

import anthropic
import openai
from google import genai
from google.genai import types


def test(name):
    return {"x-test-id": urllib.parse.quote(name, safe="")}


def suite():
    oa = openai.OpenAI(default_headers=test("suite$openai"), max_retries=0)
    said = oa.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "USAGE plain"}]
    )
    print("openai", said.usage.prompt_tokens_details.cached_tokens)
    chunks = oa.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "USAGE streamed"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    print("openai stream", [c.usage.completion_tokens for c in chunks if c.usage])
    ft = openai.OpenAI(default_headers=test("suite$finetune"), max_retries=0)
    ft.chat.completions.create(
        model="my-finetune", messages=[{"role": "user", "content": "USAGE tuned"}]
    )
    an = anthropic.Anthropic(default_headers=test("suite$anthropic"), max_retries=0)
    said = an.messages.create(
        model="claude-haiku-4-5",
        max_tokens=500,
        messages=[{"role": "user", "content": "USAGE plain"}],
    )
    print("anthropic", said.usage.cache_read_input_tokens)
    with an.messages.stream(
        model="claude-haiku-4-5",
        max_tokens=500,
        messages=[{"role": "user", "content": "USAGE streamed"}],
    ) as stream:
        print("anthropic stream", stream.get_final_message().usage.output_tokens)
    gm = genai.Client(http_options=types.HttpOptions(headers=test("suite$gemini")))
    said = gm.models.generate_content(model="gemini-2.5-flash", contents="USAGE plain")
    print("gemini", said.usage_metadata.thoughts_token_count)


def capped():
    an = anthropic.Anthropic(default_headers=test("capped$anthropic"), max_retries=0)
    for n in range(1, 5):
        try:
            an.messages.create(
                model="claude-haiku-4-5",
                max_tokens=500,
                messages=[{"role": "user", "content": f"USAGE call {n}"}],
            )
            print(f"call {n}: 200")
        except anthropic.APIStatusError as e:
            said = e.body["error"]["message"] if isinstance(e.body, dict) else e.message
            print(f"call {n}: {e.status_code} {said}")


{"suite": suite, "capped": capped}[sys.argv[1]]()
