"""Async tests that pytest-asyncio-cooperative runs side by side in one event loop, each
through another client: the official SDK (httpx's AsyncClient), aiohttp, requests on a
ThreadPoolExecutor's thread, and httpx's Client through asyncio.to_thread. The fake provider
holds every answer until all four are in flight, so only the header each request carries
can tell their tests apart; the SDK's test has a function-scoped fixture that calls too. Each
test writes what it was answered to `$SAMPLE_OUT`."""
import asyncio
import os
from concurrent.futures import ThreadPoolExecutor

import aiohttp
import httpx
import openai
import pytest
import requests

BASE = os.environ.get("OPENAI_BASE_URL", "")
HEADERS = {"authorization": f"Bearer {os.environ.get('OPENAI_API_KEY', '')}"}


def keep(name, text):
    out = os.environ.get("SAMPLE_OUT")
    if out:
        with open(os.path.join(out, f"{name}.txt"), "w") as f:
            f.write(text)


def body(prompt):
    return {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": prompt}]}


def said(answer):
    return answer["choices"][0]["message"]["content"]


@pytest.fixture
async def warmed():
    """A function-scoped fixture's call: its test's own, before the test's."""
    client = openai.AsyncOpenAI(max_retries=0)
    answer = await client.chat.completions.create(**body("Warm up the SDK"))
    return answer.choices[0].message.content


@pytest.mark.asyncio_cooperative
async def test_sdk(warmed):
    keep("warmed", warmed)
    client = openai.AsyncOpenAI(max_retries=0)
    for n in (1, 2):
        answer = await client.chat.completions.create(**body(f"From the SDK {n}"))
        keep(f"sdk-{n}", answer.choices[0].message.content)


@pytest.mark.asyncio_cooperative
async def test_aiohttp():
    async with aiohttp.ClientSession() as session:
        for n in (1, 2):
            url = f"{BASE}/chat/completions"
            async with session.post(url, json=body(f"From aiohttp {n}"), headers=HEADERS) as r:
                keep(f"aiohttp-{n}", said(await r.json()))


@pytest.mark.asyncio_cooperative
async def test_requests_in_a_pool():
    def call(n):
        r = requests.post(f"{BASE}/chat/completions", json=body(f"From requests {n}"),
                          headers=HEADERS, timeout=30)
        r.raise_for_status()
        return said(r.json())

    with ThreadPoolExecutor(max_workers=1) as pool:
        for n in (1, 2):
            keep(f"requests-{n}", await asyncio.wrap_future(pool.submit(call, n)))


@pytest.mark.asyncio_cooperative
async def test_httpx_in_a_thread():
    def call(n):
        with httpx.Client() as client:
            r = client.post(f"{BASE}/chat/completions", json=body(f"From httpx {n}"),
                            headers=HEADERS)
            r.raise_for_status()
            return said(r.json())

    for n in (1, 2):
        keep(f"httpx-{n}", await asyncio.to_thread(call, n))
