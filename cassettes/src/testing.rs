//! Values the unit tests of several modules (and of the review crate) share.

use crate::format::{Interaction, RecordedResponse};
use crate::key::{Key, Normalizer};
use std::collections::BTreeMap;

/// A chat completion interaction: `prompt` as the user's message, `answer` as the body.
pub fn interaction(prompt: &str, answer: &str) -> Interaction {
    let body = format!(r#"{{"messages":[{{"role":"user","content":"{prompt}"}}]}}"#);
    let request = Normalizer::plain().request(
        "POST",
        "/v1/chat/completions",
        None,
        None,
        body.as_bytes(),
        &[],
    );
    Interaction {
        key: Key::of(&request),
        seal: None,
        request,
        response: RecordedResponse::with_body(200, BTreeMap::new(), answer.as_bytes()),
        timing: None,
        summary: None,
        recorded_at: None,
        step: None,
    }
}
