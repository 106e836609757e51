"""Which test a request belongs to, told to the cargo-llmreplay daemon from inside the test.

The one source of the Python side's test identity, shared by the pytest-llmreplay plugin (as
`pytest_llmreplay._identity`) and by the `sitecustomize` that `cargo llmreplay run` puts on
PYTHONPATH for `python -m unittest` (as `_llmreplay_identity`); whichever loads first is the
one both use. The running test is a context variable, so each thread and each asyncio task
carries its own (a ThreadPoolExecutor's calls the one of the code that submitted them, as
asyncio.to_thread's do; a bare threading.Thread none): httpx and httpx2 (so the official
SDKs), urllib3 (so requests and botocore) and aiohttp name it in an
`X-Test-Id` header on every request that reaches the daemon, directly or through it as a
proxy, and never on a request to any other host. The process-level `begin` and `end` stay
for clients that are not hooked.
"""

import contextvars
import importlib.machinery
import json
import os
import sys
import urllib.parse

# Both names lead to the first copy loaded: two copies would each see only their own tests.
# The plugin takes the other copy only when it has the same API (a `cargo-llmreplay` and a
# plugin of other releases may meet); a header already set is never set again.
API = 1
sys.modules.setdefault("_llmreplay_identity", sys.modules[__name__])

CURRENT = contextvars.ContextVar("llmreplay_test", default=None)

# urllib.request, imported on first use: every Python process of a unittest run loads this
# module, most of them never to call the daemon.
_opener = None

_SECRET_SUFFIXES = ("_TOKEN", "_KEY", "_SECRET", "_PASSWORD", "_CREDENTIALS")

_LOOPBACK = {"127.0.0.1", "localhost"}


def root():
    """The daemon's root URL, or None outside a run."""
    base = os.environ.get("LLMREPLAY_BASE_URL", "")
    if not base:
        return None
    # A base URL of one test (`.../t/<id>`) has the daemon's root before it.
    return base.split("/t/", 1)[0].rstrip("/")


def post(route, body=b"", quiet=False, **params):
    """`POST /__llmreplay/<route>?<params>`: the daemon's JSON answer, or None."""
    global _opener
    at = root()
    if at is None:
        return None
    import urllib.error
    import urllib.request

    if _opener is None:
        # The daemon is on loopback: never through a proxy the environment names.
        _opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    # Percent-encoded, spaces as %20: the daemon reads a `+` as itself.
    query = urllib.parse.urlencode(params, quote_via=urllib.parse.quote)
    request = urllib.request.Request(
        f"{at}/__llmreplay/{route}?{query}", data=body, method="POST"
    )
    try:
        with _opener.open(request, timeout=30) as answer:
            text = answer.read()
            return json.loads(text) if text.strip() else {}
    except urllib.error.HTTPError as e:
        # The daemon said no, and why: that is for the user to read.
        said = e.read().decode("utf-8", "replace").strip()
        sys.stderr.write(f"llmreplay: {route} refused ({e.code}): {said}\n")
        return {"refused": e.code, "message": said}
    except (OSError, ValueError) as e:
        if not quiet:
            sys.stderr.write(f"llmreplay: could not reach the daemon at {at}: {e}\n")
        return None


def secret_env():
    """This process's secret-looking variables as the test starts (a `.env` a conftest loaded
    included), for the daemon to replace wherever their values turn up: `{"env": {...}}`."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k.upper().endswith(_SECRET_SUFFIXES) and len(v.strip()) >= 8
    }
    return json.dumps({"env": env}).encode() if env else b""


def begin(test):
    """Starts `test`'s calls afresh, for this process's requests that name no test."""
    return post("begin", secret_env(), test=test, pid=os.getpid())


def end(test, outcome):
    """`test` ended: `passed`, `failed`, `skipped` or `interrupted`."""
    post("end", test=test, pid=os.getpid(), outcome=outcome)


class Refused(Exception):
    """The daemon refused what the runner said of its suite (two tests that would share a
    cassette folder): the run stops before any test calls out."""


def listed(runner, tests, filtered):
    """The collected suite, fixture ids included: what orphans and unused are judged against.
    Raises `Refused` with the daemon's words when it names tests that would share a folder."""
    body = "".join(f"{t}\n" for t in tests).encode()
    answer = post(
        "listed",
        body,
        quiet=True,
        runner=runner,
        filtered="true" if filtered else "false",
    )
    if answer and answer.get("refused") == 409:
        raise Refused(answer["message"])


# --- Which requests reach the daemon -------------------------------------------------------


def _address(url, default_scheme="http"):
    """`(host, port)` of a URL, loopback names made one; None when it has no host."""
    if "//" not in url:
        url = f"{default_scheme}://{url}"
    try:
        parts = urllib.parse.urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    if not host:
        return None
    if port is None:
        port = 443 if parts.scheme in ("https", "wss") else 80
    return _host(host), port


def _host(host):
    host = host.lower().strip("[]")
    return "127.0.0.1" if host in _LOOPBACK else host


def _daemon():
    at = root()
    return _address(at) if at else None


def is_daemon(host, port):
    """Whether `host:port` is the daemon."""
    daemon = _daemon()
    return daemon is not None and host is not None and (_host(str(host)), port) == daemon


def reaches_daemon(url, proxy=None, trust_env=True):
    """Whether a request to `url` reaches the daemon: it is the daemon's, or goes through
    `proxy` (or, with `trust_env`, the proxy the environment names for it, NO_PROXY heeded)
    and that proxy is the daemon."""
    daemon = _daemon()
    if daemon is None:
        return False
    url = str(url)
    if _address(url) == daemon:
        return True
    if proxy is None and trust_env:
        import urllib.request

        proxies = urllib.request.getproxies_environment()
        scheme = urllib.parse.urlsplit(url).scheme
        proxy = proxies.get(scheme) or proxies.get("all")
        if proxy:
            host = urllib.parse.urlsplit(url).netloc.rsplit("@", 1)[-1]
            if urllib.request.proxy_bypass_environment(host, proxies):
                proxy = None
    return bool(proxy) and _address(str(proxy)) == daemon


def header():
    """The value of `X-Test-Id` for the current context, or None outside a test."""
    test = CURRENT.get()
    return None if test is None else urllib.parse.quote(test, safe="")


# --- Hooks on the clients, put in as each is imported --------------------------------------


def _httpx_reaches_daemon(client, url):
    """Whether an httpx (or httpx2) client sends a request to `url` to the daemon: the URL is
    the daemon's, or the transport the client picks for it goes through a proxy that is. The
    environment's proxies are not enough to go by: a client given a proxy or a transport of
    its own ignores them, and would carry the header to another host."""
    daemon = _daemon()
    if daemon is None:
        return False
    if _address(str(url)) == daemon:
        return True
    pick = getattr(client, "_transport_for_url", None)
    if pick is None:
        return reaches_daemon(url, trust_env=getattr(client, "trust_env", True))
    # httpcore's proxy pools keep their proxy's URL; a direct pool or a transport of the
    # user's own names none.
    proxy = getattr(getattr(pick(url), "_pool", None), "_proxy_url", None)
    if proxy is None:
        return False
    def text(part):
        return part.decode("ascii", "replace") if isinstance(part, bytes) else str(part)

    port = proxy.port or (443 if text(proxy.scheme) == "https" else 80)
    return (_host(text(proxy.host)), port) == daemon


def _hook_httpx(httpx):
    def named(client, request):
        value = header()
        if (
            value is not None
            and "x-test-id" not in request.headers
            and _httpx_reaches_daemon(client, request.url)
        ):
            request.headers["x-test-id"] = value

    original = httpx.Client.send

    def send(self, request, *args, **kwargs):
        named(self, request)
        return original(self, request, *args, **kwargs)

    httpx.Client.send = send
    original_async = httpx.AsyncClient.send

    async def send_async(self, request, *args, **kwargs):
        named(self, request)
        return await original_async(self, request, *args, **kwargs)

    httpx.AsyncClient.send = send_async


def _hook_urllib3(connectionpool):
    # Every urllib3 request, requests' and botocore's included, goes through a pool's urlopen:
    # the pool is the daemon's, or (tunnelled HTTPS) its proxy is.
    pool = connectionpool.HTTPConnectionPool
    original = pool.urlopen

    def urlopen(self, method, url, body=None, headers=None, *args, **kwargs):
        value = header()
        if value is not None:
            proxy = getattr(self, "proxy", None)
            if is_daemon(self.host, self.port) or (
                proxy is not None and is_daemon(proxy.host, proxy.port or 80)
            ):
                given = self.headers if headers is None else headers
                if not any(k.lower() == "x-test-id" for k in given):
                    headers = connectionpool.HTTPHeaderDict(given)
                    headers["X-Test-Id"] = value
        return original(self, method, url, body, headers, *args, **kwargs)

    pool.urlopen = urlopen


def _hook_aiohttp(client_reqrep):
    # A ClientRequest knows its URL and the proxy the session chose (the environment's under
    # trust_env) once made, and sends its headers later.
    request = client_reqrep.ClientRequest
    original = request.__init__

    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        value = header()
        if (
            value is not None
            and "x-test-id" not in self.headers
            and reaches_daemon(self.url, proxy=self.proxy, trust_env=False)
        ):
            self.headers["X-Test-Id"] = value

    request.__init__ = __init__


def _hook_thread_pool(thread):
    # A pool's threads do not take the context of the code that submits to them (as
    # asyncio.to_thread's do): the test that submits a call is carried to it, and only that.
    pool = thread.ThreadPoolExecutor
    original = pool.submit

    def submit(self, fn, /, *args, **kwargs):
        test = CURRENT.get()
        if test is None:
            return original(self, fn, *args, **kwargs)

        def named(*args, **kwargs):
            token = CURRENT.set(test)
            try:
                return fn(*args, **kwargs)
            finally:
                CURRENT.reset(token)

        return original(self, named, *args, **kwargs)

    pool.submit = submit


_HOOKS = {
    "concurrent.futures.thread": _hook_thread_pool,
    "httpx": _hook_httpx,
    # httpx's successor, which the official SDKs (openai, anthropic, google-genai) use.
    "httpx2": _hook_httpx,
    "urllib3.connectionpool": _hook_urllib3,
    "aiohttp.client_reqrep": _hook_aiohttp,
}


class _AfterImport:
    """A finder that runs `hooks[name]` on a module right after it is first imported, so
    that installing hooks imports none of the clients."""

    def __init__(self, hooks):
        self.hooks = hooks

    def find_spec(self, name, path, target=None):
        hook = self.hooks.get(name)
        if hook is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        # Only a loader of its own (a file's) may be given an exec_module of its own.
        own = (importlib.machinery.SourceFileLoader, importlib.machinery.SourcelessFileLoader)
        if not isinstance(loader, own):
            return None
        del self.hooks[name]
        inner = loader.exec_module

        def exec_module(module):
            inner(module)
            hook(module)

        loader.exec_module = exec_module
        return spec


_after_import = None


def hook_modules(hooks):
    """Runs each `hooks[name](module)` once: now for a module already imported, else as it is."""
    global _after_import
    later = {}
    for name, hook in hooks.items():
        module = sys.modules.get(name)
        if module is not None:
            hook(module)
        else:
            later[name] = hook
    if not later:
        return
    if _after_import is None:
        _after_import = _AfterImport({})
        sys.meta_path.insert(0, _after_import)
    _after_import.hooks.update(later)


_clients_hooked = False


def hook_clients():
    """Names the current context's test in every request httpx, httpx2, urllib3 and aiohttp
    send to the daemon, from now on, and carries it into a ThreadPoolExecutor's calls."""
    global _clients_hooked
    if _clients_hooked:
        return
    _clients_hooked = True
    hook_modules(_HOOKS)


# --- unittest -------------------------------------------------------------------------------


def _hook_unittest_case(case):
    original = case.TestCase.run

    def run(self, result=None):
        # A test some other runner already named (pytest's plugin, by its node id) is its.
        if CURRENT.get() is not None or root() is None:
            return original(self, result)
        test = self.id()
        token = CURRENT.set(test)
        # IsolatedAsyncioTestCase runs its coroutines in a context copied when it was made.
        context = getattr(self, "_asyncioTestContext", None)
        if context is not None:
            context.run(CURRENT.set, test)
        before = _counts(result)
        begin(test)
        outcome = "interrupted"
        try:
            returned = original(self, result)
            outcome = _outcome(before, _counts(returned if returned is not None else result))
            return returned
        finally:
            CURRENT.reset(token)
            end(test, outcome)

    case.TestCase.run = run


def _counts(result):
    if result is None:
        return (0, 0)
    failed = len(getattr(result, "failures", ())) + len(getattr(result, "errors", ()))
    failed += len(getattr(result, "unexpectedSuccesses", ()))
    return (failed, len(getattr(result, "skipped", ())))


def _outcome(before, after):
    if after[0] > before[0]:
        return "failed"
    if after[1] > before[1]:
        return "skipped"
    return "passed"


def _unittest_ids(suite):
    try:
        tests = iter(suite)
    except TypeError:
        yield suite.id()
        return
    for test in tests:
        yield from _unittest_ids(test)


def _hook_unittest_main(main):
    original = main.TestProgram.runTests

    def runTests(self):
        if CURRENT.get() is None and root() is not None and getattr(self, "test", None):
            # A run that names its tests, filters them by name, or loads one module of its
            # own (`unittest.main()` in a file) is not the whole suite.
            filtered = bool(
                getattr(self, "testNamePatterns", None)
                or getattr(self, "tests", None)
                or getattr(self, "testNames", None)
                or getattr(self, "module", None) is not None
                or getattr(self, "pattern", "test*.py") not in (None, "test*.py")
            )
            try:
                listed("unittest", list(_unittest_ids(self.test)), filtered)
            except Refused as e:
                sys.stderr.write(f"{e}\n")
                raise SystemExit(4) from None
        return original(self)

    main.TestProgram.runTests = runTests


def hook_unittest():
    """Each unittest TestCase method its own test: named, begun and ended; the suite listed."""
    hook_clients()
    hook_modules({"unittest.case": _hook_unittest_case, "unittest.main": _hook_unittest_main})
