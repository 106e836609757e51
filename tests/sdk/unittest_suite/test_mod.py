"""Two TestCase classes run by `python -m unittest`, with no plugin: each method's calls are
its own. Each test writes what it was answered to `$SAMPLE_OUT`."""
import os
import unittest

import openai


def ask(prompt):
    client = openai.OpenAI(max_retries=0)
    answer = client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": prompt}]
    )
    return answer.choices[0].message.content


def keep(name, text):
    out = os.environ.get("SAMPLE_OUT")
    if out:
        with open(os.path.join(out, f"{name}.txt"), "w") as f:
            f.write(text)


class TestChat(unittest.TestCase):
    def test_hello(self):
        prompt = "Hello again" if os.environ.get("SAMPLE_CHANGED") else "Hello"
        keep("hello", ask(prompt))

    def test_twice(self):
        keep("twice", ask("Once") + ask("Twice"))


class TestOther(unittest.TestCase):
    def test_other(self):
        keep("other", ask("Other"))
