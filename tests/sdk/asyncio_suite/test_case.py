"""A unittest TestCase that pytest runs: its id is pytest's node id, announced once."""
import unittest

import openai


class TestOld(unittest.TestCase):
    def test_style(self):
        openai.OpenAI(max_retries=0).chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "Old style"}]
        )
