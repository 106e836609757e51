//! End-to-end tests of `cargo llmreplay test`: the real binary runs real `cargo nextest` on a
//! sample workspace in a temp git repository, against a loopback fake provider.

use crate::support::{FakeProvider, Sample};
use serde_json::Value;

fn upstreams(fake: &FakeProvider) -> Vec<String> {
    crate::support::upstream_args(fake)
}

fn args<'a>(fixed: &[&'a str], extra: &'a [String]) -> Vec<&'a str> {
    fixed
        .iter()
        .copied()
        .chain(extra.iter().map(String::as_str))
        .collect()
}

/// Records every test of the sample (the retried one needs `--retries 1`).
async fn record(sample: &Sample, fake: &FakeProvider) -> crate::support::Run {
    sample.record_all(fake)
}

fn unused_folders(report: &Value) -> Vec<String> {
    report["unused"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|u| u["kind"] == "folder")
        .map(|u| u["folder"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_then_replays_offline_in_ci_with_the_same_answers() {
    let mut fake = FakeProvider::start().await;
    let sample = Sample::new();
    let recorded = record(&sample, &fake).await;
    // answers_hello 1, answers_twice 2, asks_claude 1, retries_once 1 (twice: unchanged), plain 1.
    assert_eq!(
        recorded.report["counts"]["recorded"], 6,
        "{}",
        recorded.report
    );
    assert_eq!(
        recorded.report["counts"]["unchanged"], 1,
        "the retry re-records the same answer"
    );
    assert!(sample
        .cassette("sample--chat--asks_claude", "anthropic")
        .exists());
    assert!(!sample
        .root
        .join("tests/cassettes/sample--chat--calls_nothing")
        .exists());
    let received = fake.received().len();
    fake.stop();

    let replay = sample.run(&["--retries", "1"], &[("CI", "true")]);
    assert_eq!(replay.code, Some(0), "{}", replay.stderr);
    assert_eq!(
        replay.report["counts"]["hits"], 7,
        "the retry replays its recording again: {}",
        replay.report
    );
    assert_eq!(replay.report["missing"], Value::Array(vec![]));
    assert_eq!(
        replay.report["unused"],
        Value::Array(vec![]),
        "{}",
        replay.report
    );
    assert!(
        replay.stderr.contains(": 7 replayed\n"),
        "{}",
        replay.stderr
    );
    assert_eq!(
        fake.received().len(),
        received,
        "nothing reached the provider"
    );
    // The placeholder key is for replay only: recording sent none upstream (a provider would
    // refuse it), and no cassette holds it.
    for r in fake.received() {
        for (name, value) in &r.headers {
            assert!(
                !value.contains(runner_plugin::PLACEHOLDER_KEY),
                "{name} of {} carried the replay placeholder while recording",
                r.path
            );
        }
    }
    for (path, text) in crate::support::all_files(&sample.root.join("tests/cassettes")) {
        assert!(
            !text.contains(runner_plugin::PLACEHOLDER_KEY),
            "{}",
            path.display()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_cassette_fails_the_run_naming_the_test_and_the_command() {
    let fake = FakeProvider::start().await;
    let sample = Sample::new();
    record(&sample, &fake).await;
    std::fs::remove_dir_all(
        sample
            .root
            .join("tests/cassettes/sample--chat--answers_hello"),
    )
    .unwrap();
    let run = sample.run(&["--retries", "1"], &[("CI", "true")]);
    assert_eq!(
        run.code,
        Some(100),
        "nextest's own status: the test failed\n{}",
        run.stderr
    );
    assert!(run.stderr.contains("missing (1):"), "{}", run.stderr);
    assert!(
        run.stderr.contains("sample::chat$answers_hello"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("cargo llmreplay test --record-missing -E 'test(=answers_hello)'"),
        "{}",
        run.stderr
    );
    let missing = &run.report["missing"][0];
    assert_eq!(missing["test"], "sample::chat$answers_hello");
    assert_eq!(
        (missing["provider"].as_str(), missing["model"].as_str()),
        (Some("openai"), Some("gpt-4o-mini"))
    );
    assert_eq!(missing["prompt"], "Hello");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphans_are_unused_filtered_runs_judge_nothing_and_re_records_show_as_changed() {
    let fake = FakeProvider::start().await;
    let sample = Sample::new();
    record(&sample, &fake).await;
    // One recording left out of the commit: new against HEAD, and read whole before the
    // tests by the run, whose count the report then gives.
    let hello = sample.cassette("sample--chat--answers_hello", "openai");
    let kept = std::fs::read(&hello).unwrap();
    std::fs::remove_file(&hello).unwrap();
    sample.commit_all();
    std::fs::write(&hello, &kept).unwrap();
    let orphan = sample
        .root
        .join("tests/cassettes/sample--chat--renamed_long_ago");
    std::fs::create_dir_all(&orphan).unwrap();
    std::fs::copy(
        sample.cassette("sample--chat--answers_hello", "openai"),
        orphan.join("openai.json"),
    )
    .unwrap();

    let step_summary = sample.scratch().join("step-summary.md");
    let whole = sample.run(
        &["--retries", "1", "--deny", "unused"],
        &[("GITHUB_STEP_SUMMARY", step_summary.to_str().unwrap())],
    );
    assert_eq!(
        unused_folders(&whole.report),
        vec![orphan.display().to_string()],
        "{}",
        whole.report
    );
    assert_eq!(
        whole.code,
        Some(1),
        "--deny unused fails the run\n{}",
        whole.stderr
    );
    assert!(
        whole
            .stderr
            .contains("no test of the suite has this folder's slug"),
        "{}",
        whole.stderr
    );
    // The gate says why it failed and what fixes it, on the terminal and for GitHub alike.
    let why = "--deny unused: 1 orphaned folder; `cargo llmreplay prune` removes them";
    assert!(
        whole
            .stderr
            .contains(&format!("the run fails its gate:\n  - {why}")),
        "{}",
        whole.stderr
    );
    let markdown = std::fs::read_to_string(&step_summary).unwrap();
    assert!(
        markdown.contains(&format!("**The run fails its gate:**\n\n- {why}")),
        "{markdown}"
    );
    // A format of the user's own for nextest's output selects no fewer tests: still judged.
    let formatted = sample.run(
        &[
            "--retries",
            "1",
            "--deny",
            "unused",
            "--message-format",
            "libtest-json",
        ],
        &[("NEXTEST_EXPERIMENTAL_LIBTEST_JSON", "1")],
    );
    assert_eq!(formatted.code, Some(1), "{}", formatted.stderr);
    assert_eq!(
        unused_folders(&formatted.report),
        vec![orphan.display().to_string()],
        "{}",
        formatted.report
    );
    let changed = |path: &str| -> (String, u64) {
        let change = whole.report["changed"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["path"] == path)
            .unwrap_or_else(|| panic!("{path} changed: {}", whole.report));
        (
            change["kind"].as_str().unwrap().into(),
            change["added"].as_u64().unwrap(),
        )
    };
    assert_eq!(
        changed("tests/cassettes/sample--chat--renamed_long_ago/openai.json").0,
        "new",
        "the orphan is untracked"
    );
    let recorded = serde_json::from_slice::<Value>(&kept).unwrap()["interactions"]
        .as_array()
        .unwrap()
        .len() as u64;
    assert_eq!(
        changed("tests/cassettes/sample--chat--answers_hello/openai.json"),
        ("new".into(), recorded)
    );
    sample.commit("tests/cassettes/sample--chat--answers_hello/openai.json");

    let filtered = sample.run(&["-E", "test(=answers_hello)"], &[]);
    assert_eq!(filtered.code, Some(0), "{}", filtered.stderr);
    assert_eq!(
        filtered.report["unused"],
        Value::Array(vec![]),
        "{}",
        filtered.report
    );
    assert_eq!(filtered.report["scope"]["filtered"], true);

    // A test that ran and made no request: its recording is unused, filtered run or not.
    let quiet = sample.cassette("sample--chat--calls_nothing", "openai");
    let mut cassette =
        crate::support::read_json(&sample.cassette("sample--chat--answers_hello", "openai"));
    cassette["test"] = "sample::chat$calls_nothing".into();
    std::fs::create_dir_all(quiet.parent().unwrap()).unwrap();
    std::fs::write(&quiet, serde_json::to_string_pretty(&cassette).unwrap()).unwrap();
    let ran = sample.run(&["-E", "test(=calls_nothing)"], &[]);
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let unused = ran.report["unused"].as_array().unwrap();
    assert_eq!(unused.len(), 1, "{}", ran.report);
    assert_eq!(unused[0]["kind"], "recording");
    assert_eq!(unused[0]["test"], "sample::chat$calls_nothing");
    std::fs::remove_dir_all(quiet.parent().unwrap()).unwrap();

    std::fs::remove_dir_all(&orphan).unwrap();
    *fake.state.suffix.lock().unwrap() = " (a newer model)".into();
    let ups = upstreams(&fake);
    let rerecord = sample.run(
        &args(
            &[
                "--record",
                "-E",
                "test(=answers_twice)",
                "--deny",
                "changed",
            ],
            &ups,
        ),
        &[],
    );
    assert_eq!(
        rerecord.code,
        Some(1),
        "--deny changed fails the run\n{}",
        rerecord.stderr
    );
    let changed = rerecord.report["changed"].as_array().unwrap();
    assert_eq!(changed.len(), 1, "{}", rerecord.report);
    assert_eq!(
        changed[0]["path"],
        "tests/cassettes/sample--chat--answers_twice/openai.json"
    );
    assert_eq!(
        (
            changed[0]["kind"].as_str(),
            changed[0]["replaced"].as_u64(),
            changed[0]["unchanged"].as_u64()
        ),
        (Some("modified"), Some(2), Some(0))
    );
    assert!(
        rerecord.stderr.contains(
            "modified  tests/cassettes/sample--chat--answers_twice/openai.json: 2 replaced\n"
        ),
        "{}",
        rerecord.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_target_runner_still_runs() {
    let sample = Sample::new();
    let host = String::from_utf8(
        std::process::Command::new("rustc")
            .arg("-vV")
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let host = host
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .unwrap()
        .to_string();
    let marker = sample.root.join("runner-was-here");
    let script = sample.root.join("my-runner.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho \"$@\" >> '{}'\nexec \"$@\"\n",
            marker.display()
        ),
    )
    .unwrap();
    std::process::Command::new("chmod")
        .arg("+x")
        .arg(&script)
        .status()
        .unwrap();
    let var = format!(
        "CARGO_TARGET_{}_RUNNER",
        host.to_uppercase().replace('-', "_")
    );
    let run = sample.run(
        &["-E", "test(=sees_its_own_base_url) | test(=calls_nothing)"],
        &[(var.as_str(), script.to_str().unwrap())],
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let calls = std::fs::read_to_string(&marker).expect("the user's runner ran");
    assert!(calls.contains("sees_its_own_base_url"), "{calls}");

    // The same runner named in .cargo/config.toml instead.
    std::fs::remove_file(&marker).unwrap();
    std::fs::create_dir_all(sample.root.join(".cargo")).unwrap();
    std::fs::write(
        sample.root.join(".cargo/config.toml"),
        format!(
            "[target.{host}]\nrunner = [{:?}]\n",
            script.display().to_string()
        ),
    )
    .unwrap();
    let run = sample.run(&["-E", "test(=sees_its_own_base_url)"], &[]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let calls = std::fs::read_to_string(&marker).expect("the configured runner ran");
    assert!(calls.contains("sees_its_own_base_url"), "{calls}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_cargo_test_records_with_the_thread_name_helper_and_nextest_replays_it() {
    let mut fake = FakeProvider::start().await;
    let sample = Sample::new();
    let serve = crate::support::Serve::start(
        &sample.root,
        &[
            "--mode",
            "record",
            "--upstream",
            &format!("openai={}", fake.url()),
        ],
    );
    let out = sample
        .command("cargo")
        .args(["test", "--test", "chat", "plain_cargo_test"])
        .env("LLMREPLAY_URL", &serve.base)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(serve.stop().stderr.contains("1 recorded"));
    assert!(
        sample
            .cassette("sample--chat--plain_cargo_test", "openai")
            .exists(),
        "the same folder nextest uses"
    );
    fake.stop();
    let run = sample.run(&["-E", "test(=plain_cargo_test)"], &[("CI", "true")]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(run.report["counts"]["hits"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preconditions_fail_with_clear_errors() {
    let sample = Sample::new();
    let outside = tempfile::tempdir().unwrap();
    let out = sample
        .command(crate::support::binary())
        .current_dir(outside.path())
        .args(["llmreplay", "test"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("not inside a cargo workspace"), "{err}");

    std::fs::write(
        sample.root.join("llmreplay.toml"),
        "cassette_dir = \"x\"\n[match]\nignore = 7\n",
    )
    .unwrap();
    let run = sample.run(&[], &[]);
    assert_eq!(run.code, Some(2));
    assert!(
        run.stderr.contains("llmreplay.toml")
            && run.stderr.contains("line 3")
            && run.stderr.contains("ignore"),
        "{}",
        run.stderr
    );
    std::fs::remove_file(sample.root.join("llmreplay.toml")).unwrap();

    let run = sample.run(&["--record"], &[("CI", "1")]);
    assert_eq!(run.code, Some(2));
    assert!(
        run.stderr.contains("--allow-record-in-ci"),
        "{}",
        run.stderr
    );

    // No cargo-nextest where cargo looks (an empty PATH and cargo home): cargo is asked, and
    // says it knows no such command (a stand-in `cargo` here).
    let script = |path: std::path::PathBuf, text: String| {
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        path
    };
    let fake_cargo = script(
        sample.root.join("fake-cargo.sh"),
        "#!/bin/sh\necho 'error: no such command: nextest' >&2\nexit 101\n".into(),
    );
    let empty = tempfile::tempdir().unwrap();
    let empty = empty.path().to_str().unwrap();
    let run = sample.run(
        &[],
        &[
            ("CARGO", fake_cargo.to_str().unwrap()),
            ("PATH", empty),
            ("CARGO_HOME", empty),
        ],
    );
    assert_eq!(run.code, Some(2));
    assert!(
        run.stderr.contains("cargo-nextest is not installed")
            && run.stderr.contains("cargo install --locked cargo-nextest"),
        "{}",
        run.stderr
    );

    // A nextest older than 0.9.116, first on PATH: run directly, as cargo would run it.
    let bin = tempfile::tempdir().unwrap();
    let real_nextest = std::process::Command::new("sh")
        .args(["-c", "command -v cargo-nextest"])
        .output()
        .unwrap();
    let real_nextest = String::from_utf8_lossy(&real_nextest.stdout)
        .trim()
        .to_string();
    script(
        bin.path().join("cargo-nextest"),
        format!("#!/bin/sh\nif [ \"$1 $2\" = \"nextest --version\" ]; then echo 'cargo-nextest 0.9.100 (abc 2025-06-01)'; exit 0; fi\nexec '{real_nextest}' \"$@\"\n"),
    );
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap()
    );
    let real = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let run = sample.run(
        &[],
        &[("PATH", &path), ("CARGO_HOME", empty), ("CARGO", &real)],
    );
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(
        run.stderr.contains("cargo-nextest 0.9.100 is too old") && run.stderr.contains("0.9.116"),
        "{}",
        run.stderr
    );

    // A cargo alias named nextest: cargo runs it, here a cargo that answers for an old
    // nextest and passes the rest to the real one.
    let old_cargo = script(
        sample.root.join("old-cargo.sh"),
        format!("#!/bin/sh\nif [ \"$1 $2\" = \"nextest --version\" ]; then echo 'cargo-nextest 0.9.101 (abc 2025-06-01)'; exit 0; fi\nexec '{real}' \"$@\"\n"),
    );
    let run = sample.run(
        &[],
        &[
            ("CARGO", old_cargo.to_str().unwrap()),
            ("CARGO_ALIAS_NEXTEST", "nextest"),
        ],
    );
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(
        run.stderr.contains("cargo-nextest 0.9.101 is too old"),
        "{}",
        run.stderr
    );
}

/// Ctrl-C in a terminal reaches the whole foreground process group: nextest stops its tests,
/// and `cargo llmreplay test` must end too, its daemon with it, after saying what it saw.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_ends_the_run_and_its_daemon() {
    use std::os::unix::process::CommandExt;
    let sample = Sample::new();
    let state = tempfile::tempdir().unwrap();
    let report = state.path().join("report.json");
    let mut child = sample
        .command(crate::support::binary())
        .args(["llmreplay", "test", "--report"])
        .arg(&report)
        .args(["-E", "test(=waits_when_told)"])
        .env("SAMPLE_BLOCK", state.path())
        .process_group(0)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Ready when the test has written where its daemon is (a rename, so never half-written).
    let started = state.path().join("started");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
    while !started.exists() {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before the test started"
        );
        assert!(
            std::time::Instant::now() < deadline,
            "the test never started"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let base = std::fs::read_to_string(&started).unwrap();
    let addr = base
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_string();
    assert!(
        std::net::TcpStream::connect(&addr).is_ok(),
        "the daemon serves while tests run"
    );

    let killed = std::process::Command::new("kill")
        .args(["-INT", "--", &format!("-{}", child.id())])
        .status()
        .unwrap();
    assert!(killed.success());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "an interrupted run does not pass: {stderr}"
    );
    assert!(report.exists(), "the report is still written: {stderr}");
    // The blocked test itself is gone too: Ctrl-C reached nextest and its tests, and the
    // command waited for them before it reported.
    let pid = std::fs::read_to_string(state.path().join("pid")).unwrap();
    let alive = std::process::Command::new("kill")
        .args(["-0", pid.trim()])
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap()
        .success();
    assert!(!alive, "the interrupted test (pid {pid}) still runs");
}

/// The summary is painted only for a terminal, and never under NO_COLOR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_summary_has_colour_on_a_terminal_only() {
    let sample = Sample::new();
    let command = format!(
        "{} llmreplay test -E 'test(=answers_hello)'",
        crate::support::binary().display()
    );
    // `script` gives the command a terminal, as a developer's shell would.
    let on_terminal = |no_color: bool| {
        let mut cmd = sample.command("script");
        cmd.args(["-qec", &command, "/dev/null"]);
        if no_color {
            cmd.env("NO_COLOR", "1");
        } else {
            cmd.env_remove("NO_COLOR");
        }
        let out = cmd.output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let painted = on_terminal(false);
    assert!(painted.contains("\x1b[1m\x1b[31mmissing (1):"), "{painted}");
    let plain = on_terminal(true);
    assert!(plain.contains("missing (1):"), "{plain}");
    assert!(!plain.contains("\x1b[1m\x1b[31m"), "{plain}");
    let piped = sample.run(&["-E", "test(=answers_hello)"], &[]);
    assert!(piped.stderr.contains("missing (1):"));
    assert!(!piped.stderr.contains("\x1b["), "{}", piped.stderr);
}

/// A recording run whose upstream cannot be reached keeps going past the first failed test
/// (it records what it can), and its summary names the cause, not only a count of errors.
#[test]
fn a_recording_run_with_an_unreachable_upstream_runs_on_and_names_the_cause() {
    let sample = Sample::new();
    // A port nothing listens on: connections are refused at once.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    let openai = format!("openai={closed}");
    let anthropic = format!("anthropic={closed}");
    let run = sample.run(
        &[
            "--record",
            "--upstream",
            &openai,
            "--upstream",
            &anthropic,
            "-E",
            "test(=answers_hello) | test(=answers_twice) | test(=asks_claude)",
        ],
        &[],
    );
    assert_ne!(run.code, Some(0), "{}", run.stderr);
    assert!(
        run.report.get("stopped_early").is_none(),
        "every selected test ran: {}",
        run.report
    );
    assert!(
        run.stderr.contains("3 tests run: 0 passed, 3 failed"),
        "{}",
        run.stderr
    );
    let first = &run.report["first_failure"];
    assert_eq!(first["status"], 502, "{}", run.report);
    let message = first["message"].as_str().unwrap();
    assert!(
        message.contains("could not reach the") && message.contains(&closed),
        "{message}"
    );
    assert!(
        run.stderr.contains("first failure (sample::chat$"),
        "{}",
        run.stderr
    );
}

/// An argument nextest does not take: nextest's own error, once, and no summary of a run that
/// never happened (no `cargo nextest list` after it, no report).
#[test]
fn a_flag_nextest_refuses_is_said_once_and_nothing_is_reported() {
    let sample = Sample::new();
    let run = sample.run(&["--no-such-nextest-flag"], &[("CI", "true")]);
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert_eq!(
        run.stderr
            .matches("error: unexpected argument '--no-such-nextest-flag'")
            .count(),
        1,
        "nextest's error once: {}",
        run.stderr
    );
    assert!(
        run.stderr.contains("cargo nextest refused its arguments"),
        "{}",
        run.stderr
    );
    assert!(
        !run.stderr.contains("requests"),
        "no summary: {}",
        run.stderr
    );
    assert!(!run.report_path.exists(), "no report");
}
