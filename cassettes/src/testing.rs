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
        verified_at: None,
        step: None,
    }
}

/// `bytes` with `edits` made in turn, as the property tests of the parsers damage valid inputs:
/// each `(op, at, byte)` flips the byte at `at` (op 0), inserts `byte` there (1) or deletes the
/// byte there (2), `at` taken modulo the length.
pub fn mutate(mut bytes: Vec<u8>, edits: &[(u8, usize, u8)]) -> Vec<u8> {
    for &(op, at, b) in edits {
        let n = bytes.len();
        match op {
            0 if n > 0 => bytes[at % n] = b,
            1 => bytes.insert(at % (n + 1), b),
            _ if n > 0 => {
                bytes.remove(at % n);
            }
            _ => {}
        }
    }
    bytes
}
