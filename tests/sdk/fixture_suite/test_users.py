"""Four tests that use the session fixture, each with a call of its own."""
import pytest
from conftest import ask, keep


@pytest.mark.parametrize("name", ["a", "b", "c", "d"])
def test_user(greeting, name):
    keep(f"greeting-{name}", greeting)
    keep(name, ask(f"Test {name}"))
