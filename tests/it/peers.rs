//! End-to-end tests of identifying a connection's test from its process (Linux): replay runs
//! without a target runner, each test through one base URL; `serve --test-id-env` for other
//! languages' runners; the fallback when a process cannot be found.

use crate::support::{upstream_args, FakeProvider, Sample, Serve};
use std::process::Command;

/// A replay with no runner: every test of the parallel run still gets its own cassettes (any
/// mix-up is a miss), retries replay their first attempt, and the log says how tests were
/// told apart; `--runner exec` still takes the runner. A call from a process that left the
/// test's tree falls back to `default`, and the log and the report say so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_without_a_runner_tells_each_test_from_its_process() {
    if !cfg!(target_os = "linux") {
        return;
    }
    let fake = FakeProvider::start().await;
    let sample = Sample::new();
    sample.record_all(&fake);
    let replay = sample.run(&["--deny", "unused", "--retries", "1"], &[("CI", "true")]);
    assert_eq!(replay.code, Some(0), "{}", replay.stderr);
    let log = std::fs::read_to_string(replay.report_path.with_extension("log")).unwrap();
    assert!(
        log.contains("no target runner: each connection's test is read from its process"),
        "{log}"
    );
    assert!(
        !log.contains("default"),
        "every request had its test: {log}"
    );
    let exec = sample.run(
        &["--runner", "exec", "--deny", "unused", "--retries", "1"],
        &[("CI", "true")],
    );
    assert_eq!(exec.code, Some(0), "{}", exec.stderr);
    let log = std::fs::read_to_string(exec.report_path.with_extension("log")).unwrap();
    assert!(!log.contains("no target runner"), "{log}");

    let out = sample.scratch().join("detached.out");
    let detached = sample.run(
        &["-E", "test(=detached_call)"],
        &[("CI", "true"), ("SAMPLE_DETACHED", out.to_str().unwrap())],
    );
    let log = std::fs::read_to_string(detached.report_path.with_extension("log")).unwrap();
    assert!(
        log.contains("cannot tell this connection's test from its process"),
        "{log}"
    );
    assert_eq!(detached.report["unattributed"], true, "{}", detached.stderr);
    assert_eq!(detached.report["missing"][0]["test"], "default");
    assert!(
        detached.stderr.contains("filed under the test `default`"),
        "{}",
        detached.stderr
    );
}

/// `serve --test-id-env NAME`: a process tree that sets the variable (a pytest run, here a
/// shell and its curl) records into its own test's cassette through a plain base URL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_files_connections_under_the_test_their_process_names() {
    if !cfg!(target_os = "linux") {
        return;
    }
    let fake = FakeProvider::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec![
        "--cassette-dir".to_string(),
        "c".into(),
        "--mode".into(),
        "record-missing".into(),
        "--test-id-env".into(),
        "PYTEST_CURRENT_TEST".into(),
    ];
    args.extend(upstream_args(&fake));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let serve = Serve::start(dir.path(), &args);
    let ask = |test: &str, prompt: &str| {
        let body = format!(
            r#"{{"model":"gpt-4o-mini","messages":[{{"role":"user","content":"{prompt}"}}]}}"#
        );
        let script = format!(
            "curl -sS --fail -H 'content-type: application/json' -d '{body}' '{}/openai/v1/chat/completions'",
            serve.base
        );
        let out = Command::new("bash")
            .args(["-c", &script])
            .env("PYTEST_CURRENT_TEST", test)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    assert!(ask("tests/test_chat.py::test_hello (call)", "Hello").contains("You said: Hello"));
    assert!(ask("tests/test_chat.py::test_bye (call)", "Bye").contains("You said: Bye"));
    serve.flush().await;
    let mut found: Vec<(String, String)> = Vec::new();
    for folder in std::fs::read_dir(dir.path().join("c")).unwrap() {
        let file = folder.unwrap().path().join("openai.json");
        let c: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        found.push((
            c["test"].as_str().unwrap().to_string(),
            c["interactions"][0]["request"]["body"]["messages"][0]["content"]
                .as_str()
                .unwrap()
                .to_string(),
        ));
    }
    found.sort();
    assert_eq!(
        found,
        [
            (
                "tests/test_chat.py::test_bye".to_string(),
                "Bye".to_string()
            ),
            (
                "tests/test_chat.py::test_hello".to_string(),
                "Hello".to_string()
            ),
        ]
    );
}
