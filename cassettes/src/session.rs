//! WebSocket sessions (OpenAI Realtime, Azure realtime, Gemini Live): the frames of one
//! connection in both directions, each with its time. A text frame is kept as `json` when
//! compact JSON gives its bytes back, else as `text`; a binary one as `base64`; a frame over
//! [`crate::INLINE_LIMIT`] (base64 audio in JSON, mostly) goes to the blob store, so the
//! cassette stays readable.

use crate::body::{Blob, Body, Layout};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Which end sent a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    /// The client (the test).
    Client,
    /// The provider.
    Server,
}

/// One frame as it crossed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawFrame", into = "RawFrame")]
pub struct WsFrame {
    /// Who sent it.
    pub from: Side,
    /// A binary frame (else text).
    pub binary: bool,
    /// Json (compact), Text, Bytes or Blob.
    pub body: Body,
    /// Milliseconds since the upgrade was answered.
    pub at_ms: u64,
    /// A close frame the server sent (its body is then empty): replay sends it and ends the
    /// session there, as the provider did (`1008 quota exceeded`, say).
    pub close: Option<Close>,
}

/// The code and reason of a close frame.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Close {
    /// The close code (1005: none was given).
    pub code: u16,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    /// The reason, if any.
    pub reason: String,
}

impl WsFrame {
    /// A frame as it came: its form chosen so that its bytes come back exactly.
    pub fn new(from: Side, binary: bool, payload: Bytes, at_ms: u64) -> WsFrame {
        let body = if payload.len() > crate::INLINE_LIMIT || binary {
            Body::binary(payload)
        } else {
            match Body::exact(&payload) {
                json @ Body::Json { layout: None, .. } => json,
                Body::Empty => Body::Text(String::new()),
                _ => match String::from_utf8(payload.to_vec()) {
                    Ok(text) => Body::Text(text),
                    Err(_) => Body::binary(payload),
                },
            }
        };
        WsFrame {
            from,
            binary,
            body,
            at_ms,
            close: None,
        }
    }

    /// A close frame from `from`, with its code and reason.
    pub fn close(from: Side, code: u16, reason: String, at_ms: u64) -> WsFrame {
        WsFrame {
            from,
            binary: false,
            body: Body::Empty,
            at_ms,
            close: Some(Close { code, reason }),
        }
    }

    /// The frame's bytes (its blob must have been read).
    pub fn payload(&self) -> Option<Bytes> {
        self.body.bytes()
    }

    /// The frame as JSON, when it is JSON (a blob's once read).
    pub fn json(&self) -> Option<Value> {
        match &self.body {
            Body::Json { value, .. } => Some(value.clone()),
            Body::Text(t) => serde_json::from_str(t).ok(),
            Body::Blob(b) if !self.binary => serde_json::from_slice(b.bytes.as_deref()?).ok(),
            _ => None,
        }
    }
}

#[derive(Serialize, Deserialize)]
struct RawFrame {
    from: Side,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    json: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    base64: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    blob: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    close: Option<Close>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    binary: bool,
    #[serde(default)]
    at_ms: u64,
}

impl TryFrom<RawFrame> for WsFrame {
    type Error = String;
    fn try_from(r: RawFrame) -> Result<Self, String> {
        use base64::Engine as _;
        let forms = [
            r.json.is_some(),
            r.text.is_some(),
            r.base64.is_some(),
            r.blob.is_some(),
            r.close.is_some(),
        ];
        if forms.iter().filter(|f| **f).count() != 1 {
            return Err("a frame has exactly one of json, text, base64, blob or close".into());
        }
        if let Some(close) = r.close {
            return Ok(WsFrame::close(r.from, close.code, close.reason, r.at_ms));
        }
        let body = if let Some(value) = r.json {
            Body::Json {
                value,
                layout: None::<Layout>,
            }
        } else if let Some(text) = r.text {
            Body::Text(text)
        } else if let Some(b64) = r.base64 {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map_err(|e| format!("a frame's base64 does not decode: {e}"))?;
            Body::Bytes(bytes.into())
        } else {
            let sha256 = r.blob.unwrap_or_default();
            // The name becomes a path under blobs/: a hash and nothing else.
            if !crate::body::is_sha256(&sha256) {
                return Err(format!(
                    "a frame's blob {sha256:?} is not a SHA-256 (64 lowercase hex digits)"
                ));
            }
            Body::Blob(Blob {
                sha256,
                bytes: None,
            })
        };
        Ok(WsFrame {
            from: r.from,
            binary: r.binary,
            body,
            at_ms: r.at_ms,
            close: None,
        })
    }
}

impl From<WsFrame> for RawFrame {
    fn from(f: WsFrame) -> RawFrame {
        use base64::Engine as _;
        let mut raw = RawFrame {
            from: f.from,
            json: None,
            text: None,
            base64: None,
            blob: None,
            close: None,
            binary: f.binary,
            at_ms: f.at_ms,
        };
        if let Some(close) = f.close {
            raw.close = Some(close);
            return raw;
        }
        match f.body {
            Body::Json { value, .. } => raw.json = Some(value),
            Body::Text(t) => raw.text = Some(t),
            Body::Bytes(b) => {
                raw.base64 = Some(base64::engine::general_purpose::STANDARD.encode(b))
            }
            Body::Blob(b) => raw.blob = Some(b.sha256),
            Body::Empty => raw.text = Some(String::new()),
            Body::Parts(_) | Body::Digest(_) => raw.text = Some(String::new()),
        }
        raw
    }
}

/// A client frame as replay compares it with the recorded one: ids and timestamps (each
/// family's volatile fields, `event_id` among them) set aside.
pub fn comparable(value: &Value) -> Value {
    let mut v = value.clone();
    blank(&mut v);
    v
}

fn blank(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                if providers::is_volatile(k) {
                    *v = Value::Null;
                } else {
                    blank(v);
                }
            }
        }
        Value::Array(list) => list.iter_mut().for_each(blank),
        _ => {}
    }
}

/// What a session said, for review: the text of its server frames (deltas assembled as the
/// client shows them), and how much audio went each way.
pub fn transcript(frames: &[WsFrame]) -> String {
    let mut text = String::new();
    let mut audio = [0usize; 2];
    for f in frames {
        let Some(v) = f.json() else {
            if f.binary {
                audio[usize::from(f.from == Side::Server)] += f.payload().map_or(0, |b| b.len());
            }
            continue;
        };
        let kind = v.get("type").and_then(Value::as_str).unwrap_or("");
        match (f.from, kind) {
            // OpenAI and Azure Realtime: text and audio transcript deltas.
            (Side::Server, t)
                if t.ends_with("text.delta") || t.ends_with("audio_transcript.delta") =>
            {
                text.push_str(v.get("delta").and_then(Value::as_str).unwrap_or(""));
            }
            (Side::Server, t) if t.ends_with("audio.delta") => {
                audio[1] += base64_len(v.get("delta"));
            }
            (Side::Client, "input_audio_buffer.append") => audio[0] += base64_len(v.get("audio")),
            _ => {}
        }
        // Gemini Live: the model's turn, part by part.
        if let Some(parts) = v
            .pointer("/serverContent/modelTurn/parts")
            .and_then(Value::as_array)
        {
            for part in parts {
                if let Some(t) = part.get("text").and_then(Value::as_str) {
                    text.push_str(t);
                }
                if let Some(data) = part.pointer("/inlineData/data") {
                    audio[1] += base64_len(Some(data));
                }
            }
        }
    }
    for (bytes, who) in [(audio[0], "client"), (audio[1], "server")] {
        if bytes > 0 {
            text.push_str(&format!("\n[audio from the {who}: {bytes} bytes]"));
        }
    }
    text
}

/// The decoded length of a base64 string value.
fn base64_len(v: Option<&Value>) -> usize {
    let s = v.and_then(Value::as_str).unwrap_or("");
    let padding = s.bytes().rev().take_while(|b| *b == b'=').count();
    (s.len() / 4 * 3).saturating_sub(padding)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_keep_their_bytes() {
        let cases: Vec<(bool, Bytes)> = vec![
            (
                false,
                Bytes::from_static(br#"{"type":"session.update","event_id":"e1"}"#),
            ),
            (false, Bytes::from_static(b"{ \"spaced\": true }")),
            (false, Bytes::from_static(b"plain words")),
            (true, Bytes::from_static(&[0, 159, 146, 150])),
            (
                false,
                Bytes::from(format!("{{\"audio\":\"{}\"}}", "A".repeat(70_000))),
            ),
        ];
        for (binary, payload) in cases {
            let frame = WsFrame::new(Side::Client, binary, payload.clone(), 5);
            let json = serde_json::to_string(&frame).unwrap();
            let mut back: WsFrame = serde_json::from_str(&json).unwrap();
            if let Body::Blob(b) = &mut back.body {
                b.bytes = Some(payload.clone());
            }
            assert_eq!(back.payload().unwrap(), payload, "{json}");
            assert_eq!(back.binary, binary);
        }
        let compact = WsFrame::new(Side::Server, false, Bytes::from_static(br#"{"a":1}"#), 0);
        assert_eq!(
            serde_json::to_string(&compact).unwrap(),
            r#"{"from":"server","json":{"a":1},"at_ms":0}"#
        );
    }

    #[test]
    fn transcripts_assemble_deltas() {
        let f = |from, s: &str| WsFrame::new(from, false, Bytes::from(s.to_string()), 0);
        let frames = vec![
            f(
                Side::Client,
                r#"{"type":"input_audio_buffer.append","audio":"AAAA"}"#,
            ),
            f(
                Side::Server,
                r#"{"type":"response.output_text.delta","delta":"Hel"}"#,
            ),
            f(
                Side::Server,
                r#"{"type":"response.output_text.delta","delta":"lo"}"#,
            ),
            f(
                Side::Server,
                r#"{"serverContent":{"modelTurn":{"parts":[{"text":"!"}]}}}"#,
            ),
        ];
        assert_eq!(
            transcript(&frames),
            "Hello!\n[audio from the client: 3 bytes]"
        );
    }
}
