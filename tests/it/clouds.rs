//! Bedrock and Vertex AI through their official Python clients. Bedrock: boto3's
//! `bedrock-runtime` (Converse, ConverseStream) against a fake that checks every SigV4
//! signature with botocore's own signer, so the daemon's re-signing for the real host is proven;
//! event-stream frames replay byte for byte. Vertex: google-genai with `vertexai=True` and an
//! OAuth token. No credential reaches a cassette.

use crate::support::{all_files, http, read_json, run_sdk_script, sdk_python, FakeProvider, Serve};
use serde_json::Value;
use std::io::BufRead;
use std::process::{Command, Stdio};

const RECORDER_KEY_ID: &str = "AKIDRECORDER7Q2W";
const RECORDER_SECRET: &str = "recorder-secret-9f8e7d6c";
const CLIENT_KEY_ID: &str = "AKIDCLIENT4R5T";
const CLIENT_SECRET: &str = "client-secret-1a2b3c";

/// The fake Bedrock, verifying signatures made with the recorder's credentials.
struct FakeBedrock {
    child: std::process::Child,
    url: String,
}

impl FakeBedrock {
    fn start(python: &std::path::Path) -> FakeBedrock {
        let script =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/sdk/bedrock_fake.py");
        let mut child = Command::new(python)
            .arg(script)
            .env("FAKE_AWS_ACCESS_KEY_ID", RECORDER_KEY_ID)
            .env("FAKE_AWS_SECRET_ACCESS_KEY", RECORDER_SECRET)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .strip_prefix("PORT ")
            .expect("the fake says its port");
        FakeBedrock {
            child,
            url: format!("http://127.0.0.1:{port}"),
        }
    }

    async fn stats(&self) -> Value {
        crate::support::get_json(&format!("{}/__stats", self.url)).await
    }
}

impl Drop for FakeBedrock {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The fakes stand in for AWS on plain HTTP: the daemon sends them the credentials it signs
/// with only because it is told to.
fn serve(dir: &std::path::Path, mode: &str, upstream: &str, env: &[(&str, &str)]) -> Serve {
    Serve::in_mode_with(
        dir,
        mode,
        upstream,
        env,
        &["--allow-credentials-to", "127.0.0.1"],
    )
}

fn boto3(python: &std::path::Path, serve: &Serve, key_id: &str, secret: &str) -> Value {
    let endpoint = format!("{}/bedrock", serve.for_test("cloud$bedrock"));
    let env = [
        ("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", endpoint.as_str()),
        ("AWS_ACCESS_KEY_ID", key_id),
        ("AWS_SECRET_ACCESS_KEY", secret),
        ("AWS_DEFAULT_REGION", "us-east-1"),
        ("AWS_CONFIG_FILE", "/dev/null"),
        ("AWS_SHARED_CREDENTIALS_FILE", "/dev/null"),
    ];
    serde_json::from_str(&run_sdk_script(python, "bedrock.py", &env)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boto3_converse_is_re_signed_for_the_real_host_and_its_event_stream_replays_byte_for_byte()
{
    let Some(python) = sdk_python("boto3") else {
        return;
    };
    let fake = FakeBedrock::start(&python);
    let dir = tempfile::tempdir().unwrap();
    let upstream = format!("bedrock={}", fake.url);

    // Without credentials of its own, the daemon cannot sign again, and says so.
    let unsigned = serve(dir.path(), "record", &upstream, &[]);
    let url = format!(
        "{}/bedrock/model/m/converse",
        unsigned.for_test("cloud$unsigned")
    );
    let r = http()
        .post(&url)
        .body(r#"{"messages":[]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 502);
    assert!(r
        .text()
        .await
        .unwrap()
        .contains("set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"));
    unsigned.stop();

    // The client signs with its own credentials for the daemon's host; the fake accepts only
    // the recorder's, for its own host.
    let recorder = [
        ("AWS_ACCESS_KEY_ID", RECORDER_KEY_ID),
        ("AWS_SECRET_ACCESS_KEY", RECORDER_SECRET),
    ];
    let rec = serve(dir.path(), "record", &upstream, &recorder);
    let recorded = boto3(&python, &rec, CLIENT_KEY_ID, CLIENT_SECRET);
    let stopped = rec.stop();
    assert!(stopped.stderr.contains("4 recorded"), "{}", stopped.stderr);
    assert_eq!(recorded["text"], "You said: Hello Bedrock", "{recorded}");
    assert_eq!(
        recorded["deltas"].as_array().unwrap().concat_strings(),
        "You said: Stream it"
    );
    assert_eq!(recorded["invoked"], "You said: Invoke me");
    assert_eq!(
        recorded["invoked_chunks"]
            .as_array()
            .unwrap()
            .concat_strings(),
        "You said: Invoke streamed"
    );
    let stats = fake.stats().await;
    assert_eq!(
        (stats["verified"].as_u64(), stats["refused"].as_u64()),
        (Some(4), Some(0)),
        "{stats}"
    );
    // The fake's last stream: InvokeModelWithResponseStream's frames, as it sent them.
    let file = dir.path().join("c/cloud--bedrock/bedrock.json");
    let first = std::fs::read(&file).unwrap();

    // Again: new padding, latencies and ids in every answer, and no byte of the file changes.
    let again = serve(dir.path(), "record", &upstream, &recorder);
    assert_eq!(
        boto3(&python, &again, CLIENT_KEY_ID, CLIENT_SECRET),
        recorded
    );
    let stopped = again.stop();
    assert!(
        stopped.stderr.contains(": 4 re-recorded unchanged\n"),
        "{}",
        stopped.stderr
    );
    assert_eq!(std::fs::read(&file).unwrap(), first);
    let second_stats = fake.stats().await;
    assert_ne!(
        second_stats["last_stream"], stats["last_stream"],
        "the second stream differed"
    );
    let stream_bytes = base64_decode(stats["last_stream"].as_str().unwrap());

    let cassette = read_json(&dir.path().join("c/cloud--bedrock/bedrock.json"));
    let [whole, streamed] = [&cassette["interactions"][0], &cassette["interactions"][1]];
    assert_eq!(
        whole["request"]["path"],
        "/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse"
    );
    assert_eq!(whole["summary"]["text"], "You said: Hello Bedrock");
    assert_eq!(
        streamed["response"]["headers"]["content-type"],
        "application/vnd.amazon.eventstream"
    );
    assert_eq!(streamed["summary"]["text"], "You said: Stream it");
    assert_eq!(streamed["summary"]["usage"]["outputTokens"], 4);
    assert_eq!(
        cassette["interactions"][2]["summary"]["text"],
        "You said: Invoke me"
    );
    assert_eq!(
        cassette["interactions"][3]["summary"]["text"],
        "You said: Invoke streamed"
    );
    for (path, text) in all_files(&dir.path().join("c")) {
        for secret in [
            RECORDER_KEY_ID,
            RECORDER_SECRET,
            CLIENT_KEY_ID,
            CLIENT_SECRET,
            "Signature=",
            "X-Amz-Date",
            "x-amz-date",
        ] {
            assert!(!text.contains(secret), "{secret} in {}", path.display());
        }
    }

    // Offline, with the placeholder credentials a test gets in replay: the stream's bytes as
    // the fake sent them, then boto3's answers as recorded.
    drop(fake);
    let placeholder = runner_plugin::PLACEHOLDER_KEY;
    let replay = serve(dir.path(), "replay", "bedrock=http://127.0.0.1:9", &[]);
    let raw = http()
        .post(format!(
            "{}/bedrock/model/anthropic.claude-3-haiku-20240307-v1%3A0/invoke-with-response-stream",
            replay.for_test("cloud$bedrock")
        ))
        .header("content-type", "application/json")
        .body(r#"{"anthropic_version":"bedrock-2023-05-31","max_tokens":64,"messages":[{"role":"user","content":"Invoke streamed"}]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status(), 200);
    assert_eq!(
        raw.bytes().await.unwrap(),
        stream_bytes,
        "event-stream frames byte for byte"
    );
    let begin = format!("{}/__llmreplay/begin?test=cloud%24bedrock", replay.base);
    assert_eq!(http().post(begin).send().await.unwrap().status(), 200);
    assert_eq!(boto3(&python, &replay, placeholder, placeholder), recorded);
    let stopped = replay.stop();
    assert!(
        stopped.stderr.contains(": 5 replayed\n"),
        "{}",
        stopped.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn google_genai_on_vertex_records_and_replays_with_its_token_never_stored() {
    let Some(python) = sdk_python("google.genai") else {
        return;
    };
    let mut fake = FakeProvider::start().await;
    let dir = tempfile::tempdir().unwrap();
    let run = |serve: &Serve| {
        let base = format!("{}/vertex", serve.for_test("cloud$vertex"));
        let env = [
            ("GOOGLE_VERTEX_BASE_URL", base.as_str()),
            ("VERTEX_TOKEN", "ya29.vertex-token-5e6f"),
        ];
        serde_json::from_str::<Value>(&run_sdk_script(&python, "vertex.py", &env)).unwrap()
    };
    let rec = serve(dir.path(), "record", &format!("vertex={}", fake.url()), &[]);
    let recorded = run(&rec);
    assert!(rec.stop().stderr.contains("2 recorded"));
    assert_eq!(recorded["text"], "You said: Hello Vertex", "{recorded}");
    assert_eq!(
        recorded["chunks"].as_array().unwrap().concat_strings(),
        "You said: Stream Vertex"
    );
    let got = fake.received();
    assert!(got[0].path.starts_with("/v1beta1/projects/llmreplay-test/locations/us-central1/publishers/google/models/gemini-2.5-flash:"), "{}", got[0].path);
    assert!(got[0]
        .headers
        .iter()
        .any(|(k, v)| k == "authorization" && v == "Bearer ya29.vertex-token-5e6f"));
    let cassette = read_json(&dir.path().join("c/cloud--vertex/vertex.json"));
    assert_eq!(
        cassette["interactions"][0]["summary"]["text"],
        "You said: Hello Vertex"
    );
    for (path, text) in all_files(&dir.path().join("c")) {
        assert!(!text.contains("vertex-token"), "{}", path.display());
    }

    fake.stop();
    let replay = serve(dir.path(), "replay", "vertex=http://127.0.0.1:9", &[]);
    assert_eq!(run(&replay), recorded);
    assert!(replay.stop().stderr.contains(": 2 replayed\n"));
}

trait ConcatStrings {
    fn concat_strings(&self) -> String;
}

impl ConcatStrings for Vec<Value> {
    fn concat_strings(&self) -> String {
        self.iter().filter_map(Value::as_str).collect()
    }
}

fn base64_decode(s: &str) -> bytes::Bytes {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .unwrap()
        .into()
}

/// The Rust AWS SDK's Bedrock client, through the daemon: its Converse and ConverseStream are
/// signed again for the fake, which checks them, then replay offline with other credentials.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_aws_sdk_converses_through_the_daemon() {
    use aws_sdk_bedrockruntime::types::{ContentBlock, ConversationRole, Message};
    let Some(python) = sdk_python("boto3") else {
        return;
    };
    let fake = FakeBedrock::start(&python);
    let dir = tempfile::tempdir().unwrap();
    let client = |serve: &Serve, key_id: &str, secret: &str| {
        let endpoint = format!("{}/bedrock", serve.for_test("cloud$rust"));
        let credentials =
            aws_sdk_bedrockruntime::config::Credentials::new(key_id, secret, None, None, "test");
        let conf = aws_sdk_bedrockruntime::Config::builder()
            .behavior_version(aws_sdk_bedrockruntime::config::BehaviorVersion::latest())
            .http_client(aws_smithy_http_client::Builder::new().build_http())
            .region(aws_sdk_bedrockruntime::config::Region::new("us-east-1"))
            .endpoint_url(endpoint)
            .credentials_provider(credentials)
            .build();
        aws_sdk_bedrockruntime::Client::from_conf(conf)
    };
    let message = |text: &str| {
        Message::builder()
            .role(ConversationRole::User)
            .content(ContentBlock::Text(text.into()))
            .build()
            .unwrap()
    };
    let model = "anthropic.claude-3-haiku-20240307-v1:0";
    let ask = |c: aws_sdk_bedrockruntime::Client| async move {
        let whole = c
            .converse()
            .model_id(model)
            .messages(message("Hello from Rust"))
            .send()
            .await
            .unwrap();
        let text = match whole.output().unwrap().as_message().unwrap().content() {
            [ContentBlock::Text(t), ..] => t.clone(),
            other => panic!("{other:?}"),
        };
        let mut stream = c
            .converse_stream()
            .model_id(model)
            .messages(message("Rust streams"))
            .send()
            .await
            .unwrap()
            .stream;
        let mut streamed = String::new();
        while let Some(event) = stream.recv().await.unwrap() {
            if let aws_sdk_bedrockruntime::types::ConverseStreamOutput::ContentBlockDelta(d) = event
            {
                if let Some(aws_sdk_bedrockruntime::types::ContentBlockDelta::Text(t)) = d.delta() {
                    streamed.push_str(t);
                }
            }
        }
        (text, streamed)
    };
    let recorder = [
        ("AWS_ACCESS_KEY_ID", RECORDER_KEY_ID),
        ("AWS_SECRET_ACCESS_KEY", RECORDER_SECRET),
    ];
    let rec = serve(
        dir.path(),
        "record",
        &format!("bedrock={}", fake.url),
        &recorder,
    );
    let recorded = ask(client(&rec, CLIENT_KEY_ID, CLIENT_SECRET)).await;
    assert!(rec.stop().stderr.contains("2 recorded"));
    assert_eq!(recorded.0, "You said: Hello from Rust");
    assert_eq!(recorded.1, "You said: Rust streams");
    let stats = fake.stats().await;
    assert_eq!(stats["verified"], 2, "{stats}");
    drop(fake);
    let replay = serve(dir.path(), "replay", "bedrock=http://127.0.0.1:9", &[]);
    let placeholder = runner_plugin::PLACEHOLDER_KEY;
    assert_eq!(
        ask(client(&replay, placeholder, placeholder)).await,
        recorded
    );
    assert!(replay.stop().stderr.contains(": 2 replayed\n"));
}
