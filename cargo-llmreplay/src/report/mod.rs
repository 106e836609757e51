//! The report after a run: requests that found no recording (from the daemon's journal),
//! recordings and cassette folders nothing used (journal, store and `cargo nextest list`), and
//! cassette files changed against git HEAD. Printed on stderr, written as JSON. Its types are
//! `runlog::report`'s, for any tool to read; building, judging and printing it are this module's
//! (`ReportExt`).

mod command;
pub(crate) mod html;
mod scope;
pub(crate) mod sections;
mod summary;

pub use command::{run, ReportCommand};
pub use runlog::report::{Missing, RenamedFrom, Report, RunScope, Unused};
pub use scope::{list_tests, read_list, scope_of, spawn_list};
pub(crate) use sections::{ledger_line, max_spend_sentence};
pub(crate) use summary::ledger_text;

use crate::error::{exit, Error, Outcome, Result};
use crate::render::{plural, term, Styles};
use cassettes::{Slug, Store, TestId};
use daemon::{Journal, Mode, Stats};
use review::git::{changes_against_head, Change};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deny {
    /// Recordings or cassette folders that nothing used.
    Unused,
    /// Cassette files new, modified or deleted against git HEAD.
    Changed,
    /// Calls captured on their way to a host with no recording (replay answered them as
    /// missing; they never left the machine). These fail a run as anything missing does;
    /// the value is kept so that gates written for it still parse.
    Escaped,
    /// Recordings of the tests that ran neither recorded nor verified within this long.
    Stale(std::time::Duration),
}

impl std::str::FromStr for Deny {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Deny, String> {
        match s {
            "unused" => Ok(Deny::Unused),
            "changed" => Ok(Deny::Changed),
            "escaped" => Ok(Deny::Escaped),
            _ => match s.strip_prefix("stale=") {
                Some(age) => crate::stale::max_age(age).map(Deny::Stale),
                None => Err(format!(
                    "{s:?} is no gate: use unused, changed, escaped or stale=AGE (stale=30d)"
                )),
            },
        }
    }
}

/// Where a run's report goes and what fails its gate: the flags `test` and `run` share.
#[derive(clap::Args, Debug, Default)]
pub struct GateArgs {
    /// Write the JSON report here [default: <target dir>/llmreplay/report.json].
    #[arg(long, value_name = "PATH")]
    pub report: Option<PathBuf>,
    /// Fail the run on unused recordings and folders (unused), on cassettes changed against
    /// git HEAD (changed), or on recordings of the tests that ran neither recorded nor verified
    /// within AGE (stale=30d; undated ones count). Repeatable. Missing and escaped calls always
    /// fail a run; `escaped` is accepted for gates that name it.
    #[arg(long, value_name = "unused|changed|escaped|stale=AGE")]
    pub deny: Vec<Deny>,
}

pub struct Inputs<'a> {
    pub mode: Mode,
    pub stats: Stats,
    pub journal: &'a Journal,
    pub store: &'a Store,
    pub cassette_dir: &'a Path,
    pub scope: &'a RunScope,
    /// The suite's test ids as nextest listed them, if known.
    pub listed: Option<&'a BTreeSet<TestId>>,
    pub tests_passed: bool,
    /// nextest ran fail-fast and the run failed.
    pub stopped_early: bool,
    /// What the run changed in each test's cassettes.
    pub recorded: Vec<cassettes::TestChanges>,
    /// Where the daemon's log is.
    pub log: Option<&'a Path>,
    /// What git says of the cassettes, when read already: a run that writes none reads it
    /// while the tests run.
    pub changes: Option<Result<Option<Vec<Change>>, review::Error>>,
}

/// What the CLI does with a report: builds it from a run, reads, merges and writes it, judges its
/// gate and prints it. The report's type is `runlog`'s, for any tool to read; this is the part
/// that needs the daemon, git and the terminal.
pub trait ReportExt {
    /// The report of a run, from what the daemon's journal, the store and git say.
    fn build(inputs: Inputs) -> Result<Report, review::Error>;

    /// A cassette file (`depth` 2) or folder (1) the report names, on this machine: rebased on
    /// `cassette_dir` (the report may come from another machine; `<slug>/<provider>.json` is
    /// kept when its prefix differs), and refused unless it is one of `cassette_dir`'s, links
    /// resolved: an edited report never makes a command (`doing`: "prune removes") touch
    /// anything else.
    fn cassette_on_this_machine(
        &self,
        cassette_dir: &Path,
        named: &Path,
        depth: usize,
        doing: &str,
    ) -> Result<PathBuf>;

    /// The report at `given`, else the last run's in the workspace's target dir, with its path.
    fn last_run(
        resolved: &crate::args::Resolved,
        given: Option<&Path>,
    ) -> Result<(PathBuf, Report)>;

    /// The report written at `path`.
    fn read(path: &Path) -> Result<Report>;

    /// Combines the reports of a suite's partitions. Cassette folders are judged only here,
    /// once every partition of `M/N` is in, against every partition's list of the suite.
    fn merge(reports: Vec<Report>) -> Result<Report>;

    /// Ends a run whose command exited with `status`: learns from the report it replaces at
    /// `path`, writes this one there, prints its summary (paths relative to `root`) and why the
    /// gate fails, writes the CI step summary, and says how the run ends.
    fn conclude(
        &mut self,
        path: &Path,
        root: &Path,
        status: std::process::ExitStatus,
        deny: &[Deny],
    ) -> Result<Outcome>;

    /// Takes as volatile a field the run `before` also missed on, against the same recording,
    /// with another value, when nothing else that differs changed between the two runs: two
    /// runs of one test that send different values there, unasked.
    fn learn_volatile(&mut self, before: &Report);

    /// Writes the report at `path`, replacing what was there at once.
    fn write(&self, path: &Path) -> Result<()>;

    /// nextest's own status when tests failed; else 1 when any request was answered as
    /// missing (a captured call to a host with no recording too, though the test swallowed
    /// the error), or unused or changed under `--deny`; else 0. A merged report has no
    /// nextest status of its own.
    fn outcome(&self, nextest: Option<ExitStatus>, deny: &[Deny]) -> Outcome;

    /// Why the run fails its gate, each with what fixes it; empty when it passes. Said on the
    /// terminal and in the step summary alike.
    fn gate_failures(&self, deny: &[Deny]) -> Vec<String>;

    /// What the summary and the page say, decided once as data (paths relative to `root`).
    fn sections(&self, root: &Path) -> sections::Sections;

    /// Ends a run's output: the summary on stderr (paths relative to `root`, then where the
    /// report is, at `path`), why the gate fails, and the page added to the CI job's summary.
    /// The sections are built once and rendered for each.
    fn show(&self, root: &Path, path: &Path, failures: &[String]);

    /// Why the run fails its gate, for the terminal: one line each, with its fix.
    fn gate_text(failures: &[String], styles: Styles) -> String;

    /// The summary after a run, as `show` prints it.
    #[cfg(test)]
    fn summary(&self, root: &Path, path: &Path, styles: Styles) -> String;

    /// The page, as `show` adds it to the CI job's summary.
    #[cfg(test)]
    fn markdown(&self) -> String;
}

impl ReportExt for Report {
    fn build(inputs: Inputs) -> Result<Report, review::Error> {
        // A retried test asks again for what it missed the first time: report it once.
        let mut seen = BTreeSet::new();
        let mut missing: Vec<Missing> = inputs
            .journal
            .misses()
            .into_iter()
            .filter(|m| seen.insert((m.test.clone(), m.key.clone(), m.ordinal)))
            .map(|miss| Missing {
                command: daemon::record_command(crate::program(), &miss.test),
                rerecord: (miss.detail.same_call && miss.test.is_nextest())
                    .then(|| daemon::rerecord_command(crate::program(), &miss.test)),
                renamed_from: None,
                miss,
            })
            .collect();
        find_renames(inputs.cassette_dir, &mut missing, &inputs.journal.suite())?;
        let (escaped, missing): (Vec<Missing>, Vec<Missing>) = missing
            .into_iter()
            .partition(|m| m.miss.detail.host.is_some());
        let mut unused = Vec::new();
        let outcomes = inputs.journal.outcomes();
        for test in inputs.journal.tests() {
            // A test that skipped itself (a skipif, pytest.skip part way) did not get to the
            // calls it did not make: their recordings are not unused, and prune keeps them.
            if outcomes.get(&test) == Some(&runlog::TestOutcome::Skipped) {
                continue;
            }
            for u in inputs.store.unused_in(&test)? {
                unused.push(Unused::Recording(u));
            }
        }
        let (mut suite, mut folders) = (None, None);
        match inputs.listed {
            Some(listed) if inputs.scope.whole_suite() => {
                let present = inputs.store.folders()?.into_iter().collect();
                unused.extend(orphans(inputs.cassette_dir, listed, &present));
            }
            // A partition alone cannot tell an orphan from another partition's test.
            Some(listed) if !inputs.scope.filtered => {
                suite = Some(listed.clone());
                folders = Some(inputs.store.folders()?.into_iter().collect());
            }
            _ => {}
        }
        let changes = match inputs.changes {
            Some(read) => read?,
            None => changes_against_head(inputs.cassette_dir)?,
        };
        // Only a miss is ever compared with another run's (to tell volatile values).
        let sources = (!missing.is_empty() || !escaped.is_empty())
            .then(|| review::git::sources_fingerprint(inputs.cassette_dir))
            .flatten();
        Ok(Report {
            llmreplay_report: 1,
            mode: inputs.mode,
            scope: RunScope {
                filtered: inputs.scope.filtered,
                partition: inputs.scope.partition.clone(),
                workspace: inputs.scope.workspace,
            },
            generated_at_ms: now_ms(),
            tests_passed: inputs.tests_passed,
            stopped_early: inputs.stopped_early,
            unattributed: inputs.journal.tests().contains(TestId::DEFAULT),
            recorded: inputs.recorded,
            cassette_dir: inputs.cassette_dir.to_path_buf(),
            counts: inputs.stats,
            missing,
            escaped,
            passed_through: inputs.journal.passed_through(),
            collisions: inputs
                .store
                .collisions()
                .into_iter()
                .map(|(slug, first, second)| runlog::report::Collision {
                    slug,
                    first,
                    second,
                })
                .collect(),
            error_answers: inputs.journal.error_answers(),
            unused,
            faults: inputs.journal.faults(),
            fresh: crate::stale::fresh_of(inputs.cassette_dir, &inputs.journal.tests()),
            live_differs: inputs.journal.live_differences(),
            git: changes.is_some(),
            sources,
            changed: changes.unwrap_or_default(),
            suite,
            folders,
            merged: Vec::new(),
            log: inputs.log.map(|p| p.display().to_string()),
            run_log: inputs
                .journal
                .run_log()
                .map(|r| r.dir().join(runlog::EVENTS_FILE).display().to_string()),
            first_failure: inputs.journal.first_failure(),
            ledger: Some(inputs.journal.ledger()).filter(|l| {
                l.replays_priced + l.replays_unpriced + l.recordings_priced + l.recordings_unpriced
                    > 0
                    || l.max_spend_micros.is_some()
            }),
        })
    }

    fn cassette_on_this_machine(
        &self,
        cassette_dir: &Path,
        named: &Path,
        depth: usize,
        doing: &str,
    ) -> Result<PathBuf> {
        let path = match named.strip_prefix(&self.cassette_dir) {
            Ok(rel) => cassette_dir.join(rel),
            Err(_) => {
                let parts: Vec<_> = named.components().collect();
                let tail = &parts[parts.len().saturating_sub(depth)..];
                cassette_dir.join(tail.iter().collect::<PathBuf>())
            }
        };
        let refuse = |why: &str| {
            Err(Error::Report(format!(
                "the report names {}, {why}; {doing} only cassettes of {} and changed nothing",
                path.display(),
                cassette_dir.display()
            )))
        };
        let Ok(rel) = path.strip_prefix(cassette_dir) else {
            return refuse("which is outside the cassette directory");
        };
        let plain = rel
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
        if !plain || rel.components().count() != depth {
            return refuse("which is not a cassette folder or file of it (`..` or a deeper path?)");
        }
        if path.exists() {
            if let Err(e) = cassettes::confined(cassette_dir, &path) {
                return refuse(&format!("which resolves elsewhere ({e})"));
            }
        }
        Ok(path)
    }

    fn last_run(
        resolved: &crate::args::Resolved,
        given: Option<&Path>,
    ) -> Result<(PathBuf, Report)> {
        let path = given
            .map(Path::to_path_buf)
            .unwrap_or_else(|| resolved.default_report());
        let report = Report::read(&path)?;
        Ok((path, report))
    }

    fn read(path: &Path) -> Result<Report> {
        let text = std::fs::read(path).map_err(|source| Error::ReportUnreadable {
            path: path.to_path_buf(),
            source,
        })?;
        serde_json::from_slice(&text).map_err(|source| Error::ReportInvalid {
            path: path.to_path_buf(),
            source,
        })
    }

    fn merge(reports: Vec<Report>) -> Result<Report> {
        let mut it = reports.into_iter();
        let Some(mut out) = it.next() else {
            return Err(Error::Usage(
                "report merge needs at least one report".into(),
            ));
        };
        let mut partitions: Vec<String> = out.scope.partition.iter().cloned().collect();
        for r in it {
            if r.mode != out.mode {
                return Err(Error::Report(format!(
                    "these reports come from runs in different modes ({} and {}); merge the partitions of one run",
                    out.mode, r.mode
                )));
            }
            out.scope.filtered |= r.scope.filtered;
            partitions.extend(r.scope.partition.clone());
            out.generated_at_ms = out.generated_at_ms.min(r.generated_at_ms);
            out.tests_passed &= r.tests_passed;
            out.stopped_early |= r.stopped_early;
            out.unattributed |= r.unattributed;
            out.recorded.extend(r.recorded);
            out.counts += &r.counts;
            out.missing.extend(r.missing);
            out.escaped.extend(r.escaped);
            out.live_differs.extend(r.live_differs);
            out.passed_through.extend(r.passed_through);
            out.collisions.extend(r.collisions);
            out.first_failure = out.first_failure.or(r.first_failure);
            match (&mut out.ledger, r.ledger) {
                (Some(a), Some(b)) => a.merge(&b),
                (a, b) => *a = a.take().or(b),
            }
            for e in r.error_answers {
                if !out.error_answers.contains(&e) {
                    out.error_answers.push(e);
                }
            }
            out.unused.extend(r.unused);
            for (test, n) in r.faults {
                *out.faults.entry(test).or_default() += n;
            }
            for (test, fresh) in r.fresh {
                crate::stale::keep_older(&mut out.fresh, test, fresh);
            }
            for c in r.changed {
                if !out.changed.iter().any(|o| o.path == c.path) {
                    out.changed.push(c);
                }
            }
            out.git |= r.git;
            match (&mut out.suite, r.suite) {
                (Some(a), Some(b)) => a.extend(b),
                (a, b) => *a = a.take().or(b),
            }
            match (&mut out.folders, r.folders) {
                (Some(a), Some(b)) => a.extend(b),
                (a, b) => *a = a.take().or(b),
            }
        }
        partitions.sort();
        partitions.dedup();
        let complete = complete_partitions(&partitions);
        out.merged = partitions.clone();
        out.scope.partition = (!complete && !partitions.is_empty()).then(|| partitions.join(","));
        if complete && !out.scope.filtered {
            if let (Some(suite), Some(folders)) = (out.suite.take(), out.folders.take()) {
                let found = orphans(&out.cassette_dir, &suite, &folders);
                out.unused.extend(found);
            }
        }
        let mut seen = BTreeSet::new();
        out.unused
            .retain(|u| seen.insert(serde_json::to_string(u).unwrap_or_default()));
        Ok(out)
    }

    fn conclude(
        &mut self,
        path: &Path,
        root: &Path,
        status: std::process::ExitStatus,
        deny: &[Deny],
    ) -> Result<Outcome> {
        // The run before this one: a value that differs between the two with nothing else
        // changed is volatile, whatever its shape.
        if let Ok(before) = Report::read(path) {
            self.learn_volatile(&before);
        }
        self.write(path)?;
        // The command's own failure is its status; the gate's reasons are for a run whose
        // tests passed.
        let failures = match status.success() {
            true => self.gate_failures(deny),
            false => Vec::new(),
        };
        self.show(root, path, &failures);
        Ok(self.outcome(Some(status), deny))
    }

    fn learn_volatile(&mut self, before: &Report) {
        use cassettes::classify::{Class, Rule};
        // Another version of the code may send another prompt on purpose.
        if self.sources.is_none() || self.sources != before.sources {
            return;
        }
        for m in &mut self.missing {
            let d = &mut m.miss.detail;
            let Some(prev) = before.missing.iter().find(|p| {
                p.miss.test == m.miss.test
                    && p.miss.detail.closest_at.is_some()
                    && p.miss.detail.closest_at == d.closest_at
                    && p.miss.detail.closest == d.closest
            }) else {
                continue;
            };
            let was = &prev.miss.detail.values;
            if was.len() != d.values.len()
                || d.closest.as_ref().map(Vec::len) != Some(d.values.len())
            {
                continue;
            }
            let moved: Vec<usize> = (0..d.values.len())
                .filter(|&i| was[i].now != d.values[i].now)
                .collect();
            // Nothing else changed: the fields that moved are all semantic by their look, and
            // every other field sent the same as before.
            if moved.is_empty()
                || moved.iter().any(|&i| {
                    d.values[i].class != Some(Class::Semantic)
                        || !d.values[i].field.starts_with("/body/")
                })
            {
                continue;
            }
            for &i in &moved {
                let v = &mut d.values[i];
                v.class = Some(Class::Volatile);
                v.why = Some("another value in each run, nothing else changed".into());
                // Within a text, the run of characters that moved; else the whole field.
                let texts: Option<Vec<&str>> = [&v.recorded, &was[i].now, &v.now]
                    .iter()
                    .map(|x| x.as_ref().and_then(|x| x.as_str()))
                    .collect();
                let rule = texts
                    .and_then(|t| cassettes::classify::between_runs(&t))
                    .unwrap_or_else(|| Rule::Ignore {
                        pointer: v.field["/body".len()..].to_string(),
                    });
                if !d.rules.contains(&rule) {
                    d.rules.insert(0, rule);
                }
            }
            d.class = d.values.iter().filter_map(|v| v.class).max();
        }
    }

    fn write(&self, path: &Path) -> Result<()> {
        let failed = |e| Error::io(format!("cannot write the report {}", path.display()), e);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(failed)?;
        }
        let mut json = serde_json::to_vec_pretty(self)
            .map_err(std::io::Error::other)
            .map_err(failed)?;
        json.push(b'\n');
        crate::files::replace_atomically(path, json).map_err(failed)
    }

    fn outcome(&self, nextest: Option<ExitStatus>, deny: &[Deny]) -> Outcome {
        if let Some(status) = nextest.filter(|s| !s.success()) {
            return Outcome::Nextest(nextest_code(status));
        }
        if !self.tests_passed {
            return Outcome::GateFailed;
        }
        Outcome::gate(!self.gate_failures(deny).is_empty())
    }

    fn gate_failures(&self, deny: &[Deny]) -> Vec<String> {
        let program = crate::program();
        let mut why = Vec::new();
        if !self.missing.is_empty() {
            why.push(format!(
                "{} missing: record them with the commands above",
                plural(self.missing.len(), "request")
            ));
        }
        if !self.escaped.is_empty() {
            why.push(format!(
                "{} escaped to hosts with no recording: record them with the commands above, or name the hosts in [capture] pass",
                plural(self.escaped.len(), "call")
            ));
        }
        if let Some(l) = self.ledger.as_ref().filter(|l| l.refused_over_cap > 0) {
            why.push(format!(
                "--max-spend {} reached: {} not sent upstream; raise it or record the rest in another run",
                ledger::Money::from_micros(l.max_spend_micros.unwrap_or_default()),
                plural(l.refused_over_cap, "request")
            ));
        }
        if deny.contains(&Deny::Unused) && !self.unused.is_empty() {
            let folders = self
                .unused
                .iter()
                .filter(|u| matches!(u, Unused::Folder { .. }))
                .count();
            let counted: Vec<String> = [
                (self.unused.len() - folders, "unused recording"),
                (folders, "orphaned folder"),
            ]
            .iter()
            .filter(|(n, _)| *n > 0)
            .map(|(n, what)| plural(*n, what))
            .collect();
            why.push(format!(
                "--deny unused: {}; `{program} prune` removes them (a renamed test's folder moves with `{program} mv OLD NEW`)",
                counted.join(" and ")
            ));
        }
        for max in deny.iter().filter_map(|d| match d {
            Deny::Stale(max) => Some(*max),
            _ => None,
        }) {
            let stale = crate::stale::stale_tests(&self.fresh, max, std::time::SystemTime::now());
            if !stale.is_empty() {
                let named: Vec<String> = stale.iter().take(10).map(|s| s.to_string()).collect();
                let more = stale.len().saturating_sub(named.len());
                why.push(format!(
                    "--deny stale={}: {} with recordings neither recorded nor verified since: {}{}; `{program} rerun --mark-verified` checks them against the live provider, or record them again",
                    humantime::format_duration(max),
                    plural(stale.len(), "test"),
                    named.join(", "),
                    if more > 0 { format!(" and {more} more") } else { String::new() }
                ));
            }
        }
        if deny.contains(&Deny::Changed) && !self.changed.is_empty() {
            why.push(format!(
                "--deny changed: {} changed against git HEAD; review them (`{program} review`) and commit, or record them in a run that is not the gate",
                plural(self.changed.len(), "cassette file")
            ));
        }
        why
    }

    fn sections(&self, root: &Path) -> sections::Sections {
        sections::sections(self, root)
    }

    fn show(&self, root: &Path, path: &Path, failures: &[String]) {
        summary::show(self, root, path, failures)
    }

    fn gate_text(failures: &[String], styles: Styles) -> String {
        if failures.is_empty() {
            return String::new();
        }
        let mut out = format!("{}\n", styles.error("the run fails its gate:"));
        for why in failures {
            let _ = writeln!(out, "  - {}", term(why));
        }
        let _ = writeln!(
            out,
            "  what to do: {}",
            daemon::book::url(daemon::book::GATE)
        );
        out
    }

    #[cfg(test)]
    fn summary(&self, root: &Path, path: &Path, styles: Styles) -> String {
        summary::text(&self.sections(root), path, styles)
    }

    #[cfg(test)]
    fn markdown(&self) -> String {
        // The page names no file by its place on this machine: no root to be relative to.
        summary::markdown(&self.sections(Path::new("")))
    }
}

/// A missing request of a test whose recordings are in the folder an older version named for
/// it (`status --fix` moves them), or whose very key a test that is not in the suite (of a
/// binary that is) recorded: that test was renamed, and `mv` keeps its recordings. Reads the
/// cassettes only when something is missing.
fn find_renames(
    cassette_dir: &Path,
    missing: &mut [Missing],
    suite: &BTreeSet<TestId>,
) -> Result<(), cassettes::Error> {
    // A missing test's folder of the old slug rule: `status --fix` moves it, or `status` says
    // why not. Only that folder is read, once a test.
    let mut looked: BTreeMap<TestId, Option<bool>> = BTreeMap::new();
    for m in missing.iter_mut() {
        let movable = *looked.entry(m.miss.test.clone()).or_insert_with(|| {
            cassettes::legacy_folder(cassette_dir, &m.miss.test).map(|l| l.stuck.is_none())
        });
        if let Some(movable) = movable {
            let fix = if movable { "status --fix" } else { "status" };
            m.renamed_from = Some(RenamedFrom {
                test: m.miss.test.to_string(),
                command: format!("{} {fix}", crate::program()),
            });
        }
    }
    if missing.is_empty() || suite.is_empty() {
        return Ok(());
    }
    let binaries: BTreeSet<&str> = suite.iter().filter_map(TestId::binary).collect();
    let mut by_key: BTreeMap<String, TestId> = BTreeMap::new();
    for file in cassettes::cassette_files(cassette_dir)? {
        let Ok(cassette) = cassettes::read_cassette(&file) else {
            continue;
        };
        let test = cassette.test;
        let gone = !suite.contains(&test) && test.binary().is_some_and(|b| binaries.contains(b));
        if gone {
            for x in &cassette.interactions {
                by_key
                    .entry(x.key.as_str().to_string())
                    .or_insert(test.clone());
            }
        }
    }
    for m in missing.iter_mut().filter(|m| m.renamed_from.is_none()) {
        if let Some(old) = by_key.get(&m.miss.key) {
            m.renamed_from = Some(RenamedFrom {
                test: old.to_string(),
                command: cassettes::mv_command(old, &m.miss.test),
            });
        }
    }
    Ok(())
}

/// nextest's status, or 128 plus the signal that ended it.
fn nextest_code(status: ExitStatus) -> u8 {
    if let Some(code) = status.code() {
        return code.clamp(1, 255) as u8;
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return exit::SIGNALLED_BASE.saturating_add(signal.clamp(0, 127) as u8);
        }
    }
    nextest_metadata::NextestExitCode::TEST_RUN_FAILED as u8
}

/// The cassette folders (slugs) that match no test of `suite`.
pub fn orphan_folders(suite: &BTreeSet<TestId>, folders: &BTreeSet<String>) -> Vec<String> {
    // A folder an older version named for a test of the suite is that test's, to be moved
    // (`status --fix`), never pruned.
    let slugs: BTreeSet<String> = suite
        .iter()
        .flat_map(|id| [Slug::from_test_id(id), Slug::legacy_from_test_id(id)])
        .map(|slug| slug.to_string())
        .collect();
    folders.difference(&slugs).cloned().collect()
}

fn orphans(
    cassette_dir: &Path,
    suite: &BTreeSet<TestId>,
    folders: &BTreeSet<String>,
) -> Vec<Unused> {
    orphan_folders(suite, folders)
        .into_iter()
        .map(|f| Unused::Folder {
            folder: cassette_dir.join(f).display().to_string(),
        })
        .collect()
}

/// True when `parts` (`slice:M/N`, `hash:M/N`, `count:M/N`) are every `M` of one kind and `N`.
fn complete_partitions(parts: &[String]) -> bool {
    let parsed: Vec<(&str, u64, u64)> = parts
        .iter()
        .filter_map(|p| {
            let (kind, frac) = p.split_once(':')?;
            let (m, n) = frac.split_once('/')?;
            Some((kind, m.parse().ok()?, n.parse().ok()?))
        })
        .collect();
    let Some(&(kind, _, n)) = parsed.first() else {
        return false;
    };
    parsed.len() == parts.len()
        && parsed.iter().all(|&(k, _, m)| k == kind && m == n)
        && (1..=n).all(|i| parsed.iter().any(|&(_, m, _)| m == i))
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_are_complete_only_when_every_one_is_in() {
        let parts = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(complete_partitions(&parts(&["slice:1/2", "slice:2/2"])));
        assert!(complete_partitions(&parts(&[
            "hash:2/3", "hash:1/3", "hash:3/3"
        ])));
        assert!(!complete_partitions(&parts(&["slice:1/2"])));
        assert!(!complete_partitions(&parts(&["slice:1/2", "hash:2/2"])));
        assert!(!complete_partitions(&parts(&["slice:1/2", "slice:2/3"])));
        assert!(!complete_partitions(&parts(&[])));
    }
}
