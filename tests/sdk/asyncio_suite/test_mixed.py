"""A sync test, pytest-asyncio async tests and a module-scoped async fixture in one file, run
one at a time: each test's calls its own, the fixture's its own."""
import os

import openai
import pytest
import pytest_asyncio


def keep(name, text):
    out = os.environ.get("SAMPLE_OUT")
    if out:
        with open(os.path.join(out, f"{name}.txt"), "w") as f:
            f.write(text)


async def ask(prompt):
    client = openai.AsyncOpenAI(max_retries=0)
    answer = await client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": prompt}]
    )
    return answer.choices[0].message.content


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def opening():
    return await ask("Open the module")


def test_sync():
    answer = openai.OpenAI(max_retries=0).chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "Sync"}]
    )
    keep("sync", answer.choices[0].message.content)


@pytest.mark.asyncio(loop_scope="module")
async def test_async(opening):
    keep("opening", opening)
    keep("async", await ask("Async"))


@pytest.mark.asyncio(loop_scope="module")
async def test_async_again(opening):
    keep("again", await ask("Async again"))


def test_elsewhere():
    """Requests to another host than the daemon (the provider itself, when SAMPLE_DIRECT names
    it) carry no X-Test-Id, through any hooked client."""
    direct = os.environ.get("SAMPLE_DIRECT")
    if not direct:
        return
    import asyncio

    import aiohttp
    import httpx
    import requests

    url = f"{direct}/v1/chat/completions"

    def body(client):
        return {"model": "m", "messages": [{"role": "user", "content": f"Direct {client}"}]}

    httpx.post(url, json=body("httpx")).raise_for_status()
    requests.post(url, json=body("requests"), timeout=30).raise_for_status()

    async def through_aiohttp():
        async with aiohttp.ClientSession() as session:
            async with session.post(url, json=body("aiohttp")) as answer:
                answer.raise_for_status()

    asyncio.run(through_aiohttp())
