"""The packages users install without Rust, built and used end to end (run by .ci/run):

- the `cargo-llmreplay` wheel (pyproject.toml at the root: maturin, pinned here, from PyPI),
  with the CLI and the pytest plugin;
- the npm packages (`npm pack`): `cargo-llmreplay` (the shim and the setup files), its
  platform package for this machine (node/platform-package.mjs), and llmreplay-test-setup.

Each goes into a fresh project outside the repository (a venv; an npm project) and runs a
suite there on a PATH that holds no cargo and no rustc: recorded against a stand-in provider on
127.0.0.1, replayed under CI=true, then a changed prompt missed, and the command the miss
printed, pasted into a shell, records it. Before that, `cargo-llmreplay init` sets each project
up, and the record and replay commands it prints, pasted, work. Prints the wheel's size and the
install times.
`python3 .ci/packages.py [--no-build]`: --no-build takes the packages the last run built."""

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "target", "packages")
MATURIN = "maturin==1.16.0"
COMMAND = "cargo-llmreplay"
KEYS = {"OPENAI_API_KEY": "sk-test-not-real", "ANTHROPIC_API_KEY": "sk-ant-test-not-real"}


def say(text):
    print(f"packages: {text}", flush=True)


def run(cmd, **kw):
    say("$ " + " ".join(cmd))
    subprocess.run(cmd, check=True, **kw)


def build_wheel():
    """The wheel, built by the pinned maturin: the release build of the CLI and the plugin."""
    venv = os.path.join(ROOT, "target", "maturin-venv")
    if not os.path.exists(os.path.join(venv, "bin", "maturin")):
        run([sys.executable, "-m", "venv", venv])
    run([os.path.join(venv, "bin", "pip"), "install", "--quiet", "--disable-pip-version-check", MATURIN])
    wheels = os.path.join(OUT, "wheels")
    shutil.rmtree(wheels, ignore_errors=True)
    run([os.path.join(venv, "bin", "maturin"), "build", "--release", "--out", wheels], cwd=ROOT)


def the_wheel():
    found = glob.glob(os.path.join(OUT, "wheels", "cargo_llmreplay-*.whl"))
    assert len(found) == 1, f"one wheel in {OUT}/wheels: {found}"
    return found[0]


def host_platform():
    """This machine's entry of node/cargo-llmreplay/platforms.cjs."""
    script = (
        "const {PLATFORMS} = require(process.argv[1]);"
        "console.log(JSON.stringify(PLATFORMS.find(p => p.os === process.platform && p.cpu === process.arch) || null))"
    )
    out = subprocess.run(
        ["node", "-e", script, os.path.join(ROOT, "node", "cargo-llmreplay", "platforms.cjs")],
        check=True, capture_output=True, text=True,
    ).stdout
    platform = json.loads(out)
    assert platform, "no npm platform package for this machine in node/cargo-llmreplay/platforms.cjs"
    return platform


def build_npm():
    """The three tarballs npm would publish, the platform package holding this build's binaries."""
    npm_out = os.path.join(OUT, "npm")
    shutil.rmtree(npm_out, ignore_errors=True)
    os.makedirs(npm_out)
    platform = host_platform()
    folder = os.path.join(npm_out, platform["name"])
    run(["node", os.path.join(ROOT, "node", "platform-package.mjs"), platform["target"],
         os.path.join(ROOT, "target", "release"), folder])
    for package in [folder, os.path.join(ROOT, "node", "cargo-llmreplay"),
                    os.path.join(ROOT, "node", "llmreplay-test-setup")]:
        run(["npm", "pack", "--silent", "--pack-destination", npm_out], cwd=package,
            stdout=subprocess.DEVNULL)


def tarballs():
    found = sorted(glob.glob(os.path.join(OUT, "npm", "*.tgz")))
    assert len(found) == 3, f"three tarballs in {OUT}/npm: {found}"
    return found


class Provider:
    """A stand-in OpenAI and Anthropic on 127.0.0.1 that answers `You said: <prompt>`."""

    def __init__(self):
        self.calls = 0
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                provider.calls += 1
                prompt = body["messages"][-1]["content"]
                if isinstance(prompt, list):
                    prompt = prompt[0]["text"]
                text = f"You said: {prompt}"
                if self.path.endswith("/chat/completions"):
                    answer = {
                        "id": "chatcmpl-1", "object": "chat.completion", "created": 1700000000,
                        "model": body["model"],
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": text}}],
                        "usage": {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6},
                    }
                elif self.path.endswith("/messages"):
                    answer = {
                        "id": "msg_1", "type": "message", "role": "assistant", "model": body["model"],
                        "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
                        "stop_sequence": None, "usage": {"input_tokens": 3, "output_tokens": 3},
                    }
                else:
                    self.send_error(404)
                    return
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


def tools_without_rust(folder):
    """A folder of links to the programs the runs need besides the project's own: node, npm,
    npx and the shell's basics. None of them is cargo or rustc."""
    os.makedirs(folder)
    for tool in ["node", "npm", "npx", "sh", "env", "cat", "ls", "mkdir", "rm", "dirname", "uname"]:
        found = shutil.which(tool)
        assert found, f"{tool} is not installed"
        os.symlink(found, os.path.join(folder, tool))
    return folder


def environment(path_dirs, **extra):
    """Only what a user's shell would have, with PATH of `path_dirs`; no CI, no keys."""
    path = os.pathsep.join(path_dirs)
    for rust in ["cargo", "rustc", "rustup"]:
        assert shutil.which(rust, path=path) is None, f"{rust} on the PATH of the runs"
    env = {"PATH": path, "HOME": os.environ.get("HOME", "/tmp"), "LANG": "C.UTF-8", "NO_COLOR": "1"}
    env.update(extra)
    return env


def answers(folder):
    return {name: open(os.path.join(folder, name)).read() for name in sorted(os.listdir(folder))}


class Suite:
    """One project and its suite under `cargo-llmreplay run`, as its users would run it."""

    def __init__(self, name, project, path_dirs, command, expected, provider):
        self.name, self.project, self.path_dirs = name, project, path_dirs
        self.command, self.expected, self.provider = command, expected, provider

    def upstreams(self):
        """The stand-in provider, added to the project's llmreplay.toml (init's, when it wrote one)."""
        with open(os.path.join(self.project, "llmreplay.toml"), "a") as f:
            for family in ["openai", "anthropic"]:
                f.write(f'[providers.{family}]\nupstream = "{self.provider.url}"\n')

    def run(self, line, **extra):
        """`line` in a shell in the project; its status, its output and what the tests were told."""
        out = tempfile.mkdtemp(prefix="answers-")
        env = environment(self.path_dirs, SAMPLE_OUT=out, **extra)
        ran = subprocess.run(["sh", "-c", line], cwd=self.project, env=env, capture_output=True, text=True)
        return ran.returncode, ran.stdout + ran.stderr, answers(out)

    def init(self, kind, record_command):
        """`cargo-llmreplay init`: its files, and the record and replay commands it prints, pasted."""
        code, said, _ = self.run(f"{COMMAND} init")
        assert code == 0, f"{self.name}: init failed\n{said}"
        assert f": a {kind} project\n" in said, f"{self.name}: {said}"
        for written in ["llmreplay.toml", ".gitattributes", ".github/workflows/llmreplay.yml"]:
            assert os.path.isfile(os.path.join(self.project, written)), f"{self.name}: no {written}\n{said}"
        lines = said.split("next:\n", 1)[1].splitlines()
        commands = [line.split("  # ")[0].strip() for line in lines]
        record = next(c for c in commands if "--record-missing" in c)
        replay = next(c for c in commands if " run -- " in c)
        assert record == record_command, f"{self.name}: init printed `{record}`\n{said}"
        self.upstreams()
        code, said, recorded = self.run(record, **KEYS)
        assert code == 0, f"{self.name}: init's `{record}` failed\n{said}"
        assert sorted(recorded) == self.expected, f"{self.name}: {sorted(recorded)}\n{said}"
        calls = self.provider.calls
        code, said, replayed = self.run(replay, CI="true")
        assert code == 0 and replayed == recorded, f"{self.name}: init's `{replay}` failed\n{said}"
        assert self.provider.calls == calls, f"{self.name}: init's `{replay}` called the provider"
        say(f"{self.name}: init, then its printed `{record}` and `{replay}`")

    def check(self):
        base = f"{COMMAND} run {{}}-- {self.command}"
        code, said, recorded = self.run(base.format("--record "), **KEYS)
        assert code == 0, f"{self.name}: record failed\n{said}"
        assert sorted(recorded) == self.expected, f"{self.name}: {sorted(recorded)}\n{said}"
        calls = self.provider.calls
        code, said, replayed = self.run(base.format(""), CI="true")
        assert code == 0, f"{self.name}: replay failed\n{said}"
        assert replayed == recorded, f"{self.name}: {replayed} != {recorded}"
        assert self.provider.calls == calls, f"{self.name}: the replay called the provider"
        code, said, _ = self.run(base.format(""), CI="true", SAMPLE_CHANGED="1")
        assert code != 0, f"{self.name}: a changed prompt replayed\n{said}"
        printed = [m.group(1) for m in re.finditer(rf"({re.escape(COMMAND)} run --record\S* -- .*)$", said, re.M)]
        assert printed, f"{self.name}: no `{COMMAND} run --record...` printed for the miss\n{said}"
        code, said, fixed = self.run(printed[0].strip().rstrip("`"), SAMPLE_CHANGED="1", **KEYS)
        assert code == 0, f"{self.name}: the printed command failed: {printed[0]}\n{said}"
        assert any(v == "You said: Hello again" for v in fixed.values()), f"{self.name}: {fixed}\n{said}"
        code, said, _ = self.run(base.format(""), CI="true", SAMPLE_CHANGED="1")
        assert code == 0, f"{self.name}: the miss is still missing after `{printed[0]}`\n{said}"
        say(f"{self.name}: recorded, replayed under CI=true, missed, and fixed by the printed `{printed[0]}`")


def requirement(name, file):
    """The pinned `name==version` line of a requirements or package file of the repository."""
    for line in open(os.path.join(ROOT, file)):
        if line.startswith(f"{name}=="):
            return line.strip()
    raise AssertionError(f"{name} is not pinned in {file}")


def requirement_version(name, file):
    """The version a package.json of the repository pins `name` at."""
    manifest = json.load(open(os.path.join(ROOT, file)))
    for table in ["dependencies", "devDependencies"]:
        if name in manifest.get(table, {}):
            return manifest[table][name]
    raise AssertionError(f"{name} is not in {file}")


def check_wheel(work, provider, tools):
    wheel = the_wheel()
    venv = os.path.join(work, "venv")
    run([sys.executable, "-m", "venv", venv])
    pip = [os.path.join(venv, "bin", "pip"), "install", "--quiet", "--disable-pip-version-check"]
    # The suite's own dependencies, pinned as the SDK tests pin them; not part of the figure.
    run(pip + [requirement(n, "tests/sdk/requirements.txt") for n in ["pytest", "openai", "anthropic"]])
    start = time.monotonic()
    run(pip + ["--no-index", wheel])
    took = time.monotonic() - start
    bindir = os.path.join(venv, "bin")
    for program in [COMMAND, "cargo-llmreplay-runner"]:
        assert os.access(os.path.join(bindir, program), os.X_OK), f"no {program} in the venv"
    project = os.path.join(work, "py")
    os.makedirs(project)
    shutil.copy(os.path.join(ROOT, "tests/sdk/pytest_suite/test_chat.py"), project)
    with open(os.path.join(project, "pyproject.toml"), "w") as f:
        f.write('[tool.pytest.ini_options]\naddopts = "-p no:cacheprovider"\n')
    suite = Suite("pytest", project, [bindir, tools], "pytest -q -p no:cacheprovider",
                  ["claude.txt", "count-one.txt", "hello.txt"], provider)
    code, said, _ = suite.run("pytest --trace-config --co -q", **KEYS)
    assert code == 0 and "pytest_llmreplay" in said, f"the plugin is not registered\n{said}"
    suite.init("Python", f"{COMMAND} run --record-missing -- python -m pytest")
    suite.check()
    return os.path.getsize(wheel), took


def check_npm(work, provider, tools):
    node_clients = os.path.join(ROOT, "tests", "node")
    if not os.path.isdir(os.path.join(node_clients, "node_modules", "vitest")):
        run(["npm", "ci", "--prefix", node_clients, "--no-audit", "--no-fund", "--loglevel=error"])
    project = os.path.join(work, "js")
    os.makedirs(project)
    with open(os.path.join(project, "package.json"), "w") as f:
        json.dump({"name": "suite", "private": True, "type": "module"}, f)
    start = time.monotonic()
    run(["npm", "install", "--offline", "--no-audit", "--no-fund", "--loglevel=error", "--save-dev"]
        + tarballs(), cwd=project)
    took = time.monotonic() - start
    # As a vitest project's package.json says it (init reads which runner it has).
    with open(os.path.join(project, "package.json")) as f:
        manifest = json.load(f)
    manifest["devDependencies"]["vitest"] = requirement_version("vitest", "tests/node/package.json")
    with open(os.path.join(project, "package.json"), "w") as f:
        json.dump(manifest, f, indent=2)
    # vitest and the openai SDK as tests/node's lockfile has them (its folders, linked).
    modules = os.path.join(project, "node_modules")
    for package in ["vitest", "openai"]:
        os.symlink(os.path.join(node_clients, "node_modules", package), os.path.join(modules, package))
    os.symlink("../vitest/vitest.mjs", os.path.join(modules, ".bin", "vitest"))
    shutil.copy(os.path.join(node_clients, "vitest_suite", "chat.test.js"), project)
    with open(os.path.join(project, "vitest.config.mjs"), "w") as f:
        f.write('export default { test: { include: ["*.test.js"], setupFiles: ["cargo-llmreplay/vitest"] } };\n')
    # As in an npm script or `npx`: the project's node_modules/.bin first.
    suite = Suite("vitest", project, [os.path.join(modules, ".bin"), tools], "vitest run --reporter=dot",
                  ["bye.txt", "hello.txt", "top.txt"], provider)
    # Without its platform package, the shim names the package that is missing.
    platform = host_platform()["name"]
    hidden = os.path.join(modules, platform)
    os.rename(hidden, hidden + ".away")
    code, said, _ = suite.run(f"{COMMAND} --version")
    os.rename(hidden + ".away", hidden)
    assert code == 1 and platform in said, f"the shim without {platform}: {code}\n{said}"
    code, said, _ = suite.run(f"{COMMAND} --version")
    assert code == 0, said
    suite.init("Node", f"npx {COMMAND} run --record-missing -- npx vitest run")
    suite.check()
    return took


def main():
    if "--no-build" not in sys.argv:
        build_wheel()
        build_npm()
    provider = Provider()
    work = tempfile.mkdtemp(prefix="llmreplay-packages-")
    try:
        tools = tools_without_rust(os.path.join(work, "tools"))
        size, pip_took = check_wheel(work, provider, tools)
        npm_took = check_npm(work, provider, tools)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    say(f"wheel {os.path.basename(the_wheel())}: {size / 1e6:.1f} MB, "
        f"`pip install` (offline, into a fresh venv) {pip_took:.2f} s")
    say(f"npm: `npm install` of the three tarballs (offline, into a fresh project) {npm_took:.2f} s")


if __name__ == "__main__":
    main()
