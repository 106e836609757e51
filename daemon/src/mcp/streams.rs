//! A Streamable HTTP MCP server's streams besides each POST's answer, per test and server
//! (README, "MCP servers"). The GET listening stream is one interaction: the messages it
//! carried, each with how many of the client's requests came before it, replayed each once
//! the client has sent that many. Every event replayed on an event stream carries an id, so
//! that a client that lost a stream resumes it with `Last-Event-ID`. While recording, an
//! answer stream the server ended before its response waits, parked by its last event id,
//! for the GET that resumes it, and the two are saved as one exchange.

use super::Pending;
use bytes::Bytes;
use cassettes::{ProviderName, TestId};
use serde_json::Value;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::{mpsc, watch};

/// The most events, and bytes of them, a session keeps to resume from: older events are not
/// resumed (a tool's large answers must not pile up for a test that never resumes).
const KEPT_EVENTS: usize = 4096;
const KEPT_BYTES: usize = 1 << 20;

/// The most answer streams parked at once, waiting to be resumed: past it the oldest is saved
/// as it stands.
const MAX_PARKED: usize = 1024;

/// Every test's sessions with its Streamable HTTP MCP servers, and the parked answers.
#[derive(Default)]
pub(crate) struct Streams {
    sessions: Mutex<HashMap<(TestId, ProviderName), Arc<Session>>>,
    parked: Mutex<HashMap<(TestId, ProviderName, String), Parked>>,
}

/// What a test's session with one server knows of its streams.
pub(crate) struct Session {
    /// The client's requests since its last `initialize` (pings left out: a client sends them
    /// whenever it likes).
    requests: watch::Sender<u64>,
    events: Mutex<Events>,
}

#[derive(Default)]
struct Events {
    /// The events sent, oldest first, each with its stream; the first's id is `first`.
    kept: VecDeque<(u32, Bytes)>,
    kept_bytes: usize,
    first: u64,
    streams: u32,
    /// Listening streams (the others are POST answers, which end with their response).
    listening: HashSet<u32>,
    /// The connection each listening stream is sent on now.
    attached: HashMap<u32, mpsc::UnboundedSender<Bytes>>,
}

/// While recording: an exchange whose answer stream ended before the request's response.
pub(crate) struct Parked {
    pub pending: Box<Pending>,
    pub steps: Vec<Value>,
    pub started: Instant,
}

impl Streams {
    /// The session of `test` with server `provider`, made on first use.
    pub fn session(&self, test: &TestId, provider: &ProviderName) -> Arc<Session> {
        let mut sessions = self.sessions.lock().expect("sessions lock");
        sessions
            .entry((test.clone(), provider.clone()))
            .or_insert_with(|| {
                Arc::new(Session {
                    requests: watch::Sender::new(0),
                    events: Mutex::default(),
                })
            })
            .clone()
    }

    /// The client ended its session (DELETE): its streams end and its events go.
    pub fn end(&self, test: &TestId, provider: &ProviderName) {
        let ended = self
            .sessions
            .lock()
            .expect("sessions lock")
            .remove(&(test.clone(), provider.clone()));
        if let Some(session) = ended {
            session.events.lock().expect("events lock").attached.clear();
        }
    }

    /// A test said it ended: its sessions go, with the events they kept.
    pub fn end_test(&self, test: &TestId) {
        let mut sessions = self.sessions.lock().expect("sessions lock");
        sessions.retain(|(t, _), _| t != test);
    }

    /// Parks an answer stream that ended at event `last_id` before its response; the oldest
    /// parked one comes back when too many wait.
    pub fn park(
        &self,
        test: &TestId,
        provider: &ProviderName,
        last_id: String,
        parked: Parked,
    ) -> Option<Parked> {
        let mut all = self.parked.lock().expect("parked lock");
        let evicted = if all.len() >= MAX_PARKED {
            let oldest = all
                .iter()
                .min_by_key(|(_, p)| p.started)
                .map(|(k, _)| k.clone());
            oldest.and_then(|k| all.remove(&k))
        } else {
            None
        };
        all.insert((test.clone(), provider.clone(), last_id), parked);
        evicted
    }

    /// The answer stream parked at event `last_id`, taken to be resumed.
    pub fn unpark(&self, test: &TestId, provider: &ProviderName, last_id: &str) -> Option<Parked> {
        self.parked.lock().expect("parked lock").remove(&(
            test.clone(),
            provider.clone(),
            last_id.to_string(),
        ))
    }

    /// Every parked answer, taken: the run ends, and what they hold is saved as it stands.
    pub fn take_parked(&self) -> Vec<Parked> {
        let mut all = self.parked.lock().expect("parked lock");
        all.drain().map(|(_, p)| p).collect()
    }
}

impl Session {
    /// Counts a client request; `initialize` starts the count afresh.
    pub fn request(&self, initialize: bool) {
        self.requests
            .send_modify(|n| *n = if initialize { 1 } else { *n + 1 });
    }

    /// The client's requests so far.
    pub fn requests(&self) -> u64 {
        *self.requests.borrow()
    }

    /// Waits until the client has sent `n` requests.
    pub async fn requests_reach(&self, n: u64) {
        let mut seen = self.requests.subscribe();
        // The sender lives as long as this session, which the caller holds.
        let _ = seen.wait_for(|sent| *sent >= n).await;
    }

    /// A new stream's number: a POST's answer, or a listening stream (`listening`).
    pub fn open(&self, listening: bool) -> u32 {
        let mut events = self.events.lock().expect("events lock");
        events.streams += 1;
        let stream = events.streams;
        if listening {
            events.listening.insert(stream);
        }
        stream
    }

    /// Sends `message` on `stream` as an event with the next id: kept to resume from, passed
    /// to the connection the stream is attached to, and returned.
    pub fn event(&self, stream: u32, message: &Value) -> Bytes {
        let mut events = self.events.lock().expect("events lock");
        let id = events.first + events.kept.len() as u64;
        let text = format!(
            "id: {id}\nevent: message\ndata: {}\n\n",
            serde_json::to_string(message).expect("JSON serialises")
        );
        let bytes = Bytes::from(text);
        events.kept.push_back((stream, bytes.clone()));
        events.kept_bytes += bytes.len();
        while events.kept.len() > KEPT_EVENTS
            || events.kept_bytes > KEPT_BYTES && events.kept.len() > 1
        {
            if let Some((_, old)) = events.kept.pop_front() {
                events.kept_bytes -= old.len();
                events.first += 1;
            }
        }
        if let Some(tx) = events.attached.get(&stream) {
            if tx.send(bytes.clone()).is_err() {
                events.attached.remove(&stream);
            }
        }
        bytes
    }

    /// Sends what a listening stream carries from now on to `tx`.
    pub fn attach(&self, stream: u32, tx: mpsc::UnboundedSender<Bytes>) {
        let mut events = self.events.lock().expect("events lock");
        events.attached.insert(stream, tx);
    }

    /// Resumes the stream of event `last_id` on `tx`: the events it carried after that one,
    /// then, for a listening stream, what it carries from now on. Whether it is a listening
    /// stream; `None` for an id this session never sent or no longer keeps.
    pub fn resume(&self, last_id: &str, tx: mpsc::UnboundedSender<Bytes>) -> Option<bool> {
        let id: u64 = last_id.trim().parse().ok()?;
        let mut events = self.events.lock().expect("events lock");
        let at = usize::try_from(id.checked_sub(events.first)?).ok()?;
        let (stream, _) = *events.kept.get(at)?;
        for (_, bytes) in events
            .kept
            .iter()
            .skip(at + 1)
            .filter(|(s, _)| *s == stream)
        {
            let _ = tx.send(bytes.clone());
        }
        let listening = events.listening.contains(&stream);
        if listening {
            events.attached.insert(stream, tx);
        }
        Some(listening)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn session() -> Arc<Session> {
        let streams = Streams::default();
        streams.session(
            &TestId::new("t"),
            &ProviderName::new("mcp-web").expect("a name"),
        )
    }

    fn resumed(s: &Session, last_id: &str) -> Option<(Vec<String>, bool)> {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let listening = s.resume(last_id, tx)?;
        let mut got = Vec::new();
        while let Ok(b) = rx.try_recv() {
            got.push(String::from_utf8_lossy(&b).into_owned());
        }
        Some((got, listening))
    }

    #[test]
    fn resuming_gives_the_rest_of_that_stream_only() {
        let s = session();
        let answer = s.open(false);
        let listen = s.open(true);
        let first = s.event(answer, &json!({"n": 1}));
        s.event(listen, &json!({"n": 2}));
        s.event(answer, &json!({"n": 3}));
        assert!(String::from_utf8_lossy(&first).starts_with("id: 0\n"));
        let (after, listening) = resumed(&s, "0").expect("kept");
        assert!(!listening);
        assert_eq!(after.len(), 1);
        assert!(after[0].starts_with("id: 2\n") && after[0].contains(r#"{"n":3}"#));
        let (after, listening) = resumed(&s, "1").expect("kept");
        assert_eq!((after.len(), listening), (0, true));
        assert!(resumed(&s, "9").is_none());
        assert!(resumed(&s, "x").is_none());
    }

    #[test]
    fn a_resumed_listening_stream_goes_on_on_its_new_connection() {
        let s = session();
        let listen = s.open(true);
        s.event(listen, &json!({"n": 1}));
        let (tx, mut rx) = mpsc::unbounded_channel();
        assert_eq!(s.resume("0", tx), Some(true));
        s.event(listen, &json!({"n": 2}));
        let next = rx.try_recv().expect("sent on the new connection");
        assert!(String::from_utf8_lossy(&next).contains(r#"{"n":2}"#));
    }

    #[test]
    fn only_the_newest_events_are_kept() {
        let s = session();
        let stream = s.open(false);
        for n in 0..KEPT_EVENTS + 2 {
            s.event(stream, &json!({ "n": n }));
        }
        assert!(resumed(&s, "1").is_none());
        let (after, _) = resumed(&s, "2").expect("kept");
        assert_eq!(after.len(), KEPT_EVENTS - 1);
    }

    #[test]
    fn large_events_are_kept_within_a_byte_bound() {
        let s = session();
        let stream = s.open(false);
        let big = "x".repeat(KEPT_BYTES / 3);
        for _ in 0..4 {
            s.event(stream, &json!({ "text": big }));
        }
        // Each is a little over a third of the bound: the newest two are kept.
        assert!(resumed(&s, "1").is_none(), "the oldest went");
        let (after, _) = resumed(&s, "2").expect("kept");
        assert_eq!(after.len(), 1);
    }

    #[test]
    fn a_test_that_ended_leaves_no_session() {
        let streams = Streams::default();
        let (t, p) = (
            TestId::new("t"),
            ProviderName::new("mcp-web").expect("a name"),
        );
        streams.session(&t, &p).request(true);
        streams.session(&TestId::new("other"), &p).request(true);
        streams.end_test(&t);
        assert_eq!(streams.session(&t, &p).requests(), 0, "a fresh session");
        assert_eq!(streams.session(&TestId::new("other"), &p).requests(), 1);
    }

    #[test]
    fn initialize_starts_the_count_afresh() {
        let s = session();
        s.request(true);
        s.request(false);
        assert_eq!(s.requests(), 2);
        s.request(true);
        assert_eq!(s.requests(), 1);
    }
}
