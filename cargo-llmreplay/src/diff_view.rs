//! A diff as its renderers read it: the counts and the headline, what can break code, and
//! each test's, file's and interaction's words, worded once for the text, markdown and HTML
//! of `diff` (and `review`'s screen), each of which escapes them for its medium.

use crate::render::{self, plural};
use cassettes::Tokens;
use review::git::{ChangeKind, Diff, FileDiff};
use review::review::{Change, Drift, InteractionDiff};
use review::trajectory::TrajectoryDiff;
use serde::Serialize;
use std::collections::BTreeMap;

/// The counts a reader wants first.
#[derive(Debug, Default, Serialize, PartialEq)]
pub struct Counts {
    pub tests: usize,
    pub files: usize,
    pub added: usize,
    pub removed: usize,
    pub changed: usize,
    /// Cassettes moved to another test's folder (a renamed test).
    #[serde(skip_serializing_if = "is_zero")]
    pub moved: usize,
    /// Changed interactions whose answer text differs.
    pub answers_changed: usize,
    /// Changed interactions whose answer is the same: only the request moved.
    #[serde(skip_serializing_if = "is_zero")]
    pub requests_only: usize,
    /// Changed answers by drift class (an answer counts once in each of its classes).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub drift: BTreeMap<Drift, usize>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

pub fn counts(diff: &Diff, trajectories: &[TrajectoryDiff]) -> Counts {
    let mut c = Counts {
        files: diff.files.len(),
        tests: by_test(diff).len(),
        moved: diff
            .files
            .iter()
            .filter(|f| f.kind == ChangeKind::Moved)
            .count(),
        ..Counts::default()
    };
    for d in diff.files.iter().flat_map(|f| &f.interactions) {
        match d.change {
            Change::Added => c.added += 1,
            Change::Removed => c.removed += 1,
            Change::Changed => {
                c.changed += 1;
                c.answers_changed += usize::from(d.answer_changed());
                c.requests_only += usize::from(d.drift.is_empty());
                for class in &d.drift {
                    *c.drift.entry(*class).or_default() += 1;
                }
            }
        }
    }
    let runs = trajectories.iter().filter(|t| t.changed).count();
    if runs > 0 {
        c.drift.insert(Drift::Trajectory, runs);
    }
    c
}

pub(crate) fn by_test(diff: &Diff) -> BTreeMap<&str, Vec<&FileDiff>> {
    let mut tests: BTreeMap<&str, Vec<&FileDiff>> = BTreeMap::new();
    for f in &diff.files {
        let test = if f.test.is_empty() {
            f.path.to_str().unwrap_or("")
        } else {
            &f.test
        };
        tests.entry(test).or_default().push(f);
    }
    tests
}

/// The drift classes as a phrase, those that can break code first: "1 tool call changed, 2
/// wording".
pub fn drift_sentence(drift: &BTreeMap<Drift, usize>) -> Option<String> {
    let parts: Vec<String> = drift
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(class, n)| match class {
            Drift::Error => format!("{n} became or stopped being an error"),
            Drift::Trajectory => match n {
                1 => "1 test's tool calls changed".to_string(),
                n => format!("{n} tests' tool calls changed"),
            },
            Drift::ToolCall => format!("{} changed", plural(*n, "tool call")),
            Drift::ToolSchema => {
                format!("{} changed its tool schemas", plural(*n, "MCP tool list"))
            }
            Drift::Structure => format!("{n} structure changed"),
            Drift::Wording => format!("{n} wording"),
            Drift::Usage => format!("{n} usage only"),
            Drift::Metadata => format!("{n} metadata only"),
            Drift::RequestOnly => format!(
                "{} re-keyed after a client change, answers unchanged",
                plural(*n, "recording")
            ),
        })
        .collect();
    (!parts.is_empty()).then(|| parts.join(", "))
}

/// How a changed answer reads best: the words that changed when most of it stayed, else its
/// lines old then new.
pub enum AnswerChange<'a> {
    Words(Vec<review::review::Words>),
    Lines(&'a str),
}

/// The diff of a changed answer, when its text changed: one word diff, which also tells
/// whether it was mostly rewritten.
pub fn answer_change(d: &InteractionDiff) -> Option<AnswerChange<'_>> {
    let lines = d.answer_diff.as_deref()?;
    let (before, after) = (d.answer_before.as_deref()?, d.answer_after.as_deref()?);
    let words = review::review::word_diff(before, after);
    Some(match review::review::rewritten(&words) {
        true => AnswerChange::Lines(lines),
        false => AnswerChange::Words(words),
    })
}

/// The classes of one changed answer: `tool call, wording`.
pub(crate) fn drift_words(d: &InteractionDiff) -> String {
    d.drift
        .iter()
        .map(|c| c.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The drift classes that can break the code under test, as a phrase; none when none did.
pub(crate) fn breaking(c: &Counts) -> Option<String> {
    let classes: BTreeMap<Drift, usize> = c
        .drift
        .iter()
        .filter(|(class, _)| class.can_break_code())
        .map(|(class, n)| (*class, *n))
        .collect();
    drift_sentence(&classes)
}

pub(crate) fn headline(c: &Counts) -> String {
    let mut parts: Vec<String> = drift_sentence(&c.drift).into_iter().collect();
    parts.extend(
        [
            (c.requests_only, "request changed", "requests changed"),
            (c.moved, "cassette moved", "cassettes moved"),
            (c.added, "added", "added"),
            (c.removed, "removed", "removed"),
        ]
        .iter()
        .filter(|(n, _, _)| *n > 0)
        .map(|(n, one, many)| format!("{n} {}", if *n == 1 { one } else { many })),
    );
    let parts = if parts.is_empty() {
        "no interaction changed".to_string()
    } else {
        parts.join(", ")
    };
    format!("{}: {parts}", plural(c.tests, "test"))
}

pub(crate) fn file_counts(f: &FileDiff) -> String {
    let n = |c: Change| f.interactions.iter().filter(|d| d.change == c).count();
    let mut parts = Vec::new();
    for (c, word) in [
        (Change::Changed, "changed"),
        (Change::Added, "added"),
        (Change::Removed, "removed"),
    ] {
        if n(c) > 0 {
            parts.push(format!("{} {word}", n(c)));
        }
    }
    if f.error.is_some() {
        parts.push("does not parse".into());
    }
    if parts.is_empty() {
        if let Some(n) = f.recordings {
            parts.push(format!("{}, unchanged", plural(n, "recording")));
        }
    }
    parts.join(", ")
}

pub(crate) fn kind(f: &FileDiff) -> String {
    match (f.kind, &f.moved_from) {
        (ChangeKind::New, _) => "new file".into(),
        (ChangeKind::Moved, Some(from)) => format!("moved from {}", from.display()),
        (other, _) => render::change_kind(other).into(),
    }
}

pub(crate) fn tokens_line(d: &InteractionDiff) -> Option<String> {
    let show = |t: &Tokens| format!("{} in + {} out", t.input, t.output);
    match (&d.tokens_before, &d.tokens_after) {
        (Some(a), Some(b)) if a == b => Some(format!("tokens: {} (unchanged)", show(b))),
        (Some(a), Some(b)) => Some(format!(
            "tokens: {} -> {} ({:+})",
            show(a),
            show(b),
            b.total() as i64 - a.total() as i64
        )),
        (None, Some(b)) => Some(format!("tokens: {}", show(b))),
        (Some(a), None) => Some(format!("tokens: {}", show(a))),
        (None, None) => None,
    }
}

/// The request in one line, unescaped: each medium escapes it.
pub(crate) fn request_line(d: &InteractionDiff) -> String {
    format!(
        "{} {}{}",
        d.method,
        d.path,
        d.model
            .as_deref()
            .map(|m| format!(", model {m}"))
            .unwrap_or_default()
    )
}

pub(crate) fn change_word(c: Change) -> &'static str {
    match c {
        Change::Added => "added",
        Change::Removed => "removed",
        Change::Changed => "changed",
    }
}

/// Each test's trajectory against the base's, by test.
pub(crate) fn by_run(trajectories: &[TrajectoryDiff]) -> BTreeMap<&str, &TrajectoryDiff> {
    trajectories.iter().map(|t| (t.test.as_str(), t)).collect()
}

/// What a run's model calls cost at `prices`: those whose model and tokens have a price, and
/// the others by what they name.
pub(crate) fn run_cost(
    steps: &[review::trajectory::Step],
    prices: &ledger::Prices,
) -> ledger::Tally {
    let mut tally = ledger::Tally::default();
    for step in steps {
        if let review::trajectory::Call::Model {
            provider,
            model,
            tokens,
            ..
        } = &step.call
        {
            let priced = prices.price_tokens(provider, model.as_deref(), tokens.as_ref());
            tally.add(priced);
        }
    }
    tally
}

/// A run's cost in a few words, unescaped: `$0.000021`, with `(1 unpriced)` when some call had
/// no price, or `unpriced` when none had.
pub(crate) fn cost_words(tally: &ledger::Tally) -> String {
    let unpriced = tally.unpriced_count();
    match (tally.priced, unpriced) {
        (0, 0) => "no model call".to_string(),
        (0, _) => "unpriced".to_string(),
        (_, 0) => tally.cost.to_string(),
        (_, n) => format!("{} ({n} unpriced)", tally.cost),
    }
}
