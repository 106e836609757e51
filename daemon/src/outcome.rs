//! How an exchange ended, as every sink reads it: its outcome and, for a miss or an error,
//! what to say about it. A leaf module: the exchange's end and the journal both name it, and it
//! names neither.

pub use runlog::report::Detail;
use serde::Serialize;

/// The start of the message of a recording the last secret guard refused: the client has its
/// answer, and the run fails at its end naming it ([`crate::Journal::not_saved`]).
pub const NOT_SAVED_SECRET: &str =
    "cargo-llmreplay: the recording was not saved, as it holds a secret: ";

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
