//! Answers, built: a recording replayed as the bytes it holds (at once, or at its recorded pace),
//! the answer of a fault a test asked for, and errors in the provider family's own shape, which
//! its SDK reads and does not retry. Nothing here decides what to answer; `exchange` does.

use crate::faults::FaultKind;
use crate::provider::Kind;
use bytes::Bytes;
use cassettes::Prepared;
use http::header::CONTENT_TYPE;
use http::{Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use std::io;
use std::sync::Arc;
use std::time::Duration;

/// The body of every answer the daemon gives: prepared bytes, or a stream.
pub type Body = UnsyncBoxBody<Bytes, io::Error>;

/// The answer that ends a request early, boxed: it is far larger than what succeeds.
pub(crate) type Refused = Box<Response<Body>>;

pub(crate) async fn replay(prepared: Arc<Prepared>, realtime: bool) -> Response<Body> {
    let mut response = Response::builder().status(prepared.status);
    for (name, value) in &prepared.headers {
        response = response.header(name, value);
    }
    let body = match (&prepared.chunks, realtime) {
        (Some(chunks), true) => paced(chunks.clone()),
        (None, true) => {
            tokio::time::sleep(Duration::from_millis(prepared.ttfb_ms)).await;
            full(prepared.body.clone())
        }
        // One write for the whole stream: its chunks are already in order.
        (_, false) => full(prepared.body.clone()),
    };
    response.body(body).unwrap_or_else(|e| {
        text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cargo-llmreplay: a recorded header is not valid: {e}"),
        )
    })
}

/// Sends each chunk at its recorded time after the request arrived.
fn paced(chunks: Vec<(Bytes, u64)>) -> Body {
    let start = tokio::time::Instant::now();
    let stream = futures_util::stream::unfold(chunks.into_iter(), move |mut rest| async move {
        let (bytes, at_ms) = rest.next()?;
        tokio::time::sleep_until(start + Duration::from_millis(at_ms)).await;
        Some((Ok(Frame::data(bytes)), rest))
    });
    BodyExt::boxed_unsync(StreamBody::new(stream))
}

/// The answer of a fault, from the recording the request would have got (if any).
pub(crate) fn fault(kind: Kind, fault: FaultKind, recorded: Option<&Prepared>) -> Response<Body> {
    let response = match fault {
        FaultKind::Status {
            status,
            headers,
            body,
        } => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let bytes = body.unwrap_or_else(|| {
                let shape = kind.family().error_body(
                    status.as_u16(),
                    "llmreplay_fault",
                    &format!("cargo-llmreplay: a fault this test asked for ({})", status),
                );
                serde_json::to_vec(&shape).expect("JSON serialises").into()
            });
            let mut b = Response::builder().status(status);
            // The fault's own content type, if it names one, in place of ours: never two.
            if !headers.iter().any(|(name, _)| name == CONTENT_TYPE) {
                b = b.header(CONTENT_TYPE, "application/json");
            }
            for (name, value) in headers {
                b = b.header(name, value);
            }
            b.body(full(bytes))
        }
        FaultKind::Disconnect { after_chunks } => {
            let (head, pieces) = recorded_pieces(recorded);
            let items: Vec<Result<Frame<Bytes>, io::Error>> = pieces
                .into_iter()
                .take(after_chunks)
                .map(|p| Ok(Frame::data(p)))
                .collect();
            // An error ends the body without its end: the connection closes mid-answer, as a
            // real one does. The yield before it lets hyper flush what came first.
            let sent = !items.is_empty();
            let cut = futures_util::stream::once(async move {
                if sent {
                    tokio::task::yield_now().await;
                }
                Err(io::Error::other("a fault this test asked for: disconnect"))
            });
            let body = futures_util::StreamExt::chain(futures_util::stream::iter(items), cut);
            head.body(BodyExt::boxed_unsync(StreamBody::new(body)))
        }
        FaultKind::Malformed => {
            let (head, pieces) = recorded_pieces(recorded);
            let streamed = recorded.is_some_and(|p| p.chunks.is_some());
            let mut bytes: Vec<u8> = Vec::new();
            if streamed {
                // The first event as recorded, then one that breaks off mid-JSON.
                bytes.extend_from_slice(pieces.first().map_or(&b""[..], |p| &p[..]));
                bytes.extend_from_slice(b"data: {\"choices\": [{\"delta\": \n\n");
            } else {
                bytes.extend_from_slice(b"{\"malformed\": ");
            }
            head.body(full(bytes.into()))
        }
        FaultKind::Delay { .. } => unreachable!("a delay is answered as usual"),
    };
    response.unwrap_or_else(|e| {
        text(
            StatusCode::BAD_REQUEST,
            format!("cargo-llmreplay: the fault's headers are not valid: {e}"),
        )
    })
}

/// The recorded status and headers, and the answer in pieces: its stream chunks, or its body
/// in 1 KiB slices. With no recording, a 200 of JSON and nothing in it.
fn recorded_pieces(recorded: Option<&Prepared>) -> (http::response::Builder, Vec<Bytes>) {
    let Some(p) = recorded else {
        let head = Response::builder().header(CONTENT_TYPE, "application/json");
        return (head, Vec::new());
    };
    let mut head = Response::builder().status(p.status);
    for (name, value) in &p.headers {
        head = head.header(name, value);
    }
    let pieces = match &p.chunks {
        Some(chunks) => chunks.iter().map(|(b, _)| b.clone()).collect(),
        None => (0..p.body.len())
            .step_by(1024)
            .map(|i| p.body.slice(i..(i + 1024).min(p.body.len())))
            .collect(),
    };
    (head, pieces)
}

/// An empty body.
pub(crate) fn empty() -> Body {
    full(Bytes::new())
}

pub(crate) fn full(bytes: Bytes) -> Body {
    BodyExt::boxed_unsync(Full::new(bytes).map_err(|never| match never {}))
}

pub(crate) fn json(value: serde_json::Value) -> Response<Body> {
    Response::builder()
        .header(CONTENT_TYPE, "application/json")
        .body(full(
            serde_json::to_vec(&value).expect("JSON serialises").into(),
        ))
        .expect("static headers")
}

pub(crate) fn text(status: StatusCode, message: String) -> Response<Body> {
    Response::builder()
        .status(status)
        .header(CONTENT_TYPE, "text/plain; charset=utf-8")
        .body(full(message.into()))
        .expect("static headers")
}

pub(crate) fn provider_error(
    kind: Kind,
    status: StatusCode,
    code: &str,
    message: &str,
) -> Response<Body> {
    let body = kind.family().error_body(status.as_u16(), code, message);
    Response::builder()
        .status(status)
        .header(CONTENT_TYPE, "application/json")
        .body(full(
            serde_json::to_vec(&body).expect("JSON serialises").into(),
        ))
        .expect("static headers")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A status fault that names its own content type sends that one alone.
    #[test]
    fn a_faults_content_type_replaces_ours() {
        let status = |headers: Vec<(http::HeaderName, http::HeaderValue)>| {
            let fault = FaultKind::Status {
                status: 503,
                headers,
                body: Some(Bytes::from_static(b"busy")),
            };
            super::fault(Kind::OpenAi, fault, None)
                .headers()
                .get_all(CONTENT_TYPE)
                .iter()
                .map(|v| v.to_str().unwrap().to_string())
                .collect::<Vec<_>>()
        };
        let own = vec![(CONTENT_TYPE, http::HeaderValue::from_static("text/plain"))];
        assert_eq!(status(own), ["text/plain"]);
        assert_eq!(status(Vec::new()), ["application/json"]);
    }
}
