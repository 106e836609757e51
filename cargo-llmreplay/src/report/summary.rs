//! The report as people read it: the summary on stderr after a run, and the markdown of a CI
//! job's summary page. Both render the same `Sections`, deciding only how it looks: colours and
//! lines on a terminal, tables and lists on the page, which is shorter (it leaves out what only
//! the one who ran the tests acts on). Every piece is escaped for its medium (see `render`).

use super::sections::{
    Advice, Call, ChangedFile, Closest, Item, Section, SectionKind, Sections, Severity,
};
use super::{Report, ReportExt};
use crate::render::{self, code, table_code, term, Styles};
use review::git::ChangeKind;
use std::fmt::Write as _;
use std::path::Path;

/// Ends a run's output: the summary on stderr, why the gate fails, and the page added to the CI
/// job's summary (`ReportExt::show`).
pub(super) fn show(report: &Report, root: &Path, path: &Path, failures: &[String]) {
    let sections = report.sections(root);
    render::stderr(&text(&sections, path, Styles::for_stderr()));
    render::stderr(&Report::gate_text(failures, Styles::for_stderr()));
    to_step_summary(&sections, failures);
}

/// Appends the page to `$GITHUB_STEP_SUMMARY` when GitHub Actions sets it, with why the gate
/// failed.
fn to_step_summary(sections: &Sections, failures: &[String]) {
    let Some(path) = std::env::var_os("GITHUB_STEP_SUMMARY") else {
        return;
    };
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| {
            let mut text = markdown(sections);
            if !failures.is_empty() {
                text.push_str("\n**The run fails its gate:**\n\n");
                for why in failures {
                    let _ = writeln!(text, "- {why}");
                }
                let _ = writeln!(
                    text,
                    "\nWhat to do: {}",
                    daemon::book::url(daemon::book::GATE)
                );
            }
            std::io::Write::write_all(&mut f, text.as_bytes())
        });
    if let Err(e) = written {
        render::stderr(&format!(
            "cargo-llmreplay: warning: cannot write GITHUB_STEP_SUMMARY: {e}\n"
        ));
    }
}

/// The summary for a terminal: a line per notice and per item, headings coloured by severity.
pub(super) fn text(s: &Sections, report: &Path, styles: Styles) -> String {
    let mut out = format!("{} {}\n", styles.bold("cargo-llmreplay:"), s.headline.stats);
    if let Some(ledger) = &s.headline.ledger {
        let _ = writeln!(out, "  {}", ledger_text(ledger));
    }
    for section in &s.sections {
        let heading = term(&section.heading);
        if section.items.is_empty() {
            let _ = writeln!(out, "{}", paint(styles, section.severity, &heading));
            continue;
        }
        let _ = writeln!(
            out,
            "{}",
            paint(styles, section.severity, &format!("{heading}:"))
        );
        for item in &section.items {
            text_item(&mut out, item);
        }
        if let Some(all) = &section.all {
            let _ = writeln!(out, "  {}", advice(all));
        }
    }
    if let Some(scope) = &s.footer.scope {
        let _ = writeln!(out, "  ({})", term(scope));
    }
    // The path the user gave, or ours: not a stranger's.
    let _ = writeln!(out, "report: {}", report.display());
    if let Some(log) = &s.footer.log {
        let _ = writeln!(out, "log: {} (a line per request)", term(log));
    }
    out
}

/// The ledger's sentence for a terminal, the unpriced models escaped.
pub(crate) fn ledger_text(ledger: &super::sections::LedgerLine) -> String {
    let mut out = ledger.said.clone();
    let unpriced = ledger
        .unpriced
        .iter()
        .map(|(model, n)| format!("{} ({n})", term(model)))
        .collect::<Vec<_>>();
    if !unpriced.is_empty() {
        let _ = write!(out, "; unpriced: {}", unpriced.join(", "));
    }
    out
}

/// A heading in its severity's colour; plain for what is only said.
fn paint(styles: Styles, severity: Severity, text: &str) -> String {
    match severity {
        Severity::Error => styles.error(text),
        Severity::Warning => styles.warning(text),
        Severity::Note => styles.note(text),
        Severity::Info => text.to_string(),
    }
}

fn text_item(out: &mut String, item: &Item) {
    match item {
        Item::Test { test, what } => {
            let _ = writeln!(out, "  {}  {}", term(test), term(what));
        }
        Item::Call(call) => text_call(out, call),
        Item::Passed {
            test,
            host,
            counted,
            ..
        } => {
            let _ = writeln!(out, "  {}  {} ({counted})", term(test), term(host));
        }
        Item::Recording {
            cassette,
            number,
            key,
            answer,
            ..
        } => {
            let _ = write!(
                out,
                "  {}  recording {number} of key {}",
                term(cassette),
                term(key)
            );
            if let Some(answer) = answer {
                // Debug quoting shows control characters escaped.
                let _ = write!(out, " {answer:?}");
            }
            out.push('\n');
        }
        Item::Folder { folder, .. } => {
            let _ = writeln!(
                out,
                "  {}/  no test of the suite has this folder's slug",
                term(folder)
            );
        }
        Item::Changed(ch) => text_changed(out, ch),
    }
}

fn text_call(out: &mut String, call: &Call) {
    let _ = write!(out, "  {}  {}", term(&call.test), term(&call.request));
    if let Some(model) = &call.model {
        let _ = write!(out, " model {}", term(model));
    }
    if let Some(prompt) = &call.prompt {
        // Debug quoting shows control characters escaped.
        let _ = write!(out, " {prompt:?}");
    }
    out.push('\n');
    match &call.closest {
        Some(Closest::Fields(fields)) => {
            let _ = writeln!(
                out,
                "    closest recording differs at {}",
                term(&fields.join(", "))
            );
        }
        Some(Closest::Values { values, more }) => {
            let _ = writeln!(out, "    closest recording differs (recorded -> now):");
            render::field_values(out, values);
            if *more > 0 {
                let _ = writeln!(out, "      and {more} more");
            }
        }
        None => {}
    }
    for a in &call.advice {
        let _ = writeln!(out, "    {}", advice(a));
    }
}

fn advice(a: &Advice) -> String {
    format!("{}: {}", term(&a.said), term(&a.command))
}

fn text_changed(out: &mut String, ch: &ChangedFile) {
    let kind = render::change_kind_column(ch.kind);
    let path = term(&ch.path);
    let recordings = term(&ch.recordings);
    let _ = match ch.kind {
        ChangeKind::New | ChangeKind::Deleted => write!(out, "  {kind}  {path} ({recordings})"),
        ChangeKind::Modified | ChangeKind::Moved => {
            let from = ch
                .moved_from
                .as_ref()
                .map(|f| format!(" (from {})", term(f)))
                .unwrap_or_default();
            write!(out, "  {kind}  {path}{from}: {recordings}")
        }
    };
    if let Some(e) = &ch.error {
        let _ = write!(out, " ({})", term(e));
    }
    out.push('\n');
}

/// How the page lays out a section.
enum Layout {
    /// A sentence of its own, shorter than the terminal's.
    Sentence(&'static str),
    /// The heading as a code span: it names paths from the cassettes.
    Code,
    /// The heading as it is: only our words and numbers.
    Said,
    /// A row per test, under these columns.
    Table(&'static [&'static str]),
    /// A bullet per file, under this line.
    List(&'static str),
}

/// What the page shows, in its order: that it may be incomplete first, then what the run
/// changed, then what fails it. What only the one who ran the tests acts on is left out.
const PAGE: [(SectionKind, Layout); 9] = [
    (
        SectionKind::StoppedEarly,
        Layout::Sentence(
            "nextest stopped at the first failure: tests after it did not run, so more may be missing.",
        ),
    ),
    (SectionKind::MaxSpend, Layout::Said),
    (
        SectionKind::Recorded,
        Layout::Table(&["recorded in test", "what changed"]),
    ),
    (SectionKind::ErrorAnswers, Layout::Code),
    (
        SectionKind::Escaped,
        Layout::Table(&["escaped from test", "host and request", "record it"]),
    ),
    (
        SectionKind::PassedThrough,
        Layout::Table(&["passed through by test", "host", "tunnels"]),
    ),
    (
        SectionKind::Missing,
        Layout::Table(&["missing in test", "request", "record it"]),
    ),
    (
        SectionKind::Unused,
        Layout::List("**unused**: run `cargo llmreplay prune` after a full run to remove:"),
    ),
    (
        SectionKind::Changed,
        Layout::List("**changed against HEAD**:"),
    ),
];

/// The summary for a CI job's page: tables of tests with the command that fixes each, lists of
/// files.
pub(super) fn markdown(s: &Sections) -> String {
    let mut out = format!("### cargo-llmreplay\n\n{}.", s.headline.stats);
    for tally in &s.headline.tallies {
        let _ = write!(out, " {tally}.");
    }
    out.push('\n');
    if let Some(ledger) = &s.headline.ledger {
        let _ = write!(out, "\n{}", ledger.said);
        let unpriced = ledger
            .unpriced
            .iter()
            .map(|(model, n)| format!("{} ({n})", code(model)))
            .collect::<Vec<_>>();
        if !unpriced.is_empty() {
            let _ = write!(out, "; unpriced: {}", unpriced.join(", "));
        }
        out.push_str(".\n");
    }
    for (kind, layout) in &PAGE {
        let Some(section) = s.sections.iter().find(|s| s.kind == *kind) else {
            continue;
        };
        match layout {
            Layout::Sentence(said) => {
                let _ = writeln!(out, "\n{said}");
            }
            Layout::Code => {
                let _ = writeln!(out, "\n{}", code(&section.heading));
            }
            Layout::Said => {
                let _ = writeln!(out, "\n**{}.**", section.heading);
            }
            Layout::Table(columns) => table(&mut out, columns, section),
            Layout::List(intro) => list(&mut out, intro, section),
        }
        if let Some(all) = &section.all {
            let _ = writeln!(out, "\n{}: {}", capitalised(&all.said), code(&all.command));
        }
    }
    out
}

/// A table of a section's items, a row each: the test, then what the item says of it.
fn table(out: &mut String, columns: &[&str], section: &Section) {
    let _ = writeln!(out, "\n| {} |", columns.join(" | "));
    let _ = writeln!(out, "|{}", " --- |".repeat(columns.len()));
    for item in &section.items {
        let row = match item {
            Item::Test { test, what } => [table_code(test), table_code(what)].join(" | "),
            Item::Call(call) => [
                table_code(&call.test),
                table_code(&call.request),
                table_code(&call.fix),
            ]
            .join(" | "),
            Item::Passed {
                test,
                host,
                tunnels,
                ..
            } => format!("{} | {} | {tunnels}", table_code(test), table_code(host)),
            _ => continue,
        };
        let _ = writeln!(out, "| {row} |");
    }
}

/// A section's files, a bullet each, under `intro`.
fn list(out: &mut String, intro: &str, section: &Section) {
    let _ = writeln!(out, "\n{intro}\n");
    for item in &section.items {
        let _ = match item {
            Item::Recording {
                test, number, key, ..
            } => writeln!(
                out,
                "- recording {number} of key {} in {}",
                code(key),
                code(test)
            ),
            Item::Folder { name, .. } => {
                writeln!(out, "- folder {} (no test has its slug)", code(name))
            }
            Item::Changed(ch) => writeln!(
                out,
                "- {} ({})",
                code(&ch.path),
                render::change_kind(ch.kind)
            ),
            _ => continue,
        };
    }
}

/// A phrase as a sentence of its own.
fn capitalised(phrase: &str) -> String {
    let mut chars = phrase.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}
