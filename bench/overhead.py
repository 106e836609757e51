"""Drives bench/overhead.sh: generates the two workspaces, warms their builds, records the
50x4 one through `cargo llmreplay test --record` against the floor server, then times plain
nextest against `cargo llmreplay test` with hyperfine and prints the ratios."""
import argparse, json, os, shutil, subprocess, tempfile

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


def hyperfine(cwd, runs, commands, env):
    out = os.path.join(cwd, "hyperfine.json")
    cmd = ["hyperfine", "--warmup", "2", "--runs", str(runs), "--export-json", out, "--style", "basic"]
    for name, c in commands:
        cmd += ["-n", name, c]
    subprocess.run(cmd, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL)
    return {r["command"]: r for r in json.load(open(out))["results"]}


def main():
    ap = argparse.ArgumentParser()
    for a in ("llmreplay", "floor", "client", "work"):
        ap.add_argument("--" + a, required=True)
    ap.add_argument("--runs", type=int, default=10)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="llmreplay-overhead-", dir=a.work)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEXTEST", "LLMREPLAY")) and k != "CI"}
    env["CARGO_TARGET_DIR"] = os.path.join(tmp, "target")
    floor, floor_url = start_floor(a.floor)
    try:
        quiet = workspace(os.path.join(tmp, "quiet"), "quiet",
                          "".join(f"#[test]\nfn t{i}() {{ assert_eq!({i} + 1, {i + 1}); }}\n" for i in range(200)), a.client)
        calls = "".join(
            f"#[test]\nfn t{i}() {{\n    let base = std::env::var(\"OPENAI_BASE_URL\").unwrap();\n"
            + "".join(f"    assert!(!llm::ask_openai(&base, \"test {i} question {q}\").is_empty());\n" for q in range(4))
            + "}\n" for i in range(50))
        workspace(os.path.join(tmp, "llm"), "llm", calls, a.client)
        lr = f"{a.llmreplay} llmreplay test --cargo-quiet"
        results = {}
        # 200 tests, no LLM call.
        q = os.path.join(tmp, "quiet")
        subprocess.run(["cargo", "nextest", "run", "--cargo-quiet"], cwd=q, env=env, check=True, capture_output=True)
        results["200 tests, no LLM call"] = hyperfine(q, a.runs, [("nextest", "cargo nextest run --cargo-quiet"), ("llmreplay", lr)], env)
        # 50 tests x 4 recordings: record once against the floor, then time replay.
        l = os.path.join(tmp, "llm")
        rec = subprocess.run(a.llmreplay.split() + ["llmreplay", "test", "--record", "--upstream", f"openai={floor_url}"],
                             cwd=l, env=env, capture_output=True, text=True)
        assert rec.returncode == 0, rec.stderr[-2000:]
        direct = dict(env, OPENAI_BASE_URL=f"{floor_url}/v1", OPENAI_API_KEY="x")
        base = hyperfine(l, a.runs, [("nextest", "cargo nextest run --cargo-quiet")], direct)
        results["50 tests x 4 recordings"] = {**base, **hyperfine(l, a.runs, [("llmreplay", lr + " --deny unused")], dict(env, CI="true"))}
        print(f"\nhyperfine, {a.runs} runs each after 2 warm-ups, builds warm; one run:\n")
        print("| workspace | plain cargo nextest run (mean ± sd) | cargo llmreplay test (mean ± sd) | overhead |")
        print("|---|---|---|---|")
        for name, r in results.items():
            n, l_ = r["nextest"], r["llmreplay"]
            print(f"| {name} | {n['mean'] * 1000:.0f} ± {n['stddev'] * 1000:.0f} ms | {l_['mean'] * 1000:.0f} ± {l_['stddev'] * 1000:.0f} ms | {(l_['mean'] / n['mean'] - 1) * 100:+.1f}% |")
        print("\n(50 x 4: the baseline's tests call the floor server directly; llmreplay replays the same answers from cassettes, with CI=true and --deny unused)")
    finally:
        floor.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
