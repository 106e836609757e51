//! Every exchange ends once, and cassettes are made from the run: a streamed answer whose
//! client stops reading at `[DONE]` is recorded before its test's cassettes are written, under
//! load and at every repeat; two recording runs at once leave one run's complete set; an
//! interrupted `test --record` or `run --record -- pytest`, and a daemon killed mid-run, remove
//! nothing; and the run log is read by an outside reader. Real nextest, pytest and git, the
//! real binary, fake providers on loopback.

use crate::support::{
    binary, prompts, read_json, refs, sdk_python, upstream_args, without_provider_env,
    FakeProvider, Output, Sample, Serve,
};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// An OpenAI stand-in that sends a whole streamed answer in one write, with its length: the
/// client has `[DONE]` at once and ends its test, while the daemon is still saving the stream.
struct OneWrite {
    url: String,
}

impl OneWrite {
    async fn start() -> OneWrite {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(answer_streams(socket));
            }
        });
        OneWrite { url }
    }
}

async fn answer_streams(mut socket: tokio::net::TcpStream) {
    let mut buf = Vec::new();
    loop {
        // One request: its head, then its body by Content-Length.
        let head_end = loop {
            if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            let mut chunk = [0u8; 4096];
            match socket.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_lowercase();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        while buf.len() < head_end + length {
            let mut chunk = [0u8; 4096];
            match socket.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let body: Value =
            serde_json::from_slice(&buf[head_end..head_end + length]).unwrap_or(Value::Null);
        buf.drain(..head_end + length);
        let said = body["messages"][0]["content"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let chunk = |delta: Value, finish: Value| {
            serde_json::json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
                "model": "gpt-4o-mini", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        };
        let events = format!(
            "data: {}\n\ndata: {}\n\ndata: {}\n\ndata: [DONE]\n\n",
            chunk(
                serde_json::json!({"role": "assistant", "content": "You said: "}),
                Value::Null
            ),
            chunk(serde_json::json!({"content": said}), Value::Null),
            chunk(serde_json::json!({}), serde_json::json!("stop")),
        );
        let answer = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n{events}",
            events.len()
        );
        if socket.write_all(answer.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// Two threads that keep both cores busy until dropped: the load under which a stream's
/// recording used to lose its race with the test's end.
struct Busy(Arc<AtomicBool>, Vec<std::thread::JoinHandle<()>>);

impl Busy {
    fn start() -> Busy {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..2)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut x = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        x = std::hint::black_box(
                            x.wrapping_mul(6364136223846793005).wrapping_add(1),
                        );
                    }
                })
            })
            .collect();
        Busy(stop, threads)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
        for t in self.1.drain(..) {
            let _ = t.join();
        }
    }
}

fn runlog_sample(version: &str) -> Sample {
    let sample = Sample::new();
    sample.own_build(version);
    sample.add_test("runlog.rs");
    sample
}

/// `args` and the flags that send every provider's requests to `fake`.
fn with_fake(fake: &FakeProvider, args: &[&str]) -> Vec<String> {
    let mut out: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    out.extend(upstream_args(fake));
    out
}

/// Files of a folder whose names end in `.tmp`: what a write left behind.
fn temp_files(folder: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(folder)
        .into_iter()
        .flatten()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".tmp"))
        .collect()
}

/// `status` finds no spool left to apply and no temporary file a killed run left.
fn assert_nothing_left(sample: &Sample) {
    let status = sample.llmreplay(&["status", "--no-list"]);
    assert!(!status.stderr.contains("killed run"), "{}", status.stderr);
    assert!(
        !status.stderr.contains("not yet in the cassettes"),
        "{}",
        status.stderr
    );
}

/// The newest run's event log of a project whose target dir is `target`.
fn newest_events(target: &Path) -> PathBuf {
    let runs = target.join("llmreplay/runs");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&runs)
        .unwrap_or_else(|e| panic!("{}: {e}", runs.display()))
        .map(|e| e.unwrap().path())
        .collect();
    dirs.sort();
    dirs.last().unwrap().join("events.ndjson")
}

/// What the outside reader (tests/sdk/read_run_log.py, Python's standard library alone) made
/// of a run log.
fn read_by_python(events: &Path) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/sdk/read_run_log.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(events)
        .output()
        .expect("python3 runs the outside reader");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A streamed answer the client stops reading at `[DONE]`, from a stand-in that sends it in
/// one write, with both cores busy: a hundred repeats in one run (nextest's stress count), each
/// a new prompt, and then re-records in runs of their own. Each recording reaches the cassette
/// before the test's end writes it: the stress run's cassette holds all hundred, each
/// re-record's exactly its one, the summary says what was recorded, no temporary file is left,
/// and the run log, read by an outside reader, has every exchange recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_recording_is_never_lost_under_load() {
    let fake = OneWrite::start().await;
    let sample = runlog_sample("0.1.1-stream");
    let upstream = format!("openai={}", fake.url);
    let path = sample.cassette("sample--runlog--streams_a_reply", "openai");
    let folder = path.parent().unwrap().to_path_buf();
    // Built before the load, which is for the runs alone.
    let warm = sample.run(
        &[
            "--record",
            "--upstream",
            &upstream,
            "-E",
            "test(=streams_a_reply)",
        ],
        &[("SAMPLE_PROMPT", "warm")],
    );
    assert_eq!(warm.code, Some(0), "{}", warm.stderr);
    let _busy = Busy::start();

    let stress = sample.run(
        &[
            "--record",
            "--upstream",
            &upstream,
            "-E",
            "test(=streams_a_reply)",
            "--stress-count",
            "100",
        ],
        &[("SAMPLE_PROMPT", "stressed")],
    );
    assert_eq!(stress.code, Some(0), "{}", stress.stderr);
    // One run in which the test ran a hundred times: all hundred of its recordings, in order.
    let want: Vec<String> = (0..100).map(|n| format!("stressed {n}")).collect();
    assert_eq!(prompts(&read_json(&path)), want, "{}", stress.stderr);
    let counts = &stress.report["counts"];
    assert_eq!(counts["recorded"], 100, "{}", stress.report);
    assert!(
        stress.stderr.contains("100 requests: 100 recorded"),
        "{}",
        stress.stderr
    );
    assert!(temp_files(&folder).is_empty(), "{:?}", temp_files(&folder));
    let read = read_by_python(Path::new(stress.report["run_log"].as_str().unwrap()));
    let test = "sample::runlog$streams_a_reply";
    assert_eq!(read["version"], 1, "{read}");
    assert_eq!(read["mode"], "record");
    assert_eq!(read["outcomes"][test], "passed");
    assert_eq!(read["ended"], true);
    let exchanges = read["exchanges"][test].as_array().unwrap();
    assert_eq!(exchanges.len(), 100, "{read}");
    // Each exchange is the test's next step in the run, whichever repeat made it.
    for (step, x) in exchanges.iter().enumerate() {
        assert_eq!(
            x,
            &serde_json::json!([step, "http", "recorded", 200, "gpt-4o-mini"])
        );
    }
    // The warm-up run's recording went at the first repeat's end.
    assert_eq!(
        read["settled"][test],
        serde_json::json!([100, 0, 1]),
        "{read}"
    );

    for i in 0..5 {
        let prompt = format!("run {i}");
        let run = sample.run(
            &[
                "--record",
                "--upstream",
                &upstream,
                "-E",
                "test(=streams_a_reply)",
            ],
            &[("SAMPLE_PROMPT", &prompt)],
        );
        assert_eq!(run.code, Some(0), "{}", run.stderr);
        assert_eq!(
            prompts(&read_json(&path)),
            [format!("{prompt} 0")],
            "{}",
            run.stderr
        );
        assert!(!run.stderr.contains("no requests"), "{}", run.stderr);
        assert_eq!(run.report["counts"]["recorded"], 1, "{}", run.report);
        let recorded = run.report["recorded"].as_array().unwrap();
        assert_eq!(recorded.len(), 1, "{}", run.report);
        assert_eq!(recorded[0]["test"], test);
        assert_eq!(recorded[0]["added"], 1, "{}", run.report);
        // The run before left a hundred recordings (the stress run) or one.
        let before = if i == 0 { 100 } else { 1 };
        assert_eq!(recorded[0]["removed"], before, "{}", run.report);
        assert!(temp_files(&folder).is_empty());
    }
    assert_nothing_left(&sample);
}

/// Three `--record -j 4` runs of the same 16 tests of 10 calls each, with prompts of their
/// own, at once, twice over: every cassette ends holding exactly one run's ten recordings, never
/// a mix; each run's set replays whole; and no run says another's recordings superseded its own
/// where the file holds its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recording_runs_at_once_leave_one_complete_set() {
    let fake = FakeProvider::start().await;
    let sample = runlog_sample("0.1.1-two-runs");
    let args = with_fake(&fake, &["--record", "-j", "4", "-E", "test(/^many_/)"]);
    let warm = sample.run(&refs(&args), &[("SAMPLE_TAG", "warm")]);
    assert_eq!(warm.code, Some(0), "{}", warm.stderr);
    for round in 0..2 {
        let tags: Vec<String> = ["A", "B", "C"]
            .iter()
            .map(|t| format!("{t}{round}"))
            .collect();
        let runs: Vec<crate::support::Run> = std::thread::scope(|s| {
            let handles: Vec<_> = tags
                .iter()
                .map(|tag| s.spawn(|| sample.run(&refs(&args), &[("SAMPLE_TAG", tag.as_str())])))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for run in &runs {
            assert_eq!(run.code, Some(0), "{}", run.stderr);
        }
        let mut winners = std::collections::BTreeMap::new();
        for i in 0..16 {
            let name = format!("many_{i:02}");
            let path = sample.cassette(&format!("sample--runlog--{name}"), "openai");
            let got = prompts(&read_json(&path));
            let tag = got[0].split(' ').next().unwrap().to_string();
            let want: Vec<String> = (0..10).map(|n| format!("{tag} {name} {n}")).collect();
            assert_eq!(got, want, "{}: one run's complete set", path.display());
            assert!(tags.contains(&tag), "{tag}");
            winners.insert(format!("sample::runlog${name}"), tag);
        }
        for (run, tag) in runs.iter().zip(&tags) {
            for changes in run.report["recorded"].as_array().unwrap() {
                let test = changes["test"].as_str().unwrap();
                if winners.get(test) == Some(tag) {
                    assert!(changes["superseded"].is_null(), "{test}: {changes}");
                }
            }
        }
        // Each run's set replays whole: the tests it won, with its own prompts.
        for tag in &tags {
            let won: Vec<&String> = winners
                .iter()
                .filter(|(_, t)| *t == tag)
                .map(|(test, _)| test)
                .collect();
            if won.is_empty() {
                continue;
            }
            let filter = won
                .iter()
                .map(|t| format!("test(={})", t.split('$').nth(1).unwrap()))
                .collect::<Vec<_>>()
                .join(" or ");
            let replay = sample.run(&["-E", &filter], &[("SAMPLE_TAG", tag), ("CI", "true")]);
            assert_eq!(replay.code, Some(0), "{}", replay.stderr);
            assert_eq!(replay.report["counts"]["hits"], won.len() * 10);
        }
    }
}

/// `cargo llmreplay test ARGS` in the sample in a process group of its own, with `env`.
fn spawn_test(sample: &Sample, args: &[&str], env: &[(&str, &str)]) -> Child {
    use std::os::unix::process::CommandExt;
    let mut cmd = sample.command(binary());
    cmd.args(["llmreplay", "test"])
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0);
    cmd.spawn().unwrap()
}

/// Waits for the file a test writes once it made its call.
fn wait_for(marker: &Path, child: &mut Child) {
    for _ in 0..6000 {
        if marker.exists() {
            return;
        }
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
            panic!("the run ended ({status}) before its test called:\n{err}");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("{} never appeared", marker.display());
}

/// Sends `signal` to the process group `child` leads, as a terminal's Ctrl-C does (SIGINT)
/// or as a machine going down might (SIGKILL); returns what it printed.
fn signal_group(child: &mut Child, signal: &str) -> String {
    let status = Command::new("kill")
        .args([&format!("-{signal}"), "--", &format!("-{}", child.id())])
        .status()
        .unwrap();
    assert!(status.success());
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    child.wait().unwrap();
    err
}

/// A replay under `test` has no runner beside its tests, so nextest's own JSON says how each
/// ended: the run log has the test that replayed as passed and the one that missed as failed,
/// and nextest's summary still reaches the user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_run_logs_how_each_test_ended() {
    let fake = FakeProvider::start().await;
    let sample = runlog_sample("0.1.1-outcomes");
    let record = with_fake(&fake, &["--record", "-E", "test(=many_00)"]);
    let recorded = sample.run(&refs(&record), &[("SAMPLE_TAG", "t")]);
    assert_eq!(recorded.code, Some(0), "{}", recorded.stderr);

    let replay = sample.run(
        &["-E", "test(=many_00) | test(=many_01)"],
        &[("SAMPLE_TAG", "t"), ("CI", "true")],
    );
    assert_ne!(replay.code, Some(0), "{}", replay.stderr);
    assert!(
        replay.stderr.contains("2 tests run: 1 passed, 1 failed"),
        "{}",
        replay.stderr
    );
    let read = read_by_python(Path::new(replay.report["run_log"].as_str().unwrap()));
    assert_eq!(read["mode"], "replay", "{read}");
    assert_eq!(
        read["outcomes"]["sample::runlog$many_00"], "passed",
        "{read}"
    );
    assert_eq!(
        read["outcomes"]["sample::runlog$many_01"], "failed",
        "{read}"
    );
    assert_eq!(read["ended"], true);
}

/// Ctrl-C during `cargo llmreplay test --record` while a re-recorded test waits after its new
/// call: its old recording stays and the new one is added, as `--record-missing` adds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_test_record_removes_nothing() {
    let fake = FakeProvider::start().await;
    let sample = runlog_sample("0.1.1-sigint");
    let args = with_fake(&fake, &["--record", "-E", "test(=waits_after_a_call)"]);
    let first = sample.run(&refs(&args), &[("SAMPLE_PROMPT", "old")]);
    assert_eq!(first.code, Some(0), "{}", first.stderr);
    let path = sample.cassette("sample--runlog--waits_after_a_call", "openai");
    assert_eq!(prompts(&read_json(&path)), ["old"]);

    let marker = sample.scratch().join("called");
    let marker_env = marker.display().to_string();
    let mut child = spawn_test(
        &sample,
        &refs(&args),
        &[("SAMPLE_PROMPT", "new"), ("SAMPLE_MARKER", &marker_env)],
    );
    wait_for(&marker, &mut child);
    let said = signal_group(&mut child, "INT");
    assert_eq!(prompts(&read_json(&path)), ["old", "new"], "{said}");
    assert_nothing_left(&sample);
}

/// A daemon killed with SIGKILL mid-run (the whole run's process group) leaves its spool:
/// `status` names it and fails `--check`, `recover` adds its recording and names the test that
/// never ended, and then nothing is left to apply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_run_leaves_its_spool_and_recover_applies_it() {
    let fake = FakeProvider::start().await;
    let sample = runlog_sample("0.1.1-sigkill");
    let args = with_fake(
        &fake,
        &["--record-missing", "-E", "test(=waits_after_a_call)"],
    );
    let warm = sample.run(&refs(&args), &[("SAMPLE_PROMPT", "warm")]);
    assert_eq!(warm.code, Some(0), "{}", warm.stderr);
    let marker = sample.scratch().join("called");
    let marker_env = marker.display().to_string();
    // Its report and log beside each other in a folder of this test's own.
    let logs = sample.scratch().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let killed_report = logs.join("killed.json").display().to_string();
    let mut killed_args = refs(&args);
    killed_args.extend(["--report", &killed_report]);
    let mut child = spawn_test(
        &sample,
        &killed_args,
        &[("SAMPLE_PROMPT", "killed"), ("SAMPLE_MARKER", &marker_env)],
    );
    wait_for(&marker, &mut child);
    signal_group(&mut child, "KILL");
    assert_eq!(temp_logs(&logs).len(), 1, "the killed run's log is left");
    let path = sample.cassette("sample--runlog--waits_after_a_call", "openai");
    assert_eq!(
        prompts(&read_json(&path)),
        ["warm"],
        "the test never ended: its cassette is not written yet"
    );

    let status = sample.llmreplay(&["status", "--no-list", "--check"]);
    assert_eq!(status.code, Some(1), "{}", status.stderr);
    assert!(
        status
            .stderr
            .contains("not yet in the cassettes: 1 recording")
            && status.stderr.contains("sample::runlog$waits_after_a_call")
            && status.stderr.contains("cargo llmreplay recover"),
        "{}",
        status.stderr
    );
    let recovered = sample.llmreplay(&["recover"]);
    assert_eq!(recovered.code, Some(0), "{}", recovered.stderr);
    assert!(
        recovered
            .stderr
            .contains("added 1 recording of 1 test to their cassettes, removing nothing")
            && recovered
                .stderr
                .contains("never ended: sample::runlog$waits_after_a_call"),
        "{}",
        recovered.stderr
    );
    assert_eq!(prompts(&read_json(&path)), ["warm", "killed"]);
    assert_nothing_left(&sample);
    let again = sample.llmreplay(&["recover"]);
    assert!(
        again.stderr.contains("no run left recordings to apply"),
        "{}",
        again.stderr
    );
    // The next run with its log there removes the temporary log the killed run left.
    let next = sample.run_reporting(
        &logs.join("next.json"),
        &["-E", "test(=waits_after_a_call)"],
        &[("SAMPLE_PROMPT", "warm")],
    );
    assert_eq!(next.code, Some(0), "{}", next.stderr);
    assert!(temp_logs(&logs).is_empty(), "{:?}", temp_logs(&logs));
}

/// The temporary logs in a folder: a live run's, or one a killed run left.
fn temp_logs(dir: &Path) -> Vec<PathBuf> {
    temp_files(dir)
        .into_iter()
        .filter(|p| p.to_string_lossy().ends_with(".log.tmp"))
        .collect()
}

/// Ctrl-C during `cargo llmreplay run --record -- pytest` while a re-recorded test waits after
/// its new call: the plugin says the test was interrupted, not passed, and nothing is removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_pytest_run_removes_nothing() {
    let Some(python) = sdk_python("pytest_llmreplay") else {
        return;
    };
    let fake = FakeProvider::start().await;
    let dir = tempfile::tempdir().unwrap();
    let suite = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/sdk/pytest_interrupt");
    std::fs::copy(
        suite.join("test_interrupted.py"),
        dir.path().join("test_interrupted.py"),
    )
    .unwrap();
    let upstream = format!("openai={}", fake.url());
    let run = |env: &[(&str, &str)], group: bool| {
        use std::os::unix::process::CommandExt;
        let mut cmd = Command::new(binary());
        cmd.current_dir(dir.path())
            .args([
                "llmreplay",
                "run",
                "--record",
                "--upstream",
                &upstream,
                "--",
            ])
            .arg(&python)
            .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
            .env("CARGO_TARGET_DIR", dir.path().join("target"))
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for k in ["CI", "LLMREPLAY_MODE", "PYTEST_ADDOPTS"] {
            cmd.env_remove(k);
        }
        without_provider_env(&mut cmd);
        // The SDK wants a key to start; a recording run sends it to the fake alone.
        cmd.env("OPENAI_API_KEY", "sk-test-not-real");
        if group {
            cmd.process_group(0);
        }
        cmd
    };
    let first = Output::of(&mut run(&[("SAMPLE_PROMPT", "old")], false));
    assert_eq!(first.code, Some(0), "{}", first.stderr);
    let folder = cassettes::Slug::from_test_id(&cassettes::TestId::new(
        "test_interrupted.py::test_waits_after_a_call",
    ));
    let path = dir
        .path()
        .join("tests/cassettes")
        .join(folder.as_str())
        .join("openai.json");
    assert_eq!(prompts(&read_json(&path)), ["old"], "{}", first.stderr);

    let marker = dir.path().join("called");
    let marker_env = marker.display().to_string();
    let mut child = run(
        &[("SAMPLE_PROMPT", "new"), ("SAMPLE_MARKER", &marker_env)],
        true,
    )
    .spawn()
    .unwrap();
    wait_for(&marker, &mut child);
    let said = signal_group(&mut child, "INT");
    assert_eq!(prompts(&read_json(&path)), ["old", "new"], "{said}");
    let read = read_by_python(&newest_events(&dir.path().join("target")));
    assert_eq!(
        read["outcomes"]["test_interrupted.py::test_waits_after_a_call"], "interrupted",
        "{read}"
    );

    // SIGTERM to `cargo llmreplay run` alone reaches pytest, which it ends at once (Python's
    // default): the run ends, and the test that never said its end keeps everything.
    let marker = dir.path().join("called-again");
    let marker_env = marker.display().to_string();
    let mut child = run(
        &[("SAMPLE_PROMPT", "newer"), ("SAMPLE_MARKER", &marker_env)],
        true,
    )
    .spawn()
    .unwrap();
    wait_for(&marker, &mut child);
    assert!(Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap()
        .success());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = signal_group(&mut child, "KILL");
            panic!("the run did not end within a minute of its SIGTERM");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let mut said = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut said).unwrap();
    assert_eq!(
        prompts(&read_json(&path)),
        ["old", "new", "newer"],
        "{said}"
    );
}

/// How a test ended is data: a test id holding a newline and another test's name ends as
/// `failed` and forges nothing, so the other test, which failed too, keeps its old recording
/// beside its new one; an outcome the daemon does not know is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_test_id_cannot_forge_another_tests_outcome() {
    let fake = FakeProvider::start().await;
    let dir = tempfile::tempdir().unwrap();
    let victim = "tests/v.py::victim";
    let forger = format!("x\npassed {victim}");
    let url =
        |serve: &Serve, test: &str| format!("{}/openai/v1/chat/completions", serve.for_test(test));
    let ask = |url: String, prompt: &'static str| async move {
        let r = crate::support::http()
            .post(url)
            .json(&serde_json::json!({"model": "m", "messages": [{"role": "user", "content": prompt}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        r.bytes().await.unwrap();
    };
    let end = |serve: &Serve, test: &str, outcome: &str| {
        let url = format!(
            "{}/__llmreplay/end?test={}&outcome={outcome}",
            serve.base,
            percent_encoding::utf8_percent_encode(test, percent_encoding::NON_ALPHANUMERIC)
        );
        async move {
            crate::support::http()
                .post(url)
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    let upstream = format!("openai={}", fake.url());
    let first = Serve::in_mode(dir.path(), "record", &upstream, &[]);
    ask(url(&first, victim), "old").await;
    assert_eq!(end(&first, victim, "passed").await, 200);
    first.stop();

    let second = Serve::in_mode(dir.path(), "record", &upstream, &[]);
    ask(url(&second, victim), "new").await;
    ask(url(&second, &forger), "forged").await;
    assert_eq!(end(&second, &forger, "failed").await, 200);
    // Named by a percent-encoded header, as clients send it, the victim's end is its own.
    let by_header = crate::support::http()
        .post(format!("{}/__llmreplay/end?outcome=failed", second.base))
        .header(
            "x-test-id",
            percent_encoding::utf8_percent_encode(victim, percent_encoding::NON_ALPHANUMERIC)
                .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(by_header.status(), 200);
    assert_eq!(end(&second, victim, "passed x").await, 400);
    let stopped = second.stop();
    assert!(stopped.status.success(), "{}", stopped.stderr);
    let slug = cassettes::Slug::from_test_id(&cassettes::TestId::new(victim));
    let path = dir.path().join("c").join(slug.as_str()).join("openai.json");
    assert_eq!(prompts(&read_json(&path)), ["old", "new"]);
    let events = std::fs::read_dir(dir.path().join("target/llmreplay/runs"))
        .unwrap()
        .map(|e| e.unwrap().path().join("events.ndjson"))
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect::<String>();
    assert!(
        events.contains(r#""event":"test_ended","test":"tests/v.py::victim","outcome":"failed""#),
        "{events}"
    );
}

/// A test whose cassettes cannot be written when it ends (a file stands where its folder
/// should be) does not stop the run's end: the run says which test and why, fails, still
/// writes its report, and keeps the recording in its spool, which `recover` adds once the way
/// is clear.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cassette_that_cannot_be_written_fails_the_run_and_keeps_the_recording() {
    let fake = FakeProvider::start().await;
    let sample = runlog_sample("0.1.1-blocked");
    let args = with_fake(
        &fake,
        &["--record-missing", "-E", "test(=waits_after_a_call)"],
    );
    let path = sample.cassette("sample--runlog--waits_after_a_call", "openai");
    let folder = path.parent().unwrap().to_path_buf();
    let (marker, release) = (sample.scratch().join("called"), sample.scratch().join("go"));
    let (marker_env, release_env) = (marker.display().to_string(), release.display().to_string());
    let report = sample.scratch().join("report.json");
    let mut with_report = vec!["--report".to_string(), report.display().to_string()];
    with_report.extend(args.iter().cloned());
    let mut child = spawn_test(
        &sample,
        &refs(&with_report),
        &[
            ("SAMPLE_PROMPT", "blocked"),
            ("SAMPLE_MARKER", &marker_env),
            ("SAMPLE_RELEASE", &release_env),
        ],
    );
    wait_for(&marker, &mut child);
    // The call is made; a file now stands where the test's folder will be written.
    std::fs::create_dir_all(folder.parent().unwrap()).unwrap();
    std::fs::write(&folder, "in the way").unwrap();
    std::fs::write(&release, "").unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    let status = child.wait().unwrap();
    let run = crate::support::Run {
        code: status.code(),
        stderr,
        report: std::fs::read_to_string(&report)
            .map(|t| serde_json::from_str(&t).unwrap())
            .unwrap_or(Value::Null),
        report_path: PathBuf::new(),
    };
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(
        run.stderr
            .contains("the recordings of sample::runlog$waits_after_a_call were not written")
            && run.stderr.contains("cargo llmreplay recover"),
        "{}",
        run.stderr
    );
    assert!(run.report.is_object(), "the report is written");
    std::fs::remove_file(&folder).unwrap();
    let recovered = sample.llmreplay(&["recover"]);
    assert!(
        recovered.stderr.contains("added 1 recording of 1 test"),
        "{}",
        recovered.stderr
    );
    assert_eq!(prompts(&read_json(&path)), ["blocked"]);
}

/// `cargo llmreplay ARGS` in `dir`, without the environment's provider keys.
fn llmreplay_in(dir: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(binary());
    cmd.arg("llmreplay").args(args).current_dir(dir);
    cmd.env_remove("CI").env_remove("LLMREPLAY_MODE");
    without_provider_env(&mut cmd);
    Output::of(&mut cmd)
}

/// A spool that another version of cargo-llmreplay left (a newer release tried, then rolled
/// back; a checkout sharing the target dir) cannot be applied by this one, and says so; it
/// stops nothing else: `status` still lists the cassettes and the other spools, `recover` and
/// the next run's start still apply what a killed daemon of this version left, and the
/// foreign spool is kept for the version that wrote it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spool_of_another_version_blocks_no_other() {
    let fake = FakeProvider::start().await;
    let dir = tempfile::tempdir().unwrap();
    let serve = Serve::in_mode(
        dir.path(),
        "record-missing",
        &format!("openai={}", fake.url()),
        &[],
    );
    let answer = crate::support::http()
        .post(format!(
            "{}/openai/v1/chat/completions",
            serve.for_test("left$behind")
        ))
        .json(&serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "kept"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    // The whole answer, which ends once its recording is in the spool.
    assert!(answer.text().await.unwrap().contains("kept"));
    // The daemon is killed before any end: its recording is in its spool alone.
    let pid = serve.pid().to_string();
    assert!(Command::new("kill")
        .args(["-KILL", &pid])
        .status()
        .unwrap()
        .success());
    drop(serve);
    let cassettes = std::path::absolute(dir.path().join("c")).unwrap();
    let foreign = dir.path().join("target/llmreplay/runs/20000101T000000Z-1");
    std::fs::create_dir_all(&foreign).unwrap();
    let spool = serde_json::json!({"kind": "spool", "version": 99, "cassette_dir": cassettes});
    std::fs::write(
        foreign.join("spool.ndjson"),
        format!("{spool}\n{{\"kind\":\"recorded_v99\"}}\n"),
    )
    .unwrap();

    let status = llmreplay_in(dir.path(), &["status", "--cassette-dir", "c", "--check"]);
    assert_eq!(status.code, Some(1), "{}", status.stderr);
    assert!(
        status
            .stderr
            .contains("not yet in the cassettes: 1 recording")
            && status.stderr.contains("left$behind"),
        "{}",
        status.stderr
    );
    assert!(
        status.stderr.contains("20000101T000000Z-1") && status.stderr.contains("spool version 99"),
        "the foreign spool is named: {}",
        status.stderr
    );
    let recovered = llmreplay_in(dir.path(), &["recover", "--cassette-dir", "c"]);
    assert!(
        recovered
            .stderr
            .contains("added 1 recording of 1 test to their cassettes"),
        "{}",
        recovered.stderr
    );
    assert!(
        recovered.stderr.contains("spool version 99"),
        "{}",
        recovered.stderr
    );
    assert_eq!(
        recovered.code,
        Some(1),
        "not all applied: {}",
        recovered.stderr
    );
    assert_eq!(
        prompts(&read_json(&dir.path().join("c/left--behind/openai.json"))),
        ["kept"]
    );
    assert!(
        foreign.join("spool.ndjson").is_file(),
        "kept for its version"
    );
}

/// SIGTERM sent to `cargo llmreplay test --record` alone, as `timeout`, `kill PID` or a CI
/// runner's cancel sends it (not to its process group, as a terminal's Ctrl-C does), while a
/// re-recorded test waits without end: the run passes it on to nextest, so its tests end and
/// the run ends, instead of waiting for them forever; and, interrupted, it removes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigterm_to_the_run_alone_ends_it_and_removes_nothing() {
    let fake = FakeProvider::start().await;
    let sample = runlog_sample("0.1.1-sigint");
    let args = with_fake(&fake, &["--record", "-E", "test(=waits_after_a_call)"]);
    let first = sample.run(&refs(&args), &[("SAMPLE_PROMPT", "old")]);
    assert_eq!(first.code, Some(0), "{}", first.stderr);
    let path = sample.cassette("sample--runlog--waits_after_a_call", "openai");

    let marker = sample.scratch().join("called");
    let marker_env = marker.display().to_string();
    let mut child = spawn_test(
        &sample,
        &refs(&args),
        &[("SAMPLE_PROMPT", "new"), ("SAMPLE_MARKER", &marker_env)],
    );
    wait_for(&marker, &mut child);
    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            // The whole group: the run, nextest and the test that waits.
            let _ = signal_group(&mut child, "KILL");
            panic!("the run did not end within a minute of its SIGTERM");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let mut said = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut said).unwrap();
    assert!(!status.success(), "{said}");
    assert_eq!(prompts(&read_json(&path)), ["old", "new"], "{said}");
    assert_nothing_left(&sample);

    // SIGTERM to the whole process group (a service manager stopping a unit): nextest hears it
    // twice, from the group and passed on, and ends its tests at once; nothing is removed.
    let marker = sample.scratch().join("called-again");
    let marker_env = marker.display().to_string();
    let mut child = spawn_test(
        &sample,
        &refs(&args),
        &[("SAMPLE_PROMPT", "newer"), ("SAMPLE_MARKER", &marker_env)],
    );
    wait_for(&marker, &mut child);
    let said = signal_group(&mut child, "TERM");
    assert_eq!(
        prompts(&read_json(&path)),
        ["old", "new", "newer"],
        "{said}"
    );
    assert_nothing_left(&sample);
}
