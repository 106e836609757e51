//! Memory bench driver: starts `cargo-llmreplay serve --mode record` against a small upstream
//! of its own on 127.0.0.1, sends one large exchange through it, and prints the daemon's RSS
//! after start and its peak (the kernel's high-water mark) as JSON.
//!   mem_load json <cargo-llmreplay> <MiB>       one JSON array of zeros, POSTed and recorded
//!   mem_load session <cargo-llmreplay> <MiB> [FRAME_KIB]
//!                                               a Realtime-style session: the client sends
//!                                               audio appends of FRAME_KIB (60: inline in the
//!                                               cassette; over 64: blobs), the upstream answers
//!                                               each with a delta of the same size
//! Bounded: one exchange each, and the daemon is stopped at the end.

use futures_util::{SinkExt, StreamExt};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::Message;

/// One frame's base64 payload by default: under the 64 KiB a frame may stay inline in the
/// cassette.
const FRAME_KIB: usize = 60;

fn kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// An HTTP upstream that reads a request whole and answers a small JSON body.
async fn http_upstream(listener: TcpListener) {
    loop {
        let (mut s, _) = listener.accept().await.unwrap();
        tokio::spawn(async move {
            let mut buf = Vec::new();
            let mut chunk = vec![0u8; 1 << 16];
            // Head, then as many bytes as content-length says.
            let (head_end, length) = loop {
                let n = s.read(&mut chunk).await.unwrap();
                if n == 0 {
                    return;
                }
                buf.extend_from_slice(&chunk[..n]);
                if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&buf[..i]).to_ascii_lowercase();
                    let length = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse::<usize>().ok())
                        .unwrap_or(0);
                    break (i + 4, length);
                }
            };
            let mut have = buf.len() - head_end;
            while have < length {
                let n = s.read(&mut chunk).await.unwrap();
                if n == 0 {
                    return;
                }
                have += n;
            }
            let body = br#"{"object":"list","data":[],"usage":{"prompt_tokens":1,"total_tokens":1}}"#;
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            s.write_all(head.as_bytes()).await.unwrap();
            s.write_all(body).await.unwrap();
        });
    }
}

/// A WebSocket upstream that answers each client frame with a delta of the same size, and
/// the client's close with its own.
async fn ws_upstream(listener: TcpListener) {
    loop {
        let (s, _) = listener.accept().await.unwrap();
        tokio::spawn(async move {
            let mut ws = tokio_tungstenite::accept_async(s).await.unwrap();
            ws.send(Message::text(r#"{"type":"session.created","event_id":"e0"}"#))
                .await
                .unwrap();
            let mut n = 0;
            while let Some(Ok(m)) = ws.next().await {
                match m {
                    Message::Text(t) => {
                        n += 1;
                        let audio = "A".repeat(t.len().saturating_sub(80));
                        let delta = format!(
                            r#"{{"type":"response.audio.delta","event_id":"e{n}","delta":"{audio}"}}"#
                        );
                        if ws.send(Message::text(delta)).await.is_err() {
                            break;
                        }
                    }
                    Message::Close(_) => break,
                    _ => {}
                }
            }
        });
    }
}

struct Daemon {
    child: std::process::Child,
    base: String,
    _dir: tempfile::TempDir,
}

fn start(binary: &str, upstream: &str) -> Daemon {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(binary)
        .args(["llmreplay", "serve", "--mode", "record", "--cassette-dir", "cas"])
        .args(["--upstream", &format!("openai={upstream}")])
        .current_dir(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let base = line
        .trim()
        .strip_prefix("LLMREPLAY_BASE_URL=")
        .expect("serve prints its base URL")
        .to_string();
    Daemon {
        child,
        base,
        _dir: dir,
    }
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (mode, binary, mib) = (&args[1], &args[2], args[3].parse::<usize>().unwrap());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = format!("http://{}", listener.local_addr().unwrap());
    let daemon = start(binary, &upstream);
    let pid = daemon.child.id();
    let at_start = kib(pid, "VmRSS:");
    let sent = mib << 20;
    match mode.as_str() {
        "json" => {
            tokio::spawn(http_upstream(listener));
            let mut body = String::with_capacity(sent + 16);
            body.push_str("[0");
            while body.len() < sent {
                body.push_str(",0");
            }
            body.push(']');
            let url = format!("{}/t/mem/openai/v1/embeddings", daemon.base);
            let status = post(&url, body).await;
            assert_eq!(status, 200, "the JSON body was not recorded");
        }
        "session" => {
            tokio::spawn(ws_upstream(listener));
            let url = format!(
                "{}/t/mem/openai/v1/realtime?model=m",
                daemon.base.replacen("http://", "ws://", 1)
            );
            let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
            ws.next().await.unwrap().unwrap();
            let frame_kib = args.get(4).map_or(FRAME_KIB, |k| k.parse().unwrap());
            let audio = "B".repeat(frame_kib << 10);
            // Both ways together make `mib`: half from the client, half answered.
            for i in 0..sent / 2 / (frame_kib << 10) {
                let frame = format!(
                    r#"{{"type":"input_audio_buffer.append","event_id":"c{i}","audio":"{audio}"}}"#
                );
                ws.send(Message::text(frame)).await.unwrap();
                ws.next().await.unwrap().unwrap();
            }
            ws.close(None).await.unwrap();
            while let Some(Ok(_)) = ws.next().await {}
        }
        other => panic!("unknown mode {other}: json or session"),
    }
    // The recording is on disk once the daemon stops: read the peak just before.
    stop(daemon, pid, at_start, sent);
}

async fn post(url: &str, body: String) -> u16 {
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_at(rest.find('/').unwrap());
    let mut s = tokio::net::TcpStream::connect(host).await.unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(body.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).await.unwrap();
    String::from_utf8_lossy(&answer)
        .get(9..12)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

fn stop(mut daemon: Daemon, pid: u32, at_start: u64, sent: usize) {
    // Give a session's save a moment to land: the peak includes it once the file exists.
    let cassette = daemon._dir.path().join("cas/mem/openai.json");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !cassette.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(cassette.exists(), "nothing was recorded");
    let peak = kib(pid, "VmHWM:");
    let _ = Command::new("kill").arg("-TERM").arg(pid.to_string()).status();
    let _ = daemon.child.wait();
    println!(
        "{{\"body_mib\": {:.1}, \"rss_at_start_mib\": {:.1}, \"peak_rss_mib\": {:.1}, \"peak_over_body\": {:.2}}}",
        sent as f64 / (1 << 20) as f64,
        at_start as f64 / 1024.0,
        peak as f64 / 1024.0,
        (peak as f64 * 1024.0) / sent as f64
    );
}
