"""A test that records one call, says so in SAMPLE_MARKER, then waits to be interrupted (Ctrl-C):
its end must say `interrupted`, never `passed`."""

import json
import os
import time
import urllib.request


def test_waits_after_a_call():
    base = os.environ["OPENAI_BASE_URL"]
    body = json.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": os.environ.get("SAMPLE_PROMPT", "old")}]})
    request = urllib.request.Request(f"{base}/chat/completions", data=body.encode(), method="POST",
                                     headers={"content-type": "application/json", "authorization": "Bearer sk-test"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=30) as answer:
        assert answer.status == 200
    marker = os.environ.get("SAMPLE_MARKER")
    if marker:
        with open(marker, "w") as f:
            f.write("called")
        while True:
            time.sleep(0.05)
