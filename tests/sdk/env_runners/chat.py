"""A test script that knows nothing of cargo-llmreplay: the openai SDK configured by the
environment alone. Prints its answer on a line of its own, for the outer test to compare."""
import sys

import openai

said = openai.OpenAI(max_retries=0).chat.completions.create(
    model="gpt-4o-mini", messages=[{"role": "user", "content": " ".join(sys.argv[1:])}]
)
print(f"ANSWER: {said.choices[0].message.content}")
