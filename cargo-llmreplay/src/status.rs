//! `cargo llmreplay status`: the report of a run, without running anything. Cassettes changed
//! against HEAD, folders of no test (from `cargo nextest list`), files that do not parse or
//! whose summary disagrees with their answer. `--check` makes any of these fail, for CI.

use crate::args::{CassetteDirArg, Resolved};
use crate::error::{Error, Outcome, Result};
use crate::render::{self, term};
use crate::report::{list_tests, orphan_folders, RunScope};
use cassettes::{cassette_files, fix_cassette, Fixed};
use clap::Args;
use review::audit::{audit_all, ErrorAnswer, Finding, Problem};
use review::git::{changes_against_head, Change};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

#[derive(Args)]
#[command(
    about = "Report changed, orphaned and broken cassettes without running tests",
    long_about = "Report changed, orphaned and broken cassettes without running tests.\n\n\
        Lists cassette files new, modified or deleted against git HEAD; cassette folders whose slug \
        matches no test of `cargo nextest list` (this builds the tests); cassette files that do not \
        parse, sit where their test would not look them up, refer to a missing or damaged blob, or \
        whose key, seal or summary no longer matches their request or answer (a hand edit), and \
        temporary files a killed run left. With --fix, first moves each folder the slug rule of 0.1.0 named to its test's name now (a folder it cannot move is named, with why), then recomputes those keys, seals and \
        summaries (a deliberate edit is sealed again) and removes the leftover temporary files. \
        With --check, exits 1 when there is any of these."
)]
pub struct StatusArgs {
    /// Exit with status 1 when anything is changed, orphaned or broken.
    #[arg(long)]
    check: bool,
    /// First recompute the keys, seals and summaries of cassettes edited by hand and remove
    /// temporary files a killed run left (under each folder's lock), and say what changed.
    #[arg(long)]
    fix: bool,
    /// Skip `cargo nextest list`, and so the orphan check.
    #[arg(long)]
    no_list: bool,
    /// Also list cassette folders with a recording neither recorded nor verified within AGE
    /// (30d, 2w; undated recordings, of before dates were kept, count); --check then fails on
    /// them too.
    #[arg(long, value_name = "AGE", value_parser = crate::stale::max_age)]
    stale: Option<std::time::Duration>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    cassettes: CassetteDirArg,
}

/// A spool a run left, not yet applied.
#[derive(Serialize, Deserialize)]
pub(crate) struct LeftSpool {
    #[serde(with = "cassettes::lossy_path")]
    run_dir: PathBuf,
    /// Its tests with recordings not in their cassettes, and how many each.
    tests: BTreeMap<String, usize>,
    /// Why this version cannot apply it (another version's spool, one that cannot be read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    unusable: Option<String>,
}

#[derive(Serialize, Deserialize)]
pub(crate) struct Status {
    changed: Vec<Change>,
    /// False when the cassettes are not in a git repository.
    git: bool,
    orphans: Vec<String>,
    /// False when the orphan check did not run.
    listed: bool,
    problems: Vec<Finding>,
    /// Spools a run that did not end left, with recordings not yet in the cassettes:
    /// `cargo llmreplay recover` (or the next run) applies them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    spools: Vec<LeftSpool>,
    /// Recordings whose answer is a 4xx: kept (error-handling tests need them), listed since a
    /// wrong request recorded by mistake looks the same. Not a failure of --check.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    error_answers: Vec<ErrorAnswer>,
    /// With --stale: each cassette folder past the age, with its least fresh date (null for
    /// an undated recording), oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    stale: Vec<StaleFolder>,
    /// What --fix changed, per file.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[serde(default)]
    fixed: Vec<FixedFile>,
}

#[derive(Serialize, Deserialize)]
struct StaleFolder {
    folder: String,
    fresh: Option<String>,
    /// Its age in seconds, when its date is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    age_s: Option<u64>,
}

#[derive(Serialize, Deserialize)]
struct FixedFile {
    #[serde(with = "cassettes::lossy_path")]
    path: PathBuf,
    /// A folder an older version's slug rule named, moved here (today's name for its test).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    moved_to: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    interactions: Vec<Fixed>,
    /// A leftover temporary file, removed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    removed: bool,
}

pub fn run(args: StatusArgs) -> Result<Outcome> {
    let resolved = Resolved::workspace(&args.cassettes)?;
    let cassette_dir = resolved.cassette_dir();
    let mut fixed = Vec::new();
    if args.fix {
        let (moved, _) = cassettes::move_legacy_folders(cassette_dir)?;
        for moved in moved {
            fixed.push(FixedFile {
                path: moved.from,
                moved_to: Some(moved.to),
                interactions: Vec::new(),
                removed: false,
            });
        }
        for path in review::audit::leftover_temps(cassette_dir)? {
            cassettes::remove_leftover_temp(&path)?;
            fixed.push(FixedFile {
                path,
                moved_to: None,
                interactions: Vec::new(),
                removed: true,
            });
        }
        for path in cassette_files(cassette_dir)? {
            // A file that does not parse cannot be fixed; the audit below names it.
            if let Ok(interactions) = fix_cassette(&path) {
                if !interactions.is_empty() {
                    fixed.push(FixedFile {
                        path,
                        moved_to: None,
                        interactions,
                        removed: false,
                    });
                }
            }
        }
    }
    let changed = changes_against_head(cassette_dir)?;
    let audited = audit_all(cassette_dir)?;
    let mut orphans = Vec::new();
    let mut listed = false;
    // A Python or Node project has no nextest suite to match folders with: its runner's
    // plugin names the tests, and only a run knows them.
    let cargo_project = resolved.root.join("Cargo.toml").is_file();
    if !args.no_list && cargo_project {
        let suite = list_tests(&RunScope::whole_workspace()).map_err(|e| {
            Error::Precondition(format!("{e}; so cassette folders cannot be matched with tests (--no-list skips this check)"))
        })?;
        let folders: BTreeSet<String> = cassettes::Store::new(cassette_dir)
            .folders()?
            .into_iter()
            .collect();
        orphans = orphan_folders(&suite, &folders);
        listed = true;
    }
    let spools = cassettes::spool::unapplied_spools(
        &daemon::settle::runs_dir(&resolved.target_dir()),
        cassette_dir,
    )?
    .into_iter()
    .map(|s| LeftSpool {
        tests: s
            .to_apply()
            .into_iter()
            .map(|t| (t.to_string(), s.recorded[t].len()))
            .collect(),
        run_dir: s.run_dir,
        unusable: s.unusable,
    })
    .collect();
    let stale = match args.stale {
        Some(max) => stale_folders(cassette_dir, max)?,
        None => Vec::new(),
    };
    let status = Status {
        stale,
        spools,
        git: changed.is_some(),
        changed: changed.unwrap_or_default(),
        orphans,
        listed,
        problems: audited.problems,
        error_answers: audited.error_answers,
        fixed,
    };
    if args.json {
        let mut json = serde_json::to_string_pretty(&status)
            .map_err(|e| Error::io("cannot write the status as JSON", std::io::Error::other(e)))?;
        json.push('\n');
        render::stdout(&json).map_err(|e| Error::io("cannot write to stdout", e))?;
    } else {
        render::stderr(&text(&status, &resolved.root, cassette_dir));
    }
    let any = !status.changed.is_empty()
        || !status.orphans.is_empty()
        || !status.problems.is_empty()
        || !status.spools.is_empty()
        || !status.stale.is_empty();
    Ok(Outcome::gate(args.check && any))
}

/// Every cassette folder with a recording older than `max`, oldest first.
fn stale_folders(cassette_dir: &Path, max: std::time::Duration) -> Result<Vec<StaleFolder>> {
    let fresh: BTreeMap<String, Option<String>> = cassettes::Store::new(cassette_dir)
        .folders()?
        .into_iter()
        .filter_map(|f| crate::stale::oldest_in(&cassette_dir.join(&f)).map(|d| (f, d)))
        .collect();
    let now = std::time::SystemTime::now();
    Ok(crate::stale::stale_tests(&fresh, max, now)
        .into_iter()
        .map(|s| StaleFolder {
            fresh: fresh[&s.test].clone(),
            age_s: s.age.map(|a| a.as_secs()),
            folder: s.test,
        })
        .collect())
}

pub(crate) fn text(s: &Status, root: &Path, cassette_dir: &Path) -> String {
    let rel = |p: &Path| term(&p.strip_prefix(root).unwrap_or(p).to_string_lossy()).into_owned();
    // Folders the old slug rule named, and why `--fix` cannot move one.
    let legacy: std::collections::BTreeMap<PathBuf, Option<String>> =
        cassettes::legacy_folders(cassette_dir)
            .unwrap_or_default()
            .into_iter()
            .map(|l| (l.folder, l.stuck))
            .collect();
    let mut out = String::new();
    for f in &s.fixed {
        if let Some(to) = &f.moved_to {
            let _ = writeln!(
                out,
                "moved {} to {}: the folder an older version named for its test",
                rel(&f.path),
                rel(to)
            );
        }
        if f.removed {
            let _ = writeln!(
                out,
                "removed {}: a temporary file a killed run left",
                rel(&f.path)
            );
        }
        for x in &f.interactions {
            let mut what = Vec::new();
            if let Some((old, new)) = &x.key {
                what.push(format!(
                    "key {} -> {}",
                    &old.as_str()[..old.as_str().len().min(12)],
                    &new.as_str()[..12]
                ));
            }
            if x.summary {
                what.push("summary derived anew".to_string());
            }
            if x.seal {
                what.push("answer sealed".to_string());
            }
            out.push_str(&format!(
                "fixed {} interaction {}: {}\n",
                rel(&f.path),
                x.index + 1,
                what.join(", ")
            ));
        }
    }
    for spool in &s.spools {
        if let Some(why) = &spool.unusable {
            let _ = writeln!(
                out,
                "left by a run, and not for this cargo-llmreplay to apply: {} ({})",
                rel(&spool.run_dir),
                term(why),
            );
            continue;
        }
        let _ = writeln!(
            out,
            "not yet in the cassettes: {} left by a run that did not end ({}); apply them with `cargo llmreplay recover`",
            render::plural(spool.tests.values().sum(), "recording"),
            rel(&spool.run_dir),
        );
        for (test, n) in &spool.tests {
            let _ = writeln!(out, "  {}  {}", term(test), render::plural(*n, "recording"));
        }
    }
    if !s.stale.is_empty() {
        let _ = writeln!(
            out,
            "stale ({}): neither recorded nor verified since",
            s.stale.len()
        );
        for f in &s.stale {
            let age = match f.age_s {
                Some(secs) => crate::stale::age_words(std::time::Duration::from_secs(secs)),
                None => "no usable date: none kept, garbled, or ahead of this clock".into(),
            };
            let _ = writeln!(out, "  {}/  {age}", rel(&cassette_dir.join(&f.folder)));
        }
        let _ = writeln!(out, "  `cargo llmreplay rerun --mark-verified` checks them against the live provider and stamps those that hold; or record them again");
    }
    if !s.git {
        out.push_str("not in a git repository: no changes to report\n");
    }
    if !s.changed.is_empty() {
        out.push_str(&format!("changed against HEAD ({}):\n", s.changed.len()));
        for c in &s.changed {
            let _ = writeln!(
                out,
                "  {}  {}",
                render::change_kind_column(c.kind),
                rel(&c.path)
            );
        }
    }
    if !s.orphans.is_empty() {
        out.push_str(&format!("orphaned ({}):\n", s.orphans.len()));
        for o in &s.orphans {
            out.push_str(&format!(
                "  {}/  no test of `cargo nextest list` has this folder's slug (renamed or deleted test?)\n",
                rel(&cassette_dir.join(o))
            ));
        }
        out.push_str("  a renamed test keeps its recordings with `cargo llmreplay mv OLD NEW`; a deleted test's go with `cargo llmreplay prune` after a full run\n");
    }
    if !s.problems.is_empty() {
        out.push_str(&format!("broken ({}):\n", s.problems.len()));
        for f in &s.problems {
            let what = match &f.problem {
                Problem::Corrupt { message } => term(message).into_owned(),
                Problem::SummaryMismatch { index } => format!(
                    "interaction {}: its summary does not match its answer (edited by hand?); run `cargo llmreplay status --fix` to derive it anew",
                    index + 1
                ),
                Problem::KeyMismatch { index } => format!(
                    "interaction {}: its key is not the key of its request (edited by hand?), so replay refuses it; run `cargo llmreplay status --fix`",
                    index + 1
                ),
                Problem::SealMismatch { index } => format!(
                    "interaction {}: its answer no longer matches its seal (edited by hand?), so replay refuses it; if the edit is meant, run `cargo llmreplay status --fix` to seal it again",
                    index + 1
                ),
                Problem::Secret {
                    index,
                    pointer,
                    what,
                } => format!(
                    "interaction {}: {} holds what looks like {what}: revoke it, then remove it (`[redact] body_fields` in llmreplay.toml keeps a field out of recordings) and record the test again",
                    index + 1,
                    term(pointer)
                ),
                Problem::Unsealed { index } => format!(
                    "interaction {}: its answer has no seal, so a hand edit would go unseen; if the answer is as recorded (or the edit is meant), run `cargo llmreplay status --fix` to seal it",
                    index + 1
                ),
                Problem::LeftoverTemp => "a temporary file a killed run left; `cargo llmreplay status --fix` removes it".to_string(),
                Problem::Blob { message } => term(message).into_owned(),
                Problem::Misplaced { expected } if legacy.contains_key(f.path.parent().unwrap_or(&f.path)) => {
                    match &legacy[f.path.parent().unwrap_or(&f.path)] {
                        None => format!(
                            "its folder is the one an older version named for its test, which is now looked up in {}; `cargo llmreplay status --fix` moves it there",
                            rel(expected)
                        ),
                        Some(why) => format!(
                            "its folder is the one an older version named for its test, which is now looked up in {}; `status --fix` cannot move it: {}",
                            rel(expected),
                            term(why)
                        ),
                    }
                }
                Problem::Misplaced { expected } => format!(
                    "its test and provider are looked up in {}; move it there, or, if its folder was renamed for a renamed test, `cargo llmreplay mv OLD_TEST NEW_TEST` finishes the rename",
                    rel(expected)
                ),
            };
            out.push_str(&format!("  {}: {what}\n", rel(&f.path)));
        }
    }
    if !s.error_answers.is_empty() {
        out.push_str(&format!(
            "error answers ({}), kept for tests of error handling; re-record any that a wrong request made:\n",
            s.error_answers.len()
        ));
        for e in &s.error_answers {
            let _ = writeln!(
                out,
                "  {} #{}: {} on {} {}",
                rel(&e.cassette),
                e.interaction,
                e.status,
                term(&e.method),
                term(&e.path)
            );
        }
    }
    if s.changed.is_empty() && s.orphans.is_empty() && s.problems.is_empty() {
        out.push_str(&format!(
            "cassettes in {} are clean{}\n",
            rel(cassette_dir),
            if s.listed {
                ""
            } else {
                " (orphans not checked)"
            }
        ));
    }
    out
}
