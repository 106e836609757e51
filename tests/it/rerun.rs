//! End-to-end tests of `cargo llmreplay rerun`: cassettes recorded through the real daemon by
//! real clients, then sent again by the real binary to the loopback fake provider, which
//! answers some of them differently, fails one, and counts how many arrive at once.

use crate::support::{all_files, binary, commit_all, FakeProvider, Output, Serve};
use serde_json::{json, Value};
use std::path::Path;
use std::sync::atomic::Ordering;

const OPENAI_KEY: &str = "sk-rerun-secret-0001";
const ANTHROPIC_KEY: &str = "sk-ant-rerun-secret-0002";

fn ups(fake: &FakeProvider) -> Vec<String> {
    ["openai", "anthropic"]
        .iter()
        .flat_map(|p| ["--upstream".to_string(), format!("{p}={}", fake.url())])
        .collect()
}

/// Records, through the daemon: `alpha` a JSON answer and a stream, `beta` two JSON answers,
/// `gamma` an Anthropic stream, and `other$delta` that the filter leaves out.
async fn record(dir: &Path, fake: &FakeProvider) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut args = vec!["--mode".to_string(), "record".to_string()];
    args.extend(ups(fake));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let serve = Serve::start(dir, &args);
    let http = reqwest::Client::new();
    let openai = |prompt: &str, stream: bool| json!({"model": "gpt-4o-mini", "stream": stream, "messages": [{"role": "user", "content": prompt}]});
    let calls = [
        (
            "rr::chat$alpha",
            "openai/v1/chat/completions",
            openai("Steady answer", false),
        ),
        (
            "rr::chat$alpha",
            "openai/v1/chat/completions",
            openai("Stream me", true),
        ),
        (
            "rr::chat$beta",
            "openai/v1/chat/completions",
            openai("Drift please", false),
        ),
        (
            "rr::chat$beta",
            "openai/v1/chat/completions",
            openai("Breaks later", false),
        ),
        (
            "rr::chat$gamma",
            "anthropic/v1/messages",
            json!({"model": "claude-x", "max_tokens": 50, "stream": true, "messages": [{"role": "user", "content": "Bonjour claude"}]}),
        ),
        (
            "other$delta",
            "openai/v1/chat/completions",
            openai("Left out", false),
        ),
    ];
    for (test, path, body) in calls {
        let answer = http
            .post(format!("{}/{path}", serve.for_test(test)))
            .header("authorization", "Bearer sk-recording-key")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
        answer.text().await.unwrap();
    }
    let stopped = serve.stop();
    assert!(stopped.status.success(), "{}", stopped.stderr);
}

/// The sample `record` makes, in a workspace of its own, and the stand-in that answered it.
async fn recorded() -> (FakeProvider, tempfile::TempDir) {
    let fake = FakeProvider::start().await;
    let dir = crate::support::crate_in_repo("rr", false);
    record(dir.path(), &fake).await;
    (fake, dir)
}

/// `rerun WORDS`, sent to the stand-in.
fn rerun_words(words: &[&str], fake: &FakeProvider) -> Vec<String> {
    let mut args: Vec<String> = std::iter::once("rerun")
        .chain(words.iter().copied())
        .map(String::from)
        .collect();
    args.extend(ups(fake));
    args
}

fn llmreplay(dir: &Path, args: &[&str]) -> Output {
    Output::of(
        std::process::Command::new(binary())
            .arg("llmreplay")
            .args(args)
            .current_dir(dir)
            .env_remove("CI")
            .env("OPENAI_API_KEY", OPENAI_KEY)
            .env("ANTHROPIC_API_KEY", ANTHROPIC_KEY),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reruns_with_overrides_four_at_a_time_and_marks_exactly_the_changed_and_the_failed() {
    let (fake, dir) = recorded().await;
    commit_all(dir.path());
    let recorded = fake.received().len();

    *fake.state.suffix_for.lock().unwrap() = vec![("Drift please".into(), " (new model)".into())];
    *fake.state.fail_for.lock().unwrap() = vec!["Breaks later".into()];
    *fake.state.gate.lock().unwrap() = Some(4);
    let mut args: Vec<String> = [
        "rerun",
        "rr::",
        "--jobs",
        "4",
        "--model",
        "gpt-next",
        "--param",
        "temperature=0",
        "--format",
        "json",
        "--save",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(ups(&fake));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = llmreplay(dir.path(), &args);
    assert_eq!(
        out.code,
        Some(1),
        "a failed request fails the command: {}",
        out.stderr
    );
    assert!(
        out.stderr.contains("3 identical, 1 changed, 1 failed"),
        "{}",
        out.stderr
    );
    assert_eq!(
        fake.state.peak.load(Ordering::SeqCst),
        4,
        "four requests in flight at once, never more"
    );

    let report: Value = serde_json::from_str(&out.stdout).unwrap();
    let results = report["results"].as_array().unwrap();
    let verdicts: Vec<(&str, u64, &str)> = results
        .iter()
        .map(|r| {
            (
                r["test"].as_str().unwrap(),
                r["interaction"].as_u64().unwrap(),
                r["verdict"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        verdicts,
        [
            ("rr::chat$alpha", 1, "identical"),
            ("rr::chat$alpha", 2, "identical"),
            ("rr::chat$beta", 1, "changed"),
            ("rr::chat$beta", 2, "failed"),
            ("rr::chat$gamma", 1, "identical"),
        ],
        "the filter leaves other$delta out"
    );
    let drift = &results[2];
    assert_eq!(
        drift["diff"],
        "-You said: Drift please\n+You said: Drift please (new model)\n"
    );
    // The fake counts a token a word.
    assert_eq!(drift["tokens_before"]["output"], 4);
    assert_eq!(drift["tokens_after"]["output"], 6);
    assert_eq!(drift["tokens_delta"], 2);
    assert_eq!(drift["model"], "gpt-next");
    assert!(drift["latency_before"]["total_ms"].is_u64(), "{drift}");
    assert!(drift["latency_after"]["ttfb_ms"].is_u64(), "{drift}");
    assert!(drift["latency_delta_ms"].is_i64(), "{drift}");
    assert!(drift["request_id"].as_str().unwrap().starts_with("req_"));
    assert!(results[3]["error"]
        .as_str()
        .unwrap()
        .starts_with("HTTP 500"));
    assert!(results[3].get("saved").is_none(), "a failure is not saved");
    assert_eq!(
        results[4]["tokens_delta"], 0,
        "the stream assembled: {}",
        results[4]
    );

    // What reached the provider: the overrides, streaming kept, the user's keys.
    let sent: Vec<_> = fake.received().into_iter().skip(recorded).collect();
    assert_eq!(sent.len(), 5);
    for r in &sent {
        assert_eq!(r.body["model"], "gpt-next", "{:?}", r.body);
        assert_eq!(r.body["temperature"], 0, "{:?}", r.body);
        let header = |name: &str| {
            r.headers
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        };
        if r.path == "/v1/messages" {
            assert_eq!(header("x-api-key"), Some(ANTHROPIC_KEY));
            assert_eq!(header("anthropic-version"), Some("2023-06-01"));
            assert_eq!(r.body["stream"], true);
        } else {
            assert_eq!(
                header("authorization"),
                Some(format!("Bearer {OPENAI_KEY}").as_str())
            );
        }
    }
    assert!(sent
        .iter()
        .any(|r| r.body["stream"] == true && r.path == "/v1/chat/completions"));

    // --save appended the new answers (other model, other key); diff shows them for review.
    let diff = llmreplay(dir.path(), &["diff", "--base", "HEAD", "--format", "json"]);
    let diff: Value = serde_json::from_str(&diff.stdout).unwrap();
    assert_eq!(diff["counts"]["added"], 4, "{diff}");
    assert_eq!(diff["counts"]["removed"], 0);
    let beta = diff["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["test"] == "rr::chat$beta")
        .unwrap();
    assert_eq!(
        beta["interactions"][0]["answer_after"],
        "You said: Drift please (new model)"
    );

    // The keys were sent, and written nowhere.
    for (path, text) in all_files(dir.path()) {
        if path.components().any(|c| c.as_os_str() == ".git") {
            continue;
        }
        assert!(
            !text.contains(OPENAI_KEY) && !text.contains(ANTHROPIC_KEY),
            "{}",
            path.display()
        );
    }
    for text in [&out.stdout, &out.stderr] {
        assert!(!text.contains(OPENAI_KEY) && !text.contains(ANTHROPIC_KEY));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drift_check_fails_on_change_and_save_replaces_in_place() {
    let (fake, dir) = recorded().await;
    let cassette = dir
        .path()
        .join("tests/cassettes/rr--chat--alpha/openai.json");
    let before: Value = serde_json::from_str(&std::fs::read_to_string(&cassette).unwrap()).unwrap();

    let mut args = vec!["rerun".to_string(), "-E".into(), "test(=alpha)".into()];
    args.extend(ups(&fake));
    let steady: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = llmreplay(dir.path(), &steady);
    assert_eq!(out.code, Some(0), "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("2 identical, 0 changed, 0 failed"),
        "{}",
        out.stdout
    );
    let check = [steady.clone(), vec!["--fail-on-change"]].concat();
    assert_eq!(
        llmreplay(dir.path(), &check).code,
        Some(0),
        "nothing changed yet"
    );

    *fake.state.suffix_for.lock().unwrap() = vec![("Steady".into(), "!".into())];
    let out = llmreplay(dir.path(), &check);
    assert_eq!(out.code, Some(1), "{}", out.stdout);
    assert!(
        out.stdout.contains("-You said: Steady answer\n"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("+You said: Steady answer!\n"),
        "{}",
        out.stdout
    );

    let save = [steady.clone(), vec!["--save", "--format", "markdown"]].concat();
    let out = llmreplay(dir.path(), &save);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout.starts_with("### cargo-llmreplay rerun"),
        "{}",
        out.stdout
    );
    let after: Value = serde_json::from_str(&std::fs::read_to_string(&cassette).unwrap()).unwrap();
    let answers = |c: &Value| -> Vec<String> {
        c["interactions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["summary"]["text"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        answers(&before),
        ["You said: Steady answer", "You said: Stream me"]
    );
    assert_eq!(
        answers(&after),
        ["You said: Steady answer!", "You said: Stream me"],
        "the changed answer replaced in place, the same one left alone"
    );
    assert_eq!(
        after["interactions"][0]["key"],
        before["interactions"][0]["key"]
    );
    assert_eq!(after["interactions"][1], before["interactions"][1]);

    let bad = llmreplay(dir.path(), &["rerun", "-E", "test(=alpha) |"]);
    assert_eq!(bad.code, Some(2));
    assert!(
        bad.stderr.contains("expected a predicate"),
        "{}",
        bad.stderr
    );
    let none = llmreplay(dir.path(), &["rerun", "no-such-test"]);
    assert_eq!(none.code, Some(2));
    assert!(
        none.stderr.contains("no recorded request matches"),
        "{}",
        none.stderr
    );
}

/// An upload goes out again as multipart with a fresh boundary and the same parts, and a binary
/// answer compares by its bytes: both come back identical from an unchanged provider.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_are_sent_again_with_a_fresh_boundary_and_binary_answers_compare_by_bytes() {
    let fake = FakeProvider::start().await;
    let dir = crate::support::crate_in_repo("rr", false);
    let up = format!("openai={}", fake.url());
    let serve = Serve::start(dir.path(), &["--mode", "record", "--upstream", &up]);
    let base = format!("{}/openai/v1", serve.for_test("rr::audio$upload"));
    let http = crate::support::http();
    let clip = crate::support::audio_bytes("clip", 70_000);
    let form = reqwest::multipart::Form::new()
        .text("model", "whisper-1")
        .part(
            "file",
            reqwest::multipart::Part::bytes(clip.clone())
                .file_name("clip.wav")
                .mime_str("audio/wav")
                .unwrap(),
        );
    let heard = http
        .post(format!("{base}/audio/transcriptions"))
        .multipart(form)
        .send()
        .await
        .unwrap();
    assert_eq!(heard.status(), 200);
    let speech = http
        .post(format!("{base}/audio/speech"))
        .json(&json!({"model": "tts", "input": "Hello", "voice": "alloy"}))
        .send()
        .await
        .unwrap();
    assert_eq!(speech.bytes().await.unwrap().len(), 6000);
    assert!(serve.stop().status.success());
    let first = fake.received();

    let out = llmreplay(
        dir.path(),
        &["rerun", "--format", "json", "--upstream", &up],
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stderr.contains("2 identical"), "{}", out.stderr);
    let again = fake.received();
    let upload = |r: &crate::support::Received| {
        r.headers
            .iter()
            .find(|(k, _)| k == "content-type")
            .map(|(_, v)| v.clone())
            .unwrap()
    };
    // rerun sends its requests concurrently: find the upload by its path.
    let upload_of = |list: &[crate::support::Received]| {
        list.iter()
            .find(|r| r.path == "/v1/audio/transcriptions")
            .cloned()
            .unwrap()
    };
    let (before, after) = (&upload_of(&first), &upload_of(&again[first.len()..]));
    assert_ne!(upload(before), upload(after), "a fresh boundary");
    assert!(upload(after).starts_with("multipart/form-data; boundary="));
    let find = |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).any(|w| w == needle);
    assert!(find(&after.raw, &clip), "the same file bytes go out again");
    assert!(find(&after.raw, b"whisper-1"));
}

/// Sets every recording's date in `file` to `days` days ago.
fn back_date(file: &Path, days: u64) -> String {
    let date = humantime::format_rfc3339_seconds(
        std::time::SystemTime::now() - std::time::Duration::from_secs(days * 86_400),
    )
    .to_string();
    let mut cassette: Value =
        serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    for i in cassette["interactions"].as_array_mut().unwrap() {
        i["recorded_at"] = date.clone().into();
    }
    std::fs::write(file, serde_json::to_string_pretty(&cassette).unwrap()).unwrap();
    date
}

/// Re-verification, least fresh first: a recording whose fresh answer is the same, or differs
/// only in wording, is stamped verified with its answer, key and seal untouched; one whose
/// structure changed is reported as drift and left as it was. Never under CI unasked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mark_verified_stamps_what_holds_oldest_first_and_reports_the_rest() {
    let (fake, dir) = recorded().await;
    let cassettes = dir.path().join("tests/cassettes");
    let beta = cassettes.join("rr--chat--beta/openai.json");
    let gamma = cassettes.join("rr--chat--gamma/anthropic.json");
    let sixty = back_date(&beta, 60);
    back_date(&gamma, 90);
    let before: Value = serde_json::from_str(&std::fs::read_to_string(&beta).unwrap()).unwrap();
    *fake.state.suffix_for.lock().unwrap() = vec![("Drift please".into(), " indeed".into())];
    *fake.state.finish_for.lock().unwrap() = vec![("Breaks later".into(), "length".into())];
    let sent_before = fake.received().len();

    let args = rerun_words(
        &[
            "--oldest-first",
            "--mark-verified",
            "-j",
            "1",
            "--format",
            "json",
            "-E",
            "test(/beta|gamma/)",
        ],
        &fake,
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let refused = Output::of(
        std::process::Command::new(binary())
            .arg("llmreplay")
            .args(&args)
            .current_dir(dir.path())
            .env("CI", "true"),
    );
    assert_eq!(refused.code, Some(2), "{}", refused.stderr);
    assert!(
        refused.stderr.contains("--allow-in-ci"),
        "{}",
        refused.stderr
    );
    assert_eq!(fake.received().len(), sent_before, "nothing sent under CI");

    let out = llmreplay(dir.path(), &args);
    assert_eq!(out.code, Some(0), "{}{}", out.stdout, out.stderr);
    let prompts: Vec<String> = fake.received()[sent_before..]
        .iter()
        .map(|r| {
            r.body["messages"][0]["content"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(
        prompts,
        ["Bonjour claude", "Drift please", "Breaks later"],
        "oldest first"
    );
    let json: Value = serde_json::from_str(&out.stdout).unwrap();
    let results: Vec<(String, Value, Value)> = json["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["prompt"].as_str().unwrap().to_string(),
                r["drift"].clone(),
                r["verified"].clone(),
            )
        })
        .collect();
    assert!(
        results.contains(&("Bonjour claude".into(), Value::Null, json!(true))),
        "{results:?}"
    );
    assert!(
        results.contains(&("Drift please".into(), json!(["wording"]), json!(true))),
        "{results:?}"
    );
    assert!(
        results.contains(&("Breaks later".into(), json!(["structure"]), json!(false))),
        "{results:?}"
    );
    assert!(
        out.stderr.contains("2 recordings verified as of"),
        "{}",
        out.stderr
    );

    let after: Value = serde_json::from_str(&std::fs::read_to_string(&beta).unwrap()).unwrap();
    let (was, now) = (&before["interactions"], &after["interactions"]);
    let today = cassettes::clock::utc_now()[..10].to_string();
    assert!(
        now[0]["verified_at"].as_str().unwrap().starts_with(&today),
        "{}",
        now[0]
    );
    assert!(
        now[1].get("verified_at").is_none(),
        "structure drift: not verified"
    );
    for i in 0..2 {
        for field in ["key", "seal", "request", "response", "recorded_at"] {
            assert_eq!(
                now[i][field], was[i][field],
                "interaction {i}'s {field} untouched"
            );
        }
    }
    assert_eq!(now[1]["recorded_at"], sixty.as_str());
    // The gate now finds only the recording that did not hold.
    let status = llmreplay(dir.path(), &["status", "--stale", "30d", "--no-list"]);
    assert!(
        status.stderr.contains("stale (1)")
            && status.stderr.contains("rr--chat--beta/  60 days old"),
        "{}",
        status.stderr
    );
}

/// A budget, least fresh first: each recording's cost is estimated before sending from its
/// recorded usage at its model's price; sending stops before the first that would pass the
/// budget, a recording with no price is not sent, and only what was sent is stamped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_sends_the_least_fresh_until_the_next_would_pass_it() {
    let (fake, dir) = recorded().await;
    let cassettes = dir.path().join("tests/cassettes");
    let beta = cassettes.join("rr--chat--beta/openai.json");
    back_date(&cassettes.join("rr--chat--gamma/anthropic.json"), 90);
    back_date(&beta, 60);
    let sent_before = fake.received().len();
    // gpt-4o-mini at $0.15 and $0.60 a million tokens in and out: each of beta's recordings
    // (5 in, 4 out) costs $0.00000315, so $0.000004 pays for one. claude-x has no price.
    let args = rerun_words(
        &[
            "--oldest-first",
            "--mark-verified",
            "--budget",
            "0.000004USD",
            "-j",
            "1",
            "-E",
            "test(/alpha|beta|gamma/)",
        ],
        &fake,
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = llmreplay(dir.path(), &args);
    assert_eq!(out.code, Some(0), "{}{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains("budget $0.000004: 1 recording to send, estimated $0.000003 from their recordings; 3 recordings left, the next would pass the budget; 1 unpriced recording not sent"),
        "{}",
        out.stderr
    );
    let sent: Vec<String> = fake.received()[sent_before..]
        .iter()
        .map(|r| {
            r.body["messages"][0]["content"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(sent, ["Drift please"], "the oldest priced one alone");
    let after: Value = serde_json::from_str(&std::fs::read_to_string(&beta).unwrap()).unwrap();
    assert!(
        after["interactions"][0]["verified_at"].is_string(),
        "{after}"
    );
    assert!(
        after["interactions"][1].get("verified_at").is_none(),
        "not sent, not stamped"
    );
    let bad = llmreplay(dir.path(), &["rerun", "--budget", "five dollars"]);
    assert_eq!(bad.code, Some(2), "{}", bad.stderr);
    assert!(bad.stderr.contains("2USD"), "{}", bad.stderr);
}

/// A budget is planned from the recordings' usage, which is no part of the seal: a recording
/// whose usage says less than its live answer costs (edited by hand, or a provider that now
/// answers at length) must not let the rerun spend past the budget. It also holds as a cap on
/// what the live answers cost, so sends stop once they reach it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_holds_when_the_recordings_say_less_than_the_answers_cost() {
    let (fake, dir) = recorded().await;
    let cassettes = dir.path().join("tests/cassettes");
    let mut zeroed = 0;
    for folder in std::fs::read_dir(&cassettes).unwrap() {
        let file = folder.unwrap().path().join("openai.json");
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        let mut cassette: Value = serde_json::from_str(&text).unwrap();
        for i in cassette["interactions"].as_array_mut().unwrap() {
            i["summary"]["usage"] = json!({"prompt_tokens": 0, "completion_tokens": 0});
            zeroed += 1;
        }
        std::fs::write(&file, serde_json::to_string_pretty(&cassette).unwrap()).unwrap();
    }
    assert!(zeroed >= 4, "{zeroed}");
    let sent_before = fake.received().len();
    // Each live answer (5 in, 4 out at gpt-4o-mini's price) costs $0.00000315: the budget
    // pays for one, and the answer that passes it is the last sent.
    let args = rerun_words(
        &["--mark-verified", "--budget", "0.000004USD", "-j", "1"],
        &fake,
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = llmreplay(dir.path(), &args);
    let sent = fake.received().len() - sent_before;
    assert!(sent <= 2, "sent {sent}: {}{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("--budget 0.000004USD") || out.stdout.contains("its --budget"),
        "{}{}",
        out.stdout,
        out.stderr
    );
}

/// A cassette that stops parsing while its recordings are being checked (edited by hand, or
/// a broken write) is one file not stamped, said by name: the other files are still stamped,
/// and the results, paid for, are still shown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cassette_broken_mid_rerun_leaves_the_others_stamped_and_the_results_shown() {
    let (fake, dir) = recorded().await;
    let cassettes = dir.path().join("tests/cassettes");
    let alpha = cassettes.join("rr--chat--alpha/openai.json");
    let beta = cassettes.join("rr--chat--beta/openai.json");
    back_date(&beta, 60);
    let sent_before = fake.received().len();
    // Each answer starts a while after its request arrives: time to break beta's file while
    // its first request is in flight.
    *fake.state.answer_delay.lock().unwrap() = std::time::Duration::from_millis(500);
    let args = rerun_words(
        &[
            "--oldest-first",
            "--mark-verified",
            "-j",
            "1",
            "-E",
            "test(/alpha|beta/)",
        ],
        &fake,
    );
    let root = dir.path().to_path_buf();
    let run = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        llmreplay(&root, &args)
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while fake.received().len() == sent_before {
        assert!(std::time::Instant::now() < deadline, "nothing was sent");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    std::fs::write(&beta, "{ broken").unwrap();
    let out = run.await.unwrap();
    assert_eq!(out.code, Some(1), "a file left unstamped fails the run");
    assert!(
        out.stdout.contains("rr::chat$alpha"),
        "the results are shown: {}{}",
        out.stdout,
        out.stderr
    );
    assert!(
        out.stderr.contains("rr--chat--beta"),
        "the broken file is named: {}",
        out.stderr
    );
    let after: Value = serde_json::from_str(&std::fs::read_to_string(&alpha).unwrap()).unwrap();
    assert!(
        after["interactions"][0]["verified_at"].is_string(),
        "alpha is stamped: {after}"
    );
    assert_eq!(std::fs::read_to_string(&beta).unwrap(), "{ broken");
}

/// An answer edited by hand no longer matches its seal and is never replayed: however the live
/// answer compares with it, it is not stamped verified, so the freshness gate does not call it
/// fresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_edited_by_hand_is_not_stamped_verified() {
    let (fake, dir) = recorded().await;
    let alpha = dir
        .path()
        .join("tests/cassettes/rr--chat--alpha/openai.json");
    let text = std::fs::read_to_string(&alpha).unwrap();
    assert!(text.contains("You said: Steady answer"), "{text}");
    std::fs::write(
        &alpha,
        text.replace("You said: Steady answer", "You said: Steady answer, edited"),
    )
    .unwrap();
    let args = rerun_words(
        &["--mark-verified", "-j", "1", "-E", "test(/alpha/)"],
        &fake,
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = llmreplay(dir.path(), &args);
    assert!(
        out.stderr
            .contains("edited by hand since it was sealed, left alone"),
        "{}{}",
        out.stdout,
        out.stderr
    );
    let after: Value = serde_json::from_str(&std::fs::read_to_string(&alpha).unwrap()).unwrap();
    let edited = after["interactions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i.to_string().contains("Steady answer, edited"))
        .expect("the edited answer is kept");
    assert!(edited.get("verified_at").is_none(), "{edited}");
}
