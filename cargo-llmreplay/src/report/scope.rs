//! Which tests a run covered, as far as its nextest arguments tell, and the suite's test ids
//! from `cargo nextest list`.

use crate::error::{Error, Result};
use cassettes::TestId;
use runlog::report::RunScope;
use std::collections::BTreeSet;
use std::ffi::OsString;

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
    // How nextest reports, not which tests it runs.
    "--no-output-indent",
    "--no-input-handler",
    "--no-pager",
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
    "--message-format",
    "--message-format-version",
    "--show-progress",
    "--max-progress-running",
    // A run from an archive (nextest archive, as a sharded CI runs) runs the archived suite.
    "--archive-file",
    "--archive-format",
    "--workspace-remap",
    "--target-dir-remap",
    "--extract-to",
];

/// Which tests a run with these nextest arguments covers.
pub fn scope_of(args: &[OsString]) -> RunScope {
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

/// Options of `cargo nextest run` that `list` does not take (they say how tests run, not
/// which): switches, and those followed by a value.
const RUN_ONLY: &[&str] = &[
    "--no-fail-fast",
    "--fail-fast",
    "--no-capture",
    "--nocapture",
    "--hide-progress-bar",
];
const RUN_ONLY_WITH_VALUE: &[&str] = &[
    "--retries",
    "--max-fail",
    "--test-threads",
    "-j",
    "--jobs",
    "--failure-output",
    "--success-output",
    "--status-level",
    "--final-status-level",
    "--no-tests",
    "--message-format",
    "--message-format-version",
    "--stress-count",
    "--stress-duration",
    "--show-progress",
    "--max-progress-running",
];

/// `cargo nextest list` of the tests a run with these arguments selects. `env` is the run's:
/// a build that reads a variable the run sets would otherwise be built again.
pub fn spawn_list(
    run_args: &[OsString],
    env: &[(String, String)],
) -> std::io::Result<std::process::Child> {
    let mut args: Vec<OsString> = Vec::new();
    let mut it = run_args.iter();
    while let Some(arg) = it.next() {
        let s = arg.to_string_lossy();
        if s == "--" {
            args.push(arg.clone());
            args.extend(it.by_ref().cloned());
            break;
        }
        let flag = s.split('=').next().unwrap_or_default();
        if RUN_ONLY.contains(&flag) {
            continue;
        }
        if RUN_ONLY_WITH_VALUE.contains(&flag) {
            if !s.contains('=') {
                it.next();
            }
            continue;
        }
        args.push(arg.clone());
    }
    // An archive's list builds nothing, and takes no cargo option.
    let from_archive = args
        .iter()
        .any(|a| a.to_string_lossy().split('=').next() == Some("--archive-file"));
    let quiet = (!from_archive).then_some("--cargo-quiet");
    crate::locate::nextest(["list", "--message-format", "json"])
        .args(quiet)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
}

/// What a `spawn_list` printed: every test id of the suite, and those the run selected.
pub fn read_list(child: std::process::Child) -> Result<(BTreeSet<TestId>, BTreeSet<TestId>)> {
    parse_list(
        child
            .wait_with_output()
            .map_err(|e| Error::io("cannot run cargo nextest list", e))?,
    )
}

/// Every test id of the suite, from `cargo nextest list` (run after the tests, so it builds
/// nothing new).
pub fn list_tests(scope: &RunScope) -> Result<BTreeSet<TestId>> {
    let mut cmd = crate::locate::nextest(["list", "--message-format", "json", "--cargo-quiet"]);
    if scope.workspace {
        cmd.arg("--workspace");
    }
    let out = cmd
        .output()
        .map_err(|e| Error::io("cannot run cargo nextest list", e))?;
    parse_list(out).map(|(suite, _)| suite)
}

/// The test ids a `cargo nextest list --message-format json` printed, and those its filter
/// selected.
fn parse_list(out: std::process::Output) -> Result<(BTreeSet<TestId>, BTreeSet<TestId>)> {
    if !out.status.success() {
        return Err(Error::Precondition(format!(
            "cargo nextest list failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let list: nextest_metadata::TestListSummary =
        serde_json::from_slice(&out.stdout).map_err(|e| {
            Error::Precondition(format!(
                "cargo nextest list printed what this version cannot read: {e}"
            ))
        })?;
    let (mut suite, mut selected) = (BTreeSet::new(), BTreeSet::new());
    for (binary, s) in &list.rust_suites {
        for (name, case) in &s.test_cases {
            let id = TestId::nextest(binary.as_str(), name.as_str());
            if matches!(case.filter_match, nextest_metadata::FilterMatch::Matches) {
                selected.insert(id.clone());
            }
            suite.insert(id);
        }
    }
    Ok((suite, selected))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(args: &[&str]) -> RunScope {
        scope_of(&args.iter().map(OsString::from).collect::<Vec<_>>())
    }

    #[test]
    fn what_counts_as_the_whole_suite() {
        assert!(scope(&[]).whole_suite());
        assert!(scope(&["--retries", "2", "--no-fail-fast", "--workspace", "-j=4"]).whole_suite());
        assert!(!scope(&["-E", "test(=a)"]).whole_suite());
        assert!(!scope(&["-p", "x"]).whole_suite());
        assert!(!scope(&["some_name"]).whole_suite());
        let archived = [
            "--archive-file",
            "a.tar.zst",
            "--workspace-remap=.",
            "--partition",
        ];
        let p = scope(&[&archived[..], &["hash:2/2"]].concat());
        assert_eq!(
            (p.filtered, p.partition.as_deref()),
            (false, Some("hash:2/2"))
        );
        let p = scope(&["--partition", "slice:1/2"]);
        assert_eq!(
            (p.filtered, p.partition.as_deref()),
            (false, Some("slice:1/2"))
        );
        assert!(!p.whole_suite());
    }
}
