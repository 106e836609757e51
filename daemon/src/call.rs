//! One exchange, from the moment the daemon knows its test until it ends: its cassette,
//! method, path, key and place in its sequence. It ends once, in [`Call::end`], which hands its
//! outcome to the journal (and through it the request log and the run log); an exchange
//! dropped before it ended (its client left while the daemon waited) ends as `broken`.

use crate::outcome::{Detail, Outcome};
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
    /// Where its end goes; none once it ended (and for a call a test makes up).
    pub(crate) sink: Option<Arc<dyn Sink>>,
}

/// What hears that a test made its first exchange of the run.
pub trait Began {
    /// `test` made its first exchange.
    fn ran(&self, test: &cassettes::TestId);
}

/// Where exchanges end: the journal, which tells the request log and the run log.
pub trait Sink: Send + Sync {
    /// `call` ended with `outcome`.
    fn ended(&self, call: Call, outcome: Outcome, status: u16, detail: Option<Detail>);
}

impl Call {
    /// A new exchange of `entry`'s test, under way until it ends.
    pub(crate) fn begin<J: Sink + Began + 'static>(
        journal: &Arc<J>,
        entry: Arc<Entry>,
        method: http::Method,
        path: String,
        key: Key,
        session: bool,
    ) -> Call {
        if entry.first_exchange() {
            journal.ran(&entry.test);
        }
        Call {
            flight: Some(entry.begin_exchange()),
            answer: None,
            sink: Some(journal.clone() as Arc<dyn Sink>),
            entry,
            method,
            path,
            key,
            ordinal: 0,
            started: std::time::Instant::now(),
            bytes: None,
            session,
        }
    }

    /// Ends the exchange with its outcome: the one place every transport's exchange ends.
    pub fn end(mut self, outcome: Outcome, status: u16, detail: Option<Detail>) {
        if !outcome.saved_or_replayed() {
            // Its test then keeps its old recordings when it ends: they may be all it has.
            self.entry.note_unsaved();
        }
        if let Some(sink) = self.sink.take() {
            sink.ended(self, outcome, status, detail);
        }
    }
}

impl Call {
    /// Ends an exchange that needed nothing of a recording and is not counted: an MCP
    /// notification or ping with none, a listening stream that stays quiet.
    pub(crate) fn unasked(mut self) {
        self.sink = None;
        if let Some(flight) = self.flight.take() {
            self.entry.end_exchange(flight);
        }
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        let Some(sink) = self.sink.take() else {
            if let Some(flight) = self.flight.take() {
                self.entry.end_exchange(flight);
            }
            return;
        };
        // Never ended: the task serving it was dropped (its client left mid-way). It ends as
        // broken, so the journal, the run log and a test's end waiting on it all hear of it.
        let call = Call {
            entry: self.entry.clone(),
            method: self.method.clone(),
            path: std::mem::take(&mut self.path),
            key: self.key.clone(),
            ordinal: self.ordinal,
            started: self.started,
            bytes: self.bytes,
            session: self.session,
            flight: self.flight.take(),
            answer: None,
            sink: None,
        };
        self.entry.note_unsaved();
        let message = "cargo-llmreplay: the exchange ended before its answer did (the client left?); nothing saved";
        sink.ended(
            call,
            Outcome::Broken,
            499,
            Some(Detail::message(message.into())),
        );
    }
}
