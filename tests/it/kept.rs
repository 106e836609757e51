//! Recordings are never lost: a re-record's own recordings are never unused (so `prune` never
//! takes them), a recording served through a fault and the recordings of a test that made no
//! call survive `--record`, two recording runs at once keep one run's recordings of every test,
//! and a second run in the same target dir leaves the first run's CA alone. Real nextest, real
//! git, the real binary, a fake provider on loopback.

use crate::support::{
    edit_sample_tests, prompts, read_json, refs, upstream_args, FakeProvider, Sample, TestCa,
};
use serde_json::Value;
use std::path::Path;

/// `args` and the flags that send every provider's requests to `fake`.
fn with_upstreams(fake: &FakeProvider, args: &[&str]) -> Vec<String> {
    let mut out: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    out.extend(upstream_args(fake));
    out
}

fn unused_of(run: &crate::support::Run) -> &Vec<Value> {
    run.report["unused"].as_array().expect("an unused list")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rerecords_faults_and_silent_tests_keep_what_they_use() {
    let fake = FakeProvider::start().await;
    let sample = Sample::new();
    sample.own_build("0.1.1-kept");
    // Two tests as first written: one asks plainly, one asks only when it has a key.
    edit_sample_tests(&sample, |t| {
        t + r#"
#[test]
fn reads_a_cut_answer() {
    assert!(ask_openai(&openai_base(), "Cut").starts_with("You said: Cut"));
}

#[test]
fn needs_a_key() {
    if std::env::var_os("SAMPLE_NO_KEY").is_some() {
        return;
    }
    assert!(ask_openai(&openai_base(), "Keyed").starts_with("You said: Keyed"));
}
"#
    });
    let first = sample.run(
        &refs(&with_upstreams(&fake, &["--record", "--retries", "1"])),
        &[],
    );
    assert_eq!(first.code, Some(0), "{}", first.stderr);
    sample.commit_all();

    // A changed prompt, recorded again with the command a miss prints: the run's own
    // recording is not unused, and nothing else of that test is either.
    edit_sample_tests(&sample, |t| t.replace("\"Hello\"", "\"Hello again\""));
    let one = sample.run(
        &refs(&with_upstreams(
            &fake,
            &["--record", "-E", "test(=answers_hello)"],
        )),
        &[],
    );
    assert_eq!(one.code, Some(0), "{}", one.stderr);
    assert_eq!(unused_of(&one), &Vec::<Value>::new(), "{}", one.stderr);
    assert!(!one.stderr.contains("unused"), "{}", one.stderr);
    let hello = read_json(&sample.cassette("sample--chat--answers_hello", "openai"));
    assert_eq!(prompts(&hello), ["Hello again"]);

    // The cut: the test now asks for a disconnect after the first chunk and reads what came;
    // the key-guarded test runs without its key and calls nothing.
    edit_sample_tests(&sample, |t| {
        t.replace(
            r#"    assert!(ask_openai(&openai_base(), "Cut").starts_with("You said: Cut"));"#,
            r##"    llmreplay_runner::fault().disconnect_after(1).register().unwrap();
    let url = format!("{}/chat/completions", openai_base());
    let body = r#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Cut"}]}"#;
    let (_, answer) = sample::post(&url, &[], body);
    assert!(answer.contains("You said: Cut"), "{answer}");"##,
        )
    });
    // A model change: every answer differs, every test is recorded again.
    *fake.state.suffix.lock().unwrap() = " (v2)".into();
    let all = sample.run(
        &refs(&with_upstreams(&fake, &["--record", "--retries", "1"])),
        &[("SAMPLE_NO_KEY", "1")],
    );
    assert_eq!(all.code, Some(0), "{}", all.stderr);
    let cut = read_json(&sample.cassette("sample--chat--reads_a_cut_answer", "openai"));
    assert_eq!(prompts(&cut), ["Cut"], "served through a fault, so used");
    let keyed = read_json(&sample.cassette("sample--chat--needs_a_key", "openai"));
    assert_eq!(
        prompts(&keyed),
        ["Keyed"],
        "a test that made no call keeps its recording"
    );
    // What the run recorded or served is not unused; the silent test's recording is.
    let unused: Vec<&str> = unused_of(&all)
        .iter()
        .map(|u| u["test"].as_str().unwrap())
        .collect();
    assert_eq!(unused, ["sample::chat$needs_a_key"], "{}", all.stderr);

    // prune takes exactly that, and the next replay misses nothing.
    let report = all.report_path.to_str().unwrap();
    let pruned = sample.llmreplay(&["prune", "--report", report]);
    assert_eq!(pruned.code, Some(0), "{}", pruned.stderr);
    assert!(!sample
        .cassette("sample--chat--needs_a_key", "openai")
        .exists());
    let replay = sample.run(
        &["--retries", "1"],
        &[("CI", "true"), ("SAMPLE_NO_KEY", "1")],
    );
    assert_eq!(replay.code, Some(0), "{}", replay.stderr);
    assert_eq!(replay.report["missing"], serde_json::json!([]));
}

/// Writes tests/many.rs: 16 tests, each asking its own name and `$SAMPLE_PROMPT`.
fn many_tests(sample: &Sample) {
    let mut text = String::from("use sample::ask_openai;\n");
    for i in 0..16 {
        text.push_str(&format!(
            "\n#[test]\nfn asks_{i:02}() {{\n    let prompt = format!(\"q{i:02} {{}}\", std::env::var(\"SAMPLE_PROMPT\").unwrap());\n    let base = std::env::var(\"OPENAI_BASE_URL\").unwrap();\n    assert!(ask_openai(&base, &prompt).starts_with(\"You said: q\"));\n}}\n"
        ));
    }
    std::fs::write(sample.root.join("tests/many.rs"), text).unwrap();
}

/// Two `--record` runs of the same 16 tests with different prompts, started together: every
/// cassette ends holding exactly one run's recording, never none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_recording_runs_with_other_prompts_lose_nothing() {
    let fake = FakeProvider::start().await;
    let sample = Sample::new();
    sample.own_build("0.1.1-race");
    many_tests(&sample);
    let args = with_upstreams(&fake, &["--record", "-E", "binary(many)"]);
    // Built once first, so that the two runs start their tests together.
    let warm = sample.run(&refs(&args), &[("SAMPLE_PROMPT", "warm")]);
    assert_eq!(warm.code, Some(0), "{}", warm.stderr);
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| sample.run(&refs(&args), &[("SAMPLE_PROMPT", "A")]));
        let b = s.spawn(|| sample.run(&refs(&args), &[("SAMPLE_PROMPT", "B")]));
        (a.join().unwrap(), b.join().unwrap())
    });
    assert_eq!(a.code, Some(0), "{}", a.stderr);
    assert_eq!(b.code, Some(0), "{}", b.stderr);
    for i in 0..16 {
        let path = sample.cassette(&format!("sample--many--asks_{i:02}"), "openai");
        assert!(
            path.is_file(),
            "{} lost:\n{}\n{}",
            path.display(),
            a.stderr,
            b.stderr
        );
        let got = prompts(&read_json(&path));
        let one_run = got == [format!("q{i:02} A")] || got == [format!("q{i:02} B")];
        assert!(one_run, "{}: {got:?}", path.display());
    }
}

/// A second run in the same target dir, started and finished while the first one's test
/// waits, leaves the first run's CA files alone: the waiting test's HTTPS call through the
/// daemon still trusts its certificate. Neither run leaves CA files behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_run_in_the_same_target_dir_keeps_the_first_runs_ca() {
    let ca = TestCa::new("second-run");
    let fake = FakeProvider::start_tls(&ca).await;
    let sample = Sample::capture();
    ca.trusted_by(&sample.root, sample.scratch(), "");
    let upstream = format!("tools.example=https://127.0.0.1:{}", fake.addr.port());
    let gate = sample.scratch().join("gate");
    std::fs::create_dir_all(&gate).unwrap();
    let gate_env = gate.display().to_string();
    let first_args = [
        "--record",
        "--upstream",
        &upstream,
        "-E",
        "test(=waits_then_calls_a_tool)",
    ];
    let second_args = [
        "--record",
        "--upstream",
        &upstream,
        "-E",
        "test(=curl_to_a_tool_api)",
    ];
    // As users run it: no --report, so both runs use the target dir's default places.
    let run = |args: &[&str], env: &[(&str, &str)]| {
        let mut cmd = sample.command(crate::support::binary());
        cmd.args(["llmreplay", "test"])
            .args(args)
            .envs(env.iter().copied())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let child = cmd.spawn().unwrap();
        let pid = child.id();
        let out = child.wait_with_output().unwrap();
        (
            pid,
            crate::support::Output {
                code: out.status.code(),
                stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            },
        )
    };
    let (first, second) = std::thread::scope(|s| {
        let first = s.spawn(|| run(&first_args, &[("SAMPLE_GATE", &gate_env)]));
        // The first run's test has started (its daemon, CA and environment are in place).
        wait_for(&gate.join("started"), &first);
        let second = run(&second_args, &[]);
        std::fs::write(gate.join("go"), "").unwrap();
        (first.join().unwrap(), second)
    });
    let ((first_pid, first), (second_pid, second)) = (first, second);
    assert_eq!(second.code, Some(0), "{}", second.stderr);
    assert_eq!(first.code, Some(0), "{}", first.stderr);
    let gated = read_json(
        &sample
            .root
            .join("tests/cassettes/capture--capture--waits_then_calls_a_tool/tools.example.json"),
    );
    assert_eq!(gated["interactions"][0]["request"]["path"], "/tools/gate");
    // The log is each run's whole: the first run, which ended last, left its own in place.
    let log = std::fs::read_to_string(Sample::target_dir().join("llmreplay/daemon.log")).unwrap();
    assert!(log.contains("waits_then_calls_a_tool"), "{log}");
    let theirs = [format!("run-{first_pid}"), format!("run-{second_pid}")];
    let left: Vec<_> = std::fs::read_dir(Sample::target_dir().join("llmreplay"))
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".pem") || theirs.contains(n))
        .collect();
    assert_eq!(left, Vec::<String>::new(), "CA files left behind");
}

/// Waits until `path` exists, failing if the run ends first.
fn wait_for<T>(path: &Path, run: &std::thread::ScopedJoinHandle<'_, T>) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
    while !path.exists() {
        assert!(
            !run.is_finished(),
            "the first run ended before its test started"
        );
        assert!(
            std::time::Instant::now() < deadline,
            "the first run's test never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
