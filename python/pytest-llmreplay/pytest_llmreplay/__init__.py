"""pytest-llmreplay: each test's LLM calls in its own cassettes, under cargo-llmreplay.

Each test, in the process that runs it (an xdist worker included), is its node id: the plugin
sets it as the current test of the test's own context (`_identity`, shared with the unittest
hook `cargo llmreplay run` installs), so that httpx, urllib3 (requests, botocore) and aiohttp
name it in an `X-Test-Id` header on every request to the daemon, even with several tests in
flight in one event loop; and it says `POST /__llmreplay/begin?test=<node id>&pid=<this
process>` before the test and `end` with how it ended after, for clients it does not hook.
A test run by a plugin that calls the test function itself, concurrently, is named and
announced from inside its own task (with pytest-asyncio-cooperative, from before its
function-scoped fixtures). Calls made while a fixture of
a wider scope than a function sets up are that fixture's own (`<file>::fixture:<name>`; a
module or class fixture's named after its module or class, a parameter's id appended),
begun afresh at each setup, one process at a time; its teardown's are `<that id>:teardown`'s. After collection the plugin
lists the selected tests and their fixtures, for the run to judge orphans and unused
recordings against. `begin` carries the process's secret-looking variables as they are when
the test starts, so that a key a conftest loaded is replaced wherever it turns up.

With no daemon in the environment (`LLMREPLAY_BASE_URL`), it does nothing.
"""

import asyncio
import contextlib
import functools
import hashlib
import importlib
import inspect
import os
import stat
import sys
import tempfile
import unittest
from pathlib import Path

import pytest

# The copy the unittest hook loaded first, if it did and speaks this plugin's version of it:
# one context variable, one set of hooks.
_identity = sys.modules.get("_llmreplay_identity")
if getattr(_identity, "API", None) != 1:
    _identity = importlib.import_module("._identity", __name__)


def pytest_configure(config):
    if _identity.root() is not None:
        _identity.hook_clients()
        _hook_cooperative(sys.modules.get("pytest_asyncio_cooperative.plugin"))


def _hook_cooperative(plugin):
    """pytest-asyncio-cooperative makes one coroutine per test that sets up its fixtures then
    calls it, and runs them all side by side: the test is named for the whole coroutine, its
    function-scoped fixtures included."""
    make = getattr(plugin, "item_to_task", None)
    if make is None:
        return

    def item_to_task(item):
        inner = make(item)

        async def named():
            token = _named(item)
            if token is None:
                return await inner
            error = None
            try:
                return await inner
            except BaseException as e:
                error = e
                raise
            finally:
                _reset(token)
                _identity.end(item.nodeid, _ended_by(error))

        return named()

    plugin.item_to_task = item_to_task


def _reset(token):
    try:
        _identity.CURRENT.reset(token)
    except ValueError:
        # Set in another context (a plugin moved the test between threads): it goes with it.
        pass


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    # A test its own task already named and announced (a plugin that ran it concurrently,
    # then reports it here) is not begun again: that would start its calls afresh.
    if _identity.root() is None or item.stash.get(_ANNOUNCED, False):
        yield
        return
    test = item.nodeid
    # Nothing said yet: a test that never reaches its call's report (Ctrl-C, a crash) did
    # not pass, and its end says "interrupted", never "passed".
    item.stash[_OUTCOME] = None
    _identity.begin(test)
    token = _identity.CURRENT.set(test)
    result = None
    try:
        result = yield
    finally:
        _reset(token)
        outcome = item.stash[_OUTCOME] or "interrupted"
        excinfo = getattr(result, "excinfo", None) if result is not None else None
        if excinfo is not None:
            outcome = "interrupted" if issubclass(excinfo[0], KeyboardInterrupt) else "failed"
        _identity.end(test, outcome)


_OUTCOME = pytest.StashKey[str]()
_ATTEMPTS = pytest.StashKey[int]()
# The test was named and announced by its own function's wrapper, not by the protocol.
_ANNOUNCED = pytest.StashKey[bool]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    # A rerun (pytest-rerunfailures runs the whole protocol again inside one) begins the test
    # again: its calls are answered from the first of its recordings, as the first attempt's were.
    if _OUTCOME not in item.stash:
        return
    attempts = item.stash.get(_ATTEMPTS, 0) + 1
    item.stash[_ATTEMPTS] = attempts
    if attempts > 1 and _identity.root() is not None:
        item.stash[_OUTCOME] = None
        _identity.begin(item.nodeid)


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


# --- The test function, named from inside its own task -------------------------------------


def _ended_by(error):
    if error is None:
        return "passed"
    if isinstance(error, (pytest.skip.Exception, pytest.xfail.Exception)):
        return "skipped"
    if isinstance(error, (KeyboardInterrupt, asyncio.CancelledError)):
        return "interrupted"
    return "failed"


def _named(item):
    """Names `item`'s test in this context and begins it, unless the context already names it
    (the protocol did): the token to reset as it ends, or None when there is nothing to end.
    A plugin that runs tests side by side calls each test's function in a task of its own,
    so the test is named in that task's context alone."""
    test = item.nodeid
    if _identity.CURRENT.get() == test or _identity.root() is None:
        return None
    item.stash[_ANNOUNCED] = True
    _identity.begin(test)
    return _identity.CURRENT.set(test)


def _wrap_test_function(item):
    """Replaces `item`'s function by one of the same parameters that names the test in the
    context it runs in: a plugin that runs async tests concurrently (pytest-asyncio-
    cooperative) calls the function itself, each in its own task, outside the protocol."""
    # A unittest TestCase's method runs through the TestCase, never through the item's function.
    cls = getattr(item, "cls", None)
    if not isinstance(item, pytest.Function) or (
        cls is not None and issubclass(cls, unittest.TestCase)
    ):
        return
    original = item.obj
    function = getattr(original, "__func__", original)
    if not inspect.isfunction(function) or inspect.isgeneratorfunction(function):
        return
    if inspect.isasyncgenfunction(function):
        return
    test = item.nodeid

    @contextlib.contextmanager
    def named():
        # Named here unless the protocol already named it in this context; ended as it ended.
        token = _named(item)
        if token is None:
            yield
            return
        error = None
        try:
            yield
        except BaseException as e:
            error = e
            raise
        finally:
            _reset(token)
            _identity.end(test, _ended_by(error))

    if inspect.iscoroutinefunction(function):

        async def run(*args, **kwargs):
            with named():
                return await function(*args, **kwargs)

    else:

        def run(*args, **kwargs):
            with named():
                return function(*args, **kwargs)

    wrapper = _with_parameters_of(function, run)
    instance = getattr(original, "__self__", None)
    item.obj = wrapper.__get__(instance) if instance is not None else wrapper


def _with_parameters_of(function, run):
    """A function that calls `run` with its arguments, with `function`'s parameters in its
    own code: fixture plugins read the test's fixture names from `__code__`."""
    code = function.__code__
    names = list(code.co_varnames[: code.co_argcount + code.co_kwonlyargcount])
    positional = names[: code.co_argcount]
    keyword = names[code.co_argcount :]
    at = code.co_argcount + code.co_kwonlyargcount
    star = dstar = None
    if code.co_flags & inspect.CO_VARARGS:
        star = code.co_varnames[at]
        at += 1
    if code.co_flags & inspect.CO_VARKEYWORDS:
        dstar = code.co_varnames[at]
    params = list(positional)
    if code.co_posonlyargcount:
        params.insert(code.co_posonlyargcount, "/")
    if star:
        params.append(f"*{star}")
    elif keyword:
        params.append("*")
    params += keyword
    if dstar:
        params.append(f"**{dstar}")
    passed = list(positional) + ([f"*{star}"] if star else [])
    passed += [f"{k}={k}" for k in keyword] + ([f"**{dstar}"] if dstar else [])
    kind = "async def" if inspect.iscoroutinefunction(function) else "def"
    wait = "await " if kind == "async def" else ""
    source = (
        f"{kind} {code.co_name}({', '.join(params)}):\n"
        f"    return {wait}_llmreplay_run_({', '.join(passed)})\n"
    )
    scope = {"_llmreplay_run_": run}
    exec(source, scope)
    wrapper = functools.update_wrapper(scope[code.co_name], function)
    wrapper.__defaults__ = function.__defaults__
    wrapper.__kwdefaults__ = function.__kwdefaults__
    return wrapper


# --- Fixtures wider than a test: their own ids ---------------------------------------------


def _fixture_id(fixturedef, config, scope_node="", param=None):
    """`<file defining the fixture, from the rootdir>::fixture:<name>`, for a fixture of the
    project's own; None for an installed plugin's (pytest's, pytest-asyncio's loops), whose
    calls stay the test's that sets it up. A module or class fixture is set up once for each
    module or class that uses it, each time with calls of its own, and a parametrized one once
    for each parameter: each of those is an id of its own (`tests/test_a.py::fixture:<name>`,
    `...::fixture:<name>[<param>]`), since the daemon keeps only the last setup's recordings
    of an id."""
    function = inspect.unwrap(fixturedef.func)
    try:
        path = Path(inspect.getsourcefile(function) or inspect.getfile(function)).resolve()
        where = path.relative_to(Path(config.rootpath).resolve())
    except (TypeError, ValueError, OSError):
        return None
    if "site-packages" in where.parts:
        return None
    owner = scope_node if fixturedef.scope in ("module", "class") and scope_node else None
    fixture = f"{owner or where.as_posix()}::fixture:{fixturedef.argname}"
    return fixture if param is None else f"{fixture}[{param}]"


def _param_id(fixturedef, index, value):
    """The parameter's id as `@pytest.fixture(params=..., ids=...)` names it, else its value
    when that is plain, else its place."""
    ids = fixturedef.ids
    if callable(ids):
        named = ids(value)
    elif ids is not None and index < len(ids):
        named = ids[index]
    else:
        named = None
    if named is None and isinstance(value, (str, int, float, bool)):
        named = value
    return str(index) if named is None else str(named)


def _scope_node(item, scope):
    """The node id a module or class fixture of `item`'s is set up for, as pytest picks it: a
    class fixture of a test outside a class is set up for that test alone."""
    if scope == "module":
        node = item.getparent(pytest.Module)
    elif scope == "class":
        node = item.getparent(pytest.Class) or item
    else:
        node = None
    return "" if node is None else node.nodeid


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef, request):
    # A function's fixtures are its test's; a wider one's calls are its own, whichever test
    # sets it up, so that they replay for any test that does (`-k`, xdist).
    fixture = None
    if fixturedef.scope != "function" and _identity.root() is not None:
        param = None
        if fixturedef.params is not None:
            param = _param_id(fixturedef, request.param_index, getattr(request, "param", None))
        scope_node = getattr(request.node, "nodeid", "")
        fixture = _fixture_id(fixturedef, request.config, scope_node, param)
    if fixture is None:
        yield
        return
    # Its teardown's calls are a test of their own, begun afresh as its setup's are: xdist
    # workers tear it down at the end of the run, each after the others' setups.
    teardown = _teardown_id(fixture)
    tearing = []
    # Finalizers run last added first: this one after the fixture's own teardown, the one
    # added after its setup before it.
    fixturedef.addfinalizer(lambda: tearing and _end_teardown(teardown, *tearing.pop()))
    lock = _take_turn(fixture)
    try:
        _identity.begin(fixture)
        token = _identity.CURRENT.set(fixture)
        result = yield
        _reset(token)
        _identity.end(fixture, _ended_by(result.exception))
    finally:
        _give_turn(lock)
    fixturedef.addfinalizer(lambda: tearing.append(_begin_teardown(teardown)))


def _teardown_id(fixture):
    return f"{fixture}:teardown"


def _begin_teardown(teardown):
    lock = _take_turn(teardown)
    _identity.begin(teardown)
    return lock, _identity.CURRENT.set(teardown)


def _end_teardown(teardown, lock, token):
    _reset(token)
    try:
        _identity.end(teardown, "passed")
    finally:
        _give_turn(lock)


def _take_turn(fixture):
    """Each xdist worker sets up (and tears down) a session fixture of its own: they take
    turns, across the run's processes, so that each replays the fixture's calls from its first
    recording (the daemon keeps one sequence of calls per test id, begun afresh each time).
    None where there is no flock (Windows): workers may then set it up at once."""
    try:
        import fcntl
    except ImportError:
        return None
    folder = _turns_folder()
    name = hashlib.sha256(fixture.encode()).hexdigest()[:32]
    # Never through a link: the folder is this user's alone, and so is what is in it.
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    lock = os.open(folder / f"{name}.lock", flags, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX)
    return lock


def _turns_folder():
    """The run's folder of fixture locks in the temp folder, which every user shares: made by
    this user, for this user alone. One that is not (another user made it first, to make the
    run wait on a lock of theirs, or to have lock files made where a link of theirs leads) is
    refused, naming it."""
    run = hashlib.sha256(_identity.root().encode()).hexdigest()[:16]
    folder = Path(tempfile.gettempdir()) / f"llmreplay-fixtures-{os.getuid()}-{run}"
    try:
        folder.mkdir(mode=0o700)
    except FileExistsError:
        pass
    info = os.lstat(folder)
    if (
        not stat.S_ISDIR(info.st_mode)
        or info.st_uid != os.getuid()
        or info.st_mode & 0o077
    ):
        raise RuntimeError(
            f"llmreplay: {folder}, where this run's fixtures take turns, is not a folder of "
            "this user's alone (a link, another user's, or open to others): remove it and "
            "run again"
        )
    return folder


def _give_turn(lock):
    if lock is not None:
        os.close(lock)


# --- The collected suite ----------------------------------------------------------------------

_DESELECTED = pytest.StashKey[int]()
# Some of the suite's tests exist but were not collected: a module that skipped itself
# (`pytest.importorskip`, `allow_module_level`) or failed to import.
_UNCOLLECTED = pytest.StashKey[bool]()


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    result = yield
    report = result.get_result()
    if report.skipped or report.failed:
        collector.config.stash[_UNCOLLECTED] = True


def pytest_deselected(items):
    if items:
        config = items[0].config
        config.stash[_DESELECTED] = config.stash.get(_DESELECTED, 0) + len(items)


def _whole_suite(config):
    """Whether the command line's own arguments name the whole suite: none, or folders that
    hold everything pytest would collect without them."""
    sources = getattr(pytest.Config, "ArgsSource", None)
    if sources is None:
        # pytest before 7.2 does not say where its arguments came from: not known to be whole.
        return False
    if config.args_source == sources.TESTPATHS:
        return True
    here = Path(config.invocation_params.dir)
    # No arguments from a folder below the rootdir collect that folder alone.
    args = config.args if config.args_source == sources.ARGS else [str(here)]
    named = []
    for arg in args:
        if "::" in arg:
            return False
        path = (here / arg).resolve()
        if not path.is_dir():
            return False
        named.append(path)
    testpaths = config.getini("testpaths")
    roots = [(Path(config.rootpath) / t).resolve() for t in testpaths]
    roots = roots or [Path(config.rootpath).resolve()]
    return all(any(r == n or n in r.parents for n in named) for r in roots)


def _filtered(config):
    return bool(
        config.stash.get(_DESELECTED, 0)
        or config.getoption("keyword", "")
        or config.getoption("markexpr", "")
        or config.getoption("lf", False)
        or config.getoption("ignore", None)
        or config.getoption("ignore_glob", None)
        or config.stash.get(_UNCOLLECTED, False)
        or not _whole_suite(config)
    )


def _fixture_ids(item):
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return
    for name in info.names_closure:
        defs = info.name2fixturedefs.get(name)
        if defs and defs[-1].scope != "function":
            fixturedef = defs[-1]
            param = None
            callspec = getattr(item, "callspec", None)
            if fixturedef.params is not None and callspec is not None and name in callspec.indices:
                index = callspec.indices[name]
                param = _param_id(fixturedef, index, callspec.params.get(name))
            scope_node = _scope_node(item, fixturedef.scope)
            fixture = _fixture_id(fixturedef, item.config, scope_node, param)
            if fixture is not None:
                yield fixture
                yield _teardown_id(fixture)


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session):
    if _identity.root() is None:
        return
    config = session.config
    # xdist's controller collects nothing: each worker lists what it collected.
    if config.pluginmanager.getplugin("dsession") is not None:
        return
    tests = []
    for item in session.items:
        tests.append(item.nodeid)
        tests.extend(_fixture_ids(item))
        _wrap_test_function(item)
    try:
        _identity.listed("pytest", list(dict.fromkeys(tests)), _filtered(config))
    except _identity.Refused as e:
        raise pytest.UsageError(str(e)) from None
