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
                for chunk in chunks {
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
            }
        }
        if decoded {
            // The body is kept decoded now; replay sends it as such.
            let headers = &mut interaction.response.headers;
            headers.remove("content-encoding");
            headers.remove("content-length");
        }
        for value in interaction.response.headers.values_mut() {
            if let Some(t) = self.scrubber().text(value) {
                *value = t;
                changed = true;
            }
        }
        changed |= self.request(&mut interaction.request.body);
        changed
    }

    /// The first secret the interaction, as it would be stored, still holds.
    pub fn check(&self, interaction: &Interaction) -> Option<Found> {
        let value = serde_json::to_value(interaction).ok()?;
        find_with(&value, self.scrubber())
    }
}
