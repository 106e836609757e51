"""pytest-llmreplay: each test's LLM calls in its own cassettes, under cargo-llmreplay.

Before each test, in the process that runs it (an xdist worker included), the plugin tells the
daemon `POST /__llmreplay/begin?test=<node id>&pid=<this process>`; the daemon files every
request from this process, whatever client or connection it comes on, under that test. After
the test, `POST /__llmreplay/end` says how it ended, so that `--record` leaves a test that passed
with exactly what it recorded. Where the daemon cannot tell a connection's process (it says so
in its answer), the plugin names the test in an `X-Test-Id` header through httpx's and
requests' own send methods instead. `begin` carries the process's secret-looking variables
(`*_TOKEN`, `*_KEY`, `*_SECRET`, `*_PASSWORD`, `*_CREDENTIALS`) as they are when the test
starts, so that a key a conftest loaded is replaced wherever it turns up, as the daemon's own.

With no daemon in the environment (`LLMREPLAY_BASE_URL`), it does nothing.
"""

import json
import os
import sys
import urllib.parse
import urllib.request

import pytest

# The daemon is on loopback: never through a proxy the environment names (capture sets one).
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))

# The test this process runs now, for the header fallback.
_current = None
_hooked = False


def _root():
    base = os.environ.get("LLMREPLAY_BASE_URL", "")
    if not base:
        return None
    # A base URL of one test (`.../t/<id>`) has the daemon's root before it.
    return base.split("/t/", 1)[0].rstrip("/")


def _post(root, route, _body=b"", **params):
    # Percent-encoded, spaces as %20: the daemon reads a `+` as itself.
    query = urllib.parse.urlencode(params, quote_via=urllib.parse.quote)
    url = f"{root}/__llmreplay/{route}?{query}"
    request = urllib.request.Request(url, data=_body, method="POST")
    try:
        with _OPENER.open(request, timeout=30) as answer:
            return json.load(answer)
    except (OSError, ValueError) as e:
        sys.stderr.write(f"pytest-llmreplay: could not reach the daemon at {root}: {e}\n")
        return None


def _hook_clients():
    """Names the current test in every request httpx and requests send from this process."""
    global _hooked
    if _hooked:
        return
    _hooked = True

    def named(headers):
        if _current is not None and "x-test-id" not in headers:
            headers["x-test-id"] = urllib.parse.quote(_current, safe="")

    try:
        import httpx
    except ImportError:
        httpx = None
    if httpx is not None:
        for cls in (httpx.Client, httpx.AsyncClient):
            original = cls.send

            def send(self, request, *args, _original=original, **kwargs):
                named(request.headers)
                return _original(self, request, *args, **kwargs)

            cls.send = send
    try:
        import requests
    except ImportError:
        requests = None
    if requests is not None:
        original = requests.Session.send

        def session_send(self, request, **kwargs):
            named(request.headers)
            return original(self, request, **kwargs)

        requests.Session.send = session_send


_SECRET_SUFFIXES = ("_TOKEN", "_KEY", "_SECRET", "_PASSWORD", "_CREDENTIALS")


def _secret_env():
    """This process's secret-looking variables as the test starts (a `.env` a conftest loaded
    included), for the daemon to replace wherever their values turn up: `{"env": {...}}`."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k.upper().endswith(_SECRET_SUFFIXES) and len(v.strip()) >= 8
    }
    return json.dumps({"env": env}).encode() if env else b""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    global _current
    root = _root()
    if root is None:
        yield
        return
    test = item.nodeid
    # Nothing said yet: a test that never reaches its call's report (Ctrl-C, a crash) did
    # not pass, and its end says "interrupted", never "passed".
    item.stash[_OUTCOME] = None
    answer = _post(root, "begin", _secret_env(), test=test, pid=os.getpid())
    if answer is not None and not answer.get("peers", False):
        _hook_clients()
    _current = test
    result = None
    try:
        result = yield
    finally:
        _current = None
        outcome = item.stash[_OUTCOME] or "interrupted"
        excinfo = getattr(result, "excinfo", None) if result is not None else None
        if excinfo is not None:
            outcome = "interrupted" if issubclass(excinfo[0], KeyboardInterrupt) else "failed"
        _post(root, "end", test=test, pid=os.getpid(), outcome=outcome)


_OUTCOME = pytest.StashKey[str]()
_ATTEMPTS = pytest.StashKey[int]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    # A rerun (pytest-rerunfailures runs the whole protocol again inside one) begins the test
    # again: its calls are answered from the first of its recordings, as the first attempt's were.
    if _OUTCOME not in item.stash:
        return
    attempts = item.stash.get(_ATTEMPTS, 0) + 1
    item.stash[_ATTEMPTS] = attempts
    root = _root()
    if attempts > 1 and root is not None:
        item.stash[_OUTCOME] = None
        _post(root, "begin", _secret_env(), test=item.nodeid, pid=os.getpid())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    result = yield
    report = result.get_result()
    if _OUTCOME not in item.stash:
        return
    said = item.stash[_OUTCOME]
    if call.excinfo is not None and call.excinfo.errisinstance(KeyboardInterrupt):
        item.stash[_OUTCOME] = "interrupted"
    elif report.failed:
        item.stash[_OUTCOME] = "failed"
    elif report.skipped and said in (None, "passed"):
        item.stash[_OUTCOME] = "skipped"
    elif report.when == "call" and report.passed and said is None:
        item.stash[_OUTCOME] = "passed"
