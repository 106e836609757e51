//! The report after a run: requests that found no recording (from the daemon's journal),
//! recordings and cassette folders nothing used (journal, store and `cargo nextest list`), and
//! cassette files changed against git HEAD. Printed on stderr, written as JSON.

use cassettes::git::{changes_against_head, Change, ChangeKind};
use cassettes::{Slug, Store, TestId};
use daemon::{Journal, Miss, Mode, Stats};
use serde::Serialize;
use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};
use std::io::IsTerminal;
use std::path::Path;
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
#[derive(Debug, Default, Serialize)]
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

#[derive(Serialize)]
pub struct Missing {
    #[serde(flatten)]
    pub miss: Miss,
    /// The command that records it.
    pub command: String,
}

#[derive(Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Unused {
    /// A recording that no request of a test that ran replayed.
    Recording(cassettes::Unused),
    /// A cassette folder whose slug matches no test of the suite.
    Folder { folder: String },
}

#[derive(Serialize)]
pub struct Report {
    pub llmreplay_report: u32,
    pub mode: String,
    pub scope: RunScope,
    pub counts: Stats,
    pub missing: Vec<Missing>,
    pub unused: Vec<Unused>,
    pub changed: Vec<Change>,
    /// False when the cassettes are not in a git repository (so `changed` says nothing).
    pub git: bool,
}

pub struct Inputs<'a> {
    pub mode: Mode,
    pub stats: Stats,
    pub journal: &'a Journal,
    pub store: &'a Store,
    pub cassette_dir: &'a Path,
    pub scope: &'a RunScope,
    /// The suite's test ids, when the run covered the whole suite.
    pub listed: Option<&'a BTreeSet<String>>,
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
        if let Some(listed) = inputs.listed {
            let slugs: BTreeSet<String> = listed
                .iter()
                .map(|id| Slug::from_test_id(&TestId::new(id.as_str())).to_string())
                .collect();
            for folder in inputs.store.folders()? {
                if !slugs.contains(&folder) {
                    let folder = inputs.cassette_dir.join(&folder).display().to_string();
                    unused.push(Unused::Folder { folder });
                }
            }
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
            counts: inputs.stats,
            missing,
            unused,
            git: changes.is_some(),
            changed: changes.unwrap_or_default(),
        })
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
        if !self.scope.whole_suite() {
            out.push_str("  (a filtered or partitioned run: cassette folders of tests that did not run are not judged)\n");
        }
        out.push_str(&format!("report: {}\n", path.display()));
        eprint!("{out}");
    }

    /// nextest's own status when tests failed; else 1 when anything is missing, or unused or
    /// changed under `--deny`; else 0.
    pub fn exit_code(&self, nextest: ExitStatus, deny: &[Deny]) -> ExitCode {
        if !nextest.success() {
            return ExitCode::from(nextest.code().map_or(101, |c| c.clamp(1, 255) as u8));
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
