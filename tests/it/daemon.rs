//! End-to-end tests of the daemon: the real `cargo-llmreplay serve` binary, real HTTP on
//! 127.0.0.1, real clients (async-openai, reqwest), and a loopback fake provider upstream.

use crate::support::{all_files, read_json, FakeProvider, Serve};
use async_openai::config::OpenAIConfig;
use async_openai::types::chat::{
    ChatCompletionRequestUserMessageArgs, CreateChatCompletionRequest,
    CreateChatCompletionRequestArgs,
};
use futures_util::StreamExt;
use serde_json::{json, Value};
use std::path::Path;

/// A path, its headers and its JSON body.
type Call = (&'static str, Vec<(&'static str, &'static str)>, Value);

const SECRET: &str = "sk-test-SECRET-must-never-be-written";

/// A client, a temp dir, a fake provider, and the `--upstream openai=URL` that points at it.
async fn setup() -> (reqwest::Client, tempfile::TempDir, FakeProvider, String) {
    let fake = FakeProvider::start().await;
    let upstream = format!("openai={}", fake.url());
    (init(), tempfile::tempdir().unwrap(), fake, upstream)
}

fn init() -> reqwest::Client {
    crate::support::http()
}

fn chat(prompt: &str) -> CreateChatCompletionRequest {
    CreateChatCompletionRequestArgs::default()
        .model("gpt-4o-mini")
        .messages(vec![ChatCompletionRequestUserMessageArgs::default()
            .content(prompt)
            .build()
            .unwrap()
            .into()])
        .build()
        .unwrap()
}

fn openai(base: &str) -> async_openai::Client<OpenAIConfig> {
    async_openai::Client::with_config(
        OpenAIConfig::new()
            .with_api_base(format!("{base}/openai/v1"))
            .with_api_key(SECRET),
    )
}

/// One exchange over raw HTTP: status, content type and the exact body bytes.
async fn post(
    http: &reqwest::Client,
    url: &str,
    headers: &[(&str, &str)],
    body: Value,
) -> (u16, String, Vec<u8>) {
    let mut req = http.post(url).json(&body);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let ct = resp
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    (status, ct, resp.bytes().await.unwrap().to_vec())
}

async fn stream_texts(client: &async_openai::Client<OpenAIConfig>, prompt: &str) -> Vec<String> {
    let mut req = chat(prompt);
    req.stream = Some(true);
    let mut stream = client.chat().create_stream(req).await.unwrap();
    let mut out = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.unwrap();
        out.push(
            chunk
                .choices
                .first()
                .and_then(|c| c.delta.content.clone())
                .unwrap_or_default(),
        );
    }
    out
}

fn assert_no_secret(dir: &Path, secrets: &[&str]) {
    let files = all_files(dir);
    assert!(
        !files.is_empty(),
        "something was recorded in {}",
        dir.display()
    );
    for (path, text) in files {
        for s in secrets {
            assert!(
                !text.contains(s),
                "{} contains the secret {s:?}",
                path.display()
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_openai_records_then_replays_offline_with_the_same_answers_and_chunks() {
    let (http, dir, mut fake, _) = setup().await;
    let upstream = format!("openai={}", fake.url());
    let test = "my-crate::chat$streams_reply";

    let rec = Serve::start(
        dir.path(),
        &[
            "--mode",
            "record",
            "--cassette-dir",
            "cas",
            "--upstream",
            &upstream,
        ],
    );
    let client = openai(&rec.for_test(test));
    let answer = client.chat().create(chat("Hello there")).await.unwrap();
    let recorded_text = answer.choices[0].message.content.clone().unwrap();
    let recorded_chunks = stream_texts(&client, "Tell me a story").await;
    let (_, _, recorded_raw) = post(&http, &format!("{}/openai/v1/chat/completions", rec.for_test(test)), &[("authorization", &format!("Bearer {SECRET}"))], json!({"model": "gpt-4o-mini", "stream": true, "messages": [{"role": "user", "content": "raw bytes"}]})).await;
    let stopped = rec.stop();
    assert!(stopped.status.success(), "{}", stopped.stderr);
    assert!(stopped.stderr.contains("3 recorded"), "{}", stopped.stderr);
    assert_eq!(recorded_text, "You said: Hello there");
    assert_eq!(recorded_chunks.concat(), "You said: Tell me a story");
    // The daemon forwarded the key upstream...
    assert!(fake.received().iter().all(|r| r
        .headers
        .iter()
        .any(|(k, v)| k == "authorization" && v.contains(SECRET))));
    assert!(fake.received().iter().all(|r| r
        .headers
        .iter()
        .any(|(k, v)| k == "accept-encoding" && v == "identity")));
    // ...and wrote it nowhere, nor the organisation or cookie it was sent back.
    assert_no_secret(dir.path(), &[SECRET, "org-secret-team", "SECRETCOOKIE"]);

    let cassette = dir
        .path()
        .join("cas/my-crate--chat--streams_reply/openai.json");
    let c = read_json(&cassette);
    assert_eq!(c["test"], test);
    assert_eq!(c["interactions"].as_array().unwrap().len(), 3);
    assert_eq!(
        c["interactions"][0]["response"]["body_layout"],
        "pretty_newline"
    );
    assert_eq!(
        c["interactions"][0]["summary"]["text"],
        "You said: Hello there"
    );
    assert_eq!(
        c["interactions"][1]["summary"]["text"],
        "You said: Tell me a story"
    );
    assert_eq!(
        c["interactions"][1]["response"]["chunks"]
            .as_array()
            .unwrap()
            .len(),
        8,
        "6 words, a stop chunk and [DONE]"
    );
    assert!(std::fs::read_to_string(&cassette).unwrap().ends_with("}\n"));

    fake.stop();
    let seen = fake.received().len();
    let replay = Serve::start(
        dir.path(),
        &["--cassette-dir", "cas", "--upstream", &upstream],
    );
    let client = openai(&replay.for_test(test));
    let answer = client.chat().create(chat("Hello there")).await.unwrap();
    assert_eq!(
        answer.choices[0].message.content.as_deref(),
        Some(recorded_text.as_str())
    );
    assert_eq!(answer.id, "chatcmpl-1", "ids replay as recorded");
    assert_eq!(
        stream_texts(&client, "Tell me a story").await,
        recorded_chunks
    );
    let (status, ct, raw) = post(&http, &format!("{}/openai/v1/chat/completions", replay.for_test(test)), &[], json!({"model": "gpt-4o-mini", "stream": true, "messages": [{"role": "user", "content": "raw bytes"}]})).await;
    assert_eq!((status, ct.as_str()), (200, "text/event-stream"));
    assert_eq!(
        String::from_utf8(raw).unwrap(),
        String::from_utf8(recorded_raw).unwrap(),
        "byte for byte"
    );
    let stopped = replay.stop();
    assert!(
        stopped.stderr.contains(": 3 replayed\n"),
        "{}",
        stopped.stderr
    );
    assert_eq!(fake.received().len(), seen, "replay never reached upstream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_provider_wire_format_replays_byte_for_byte() {
    let (http, dir, mut fake, _) = setup().await;
    let ups: Vec<String> = ["openai", "anthropic", "gemini", "ollama"]
        .iter()
        .map(|p| format!("{p}={}", fake.url()))
        .collect();
    let mut args = vec!["--cassette-dir", "cas", "--mode", "record-missing"];
    for u in &ups {
        args.extend(["--upstream", u.as_str()]);
    }
    let calls: Vec<Call> = vec![
        ("/openai/v1/chat/completions", vec![], json!({"model": "m", "messages": [{"role": "user", "content": "plain"}]})),
        ("/openai/v1/responses", vec![], json!({"model": "m", "input": "respond"})),
        ("/openai/v1/embeddings", vec![], json!({"model": "e", "input": "embed me"})),
        ("/anthropic/v1/messages", vec![("x-api-key", SECRET), ("anthropic-version", "2023-06-01")], json!({"model": "claude", "max_tokens": 10, "stream": true, "messages": [{"role": "user", "content": "stream it"}]})),
        ("/anthropic/v1/messages", vec![("x-api-key", SECRET)], json!({"model": "claude", "max_tokens": 10, "messages": [{"role": "user", "content": "whole"}]})),
        ("/gemini/v1beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse&key=sk-test-SECRET-must-never-be-written", vec![], json!({"contents": [{"role": "user", "parts": [{"text": "gem stream"}]}]})),
        ("/gemini/v1beta/models/gemini-2.0-flash:generateContent", vec![("x-goog-api-key", SECRET)], json!({"contents": [{"role": "user", "parts": [{"text": "gem"}]}]})),
        ("/ollama/api/chat", vec![], json!({"model": "llama3", "messages": [{"role": "user", "content": "ndjson"}]})),
        ("/ollama/api/generate", vec![], json!({"model": "llama3", "prompt": "gen", "stream": false})),
        ("/ollama/api/embed", vec![], json!({"model": "llama3", "input": "vec"})),
    ];
    let test = "crate::providers$all";
    let rec = Serve::start(dir.path(), &args);
    let mut recorded = Vec::new();
    for (path, headers, body) in &calls {
        let r = post(
            &http,
            &format!("{}{path}", rec.for_test(test)),
            headers,
            body.clone(),
        )
        .await;
        assert_eq!(r.0, 200, "{path}: {}", String::from_utf8_lossy(&r.2));
        recorded.push(r);
    }
    assert!(rec.stop().stderr.contains("10 recorded"));
    assert_no_secret(dir.path(), &[SECRET]);
    let slug = dir.path().join("cas/crate--providers--all");
    let gemini = read_json(&slug.join("gemini.json"));
    assert_eq!(
        gemini["interactions"][0]["request"]["query"], "alt=sse",
        "the key parameter is dropped"
    );
    assert_eq!(
        gemini["interactions"][0]["summary"]["text"],
        "You said: gem stream"
    );
    let anthropic = read_json(&slug.join("anthropic.json"));
    assert_eq!(
        anthropic["interactions"][0]["response"]["chunks"][0]["event"],
        "message_start"
    );
    assert_eq!(
        anthropic["interactions"][0]["summary"]["text"],
        "You said: stream it"
    );
    let ollama = read_json(&slug.join("ollama.json"));
    assert_eq!(ollama["interactions"][0]["response"]["stream"], "ndjson");
    assert_eq!(
        ollama["interactions"][0]["summary"]["text"],
        "You said: ndjson"
    );

    fake.stop();
    let replay = Serve::start(dir.path(), &["--cassette-dir", "cas"]);
    for ((path, headers, body), expected) in calls.iter().zip(&recorded) {
        let got = post(
            &http,
            &format!("{}{path}", replay.for_test(test)),
            headers,
            body.clone(),
        )
        .await;
        assert_eq!(got.0, expected.0, "{path}");
        assert_eq!(got.1, expected.1, "{path}");
        assert_eq!(
            String::from_utf8_lossy(&got.2),
            String::from_utf8_lossy(&expected.2),
            "{path}"
        );
    }
    assert!(replay.stop().stderr.contains(": 10 replayed\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_identical_requests_replay_in_recorded_order() {
    let (http, dir, mut fake, up) = setup().await;
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "COUNT"}]});
    let rec = Serve::start(
        dir.path(),
        &["--cassette-dir", "c", "--mode", "record", "--upstream", &up],
    );
    let url = format!("{}/openai/v1/chat/completions", rec.base);
    let mut recorded = Vec::new();
    for _ in 0..3 {
        recorded.push(
            post(&http, &url, &[("x-test-id", "seq test")], body.clone())
                .await
                .2,
        );
    }
    rec.stop();
    fake.stop();
    let replay = Serve::start(dir.path(), &["--cassette-dir", "c"]);
    let url = format!("{}/v1/chat/completions", replay.base); // no provider prefix: a known path
    for (i, expected) in recorded.iter().enumerate() {
        let got = post(&http, &url, &[("x-test-id", "seq test")], body.clone()).await;
        assert_eq!(got.2, *expected, "call {i}");
        assert!(String::from_utf8_lossy(&got.2).contains(&format!("(call {})", i + 1)));
    }
    let fourth = post(&http, &url, &[("x-test-id", "seq test")], body.clone()).await;
    assert_eq!(fourth.0, 404);
    assert!(
        String::from_utf8_lossy(&fourth.2).contains("call #4"),
        "{}",
        String::from_utf8_lossy(&fourth.2)
    );
    // A retried attempt starts its sequence again.
    let begin = http
        .post(format!("{}/__llmreplay/begin?test=seq%20test", replay.base))
        .send()
        .await
        .unwrap();
    assert_eq!(begin.status(), 200);
    assert_eq!(
        post(&http, &url, &[("x-test-id", "seq test")], body.clone())
            .await
            .2,
        recorded[0]
    );
    assert!(
        dir.path().join("c/seq-test/openai.json").exists(),
        "aimock's slug for an X-Test-Id"
    );
    replay.stop();
    // With --allow-repeats, calls past the recordings get the last one.
    let repeats = Serve::start(dir.path(), &["--cassette-dir", "c", "--allow-repeats"]);
    let url = format!("{}/v1/chat/completions", repeats.base);
    for expected in [&recorded[0], &recorded[1], &recorded[2], &recorded[2]] {
        assert_eq!(
            post(&http, &url, &[("x-test-id", "seq test")], body.clone())
                .await
                .2,
            *expected
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_daemons_recording_into_one_cassette_lose_nothing() {
    let (http, dir, _fake, up) = setup().await;
    let (a, b) = (
        Serve::recording(dir.path(), &up),
        Serve::recording(dir.path(), &up),
    );
    let test = "crate$shared";
    let mut tasks = Vec::new();
    for (d, daemon) in [&a, &b].into_iter().enumerate() {
        for i in 0..15 {
            let http = http.clone();
            let url = format!("{}/openai/v1/chat/completions", daemon.for_test(test));
            tasks.push(tokio::spawn(async move {
                let body = json!({"model": "m", "messages": [{"role": "user", "content": format!("daemon {d} prompt {i}")}]});
                post(&http, &url, &[], body).await.0
            }));
        }
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), 200);
    }
    a.stop();
    b.stop();
    let c = read_json(&dir.path().join("c/crate--shared/openai.json"));
    let mut prompts: Vec<String> = c["interactions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            i["request"]["body"]["messages"][0]["content"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    prompts.sort();
    prompts.dedup();
    assert_eq!(
        prompts.len(),
        30,
        "every interaction of both daemons is in the file"
    );
    assert!(
        all_files(&dir.path().join("c"))
            .iter()
            .all(|(p, _)| p.extension().is_some_and(|e| e == "json")),
        "no temp files left"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_cassette_is_named_with_its_line_and_left_untouched() {
    let (http, dir, fake, _) = setup().await;
    let folder = dir.path().join("c/crate--broken");
    std::fs::create_dir_all(&folder).unwrap();
    let text =
        "{\n  \"llmreplay\": 1,\n  \"test\": \"crate$broken\",\n  \"interactions\": [ oops ]\n}\n";
    std::fs::write(folder.join("openai.json"), text).unwrap();
    let up = format!("openai={}", fake.url());
    for mode in ["replay", "record-missing", "record"] {
        let s = Serve::start(
            dir.path(),
            &["--cassette-dir", "c", "--mode", mode, "--upstream", &up],
        );
        let body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        let (status, _, out) = post(
            &http,
            &format!("{}/openai/v1/chat/completions", s.for_test("crate$broken")),
            &[],
            body,
        )
        .await;
        let out = String::from_utf8_lossy(&out);
        assert_eq!(status, 400, "{mode}: {out}");
        assert!(
            out.contains("crate--broken/openai.json:4:"),
            "{mode}: {out}"
        );
        assert!(out.contains("left untouched"), "{out}");
        s.stop();
        assert_eq!(
            std::fs::read_to_string(folder.join("openai.json")).unwrap(),
            text,
            "{mode}"
        );
    }
    assert!(
        fake.received().is_empty(),
        "nothing was sent upstream for a test whose cassette is broken"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_miss_names_the_test_the_differing_field_and_the_command() {
    let (_, dir, fake, up) = setup().await;
    let test = "my-crate::chat$temperature";
    let rec = Serve::start(
        dir.path(),
        &["--cassette-dir", "c", "--mode", "record", "--upstream", &up],
    );
    let mut req = chat("What is the weather like on Mars today?");
    req.temperature = Some(0.25);
    openai(&rec.for_test(test))
        .chat()
        .create(req.clone())
        .await
        .unwrap();
    rec.stop();

    let replay = Serve::start(dir.path(), &["--cassette-dir", "c"]);
    req.temperature = Some(0.75);
    let before = fake.received().len();
    let err = openai(&replay.for_test(test))
        .chat()
        .create(req)
        .await
        .unwrap_err();
    let msg = match err {
        async_openai::error::OpenAIError::ApiError(e) => e.api_error.message,
        other => panic!("expected the API error shape, got {other:?}"),
    };
    assert!(msg.contains("test: my-crate::chat$temperature"), "{msg}");
    assert!(
        msg.contains("openai POST /v1/chat/completions, model gpt-4o-mini"),
        "{msg}"
    );
    assert!(
        msg.contains("What is the weather like on Mars today?"),
        "{msg}"
    );
    assert!(
        msg.contains("what differs (recorded -> now):\n    /body/temperature (semantic: its value changed): 0.25 -> 0.75\n"),
        "the recorded value beside the new one: {msg}"
    );
    assert!(
        msg.contains("record it again (its old recording is replaced): cargo llmreplay test --record -E 'test(=temperature)'"),
        "{msg}"
    );
    assert!(
        msg.contains("cargo llmreplay test --record-missing -E 'test(=temperature)'"),
        "{msg}"
    );
    assert_eq!(
        fake.received().len(),
        before,
        "replay mode never goes upstream"
    );
    let journal = replay.journal().await;
    assert_eq!(journal[0]["outcome"], "miss");
    assert_eq!(journal[0]["closest"], json!(["/body/temperature"]));
    assert_eq!(
        journal[0]["values"],
        json!([{"field": "/body/temperature", "recorded": 0.25, "now": 0.75, "class": "semantic", "why": "its value changed"}])
    );
    assert_eq!(journal[0]["class"], "semantic");
    assert_eq!(journal[0]["same_call"], true);
    let stopped = replay.stop();
    assert_eq!(stopped.status.code(), Some(1), "a run with misses fails");
    assert!(stopped.stderr.contains("1 missing"), "{}", stopped.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limits_errors_and_broken_streams_reach_the_client_but_are_not_saved() {
    let (http, dir, _fake, up) = setup().await;
    let s = Serve::start(
        dir.path(),
        &["--cassette-dir", "c", "--mode", "record", "--upstream", &up],
    );
    let url = format!("{}/openai/v1/chat/completions", s.for_test("crate$errors"));
    for (prompt, status) in [("RATE429", 429), ("FAIL500", 500)] {
        let got = post(
            &http,
            &url,
            &[],
            json!({"model": "m", "messages": [{"role": "user", "content": prompt}]}),
        )
        .await;
        assert_eq!(got.0, status);
        assert!(String::from_utf8_lossy(&got.2).contains(&format!("fake {status}")));
    }
    let resp = http
        .post(&url)
        .json(&json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "BREAK please"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(
        resp.bytes().await.is_err(),
        "the client sees the stream break"
    );
    let stopped = s.stop();
    assert!(
        stopped.stderr.contains("2 passed through") && stopped.stderr.contains("1 broken"),
        "{}",
        stopped.stderr
    );
    assert!(
        !dir.path().join("c/crate--errors/openai.json").exists(),
        "nothing saved"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn re_recording_an_unchanged_answer_changes_no_byte_and_a_changed_one_replaces_in_place() {
    let (http, dir, fake, up) = setup().await;
    let send = |base: String, prompt: &'static str| {
        let http = http.clone();
        async move {
            post(
                &http,
                &format!("{base}/openai/v1/chat/completions"),
                &[],
                json!({"model": "m", "messages": [{"role": "user", "content": prompt}]}),
            )
            .await
        }
    };
    let s = Serve::recording(dir.path(), &up);
    send(s.for_test("crate$rr"), "first").await;
    send(s.for_test("crate$rr"), "second").await;
    s.stop();
    let path = dir.path().join("c/crate--rr/openai.json");
    let original = std::fs::read(&path).unwrap();

    // New ids, timestamps, fingerprints and request ids: the file stays as it was.
    let s = Serve::recording(dir.path(), &up);
    send(s.for_test("crate$rr"), "first").await;
    send(s.for_test("crate$rr"), "second").await;
    assert!(s.stop().stderr.contains(": 2 re-recorded unchanged\n"));
    assert_eq!(std::fs::read(&path).unwrap(), original);

    // A new answer to the first prompt replaces that entry and nothing else.
    *fake.state.suffix.lock().unwrap() = " (new model)".into();
    let s = Serve::recording(dir.path(), &up);
    send(s.for_test("crate$rr"), "first").await;
    assert!(s.stop().stderr.contains("1 re-recorded"));
    let (old, new) = (
        serde_json::from_slice::<Value>(&original).unwrap(),
        read_json(&path),
    );
    assert_eq!(
        new["interactions"][0]["summary"]["text"],
        "You said: first (new model)"
    );
    assert_eq!(new["interactions"][1], old["interactions"][1]);
    assert_eq!(new["interactions"].as_array().unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn normalisation_rules_apply_and_a_bad_rule_fails_at_start_up() {
    let (http, dir, mut fake, _) = setup().await;
    std::fs::write(
        dir.path().join("llmreplay.toml"),
        format!(
            "cassette_dir = \"c\"\n[providers.gateway]\nupstream = \"{}\"\n[match]\nignore = [\"/metadata/request_id\"]\nreplace = [{{ pattern = '\\d{{4}}-\\d{{2}}-\\d{{2}}T[0-9:]+Z', with = \"<TIME>\" }}]\n[redact]\nheaders = [\"x-request-id\"]\n",
            fake.url()
        ),
    )
    .unwrap();
    let body = |ts: &str, id: u32| json!({"model": "m", "metadata": {"request_id": id}, "messages": [{"role": "user", "content": format!("It is {ts} now")}]});
    let rec = Serve::start(dir.path(), &["--mode", "record"]);
    let url = format!("{}/gateway/v1/chat/completions", rec.for_test("crate$norm"));
    let recorded = post(&http, &url, &[], body("2026-01-01T10:00:00Z", 1)).await;
    rec.stop();
    let c = read_json(&dir.path().join("c/crate--norm/gateway.json"));
    assert_eq!(
        c["interactions"][0]["request"]["body"]["messages"][0]["content"],
        "It is <TIME> now"
    );
    assert!(c["interactions"][0]["request"]["body"]["metadata"]
        .get("request_id")
        .is_none());
    assert!(
        c["interactions"][0]["response"]["headers"]
            .get("x-request-id")
            .is_none(),
        "[redact] headers"
    );
    fake.stop();
    let replay = Serve::start(dir.path(), &[]);
    let url = format!(
        "{}/gateway/v1/chat/completions",
        replay.for_test("crate$norm")
    );
    let got = post(&http, &url, &[], body("2027-12-31T23:59:59Z", 2)).await;
    assert_eq!((got.0, &got.2), (200, &recorded.2));
    replay.stop();

    std::fs::write(
        dir.path().join("llmreplay.toml"),
        "[match]\nreplace = [{ pattern = \"([a-z\", with = \"x\" }]\n",
    )
    .unwrap();
    let err = Serve::try_start(dir.path(), &[], &[])
        .err()
        .expect("a bad rule stops start-up");
    assert!(
        err.contains("llmreplay.toml") && err.contains("pattern \"([a-z\""),
        "{err}"
    );
    std::fs::write(
        dir.path().join("llmreplay.toml"),
        "[match]\nignore = [\"metadata.id\"]\n",
    )
    .unwrap();
    let err = Serve::try_start(dir.path(), &[], &[]).err().unwrap();
    assert!(
        err.contains("\"metadata.id\"") && err.contains("starts with '/'"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn realtime_replays_no_chunk_before_its_recorded_time() {
    let (http, dir, fake, _) = setup().await;
    *fake.state.chunk_gap.lock().unwrap() = std::time::Duration::from_millis(60);
    let up = format!("openai={}", fake.url());
    let body =
        json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "slow"}]});
    let rec = Serve::start(
        dir.path(),
        &["--cassette-dir", "c", "--mode", "record", "--upstream", &up],
    );
    let url = format!("{}/openai/v1/chat/completions", rec.for_test("crate$pace"));
    post(&http, &url, &[], body.clone()).await;
    rec.stop();
    let c = read_json(&dir.path().join("c/crate--pace/openai.json"));
    let at: Vec<u64> = c["interactions"][0]["response"]["chunks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["at_ms"].as_u64().unwrap())
        .collect();
    let span = at.last().unwrap() - at.first().unwrap();
    assert!(span >= 60 * (at.len() as u64 - 2), "recorded gaps {at:?}");

    let s = Serve::start(dir.path(), &["--cassette-dir", "c", "--realtime"]);
    let url = format!("{}/openai/v1/chat/completions", s.for_test("crate$pace"));
    // The clock starts before the request leaves, so the daemon's own clock starts later.
    let start = std::time::Instant::now();
    let resp = http.post(&url).json(&body).send().await.unwrap();
    let mut stream = resp.bytes_stream();
    let mut arrivals = Vec::new();
    while let Some(chunk) = stream.next().await {
        chunk.unwrap();
        arrivals.push(start.elapsed().as_millis() as u64);
    }
    // A lower bound only: no chunk arrives before its recorded time after the request.
    assert!(arrivals.len() >= 2, "{arrivals:?}");
    assert!(
        *arrivals.last().unwrap() >= *at.last().unwrap(),
        "replayed {arrivals:?}, recorded {at:?}"
    );
    s.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recording_forwards_each_chunk_as_it_arrives() {
    let (http, dir, fake, _) = setup().await;
    let release = std::sync::Arc::new(tokio::sync::Notify::new());
    *fake.state.hold.lock().unwrap() = Some(release.clone());
    let up = format!("openai={}", fake.url());
    let s = Serve::recording(dir.path(), &up);
    let url = format!("{}/openai/v1/chat/completions", s.for_test("crate$live"));
    let body = json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "first then the rest"}]});
    let mut stream = http
        .post(&url)
        .json(&body)
        .send()
        .await
        .unwrap()
        .bytes_stream();
    // The fake holds back everything after its first chunk: a daemon that buffered the stream
    // until its end could never deliver this.
    let first = tokio::time::timeout(std::time::Duration::from_secs(10), stream.next())
        .await
        .expect("the first chunk reaches the client while upstream is still streaming")
        .unwrap()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&first).contains("You "),
        "{first:?}"
    );
    assert!(
        !dir.path().join("c/crate--live/openai.json").exists(),
        "saved only at the end"
    );
    release.notify_one();
    let mut rest = Vec::new();
    while let Some(chunk) = stream.next().await {
        rest.extend_from_slice(&chunk.unwrap());
    }
    assert!(String::from_utf8_lossy(&rest).ends_with("data: [DONE]\n\n"));
    s.stop();
    let c = read_json(&dir.path().join("c/crate--live/openai.json"));
    assert_eq!(
        c["interactions"][0]["summary"]["text"],
        "You said: first then the rest"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_refuses_record_modes_under_ci_and_explains_bad_flags() {
    let dir = tempfile::tempdir().unwrap();
    let err = Serve::try_start(dir.path(), &["--mode", "record"], &[("CI", "true")])
        .err()
        .unwrap();
    assert!(
        err.contains("CI") && err.contains("--allow-record-in-ci"),
        "{err}"
    );
    let ok = Serve::try_start(
        dir.path(),
        &["--mode", "record", "--allow-record-in-ci"],
        &[("CI", "true")],
    );
    assert!(ok.is_ok());
    let err = Serve::try_start(
        dir.path(),
        &["--upstream", "nobody=http://127.0.0.1:1"],
        &[],
    )
    .err()
    .unwrap();
    assert!(err.contains("no provider named \"nobody\""), "{err}");
    let err = Serve::try_start(dir.path(), &["--mode", "sometimes"], &[])
        .err()
        .unwrap();
    assert!(err.contains("unknown mode"), "{err}");
    let err = Serve::try_start(
        dir.path(),
        &[],
        &[("LLMREPLAY_MODE", "record"), ("CI", "1")],
    )
    .err()
    .unwrap();
    assert!(err.contains("mode record calls real providers"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_unknown_routes() {
    let http = init();
    let dir = tempfile::tempdir().unwrap();
    let s = Serve::start(dir.path(), &[]);
    let health = s.control("health").await;
    assert_eq!(
        (health["status"].as_str(), health["mode"].as_str()),
        (Some("ok"), Some("replay"))
    );
    let r = http
        .post(format!("{}/nowhere/x", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert!(r.text().await.unwrap().contains("no provider for path"));
    let stopped = s.stop();
    assert!(stopped.status.success());
    assert!(stopped.stderr.contains("no requests"), "{}", stopped.stderr);
}

/// Passthrough: every request goes upstream, answers reach the client, and nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passthrough_forwards_everything_and_writes_nothing() {
    let (http, dir, fake, up) = setup().await;
    let s = Serve::start(
        dir.path(),
        &[
            "--cassette-dir",
            "c",
            "--mode",
            "passthrough",
            "--upstream",
            &up,
        ],
    );
    let url = format!("{}/openai/v1/chat/completions", s.for_test("crate$through"));
    for _ in 0..2 {
        let body =
            json!({"model": "m", "messages": [{"role": "user", "content": "Straight through"}]});
        let (status, _, answer) = post(&http, &url, &[], body).await;
        assert_eq!(status, 200);
        assert!(String::from_utf8_lossy(&answer).contains("You said: Straight through"));
    }
    let stopped = s.stop();
    assert!(stopped.status.success(), "{}", stopped.stderr);
    assert!(
        stopped.stderr.contains("2 passed through"),
        "{}",
        stopped.stderr
    );
    assert_eq!(fake.received().len(), 2, "both went upstream");
    assert!(!dir.path().join("c").exists(), "nothing written");
}
