"""Two tests whose node ids differ only where a cassette folder's name cannot: `a b` and
`a-b` meet at one folder. The run must stop before either calls out."""
import openai
import pytest


@pytest.mark.parametrize("name", ["a b", "a-b"])
def test_greets(name):
    client = openai.OpenAI(max_retries=0)
    client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": f"Hello {name}"}]
    )
