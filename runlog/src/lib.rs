//! The run log of cargo-llmreplay: every run writes one ordered stream of typed events to
//! `target/llmreplay/runs/<run id>/events.ndjson`, one JSON object a line: the run began, each
//! test began and ended (with a structured outcome) and had its recordings settled, each
//! exchange ended with its outcome, and the run ended. The report, the summary and later views
//! are readers of it; so can any other tool be, with only serde (as nextest-metadata serves
//! nextest's data). Readers skip events of kinds they do not know, and a log whose `run_began`
//! names a newer [`VERSION`] than theirs may hold fields they do not know. The report a run
//! writes at its end, `target/llmreplay/report.json`, is [`report::Report`].
#![warn(missing_docs)]

pub mod report;

use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::io::BufRead;
use std::path::Path;

/// The version of the events' schema, in every log's `run_began`.
pub const VERSION: u32 = 1;

/// The file of a run's events in its folder.
pub const EVENTS_FILE: &str = "events.ndjson";

/// One event of a run, as one line of its log; `event` names the kind.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// The first event.
    RunBegan {
        /// [`VERSION`].
        version: u32,
        /// The run's id, its folder's name.
        run: String,
        /// `replay`, `record`, `record-missing` or `passthrough`.
        mode: String,
        /// When, in UTC (RFC 3339).
        started_at: String,
        /// The cassette directory.
        cassette_dir: String,
        /// The cargo-llmreplay that wrote the log.
        tool_version: String,
    },
    /// A test's attempt began (the runner or a plugin said so).
    TestBegan {
        /// The test.
        test: String,
        /// Milliseconds since the run began.
        at_ms: u64,
    },
    /// A test's attempt ended.
    TestEnded {
        /// The test.
        test: String,
        /// How.
        outcome: TestOutcome,
        /// Milliseconds since the run began.
        at_ms: u64,
    },
    /// A test's recordings reached its cassettes, once its exchanges ended.
    TestSettled {
        /// The test.
        test: String,
        /// Recordings new in its cassettes.
        added: usize,
        /// Recordings whose answer changed.
        replaced: usize,
        /// Recordings removed (a re-recorded test no longer made those calls).
        removed: usize,
        /// Why a re-recorded test that passed kept recordings it did not make.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        kept: Option<String>,
        /// Milliseconds since the run began.
        at_ms: u64,
    },
    /// One exchange ended: a request answered, a session closed, an MCP message answered.
    Exchange(Box<Exchange<'static>>),
    /// The last event: every exchange ended and every test settled.
    RunEnded {
        /// Milliseconds since the run began.
        at_ms: u64,
        /// Whether the run was interrupted (SIGINT or SIGTERM).
        interrupted: bool,
    },
}

/// How a test's attempt ended, as the runner or the test's plugin said it: never read from
/// text a test id could shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TestOutcome {
    /// It passed.
    Passed,
    /// It failed.
    Failed,
    /// It was skipped.
    Skipped,
    /// It was interrupted (Ctrl-C, pytest's KeyboardInterrupt).
    Interrupted,
    /// Its process was ended by a signal (a timeout, a crash).
    Killed,
}

impl TestOutcome {
    /// Its word, as plugins send it and the log writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            TestOutcome::Passed => "passed",
            TestOutcome::Failed => "failed",
            TestOutcome::Skipped => "skipped",
            TestOutcome::Interrupted => "interrupted",
            TestOutcome::Killed => "killed",
        }
    }

    /// The outcome a word names.
    pub fn parse(word: &str) -> Option<TestOutcome> {
        Some(match word {
            "passed" => TestOutcome::Passed,
            "failed" | "error" => TestOutcome::Failed,
            "skipped" => TestOutcome::Skipped,
            "interrupted" => TestOutcome::Interrupted,
            "killed" | "crashed" | "timeout" => TestOutcome::Killed,
            _ => return None,
        })
    }
}

/// One exchange as it ended. Its text borrows where it can, so the daemon writes an event
/// per request without copying what the request already holds; what [`read`] gives owns it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Exchange<'a> {
    /// The test.
    pub test: Cow<'a, str>,
    /// Its place among the test's exchanges (across providers and transports), from 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<u64>,
    /// `http`, `session` (WebSocket) or `mcp`.
    pub transport: Cow<'a, str>,
    /// The provider, as its cassette file is named.
    pub provider: Cow<'a, str>,
    /// The method (`POST`, or an MCP method's transport verb).
    pub method: Cow<'a, str>,
    /// The upstream path.
    pub path: Cow<'a, str>,
    /// The request's key.
    pub key: Cow<'a, str>,
    /// Which request with this key in its test: 0 for the first.
    pub ordinal: usize,
    /// `hit`, `miss`, `recorded`, `replaced`, `unchanged`, `passthrough`, `refused`, `broken`,
    /// `error`, `fault`, `telemetry` or `live_differs`.
    pub outcome: Cow<'a, str>,
    /// The status the client got (101 for a session).
    pub status: u16,
    /// When it began, in milliseconds since the run began.
    pub started_ms: u64,
    /// How long it took, in milliseconds.
    pub ms: u64,
    /// The answer's size, where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// The model the answer names, where it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<Cow<'a, str>>,
    /// The answer's usage block, as the provider sent it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Cow<'a, serde_json::Value>>,
}

/// An exchange's event as its line, without the newline, appended to `out`: the same bytes as
/// [`to_line`] of [`Event::Exchange`], written field by field, since a replay writes one per
/// request.
pub fn write_exchange(out: &mut Vec<u8>, x: &Exchange<'_>) {
    fn text(out: &mut Vec<u8>, s: &str) {
        serde_json::to_writer(&mut *out, s).expect("a string serialises");
    }
    fn number(out: &mut Vec<u8>, n: impl itoa::Integer) {
        out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
    }
    out.extend_from_slice(b"{\"event\":\"exchange\",\"test\":");
    text(out, &x.test);
    if let Some(step) = x.step {
        out.extend_from_slice(b",\"step\":");
        number(out, step);
    }
    for (name, value) in [
        (&b",\"transport\":"[..], &x.transport),
        (b",\"provider\":", &x.provider),
        (b",\"method\":", &x.method),
        (b",\"path\":", &x.path),
        (b",\"key\":", &x.key),
    ] {
        out.extend_from_slice(name);
        text(out, value);
    }
    out.extend_from_slice(b",\"ordinal\":");
    number(out, x.ordinal);
    out.extend_from_slice(b",\"outcome\":");
    text(out, &x.outcome);
    out.extend_from_slice(b",\"status\":");
    number(out, x.status);
    out.extend_from_slice(b",\"started_ms\":");
    number(out, x.started_ms);
    out.extend_from_slice(b",\"ms\":");
    number(out, x.ms);
    if let Some(bytes) = x.bytes {
        out.extend_from_slice(b",\"bytes\":");
        number(out, bytes);
    }
    if let Some(model) = &x.model {
        out.extend_from_slice(b",\"model\":");
        text(out, model);
    }
    if let Some(usage) = &x.usage {
        out.extend_from_slice(b",\"usage\":");
        serde_json::to_writer(&mut *out, usage.as_ref()).expect("a value serialises");
    }
    out.push(b'}');
}

/// A run log that could not be read.
#[derive(Debug)]
pub enum ReadError {
    /// The file could not be read.
    Io(std::io::Error),
    /// A line is not an event (its number, from 1, and what the parser said).
    Line(usize, serde_json::Error),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Io(e) => write!(f, "cannot read the run log: {e}"),
            ReadError::Line(n, e) => write!(f, "line {n} of the run log is not an event: {e}"),
        }
    }
}

impl std::error::Error for ReadError {}

/// Reads a run's events. A last line cut short (a run killed while writing) is passed over;
/// an event of a kind this version does not know is skipped.
pub fn read(path: &Path) -> Result<Vec<Event>, ReadError> {
    let file = std::fs::File::open(path).map_err(ReadError::Io)?;
    let lines: Vec<Vec<u8>> = std::io::BufReader::new(file)
        .split(b'\n')
        .collect::<Result<_, _>>()
        .map_err(ReadError::Io)?;
    let last = lines.len();
    let mut out = Vec::new();
    for (n, line) in lines.into_iter().enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<Event>(&line) {
            Ok(event) => out.push(event),
            Err(e) if n + 1 == last && e.is_eof() => break,
            Err(e) => match serde_json::from_slice::<serde_json::Value>(&line) {
                // A kind added by a later version.
                Ok(v)
                    if v.get("event")
                        .and_then(|k| k.as_str())
                        .is_some_and(|k| !KINDS.contains(&k)) =>
                {
                    continue
                }
                _ => return Err(ReadError::Line(n + 1, e)),
            },
        }
    }
    Ok(out)
}

/// The kinds of event this version writes.
const KINDS: &[&str] = &[
    "run_began",
    "test_began",
    "test_ended",
    "test_settled",
    "exchange",
    "run_ended",
];

/// One event as its line, without the newline.
pub fn to_line(event: &Event) -> Vec<u8> {
    serde_json::to_vec(event).expect("events serialise")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exchange() -> Exchange<'static> {
        Exchange {
            test: "app$t\npassed x".into(),
            step: Some(0),
            transport: "http".into(),
            provider: "openai".into(),
            method: "POST".into(),
            path: "/v1/chat/completions".into(),
            key: "ab".repeat(32).into(),
            ordinal: 0,
            outcome: "recorded".into(),
            status: 200,
            started_ms: 2,
            ms: 30,
            bytes: Some(120),
            model: Some("gpt-4o-mini".into()),
            usage: Some(Cow::Owned(serde_json::json!({"prompt_tokens": 3}))),
        }
    }

    /// The field-by-field writer and the event's own serialisation give the same line, with
    /// every optional field there or not, and text that needs escaping.
    #[test]
    fn a_written_exchange_is_the_events_line() {
        let bare = Exchange {
            step: None,
            bytes: None,
            model: None,
            usage: None,
            path: "/v1/\"quoted\"\u{1b}[2J\u{202e}".into(),
            ..exchange()
        };
        for x in [exchange(), bare] {
            let mut written = Vec::new();
            write_exchange(&mut written, &x);
            assert_eq!(
                String::from_utf8(written).unwrap(),
                String::from_utf8(to_line(&Event::Exchange(Box::new(x.clone())))).unwrap()
            );
        }
    }

    fn sample() -> Vec<Event> {
        vec![
            Event::RunBegan {
                version: VERSION,
                run: "20261127T063302Z-42".into(),
                mode: "record".into(),
                started_at: "2026-11-27T06:33:02Z".into(),
                cassette_dir: "tests/cassettes".into(),
                tool_version: "0.1.0".into(),
            },
            Event::TestBegan {
                test: "app$t\npassed x".into(),
                at_ms: 1,
            },
            Event::Exchange(Box::new(exchange())),
            Event::TestEnded {
                test: "app$t\npassed x".into(),
                outcome: TestOutcome::Interrupted,
                at_ms: 40,
            },
            Event::TestSettled {
                test: "app$t\npassed x".into(),
                added: 1,
                replaced: 0,
                removed: 0,
                kept: None,
                at_ms: 41,
            },
            Event::RunEnded {
                at_ms: 50,
                interrupted: true,
            },
        ]
    }

    #[test]
    fn events_round_trip_through_a_file_and_a_test_id_cannot_forge_a_line() {
        let dir = std::env::temp_dir().join(format!("runlog-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(EVENTS_FILE);
        let mut text = Vec::new();
        for e in sample() {
            text.extend(to_line(&e));
            text.push(b'\n');
        }
        // An event of a later version, and a last line cut short.
        text.extend(br#"{"event":"cost_noted","usd":1.5}"#);
        text.push(b'\n');
        text.extend(br#"{"event":"test_be"#);
        std::fs::write(&path, &text).unwrap();
        assert_eq!(read(&path).unwrap(), sample());
        assert_eq!(
            String::from_utf8(text).unwrap().lines().count(),
            sample().len() + 2,
            "a newline in a test id stays inside its JSON string"
        );
        std::fs::write(&path, b"{\"event\":\"run_began\"}\n{}\n").unwrap();
        assert!(matches!(read(&path), Err(ReadError::Line(1, _))));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn outcomes_parse_from_their_words_only() {
        for o in [
            TestOutcome::Passed,
            TestOutcome::Failed,
            TestOutcome::Skipped,
            TestOutcome::Interrupted,
            TestOutcome::Killed,
        ] {
            assert_eq!(TestOutcome::parse(o.as_str()), Some(o));
        }
        assert_eq!(TestOutcome::parse("passed x"), None);
        assert_eq!(TestOutcome::parse(""), None);
    }
}
