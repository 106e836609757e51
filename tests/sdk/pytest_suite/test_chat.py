"""A pytest suite as users write them: one module-level client per SDK, made at import and
shared by every test, calling in the test process. Each test writes what it was answered to
`$SAMPLE_OUT/<test>.txt`, so the outer test can compare a recording run with a replay."""
import os

import anthropic
import openai
import pytest

client = openai.OpenAI(max_retries=0)
claude = anthropic.Anthropic(max_retries=0)


def keep(name, text):
    out = os.environ.get("SAMPLE_OUT")
    if out:
        with open(os.path.join(out, f"{name}.txt"), "w") as f:
            f.write(text)


def ask(prompt):
    answer = client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": prompt}]
    )
    return answer.choices[0].message.content


def test_hello():
    prompt = "Hello again" if os.environ.get("SAMPLE_CHANGED") else "Hello"
    said = ask(prompt)
    keep("hello", said)
    assert said.startswith("You said: ")


def test_claude():
    answer = claude.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=16,
        messages=[{"role": "user", "content": "Bonjour Claude"}],
    )
    keep("claude", answer.content[0].text)


@pytest.mark.parametrize("word", ["one"])
def test_count(word):
    keep(f"count-{word}", ask(f"Count {word}"))
