//! `cargo llmreplay diff`: what the recorded answers now say, for review. Compares the
//! cassettes of the work tree with a base commit and prints, per test and provider, the
//! interactions added, removed and changed, as text, as JSON, or as markdown for a pull
//! request comment.

use cassettes::git::{diff_against, ChangeKind, Diff, FileDiff};
use cassettes::review::{Change, InteractionDiff};
use cassettes::Tokens;
use clap::{Args, ValueEnum};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Text,
    Markdown,
    Json,
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
        cargo llmreplay diff --format markdown > pr.md    # a pull request comment"
)]
pub struct DiffArgs {
    /// The commit to compare with [default: the merge base of HEAD and the default branch
    /// (origin/HEAD, origin/main, main, ...), else HEAD].
    #[arg(long, value_name = "REF")]
    base: Option<String>,
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
    /// Where cassettes live [default: cassette_dir in llmreplay.toml, else tests/cassettes].
    #[arg(long, value_name = "DIR")]
    cassette_dir: Option<PathBuf>,
    /// Exit with status 1 when any cassette changed (for scripts).
    #[arg(long)]
    exit_code: bool,
    /// Only cassettes under these paths (a test's folder, a file).
    paths: Vec<PathBuf>,
}

pub fn run(args: DiffArgs) -> Result<ExitCode, String> {
    let (_, cassette_dir) = crate::workspace(args.cassette_dir.clone())?;
    let diff = diff_against(&cassette_dir, args.base.as_deref(), &args.paths)
        .map_err(|e| e.to_string())?;
    let out = match args.format {
        Format::Text => text(&diff, colour()),
        Format::Markdown => markdown(&diff),
        Format::Json => json(&diff),
    };
    print!("{out}");
    Ok(if args.exit_code && !diff.files.is_empty() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn colour() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none()
}

/// The counts a reader wants first.
#[derive(Debug, Default, Serialize, PartialEq)]
pub struct Counts {
    pub tests: usize,
    pub files: usize,
    pub added: usize,
    pub removed: usize,
    pub changed: usize,
    /// Changed interactions whose answer text differs.
    pub answers_changed: usize,
}

pub fn counts(diff: &Diff) -> Counts {
    let mut c = Counts {
        files: diff.files.len(),
        tests: by_test(diff).len(),
        ..Counts::default()
    };
    for d in diff.files.iter().flat_map(|f| &f.interactions) {
        match d.change {
            Change::Added => c.added += 1,
            Change::Removed => c.removed += 1,
            Change::Changed => {
                c.changed += 1;
                c.answers_changed += usize::from(d.answer_changed());
            }
        }
    }
    c
}

fn by_test(diff: &Diff) -> BTreeMap<&str, Vec<&FileDiff>> {
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

fn plural(n: usize, one: &str) -> String {
    format!("{n} {one}{}", if n == 1 { "" } else { "s" })
}

fn headline(c: &Counts) -> String {
    let other = c.changed - c.answers_changed;
    let parts: Vec<String> = [
        (c.answers_changed, "answer changed", "answers changed"),
        (other, "request changed", "requests changed"),
        (c.added, "added", "added"),
        (c.removed, "removed", "removed"),
    ]
    .iter()
    .filter(|(n, _, _)| *n > 0)
    .map(|(n, one, many)| format!("{n} {}", if *n == 1 { one } else { many }))
    .collect();
    let parts = if parts.is_empty() {
        "no interaction changed".to_string()
    } else {
        parts.join(", ")
    };
    format!("{}: {parts}", plural(c.tests, "test"))
}

fn file_counts(f: &FileDiff) -> String {
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
    parts.join(", ")
}

fn kind(k: ChangeKind) -> &'static str {
    match k {
        ChangeKind::New => "new file",
        ChangeKind::Modified => "modified",
        ChangeKind::Deleted => "deleted",
    }
}

fn tokens_line(d: &InteractionDiff) -> Option<String> {
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

fn request_line(d: &InteractionDiff) -> String {
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

fn change_word(c: Change) -> &'static str {
    match c {
        Change::Added => "added",
        Change::Removed => "removed",
        Change::Changed => "changed",
    }
}

/// For a terminal: coloured `-`/`+` lines when `colour`.
pub fn text(diff: &Diff, colour: bool) -> String {
    let paint = |code: &str, s: &str| {
        if colour {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    };
    let c = counts(diff);
    if diff.files.is_empty() {
        return format!("No cassette changed against {}.\n", diff.base);
    }
    let mut out = format!("{} (against {})\n", paint("1", &headline(&c)), diff.base);
    for (test, files) in by_test(diff) {
        out.push_str(&format!("\n{}\n", paint("1", test)));
        for f in files {
            out.push_str(&format!(
                "  {} ({}): {}\n",
                f.path.display(),
                kind(f.kind),
                file_counts(f)
            ));
            if let Some(e) = &f.error {
                out.push_str(&format!("    {e}\n"));
            }
            for d in &f.interactions {
                out.push_str(&format!(
                    "  {} {}\n",
                    paint("1", change_word(d.change)),
                    request_line(d)
                ));
                match (&d.prompt_before, &d.prompt) {
                    (Some(a), Some(b)) => out.push_str(&format!("    prompt: {a:?} -> {b:?}\n")),
                    (None, Some(p)) => out.push_str(&format!("    prompt: {p:?}\n")),
                    _ => {}
                }
                if !d.request_fields.is_empty() {
                    out.push_str(&format!(
                        "    request fields changed: {}\n",
                        d.request_fields.join(", ")
                    ));
                }
                if let Some(diff) = &d.answer_diff {
                    for line in diff.lines() {
                        let code = match line.chars().next() {
                            Some('-') => "31",
                            Some('+') => "32",
                            _ => "0",
                        };
                        out.push_str(&format!("    {}\n", paint(code, line)));
                    }
                } else if let Some(a) = d.answer_after.as_ref().or(d.answer_before.as_ref()) {
                    let label = if d.change == Change::Changed {
                        "answer (unchanged)"
                    } else {
                        "answer"
                    };
                    out.push_str(&format!("    {label}: {}\n", indent(a, "      ")));
                }
                if !d.response_fields.is_empty() {
                    out.push_str(&format!(
                        "    response fields changed: {}\n",
                        d.response_fields.join(", ")
                    ));
                }
                if let Some(t) = tokens_line(d) {
                    out.push_str(&format!("    {t}\n"));
                }
            }
        }
    }
    out
}

fn indent(text: &str, by: &str) -> String {
    text.trim_end().replace('\n', &format!("\n{by}"))
}

fn html(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A code fence longer than any run of backticks in `body`.
fn fenced(lang: &str, body: &str) -> String {
    let longest = body.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest.max(2) + 1);
    format!("{fence}{lang}\n{}\n{fence}\n", body.trim_end())
}

fn inline(s: &str) -> String {
    let one_line: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    let short: String = one_line.chars().take(200).collect();
    let short = if short.len() < one_line.len() {
        format!("{short}…")
    } else {
        short
    };
    format!("`{}`", short.replace('`', "'"))
}

/// For a pull request comment: the counts first, then one collapsed section per test.
pub fn markdown(diff: &Diff) -> String {
    let c = counts(diff);
    let mut out = String::from("### cargo-llmreplay: recorded answers\n\n");
    if diff.files.is_empty() {
        out.push_str(&format!("No cassette changed against {}.\n", diff.base));
        return out;
    }
    out.push_str(&format!(
        "**{}**, in {} (against {}).\n\n",
        headline(&c),
        plural(c.files, "cassette"),
        diff.base
    ));
    for (test, files) in by_test(diff) {
        let summary: Vec<String> = files
            .iter()
            .map(|f| format!("{}: {}", html(&f.provider), file_counts(f)))
            .collect();
        out.push_str(&format!(
            "<details>\n<summary><code>{}</code> ({})</summary>\n\n",
            html(test),
            summary.join("; ")
        ));
        for f in files {
            out.push_str(&format!("`{}` ({})\n\n", f.path.display(), kind(f.kind)));
            if let Some(e) = &f.error {
                out.push_str(&format!("**does not parse**: {}\n\n", html(e)));
            }
            for d in &f.interactions {
                out.push_str(&format!(
                    "**{}** `{}`\n\n",
                    change_word(d.change),
                    request_line(d)
                ));
                match (&d.prompt_before, &d.prompt) {
                    (Some(a), Some(b)) => {
                        out.push_str(&format!("- prompt: {} → {}\n", inline(a), inline(b)))
                    }
                    (None, Some(p)) => out.push_str(&format!("- prompt: {}\n", inline(p))),
                    _ => {}
                }
                let code = |fields: &[String]| -> String {
                    let quoted: Vec<String> = fields.iter().map(|f| format!("`{f}`")).collect();
                    quoted.join(", ")
                };
                if !d.request_fields.is_empty() {
                    out.push_str(&format!(
                        "- request fields changed: {}\n",
                        code(&d.request_fields)
                    ));
                }
                if !d.response_fields.is_empty() {
                    out.push_str(&format!(
                        "- answer text unchanged; response fields changed: {}\n",
                        code(&d.response_fields)
                    ));
                }
                if let Some(t) = tokens_line(d) {
                    out.push_str(&format!("- {t}\n"));
                }
                out.push('\n');
                if let Some(diff) = &d.answer_diff {
                    out.push_str(&fenced("diff", diff));
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
}

pub fn json(diff: &Diff) -> String {
    let mut s = serde_json::to_string_pretty(&JsonDiff {
        llmreplay_diff: 1,
        counts: counts(diff),
        diff,
    })
    .expect("the diff serialises");
    s.push('\n');
    s
}
