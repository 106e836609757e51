//! The guard on what a store writes: an interaction's answer (whole bodies, stream events,
//! session frames of both sides, headers) loses its secrets by name, value and shape as its
//! request did when it was keyed; what is still left is refused, named by place and rule.

use crate::format::{ChunkContent, Interaction, ResponseBody};
use crate::secrets::{find_with, Found, Guard};

/// Whether a path names secrets by one of its segments (`/v1/realtime/client_secrets`, Azure
/// Key Vault's `/secrets/NAME`): its answer's bare `value` is the secret itself.
fn names_secrets(path: &str) -> bool {
    path.split('/').any(providers::redact::is_secret_name)
}

/// A JSON answer's top-level `value` string made the placeholder, parsed or as text (in the
/// layout it was written); whether there was one to change. A compressed answer is left to the
/// other rules (a value's shape, a known value).
fn bare_value(body: &mut crate::body::Body) -> bool {
    use crate::body::Body;
    use providers::redact::PLACEHOLDER;
    use serde_json::Value;
    let secret = |value: &Value| match value.get("value") {
        Some(Value::String(s)) if !s.is_empty() && s != PLACEHOLDER => Some(s.clone()),
        _ => None,
    };
    match body {
        Body::Json { value, .. } => match secret(value) {
            Some(_) => {
                value["value"] = Value::String(PLACEHOLDER.into());
                true
            }
            None => false,
        },
        Body::Text(text) => {
            let t = text.trim_start();
            if !t.starts_with('{') || text.len() > providers::redact::TEXT_PARSE_LIMIT {
                return false;
            }
            let Ok(mut value) = serde_json::from_str::<Value>(text) else {
                return false;
            };
            let Some(s) = secret(&value) else {
                return false;
            };
            let written = serde_json::to_string(&s).expect("a string serialises");
            *text = match text.contains(&written) {
                true => text.replace(&written, &format!("\"{PLACEHOLDER}\"")),
                false => {
                    value["value"] = Value::String(PLACEHOLDER.into());
                    value.to_string()
                }
            };
            true
        }
        Body::Bytes(bytes) => {
            let Ok(text) = std::str::from_utf8(bytes) else {
                return false;
            };
            let mut as_text = Body::Text(text.to_string());
            if !bare_value(&mut as_text) {
                return false;
            }
            let Body::Text(t) = as_text else {
                return false;
            };
            *body = Body::exact(t.as_bytes());
            true
        }
        _ => false,
    }
}

/// The fields that hold a stream's text a piece at a time: chat deltas' `content`, Anthropic's
/// and Gemini's `text`, tool calls' `arguments` and `partial_json`, the Responses API's `delta`.
const DELTA_FIELDS: &[&str] = &[
    "content",
    "text",
    "arguments",
    "partial_json",
    "delta",
    "thinking",
    "refusal",
    "transcript",
];

/// Calls `found` with each string under a [`DELTA_FIELDS`] name in `value`, in order, with its
/// JSON pointer.
fn deltas(value: &serde_json::Value, at: &mut String, found: &mut dyn FnMut(&str, &str)) {
    use serde_json::Value;
    let len = at.len();
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                at.truncate(len);
                at.push('/');
                at.push_str(&k.replace('~', "~0").replace('/', "~1"));
                match v {
                    Value::String(s) if DELTA_FIELDS.contains(&k.as_str()) => found(at, s),
                    _ => deltas(v, at, found),
                }
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                at.truncate(len);
                at.push_str(&format!("/{i}"));
                deltas(v, at, found);
            }
        }
        _ => {}
    }
    at.truncate(len);
}

impl Guard {
    /// Replaces the secrets of the answer, by name, value and shape: a whole body (JSON in its
    /// layout; text, SSE, XML or form as written; bytes that are text once gzip or deflate is
    /// undone, or past the size parsed, read loosely), stream events, session frames of both
    /// sides, text and binary. Returns whether anything changed.
    pub fn redact_answer(&self, interaction: &mut Interaction) -> bool {
        let encoding = interaction
            .response
            .content_encoding()
            .map(str::to_ascii_lowercase);
        let mut decoded = false;
        let mut changed = false;
        match &mut interaction.response.body {
            ResponseBody::Whole(b) => {
                if names_secrets(&interaction.request.path) {
                    changed |= bare_value(b);
                }
                let (c, d) = self.body(b, encoding.as_deref());
                changed |= c;
                decoded |= d;
            }
            ResponseBody::Session(frames) => {
                for f in frames.iter_mut() {
                    changed |= self.body(&mut f.body, None).0;
                    if let Some(close) = &mut f.close {
                        if let Some(t) = self.plain(&close.reason) {
                            close.reason = t;
                            changed = true;
                        }
                    }
                }
            }
            ResponseBody::Stream { chunks, .. } => {
                for chunk in chunks.iter_mut() {
                    match &mut chunk.content {
                        ChunkContent::Event { data, .. } => {
                            changed |= !self.fields.json(data).is_empty();
                            changed |= self.scrubber().json(data);
                        }
                        ChunkContent::Raw(text) => {
                            if let Some(t) = self.plain(text) {
                                *text = t;
                                changed = true;
                            }
                        }
                    }
                }
                changed |= self.across_deltas(chunks);
            }
        }
        if decoded {
            // The body is kept decoded now; replay sends it as such.
            let headers = &mut interaction.response.headers;
            headers.remove("content-encoding");
            headers.remove("content-length");
        }
        for (name, value) in interaction.response.headers.iter_mut() {
            // A redirect's URL carries what its query or fragment names as secret (an OAuth
            // callback's `code`, the implicit flow's `#access_token=`).
            if name.eq_ignore_ascii_case("location")
                || name.eq_ignore_ascii_case("content-location")
            {
                if let std::borrow::Cow::Owned(u) = providers::redact::url(value) {
                    *value = u;
                    changed = true;
                }
            }
            if let Some(t) = self.scrubber().text(value) {
                *value = t;
                changed = true;
            }
        }
        changed |= self.request(&mut interaction.request.body);
        changed
    }

    /// A secret a stream wrote across its deltas (a model echoing a key, or writing one of a
    /// key's shapes, a few characters an event): the deltas' text read as one, and each piece
    /// of a secret cut from its delta, the first piece's place taking the placeholder, so that
    /// the assembled answer reads as a whole answer's would. Whether anything changed.
    fn across_deltas(&self, chunks: &mut [crate::format::Chunk]) -> bool {
        // Each delta string, by chunk and JSON pointer, and all of them end to end.
        let mut pieces: Vec<(usize, String, std::ops::Range<usize>)> = Vec::new();
        let mut text = String::new();
        for (i, chunk) in chunks.iter().enumerate() {
            if let ChunkContent::Event { data, .. } = &chunk.content {
                deltas(data, &mut String::new(), &mut |pointer, s| {
                    let at = text.len();
                    text.push_str(s);
                    pieces.push((i, pointer.to_string(), at..text.len()));
                });
            }
        }
        if pieces.len() < 2 || !self.scrubber().holds(&text) {
            return false;
        }
        let spans = self.scrubber().spans(&text);
        let mut changed = false;
        for (i, pointer, range) in pieces {
            let cut: Vec<&std::ops::Range<usize>> = spans
                .iter()
                .filter(|s| s.start < range.end && s.end > range.start)
                .collect();
            if cut.is_empty() {
                continue;
            }
            let mut out = String::new();
            let mut at = range.start;
            for span in cut {
                if span.start > at {
                    out.push_str(&text[at..span.start]);
                }
                if span.start >= range.start {
                    out.push_str(providers::redact::PLACEHOLDER);
                }
                at = span.end.min(range.end).max(at);
            }
            if at < range.end {
                out.push_str(&text[at..range.end]);
            }
            if let ChunkContent::Event { data, .. } = &mut chunks[i].content {
                if let Some(serde_json::Value::String(s)) = data.pointer_mut(&pointer) {
                    *s = out;
                    changed = true;
                }
            }
        }
        changed
    }

    /// The first secret the interaction, as it would be stored, still holds.
    pub fn check(&self, interaction: &Interaction) -> Option<Found> {
        let value = serde_json::to_value(interaction).ok()?;
        find_with(&value, self.scrubber())
    }
}
