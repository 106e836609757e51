"""Drives bench/overhead.sh: generates the two workspaces, warms their builds, records the
50x4 one through `cargo llmreplay test --record` against the floor server, then times plain
nextest against `cargo llmreplay test`.

The commands are run in turn, round after round, and compared by their medians: a shared
machine drifts over a minute by more than the overhead measured, and timing every run of one
command before the next (as hyperfine does) would charge that drift to one side. A third
variant, nextest with only our target runner, shows how much of the overhead is the runner's
exec alone."""
import argparse, os, shutil, statistics, subprocess, tempfile, time

from common import start_floor


def workspace(path, name, tests, client):
    os.makedirs(os.path.join(path, "src"))
    os.makedirs(os.path.join(path, "tests"))
    with open(os.path.join(path, "Cargo.toml"), "w") as f:
        f.write(f'[package]\nname = "{name}"\nversion = "0.1.0"\nedition = "2021"\n\n[workspace]\n')
    shutil.copy(client, os.path.join(path, "src/lib.rs"))
    with open(os.path.join(path, "tests/many.rs"), "w") as f:
        f.write(tests)
    subprocess.run(["git", "init", "-q", path], check=True)


def interleaved(cwd, rounds, commands):
    """{name: [seconds]} for `commands` ([(name, argv, env)]), each run once a round."""
    times = {name: [] for name, _, _ in commands}
    for r in range(rounds + 2):
        for name, argv, env in commands:
            t = time.perf_counter()
            subprocess.run(argv, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if r >= 2:  # two warm-up rounds
                times[name].append(time.perf_counter() - t)
    return times


def main():
    ap = argparse.ArgumentParser()
    for a in ("llmreplay", "runner", "floor", "client", "work"):
        ap.add_argument("--" + a, required=True)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--llmreplay-static", help="cargo-llmreplay with a statically linked runner beside it")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="llmreplay-overhead-", dir=a.work)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEXTEST", "LLMREPLAY")) and k != "CI"}
    env["CARGO_TARGET_DIR"] = os.path.join(tmp, "target")
    floor, floor_url = start_floor(a.floor)
    nextest = ["cargo", "nextest", "run", "--cargo-quiet"]
    runner_only = nextest + ["--config", f"target.'cfg(all())'.runner=['{a.runner}']"]
    # Both run as a user types them, through cargo: `cargo nextest run` and `cargo llmreplay
    # test`, with the cargo-llmreplay measured first on PATH.
    def on_path(binary, e):
        return dict(e, PATH=os.path.dirname(os.path.abspath(binary)) + os.pathsep + e.get("PATH", ""))
    lr = ["cargo", "llmreplay", "test", "--cargo-quiet"]
    lr_env = on_path(a.llmreplay, env)
    # On Linux, replay runs without a target runner by default; --runner exec (with the static
    # runner) is the design it replaces, measured beside it.
    lr_static = lr + ["--runner", "exec"] if a.llmreplay_static else None
    static_env = on_path(a.llmreplay_static, env) if a.llmreplay_static else None
    try:
        workspace(os.path.join(tmp, "quiet"), "quiet",
                  "".join(f"#[test]\nfn t{i}() {{ assert_eq!({i} + 1, {i + 1}); }}\n" for i in range(200)), a.client)
        calls = "".join(
            f"#[test]\nfn t{i}() {{\n    let base = std::env::var(\"OPENAI_BASE_URL\").unwrap();\n"
            + "".join(f"    assert!(!llm::ask_openai(&base, \"test {i} question {q}\").is_empty());\n" for q in range(4))
            + "}\n" for i in range(50))
        workspace(os.path.join(tmp, "llm"), "llm", calls, a.client)
        results = {}
        # 200 tests, no LLM call.
        q = os.path.join(tmp, "quiet")
        subprocess.run(nextest, cwd=q, env=env, check=True, capture_output=True)
        results["200 tests, no LLM call"] = interleaved(q, a.runs, [
            ("nextest", nextest, env), ("runner", runner_only, env), ("llmreplay", lr, lr_env)]
            + ([("static", lr_static, static_env)] if lr_static else []))
        # 50 tests x 4 recordings: record once against the floor, then time replay.
        l = os.path.join(tmp, "llm")
        rec = subprocess.run(lr + ["--record", "--upstream", f"openai={floor_url}"],
                             cwd=l, env=lr_env, capture_output=True, text=True)
        assert rec.returncode == 0, rec.stderr[-2000:]
        # Committed, as a repository keeps its cassettes: a replay run then finds them
        # unchanged against HEAD, where fifty just-recorded files would each be read and
        # reported as new.
        subprocess.run(["git", "add", "-A"], cwd=l, check=True)
        subprocess.run(["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost",
                        "commit", "-q", "-m", "cassettes"], cwd=l, check=True)
        direct = dict(env, OPENAI_BASE_URL=f"{floor_url}/v1", OPENAI_API_KEY="x")
        results["50 tests x 4 recordings"] = interleaved(l, a.runs, [
            ("nextest", nextest, direct), ("runner", runner_only, direct),
            ("llmreplay", lr + ["--deny", "unused"], dict(lr_env, CI="true"))]
            + ([("static", lr_static + ["--deny", "unused"], dict(static_env, CI="true"))] if lr_static else []))
        ms = lambda v: f"{statistics.median(v) * 1000:.0f} ms"
        print(f"\n{a.runs} rounds after 2 warm-up rounds, commands in turn, builds warm; medians:\n")
        print("| workspace | plain cargo nextest run | nextest + our runner only | cargo llmreplay test | overhead | runner alone | --runner exec, static runner | overhead |")
        print("|---|---|---|---|---|---|---|---|")
        for name, t in results.items():
            base = statistics.median(t["nextest"])
            pct = lambda k: (statistics.median(t[k]) / base - 1) * 100
            static = f"{ms(t['static'])} | {pct('static'):+.1f}%" if "static" in t else "- | -"
            print(f"| {name} | {ms(t['nextest'])} | {ms(t['runner'])} | {ms(t['llmreplay'])} | {pct('llmreplay'):+.1f}% | {pct('runner'):+.1f}% | {static} |")
        print("\n(Both commands run through cargo, as typed: `cargo nextest run`, `cargo llmreplay test`."
              " 50 x 4: the baseline's tests call the floor server directly; llmreplay replays the same answers"
              " from cassettes (committed), with CI=true and --deny unused. 'our runner only' runs nextest with the target"
              " runner and no daemon, so the runner just execs each test. On Linux `cargo llmreplay test`"
              " replays with no runner: each connection's test is read from its process.)")
    finally:
        floor.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
