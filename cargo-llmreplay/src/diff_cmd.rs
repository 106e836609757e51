//! `cargo llmreplay diff`: what the recorded answers now say, for review. Compares the
//! cassettes of the work tree with a base commit and prints, per test and provider, the
//! interactions added, removed and changed, as text, as JSON, as markdown for a pull
//! request comment, or as a page of HTML (`diff_html`) for a CI job's artifacts.

use crate::args::{CassetteDirArg, Resolved};
use crate::diff_view::{
    answer_change, breaking, by_run, by_test, change_word, counts, drift_words, file_counts,
    headline, kind, request_line, tokens_line, AnswerChange, Counts,
};
use crate::error::{Error, Outcome, Result};
use crate::render::{self, code, code_short, fenced, html, plural, term, term_lines, Styles};
use clap::{Args, ValueEnum};
use review::git::{diff_against_with, Diff};
use review::review::{Change, InteractionDiff};
use review::trajectory::{Gather, TrajectoryDiff};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::PathBuf;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Text,
    Markdown,
    Json,
    /// One self-contained page: no script, nothing fetched.
    Html,
}

#[derive(Args)]
#[command(
    about = "Show what the recorded answers now say: cassette changes against a base commit",
    long_about = "Show what the recorded answers now say: cassette changes against a base commit.\n\n\
        For every cassette changed between BASE and the work tree, per test and provider: the \
        interactions added, removed and changed. For a changed one, the request fields that moved \
        (a prompt drift), a line diff of the answer's text (streams assembled, tool calls as name and \
        arguments) and the tokens before and after. Ids and timestamps alone are not a change.",
    after_help = "Examples:\n  cargo llmreplay diff                              # against the merge base with main\n  \
        cargo llmreplay diff --base HEAD~1                 # against another commit\n  \
        cargo llmreplay diff --format markdown > pr.md    # a pull request comment\n  \
        cargo llmreplay diff --format html > report.html  # a page for the CI job's artifacts"
)]
pub struct DiffArgs {
    /// The commit to compare with [default: the merge base of HEAD and the default branch
    /// (origin/HEAD, origin/main, main, ...), else HEAD].
    #[arg(long, value_name = "REF")]
    base: Option<String>,
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
    #[command(flatten)]
    cassettes: CassetteDirArg,
    /// Exit with status 1 when any cassette changed (for scripts).
    #[arg(long)]
    exit_code: bool,
    /// The run's report whose ledger the markdown ends with (what the replays did not spend),
    /// and whose sections the HTML page opens with [default: <target dir>/llmreplay/report.json,
    /// when there is one and it is of these cassettes].
    #[arg(long, value_name = "PATH")]
    report: Option<PathBuf>,
    /// Only cassettes under these paths (a test's folder, a file).
    paths: Vec<PathBuf>,
}

pub fn run(args: DiffArgs) -> Result<Outcome> {
    let resolved = Resolved::workspace(&args.cassettes)?;
    // Each file's cassettes go once its changes are read, but for what its test's trajectory
    // needs: memory follows what changed.
    let mut gather = Gather::default();
    let diff = diff_against_with(
        resolved.cassette_dir(),
        review::git::Base::Rev(args.base.as_deref()),
        &args.paths,
        Some(&mut |workdir, file| gather.add(workdir, file)),
    )?;
    let trajectories = gather.compare(resolved.settings.trajectory_mode);
    let out = match args.format {
        Format::Text => text(&diff, &trajectories, Styles::for_stdout()),
        Format::Markdown => {
            let mut out = markdown(&diff, &trajectories);
            if let Some(report) = run_report(&args, &resolved)? {
                out.push_str(&ledger_markdown(&report));
            }
            out
        }
        Format::Json => json(&diff, &trajectories)?,
        Format::Html => {
            use crate::report::ReportExt;
            let sections = run_report(&args, &resolved)?.map(|r| r.sections(&resolved.root));
            let prices = &resolved.settings.prices;
            crate::diff_html::page(&diff, &trajectories, sections.as_ref(), prices)
        }
    };
    render::stdout(&out).map_err(|e| Error::io("cannot write to stdout", e))?;
    Ok(Outcome::gate(args.exit_code && !diff.files.is_empty()))
}

/// For a terminal: coloured `-`/`+` lines when `styles` say so; control characters from the
/// cassettes shown escaped.
pub fn text(diff: &Diff, trajectories: &[TrajectoryDiff], styles: Styles) -> String {
    let c = counts(diff, trajectories);
    let runs = by_run(trajectories);
    if diff.files.is_empty() {
        return format!("No cassette changed against {}.\n", term(&diff.base));
    }
    let mut out = format!(
        "{} (against {})\n",
        styles.bold(&headline(&c)),
        term(&diff.base)
    );
    let sources = crate::source::Sources::new(&diff.workdir);
    for (test, files) in by_test(diff) {
        let _ = write!(out, "\n{}\n", styles.bold(&term(test)));
        if let Some(at) = sources.of(&cassettes::TestId::new(test)) {
            let _ = writeln!(out, "  source: {}", term(&at));
        }
        if let Some(run) = runs.get(test) {
            out.push_str(&trajectory_text(run, styles, "  "));
        }
        for f in files {
            let _ = writeln!(
                out,
                "  {} ({}): {}",
                term(&f.path.to_string_lossy()),
                term(&kind(f)),
                file_counts(f)
            );
            if let Some(e) = &f.error {
                let _ = writeln!(out, "    {}", term(e));
            }
            for d in &f.interactions {
                let _ = writeln!(
                    out,
                    "  {} {}{}",
                    styles.bold(change_word(d.change)),
                    term(&request_line(d)),
                    drift_suffix(d)
                );
                out.push_str(&interaction_text(d, styles, false, "    "));
            }
        }
    }
    out
}

/// What a test's run became, as `[drift] trajectory` judges its tool calls: a line of what
/// moved, then a line per tool call that differs. `diff` and `review` print it alike.
pub fn trajectory_text(t: &TrajectoryDiff, styles: Styles, pad: &str) -> String {
    let judged = match t.changed {
        true => styles.bold(&format!("trajectory changed ({})", t.mode.as_str())),
        false => format!(
            "trajectory, its tools the same as {} compares them",
            t.mode.as_str()
        ),
    };
    let mut out = format!("{pad}{judged}: {}\n", term(&t.headline()));
    for change in &t.changes {
        let _ = writeln!(out, "{pad}  {}", term(&change.sentence()));
    }
    out
}

/// ` [tool call, wording]`, or nothing when the answer did not change.
pub fn drift_suffix(d: &InteractionDiff) -> String {
    if d.drift.is_empty() {
        String::new()
    } else {
        format!(" [{}]", drift_words(d))
    }
}

/// What changed in one interaction, for a terminal: the prompt, request fields, the answer as a
/// word diff (only the lines that changed, unless `full`) and the tokens, each line indented by
/// `pad`. `diff` and `review` print it alike.
pub fn interaction_text(d: &InteractionDiff, styles: Styles, full: bool, pad: &str) -> String {
    let mut out = String::new();
    // Debug quoting shows control characters escaped.
    match (&d.prompt_before, &d.prompt) {
        (Some(a), Some(b)) => {
            let _ = writeln!(out, "{pad}prompt: {a:?} -> {b:?}");
        }
        (None, Some(p)) => {
            let _ = writeln!(out, "{pad}prompt: {p:?}");
        }
        _ => {}
    }
    if !d.request_fields.is_empty() {
        let _ = writeln!(
            out,
            "{pad}request fields changed: {}",
            term(&d.request_fields.join(", "))
        );
    }
    let change = answer_change(d);
    if let Some(AnswerChange::Words(words)) = &change {
        let _ = writeln!(out, "{pad}answer, word by word ([-removed-] {{+added+}}):");
        for line in render::word_diff(words, styles, full).lines() {
            let _ = writeln!(out, "{pad}  {line}");
        }
    } else if let Some(AnswerChange::Lines(lines)) = change {
        let _ = writeln!(out, "{pad}answer, rewritten (- before, + after):");
        for line in lines.lines() {
            let shown = term(line);
            let line = match line.as_bytes().first() {
                Some(b'-') => styles.removed(&shown),
                Some(b'+') => styles.added(&shown),
                _ => shown.into_owned(),
            };
            let _ = writeln!(out, "{pad}  {line}");
        }
    } else if let Some(a) = d.answer_after.as_ref().or(d.answer_before.as_ref()) {
        let label = if d.change == Change::Changed {
            "answer (unchanged)"
        } else {
            "answer"
        };
        let mut text = term_lines(a).into_owned();
        let lines = text.lines().count();
        if !full && lines > 12 {
            let head: Vec<&str> = text.lines().take(12).collect();
            text = format!("{}\n… ({} more lines)", head.join("\n"), lines - 12);
        }
        let _ = writeln!(out, "{pad}{label}: {}", indent(&text, &format!("{pad}  ")));
    }
    if !d.response_fields.is_empty() {
        let _ = writeln!(
            out,
            "{pad}response fields changed: {}",
            term(&d.response_fields.join(", "))
        );
    }
    if let Some(t) = tokens_line(d) {
        let _ = writeln!(out, "{pad}{t}");
    }
    out
}

fn indent(text: &str, by: &str) -> String {
    text.trim_end().replace('\n', &format!("\n{by}"))
}

/// The run's report, at --report or else the default place: none when the one at the default
/// place is missing or of other cassettes (a target dir that several projects share); a
/// report named with --report must be there.
fn run_report(args: &DiffArgs, resolved: &Resolved) -> Result<Option<runlog::report::Report>> {
    let named = args.report.is_some();
    let path = args
        .report
        .clone()
        .unwrap_or_else(|| resolved.default_report());
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if !named && e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(Error::io(
                format!("cannot read the report {}", path.display()),
                e,
            ))
        }
    };
    let report: runlog::report::Report = serde_json::from_str(&text).map_err(|e| {
        Error::Report(format!(
            "{} is no report of cargo-llmreplay: {e}",
            path.display()
        ))
    })?;
    let same = |a: &std::path::Path| std::fs::canonicalize(a).ok();
    if !named && same(&report.cassette_dir) != same(resolved.cassette_dir()) {
        return Ok(None);
    }
    Ok(Some(report))
}

/// The run's ledger as the comment's last line: what the replays did not spend and what
/// recording spent, at the prices of their date.
fn ledger_markdown(report: &runlog::report::Report) -> String {
    let Some(line) = report
        .ledger
        .as_ref()
        .and_then(crate::report::sections::ledger_line)
    else {
        return String::new();
    };
    let mut out = format!("\n{}", html(&line.said));
    if !line.unpriced.is_empty() {
        let models: Vec<String> = line
            .unpriced
            .iter()
            .map(|(m, n)| format!("{} ({n})", code(m)))
            .collect();
        let _ = write!(out, "; unpriced: {}", models.join(", "));
    }
    out.push_str(".\n");
    out
}

/// For a pull request comment: the counts first, then one collapsed section per test. What
/// comes from the cassettes sits in code spans, fenced blocks or escaped HTML, never as
/// markdown of its own: PR comments are public.
pub fn markdown(diff: &Diff, trajectories: &[TrajectoryDiff]) -> String {
    let c = counts(diff, trajectories);
    let runs = by_run(trajectories);
    let mut out = String::from("### cargo-llmreplay: recorded answers\n\n");
    if diff.files.is_empty() {
        let _ = writeln!(out, "No cassette changed against {}.", code(&diff.base));
        return out;
    }
    // What can break the code under test comes first, in bold.
    if let Some(sentence) = breaking(&c) {
        let _ = write!(out, "⚠️ **Can break code: {sentence}.**\n\n");
    }
    let _ = write!(
        out,
        "**{}**, in {} (against {}).\n\n",
        headline(&c),
        plural(c.files, "cassette"),
        code(&diff.base)
    );
    let sources = crate::source::Sources::new(&diff.workdir);
    for (test, files) in by_test(diff) {
        let summary: Vec<String> = files
            .iter()
            .map(|f| format!("{}: {}", html(&f.provider), file_counts(f)))
            .collect();
        // What can break the code under test is open; the rest folded.
        let run = runs.get(test);
        let breaks = run.is_some_and(|t| t.changed)
            || files
                .iter()
                .flat_map(|f| &f.interactions)
                .any(|d| d.drift.iter().any(|c| c.can_break_code()));
        let _ = write!(
            out,
            "<details{}>\n<summary><code>{}</code> ({})</summary>\n\n",
            if breaks { " open" } else { "" },
            html(test),
            summary.join("; ")
        );
        if let Some(at) = sources.of(&cassettes::TestId::new(test)) {
            let _ = write!(out, "Source: {}\n\n", code(&at));
        }
        if let Some(t) = run {
            let judged = match t.changed {
                true => format!("**Trajectory changed** ({})", code(t.mode.as_str())),
                false => format!(
                    "Trajectory, its tools the same as {} compares them",
                    code(t.mode.as_str())
                ),
            };
            let _ = write!(out, "{judged}: {}\n\n", code(&t.headline()));
            for change in &t.changes {
                let _ = writeln!(out, "- {}", code(&change.sentence()));
            }
            if !t.changes.is_empty() {
                out.push('\n');
            }
        }
        for f in files {
            let _ = write!(
                out,
                "{} ({})\n\n",
                code(&f.path.to_string_lossy()),
                match &f.moved_from {
                    Some(from) => format!("moved from {}", code(&from.to_string_lossy())),
                    None => kind(f),
                }
            );
            if let Some(e) = &f.error {
                let _ = write!(out, "**does not parse**: {}\n\n", code(e));
            }
            for d in &f.interactions {
                let classes = if d.drift.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", drift_words(d))
                };
                let _ = write!(
                    out,
                    "**{}** {}{classes}\n\n",
                    change_word(d.change),
                    code(&request_line(d))
                );
                match (&d.prompt_before, &d.prompt) {
                    (Some(a), Some(b)) => {
                        let _ = writeln!(
                            out,
                            "- prompt: {} → {}",
                            code_short(a, 200),
                            code_short(b, 200)
                        );
                    }
                    (None, Some(p)) => {
                        let _ = writeln!(out, "- prompt: {}", code_short(p, 200));
                    }
                    _ => {}
                }
                let codes = |fields: &[String]| -> String {
                    fields
                        .iter()
                        .map(|f| code(f))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                if !d.request_fields.is_empty() {
                    let _ = writeln!(
                        out,
                        "- request fields changed: {}",
                        codes(&d.request_fields)
                    );
                }
                if !d.response_fields.is_empty() {
                    let _ = writeln!(
                        out,
                        "- answer text unchanged; response fields changed: {}",
                        codes(&d.response_fields)
                    );
                }
                if let Some(t) = tokens_line(d) {
                    let _ = writeln!(out, "- {t}");
                }
                out.push('\n');
                // A `diff` fence, which GitHub colours: `-` lines were, `+` lines are.
                if let Some(lines) = d.answer_diff.as_deref() {
                    out.push_str("answer (`-` before, `+` after):\n\n");
                    out.push_str(&fenced("diff", lines));
                } else if let Some(a) = d.answer_after.as_ref().or(d.answer_before.as_ref()) {
                    if d.change != Change::Changed {
                        out.push_str(&fenced("text", a));
                    }
                }
                out.push('\n');
            }
        }
        out.push_str("</details>\n\n");
    }
    out
}

#[derive(Serialize)]
struct JsonDiff<'a> {
    llmreplay_diff: u32,
    counts: Counts,
    #[serde(flatten)]
    diff: &'a Diff,
    /// Each changed test's run against the base's.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    trajectories: &'a [TrajectoryDiff],
}

pub fn json(diff: &Diff, trajectories: &[TrajectoryDiff]) -> Result<String> {
    let mut s = serde_json::to_string_pretty(&JsonDiff {
        llmreplay_diff: 1,
        counts: counts(diff, trajectories),
        diff,
        trajectories,
    })
    .map_err(|e| Error::io("cannot write the diff as JSON", std::io::Error::other(e)))?;
    s.push('\n');
    Ok(s)
}
