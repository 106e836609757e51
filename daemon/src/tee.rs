//! Reading an upstream answer into its recorded form, frame by frame: the daemon forwards each
//! frame to its client as it comes while recording, `rerun` only keeps them. One reader, so
//! that both measure time to first byte and cut idle answers the same way.

use crate::provider::NOT_RECORDED;
use bytes::Bytes;
use cassettes::{RecordedResponse, StreamFormat, Timing};
use http::header::CONTENT_TYPE;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::time::{Duration, Instant};

/// The frames of a whole answer, each with the milliseconds since the request went out.
pub(crate) struct Answer {
    frames: Vec<(Bytes, u64)>,
    /// When the headers came, for an answer with no body.
    headers_at: Duration,
    total_ms: u64,
}

/// Reads `body` to its end, calling `forward` with each data frame as it arrives. Fails when
/// the body breaks off or sends nothing for `idle`.
pub(crate) async fn read_answer<F, Fut>(
    mut body: Incoming,
    started: Instant,
    headers_at: Duration,
    idle: Duration,
    mut forward: F,
) -> Result<Answer, io::Error>
where
    F: FnMut(Bytes) -> Fut,
    Fut: Future<Output = ()>,
{
    let mut frames: Vec<(Bytes, u64)> = Vec::new();
    loop {
        let next = match tokio::time::timeout(idle, body.frame()).await {
            Ok(next) => next,
            Err(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "no byte for {}s ([upstream] idle_timeout_s)",
                        idle.as_secs_f64()
                    ),
                ))
            }
        };
        match next {
            Some(Ok(frame)) => {
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                frames.push((data.clone(), started.elapsed().as_millis() as u64));
                forward(data).await;
            }
            Some(Err(e)) => return Err(io::Error::other(e)),
            None => break,
        }
    }
    Ok(Answer {
        frames,
        headers_at,
        total_ms: started.elapsed().as_millis() as u64,
    })
}

impl Answer {
    /// The answer's size in bytes.
    pub(crate) fn len(&self) -> u64 {
        self.frames.iter().map(|(b, _)| b.len() as u64).sum()
    }

    /// The recorded answer and its timing.
    pub(crate) fn into_response(
        self,
        status: u16,
        headers: BTreeMap<String, String>,
        format: Option<StreamFormat>,
    ) -> (RecordedResponse, Timing) {
        let timing = Timing {
            ttfb_ms: self
                .frames
                .first()
                .map_or(self.headers_at.as_millis() as u64, |f| f.1),
            total_ms: self.total_ms,
        };
        (
            recorded_response(status, headers, format, &self.frames),
            timing,
        )
    }
}

/// The response headers a cassette keeps: no secrets, cookies, account ids or transfer details.
pub(crate) fn recordable_headers(
    headers: &http::HeaderMap,
    redact: &[String],
) -> BTreeMap<String, String> {
    headers
        .iter()
        .filter(|(name, _)| {
            let name = name.as_str();
            !NOT_RECORDED.contains(&name)
                && !providers::secret_headers().contains(&name)
                && !redact.iter().any(|r| r == name)
        })
        .map(|(name, value)| {
            (
                name.as_str().to_string(),
                String::from_utf8_lossy(value.as_bytes()).into_owned(),
            )
        })
        .collect()
}

/// The recorded form of a whole answer: a stream's events, or its body.
pub(crate) fn recorded_response(
    status: u16,
    headers: BTreeMap<String, String>,
    format: Option<StreamFormat>,
    frames: &[(Bytes, u64)],
) -> RecordedResponse {
    match format {
        Some(format) => RecordedResponse::with_stream(status, headers, format, frames),
        None => {
            let bytes = frames
                .iter()
                .map(|(b, _)| &b[..])
                .collect::<Vec<_>>()
                .concat();
            RecordedResponse::with_body(status, headers, &bytes)
        }
    }
}

/// The stream format of an answer from its content type; none for a compressed answer, which
/// is kept whole as the bytes received.
pub(crate) fn stream_format(headers: &http::HeaderMap) -> Option<StreamFormat> {
    if headers
        .get(http::header::CONTENT_ENCODING)
        .is_some_and(|e| !e.as_bytes().eq_ignore_ascii_case(b"identity"))
    {
        return None;
    }
    let ct = headers
        .get(CONTENT_TYPE)?
        .to_str()
        .ok()?
        .to_ascii_lowercase();
    if ct.starts_with("text/event-stream") {
        Some(StreamFormat::Sse)
    } else if ct.starts_with("application/x-ndjson") || ct.starts_with("application/jsonl") {
        Some(StreamFormat::Ndjson)
    } else {
        None
    }
}
