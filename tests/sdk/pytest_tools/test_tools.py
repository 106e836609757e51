"""Two tests calling a tool's hard-coded https API through one module-level requests.Session:
the kept-alive tunnel through the capture proxy serves both tests."""
import requests

session = requests.Session()


def lookup(who):
    answer = session.get("https://tools.example/tools/lookup", params={"who": who}, timeout=60)
    answer.raise_for_status()
    return answer.text


def test_tool_one():
    assert "one" in lookup("one")


def test_tool_two():
    assert "two" in lookup("two")
