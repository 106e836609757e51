//! `cargo llmreplay match suggest [--apply]`: the `[match]` rules that would have keyed the last
//! run's volatile misses the same (a time, a UUID, an id a tool minted), written for you; with
//! `--apply`, added to `llmreplay.toml`, the cassettes re-keyed under them offline, and the
//! tests that missed replayed to show them green. No request leaves the machine.

use crate::args::{CassetteDirArg, Resolved};
use crate::error::{Error, Outcome, Result};
use crate::render::{plural, stderr, term};
use crate::report::{Missing, Report, ReportExt};
use cassettes::classify::{match_table, Class, Rule};
use cassettes::{Slug, TestId};
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
    // Each rule with the tests whose misses suggested it: the tests it will apply to.
    let mut scoped: Vec<(Rule, Vec<TestId>)> = Vec::new();
    for m in &volatile {
        for rule in &m.miss.detail.rules {
            match scoped.iter_mut().find(|(r, _)| r == rule) {
                Some((_, tests)) if !tests.contains(&m.miss.test) => {
                    tests.push(m.miss.test.clone())
                }
                Some(_) => {}
                None => scoped.push((rule.clone(), vec![m.miss.test.clone()])),
            }
        }
    }
    let rules: Vec<Rule> = scoped.iter().map(|(r, _)| r.clone()).collect();
    say_others(&others);
    if rules.is_empty() {
        stderr(&format!(
            "no miss of the last run ({}) is volatile: no [match] rule to suggest\n",
            term(&resolved.rel(&path))
        ));
        return Ok(Outcome::gate(!others.is_empty()));
    }
    let tests: Vec<&TestId> = unique(volatile.iter().map(|m| &m.miss.test));
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
    out.push_str(&format!(
        "\n--apply writes each for the tests whose misses suggested it ({}); widen one by adding ids or globs to its `tests`, or removing `tests`\n",
        term(
            &tests
                .iter()
                .map(|t| t.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )
    ));
    print!("{out}");
    // Every cassette the rules will re-key is read before anything is written: a broken one
    // stops the command with nothing changed.
    let files = cassettes_of(&resolved, &tests)?;
    for file in &files {
        cassettes::read_cassette_with_blobs(file).map_err(|source| Error::ApplyRefused {
            source: Box::new(source),
        })?;
    }
    let config = resolved.root.join(daemon::CONFIG_FILE);
    let added = add_rules(&config, &scoped)?;
    // The rules as the daemon will read them: a file that no longer loads is put back.
    let reloaded = match Resolved::workspace(&args.cassettes) {
        Ok(r) => r,
        Err(e) => {
            added.restore()?;
            return Err(e);
        }
    };
    let written = format!(
        "added {} to {}",
        plural(added.count, "rule"),
        term(&reloaded.rel(&config))
    );
    stderr(&format!("\n{written}\n"));
    let (recordings, changed) = rekey(&reloaded, &files).map_err(|(done, source)| {
        let left: Vec<String> = files[done..]
            .iter()
            .map(|f| term(&reloaded.rel(f)).into_owned())
            .collect();
        Error::ApplyUnfinished {
            written: written.clone(),
            left: left.join(", "),
            source: Box::new(source),
        }
    })?;
    stderr(&format!(
        "re-keyed {} in {} under the new rules; answers unchanged\n",
        plural(recordings, "recording"),
        plural(changed, "cassette")
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

fn unique<'a>(tests: impl Iterator<Item = &'a TestId>) -> Vec<&'a TestId> {
    let mut out: Vec<&TestId> = Vec::new();
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

/// Appends `rules` to `[match] ignore` and `[match] replace`, each naming its tests, creating
/// the file or the table when there is none and leaving every other line as it was; a rule
/// already there is not added twice (one that names its tests gets those it lacks).
fn add_rules(path: &Path, rules: &[(Rule, Vec<TestId>)]) -> Result<Added> {
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
    for (rule, tests) in rules {
        let mut t = toml_edit::InlineTable::new();
        let name = match rule {
            Rule::Ignore { pointer } => {
                t.insert("pointer", pointer.as_str().into());
                "ignore"
            }
            Rule::Replace { pattern, with } => {
                t.insert("pattern", pattern.as_str().into());
                t.insert("with", with.as_str().into());
                "replace"
            }
        };
        let same_rule = t.clone();
        t.insert(
            "tests",
            toml_edit::Value::Array(tests.iter().map(|t| t.as_str()).collect()),
        );
        let value = toml_edit::Value::InlineTable(t);
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
        let found = array.iter().position(|v| is_rule(v, &same_rule));
        match found {
            Some(at) => {
                let existing = array.get_mut(at).expect("found there");
                count += usize::from(widen(existing, tests));
            }
            None => {
                array.push(value);
                count += 1;
            }
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

/// Whether `v` (a bare pointer, or a table) is the rule `rule` holds, whatever tests it names.
fn is_rule(v: &toml_edit::Value, rule: &toml_edit::InlineTable) -> bool {
    let text = |v: Option<&toml_edit::Value>| v.and_then(|v| v.as_str()).map(str::to_owned);
    match v {
        toml_edit::Value::String(s) => text(rule.get("pointer")).as_deref() == Some(s.value()),
        toml_edit::Value::InlineTable(t) => rule
            .iter()
            .all(|(k, want)| text(t.get(k)) == text(Some(want))),
        _ => false,
    }
}

/// Adds to a rule already written the tests it does not name yet; one that names none applies
/// to every test already. Whether it changed.
fn widen(existing: &mut toml_edit::Value, tests: &[TestId]) -> bool {
    let Some(named) = existing
        .as_inline_table_mut()
        .and_then(|t| t.get_mut("tests"))
        .and_then(|t| t.as_array_mut())
    else {
        return false;
    };
    let mut changed = false;
    for test in tests {
        if !named.iter().any(|n| n.as_str() == Some(test.as_str())) {
            named.push(test.as_str());
            changed = true;
        }
    }
    changed
}

/// The cassette files of `tests`' folders: what their rules re-key, and nothing else.
fn cassettes_of(resolved: &Resolved, tests: &[&TestId]) -> Result<Vec<PathBuf>> {
    let folders: Vec<Slug> = tests.iter().map(|t| Slug::from_test_id(t)).collect();
    Ok(cassettes::cassette_files(resolved.cassette_dir())?
        .into_iter()
        .filter(|f| {
            let folder = f.parent().and_then(|p| p.file_name());
            folders
                .iter()
                .any(|s| folder == Some(std::ffi::OsStr::new(s.as_str())))
        })
        .collect())
}

/// `files` re-keyed, each under the rules of the test it is for: how many recordings changed
/// key, in how many files; or how many files were done when one failed, and why.
fn rekey(
    resolved: &Resolved,
    files: &[PathBuf],
) -> std::result::Result<(usize, usize), (usize, cassettes::Error)> {
    let normalizer = &resolved.settings.normalizer;
    let (mut recordings, mut changed_files) = (0, 0);
    for (done, file) in files.iter().enumerate() {
        let changed =
            cassettes::rekey_cassette(file, |test, r| normalizer.for_test(test).renormalize(r))
                .map_err(|e| (done, e))?;
        if !changed.is_empty() {
            recordings += changed.len();
            changed_files += 1;
        }
    }
    Ok((recordings, changed_files))
}

/// Replays `tests` with `cargo llmreplay test`, offline, to show the fix works; its status is
/// this command's.
pub fn replay(tests: &[&TestId], report: &Path) -> Result<Outcome> {
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
