//! What a run's report says, as data: its sections in order, each with its severity, heading
//! and items, every command to suggest and every count already worded. `sections` decides all
//! of it once; the terminal summary and the markdown page (`summary`) only render it. Text here
//! is raw, as it came from the journal and the cassettes: a renderer escapes each piece for its
//! medium.

use super::{Report, Unused};
use crate::render::{error_answers_line, plural, stats_sentence};
use review::git::ChangeKind;
use std::path::Path;

/// A report's sections, ready to render.
#[derive(Clone, Debug)]
pub struct Sections {
    pub headline: Headline,
    /// In the order the summary reads them.
    pub sections: Vec<Section>,
    pub footer: Footer,
}

/// The run in one sentence.
#[derive(Clone, Debug)]
pub struct Headline {
    /// The daemon's counts: `7 requests: 4 replayed, 1 missing`.
    pub stats: String,
    /// What needs a look but fails no run by default, counted (`2 unused`): for a headline
    /// read without the sections.
    pub tallies: Vec<String>,
    /// What the replays saved and the recordings spent, when any call was a model's.
    pub ledger: Option<LedgerLine>,
}

/// The ledger in a sentence: `≈ $18.40 not spent by 1,240 replays (prices of 2026-11-27)`,
/// and the calls no price was found for, by model (as a cassette named it: a renderer
/// escapes it).
#[derive(Clone, Debug, PartialEq)]
pub struct LedgerLine {
    pub said: String,
    pub unpriced: Vec<(String, usize)>,
}

/// How much a section matters, from failing the run to worth a look.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    /// It fails the run.
    Error,
    /// Something to look at.
    Warning,
    /// What the run changed.
    Note,
    /// Said plainly.
    Info,
}

/// Which section it is, so that a renderer may lay one out its own way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SectionKind {
    FirstFailure,
    MaxSpend,
    ErrorAnswers,
    Recorded,
    Faults,
    LiveDiffers,
    Missing,
    Escaped,
    PassedThrough,
    Collisions,
    Unattributed,
    StoppedEarly,
    Unused,
    Changed,
}

/// One part of the report: a notice (no items) or a list.
#[derive(Clone, Debug)]
pub struct Section {
    pub kind: SectionKind,
    pub severity: Severity,
    /// What the list holds, counted (`missing (2)`); all a notice says.
    pub heading: String,
    pub items: Vec<Item>,
    /// One command for every item at once.
    pub all: Option<Advice>,
}

/// One entry of a list.
#[derive(Clone, Debug)]
pub enum Item {
    /// A test and what happened in it, in a few words.
    Test { test: String, what: String },
    /// A call that found no recording.
    Call(Call),
    /// Tunnels a test opened to a host passed through.
    Passed {
        test: String,
        host: String,
        tunnels: usize,
        /// `2 tunnels`.
        counted: String,
    },
    /// A recording nothing replayed.
    Recording {
        /// Its cassette file, relative to the root when under it.
        cassette: String,
        test: String,
        /// Which recording of its key, from 1.
        number: usize,
        /// The key's first 12 hex digits, which name it in lists.
        key: String,
        /// The start of its answer, to recognise it by.
        answer: Option<String>,
    },
    /// A cassette folder whose slug matches no test of the suite.
    Folder {
        /// Relative to the root when under it.
        folder: String,
        /// Its own name, the slug.
        name: String,
    },
    /// A cassette file changed against HEAD.
    Changed(ChangedFile),
}

/// A call that found no recording, with what to do about it.
#[derive(Clone, Debug)]
pub struct Call {
    pub test: String,
    /// `openai POST /v1/chat/completions`; for a captured call, its host in place of the
    /// provider.
    pub request: String,
    pub model: Option<String>,
    /// The start of its prompt.
    pub prompt: Option<String>,
    pub closest: Option<Closest>,
    /// What may be done, in the order to consider it.
    pub advice: Vec<Advice>,
    /// The one command that fixes it: recording it, or keeping a renamed test's recordings.
    pub fix: String,
}

/// How the closest recording differs from a call.
#[derive(Clone, Debug)]
pub enum Closest {
    /// The fields that differ, their values unknown.
    Fields(Vec<String>),
    /// The first fields that differ with both values, and how many more differ.
    Values {
        values: Vec<daemon::FieldValues>,
        more: usize,
    },
}

/// A command to run, and when.
#[derive(Clone, Debug)]
pub struct Advice {
    /// `record it`, `changed on purpose? record the test again, replacing its old recording`.
    pub said: String,
    pub command: String,
}

/// A cassette file changed against HEAD.
#[derive(Clone, Debug)]
pub struct ChangedFile {
    /// Relative to the repository's root.
    pub path: String,
    pub kind: ChangeKind,
    /// Where a moved file was.
    pub moved_from: Option<String>,
    /// A new or deleted file's recordings (`2 interactions`), else what happened to them
    /// (`1 added, 3 unchanged`).
    pub recordings: String,
    /// Why one side could not be read.
    pub error: Option<String>,
}

/// What follows the sections.
#[derive(Clone, Debug)]
pub struct Footer {
    /// Why some cassette folders were not judged.
    pub scope: Option<String>,
    /// The daemon's log, when something went wrong: relative to the root when under it.
    pub log: Option<String>,
}

/// Differing fields shown with their values, at most.
const SHOWN_VALUES: usize = 4;

impl Section {
    fn notice(kind: SectionKind, severity: Severity, heading: String) -> Section {
        Section {
            kind,
            severity,
            heading,
            items: Vec::new(),
            all: None,
        }
    }

    /// A list, none when it is empty.
    fn list(
        kind: SectionKind,
        severity: Severity,
        heading: String,
        items: Vec<Item>,
    ) -> Option<Section> {
        (!items.is_empty()).then(|| Section {
            items,
            ..Section::notice(kind, severity, heading)
        })
    }
}

/// What the report says, in the order the summary reads it, paths shown relative to
/// `root`.
pub(super) fn sections(report: &Report, root: &Path) -> Sections {
    use SectionKind as K;
    use Severity::{Error, Info, Note, Warning};
    let rel = |p: &str| {
        Path::new(p)
            .strip_prefix(root)
            .map_or_else(|_| p.to_string(), |r| r.display().to_string())
    };
    let sections = [
        report.first_failure.as_ref().map(|f| {
            let cause = f.message.lines().next().unwrap_or_default();
            let said = format!("first failure ({}, {}): {cause}", f.test, f.status);
            Section::notice(K::FirstFailure, Warning, said)
        }),
        max_spend_reached(report).map(|said| Section::notice(K::MaxSpend, Error, said)),
        (!report.error_answers.is_empty()).then(|| {
            let said = error_answers_line(&report.error_answers);
            Section::notice(K::ErrorAnswers, Warning, said)
        }),
        Section::list(
            K::Recorded,
            Note,
            format!("recorded ({})", plural(report.recorded.len(), "test")),
            report.recorded
                .iter()
                .map(|t| Item::Test {
                    test: t.test.to_string(),
                    what: test_changes(t),
                })
                .collect(),
        ),
        Section::list(
            K::Faults,
            Info,
            format!(
                "answered by faults the tests asked for ({})",
                report.counts.faults
            ),
            report.faults
                .iter()
                .map(|(test, n)| Item::Test {
                    test: test.clone(),
                    what: n.to_string(),
                })
                .collect(),
        ),
        Section::list(
            K::LiveDiffers,
            Error,
            format!(
                "live MCP answers that differ from their recordings ({})",
                report.live_differs.len()
            ),
            report.live_differs.iter().map(live_difference).collect(),
        ),
        Section::list(
            K::Collisions,
            Error,
            format!(
                "tests whose ids share a cassette folder ({}): rename one of each pair",
                report.collisions.len()
            ),
            report
                .collisions
                .iter()
                .map(|c| Item::Test {
                    test: c.second.to_string(),
                    what: format!(
                        "its folder {} is {}'s, so its requests were refused",
                        c.slug, c.first
                    ),
                })
                .collect(),
        ),
        Section::list(
            K::Missing,
            Error,
            format!("missing ({})", report.missing.len()),
            report.missing.iter().map(missing_call).collect(),
        )
        .map(|s| Section {
            all: record_all_command(report).map(|command| Advice {
                said: "record them all".into(),
                command,
            }),
            ..s
        }),
        Section::list(
            K::Escaped,
            Warning,
            format!(
                "escaped ({}): calls captured on their way to a host with no recording; answered as missing, they never left the machine",
                report.escaped.len()
            ),
            report.escaped.iter().map(escaped_call).collect(),
        ),
        Section::list(
            K::PassedThrough,
            Info,
            format!(
                "passed through ({}): tunnels to [capture] pass hosts, which left the machine unrecorded",
                report.passed_through.len()
            ),
            report.passed_through
                .iter()
                .map(|p| Item::Passed {
                    test: p.test.to_string(),
                    host: p.host.clone(),
                    tunnels: p.tunnels,
                    counted: plural(p.tunnels, "tunnel"),
                })
                .collect(),
        ),
        report.unattributed.then(|| {
            Section::notice(
                K::Unattributed,
                Warning,
                "some calls named no test and were filed under the test `default`: a client that sends no proxy credentials (or a script with no X-Test-Id); the log names them".into(),
            )
        }),
        report.stopped_early.then(|| {
            Section::notice(
                K::StoppedEarly,
                Warning,
                "nextest stopped at the first failure: the tests after it did not run, so this report may miss what they would call (pass --no-fail-fast to see everything)".into(),
            )
        }),
        Section::list(
            K::Unused,
            Warning,
            format!("unused ({})", report.unused.len()),
            report.unused.iter().map(|u| unused_item(u, rel)).collect(),
        ),
        Section::list(
            K::Changed,
            Note,
            format!("changed against HEAD ({})", report.changed.len()),
            report.changed.iter().map(changed_file).collect(),
        ),
    ];
    let tallies = [
        (report.unused.len(), "unused"),
        (report.changed.len(), "changed against HEAD"),
    ]
    .into_iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, what)| format!("{n} {what}"))
    .collect();
    let scope = if report.scope.filtered {
        Some("a filtered run: cassette folders of tests that did not run are not judged")
    } else if report.scope.partition.is_some() {
        Some("one partition of the suite: cassette folders are judged by `cargo llmreplay report merge` over every partition's report")
    } else {
        None
    };
    let c = &report.counts;
    let went_wrong = !report.tests_passed || c.misses + c.errors + c.refused + c.broken > 0;
    Sections {
        headline: Headline {
            stats: stats_sentence(&report.counts),
            tallies,
            ledger: report.ledger.as_ref().and_then(ledger_line),
        },
        sections: sections.into_iter().flatten().collect(),
        footer: Footer {
            scope: scope.map(String::from),
            log: report.log.as_deref().filter(|_| went_wrong).map(rel),
        },
    }
}

/// The ledger's sentence; none when no call was priced or left unpriced.
pub(crate) fn ledger_line(l: &runlog::report::Ledger) -> Option<LedgerLine> {
    let money = |micros| ledger::Money::from_micros(micros);
    let mut parts = Vec::new();
    if l.replays_priced > 0 {
        parts.push(format!(
            "≈ {} not spent by {}",
            money(l.saved_micros),
            grouped(l.replays_priced, "replay")
        ));
    }
    if l.recordings_priced > 0 {
        parts.push(format!(
            "≈ {} spent recording {}",
            money(l.spent_micros),
            grouped(l.recordings_priced, "answer")
        ));
    }
    let unpriced: Vec<(String, usize)> = l.unpriced.iter().map(|(m, n)| (m.clone(), *n)).collect();
    if parts.is_empty() && unpriced.is_empty() {
        return None;
    }
    let said = match parts.is_empty() {
        true => "no call was priced".to_string(),
        false => format!("{} (prices of {})", parts.join("; "), l.prices_date),
    };
    Some(LedgerLine { said, unpriced })
}

/// `1,240 replays`: thousands grouped, as amounts are.
fn grouped(n: usize, one: &str) -> String {
    let mut digits = n.to_string();
    let mut i = digits.len();
    while i > 3 {
        i -= 3;
        digits.insert(i, ',');
    }
    match n {
        1 => format!("1 {one}"),
        _ => format!("{digits} {one}s"),
    }
}

/// Why the run fails for `--max-spend`: the cap, what was spent, what was refused.
fn max_spend_reached(report: &Report) -> Option<String> {
    max_spend_sentence(report.ledger.as_ref()?)
}

/// Why a run fails for `--max-spend`, from its ledger; none when it refused nothing.
pub(crate) fn max_spend_sentence(l: &runlog::report::Ledger) -> Option<String> {
    if l.refused_over_cap == 0 {
        return None;
    }
    let cap = ledger::Money::from_micros(l.max_spend_micros.unwrap_or_default());
    Some(format!(
        "--max-spend {cap} reached: {} spent recording, {} refused and not sent upstream (what was recorded before is kept); raise --max-spend or record the rest in another run",
        ledger::Money::from_micros(l.spent_micros),
        plural(l.refused_over_cap, "request")
    ))
}

/// One command that records every missing test, when two or more tests missed (a renamed
/// test's fix is `mv`, so it is left out): replacing their recordings when every miss is
/// the same call changed, else keeping them.
fn record_all_command(report: &Report) -> Option<String> {
    let recordable: Vec<_> = report
        .missing
        .iter()
        .filter(|m| m.renamed_from.is_none())
        .collect();
    let tests: Vec<&cassettes::TestId> = recordable.iter().map(|m| &m.miss.test).collect();
    let replace = recordable.iter().all(|m| m.rerecord.is_some());
    daemon::record_all_command(crate::program(), &tests, replace)
}

/// A message to an MCP server run live whose answer differs from its recording.
fn live_difference(d: &daemon::Miss) -> Item {
    let said = d.detail.message.as_deref().unwrap_or("");
    // The daemon's message ends with how the answers differ.
    let how = said.rsplit("; ").next().unwrap_or(said);
    Item::Test {
        test: d.test.to_string(),
        what: format!("{} {}: {how}", d.provider, d.path),
    }
}

/// A call captured on its way to a host with no recording: recording it is the only fix.
fn escaped_call(m: &super::Missing) -> Item {
    let host = m.miss.detail.host.as_deref().unwrap_or_default();
    Item::Call(Call {
        test: m.miss.test.to_string(),
        request: format!("{host} {} {}", m.miss.method, m.miss.path),
        model: None,
        prompt: None,
        closest: None,
        advice: vec![record_it(&m.command)],
        fix: m.command.clone(),
    })
}

/// A missing call with its closest recording and, in the order to consider them, its fixes:
/// how its class is keyed the same, moving a renamed test's recordings, recording it.
fn missing_call(m: &super::Missing) -> Item {
    use cassettes::classify::Class;
    let d = &m.miss.detail;
    let closest =
        d.closest
            .as_ref()
            .filter(|f| !f.is_empty())
            .map(|fields| match d.values.is_empty() {
                true => Closest::Fields(fields.clone()),
                false => Closest::Values {
                    values: d.values.iter().take(SHOWN_VALUES).cloned().collect(),
                    more: fields.len().saturating_sub(SHOWN_VALUES),
                },
            });
    let mut advice = Vec::new();
    match d.class {
        Some(Class::Volatile) if !d.rules.is_empty() => advice.push(Advice {
            said: "volatile: values that change every run; add the [match] rule, re-key and replay"
                .into(),
            command: format!("{} match suggest --apply", crate::program()),
        }),
        Some(Class::SdkShape) => advice.push(Advice {
            said:
                "sdk shape: the same call in another shape; keep its answer under the new request"
                    .into(),
            command: daemon::rekey_command(crate::program(), &m.miss.test),
        }),
        _ => {}
    }
    if let Some(old) = m
        .renamed_from
        .as_ref()
        .filter(|o| o.test == m.miss.test.as_str())
    {
        advice.push(Advice {
            said: if old.command.ends_with("--fix") {
                "its recordings are in the folder an older version named for it; move them".into()
            } else {
                "its recordings are in the folder an older version named for it, which --fix cannot move; status says why and what to do".into()
            },
            command: old.command.clone(),
        });
    } else if let Some(old) = &m.renamed_from {
        advice.push(Advice {
            said: format!(
                "renamed? {} (no longer in the suite) recorded this very request; keep its recordings",
                old.test
            ),
            command: old.command.clone(),
        });
    }
    match &m.rerecord {
        // The same call with other parameters: the fix for a deliberate change replaces the
        // old recording; recording the miss alone keeps both.
        Some(rerecord) => advice.extend([
            Advice {
                said: "changed on purpose? record the test again, replacing its old recording"
                    .into(),
                command: rerecord.clone(),
            },
            Advice {
                said: "or keep both (--record-missing)".into(),
                command: m.command.clone(),
            },
        ]),
        None => advice.push(record_it(&m.command)),
    }
    Item::Call(Call {
        test: m.miss.test.to_string(),
        request: format!("{} {} {}", m.miss.provider, m.miss.method, m.miss.path),
        model: d.model.clone(),
        prompt: d.prompt.as_ref().map(|p| p.chars().take(60).collect()),
        closest,
        advice,
        // A renamed test's recordings are kept by moving them, not by recording.
        fix: m
            .renamed_from
            .as_ref()
            .map_or(&m.command, |r| &r.command)
            .clone(),
    })
}

fn record_it(command: &str) -> Advice {
    Advice {
        said: "record it".into(),
        command: command.into(),
    }
}

/// A recording nothing replayed, or a cassette folder of no test; `rel` shows a path.
fn unused_item(u: &Unused, rel: impl Fn(&str) -> String) -> Item {
    match u {
        Unused::Recording(r) => Item::Recording {
            cassette: rel(&r.cassette.to_string_lossy()),
            test: r.test.to_string(),
            number: r.ordinal + 1,
            key: short_key(r.key.as_str()).to_string(),
            answer: r.answer.clone(),
        },
        Unused::Folder { folder } => Item::Folder {
            folder: rel(folder),
            name: Path::new(folder)
                .file_name()
                .map_or(folder.clone(), |f| f.to_string_lossy().into_owned()),
        },
    }
}

fn changed_file(ch: &review::git::Change) -> Item {
    let recordings = match ch.kind {
        ChangeKind::New => plural(ch.added, "interaction"),
        ChangeKind::Deleted => plural(ch.removed, "interaction"),
        ChangeKind::Modified | ChangeKind::Moved => counted(&[
            (ch.added, "added"),
            (ch.replaced, "replaced"),
            (ch.removed, "removed"),
            (ch.unchanged, "unchanged"),
        ]),
    };
    Item::Changed(ChangedFile {
        path: ch.path.to_string_lossy().into_owned(),
        kind: ch.kind,
        moved_from: ch
            .moved_from
            .as_ref()
            .map(|f| f.to_string_lossy().into_owned()),
        recordings,
        error: ch.error.clone(),
    })
}

/// What a run changed in a test's cassettes: `1 added, 2 removed`, and why a re-recorded
/// test kept what it did not record.
fn test_changes(t: &cassettes::TestChanges) -> String {
    if let Some(file) = &t.superseded {
        return format!(
            "superseded: another run recorded this test at the same time and ended it later, so {} holds that run's recordings, not these",
            file.display()
        );
    }
    let mut out = counted(&[
        (t.added, "added"),
        (t.replaced, "replaced"),
        (t.removed, "removed"),
    ]);
    if out.is_empty() {
        out.push_str("unchanged");
    }
    if let Some(why) = &t.kept {
        out.push_str(&format!("; kept its other recordings, since {why}"));
    }
    out
}

/// The counts that are not zero, each with its word: `1 added, 3 unchanged`.
fn counted(counts: &[(usize, &str)]) -> String {
    counts
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{n} {what}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The first 12 hex digits of a key, which name it in lists.
fn short_key(key: &str) -> &str {
    key.get(..12).unwrap_or(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ledger's sentence as the issue words it, counts and amounts grouped by thousands;
    /// unpriced calls apart; and the cap's failure.
    #[test]
    fn the_ledger_is_one_sentence_and_a_cap_reached_fails_in_words() {
        let mut l = runlog::report::Ledger {
            prices_date: "2026-11-27".into(),
            saved_micros: 18_404_000,
            replays_priced: 1_240,
            replays_unpriced: 3,
            unpriced: [("my-finetune".to_string(), 3)].into(),
            ..Default::default()
        };
        let line = ledger_line(&l).unwrap();
        assert_eq!(
            line.said,
            "≈ $18.40 not spent by 1,240 replays (prices of 2026-11-27)"
        );
        assert_eq!(line.unpriced, [("my-finetune".to_string(), 3)]);
        assert_eq!(max_spend_sentence(&l), None);
        l.spent_micros = 2_000_120;
        l.recordings_priced = 1;
        l.max_spend_micros = Some(2_000_000);
        l.refused_over_cap = 2;
        assert_eq!(
            ledger_line(&l).unwrap().said,
            "≈ $18.40 not spent by 1,240 replays; ≈ $2.00 spent recording 1 answer (prices of 2026-11-27)"
        );
        assert_eq!(
            max_spend_sentence(&l).unwrap(),
            "--max-spend $2.00 reached: $2.00 spent recording, 2 requests refused and not sent upstream (what was recorded before is kept); raise --max-spend or record the rest in another run"
        );
        assert_eq!(ledger_line(&runlog::report::Ledger::default()), None);
    }

    /// The fixture of the snapshots, decided as data: the sections in the summary's order, a
    /// changed call's fixes (replace, then keep both) and a renamed test's `mv` as its fix.
    #[test]
    fn sections_are_decided_once_as_data() {
        let s = sections(&crate::snapshots::report(), Path::new("/ws"));
        let kinds: Vec<SectionKind> = s.sections.iter().map(|s| s.kind).collect();
        use SectionKind as K;
        assert_eq!(
            kinds,
            [
                K::ErrorAnswers,
                K::Recorded,
                K::Faults,
                K::Missing,
                K::Escaped,
                K::Unattributed,
                K::StoppedEarly,
                K::Unused,
                K::Changed
            ]
        );
        assert_eq!(s.headline.tallies, ["2 unused", "3 changed against HEAD"]);
        let missing = &s.sections[3];
        assert_eq!(
            (missing.severity, missing.heading.as_str()),
            (Severity::Error, "missing (2)")
        );
        let [Item::Call(changed), Item::Call(renamed)] = &missing.items[..] else {
            panic!("two calls: {:?}", missing.items);
        };
        let said: Vec<(&str, &str)> = changed
            .advice
            .iter()
            .map(|a| (a.said.as_str(), a.command.as_str()))
            .collect();
        assert_eq!(
            said,
            [
                (
                    "changed on purpose? record the test again, replacing its old recording",
                    "cargo llmreplay test --record -E 'test(=answers_hello)'"
                ),
                (
                    "or keep both (--record-missing)",
                    "cargo llmreplay test --record-missing -E 'test(=answers_hello)'"
                ),
            ]
        );
        assert_eq!(
            changed.fix,
            "cargo llmreplay test --record-missing -E 'test(=answers_hello)'"
        );
        assert!(
            matches!(&changed.closest, Some(Closest::Values { values, more: 0 }) if values.len() == 1)
        );
        assert_eq!(
            renamed.fix,
            "cargo llmreplay mv 'sample::chat$greets' 'sample::chat$says_hi'"
        );
        assert_eq!(
            renamed.advice.last().map(|a| a.said.as_str()),
            Some("record it")
        );
        // One of the two misses is a renamed test: nothing left to record all at once.
        assert!(missing.all.is_none());
        assert!(matches!(
            &s.sections[7].items[0],
            Item::Recording { cassette, number: 2, key, .. }
                if cassette == "tests/cassettes/sample--chat--old/openai.json" && key == "3f2a9c0b1d4e"
        ));
        // Something is missing: the log is named, under the root.
        assert_eq!(s.footer.log.as_deref(), Some("target/llmreplay/daemon.log"));
    }
}
