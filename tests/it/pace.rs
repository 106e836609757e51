//! Paced recording: `[providers.NAME] max_concurrent` and `min_interval_ms` hold for a suite's
//! worth of requests at once, measured where the provider sees them, and a 429 that says when
//! to come back is waited out and asked again, never saved.

use crate::support::{http, read_json, FakeProvider, Serve};
use serde_json::{json, Value};
use std::time::Duration;

fn chat(prompt: &str, stream: bool) -> Value {
    json!({"model": "gpt-4o-mini", "stream": stream, "messages": [{"role": "user", "content": prompt}]})
}

/// Eight tests record at once through a provider paced to two in flight, starting 60 ms apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paced_provider_sees_no_more_than_its_bound_nor_closer_starts() {
    let fake = FakeProvider::start().await;
    // Each answer takes a while, so that requests overlap unless held back.
    *fake.state.answer_delay.lock().unwrap() = Duration::from_millis(200);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("llmreplay.toml"),
        "[providers.openai]\nmax_concurrent = 2\nmin_interval_ms = 60\n",
    )
    .unwrap();
    let serve = Serve::recording(dir.path(), &format!("openai={}", fake.url()));
    let asks = (0..8).map(|n| {
        let url = format!(
            "{}/openai/v1/chat/completions",
            serve.for_test(&format!("pace$t{n}"))
        );
        async move {
            let answer = http()
                .post(url)
                .json(&chat("Hello there friend", true))
                .send()
                .await
                .unwrap();
            let status = answer.status();
            let body = answer.text().await.unwrap();
            assert_eq!(status, 200, "{body}");
            assert!(body.contains("[DONE]"), "{body}");
        }
    });
    futures_util::future::join_all(asks).await;
    let peak = fake.state.peak.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(peak, 2, "at most two in flight, and two did overlap");
    let mut arrivals: Vec<_> = fake.received().iter().map(|r| r.at).collect();
    arrivals.sort();
    assert_eq!(arrivals.len(), 8);
    for pair in arrivals.windows(2) {
        let gap = pair[1] - pair[0];
        // The daemon starts them 60 ms apart; the network between may take a few ms off one.
        assert!(
            gap >= Duration::from_millis(50),
            "{gap:?} between two starts: {arrivals:?}"
        );
    }
    serve.stop();
    for n in 0..8 {
        let cassette = read_json(&dir.path().join(format!("c/pace--t{n}/openai.json")));
        assert_eq!(
            cassette["interactions"].as_array().unwrap().len(),
            1,
            "{cassette}"
        );
    }
}

/// A rate limit that lifts: its 429s (`retry-after-ms`) are waited out and the request asked
/// again; the test gets the answer, and only the answer is recorded. One that says nothing of
/// when is passed on at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_that_says_when_is_waited_out_and_never_saved() {
    let fake = FakeProvider::start().await;
    fake.state
        .limited
        .store(2, std::sync::atomic::Ordering::SeqCst);
    let dir = tempfile::tempdir().unwrap();
    let serve = Serve::recording(dir.path(), &format!("openai={}", fake.url()));
    let ask = |test: &str, prompt: &str| {
        let url = format!("{}/openai/v1/chat/completions", serve.for_test(test));
        let body = chat(prompt, false);
        async move {
            let answer = http().post(url).json(&body).send().await.unwrap();
            (answer.status().as_u16(), answer.text().await.unwrap())
        }
    };
    let (status, said) = ask("pace$lifts", "LIMIT429 hello").await;
    assert_eq!(status, 200, "{said}");
    let sent = fake.received();
    assert_eq!(sent.len(), 3, "two 429s, then the answer");
    assert!(
        sent[2].at - sent[0].at >= Duration::from_millis(600),
        "waited as asked"
    );
    let (status, _) = ask("pace$never", "RATE429 hello").await;
    assert_eq!(status, 429, "no word of when: passed on");
    assert_eq!(fake.received().len(), 4, "and not asked again");
    serve.stop();
    let cassette = read_json(&dir.path().join("c/pace--lifts/openai.json"));
    let interactions = cassette["interactions"].as_array().unwrap();
    assert_eq!(interactions.len(), 1, "{cassette}");
    assert_eq!(interactions[0]["response"]["status"], 200, "{cassette}");
    assert!(
        !dir.path().join("c/pace--never").exists(),
        "a 429 is never saved"
    );
}

/// A Gemini 429's body is read to learn when to come back, and quoted in what the client is
/// told and the run logs when it says nothing usable: a key it echoes (a gateway's "limit
/// reached for key ...") is replaced there as everywhere else the run shows one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gemini_429_that_echoes_the_key_is_quoted_without_it() {
    const KEY: &str = "gwkey-7f3a9b2c1d5e6f708192a3b4";
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                // One request, read until its (small) body has arrived.
                let mut seen = Vec::new();
                let mut buf = [0u8; 4096];
                while !(String::from_utf8_lossy(&seen).contains("\r\n\r\n") && seen.ends_with(b"}"))
                {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                }
                let body = format!(
                    r#"{{"error":{{"code":429,"message":"Quota exceeded for key {KEY}","status":"RESOURCE_EXHAUSTED"}}}}"#
                );
                let answer = format!(
                    "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(answer.as_bytes()).await;
            });
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let serve = Serve::recording(dir.path(), &format!("gemini={url}"));
    let answer = http()
        .post(format!(
            "{}/gemini/v1beta/models/gemini-1.5-flash:generateContent",
            serve.for_test("pace$echo")
        ))
        .header("x-goog-api-key", KEY)
        .json(&json!({"contents": [{"parts": [{"text": "hello"}]}]}))
        .send()
        .await
        .unwrap();
    let status = answer.status().as_u16();
    let said = answer.text().await.unwrap();
    assert_eq!(status, 429, "{said}");
    assert!(said.contains("Quota exceeded for key"), "quoted: {said}");
    assert!(!said.contains(KEY), "the key is not: {said}");
    serve.stop();
}
