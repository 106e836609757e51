//! The floor for replay benchmarks: a hyper 1 server that answers every POST with bytes prepared
//! at start-up and does nothing else. A replay daemon can approach it, never beat it. Kept in the
//! repository (from ../shared/bench-floor, plus the binary answer) so the benches run from a clone.
//!
//!   bench-floor [ADDR]          default 127.0.0.1:4090
//!   POST .../stream  -> 48 SSE frames of an OpenAI chat completion chunk, then [DONE]
//!   POST .../speech  -> 1 MiB of audio bytes (not UTF-8), as audio/mpeg
//!   POST anything    -> one short OpenAI chat completion as JSON
use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::{body::Frame, server::conn::http1, service::service_fn, Request, Response};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use tokio::net::TcpListener;

/// The binary answer: 1 MiB of every byte value, the same on every start.
fn audio() -> Bytes {
    let mut x: u32 = 0x9e37_79b9;
    (0..1 << 20)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 24) as u8
        })
        .collect::<Vec<u8>>()
        .into()
}

#[tokio::main]
async fn main() {
    let addr = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:4090".into());
    let json = Bytes::from_static(br#"{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"Hi there! How can I help you today?"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":9,"total_tokens":18}}"#);
    let mut frames: Vec<Bytes> = (0..48)
        .map(|i| Bytes::from(format!("data: {{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"word{i} \"}}}}]}}\n\n")))
        .collect();
    frames.push(Bytes::from_static(b"data: [DONE]\n\n"));
    let audio = audio();
    let listener = TcpListener::bind(&addr).await.expect("bind");
    eprintln!("bench-floor listening on http://{addr}");
    loop {
        let (socket, _) = listener.accept().await.expect("accept");
        // Without TCP_NODELAY, many small writes per response meet delayed ACKs: ~40 ms per stream.
        socket.set_nodelay(true).expect("nodelay");
        let (json, frames, audio) = (json.clone(), frames.clone(), audio.clone());
        tokio::spawn(async move {
            let service = service_fn(move |req: Request<hyper::body::Incoming>| {
                let (json, frames, audio) = (json.clone(), frames.clone(), audio.clone());
                async move {
                    let path = req.uri().path().to_string();
                    let _ = req.into_body().collect().await;
                    let resp = if path.ends_with("stream") {
                        let chunks = frames.into_iter().map(|f| Ok::<_, Infallible>(Frame::data(f)));
                        Response::builder()
                            .header("content-type", "text/event-stream")
                            .body(StreamBody::new(futures_util::stream::iter(chunks)).boxed())
                    } else if path.ends_with("speech") {
                        Response::builder()
                            .header("content-type", "audio/mpeg")
                            .body(Full::new(audio).map_err(|e| match e {}).boxed())
                    } else {
                        Response::builder()
                            .header("content-type", "application/json")
                            .body(Full::new(json).map_err(|e| match e {}).boxed())
                    };
                    Ok::<_, Infallible>(resp.expect("response"))
                }
            });
            let _ = http1::Builder::new().serve_connection(TokioIo::new(socket), service).await;
        });
    }
}
