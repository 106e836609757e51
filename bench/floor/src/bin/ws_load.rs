//! Load for the session bench: N clients each run Realtime text turns back to back for a
//! while, against any server (cargo-llmreplay replaying, aimock mocking), and it prints
//! sessions per second and the latency of each server frame after the client frame it answers.
//!   ws_load <ws://...> <clients> <seconds> <prompt>
//! A session: connect, read `session.created`, send `conversation.item.create` and read its
//! acknowledgement, send `response.create` and read until `response.done`, close.

use futures_util::{SinkExt, StreamExt};
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::Message;

#[derive(Default)]
struct Tally {
    sessions: u64,
    frames: u64,
    latencies_us: Vec<u64>,
    errors: u64,
}

async fn session(url: &str, prompt: &str, tally: &mut Tally) -> Result<(), String> {
    let (mut ws, _) = tokio_tungstenite::connect_async(url)
        .await
        .map_err(|e| e.to_string())?;
    let first = loop {
        match ws.next().await {
            Some(Ok(Message::Text(t))) => break t.as_str().to_string(),
            Some(Ok(_)) => continue,
            Some(Err(e)) => return Err(e.to_string()),
            None => return Err("closed early".to_string()),
        }
    };
    if !first.contains("session.created") {
        return Err(format!("expected session.created, got {first}"));
    }
    tally.frames += 1;
    let item = format!(
        r#"{{"type":"conversation.item.create","item":{{"type":"message","role":"user","content":[{{"type":"input_text","text":"{prompt}"}}]}}}}"#
    );
    for (send, until) in [(item.as_str(), "conversation.item."), (r#"{"type":"response.create"}"#, "response.done")] {
        let sent = Instant::now();
        ws.send(Message::text(send.to_string()))
            .await
            .map_err(|e| e.to_string())?;
        loop {
            let text = match ws.next().await {
                Some(Ok(Message::Text(t))) => t.as_str().to_string(),
                Some(Ok(_)) => continue,
                Some(Err(e)) => return Err(e.to_string()),
                None => return Err("closed early".to_string()),
            };
            tally.frames += 1;
            tally.latencies_us.push(sent.elapsed().as_micros() as u64);
            if text.contains("\"error\"") && text.contains("\"type\":\"error\"") {
                return Err(text);
            }
            if text.contains(until) {
                break;
            }
        }
    }
    let _ = ws.close(None).await;
    tally.sessions += 1;
    Ok(())
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let url = args[1].clone();
    let clients: usize = args[2].parse().unwrap();
    let seconds: f64 = args[3].parse().unwrap();
    let prompt = args[4].clone();
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let (url, prompt) = (url.clone(), prompt.clone());
            tokio::spawn(async move {
                let mut tally = Tally::default();
                // At least one session each: 0 seconds runs exactly one (to record it).
                loop {
                    if let Err(e) = session(&url, &prompt, &mut tally).await {
                        tally.errors += 1;
                        if tally.errors == 1 {
                            eprintln!("ws_load: {e}");
                        }
                    }
                    if Instant::now() >= deadline {
                        break;
                    }
                }
                tally
            })
        })
        .collect();
    let mut all = Tally::default();
    for t in tasks {
        let t = t.await.unwrap();
        all.sessions += t.sessions;
        all.frames += t.frames;
        all.errors += t.errors;
        all.latencies_us.extend(t.latencies_us);
    }
    let elapsed = started.elapsed().as_secs_f64();
    all.latencies_us.sort_unstable();
    let pct = |p: f64| {
        all.latencies_us
            .get(((all.latencies_us.len() as f64 - 1.0) * p) as usize)
            .copied()
            .unwrap_or(0)
    };
    println!(
        "{{\"sessions_per_s\": {:.1}, \"frames_per_session\": {:.1}, \"p50_us\": {}, \"p99_us\": {}, \"errors\": {}}}",
        all.sessions as f64 / elapsed,
        all.frames as f64 / all.sessions.max(1) as f64,
        pct(0.5),
        pct(0.99),
        all.errors
    );
}
