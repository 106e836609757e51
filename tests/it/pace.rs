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
