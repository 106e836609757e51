//! End-to-end tests of bodies that are not plain JSON: audio answers, multipart uploads, gzip,
//! bytes that are not UTF-8, deep JSON and blobs, through the real `cargo-llmreplay serve`, with
//! async-openai's audio client and reqwest, against the loopback fake provider. Also keys that
//! tell the truth: a hand edit is refused at replay until `status --fix`.

use crate::support::{all_files, audio_bytes, http, read_json, FakeProvider, Serve};
use async_openai::config::OpenAIConfig;
use async_openai::types::audio::{AudioInput, CreateSpeechRequest, CreateTranscriptionRequestArgs};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

const TEST: &str = "bodies::all$forms";
const SECRET: &str = "SECRET-in-an-encoded-query";

fn openai(base: &str) -> async_openai::Client<OpenAIConfig> {
    async_openai::Client::with_config(
        OpenAIConfig::new()
            .with_api_base(format!("{base}/openai/v1"))
            .with_api_key("sk-test"),
    )
}

fn nested(depth: usize) -> String {
    format!(
        "{{\"model\":\"gpt-4o-mini\",\"messages\":[{{\"role\":\"user\",\"content\":\"deep\"}}],\"metadata\":{}{}}}",
        "[".repeat(depth),
        "]".repeat(depth)
    )
}

/// Everything one exchange gave back: status, the headers that matter, the exact bytes.
#[derive(Debug, PartialEq)]
struct Got {
    status: u16,
    content_type: Option<String>,
    content_encoding: Option<String>,
    bytes: Vec<u8>,
}

async fn got(resp: reqwest::Response) -> Got {
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_string())
    };
    Got {
        status: resp.status().as_u16(),
        content_type: header("content-type"),
        content_encoding: header("content-encoding"),
        bytes: resp.bytes().await.unwrap().to_vec(),
    }
}

/// Every kind of body, once each; the answers as the client saw them.
async fn exchange_all(base: &str) -> Vec<Got> {
    let http = http();
    let client = openai(base);
    let mut out = Vec::new();
    for input in ["Hello there", "A BIG answer"] {
        let req: CreateSpeechRequest = serde_json::from_value(
            json!({"model": "gpt-4o-mini-tts", "input": input, "voice": "alloy"}),
        )
        .unwrap();
        let speech = client.audio().speech().create(req).await.unwrap();
        out.push(Got {
            status: 200,
            content_type: None,
            content_encoding: None,
            bytes: speech.bytes.to_vec(),
        });
    }
    // Uploads: a small file and one over the inline limit, each with a fresh random boundary.
    for (name, len) in [("a.wav", 3000), ("b.wav", 100_000)] {
        let req = CreateTranscriptionRequestArgs::default()
            .file(AudioInput::from_vec_u8(name.into(), audio_bytes(name, len)))
            .model("whisper-1")
            .build()
            .unwrap();
        let text = client.audio().transcription().create(req).await.unwrap();
        out.push(Got {
            status: 200,
            content_type: None,
            content_encoding: None,
            bytes: text.text.into_bytes(),
        });
    }
    out.push(
        got(http
            .get(format!("{base}/openai/v1/models"))
            .send()
            .await
            .unwrap())
        .await,
    );
    let binary: Vec<u8> = vec![0xff, 0x00, 0xfe, b'{', 0x80, 0x81];
    out.push(
        got(http
            .post(format!("{base}/openai/v1/echo-bytes"))
            .header("content-type", "application/octet-stream")
            .body(binary)
            .send()
            .await
            .unwrap())
        .await,
    );
    for depth in [123, 1000] {
        out.push(
            got(http
                .post(format!("{base}/openai/v1/chat/completions?k%65y={SECRET}"))
                .header("content-type", "application/json")
                .body(nested(depth))
                .send()
                .await
                .unwrap())
            .await,
        );
    }
    out
}

fn cassette_folder(dir: &Path) -> PathBuf {
    dir.join("c")
        .join(cassettes::Slug::from_test_id(&cassettes::TestId::new(TEST)).as_str())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audio_uploads_gzip_binary_deep_and_blob_bodies_replay_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let mut fake = FakeProvider::start().await;
    let upstream = format!("openai={}", fake.url());
    let rec = Serve::recording(dir.path(), &upstream);
    let recorded = exchange_all(&rec.for_test(TEST)).await;
    let stopped = rec.stop();
    assert!(stopped.status.success(), "{}", stopped.stderr);

    // What the clients got while recording is what upstream sent.
    assert_eq!(recorded[0].bytes, audio_bytes("Hello there", 6000));
    assert_eq!(recorded[1].bytes.len(), 5 << 20);
    assert!(String::from_utf8_lossy(&recorded[2].bytes).contains("Heard 3000 bytes"));
    assert!(String::from_utf8_lossy(&recorded[3].bytes).contains("Heard 100000 bytes"));
    assert_eq!(recorded[4].content_encoding.as_deref(), Some("gzip"));
    assert_eq!(recorded[5].bytes, [0x81, 0x80, b'{', 0xfe, 0x00, 0xff]);
    assert!(
        recorded[6..].iter().all(|g| g.status == 200),
        "{recorded:?}"
    );

    let folder = cassette_folder(dir.path());
    let file = read_json(&folder.join("openai.json"));

    let xs = file["interactions"].as_array().unwrap();
    assert_eq!(xs.len(), 8);
    assert!(xs[0]["response"]["body_base64"].is_string(), "audio inline");
    let blob = xs[1]["response"]["body_blob"].as_str().unwrap();
    assert_eq!(
        std::fs::read(folder.join("blobs").join(blob)).unwrap(),
        recorded[1].bytes,
        "5 MiB of audio in a blob named by its hash"
    );
    let parts = xs[3]["request"]["parts"].as_array().unwrap();
    assert_eq!(parts[0]["filename"], "b.wav");
    assert!(
        parts[0]["body_blob"].is_string(),
        "a large upload in a blob"
    );
    assert_eq!(xs[2]["request"]["parts"][1]["body_text"], "whisper-1");
    assert_eq!(
        xs[4]["response"]["headers"]["content-encoding"], "gzip",
        "the encoding of the stored bytes is kept"
    );
    assert_eq!(
        xs[4]["summary"],
        Value::Null,
        "a model list has no answer text"
    );
    assert!(xs[6]["request"]["body_text"].is_string(), "123 deep: text");
    assert!(xs[7]["request"]["body_text"].is_string(), "1000 deep: text");
    assert_eq!(
        xs[6]["request"].get("query"),
        None,
        "the key parameter is gone"
    );
    for (path, text) in all_files(dir.path()) {
        assert!(!text.contains(SECRET), "{path:?} holds the secret");
    }
    let sent = fake.received();
    assert!(
        sent.iter()
            .any(|r| r.query.as_deref() == Some(&format!("k%65y={SECRET}"))),
        "the key still goes upstream"
    );

    // Offline: every answer again, to the byte, with new multipart boundaries.
    fake.stop();
    let replay = Serve::replaying(dir.path());
    let replayed = exchange_all(&replay.for_test(TEST)).await;
    let stopped = replay.stop();
    assert!(
        stopped.status.success(),
        "no miss in replay: {}",
        stopped.stderr
    );
    assert_eq!(replayed, recorded);
    let uploads: Vec<&crate::support::Received> = sent
        .iter()
        .filter(|r| r.path == "/v1/audio/transcriptions")
        .collect();
    assert_eq!(uploads.len(), 2, "uploads were sent upstream once each");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_utf8_test_id_has_its_own_cassette_and_an_undecodable_one_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start().await;
    let upstream = format!("openai={}", fake.url());
    let rec = Serve::recording(dir.path(), &upstream);
    let title = "checkout › pays with a card";
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "Hi"}]});
    let resp = http()
        .post(format!("{}/openai/v1/chat/completions", rec.base))
        .header("x-test-id", title)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let bad = http()
        .post(format!("{}/openai/v1/chat/completions", rec.base))
        .header(
            "x-test-id",
            reqwest::header::HeaderValue::from_bytes(b"bad \xff id").unwrap(),
        )
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let message = bad.text().await.unwrap();
    assert!(
        message.contains("X-Test-Id header is not UTF-8"),
        "{message}"
    );
    rec.stop();
    let slug = cassettes::Slug::from_test_id(&cassettes::TestId::new(title));
    let file = read_json(&dir.path().join("c").join(slug.as_str()).join("openai.json"));
    assert_eq!(file["test"], title);
    assert!(!dir.path().join("c/default").exists());
    assert_eq!(fake.received().len(), 1, "the refused request went nowhere");
}

/// A sample crate root for `status`, which looks for the workspace.
fn crate_root(dir: &Path) {
    std::fs::write(
        dir.join("Cargo.toml"),
        "[package]\nname = \"edited\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    )
    .unwrap();
}

fn status(dir: &Path, args: &[&str]) -> (Option<i32>, String) {
    let out = std::process::Command::new(crate::support::binary())
        .args(["llmreplay", "status", "--no-list", "--cassette-dir", "c"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_edited_request_is_refused_until_status_fix() {
    let dir = tempfile::tempdir().unwrap();
    crate_root(dir.path());
    let mut fake = FakeProvider::start().await;
    let upstream = format!("openai={}", fake.url());
    let chat =
        |prompt: &str| json!({"model": "m", "messages": [{"role": "user", "content": prompt}]});
    let rec = Serve::recording(dir.path(), &upstream);
    let url = format!("{}/openai/v1/chat/completions", rec.for_test(TEST));
    let first = http().post(&url).json(&chat("Hi")).send().await.unwrap();
    let answer = first.text().await.unwrap();
    rec.stop();
    fake.stop();
    assert_eq!(status(dir.path(), &["--check"]).0, Some(0), "clean before");

    // The reviewer rewrites the prompt by hand: the stored key no longer fits the request.
    let path = cassette_folder(dir.path()).join("openai.json");
    let edited = std::fs::read_to_string(&path)
        .unwrap()
        .replace("\"content\": \"Hi\"", "\"content\": \"Hello\"");
    std::fs::write(&path, &edited).unwrap();

    let replay = Serve::replaying(dir.path());
    let url = format!("{}/openai/v1/chat/completions", replay.for_test(TEST));
    let refused = http().post(&url).json(&chat("Hello")).send().await.unwrap();
    assert_eq!(refused.status(), 400);
    let message = refused.text().await.unwrap();
    assert!(
        message.contains("openai.json: interaction 1 was edited by hand")
            && message.contains("cargo llmreplay status --fix"),
        "{message}"
    );
    replay.stop();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), edited, "untouched");

    let (code, err) = status(dir.path(), &["--check"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("interaction 1: its key is not the key"),
        "{err}"
    );
    let (code, err) = status(dir.path(), &["--fix", "--check"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("interaction 1: key "), "{err}");

    let replay = Serve::replaying(dir.path());
    let url = format!("{}/openai/v1/chat/completions", replay.for_test(TEST));
    let hit = http().post(&url).json(&chat("Hello")).send().await.unwrap();
    assert_eq!(hit.status(), 200);
    assert_eq!(
        hit.text().await.unwrap(),
        answer,
        "the edited request replays"
    );
    assert!(replay.stop().status.success());
}

/// An answer edited by hand with its seal deleted still replays (as cassettes written before
/// seals must), but `status --check` fails naming it, until `status --fix` seals it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsealed_answer_fails_status_check_until_status_fix() {
    let dir = tempfile::tempdir().unwrap();
    crate_root(dir.path());
    let mut fake = FakeProvider::start().await;
    let rec = Serve::recording(dir.path(), &format!("openai={}", fake.url()));
    let url = format!("{}/openai/v1/chat/completions", rec.for_test(TEST));
    let chat = json!({"model": "m", "messages": [{"role": "user", "content": "Hi"}]});
    assert_eq!(
        http().post(&url).json(&chat).send().await.unwrap().status(),
        200
    );
    rec.stop();
    fake.stop();
    let path = cassette_folder(dir.path()).join("openai.json");
    let mut cassette: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let x = &mut cassette["interactions"][0];
    x.as_object_mut().unwrap().remove("seal");
    let text = x["response"]["body"]["choices"][0]["message"]["content"].clone();
    assert!(text.as_str().unwrap().starts_with("You said"), "{text}");
    x["response"]["body"]["choices"][0]["message"]["content"] = json!("Edited by hand");
    std::fs::write(
        &path,
        serde_json::to_string_pretty(&cassette).unwrap() + "\n",
    )
    .unwrap();

    let (code, err) = status(dir.path(), &["--check"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("interaction 1: its answer has no seal"),
        "{err}"
    );
    let (code, err) = status(dir.path(), &["--fix", "--check"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("answer sealed"), "{err}");
}
