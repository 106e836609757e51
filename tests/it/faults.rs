//! Faults on demand, per test, through the real `cargo-llmreplay serve`: real clients
//! (async-openai with its own retries, reqwest, the official Python SDK) against recorded
//! answers, with faults registered by `llmreplay_runner::fault()` on the test's own base URL.

use crate::support::{http, run_sdk_script, sdk_python, FakeProvider, Serve};
use async_openai::config::OpenAIConfig;
use async_openai::types::chat::{
    ChatCompletionRequestUserMessageArgs, CreateChatCompletionRequestArgs,
};
use futures_util::StreamExt;
use runner_plugin::fault;
use serde_json::{json, Value};

const TEST: &str = "faults::retry$handles_a_429";

/// Records a chat answer and a streamed one for `TEST` (and one for another test), then
/// returns a replaying daemon: faults are tested offline, on recorded answers.
async fn recorded(dir: &std::path::Path) -> Serve {
    let mut fake = FakeProvider::start().await;
    let rec = Serve::recording(dir, &format!("openai={}", fake.url()));
    for (test, stream) in [(TEST, false), (TEST, true), ("faults::retry$other", false)] {
        let r = http()
            .post(format!("{}/openai/v1/chat/completions", rec.for_test(test)))
            .json(&chat_body(stream))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        r.bytes().await.unwrap();
    }
    assert!(rec.stop().status.success());
    fake.stop();
    Serve::replaying(dir)
}

/// The body async-openai sends for "Hello there" (no `stream` unless streaming).
fn chat_body(stream: bool) -> Value {
    let mut body =
        json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Hello there"}]});
    if stream {
        body["stream"] = json!(true);
    }
    body
}

fn openai(base: &str) -> async_openai::Client<OpenAIConfig> {
    async_openai::Client::with_config(
        OpenAIConfig::new()
            .with_api_base(format!("{base}/openai/v1"))
            .with_api_key("sk-test"),
    )
}

fn outcomes(journal: &Value) -> Vec<(String, String)> {
    journal
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["test"].as_str().unwrap().to_string(),
                l["outcome"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// A 429 with `retry-after`: async-openai retries it by itself and its retry gets the recording
/// the first attempt would have got; reqwest sees the header; the fault touches no other test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_with_retry_after_then_the_recorded_answer() {
    let dir = tempfile::tempdir().unwrap();
    let serve = recorded(dir.path()).await;
    let base = serve.for_test(TEST);
    let id = fault()
        .provider("openai")
        .status(429)
        .header("retry-after", "0")
        .register_at(&base)
        .unwrap();
    assert!(id > 0);
    let request = CreateChatCompletionRequestArgs::default()
        .model("gpt-4o-mini")
        .messages(vec![ChatCompletionRequestUserMessageArgs::default()
            .content("Hello there")
            .build()
            .unwrap()
            .into()])
        .build()
        .unwrap();
    // async-openai retries a 429 by itself; the retry gets what the first attempt would have.
    let answer = openai(&base).chat().create(request.clone()).await.unwrap();
    assert_eq!(
        answer.choices[0].message.content.as_deref(),
        Some("You said: Hello there")
    );
    fault()
        .status(429)
        .header("retry-after", "1")
        .register_at(&base)
        .unwrap();
    let limited = http()
        .post(format!("{base}/openai/v1/chat/completions"))
        .json(&chat_body(false))
        .send()
        .await
        .unwrap();
    assert_eq!(limited.status(), 429);
    assert_eq!(limited.headers()["retry-after"], "1");
    let other = openai(&serve.for_test("faults::retry$other"))
        .chat()
        .create(request)
        .await
        .unwrap();
    assert!(other.choices[0].message.content.is_some());
    let journal = serve.journal().await;
    assert_eq!(
        outcomes(&journal),
        [
            (TEST.to_string(), "fault".to_string()),
            (TEST.to_string(), "hit".to_string()),
            (TEST.to_string(), "fault".to_string()),
            ("faults::retry$other".to_string(), "hit".to_string()),
        ]
    );
    assert_eq!(journal[0]["status"], 429);
    let stopped = serve.stop();
    assert!(
        stopped.stderr.contains("2 answered by faults"),
        "{}",
        stopped.stderr
    );
}

/// The chat request of `chat_body(stream)` to `url`.
async fn ask(url: &str, stream: bool) -> reqwest::Response {
    http()
        .post(url)
        .json(&chat_body(stream))
        .send()
        .await
        .unwrap()
}

/// A 500 reaches the client in the provider's shape; a stream cut after two chunks is an error,
/// not a short answer; a malformed body fails to parse; a delay delays and then answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statuses_cut_streams_malformed_bodies_and_delays() {
    let dir = tempfile::tempdir().unwrap();
    let serve = recorded(dir.path()).await;
    let base = serve.for_test(TEST);
    let url = format!("{base}/openai/v1/chat/completions");

    fault().status(500).register_at(&base).unwrap();
    let r = ask(&url, false).await;
    assert_eq!(r.status(), 500);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "llmreplay_fault", "{body}");

    fault().disconnect_after(2).register_at(&base).unwrap();
    let mut stream = ask(&url, true).await.bytes_stream();
    let mut got = Vec::new();
    let mut broke = false;
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(c) => got.extend_from_slice(&c),
            Err(_) => {
                broke = true;
                break;
            }
        }
    }
    assert!(
        broke,
        "the client sees the cut: {}",
        String::from_utf8_lossy(&got)
    );
    assert_eq!(String::from_utf8_lossy(&got).matches("data: ").count(), 2);

    fault().malformed().register_at(&base).unwrap();
    let r = ask(&url, false).await;
    assert_eq!(r.status(), 200);
    assert!(r.json::<Value>().await.is_err(), "not JSON");

    fault().delay_ms(300).register_at(&base).unwrap();
    let started = std::time::Instant::now();
    let r = ask(&url, false).await;
    assert_eq!(r.status(), 200);
    assert!(started.elapsed() >= std::time::Duration::from_millis(300));
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        body["choices"][0]["message"]["content"],
        "You said: Hello there"
    );

    // The faults did not move the sequence: the stream's recording is still the next one.
    let r = ask(&url, true).await;
    assert!(r.text().await.unwrap().ends_with("data: [DONE]\n\n"));
    fault().always().status(503).register_at(&base).unwrap();
    let stats = serve.control("stats").await;
    assert_eq!(stats["faults"], 3, "delays answer as usual: {stats}");
    let clear = http()
        .delete(format!("{base}/__llmreplay/faults"))
        .send()
        .await
        .unwrap();
    assert_eq!(clear.json::<Value>().await.unwrap()["cleared"], 5);
    serve.stop();
}

/// Bad faults get a 400 that says what is wrong.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_faults_are_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let serve = Serve::replaying(dir.path());
    let url = format!("{}/__llmreplay/faults", serve.for_test(TEST));
    for (body, says) in [
        (json!({"explode": true}), "unknown field `explode`"),
        (json!({"status": 429, "delay_ms": 5}), "one kind at a time"),
        (json!({"status": 429, "times": -2}), "\"times\": -2"),
        (json!({"disconnect": {"after_chunks": -1}}), "is negative"),
        (
            json!({"status": 429, "provider": "nobody"}),
            "no provider named \"nobody\"",
        ),
        (json!({}), "needs one of"),
    ] {
        let r = http().post(&url).json(&body).send().await.unwrap();
        assert_eq!(r.status(), 400, "{body}");
        let text = r.text().await.unwrap();
        assert!(text.contains(says), "{body}: {text}");
    }
    // Which test a fault is for is decided as for every other request: a percent-encoded
    // X-Test-Id is decoded, and a fault that names no test is `default`'s, as a request that
    // names none is.
    let other = http()
        .post(format!("{}/__llmreplay/faults", serve.base))
        .header("x-test-id", "faults%3A%3Aretry%24other")
        .json(&json!({"status": 503}))
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 201);
    let faulted = http()
        .post(format!(
            "{}/openai/v1/chat/completions",
            serve.for_test("faults::retry$other")
        ))
        .json(&chat_body(false))
        .send()
        .await
        .unwrap();
    assert_eq!(faulted.status(), 503, "the decoded test got its fault");
    let root = http()
        .post(format!("{}/__llmreplay/faults", serve.base))
        .json(&json!({"status": 500}))
        .send()
        .await
        .unwrap();
    assert_eq!(root.status(), 201);
    let unnamed = http()
        .post(format!("{}/openai/v1/chat/completions", serve.base))
        .json(&chat_body(false))
        .send()
        .await
        .unwrap();
    assert_eq!(unnamed.status(), 500, "default's fault");
    serve.stop();
}

/// The official Python SDK with `max_retries=2`: one 429 with `retry-after-ms`, then the
/// replayed answer; one fault counted for that test, none for the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_retries_a_429_and_gets_the_replayed_answer() {
    let Some(python) = sdk_python("openai") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let serve = recorded(dir.path()).await;
    let base = serve.for_test(TEST);
    fault()
        .status(429)
        .header("retry-after-ms", "10")
        .register_at(&base)
        .unwrap();
    let base_url = format!("{base}/openai/v1");
    let env = [
        ("OPENAI_BASE_URL", base_url.as_str()),
        ("OPENAI_API_KEY", "sk-test"),
    ];
    let out = run_sdk_script(&python, "openai_retry.py", &env);
    assert_eq!(out.trim(), "You said: Hello there");
    let journal = serve.journal().await;
    let faults: Vec<_> = outcomes(&journal)
        .into_iter()
        .filter(|(_, o)| o == "fault")
        .collect();
    assert_eq!(faults, [(TEST.to_string(), "fault".to_string())]);
    serve.stop();
}

/// `[[faults]]` in `llmreplay.toml`, with a filterset that selects one test of a suite running
/// in parallel under `cargo llmreplay test`: that test alone gets the fault, and the report
/// counts it for that test alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declared_faults_reach_only_the_tests_their_filterset_selects() {
    let fake = FakeProvider::start().await;
    let sample = crate::support::Sample::new();
    sample.record_all(&fake);
    std::fs::write(
        sample.root.join("llmreplay.toml"),
        "[[faults]]\ntest = \"test(=answers_hello)\"\nstatus = 500\n",
    )
    .unwrap();
    let run = sample.run(&["-E", "not test(=retries_once)"], &[("CI", "true")]);
    assert_ne!(
        run.code,
        Some(0),
        "answers_hello fails on its 500: {}",
        run.stderr
    );
    assert_eq!(
        run.report["faults"],
        json!({"sample::chat$answers_hello": 1}),
        "{}",
        run.report
    );
    assert_eq!(run.report["counts"]["faults"], 1);
    assert_eq!(run.report["missing"], json!([]), "{}", run.report);
    let failed: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.contains("FAIL ["))
        .collect();
    assert!(!failed.is_empty(), "{}", run.stderr);
    assert!(
        failed.iter().all(|l| l.contains("answers_hello")),
        "only the selected test fails: {failed:?}"
    );

    std::fs::write(
        sample.root.join("llmreplay.toml"),
        "[[faults]]\ntest = \"test(=answers_hello\"\nstatus = 500\n",
    )
    .unwrap();
    let bad = sample.run(&[], &[("CI", "true")]);
    assert_ne!(bad.code, Some(0));
    assert!(bad.stderr.contains("[[faults]] #1"), "{}", bad.stderr);
}

/// README's "from any language" form, `POST $LLMREPLAY_BASE_URL/__llmreplay/faults` with no test
/// named, in the default replay run (Linux, no target runner, one base URL for the run): the
/// fault is the test's whose process posted it, as its requests are.
#[test]
fn a_fault_posted_to_the_run_base_url_is_the_posting_tests_in_the_default_replay() {
    use crate::support::{edit_sample_tests, Sample};
    let sample = Sample::new();
    sample.own_build("0.1.1-own-fault");
    edit_sample_tests(&sample, |t| {
        t + r##"
#[test]
fn posts_its_own_fault() {
    let base = std::env::var("LLMREPLAY_BASE_URL").unwrap();
    let (status, body) =
        sample::post(&format!("{base}/__llmreplay/faults"), &[], r#"{"provider":"openai","status":503}"#);
    assert_eq!(status, 201, "{body}");
    let url = format!("{}/chat/completions", openai_base());
    let ask = r#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Faulted"}]}"#;
    let (status, body) = sample::post(&url, &[], ask);
    assert_eq!(status, 503, "{body}");
}
"##
    });
    let run = sample.run(&["-E", "test(=posts_its_own_fault)"], &[("CI", "true")]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(
        run.report["faults"]["sample::chat$posts_its_own_fault"], 1,
        "{}",
        run.report
    );
}
