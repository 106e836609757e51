//! WebSocket sessions through the real daemon: the official Python SDK's Realtime client, a
//! Rust client in the Gemini Live style, and Azure's realtime path, against fake upstreams on
//! 127.0.0.1; recorded, replayed offline frame for frame, a changed prompt refused naming the
//! field, parallel tests kept apart, and a session cut by the upstream passed on, not saved.

use crate::support::{read_json, run_sdk_script, sdk_python, FakeRealtime, Serve};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use std::path::Path;
use tokio_tungstenite::tungstenite::Message;

fn recording(dir: &Path, upstreams: &[(&str, String)]) -> Serve {
    Serve::recording_from(dir, upstreams)
}

/// The Python script's view of one Realtime turn.
fn realtime_turn(python: &Path, serve: &Serve, test: &str, prompt: &str) -> Value {
    let base = format!("{}/openai/v1", serve.for_test(test));
    let env = [
        ("OPENAI_BASE_URL", base.as_str()),
        ("OPENAI_API_KEY", "sk-realtime-secret-5b1c"),
        ("PROMPT", prompt),
    ];
    serde_json::from_str(&run_sdk_script(python, "realtime.py", &env)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_sdk_records_a_realtime_session_and_replays_it_frame_for_frame() {
    let Some(python) = sdk_python("websockets") else {
        return;
    };
    let mut fake = FakeRealtime::start().await;
    let dir = tempfile::tempdir().unwrap();
    let rec = recording(dir.path(), &[("openai", fake.url())]);
    // Two tests at once, each with its own session.
    let (a, b) = {
        let (p1, p2) = (python.clone(), python.clone());
        let (r1, r2) = (&rec, &rec);
        std::thread::scope(|s| {
            let a = s.spawn(move || realtime_turn(&p1, r1, "rt$first", "Hello there"));
            let b = s.spawn(move || realtime_turn(&p2, r2, "rt$second", "Bonjour"));
            (a.join().unwrap(), b.join().unwrap())
        })
    };
    let stopped = rec.stop();
    assert!(stopped.stderr.contains("2 recorded"), "{}", stopped.stderr);
    assert_eq!(a["text"], "You said: Hello there", "{a}");
    assert_eq!(b["text"], "You said: Bonjour", "{b}");
    assert_eq!(
        a["types"].as_array().unwrap().first().unwrap(),
        "session.created"
    );
    assert_eq!(
        a["types"].as_array().unwrap().last().unwrap(),
        "response.done"
    );
    assert!(fake
        .upgrades
        .lock()
        .unwrap()
        .iter()
        .all(|p| p == "/v1/realtime?model=gpt-realtime"));

    let cassette = read_json(&dir.path().join("c/rt--first/openai.json"));
    let session = &cassette["interactions"][0];
    assert_eq!(session["request"]["websocket"], true);
    assert_eq!(session["request"]["query"], "model=gpt-realtime");
    assert!(session.get("response").is_none());
    // Frames in the order the daemon saw them: the SDK sends its session.update without
    // waiting for session.created, so either may come first.
    let frames = session["frames"].as_array().unwrap();
    let first_server = frames.iter().find(|f| f["from"] == "server").unwrap();
    assert_eq!(first_server["json"]["type"], "session.created");
    let client: Vec<&str> = frames
        .iter()
        .filter(|f| f["from"] == "client")
        .map(|f| f["text"].as_str().or(f["json"]["type"].as_str()).unwrap())
        .collect();
    assert_eq!(
        client.len(),
        3,
        "session.update, item.create, response.create: {client:?}"
    );
    assert_eq!(session["summary"]["text"], "You said: Hello there");
    for (path, text) in crate::support::all_files(&dir.path().join("c")) {
        assert!(!text.contains("sk-realtime-secret"), "{}", path.display());
    }

    // Offline: the same events, the same text, for both tests.
    fake.stop();
    let replay = Serve::replaying(dir.path());
    assert_eq!(
        realtime_turn(&python, &replay, "rt$first", "Hello there"),
        a
    );
    assert_eq!(realtime_turn(&python, &replay, "rt$second", "Bonjour"), b);
    // A changed prompt on the test's next attempt (its sequence starts afresh, as under
    // nextest's retries): an error event naming the field, and a miss in the report.
    let begin = format!("{}/__llmreplay/begin?test=rt%24first", replay.base);
    let status = crate::support::http()
        .post(begin)
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 200);
    let changed = realtime_turn(&python, &replay, "rt$first", "Hello where");
    let error = changed["error"]
        .as_str()
        .unwrap_or_else(|| panic!("{changed}"));
    assert!(
        error.contains("no recording for this WebSocket frame"),
        "{error}"
    );
    assert!(error.contains("/item/content/0/text"), "{error}");
    assert!(
        error.contains("cargo llmreplay test --record-missing -E 'test(=first)'"),
        "{error}"
    );
    // A session is journalled when it ends on the daemon's side, which may be just after
    // the client's process has exited: wait for all three, with a deadline.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let outcomes = loop {
        let journal = replay.journal().await;
        let outcomes: Vec<String> = journal
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["outcome"].as_str().unwrap().to_string())
            .collect();
        if outcomes.len() >= 3 || std::time::Instant::now() > deadline {
            break outcomes;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(outcomes, ["hit", "hit", "miss"]);
    let stopped = replay.stop();
    assert!(
        stopped.stderr.contains("2 replayed, 1 missing"),
        "{}",
        stopped.stderr
    );
}

/// A Gemini Live style session from a Rust client: setup, a turn, the model's parts.
async fn live_turn(url: &str, prompt: &str) -> Vec<String> {
    let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
    let setup = json!({"setup": {"model": "models/gemini-live-2.5-flash"}});
    ws.send(Message::text(setup.to_string())).await.unwrap();
    let turn = json!({"clientContent": {"turns": [{"role": "user", "parts": [{"text": prompt}]}], "turnComplete": true}});
    let mut got = Vec::new();
    let mut sent_turn = false;
    while let Some(Ok(m)) = ws.next().await {
        let Message::Text(t) = m else { break };
        got.push(t.as_str().to_string());
        if !sent_turn {
            ws.send(Message::text(turn.to_string())).await.unwrap();
            sent_turn = true;
        }
        if t.as_str().contains("turnComplete") {
            break;
        }
    }
    ws.close(None).await.unwrap();
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gemini_live_session_and_an_azure_realtime_one_replay_byte_for_byte() {
    let mut fake = FakeRealtime::start().await;
    let dir = tempfile::tempdir().unwrap();
    let rec = recording(dir.path(), &[("gemini", fake.url()), ("azure", fake.url())]);
    let live_path = "/gemini/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent?key=AIza-live-secret-77";
    let live_url = |serve: &Serve| {
        format!("{}{live_path}", serve.for_test("live$turn")).replace("http://", "ws://")
    };
    let recorded = live_turn(&live_url(&rec), "Wie geht's?").await;
    assert_eq!(
        recorded.first().unwrap(),
        r#"{"setupComplete":{"sessionId":"live_1"}}"#
    );
    assert!(recorded.last().unwrap().contains("turnComplete"));

    // Azure: the deployment's realtime path, api-key header and api-version.
    let azure_url = |serve: &Serve| {
        format!(
            "{}/azure/openai/realtime?api-version=2025-04-01-preview&deployment=gpt-realtime",
            serve.for_test("azure$turn")
        )
        .replace("http://", "ws://")
    };
    let azure_turn = |url: String| async move {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;
        let mut req = url.into_client_request().unwrap();
        req.headers_mut()
            .insert("api-key", "azure-secret-key-31".parse().unwrap());
        let (mut ws, _) = tokio_tungstenite::connect_async(req).await.unwrap();
        let mut got = Vec::new();
        let first = ws.next().await.unwrap().unwrap();
        got.push(first.to_text().unwrap().to_string());
        // 96 KiB of audio as base64 in JSON: kept in the blob store, matched on replay.
        let audio = "QUJD".repeat(32 * 1024);
        let append = json!({"type": "input_audio_buffer.append", "audio": audio});
        ws.send(Message::text(append.to_string())).await.unwrap();
        let item = json!({"type": "conversation.item.create", "event_id": "client_evt_random_1", "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Azure hello"}]}});
        ws.send(Message::text(item.to_string())).await.unwrap();
        ws.send(Message::text(
            json!({"type": "response.create"}).to_string(),
        ))
        .await
        .unwrap();
        while let Some(Ok(m)) = ws.next().await {
            let t = m.to_text().unwrap().to_string();
            let done = t.contains("response.done");
            got.push(t);
            if done {
                break;
            }
        }
        ws.close(None).await.unwrap();
        got
    };
    let azure_recorded = azure_turn(azure_url(&rec)).await;
    assert!(
        azure_recorded.iter().any(|f| f.contains("You said: ")),
        "{azure_recorded:?}"
    );
    let stopped = rec.stop();
    assert!(stopped.stderr.contains("2 recorded"), "{}", stopped.stderr);
    let upgrades = fake.upgrades.lock().unwrap().clone();
    assert!(
        upgrades[0].ends_with("BidiGenerateContent?key=AIza-live-secret-77"),
        "the key reaches the upstream: {upgrades:?}"
    );
    assert!(
        upgrades[1].starts_with("/openai/realtime?api-version="),
        "{upgrades:?}"
    );
    for (path, text) in crate::support::all_files(&dir.path().join("c")) {
        for secret in ["AIza-live-secret", "azure-secret-key"] {
            assert!(!text.contains(secret), "{secret} in {}", path.display());
        }
    }

    fake.stop();
    let replay = Serve::start(dir.path(), &["--cassette-dir", "c", "-v"]);
    assert_eq!(live_turn(&live_url(&replay), "Wie geht's?").await, recorded);
    // The client's event_id differs on every run; it is not compared.
    assert_eq!(azure_turn(azure_url(&replay)).await, azure_recorded);
    let stopped = replay.stop();
    assert!(
        stopped.stderr.contains(": 2 replayed\n"),
        "{}",
        stopped.stderr
    );
    // A session is a span of its own in the log, with its outcome.
    let sessions: Vec<&str> = stopped
        .stderr
        .lines()
        .filter(|l| l.contains("session{") && l.contains("}: replayed status=101"))
        .collect();
    assert_eq!(sessions.len(), 2, "{}", stopped.stderr);
    assert!(
        sessions
            .iter()
            .any(|l| l.contains("test=\"live$turn\" provider=gemini")),
        "{}",
        stopped.stderr
    );
    let cassette = read_json(&dir.path().join("c/live--turn/gemini.json"));
    assert_eq!(
        cassette["interactions"][0]["summary"]["text"],
        "You said: Wie geht's?"
    );
    let azure = read_json(&dir.path().join("c/azure--turn/azure.json"));
    let frames = azure["interactions"][0]["frames"].as_array().unwrap();
    let blob = frames
        .iter()
        .find_map(|f| f["blob"].as_str())
        .expect("the audio frame is a blob");
    assert!(dir.path().join("c/azure--turn/blobs").join(blob).is_file());
    let summary = azure["interactions"][0]["summary"]["text"]
        .as_str()
        .unwrap();
    assert!(
        summary.contains("[audio from the client: 98304 bytes]"),
        "{summary}"
    );
    let size = std::fs::metadata(dir.path().join("c/azure--turn/azure.json"))
        .unwrap()
        .len();
    assert!(
        size < 16 * 1024,
        "the cassette stays readable: {size} bytes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_the_upstream_cuts_is_passed_on_and_not_saved() {
    let fake = FakeRealtime::start().await;
    let dir = tempfile::tempdir().unwrap();
    let rec = recording(dir.path(), &[("openai", fake.url())]);
    let url = format!(
        "{}/openai/v1/realtime?model=gpt-realtime",
        rec.for_test("rt$cut")
    )
    .replace("http://", "ws://");
    let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
    ws.next().await.unwrap().unwrap();
    let item = json!({"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "CUT me off"}]}});
    ws.send(Message::text(item.to_string())).await.unwrap();
    ws.send(Message::text(
        json!({"type": "response.create"}).to_string(),
    ))
    .await
    .unwrap();
    let mut deltas = 0;
    let mut closed = None;
    while let Some(m) = ws.next().await {
        match m {
            Ok(Message::Close(frame)) => {
                closed = frame;
                break;
            }
            Ok(m) => deltas += usize::from(m.to_text().unwrap().contains("output_text.delta")),
            Err(_) => break,
        }
    }
    assert_eq!(deltas, 1, "the frames before the cut reach the client");
    let closed = closed.expect("the client is told the session broke");
    assert_eq!(u16::from(closed.code), 1011);
    let journal = rec.journal().await;
    assert_eq!(journal[0]["outcome"], "broken", "{journal}");
    let stopped = rec.stop();
    assert!(
        stopped.stderr.contains(": 1 broken stream\n"),
        "{}",
        stopped.stderr
    );
    assert!(
        !dir.path().join("c/rt--cut/openai.json").exists(),
        "nothing saved"
    );
}

/// A Gemini Live turn sent in a binary frame, as Live clients may send it, holding a key the
/// daemon's environment knows and a secret-named field; the model's text frames echo the key.
/// No file and no output holds either, and the session replays with other values.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_in_a_binary_frame_and_its_echo_are_never_stored_and_replay() {
    let mut fake = FakeRealtime::start().await;
    let dir = tempfile::tempdir().unwrap();
    let turn = |url: String, key: &'static str, token: &'static str| async move {
        let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
        let setup = json!({"setup": {"model": "models/gemini-live-2.5-flash"}});
        ws.send(Message::binary(setup.to_string().into_bytes()))
            .await
            .unwrap();
        let first = ws.next().await.unwrap().unwrap();
        assert!(first.to_text().unwrap().contains("setupComplete"));
        let turn = json!({
            "clientContent": {"turns": [{"role": "user", "parts": [{"text": format!("my key is {key}")}]}], "turnComplete": true},
            "auth": {"access_token": token}
        });
        ws.send(Message::binary(turn.to_string().into_bytes()))
            .await
            .unwrap();
        let mut said = String::new();
        while let Some(Ok(m)) = ws.next().await {
            let Message::Text(t) = m else { break };
            said.push_str(t.as_str());
            if t.as_str().contains("turnComplete") {
                break;
            }
        }
        ws.close(None).await.unwrap();
        said
    };
    let path =
        "/gemini/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent";
    let (key, token) = ("live-binary-key-Q8W2E6R4", "live-binary-token-P0O9I8");
    let rec = Serve::in_mode_with(
        dir.path(),
        "record",
        &format!("gemini={}", fake.url()),
        &[("MY_LIVE_SERVICE_TOKEN", key)],
        &[],
    );
    let url = |serve: &Serve| {
        format!("{}{path}", serve.for_test("live$binary")).replace("http://", "ws://")
    };
    let said = turn(url(&rec), key, token).await;
    assert!(
        said.contains(key),
        "the client hears the echo as it was: {said}"
    );
    let rec_out = rec.stop();
    fake.stop();
    for (file, text) in crate::support::all_files(dir.path()) {
        for secret in [key, token] {
            assert!(
                !text.contains(secret),
                "{secret} in {}:\n{text}",
                file.display()
            );
        }
    }
    assert!(!rec_out.stderr.contains(key) && !rec_out.stderr.contains(token));

    let (other_key, other_token) = ("live-binary-key-Z1X2C3V4", "live-binary-token-M5N6B7");
    let rep = Serve::in_mode_with(
        dir.path(),
        "replay",
        "gemini=http://127.0.0.1:9",
        &[("MY_LIVE_SERVICE_TOKEN", other_key)],
        &[],
    );
    let replayed = turn(url(&rep), other_key, other_token).await;
    assert!(replayed.contains("turnComplete"), "{replayed}");
    let rep_out = rep.stop();
    assert!(!rep_out.stderr.contains(other_token), "{}", rep_out.stderr);
}
