//! Secrets in bodies, on their way into a cassette. A recorded answer's secret-named fields
//! (a token endpoint's `access_token`, say) become the placeholder its request's already did,
//! in whole bodies, stream events and session frames alike. Then a last guard: no recording
//! that still holds the value of a key variable of the daemon's environment, or a string of a
//! well-known secret shape, is written; the write fails naming the field and what to do.

use crate::body::Body;
use crate::format::{ChunkContent, Interaction, ResponseBody};
use providers::redact::BodyFields;
use regex::RegexSet;
use serde_json::Value;
use std::sync::OnceLock;

/// Secret shapes no cassette should ever hold, and what each is, for the error: keys whose
/// form their issuers document, so that a match is a key and not a coincidence.
const SHAPES: &[(&str, &str)] = &[
    (
        r"sk-ant-(?:api|admin)\d\d-[A-Za-z0-9_\-]{20,}",
        "an Anthropic API key",
    ),
    (r"sk-proj-[A-Za-z0-9_\-]{20,}", "an OpenAI project key"),
    (
        r"sk-svcacct-[A-Za-z0-9_\-]{20,}",
        "an OpenAI service account key",
    ),
    (r"\bAKIA[0-9A-Z]{16}\b", "an AWS access key id"),
    (r"\bAIza[0-9A-Za-z_\-]{35}\b", "a Google API key"),
    (r"\bghp_[A-Za-z0-9]{36}\b", "a GitHub token"),
    (r"\bgithub_pat_[A-Za-z0-9_]{22,}", "a GitHub token"),
    (r"\bxox[abposr]-[A-Za-z0-9\-]{10,}", "a Slack token"),
    (
        r"-----BEGIN (?:RSA |EC |DSA |OPENSSH |ENCRYPTED )?PRIVATE KEY-----",
        "a private key",
    ),
];

fn shapes() -> &'static RegexSet {
    static SET: OnceLock<RegexSet> = OnceLock::new();
    SET.get_or_init(|| RegexSet::new(SHAPES.iter().map(|(re, _)| re)).expect("valid shapes"))
}

/// What kind of secret `text` holds by its shape, if any.
pub fn shape_in(text: &str) -> Option<&'static str> {
    shapes().matches(text).iter().next().map(|i| SHAPES[i].1)
}

/// A secret found where it must not be written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    /// The JSON pointer of the field that holds it, in the interaction as stored.
    pub pointer: String,
    /// What it is: "the value of OPENAI_API_KEY", "an Anthropic API key".
    pub what: String,
}

/// The first string in `value` that holds one of `values` (by name) or has a secret's shape.
pub fn find(value: &Value, values: &[(String, String)]) -> Option<Found> {
    let mut found = None;
    walk(value, &mut String::new(), &mut |pointer, text| {
        let what = values
            .iter()
            .find(|(_, v)| text.contains(v.as_str()))
            .map(|(name, _)| format!("the value of {name}"))
            .or_else(|| shape_in(text).map(str::to_string));
        match what {
            Some(what) => {
                found = Some(Found {
                    pointer: pointer.to_string(),
                    what,
                });
                true
            }
            None => false,
        }
    });
    found
}

/// Calls `visit` with each string (object keys included) and its pointer until it says stop.
fn walk(value: &Value, at: &mut String, visit: &mut dyn FnMut(&str, &str) -> bool) -> bool {
    let len = at.len();
    let stop = match value {
        Value::String(s) => visit(at, s),
        Value::Array(items) => items.iter().enumerate().any(|(i, v)| {
            at.truncate(len);
            at.push_str(&format!("/{i}"));
            walk(v, at, visit)
        }),
        Value::Object(map) => map.iter().any(|(k, v)| {
            at.truncate(len);
            at.push('/');
            at.push_str(&k.replace('~', "~0").replace('/', "~1"));
            visit(at, k) || walk(v, at, visit)
        }),
        _ => false,
    };
    at.truncate(len);
    stop
}

/// The guard a store applies to every recording it writes.
#[derive(Clone, Debug, Default)]
pub struct Guard {
    fields: BodyFields,
    /// Key variables of the daemon's environment and their values: never written.
    values: Vec<(String, String)>,
}

impl Guard {
    /// Redacts `fields` from answers and refuses `values` (name, value) and secret shapes.
    pub fn new(fields: BodyFields, values: Vec<(String, String)>) -> Self {
        Guard { fields, values }
    }

    /// Replaces the secret-named fields of the answer: a whole body (JSON in its layout, or
    /// text as written), stream events, session frames. Returns whether anything changed.
    pub fn redact_answer(&self, interaction: &mut Interaction) -> bool {
        let mut changed = false;
        let mut body = |b: &mut Body| match b {
            Body::Json { value, .. } => changed |= !self.fields.json(value).is_empty(),
            Body::Text(text) => {
                if let Some(redacted) = self.fields.text(text) {
                    *text = redacted;
                    changed = true;
                }
            }
            _ => {}
        };
        match &mut interaction.response.body {
            ResponseBody::Whole(b) => body(b),
            ResponseBody::Session(frames) => frames.iter_mut().for_each(|f| body(&mut f.body)),
            ResponseBody::Stream { chunks, .. } => {
                for chunk in chunks {
                    if let ChunkContent::Event { data, .. } = &mut chunk.content {
                        changed |= !self.fields.json(data).is_empty();
                    }
                }
            }
        }
        changed
    }

    /// The first secret the interaction, as it would be stored, still holds.
    pub fn check(&self, interaction: &Interaction) -> Option<Found> {
        let value = serde_json::to_value(interaction).ok()?;
        find(&value, &self.values)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::interaction;

    #[test]
    fn shapes_are_found_and_ordinary_text_is_not() {
        for (text, what) in [
            (
                "key sk-ant-api03-abcdefghijklmnopqrstuvwxyz012345",
                "an Anthropic API key",
            ),
            ("sk-proj-ABCDEFGHIJKLMNOPQRSTUVWX", "an OpenAI project key"),
            (
                "X-Amz-Credential=AKIAIOSFODNN7EXAMPLE/20260101",
                "an AWS access key id",
            ),
            (
                "AIzaSyA1234567890abcdefghijklmnopqrstuv",
                "a Google API key",
            ),
            ("ghp_0123456789abcdefghijklmnopqrstuvwxyz", "a GitHub token"),
            ("xoxb-1234567890-abcdef", "a Slack token"),
            ("-----BEGIN RSA PRIVATE KEY-----\nMII", "a private key"),
        ] {
            assert_eq!(shape_in(text), Some(what), "{text}");
        }
        for text in ["sk-test", "You said: Hello", "AKIA is short", "risk-ant-ic"] {
            assert_eq!(shape_in(text), None, "{text}");
        }
    }

    /// A token endpoint's answer loses its tokens in its own layout; an environment key's
    /// value anywhere is found with its field.
    #[test]
    fn answers_are_redacted_and_what_is_left_is_found() {
        let guard = Guard::new(
            BodyFields::default(),
            vec![("OPENAI_API_KEY".into(), "sk-live-0123456789".into())],
        );
        let mut x = interaction(
            "q",
            "{\"access_token\": \"ya29.secret\", \"expires_in\": 3599, \"token_type\": \"Bearer\"}",
        );
        assert!(guard.redact_answer(&mut x));
        let body = x.response.whole().unwrap().bytes().unwrap();
        assert_eq!(
            std::str::from_utf8(&body).unwrap(),
            "{\"access_token\": \"llmreplay-redacted\", \"expires_in\": 3599, \"token_type\": \"Bearer\"}"
        );
        assert_eq!(guard.check(&x), None);
        let leaked = interaction("q", "{\"echo\": \"Bearer sk-live-0123456789\"}");
        let found = guard.check(&leaked).unwrap();
        assert_eq!(found.what, "the value of OPENAI_API_KEY");
        assert!(found.pointer.starts_with("/response/"), "{}", found.pointer);
    }
}
