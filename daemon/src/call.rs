//! One request as the journal and the log file know it: its cassette, method, path, key and
//! place in its sequence, from the moment the daemon begins on it until its outcome is logged.

use cassettes::{Entry, Key};
use std::sync::Arc;

/// Which request a record is about: built once per request, consumed when it is logged.
pub struct Call {
    /// The cassette it belongs to.
    pub entry: Arc<Entry>,
    /// Its method.
    pub method: http::Method,
    /// The upstream path, e.g. `/v1/chat/completions`.
    pub path: String,
    /// Its key.
    pub key: Key,
    /// 0 for the first request with this key in its test, 1 for the second, ...
    pub ordinal: usize,
    /// When the daemon began on it, for the log's milliseconds.
    pub started: std::time::Instant,
    /// The answer's size, where it is known when the outcome is (a replayed or recorded
    /// body, a session's frames).
    pub bytes: Option<u64>,
    /// A WebSocket session rather than one HTTP exchange: its log lines are headed
    /// `session{…}`, without the method.
    pub session: bool,
    /// The exchange under way: its test's end and the run's end wait until it is journalled.
    pub flight: Option<cassettes::Flight>,
    /// What a recorded answer said of its model and usage, for the run log.
    pub answer: Option<Box<(Option<String>, Option<serde_json::Value>)>>,
}
