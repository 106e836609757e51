//! How each test ended in a run without a target runner, which has no process of ours beside
//! the test to see it end: nextest says it in its libtest JSON, on its stdout (its own words
//! for people go to stderr, unchanged). Each line is parsed as JSON into typed fields, never
//! matched as text, so a test's name cannot pose as another's event.

use cassettes::TestId;
use runlog::TestOutcome;
use serde::Deserialize;
use std::borrow::Cow;
use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{BufRead, Write};
use std::sync::Arc;

/// What makes nextest write its libtest JSON: an experimental format, hence the variable.
pub(super) const FORMAT_ARGS: [&str; 2] = ["--message-format", "libtest-json-plus"];
/// nextest's switch for the experimental format.
pub(super) const EXPERIMENT_ENV: &str = "NEXTEST_EXPERIMENTAL_LIBTEST_JSON";

/// Whether the user chose nextest's output format: theirs is kept, and outcomes go unread.
pub(super) fn user_chose_format(args: &[OsString]) -> bool {
    args.iter().any(|a| {
        let a = a.to_string_lossy();
        a == "--message-format" || a.starts_with("--message-format=")
    })
}

/// Whether the tests' own output reaches nextest's stdout (`--no-capture`): a test could then
/// print a line that poses as nextest's, so no outcome is read from it.
pub(super) fn tests_print_there(args: &[OsString]) -> bool {
    let flag = args
        .iter()
        .take_while(|a| *a != "--")
        .any(|a| a == "--no-capture" || a == "--nocapture");
    let env = std::env::var_os("NEXTEST_NO_CAPTURE").is_some_and(|v| !v.is_empty() && v != "0");
    flag || env
}

/// One line of nextest's libtest JSON, the fields read here. serde refuses a line that names
/// a field twice, so no name can add an `event` of its own.
#[derive(Deserialize)]
struct Line<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    event: Cow<'a, str>,
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    nextest: Option<Suite<'a>>,
    /// Why a test failed, where nextest says: `time limit exceeded` for one it ended.
    #[serde(default, borrow)]
    reason: Option<Cow<'a, str>>,
}

/// The test binary a suite event names (libtest-json-plus's `nextest` field).
#[derive(Deserialize)]
struct Suite<'a> {
    #[serde(rename = "crate", borrow)]
    package: Cow<'a, str>,
    #[serde(borrow)]
    test_binary: Cow<'a, str>,
    #[serde(borrow)]
    kind: Cow<'a, str>,
}

impl Suite<'_> {
    /// nextest's binary id, as its tests see it in `NEXTEST_BINARY_ID`.
    fn binary_id(&self) -> String {
        match self.kind.as_ref() {
            "lib" | "proc-macro" => self.package.to_string(),
            "test" => format!("{}::{}", self.package, self.test_binary),
            kind => format!("{}::{kind}/{}", self.package, self.test_binary),
        }
    }

    /// How its tests' names begin in the JSON: package and binary name, whatever its kind.
    fn prefix(&self) -> String {
        format!("{}::{}", self.package, self.test_binary)
    }
}

/// Reads nextest's stdout to its end: each test's start and end go to the journal as they
/// happen; any line that is not nextest's JSON (a `--no-capture` test's own output) is passed
/// on to this command's stdout.
pub(super) fn read(stdout: impl std::io::Read, journal: Arc<daemon::Journal>) {
    let mut reader = std::io::BufReader::new(stdout);
    let mut suites = Suites::default();
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        match serde_json::from_slice::<Line>(&line) {
            Ok(parsed) => suites.note(parsed, &journal),
            Err(_) => {
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(&line);
                let _ = out.flush();
            }
        }
    }
}

/// The binaries whose suites began, by the prefix of their tests' names. A package's library
/// and binary of the same name share a prefix: their tests are told apart by which one the
/// daemon saw call.
#[derive(Default)]
struct Suites {
    by_prefix: HashMap<String, Vec<String>>,
}

impl Suites {
    fn note(&mut self, line: Line, journal: &daemon::Journal) {
        match (line.kind.as_ref(), line.nextest, line.name) {
            ("suite", Some(suite), _) => {
                let ids = self.by_prefix.entry(suite.prefix()).or_default();
                let id = suite.binary_id();
                if !ids.contains(&id) {
                    ids.push(id);
                }
            }
            ("test", _, Some(name)) => {
                let outcome = match (line.event.as_ref(), line.reason.as_deref()) {
                    ("started", _) => None,
                    ("ok", _) => Some(TestOutcome::Passed),
                    ("failed", Some("time limit exceeded")) => Some(TestOutcome::Killed),
                    ("failed", _) => Some(TestOutcome::Failed),
                    _ => return,
                };
                let Some(test) = self.test(&name, journal) else {
                    return;
                };
                match outcome {
                    None => journal.ran(&test),
                    Some(outcome) => journal.ended(&test, outcome),
                }
            }
            _ => {}
        }
    }

    /// The test a JSON name is: `<package>::<binary name>$<test name>`, and `#<attempt>` after
    /// it for a retried test's last attempt.
    fn test(&self, name: &str, journal: &daemon::Journal) -> Option<TestId> {
        let (prefix, test) = name.split_once('$')?;
        let test = match test.rsplit_once('#') {
            Some((test, attempt))
                if !attempt.is_empty() && attempt.bytes().all(|b| b.is_ascii_digit()) =>
            {
                test
            }
            _ => test,
        };
        match self.by_prefix.get(prefix)?.as_slice() {
            [id] => Some(TestId::nextest(id, test)),
            ids => ids
                .iter()
                .map(|id| TestId::nextest(id, test))
                .find(|t| journal.has_begun(t)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn journal() -> Arc<daemon::Journal> {
        Arc::new(daemon::Journal::default())
    }

    #[test]
    fn binary_ids_follow_nextest() {
        let suite = |kind: &'static str| Suite {
            package: "my-crate".into(),
            test_binary: "my_crate".into(),
            kind: kind.into(),
        };
        assert_eq!(suite("lib").binary_id(), "my-crate");
        assert_eq!(suite("test").binary_id(), "my-crate::my_crate");
        assert_eq!(suite("bin").binary_id(), "my-crate::bin/my_crate");
    }

    #[test]
    fn outcomes_reach_the_journal_and_names_cannot_forge_events() {
        let journal = journal();
        let lines = concat!(
            r#"{"type":"suite","event":"started","test_count":2,"nextest":{"crate":"app","test_binary":"it","kind":"test"}}"#,
            "\n",
            r#"{"type":"test","event":"started","name":"app::it$good"}"#,
            "\n",
            r#"{"type":"test","event":"ok","name":"app::it$good","exec_time":0.1}"#,
            "\n",
            r#"{"type":"test","event":"failed","name":"app::it$bad","stdout":"x"}"#,
            "\n",
            r#"{"type":"test","event":"ok","name":"app::it$flaky#2"}"#,
            "\n",
            r#"{"type":"test","event":"failed","name":"app::it$slow#2","reason":"time limit exceeded"}"#,
            "\n",
            // A custom harness's name with quotes in it, written unescaped: it would say ok.
            r#"{"type":"test","event":"failed","name":"app::it$evil","event":"ok"}"#,
            "\n",
            "a test's own line\n",
        );
        read(lines.as_bytes(), journal.clone());
        let outcomes = journal.outcomes();
        assert_eq!(
            outcomes.get(&TestId::new("app::it$good")),
            Some(&TestOutcome::Passed)
        );
        assert_eq!(
            outcomes.get(&TestId::new("app::it$bad")),
            Some(&TestOutcome::Failed)
        );
        assert_eq!(outcomes.get(&TestId::new("app::it$evil")), None);
        assert_eq!(
            outcomes.get(&TestId::new("app::it$flaky")),
            Some(&TestOutcome::Passed)
        );
        assert_eq!(
            outcomes.get(&TestId::new("app::it$slow")),
            Some(&TestOutcome::Killed)
        );
        assert!(journal.has_begun(&TestId::new("app::it$good")));
    }

    #[test]
    fn a_library_and_a_binary_of_one_name_are_told_apart_by_their_calls() {
        let journal = journal();
        journal.ran(&TestId::new("app::bin/app$main_test"));
        let lines = concat!(
            r#"{"type":"suite","event":"started","nextest":{"crate":"app","test_binary":"app","kind":"lib"}}"#,
            "\n",
            r#"{"type":"suite","event":"started","nextest":{"crate":"app","test_binary":"app","kind":"bin"}}"#,
            "\n",
            r#"{"type":"test","event":"ok","name":"app::app$main_test"}"#,
            "\n",
            r#"{"type":"test","event":"ok","name":"app::app$silent"}"#,
            "\n",
        );
        read(lines.as_bytes(), journal.clone());
        let outcomes = journal.outcomes();
        assert_eq!(
            outcomes.get(&TestId::new("app::bin/app$main_test")),
            Some(&TestOutcome::Passed)
        );
        assert_eq!(outcomes.len(), 1, "{outcomes:?}");
    }

    #[test]
    fn a_format_the_user_chose_is_theirs() {
        assert!(user_chose_format(&["--message-format=json".into()]));
        assert!(user_chose_format(&[
            "--message-format".into(),
            "libtest-json".into()
        ]));
        assert!(!user_chose_format(&["--no-capture".into()]));
    }

    #[test]
    fn no_outcomes_where_tests_print_to_nextests_stdout() {
        assert!(tests_print_there(&["--no-capture".into()]));
        assert!(tests_print_there(&["--nocapture".into()]));
        assert!(!tests_print_there(&["--".into(), "--no-capture".into()]));
    }
}
