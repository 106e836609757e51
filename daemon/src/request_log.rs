//! The lines about requests in a log file (`test`'s `daemon.log`), written here rather than
//! through tracing: a span per request, entered at every poll, and an event formatted through
//! it were about a twentieth of the daemon's CPU on a replay. The lines are the ones tracing's `fmt`
//! would write for the request's span and events (README, "The daemon's log"), so the file
//! reads the same either way. Where a tracing layer wants requests (`-v`, `RUST_LOG`), the
//! span and events are made for it as before.

use crate::call::Call;
use std::fmt::{self, Write as _};
use std::sync::OnceLock;
use tracing::Level;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};

type Sink = Box<dyn Fn(&str) + Send + Sync>;

static SINK: OnceLock<Sink> = OnceLock::new();

/// Sends the request lines to `sink`, a whole line (newline included) at a time; the log file's
/// tracing filter should then leave out the target `cargo_llmreplay::request`. Once per process:
/// false when a sink was already set.
pub fn write_to(sink: impl Fn(&str) + Send + Sync + 'static) -> bool {
    SINK.set(Box::new(sink)).is_ok()
}

/// Writes one line about `call`, headed as its span would be, when a sink is set.
pub(crate) fn line(level: Level, call: &Call, what: fmt::Arguments<'_>) {
    let Some(sink) = SINK.get() else {
        return;
    };
    let mut line = String::with_capacity(256);
    // tracing's own clock and format, so both kinds of line sort and read alike.
    let _ = SystemTime.format_time(&mut Writer::new(&mut line));
    let _ = writeln!(line, " {level:>5} {}: {what}", Heading(call));
    sink(&line);
}

/// A message about `call`'s request (a miss's detail, a refusal, a failed save): an event in
/// its span for tracing, and a line in the log file.
pub(crate) fn message(level: Level, call: &Call, message: &str) {
    const TARGET: &str = "cargo_llmreplay::request";
    let message = &*contained(message);
    match level {
        Level::ERROR => tracing::error!(target: TARGET, "{message}"),
        Level::WARN => tracing::warn!(target: TARGET, "{message}"),
        Level::INFO => tracing::info!(target: TARGET, "{message}"),
        Level::DEBUG => tracing::debug!(target: TARGET, "{message}"),
        Level::TRACE => tracing::trace!(target: TARGET, "{message}"),
    }
    line(level, call, format_args!("{message}"));
}

/// A message as a log may hold it, whatever test ids, prompts or paths it quotes: control
/// characters shown escaped (no ESC or BEL reaches a terminal that shows the log), and every
/// line after the first indented, so that no text in it can pass for a line of the log's own.
pub(crate) fn contained(message: &str) -> std::borrow::Cow<'_, str> {
    let risky = |c: char| c.is_control() || is_bidi(c);
    if !message.contains(risky) {
        return message.into();
    }
    let mut out = String::with_capacity(message.len() + 16);
    for c in message.trim_end_matches('\n').chars() {
        match c {
            '\n' => out.push_str("\n    "),
            c if risky(c) => out.extend(c.escape_default()),
            c => out.push(c),
        }
    }
    out.into()
}

/// Bidirectional overrides and isolates, which reorder what a terminal shows.
fn is_bidi(c: char) -> bool {
    matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `request{test="…" provider=… method=… path=…}`, or `session{…}` without the method: the
/// name and fields of the span `routed` makes, as `fmt` writes them.
struct Heading<'a>(&'a Call);

impl fmt::Display for Heading<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let call = self.0;
        let (test, provider) = (call.entry.test.as_str(), &call.entry.provider);
        match call.session {
            true => write!(f, "session{{test={test:?} provider={provider}")?,
            false => write!(
                f,
                "request{{test={test:?} provider={provider} method={}",
                call.method
            )?,
        }
        write!(f, " path={}}}", call.path)
    }
}

/// A field that tracing leaves out when it is `None`, as it does an `Option` field.
pub(crate) struct Optional<'a, T>(pub &'static str, pub &'a Option<T>);

impl<T: fmt::Display> fmt::Display for Optional<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.1 {
            Some(value) => write!(f, " {}={value}", self.0),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::{Detail, Journal, Outcome};
    use cassettes::{Key, Normalizer, ProviderName, Store, TestId};
    use std::sync::{Arc, Mutex};

    /// What a writer was given, shared with the test.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Captured {
        /// Its lines about `test`, each without its timestamp (the first word).
        fn lines_of(&self, test: &str) -> Vec<String> {
            String::from_utf8(self.0.lock().unwrap().clone())
                .unwrap()
                .lines()
                .filter(|l| l.contains(test))
                .map(|l| {
                    let (stamp, rest) = l.split_once(' ').unwrap();
                    assert!(stamp.ends_with('Z') && stamp.len() == 27, "{l}");
                    rest.to_string()
                })
                .collect()
        }
    }

    /// The lines written here are those tracing's fmt layer (as `test` sets it up: no colour,
    /// no target) writes for the same span and events: a request with its bytes, a session
    /// without them, a miss with its message on a line of its own, and a test id that needs
    /// quoting.
    #[test]
    fn the_lines_are_those_tracing_writes() {
        let direct = Captured::default();
        let sink = direct.clone();
        assert!(write_to(move |line| {
            let _ = std::io::Write::write_all(&mut sink.clone(), line.as_bytes());
        }));
        let traced = Captured::default();
        let writer = traced.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .with_target(false)
            .with_max_level(Level::DEBUG)
            .finish();

        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path());
        let journal = Journal::default();
        let test = TestId::new("crate::mod$says \"hi\"");
        let provider = ProviderName::new("openai").unwrap();
        let path = "/v1/chat/completions";
        let call = |method: http::Method, session: bool, bytes: Option<u64>| Call {
            entry: store.entry(&test, &provider).unwrap(),
            method,
            path: path.into(),
            key: Key::of(&Normalizer::plain().request("POST", path, None, None, b"{}", &[])),
            ordinal: 1,
            started: std::time::Instant::now(),
            bytes,
            session,
            flight: None,
            answer: None,
            sink: None,
        };
        tracing::subscriber::with_default(subscriber, || {
            let span =
                crate::routed::request_span(&test, &provider, Some(&http::Method::POST), path);
            span.in_scope(|| {
                let hit = call(http::Method::POST, false, Some(608));
                journal.log(hit, Outcome::Hit, 200, None);
                let miss = call(http::Method::POST, false, None);
                let detail = Detail::message("no recording: \"model\" differs".into());
                journal.log(miss, Outcome::Miss, 404, Some(detail));
            });
            let span = crate::routed::request_span(&test, &provider, None, path);
            span.in_scope(|| {
                let session = call(http::Method::GET, true, None);
                journal.log(session, Outcome::Hit, 101, None);
            });
        });

        let expected = traced.lines_of("says");
        assert_eq!(expected.len(), 4, "{expected:?}");
        assert!(expected[0].starts_with(" INFO request{test=\"crate::mod$says \\\"hi\\\"\" provider=openai method=POST path=/v1/chat/completions}: replayed status=200 bytes=608 ms="), "{expected:?}");
        assert!(expected[3].starts_with(" INFO session{"), "{expected:?}");
        // The milliseconds may differ between the two; nothing else may.
        let ms = |l: &String| {
            l.split(' ')
                .map(|w| match w.starts_with("ms=") {
                    true => "ms=_",
                    false => w,
                })
                .collect::<Vec<_>>()
                .join(" ")
        };
        let got: Vec<String> = direct.lines_of("says").iter().map(ms).collect();
        assert_eq!(got, expected.iter().map(ms).collect::<Vec<_>>());
    }

    /// A message that quotes a hostile test id (a newline and a forged line, an OSC 52
    /// clipboard write) stays inside its own line: no raw ESC or BEL, and every line after the
    /// first indented.
    #[test]
    fn messages_cannot_forge_lines_or_reach_the_terminal() {
        let forged = "cargo-llmreplay: no recording.\n  test: t$x\n2026-11-25T10:00:00.000000Z  INFO request{test=\"t$y\"}: replayed\u{1b}]52;c;cHduZWQ=\u{7}\u{202e}\n";
        let safe = contained(forged);
        assert!(!safe.contains(['\u{1b}', '\u{7}', '\u{202e}']), "{safe}");
        assert!(safe.contains("\\u{1b}]52"), "{safe}");
        let lines: Vec<&str> = safe.lines().collect();
        assert_eq!(lines.len(), 3, "{safe}");
        assert!(lines[1..].iter().all(|l| l.starts_with("    ")), "{safe}");
        assert_eq!(contained("plain"), "plain");
    }
}
