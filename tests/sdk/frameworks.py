"""One call through a framework (litellm, langchain-openai), configured by the environment
alone: `python frameworks.py <client> <prompt>` prints the answer's text as JSON."""

import json
import sys

client, prompt = sys.argv[1], sys.argv[2]

if client == "litellm-gemini":
    import litellm

    r = litellm.completion(
        model="gemini/gemini-2.0-flash",
        messages=[{"role": "user", "content": prompt}],
    )
    text = r.choices[0].message.content
elif client == "litellm-openai":
    import litellm

    r = litellm.completion(
        model="openai/gpt-4o-mini",
        messages=[{"role": "user", "content": prompt}],
    )
    text = r.choices[0].message.content
elif client == "litellm-anthropic":
    import litellm

    r = litellm.completion(
        model="anthropic/claude-x",
        max_tokens=50,
        messages=[{"role": "user", "content": prompt}],
    )
    text = r.choices[0].message.content
elif client == "langchain-openai":
    from langchain_openai import ChatOpenAI

    text = ChatOpenAI(model="gpt-4o-mini").invoke(prompt).content
else:
    raise SystemExit(f"unknown client {client}")

print(json.dumps({"text": text}))
