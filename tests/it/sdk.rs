//! The official Python `openai` SDK (pinned in tests/sdk/requirements.txt) through the real
//! `cargo-llmreplay serve`, against the loopback fake provider: speech, transcription, images,
//! embeddings and a streamed Responses call record, then replay offline identically, twice, each
//! upload with its own multipart boundary.

use crate::support::{http, run_sdk_script, sdk_python, FakeProvider, Serve};
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_sdk_records_binary_multipart_and_streams_and_replays_them_offline() {
    let Some(python) = sdk_python("openai") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut fake = FakeProvider::start().await;
    let upstream = format!("openai={}", fake.url());
    let test = "sdk::openai$bodies";
    let rec = Serve::recording(dir.path(), &upstream);
    let base = format!("{}/openai/v1", rec.for_test(test));
    let env = [
        ("OPENAI_BASE_URL", base.as_str()),
        ("OPENAI_API_KEY", "sk-test"),
    ];
    let recorded = run_sdk_script(&python, "openai_bodies.py", &env);
    assert!(rec.stop().status.success());
    let seen: Value = serde_json::from_str(&recorded).unwrap();
    assert_eq!(seen["speech"]["bytes"], 6000, "{seen}");
    assert!(
        seen["transcription"]
            .as_str()
            .unwrap()
            .starts_with("Heard 4000 bytes"),
        "{seen}"
    );
    assert_eq!(
        seen["responses_text"], "You said: Stream this please",
        "{seen}"
    );
    assert_eq!(seen["responses_deltas"].as_array().unwrap().len(), 5);
    let uploads = fake
        .received()
        .into_iter()
        .filter(|r| r.path == "/v1/audio/transcriptions")
        .count();
    assert_eq!(uploads, 1);

    fake.stop();
    let replay = Serve::replaying(dir.path());
    let base = format!("{}/openai/v1", replay.for_test(test));
    let env = [
        ("OPENAI_BASE_URL", base.as_str()),
        ("OPENAI_API_KEY", "sk-test"),
    ];
    for _ in 0..2 {
        // Each run is the test's attempt from the start, as a retry under nextest is.
        let begin = format!(
            "{}/__llmreplay/begin?test=sdk%3A%3Aopenai%24bodies",
            replay.base
        );
        let status = http().post(begin).send().await.unwrap().status();
        assert_eq!(status, 200);
        assert_eq!(run_sdk_script(&python, "openai_bodies.py", &env), recorded);
    }
    let stopped = replay.stop();
    assert!(stopped.status.success(), "{}", stopped.stderr);
}

/// Azure OpenAI through the SDK's own AzureOpenAI client, pointed by `AZURE_OPENAI_ENDPOINT`
/// alone as the runner injects it: deployment paths, `api-key` and `api-version`; the key is
/// forwarded while recording and never written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdks_azure_client_records_and_replays_through_azure_openai_endpoint() {
    let Some(python) = sdk_python("openai") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut fake = FakeProvider::start().await;
    let upstream = format!("azure={}", fake.url());
    let test = "sdk::azure$deployments";
    const KEY: &str = "azure-key-SECRET-never-written";
    let rec = Serve::recording(dir.path(), &upstream);
    let endpoint = format!("{}/azure", rec.for_test(test));
    let env = [
        ("AZURE", "1"),
        ("AZURE_OPENAI_ENDPOINT", endpoint.as_str()),
        ("AZURE_OPENAI_API_KEY", KEY),
        ("MODEL", "my-4o"),
    ];
    let recorded = run_sdk_script(&python, "openai_bodies.py", &env);
    assert!(rec.stop().status.success());
    let seen: Value = serde_json::from_str(&recorded).unwrap();
    assert_eq!(seen["speech"]["bytes"], 6000, "{seen}");
    let sent = fake.received();
    assert!(
        sent.iter()
            .all(|r| r.path.starts_with("/openai/deployments/")),
        "{sent:?}"
    );
    assert!(sent
        .iter()
        .all(|r| r.headers.iter().any(|(k, v)| k == "api-key" && v == KEY)));
    for (path, text) in crate::support::all_files(dir.path()) {
        assert!(!text.contains(KEY), "{path:?} holds the key");
    }
    let slug = cassettes::Slug::from_test_id(&cassettes::TestId::new(test));
    let file =
        crate::support::read_json(&dir.path().join("c").join(slug.as_str()).join("azure.json"));
    let speech = &file["interactions"][0]["request"];
    assert_eq!(
        speech["path"],
        "/openai/deployments/gpt-4o-mini-tts/audio/speech"
    );
    assert_eq!(speech["query"], "api-version=2024-10-21");

    fake.stop();
    let replay = Serve::replaying(dir.path());
    let endpoint = format!("{}/azure", replay.for_test(test));
    let env = [
        ("AZURE", "1"),
        ("AZURE_OPENAI_ENDPOINT", endpoint.as_str()),
        ("AZURE_OPENAI_API_KEY", "llmreplay-replay-key"),
        ("MODEL", "my-4o"),
    ];
    assert_eq!(run_sdk_script(&python, "openai_bodies.py", &env), recorded);
    assert!(replay.stop().status.success());
}

/// With no flag and no file, recording goes where the user's own `OPENAI_BASE_URL` pointed
/// (a gateway), and says so at start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recording_goes_through_the_gateway_the_users_environment_names() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start().await;
    let gateway = format!("{}/v1", fake.url());
    let rec = Serve::start_with_env(
        dir.path(),
        &[
            "--cassette-dir",
            "c",
            "--mode",
            "record",
            "--upstream",
            "search.example=http://127.0.0.1:9",
        ],
        &[("OPENAI_BASE_URL", gateway.as_str())],
    );
    let url = format!("{}/openai/v1/chat/completions", rec.for_test("gw$env"));
    let body = serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "Hi"}]});
    let resp = http().post(url).json(&body).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let stopped = rec.stop();
    assert_eq!(fake.received().len(), 1, "{}", stopped.stderr);
    let line = format!("openai     -> {} (OPENAI_BASE_URL)", fake.url());
    assert!(stopped.stderr.contains(&line), "{}", stopped.stderr);
    // Providers with no upstream in one line; a captured host sent elsewhere, in its own.
    assert!(
        stopped.stderr.contains("  no upstream, so not recorded: ")
            && stopped.stderr.contains("azure (AZURE_OPENAI_ENDPOINT)"),
        "{}",
        stopped.stderr
    );
    assert!(
        stopped
            .stderr
            .contains("  search.example -> http://127.0.0.1:9 (--upstream), direct"),
        "{}",
        stopped.stderr
    );
}

/// A request with no recording, through each official SDK in the environment the runner gives
/// a test process: each raises its own "not found" error carrying our message, so a test's
/// failure says what to record, whatever client it used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_official_sdk_raises_its_own_not_found_error_with_the_record_command() {
    let Some(python) = sdk_python("google.genai") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let serve = Serve::replaying(dir.path());
    let test = "sdk::misses$each_family";
    let base = serve.for_test(test);
    let routed = providers::env::Routed::builtins();
    let mut env: Vec<(String, String)> = providers::env::injected(&base, &routed);
    env.extend(
        providers::env::key_vars(&routed)
            .into_iter()
            .map(|k| (k, runner_plugin::PLACEHOLDER_KEY.to_string())),
    );
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let printed = run_sdk_script(&python, "misses.py", &env);
    let seen: Value = serde_json::from_str(&printed).unwrap();
    for (sdk, class) in [
        ("openai", "NotFoundError"),
        ("anthropic", "NotFoundError"),
        ("gemini", "ClientError"),
    ] {
        let got = &seen[sdk];
        assert_eq!(got["class"], class, "{sdk}: {seen}");
        assert_eq!(got["status"], 404, "{sdk}: {seen}");
        let message = got["message"].as_str().unwrap_or_default();
        for part in [
            "no recording for this request",
            "sdk::misses$each_family",
            "cargo llmreplay test --record-missing -E 'test(=each_family)'",
        ] {
            assert!(message.contains(part), "{sdk}: {part:?} in {message}");
        }
    }
    let journal = serve.journal().await;
    let misses = journal
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["outcome"] == "miss")
        .count();
    let stopped = serve.stop();
    assert_eq!(misses, 3, "{journal}");
    assert!(stopped.stderr.contains("3 missing"), "{}", stopped.stderr);
}
