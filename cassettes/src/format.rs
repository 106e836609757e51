//! The cassette file: what one test exchanged with one provider, as pretty JSON that a reviewer
//! can read in a pull request, and that replays byte for byte. Bodies and stream chunks are kept
//! as JSON when re-serialising gives back exactly the bytes received; otherwise as raw text.

use crate::key::{Key, RecordedRequest};
use crate::Error;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// The format version written in every cassette's `llmreplay` field.
pub const FORMAT_VERSION: u32 = 1;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Cassette {
    pub llmreplay: u32,
    pub test: String,
    pub provider: String,
    pub interactions: Vec<Interaction>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Interaction {
    pub key: Key,
    pub request: RecordedRequest,
    pub response: RecordedResponse,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timing: Option<Timing>,
    /// Derived for review (the answer as text); replay ignores it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<Summary>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecordedResponse {
    pub status: u16,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<Value>,
    /// How `body` was laid out on the wire, when not compact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_layout: Option<Layout>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<StreamFormat>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunks: Option<Vec<Chunk>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Layout {
    CompactNewline,
    Pretty,
    PrettyNewline,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamFormat {
    /// Server-sent events (OpenAI, Anthropic, Gemini).
    Sse,
    /// One JSON object a line (Ollama).
    Ndjson,
}

/// One stream event: parsed (`event`, `data`) when that reproduces its bytes, else `raw`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Chunk {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<String>,
    /// Milliseconds from sending the request to this chunk's arrival, for `--realtime`.
    #[serde(default)]
    pub at_ms: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    pub ttfb_ms: u64,
    pub total_ms: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub text: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Value>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub name: String,
    pub arguments: String,
}

/// Each interaction's place among the recordings of its key: 0 for the first with that key,
/// 1 for the second. The n-th request with a key replays the n-th recording, so (key, ordinal)
/// names an interaction across runs, re-records and versions of a file.
pub fn ordinals(interactions: &[Interaction]) -> Vec<usize> {
    let mut seen: std::collections::HashMap<&Key, usize> = std::collections::HashMap::new();
    interactions
        .iter()
        .map(|x| {
            let n = seen.entry(&x.key).or_insert(0);
            *n += 1;
            *n - 1
        })
        .collect()
}

impl Cassette {
    pub fn new(test: &str, provider: &str) -> Self {
        Cassette {
            llmreplay: FORMAT_VERSION,
            test: test.to_string(),
            provider: provider.to_string(),
            interactions: Vec::new(),
        }
    }

    /// Parses a cassette file's text; errors name the file and the line.
    pub fn parse(path: &Path, text: &str) -> Result<Self, Error> {
        let cassette: Cassette = serde_json::from_str(text).map_err(|e| Error::Corrupt {
            path: path.to_path_buf(),
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        })?;
        if cassette.llmreplay != FORMAT_VERSION {
            return Err(Error::Corrupt {
                path: path.to_path_buf(),
                line: 1,
                column: 1,
                message: format!(
                    "cassette format version {} is not {FORMAT_VERSION}; upgrade cargo-llmreplay",
                    cassette.llmreplay
                ),
            });
        }
        Ok(cassette)
    }

    /// Pretty JSON with a final newline: the same cassette always gives the same bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = serde_json::to_vec_pretty(self).expect("cassettes serialise");
        out.push(b'\n');
        out
    }
}

impl RecordedResponse {
    /// A non-streamed body, kept as JSON when that reproduces it exactly.
    pub fn with_body(status: u16, headers: BTreeMap<String, String>, body: &[u8]) -> Self {
        let mut response = RecordedResponse {
            status,
            headers,
            body: None,
            body_layout: None,
            body_text: None,
            stream: None,
            chunks: None,
        };
        if let Ok(value) = serde_json::from_slice::<Value>(body) {
            let layouts = [
                None,
                Some(Layout::CompactNewline),
                Some(Layout::Pretty),
                Some(Layout::PrettyNewline),
            ];
            for layout in layouts {
                if render_json(&value, layout) == body {
                    response.body = Some(value);
                    response.body_layout = layout;
                    return response;
                }
            }
        }
        response.body_text = Some(String::from_utf8_lossy(body).into_owned());
        response
    }

    /// A stream, split into its events; each event is stamped with the arrival time of the
    /// network frame that completed it.
    pub fn with_stream(
        status: u16,
        headers: BTreeMap<String, String>,
        format: StreamFormat,
        frames: &[(Bytes, u64)],
    ) -> Self {
        let mut text = Vec::new();
        let mut ends = Vec::with_capacity(frames.len());
        for (frame, at) in frames {
            text.extend_from_slice(frame);
            ends.push((text.len(), *at));
        }
        let text = String::from_utf8_lossy(&text);
        let mut chunks = Vec::new();
        let mut start = 0;
        let mut frame = 0;
        for piece in split_events(&text, format) {
            start += piece.len();
            while frame + 1 < ends.len() && ends[frame].0 < start {
                frame += 1;
            }
            let at_ms = ends.get(frame).map_or(0, |e| e.1);
            chunks.push(Chunk::from_text(piece, format, at_ms));
        }
        RecordedResponse {
            status,
            headers,
            body: None,
            body_layout: None,
            body_text: None,
            stream: Some(format),
            chunks: Some(chunks),
        }
    }

    /// The bytes of the body, as they came from upstream.
    pub fn body_bytes(&self) -> Bytes {
        if let Some(chunks) = &self.chunks {
            let format = self.stream.unwrap_or(StreamFormat::Sse);
            let mut out = Vec::new();
            for c in chunks {
                out.extend_from_slice(c.to_text(format).as_bytes());
            }
            return out.into();
        }
        match (&self.body, &self.body_text) {
            (Some(v), _) => render_json(v, self.body_layout).into(),
            (None, Some(t)) => Bytes::from(t.clone()),
            _ => Bytes::new(),
        }
    }

    /// The response with ids, timestamps and headers set aside: what a re-record compares.
    pub fn comparable(&self) -> Value {
        let mut body = match (&self.body, &self.body_text) {
            (Some(v), _) => v.clone(),
            (None, Some(t)) => serde_json::from_str(t).unwrap_or_else(|_| Value::String(t.clone())),
            _ => Value::Null,
        };
        blank_volatile(&mut body);
        let chunks: Vec<Value> = self
            .chunks
            .iter()
            .flatten()
            .map(|c| {
                let mut payload = c.payload(self.stream.unwrap_or(StreamFormat::Sse));
                blank_volatile(&mut payload);
                payload
            })
            .collect();
        serde_json::json!({
            "status": self.status,
            "content_type": self.headers.get("content-type"),
            "body": body,
            "chunks": chunks,
        })
    }

    /// The parsed JSON payloads: the body, or each chunk's data.
    pub fn payloads(&self) -> Vec<Value> {
        if let Some(chunks) = &self.chunks {
            let format = self.stream.unwrap_or(StreamFormat::Sse);
            return chunks
                .iter()
                .map(|c| c.payload(format))
                .map(|p| p.get("data").cloned().unwrap_or(p))
                .collect();
        }
        match (&self.body, &self.body_text) {
            (Some(v), _) => vec![v.clone()],
            (None, Some(t)) => serde_json::from_str(t).into_iter().collect(),
            _ => Vec::new(),
        }
    }
}

/// Fields that differ on every call with the same answer: ids, timestamps, durations.
const VOLATILE_FIELDS: &[&str] = &[
    "id",
    "created",
    "created_at",
    "system_fingerprint",
    "responseId",
    "request_id",
    "total_duration",
    "load_duration",
    "prompt_eval_duration",
    "eval_duration",
];

fn blank_volatile(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                if VOLATILE_FIELDS.contains(&k.as_str()) {
                    *v = Value::Null;
                } else {
                    blank_volatile(v);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(blank_volatile),
        _ => {}
    }
}

fn render_json(value: &Value, layout: Option<Layout>) -> Vec<u8> {
    let mut out = match layout {
        None | Some(Layout::CompactNewline) => serde_json::to_vec(value),
        Some(Layout::Pretty | Layout::PrettyNewline) => serde_json::to_vec_pretty(value),
    }
    .expect("JSON values serialise");
    if matches!(layout, Some(Layout::CompactNewline | Layout::PrettyNewline)) {
        out.push(b'\n');
    }
    out
}

/// Splits stream text after each event terminator (a blank line for SSE, a newline for NDJSON),
/// keeping every byte, so the pieces concatenate back to the input.
fn split_events(text: &str, format: StreamFormat) -> Vec<&str> {
    let mut pieces = Vec::new();
    let mut start = 0;
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let end = match format {
            StreamFormat::Ndjson => (bytes[i] == b'\n').then_some(i + 1),
            StreamFormat::Sse => {
                if bytes[i..].starts_with(b"\n\n") {
                    Some(i + 2)
                } else if bytes[i..].starts_with(b"\r\n\r\n") {
                    Some(i + 4)
                } else {
                    None
                }
            }
        };
        if let Some(end) = end {
            pieces.push(&text[start..end]);
            start = end;
            i = end;
        } else {
            i += 1;
        }
    }
    if start < text.len() {
        pieces.push(&text[start..]);
    }
    pieces
}

impl Chunk {
    fn from_text(text: &str, format: StreamFormat, at_ms: u64) -> Chunk {
        let parsed = match format {
            StreamFormat::Ndjson => text
                .strip_suffix('\n')
                .and_then(|line| serde_json::from_str::<Value>(line).ok())
                .map(|data| (None, data)),
            StreamFormat::Sse => parse_simple_event(text),
        };
        if let Some((event, data)) = parsed {
            let chunk = Chunk {
                event,
                data: Some(data),
                raw: None,
                at_ms,
            };
            if chunk.to_text(format) == text {
                return chunk;
            }
        }
        Chunk {
            event: None,
            data: None,
            raw: Some(text.to_string()),
            at_ms,
        }
    }

    /// This chunk's exact bytes on the wire.
    pub fn to_text(&self, format: StreamFormat) -> String {
        if let Some(raw) = &self.raw {
            return raw.clone();
        }
        let data = self
            .data
            .as_ref()
            .map(|d| serde_json::to_string(d).expect("JSON values serialise"))
            .unwrap_or_default();
        match format {
            StreamFormat::Ndjson => format!("{data}\n"),
            StreamFormat::Sse => match &self.event {
                Some(e) => format!("event: {e}\ndata: {data}\n\n"),
                None => format!("data: {data}\n\n"),
            },
        }
    }

    /// `{event, data}` with data parsed as JSON where it is JSON, whichever form is stored.
    pub fn payload(&self, format: StreamFormat) -> Value {
        if self.raw.is_none() {
            let mut out = serde_json::Map::new();
            if let Some(e) = &self.event {
                out.insert("event".into(), Value::String(e.clone()));
            }
            out.insert("data".into(), self.data.clone().unwrap_or(Value::Null));
            return Value::Object(out);
        }
        let raw = self.raw.as_deref().unwrap_or("");
        if format == StreamFormat::Ndjson {
            let data =
                serde_json::from_str(raw.trim()).unwrap_or_else(|_| Value::String(raw.into()));
            return serde_json::json!({ "data": data });
        }
        let mut event = None;
        let mut data = String::new();
        for line in raw.lines() {
            if let Some(e) = line.strip_prefix("event:") {
                event = Some(e.trim().to_string());
            } else if let Some(d) = line.strip_prefix("data:") {
                if !data.is_empty() {
                    data.push('\n');
                }
                data.push_str(d.strip_prefix(' ').unwrap_or(d));
            }
        }
        let data = serde_json::from_str(&data).unwrap_or(Value::String(data));
        let mut out = serde_json::Map::new();
        if let Some(e) = event {
            out.insert("event".into(), Value::String(e));
        }
        out.insert("data".into(), data);
        Value::Object(out)
    }
}

/// `[event: E\n]data: JSON\n\n` and nothing else, the common shape of provider events.
fn parse_simple_event(text: &str) -> Option<(Option<String>, Value)> {
    let body = text.strip_suffix("\n\n")?;
    let mut lines = body.split('\n');
    let first = lines.next()?;
    let (event, data_line) = match first.strip_prefix("event: ") {
        Some(e) => (Some(e.to_string()), lines.next()?),
        None => (None, first),
    };
    if lines.next().is_some() {
        return None;
    }
    let data = serde_json::from_str(data_line.strip_prefix("data: ")?).ok()?;
    Some((event, data))
}

/// Bytes made once, at load time, so that a replay is a lookup and a write.
#[derive(Clone, Debug)]
pub struct Prepared {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    /// The whole body, chunks concatenated.
    pub body: Bytes,
    /// For streams: each chunk's bytes and arrival time, for `--realtime`.
    pub chunks: Option<Vec<(Bytes, u64)>>,
    pub ttfb_ms: u64,
}

impl Prepared {
    pub fn of(interaction: &Interaction) -> Prepared {
        let response = &interaction.response;
        let chunks = response.chunks.as_ref().map(|chunks| {
            let format = response.stream.unwrap_or(StreamFormat::Sse);
            chunks
                .iter()
                .map(|c| (Bytes::from(c.to_text(format)), c.at_ms))
                .collect::<Vec<_>>()
        });
        let body = match &chunks {
            Some(c) => c
                .iter()
                .map(|(b, _)| &b[..])
                .collect::<Vec<_>>()
                .concat()
                .into(),
            None => response.body_bytes(),
        };
        Prepared {
            status: response.status,
            headers: response
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            body,
            chunks,
            ttfb_ms: interaction.timing.as_ref().map_or(0, |t| t.ttfb_ms),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn frames(parts: &[&str]) -> Vec<(Bytes, u64)> {
        parts
            .iter()
            .enumerate()
            .map(|(i, p)| (Bytes::from(p.to_string()), i as u64 * 10))
            .collect()
    }

    #[test]
    fn json_bodies_keep_their_layout() {
        for body in [
            r#"{"b":1,"a":[1,2]}"#.to_string(),
            "{\"b\":1}\n".to_string(),
            serde_json::to_string_pretty(&json!({"z": 1, "a": {"x": []}})).unwrap() + "\n",
            "{ \"odd\" :  1 }".to_string(),
            "not json at all".to_string(),
        ] {
            let r = RecordedResponse::with_body(200, BTreeMap::new(), body.as_bytes());
            assert_eq!(r.body_bytes(), body.as_bytes(), "{body}");
        }
        let r = RecordedResponse::with_body(200, BTreeMap::new(), br#"{"b":1,"a":2}"#);
        assert!(r.body.is_some() && r.body_text.is_none());
    }

    #[test]
    fn sse_streams_split_into_events_and_replay_exactly() {
        // Frames cut across event boundaries, as the network does.
        let parts = [
            "event: message_start\ndata: {\"type\":\"message_start\"}\n\ndata: {\"x\"",
            ":1}\n\n",
            "data: [DONE]\n\n",
        ];
        let r =
            RecordedResponse::with_stream(200, BTreeMap::new(), StreamFormat::Sse, &frames(&parts));
        let chunks = r.chunks.as_ref().unwrap();
        assert_eq!(chunks.len(), 3);
        assert_eq!(chunks[0].event.as_deref(), Some("message_start"));
        assert_eq!(chunks[1].data, Some(json!({"x": 1})));
        assert_eq!(chunks[1].at_ms, 10, "stamped when its last byte arrived");
        assert_eq!(chunks[2].raw.as_deref(), Some("data: [DONE]\n\n"));
        assert_eq!(r.body_bytes(), parts.concat().as_bytes());
        let p = Prepared::of(&Interaction {
            key: Key::of(&crate::Normalizer::default().request("POST", "/", None, b"", &[])),
            request: crate::Normalizer::default().request("POST", "/", None, b"", &[]),
            response: r,
            timing: None,
            summary: None,
        });
        assert_eq!(p.body, parts.concat().as_bytes());
        assert_eq!(p.chunks.unwrap().len(), 3);
    }

    #[test]
    fn crlf_and_ndjson_streams_replay_exactly() {
        let gemini = ["data: {\"a\":1}\r\n\r\n", "data: {\"a\":2}\r\n\r\n"];
        let r = RecordedResponse::with_stream(
            200,
            BTreeMap::new(),
            StreamFormat::Sse,
            &frames(&gemini),
        );
        assert_eq!(r.body_bytes(), gemini.concat().as_bytes());
        assert_eq!(r.payloads(), vec![json!({"a":1}), json!({"a":2})]);
        let ollama = ["{\"message\":{\"content\":\"Hi\"},\"done\":false}\n{\"done\":true}\n"];
        let r = RecordedResponse::with_stream(
            200,
            BTreeMap::new(),
            StreamFormat::Ndjson,
            &frames(&ollama),
        );
        assert_eq!(r.chunks.as_ref().unwrap().len(), 2);
        assert_eq!(r.body_bytes(), ollama.concat().as_bytes());
    }

    #[test]
    fn volatile_fields_are_not_a_change() {
        let a = RecordedResponse::with_body(
            200,
            BTreeMap::new(),
            br#"{"id":"chatcmpl-1","created":1,"choices":[{"message":{"content":"hi"}}]}"#,
        );
        let b = RecordedResponse::with_body(
            200,
            BTreeMap::new(),
            br#"{"id":"chatcmpl-2","created":2,"choices":[{"message":{"content":"hi"}}]}"#,
        );
        let c = RecordedResponse::with_body(
            200,
            BTreeMap::new(),
            br#"{"id":"chatcmpl-2","created":2,"choices":[{"message":{"content":"ho"}}]}"#,
        );
        assert_eq!(a.comparable(), b.comparable());
        assert_ne!(a.comparable(), c.comparable());
    }

    #[test]
    fn corrupt_cassettes_name_the_line() {
        let e = Cassette::parse(
            Path::new("x/openai.json"),
            "{\n  \"llmreplay\": 1,\n  \"test\": oops\n}",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("x/openai.json") && e.contains("line 3"), "{e}");
    }
}
