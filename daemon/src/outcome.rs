//! How an exchange ended, as every sink reads it: its outcome and, for a miss or an error,
//! what to say about it. A leaf module: the exchange's end and the journal both name it, and it
//! names neither.

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
/// What happened to one request or session.
pub enum Outcome {
    /// Served from a cassette.
    Hit,
    /// No recording, replay mode: answered with an error.
    Miss,
    /// Proxied and written as a new interaction.
    Recorded,
    /// Proxied and written over the entry it replaces.
    Replaced,
    /// Proxied; the stored entry differs only in volatile fields and was left as it was.
    Unchanged,
    /// Proxied, nothing written (passthrough, or an upstream 429/5xx).
    Passthrough,
    /// Proxied and not saved, since the answer says the request was wrong, not the code under
    /// test: a refused key (401, 403, 407), or a 404 on a path the family does not know.
    Refused,
    /// The upstream stream broke mid-way: passed on broken, not saved.
    Broken,
    /// Anything else that went wrong (upstream unreachable, corrupt cassette, ...).
    Error,
    /// Answered by a fault the test asked for: not forwarded, not saved.
    Fault,
    /// A request that only reports (traces), answered here in replay whatever its body.
    Telemetry,
    /// A message to an MCP server run live (`--live mcp:NAME`) whose answer differs from its
    /// recording: nothing written.
    LiveDiffers,
}

impl Outcome {
    /// False for an exchange that went upstream and whose answer was not saved: its test's
    /// old recordings may be all it has for that call.
    pub fn saved_or_replayed(self) -> bool {
        !matches!(
            self,
            Outcome::Passthrough | Outcome::Refused | Outcome::Broken | Outcome::Error
        )
    }

    /// Its name in the run log and the journal's JSON.
    pub fn key(self) -> &'static str {
        match self {
            Outcome::Hit => "hit",
            Outcome::Miss => "miss",
            Outcome::Recorded => "recorded",
            Outcome::Replaced => "replaced",
            Outcome::Unchanged => "unchanged",
            Outcome::Passthrough => "passthrough",
            Outcome::Refused => "refused",
            Outcome::Broken => "broken",
            Outcome::Error => "error",
            Outcome::Fault => "fault",
            Outcome::Telemetry => "telemetry",
            Outcome::LiveDiffers => "live_differs",
        }
    }

    /// Its word in the log.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Hit => "replayed",
            Outcome::Miss => "missing",
            Outcome::Recorded => "recorded",
            Outcome::Replaced => "re-recorded",
            Outcome::Unchanged => "re-recorded (unchanged)",
            Outcome::Passthrough => "passthrough",
            Outcome::Refused => "refused",
            Outcome::Broken => "broken",
            Outcome::Error => "error",
            Outcome::Fault => "fault",
            Outcome::Telemetry => "telemetry",
            Outcome::LiveDiffers => "live answer differs",
        }
    }

    /// Whether it wrote a recording.
    pub fn saved(self) -> bool {
        matches!(
            self,
            Outcome::Recorded | Outcome::Replaced | Outcome::Unchanged
        )
    }
}

/// Why a request missed or failed, for the report.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Detail {
    #[serde(skip_serializing_if = "Option::is_none")]
    /// The model it asked for.
    pub model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    /// The start of its last user message.
    pub prompt: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    /// The fields that differ from the closest recording.
    pub closest: Option<Vec<String>>,
    /// For each differing field (up to 8; every one, up to 64, for a miss of SDK shape, so that
    /// `rekey` can rebuild the request), what the closest recording holds and what this request
    /// sent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<FieldValues>,
    /// The class of the miss: the most meaningful of its fields' classes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<cassettes::classify::Class>,
    /// The `[match]` rules that would key its volatile fields the same.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<cassettes::classify::Rule>,
    /// The closest recording: its position in the cassette, from 0, and its key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closest_at: Option<(usize, String)>,
    /// The closest recording is the same call (method and path) with other parameters:
    /// re-recording the test replaces it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub same_call: bool,
    /// The host of a call captured as the test's proxy (a hard-coded URL, a tool's API):
    /// one that, missed in replay, would have left the machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    /// The message sent to the client.
    pub message: Option<String>,
}

/// A field's value on one line: compact JSON cut at `max_chars`, `(absent)` for none, as a
/// miss message and the summary show a differing field.
pub fn short_json(value: Option<&serde_json::Value>, max_chars: usize) -> String {
    let Some(value) = value else {
        return "(absent)".into();
    };
    let text = value.to_string();
    let mut short: String = text.chars().take(max_chars).collect();
    if short.len() < text.len() {
        short.push('…');
    }
    short
}

/// A request field that differs from the closest recording.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FieldValues {
    /// Its JSON pointer.
    pub field: String,
    /// The recorded value; absent when the recording has no such field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded: Option<serde_json::Value>,
    /// This request's value; absent when it has no such field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub now: Option<serde_json::Value>,
    /// What kind of difference it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<cassettes::classify::Class>,
    /// The evidence for its class, in a few words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

impl Detail {
    /// A detail that is only a message.
    pub fn message(message: String) -> Self {
        Detail {
            message: Some(message),
            ..Detail::default()
        }
    }
}
