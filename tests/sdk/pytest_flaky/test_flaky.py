"""A flaky test under pytest-rerunfailures: its first attempt fails after its call, its rerun
passes. Each attempt makes the same call: the rerun must be answered as the first was."""

import os
import pathlib

import openai

client = openai.OpenAI(max_retries=0)


def test_flaky():
    said = client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "Retry me"}]
    ).choices[0].message.content
    assert said.startswith("You said: Retry me")
    marker = pathlib.Path(os.environ["SAMPLE_STATE"]) / "failed-once"
    if not marker.exists():
        marker.write_text("")
        raise AssertionError("the first attempt fails on purpose")
