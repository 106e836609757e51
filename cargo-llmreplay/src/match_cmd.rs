//! `cargo llmreplay match suggest [--apply]`: the `[match]` rules that would have keyed the last
//! run's volatile misses the same (a time, a UUID, an id a tool minted), written for you; with
//! `--apply`, added to `llmreplay.toml`, the cassettes re-keyed under them offline, and the
//! tests that missed replayed to show them green. No request leaves the machine.

use crate::args::{CassetteDirArg, Resolved};
use crate::error::{Error, Outcome, Result};
use crate::render::{plural, stderr, term};
use crate::report::{Missing, Report, ReportExt};
use cassettes::classify::{match_table, Class, Rule};
use clap::{Args, Subcommand};
use std::path::{Path, PathBuf};

#[derive(Subcommand)]
pub enum MatchCommand {
    /// Print the [match] rules for the last run's volatile misses; --apply adds them, re-keys and replays
    #[command(
        long_about = "Print the [match] rules for the last run's volatile misses.\n\n\
        A miss is volatile when every field that differs from its closest recording is a value \
        that changes on every run: an ISO-8601 or epoch time, a UUID or ULID, a hex id of the \
        same length, an id a tool minted (`call_...`, `file-...`). Each rule is as narrow as the \
        evidence: a whole field is ignored by its JSON pointer; a value inside a text is replaced \
        by a pattern of its shape, numbered (`<UUID_{n}>`) when a request holds several.\n\n\
        With --apply: the rules are added to llmreplay.toml's [match] table (its comments and \
        order kept), every cassette is re-keyed under them (answers untouched, as status --fix \
        re-seals), and the tests that missed are replayed with cargo llmreplay test. Nothing is \
        sent upstream.\n\n\
        Examples:\n  \
        cargo llmreplay match suggest\n  \
        cargo llmreplay match suggest --apply"
    )]
    Suggest(SuggestArgs),
}

#[derive(Args)]
pub struct SuggestArgs {
    /// Add the rules to llmreplay.toml, re-key the cassettes and replay the tests that missed.
    #[arg(long)]
    apply: bool,
    /// With --apply: do not replay the tests afterwards.
    #[arg(long, requires = "apply")]
    no_replay: bool,
    /// The report to read [default: <target dir>/llmreplay/report.json].
    #[arg(long, value_name = "PATH")]
    report: Option<PathBuf>,
    #[command(flatten)]
    cassettes: CassetteDirArg,
}

pub fn run(command: MatchCommand) -> Result<Outcome> {
    let MatchCommand::Suggest(args) = command;
    let resolved = Resolved::workspace(&args.cassettes)?;
    let (path, report) = Report::last_run(&resolved, args.report.as_deref())?;
    let (volatile, others): (Vec<&Missing>, Vec<&Missing>) = report.missing.iter().partition(|m| {
        m.miss.detail.class == Some(Class::Volatile) && !m.miss.detail.rules.is_empty()
    });
    let mut rules: Vec<Rule> = Vec::new();
    for m in &volatile {
        for rule in &m.miss.detail.rules {
            if !rules.contains(rule) {
                rules.push(rule.clone());
            }
        }
    }
    say_others(&others);
    if rules.is_empty() {
        stderr(&format!(
            "no miss of the last run ({}) is volatile: no [match] rule to suggest\n",
            term(&resolved.rel(&path))
        ));
        return Ok(Outcome::gate(!others.is_empty()));
    }
    let tests: Vec<&cassettes::TestId> = unique(volatile.iter().map(|m| &m.miss.test));
    let mut out = format!(
        "{} for {} of the last run ({}):\n\n",
        plural(rules.len(), "[match] rule"),
        match volatile.len() {
            1 => "1 volatile miss".to_string(),
            n => format!("{n} volatile misses"),
        },
        tests
            .iter()
            .map(|t| term(t.as_str()).into_owned())
            .collect::<Vec<_>>()
            .join(", ")
    );
    out.push_str(&match_table(&rules));
    if !args.apply {
        out.push_str(&format!(
            "\nadd them to llmreplay.toml, re-key the cassettes and replay: {} match suggest --apply\n",
            crate::program()
        ));
        print!("{out}");
        return Ok(Outcome::Success);
    }
    print!("{out}");
    let config = resolved.root.join(daemon::CONFIG_FILE);
    let added = add_rules(&config, &rules)?;
    // The rules as the daemon will read them: a file that no longer loads is put back.
    let reloaded = match Resolved::workspace(&args.cassettes) {
        Ok(r) => r,
        Err(e) => {
            added.restore()?;
            return Err(e);
        }
    };
    stderr(&format!(
        "\nadded {} to {}\n",
        plural(added.count, "rule"),
        term(&reloaded.rel(&config))
    ));
    let (recordings, files) = rekey_all(&reloaded)?;
    stderr(&format!(
        "re-keyed {} in {} under the new rules; answers unchanged\n",
        plural(recordings, "recording"),
        plural(files, "cassette")
    ));
    if args.no_replay {
        return Ok(Outcome::Success);
    }
    replay(&tests, &path)
}

/// What else missed, and what fixes it, so that no miss is left unexplained.
fn say_others(others: &[&Missing]) {
    for m in others {
        let why = match m.miss.detail.class {
            Some(Class::SdkShape) => format!(
                "sdk shape: keep its answer under the new request: {}",
                daemon::rekey_command(crate::program(), &m.miss.test)
            ),
            Some(Class::Semantic) => format!("a real change: record it: {}", m.command),
            _ => format!("no recording to compare with: record it: {}", m.command),
        };
        stderr(&format!(
            "  {}  {} {}: {}\n",
            term(m.miss.test.as_str()),
            term(&m.miss.method),
            term(&m.miss.path),
            term(&why)
        ));
    }
}

fn unique<'a>(tests: impl Iterator<Item = &'a cassettes::TestId>) -> Vec<&'a cassettes::TestId> {
    let mut out: Vec<&cassettes::TestId> = Vec::new();
    for t in tests {
        if !out.contains(&t) {
            out.push(t);
        }
    }
    out
}

/// The file as it was before rules were added, to put back if it no longer loads.
struct Added {
    path: PathBuf,
    before: Option<String>,
    count: usize,
}

impl Added {
    fn restore(&self) -> Result<()> {
        let restored = match &self.before {
            Some(text) => std::fs::write(&self.path, text),
            None => std::fs::remove_file(&self.path),
        };
        restored.map_err(|e| Error::io(format!("restoring {}", self.path.display()), e))
    }
}

/// Appends `rules` to `[match] ignore` and `[match] replace`, creating the file or the table
/// when there is none and leaving every other line as it was; a rule already there is not
/// added twice.
fn add_rules(path: &Path, rules: &[Rule]) -> Result<Added> {
    let before = match std::fs::read_to_string(path) {
        Ok(text) => Some(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(Error::io(format!("reading {}", path.display()), e)),
    };
    let mut doc: toml_edit::DocumentMut = before
        .as_deref()
        .unwrap_or("")
        .parse()
        .map_err(|e| Error::Usage(format!("{} does not parse: {e}", path.display())))?;
    let table = doc
        .entry("match")
        .or_insert_with(|| toml_edit::Item::Table(toml_edit::Table::new()))
        .as_table_mut()
        .ok_or_else(|| {
            Error::Usage(format!(
                "{}: `match` is not a table; make it [match] and run this again",
                path.display()
            ))
        })?;
    let mut count = 0;
    for rule in rules {
        let (name, value) = match rule {
            Rule::Ignore { pointer } => ("ignore", toml_edit::Value::from(pointer.as_str())),
            Rule::Replace { pattern, with } => {
                let mut t = toml_edit::InlineTable::new();
                t.insert("pattern", pattern.as_str().into());
                t.insert("with", with.as_str().into());
                ("replace", toml_edit::Value::InlineTable(t))
            }
        };
        let array = table
            .entry(name)
            .or_insert_with(|| toml_edit::value(toml_edit::Array::new()))
            .as_array_mut()
            .ok_or_else(|| {
                Error::Usage(format!(
                    "{}: [match] {name} is not a list; make it one and run this again",
                    path.display()
                ))
            })?;
        let same = |v: &toml_edit::Value| v.to_string().trim() == value.to_string().trim();
        if !array.iter().any(same) {
            array.push(value);
            count += 1;
        }
        // One rule a line: a list of patterns reads, and diffs, better that way.
        if array.len() > 1 {
            for v in array.iter_mut() {
                v.decor_mut().set_prefix("\n  ");
                v.decor_mut().set_suffix("");
            }
            array.set_trailing("\n");
            array.set_trailing_comma(true);
        }
    }
    std::fs::write(path, doc.to_string())
        .map_err(|e| Error::io(format!("writing {}", path.display()), e))?;
    Ok(Added {
        path: path.to_path_buf(),
        before,
        count,
    })
}

/// Every cassette re-keyed under the rules `resolved` compiled: how many recordings changed
/// key, in how many files.
fn rekey_all(resolved: &Resolved) -> Result<(usize, usize)> {
    let normalizer = &resolved.settings.normalizer;
    let (mut recordings, mut files) = (0, 0);
    for file in cassettes::cassette_files(resolved.cassette_dir())? {
        let changed = cassettes::rekey_cassette(&file, |r| normalizer.renormalize(r))?;
        if !changed.is_empty() {
            recordings += changed.len();
            files += 1;
        }
    }
    Ok((recordings, files))
}

/// Replays `tests` with `cargo llmreplay test`, offline, to show the fix works; its status is
/// this command's.
pub fn replay(tests: &[&cassettes::TestId], report: &Path) -> Result<Outcome> {
    let Some(filter) = daemon::tests_filter(tests) else {
        stderr("the tests that missed are not nextest's: run them again against cargo llmreplay serve to check\n");
        return Ok(Outcome::Success);
    };
    stderr(&format!(
        "replaying {}: {} test -E {}\n",
        plural(tests.len(), "test"),
        crate::program(),
        cassettes::shell_quote(&filter)
    ));
    let exe = std::env::current_exe()
        .map_err(|e| Error::io("finding this program to run the tests", e))?;
    let status = std::process::Command::new(exe)
        .args(["llmreplay", "test", "--report"])
        .arg(report)
        .args(["-E", &filter])
        .status()
        .map_err(|e| Error::io("running cargo llmreplay test", e))?;
    Ok(match status.code() {
        Some(0) => Outcome::Success,
        Some(code) => Outcome::Nextest(code.clamp(1, 255) as u8),
        None => Outcome::GateFailed,
    })
}
