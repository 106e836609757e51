//! The report after a run: requests that found no recording (from the daemon's journal),
//! recordings and cassette folders nothing used (journal, store and `cargo nextest list`), and
//! cassette files changed against git HEAD. Printed on stderr, written as JSON.

use cassettes::git::{changes_against_head, Change, ChangeKind};
use cassettes::{Slug, Store, TestId};
use daemon::{Journal, Miss, Mode, Stats};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, ExitStatus};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Deny {
    /// Recordings or cassette folders that nothing used.
    Unused,
    /// Cassette files new, modified or deleted against git HEAD.
    Changed,
}

/// nextest flags that change how tests run but not which: a run with only these covers the
/// whole suite, so cassette folders of no test can be called unused.
const NEUTRAL: &[&str] = &[
    "--no-fail-fast",
    "--fail-fast",
    "--no-capture",
    "--nocapture",
    "--hide-progress-bar",
    "--cargo-quiet",
    "--cargo-verbose",
    "-v",
    "--verbose",
    "--workspace",
    "--all",
    "--release",
];
const NEUTRAL_WITH_VALUE: &[&str] = &[
    "--retries",
    "--test-threads",
    "-j",
    "--jobs",
    "--profile",
    "-P",
    "--color",
    "--status-level",
    "--final-status-level",
    "--success-output",
    "--failure-output",
    "--max-fail",
    "--no-tests",
    "--cargo-profile",
];

/// Which tests a run covered, as far as its nextest arguments tell.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct RunScope {
    /// Any argument that may select fewer tests than the whole suite (`-E`, `-p`, a name, ...).
    pub filtered: bool,
    pub partition: Option<String>,
    #[serde(skip)]
    workspace: bool,
}

impl RunScope {
    pub fn of(args: &[OsString]) -> Self {
        let mut scope = RunScope::default();
        let mut it = args.iter().map(|a| a.to_string_lossy());
        while let Some(arg) = it.next() {
            let (flag, inline) = match arg.split_once('=') {
                Some((f, v)) if f.starts_with('-') => (f.to_string(), Some(v.to_string())),
                _ => (arg.to_string(), None),
            };
            if flag == "--partition" {
                scope.partition = inline.or_else(|| it.next().map(|v| v.to_string()));
            } else if NEUTRAL_WITH_VALUE.contains(&flag.as_str()) {
                if inline.is_none() {
                    it.next();
                }
            } else if NEUTRAL.contains(&flag.as_str()) {
                scope.workspace |= flag == "--workspace" || flag == "--all";
            } else {
                scope.filtered = true;
            }
        }
        scope
    }

    /// Every package of the workspace, nothing filtered: what `status` lists.
    pub fn whole_workspace() -> Self {
        RunScope {
            workspace: true,
            ..RunScope::default()
        }
    }

    pub fn whole_suite(&self) -> bool {
        !self.filtered && self.partition.is_none()
    }
}

/// Every test id of the suite, from `cargo nextest list` (run after the tests, so it builds
/// nothing new).
pub fn list_tests(cargo: &OsStr, scope: &RunScope) -> Result<BTreeSet<String>, String> {
    let mut cmd = Command::new(cargo);
    cmd.args([
        "nextest",
        "list",
        "--message-format",
        "json",
        "--cargo-quiet",
    ]);
    if scope.workspace {
        cmd.arg("--workspace");
    }
    let out = cmd.output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
    }
    let list: nextest_metadata::TestListSummary =
        serde_json::from_slice(&out.stdout).map_err(|e| format!("unexpected output: {e}"))?;
    Ok(list
        .rust_suites
        .iter()
        .flat_map(|(binary, suite)| {
            suite
                .test_cases
                .keys()
                .map(move |name| format!("{}${}", binary.as_str(), name.as_str()))
        })
        .collect())
}

#[derive(Serialize, Deserialize)]
pub struct Missing {
    #[serde(flatten)]
    pub miss: Miss,
    /// The command that records it.
    pub command: String,
}

#[derive(Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Unused {
    /// A recording that no request of a test that ran replayed.
    Recording(cassettes::Unused),
    /// A cassette folder whose slug matches no test of the suite.
    Folder { folder: String },
}

#[derive(Serialize, Deserialize)]
pub struct Report {
    pub llmreplay_report: u32,
    pub mode: String,
    pub scope: RunScope,
    /// When the report was written, in milliseconds since the Unix epoch: `prune` refuses a
    /// report older than the cassettes.
    pub generated_at_ms: u64,
    /// False when a test failed: it may have stopped before making the calls it recorded.
    pub tests_passed: bool,
    pub cassette_dir: PathBuf,
    pub counts: Stats,
    pub missing: Vec<Missing>,
    pub unused: Vec<Unused>,
    /// Requests a fault answered, per test that asked for faults.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub faults: BTreeMap<String, usize>,
    pub changed: Vec<Change>,
    /// False when the cassettes are not in a git repository (so `changed` says nothing).
    pub git: bool,
    /// For a partition of the suite, what `report merge` needs to judge cassette folders once
    /// every partition is in: the suite's test ids and the cassette folders present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suite: Option<BTreeSet<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub folders: Option<BTreeSet<String>>,
    /// The partitions a merged report was made of.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub merged: Vec<String>,
}

pub struct Inputs<'a> {
    pub mode: Mode,
    pub stats: Stats,
    pub journal: &'a Journal,
    pub store: &'a Store,
    pub cassette_dir: &'a Path,
    pub scope: &'a RunScope,
    /// The suite's test ids as nextest listed them, if known.
    pub listed: Option<&'a BTreeSet<String>>,
    pub tests_passed: bool,
}

impl Report {
    pub fn build(inputs: Inputs) -> Result<Report, cassettes::Error> {
        // A retried test asks again for what it missed the first time: report it once.
        let mut seen = BTreeSet::new();
        let missing = inputs
            .journal
            .misses()
            .into_iter()
            .filter(|m| seen.insert((m.test.clone(), m.key.clone(), m.ordinal)))
            .map(|miss| Missing {
                command: record_command(&miss.test),
                miss,
            })
            .collect();
        let mut unused = Vec::new();
        for test in inputs.journal.tests() {
            for u in inputs.store.unused_in(&TestId::new(test))? {
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
        let changes = changes_against_head(inputs.cassette_dir)?;
        Ok(Report {
            llmreplay_report: 1,
            mode: inputs.mode.to_string(),
            scope: RunScope {
                filtered: inputs.scope.filtered,
                partition: inputs.scope.partition.clone(),
                workspace: inputs.scope.workspace,
            },
            generated_at_ms: now_ms(),
            tests_passed: inputs.tests_passed,
            cassette_dir: inputs.cassette_dir.to_path_buf(),
            counts: inputs.stats,
            missing,
            unused,
            faults: inputs.journal.faults(),
            git: changes.is_some(),
            changed: changes.unwrap_or_default(),
            suite,
            folders,
            merged: Vec::new(),
        })
    }

    pub fn read(path: &Path) -> Result<Report, String> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            format!(
                "cannot read the report {}: {e}. Run cargo llmreplay test first (it writes one)",
                path.display()
            )
        })?;
        serde_json::from_str(&text).map_err(|e| {
            format!(
                "{}: not a cargo-llmreplay report ({e}); was it written by another version?",
                path.display()
            )
        })
    }

    /// Combines the reports of a suite's partitions. Cassette folders are judged only here,
    /// once every partition of `M/N` is in, against every partition's list of the suite.
    pub fn merge(reports: Vec<Report>) -> Result<Report, String> {
        let mut it = reports.into_iter();
        let Some(mut out) = it.next() else {
            return Err("report merge needs at least one report".into());
        };
        let mut partitions: Vec<String> = out.scope.partition.iter().cloned().collect();
        for r in it {
            if r.mode != out.mode {
                return Err(format!(
                    "these reports come from runs in different modes ({} and {}); merge the partitions of one run",
                    out.mode, r.mode
                ));
            }
            out.scope.filtered |= r.scope.filtered;
            partitions.extend(r.scope.partition.clone());
            out.generated_at_ms = out.generated_at_ms.min(r.generated_at_ms);
            out.tests_passed &= r.tests_passed;
            out.counts += &r.counts;
            out.missing.extend(r.missing);
            out.unused.extend(r.unused);
            for (test, n) in r.faults {
                *out.faults.entry(test).or_default() += n;
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

    pub fn write(&self, path: &Path) -> Result<(), String> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        let mut json = serde_json::to_vec_pretty(self).expect("the report serialises");
        json.push(b'\n');
        std::fs::write(path, json).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The summary on stderr: colour on a terminal, none under `NO_COLOR`.
    pub fn print(&self, root: &Path, path: &Path) {
        let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
        eprint!("{}", self.summary(root, path, colour));
    }

    pub fn summary(&self, root: &Path, path: &Path, colour: bool) -> String {
        let paint = |code: &str, s: &str| {
            if colour {
                format!("\x1b[{code}m{s}\x1b[0m")
            } else {
                s.to_string()
            }
        };
        let rel = |p: &str| {
            Path::new(p)
                .strip_prefix(root)
                .map(|r| r.display().to_string())
                .unwrap_or_else(|_| p.to_string())
        };
        let c = &self.counts;
        let mut out = format!(
            "{} {} requests: {} replayed, {} missing, {} recorded, {} re-recorded, {} unchanged, {} passed through\n",
            paint("1", "cargo-llmreplay:"),
            c.requests, c.hits, c.misses, c.recorded, c.replaced, c.unchanged, c.passthrough
        );
        if !self.faults.is_empty() {
            out.push_str(&format!(
                "answered by faults the tests asked for ({}):\n",
                c.faults
            ));
            for (test, n) in &self.faults {
                out.push_str(&format!("  {test}  {n}\n"));
            }
        }
        if !self.missing.is_empty() {
            out.push_str(&paint(
                "1;31",
                &format!("missing ({}):\n", self.missing.len()),
            ));
            for m in &self.missing {
                let d = &m.miss.detail;
                out.push_str(&format!(
                    "  {}  {} {} {}{}{}\n",
                    m.miss.test,
                    m.miss.provider,
                    m.miss.method,
                    m.miss.path,
                    d.model
                        .as_deref()
                        .map(|x| format!(" model {x}"))
                        .unwrap_or_default(),
                    d.prompt
                        .as_deref()
                        .map(|p| format!(" {:?}", p.chars().take(60).collect::<String>()))
                        .unwrap_or_default(),
                ));
                if let Some(fields) = d.closest.as_ref().filter(|f| !f.is_empty()) {
                    out.push_str(&format!(
                        "    closest recording differs at {}\n",
                        fields.join(", ")
                    ));
                }
                out.push_str(&format!("    record it: {}\n", m.command));
            }
        }
        if !self.unused.is_empty() {
            out.push_str(&paint(
                "1;33",
                &format!("unused ({}):\n", self.unused.len()),
            ));
            for u in &self.unused {
                match u {
                    Unused::Recording(r) => out.push_str(&format!(
                        "  {}  recording {} of key {}{}\n",
                        rel(&r.cassette.display().to_string()),
                        r.ordinal + 1,
                        &r.key.as_str()[..12],
                        r.answer
                            .as_deref()
                            .map(|a| format!(" {a:?}"))
                            .unwrap_or_default()
                    )),
                    Unused::Folder { folder } => out.push_str(&format!(
                        "  {}/  no test of the suite has this folder's slug\n",
                        rel(folder)
                    )),
                }
            }
        }
        if !self.changed.is_empty() {
            out.push_str(&paint(
                "1;36",
                &format!("changed against HEAD ({}):\n", self.changed.len()),
            ));
            for ch in &self.changed {
                let what = match ch.kind {
                    ChangeKind::New => format!(
                        "new       {} ({})",
                        ch.path.display(),
                        interactions(ch.added)
                    ),
                    ChangeKind::Deleted => format!(
                        "deleted   {} ({})",
                        ch.path.display(),
                        interactions(ch.removed)
                    ),
                    ChangeKind::Modified => format!(
                        "modified  {}: {} added, {} replaced, {} removed, {} unchanged",
                        ch.path.display(),
                        ch.added,
                        ch.replaced,
                        ch.removed,
                        ch.unchanged
                    ),
                };
                out.push_str(&format!(
                    "  {what}{}\n",
                    ch.error
                        .as_deref()
                        .map(|e| format!(" ({e})"))
                        .unwrap_or_default()
                ));
            }
        }
        if self.scope.filtered {
            out.push_str(
                "  (a filtered run: cassette folders of tests that did not run are not judged)\n",
            );
        } else if self.scope.partition.is_some() {
            out.push_str("  (one partition of the suite: cassette folders are judged by `cargo llmreplay report merge` over every partition's report)\n");
        }
        out.push_str(&format!("report: {}\n", path.display()));
        out
    }

    /// nextest's own status when tests failed; else 1 when anything is missing, or unused or
    /// changed under `--deny`; else 0. A merged report has no nextest status of its own.
    pub fn exit_code(&self, nextest: Option<ExitStatus>, deny: &[Deny]) -> ExitCode {
        if let Some(status) = nextest.filter(|s| !s.success()) {
            return ExitCode::from(status.code().map_or(101, |c| c.clamp(1, 255) as u8));
        }
        if !self.tests_passed {
            return ExitCode::from(1);
        }
        let denied = (deny.contains(&Deny::Unused) && !self.unused.is_empty())
            || (deny.contains(&Deny::Changed) && !self.changed.is_empty());
        if !self.missing.is_empty() || denied {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        }
    }
}

/// The cassette folders (slugs) that match no test of `suite`.
pub fn orphan_folders(suite: &BTreeSet<String>, folders: &BTreeSet<String>) -> Vec<String> {
    let slugs: BTreeSet<String> = suite
        .iter()
        .map(|id| Slug::from_test_id(&TestId::new(id.as_str())).to_string())
        .collect();
    folders.difference(&slugs).cloned().collect()
}

fn orphans(
    cassette_dir: &Path,
    suite: &BTreeSet<String>,
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

impl Report {
    /// The summary as markdown, for a CI job's summary page.
    pub fn markdown(&self) -> String {
        let c = &self.counts;
        let mut out = format!(
            "### cargo-llmreplay\n\n{} requests: {} replayed, {} missing, {} recorded. {} unused, {} changed against HEAD.\n",
            c.requests,
            c.hits,
            c.misses,
            c.recorded + c.replaced,
            self.unused.len(),
            self.changed.len()
        );
        if !self.missing.is_empty() {
            out.push_str("\n| missing in test | request | record it |\n| --- | --- | --- |\n");
            for m in &self.missing {
                out.push_str(&format!(
                    "| `{}` | {} {} {} | `{}` |\n",
                    m.miss.test.replace('|', "\\|"),
                    m.miss.provider,
                    m.miss.method,
                    m.miss.path,
                    m.command.replace('|', "\\|")
                ));
            }
        }
        if !self.unused.is_empty() {
            out.push_str(
                "\n**unused**: run `cargo llmreplay prune` after a full run to remove:\n\n",
            );
            for u in &self.unused {
                match u {
                    Unused::Recording(r) => out.push_str(&format!(
                        "- recording {} of key `{}` in `{}`\n",
                        r.ordinal + 1,
                        &r.key.as_str()[..12],
                        r.test
                    )),
                    Unused::Folder { folder } => out.push_str(&format!(
                        "- folder `{}` (no test has its slug)\n",
                        Path::new(folder)
                            .file_name()
                            .map_or(folder.clone(), |f| f.to_string_lossy().into_owned())
                    )),
                }
            }
        }
        if !self.changed.is_empty() {
            out.push_str("\n**changed against HEAD**:\n\n");
            for ch in &self.changed {
                out.push_str(&format!("- `{}` ({:?})\n", ch.path.display(), ch.kind));
            }
        }
        out
    }

    /// Appends the markdown summary to `$GITHUB_STEP_SUMMARY` when GitHub Actions sets it.
    pub fn to_step_summary(&self) {
        let Some(path) = std::env::var_os("GITHUB_STEP_SUMMARY") else {
            return;
        };
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| std::io::Write::write_all(&mut f, self.markdown().as_bytes()));
        if let Err(e) = written {
            eprintln!("cargo-llmreplay: warning: cannot write GITHUB_STEP_SUMMARY: {e}");
        }
    }
}

#[derive(clap::Subcommand)]
pub enum ReportCommand {
    /// Merge the reports of a suite run in partitions (--partition slice:M/N on several machines)
    #[command(
        long_about = "Merge the reports of a suite run in partitions (--partition slice:M/N on several machines).\n\n\
            Counts add up; missing and unused recordings are gathered. Cassette folders of no test are \
            judged only here, once the reports of every partition 1/N..N/N are in: one partition alone \
            cannot tell an orphan from another partition's test."
    )]
    Merge {
        /// The partitions' reports.
        #[arg(required = true)]
        reports: Vec<PathBuf>,
        /// Where to write the merged report [default: <target dir>/llmreplay/report.json].
        #[arg(long, short, value_name = "PATH")]
        output: Option<PathBuf>,
        /// Fail on unused recordings or on cassettes changed against git HEAD. Repeatable.
        #[arg(long, value_enum)]
        deny: Vec<Deny>,
    },
}

pub fn run(cmd: ReportCommand) -> Result<ExitCode, String> {
    match cmd {
        ReportCommand::Merge {
            reports,
            output,
            deny,
        } => {
            let read: Vec<Report> = reports
                .iter()
                .map(|p| Report::read(p))
                .collect::<Result<_, _>>()?;
            let merged = Report::merge(read)?;
            let root = std::env::current_dir().unwrap_or_default();
            let path = match output {
                Some(p) => p,
                None => crate::target_dir(&crate::workspace(None)?.0).join("llmreplay/report.json"),
            };
            merged.write(&path)?;
            merged.print(&root, &path);
            merged.to_step_summary();
            Ok(merged.exit_code(None, &deny))
        }
    }
}

fn interactions(n: usize) -> String {
    format!("{n} interaction{}", if n == 1 { "" } else { "s" })
}

/// The command that records a test's missing requests.
pub fn record_command(test: &str) -> String {
    match test.split_once('$') {
        Some((_, name)) => format!("cargo llmreplay test --record-missing -E 'test(={name})'"),
        None => "cargo llmreplay serve --mode record-missing (requests with this X-Test-Id)".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(args: &[&str]) -> RunScope {
        RunScope::of(&args.iter().map(OsString::from).collect::<Vec<_>>())
    }

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

    #[test]
    fn what_counts_as_the_whole_suite() {
        assert!(scope(&[]).whole_suite());
        assert!(scope(&["--retries", "2", "--no-fail-fast", "--workspace", "-j=4"]).whole_suite());
        assert!(!scope(&["-E", "test(=a)"]).whole_suite());
        assert!(!scope(&["-p", "x"]).whole_suite());
        assert!(!scope(&["some_name"]).whole_suite());
        let p = scope(&["--partition", "slice:1/2"]);
        assert_eq!(
            (p.filtered, p.partition.as_deref()),
            (false, Some("slice:1/2"))
        );
        assert!(!p.whole_suite());
    }
}
