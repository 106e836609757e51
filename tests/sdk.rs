//! The official Python `openai` SDK (pinned in tests/sdk/requirements.txt) through the real
//! `cargo-llmreplay serve`, against the loopback fake provider: speech, transcription, images,
//! embeddings and a streamed Responses call record, then replay offline identically, twice, each
//! upload with its own multipart boundary.

mod support;

use serde_json::Value;
use support::{http, run_sdk_script, sdk_python, FakeProvider, Serve};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_sdk_records_binary_multipart_and_streams_and_replays_them_offline() {
    let Some(python) = sdk_python("openai") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut fake = FakeProvider::start().await;
    let upstream = format!("openai={}", fake.url());
    let test = "sdk::openai$bodies";
    let rec = Serve::start(
        dir.path(),
        &[
            "--cassette-dir",
            "c",
            "--mode",
            "record",
            "--upstream",
            &upstream,
        ],
    );
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
    let replay = Serve::start(dir.path(), &["--cassette-dir", "c"]);
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
