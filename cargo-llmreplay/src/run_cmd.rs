//! `cargo llmreplay run [FLAGS] -- COMMAND...`: what `test` does around nextest, around any test
//! command: a daemon of its own, the environment that points every process at it, then the
//! summary, the report, the gates and the exit status. Tests are told apart by what names them:
//! the pytest plugin and the vitest and jest setup files announce each test from the process
//! that runs it; a process whose environment has `LLMREPLAY_TEST_ID`, or a request with
//! `X-Test-Id`, names its own; else each process tree under the command is its own test, named
//! for its program (one folder per `go test` package binary).

use crate::args::{DaemonArgs, Resolved};
use crate::error::{Error, Outcome, Result};
use crate::report::{self, RunScope};
use crate::run_core::{Known, Naming, Paths, Prepared};
use clap::Args;
use std::ffi::OsString;

#[derive(Args)]
#[command(
    about = "Run any test command (pytest, vitest, go test...) against a per-run daemon, then report",
    long_about = "Run any test command against a per-run record/replay daemon, then report as `test` does.\n\n\
        Every process the command starts gets the base URL every client reads, LLMREPLAY_BASE_URL, \
        a placeholder key in replay, and (with capture on) the daemon as its HTTPS proxy. Each \
        request is filed under the test that made it: the one its process announced (the \
        pytest-llmreplay plugin and the vitest and jest setup files do, before each test), else \
        the one LLMREPLAY_TEST_ID in its environment or an X-Test-Id header names, else the name of \
        the program at the top of its process tree under the command (a `go test` package's \
        binary, a tool a script runs). \
        Under --record, a test that announced it passed keeps exactly what it recorded.\n\n\
        After the command: the summary, target/llmreplay/report.json, the --deny gates, and the \
        command's own status when it failed. Unused recordings are judged for the tests that ran; \
        cassette folders of tests that did not are not judged.",
    after_help = "Examples:\n  \
        cargo llmreplay run -- pytest                    # replay; fails on a missing cassette\n  \
        cargo llmreplay run --record-missing -- pytest -n 2\n  \
        cargo llmreplay run -- npx vitest run\n  \
        cargo llmreplay run --deny unused -- pytest      # strict CI gate"
)]
pub struct RunArgs {
    #[command(flatten)]
    daemon: DaemonArgs,
    #[command(flatten)]
    gates: report::GateArgs,
    /// The test command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

pub fn run(args: RunArgs) -> Result<Outcome> {
    args.daemon.check_ci()?;
    let root = crate::locate::project_root()?;
    let mut resolved = Resolved::daemon(root, None, &args.daemon)?;
    let report = args
        .gates
        .report
        .clone()
        .unwrap_or_else(|| resolved.default_report());
    let log = report.with_extension("log");
    // A miss tells the test's own output how to record it: with this very command.
    resolved.settings.record_hint = Some(rerun_command(&args.command, "--record-missing", None));
    let mut prepared = Prepared::new(resolved, None, Paths { report, log })?;
    let env = prepared.env(true);
    let mode = prepared.run.mode;
    prepared.ca_files_written()?;
    // Unlike `test`, the daemon is made before the command starts: a daemon that cannot start
    // leaves no command half run.
    let ready = prepared.start_daemon()?;
    let (program, rest) = args.command.split_first().expect("clap requires a command");
    let child = std::process::Command::new(program)
        .args(rest)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("LLMREPLAY_MODE", mode.as_str())
        .spawn()
        .map_err(|e| {
            Error::Precondition(format!("cannot run {}: {e}", program.to_string_lossy()))
        })?;
    // Processes of the command's tree name their test in their environment, or announce it.
    let mut serving = ready.serve(
        child,
        Naming::Tree(daemon::peer::IdVars::Named("LLMREPLAY_TEST_ID".into())),
    );
    let status = serving.wait(&format!("waiting for {}", program.to_string_lossy()))?;
    // Only the tests that ran are known: folders of the others are not judged.
    let scope = RunScope {
        filtered: true,
        ..RunScope::default()
    };
    let mut reported = serving.stop(status)?.report(Known {
        scope: &scope,
        listed: None,
        stopped_early: false,
        changes: None,
    })?;
    // The commands that record, for this command: pytest selects one test by its node id.
    let pytest = is_pytest(&args.command);
    for m in &mut reported.report.missing {
        m.command = rerun_command(&args.command, "--record-missing", None);
        m.rerecord = (m.miss.detail.same_call && pytest)
            .then(|| rerun_command(&args.command, "--record", Some(m.miss.test.as_str())));
    }
    let outcome = reported.conclude(&args.gates.deny)?;
    reported.end();
    Ok(outcome)
}

/// Whether the command is pytest's, whose arguments select a test by its node id.
fn is_pytest(command: &[OsString]) -> bool {
    let words: Vec<String> = command
        .iter()
        .map(|w| w.to_string_lossy().into_owned())
        .collect();
    let pytest = words.iter().any(|w| {
        std::path::Path::new(w)
            .file_name()
            .is_some_and(|n| n == "pytest" || n == "py.test")
    }) || words.windows(2).any(|w| w[0] == "-m" && w[1] == "pytest");
    pytest
}

/// pytest's options whose value is a path: the word after one is no test to drop.
const PYTEST_PATH_OPTIONS: &[&str] = &[
    "--ignore",
    "--ignore-glob",
    "--deselect",
    "--rootdir",
    "-c",
    "--config-file",
    "--confcutdir",
    "--basetemp",
    "--junitxml",
    "--junit-xml",
    "--log-file",
];

/// `<program> run FLAG -- COMMAND [TEST]`, quoted for the shell. With a pytest node id, the
/// command's own test selection (files, folders, node ids) is dropped first: pytest runs the
/// union of its arguments, so `pytest test_agent.py test_agent.py::x` would run the whole file.
fn rerun_command(command: &[OsString], flag: &str, test: Option<&str>) -> String {
    let words: Vec<String> = command
        .iter()
        .map(|w| w.to_string_lossy().into_owned())
        .collect();
    let mut kept: Vec<&str> = Vec::with_capacity(words.len() + 1);
    let runner = words.iter().position(|w| {
        std::path::Path::new(w)
            .file_name()
            .is_some_and(|n| n == "pytest" || n == "py.test")
    });
    let runner = runner.or_else(|| {
        words
            .windows(2)
            .position(|w| w[0] == "-m" && w[1] == "pytest")
            .map(|i| i + 1)
    });
    for (i, w) in words.iter().enumerate() {
        let selects = test.is_some()
            && runner.is_some_and(|r| i > r)
            && !w.starts_with('-')
            && !PYTEST_PATH_OPTIONS.contains(&words[i - 1].as_str())
            && (w.contains("::")
                || std::path::Path::new(w.split("::").next().unwrap_or(w)).exists());
        if !selects {
            kept.push(w);
        }
    }
    kept.extend(test);
    let quoted: Vec<String> = kept
        .iter()
        .map(|w| cassettes::shell_quote(w).into_owned())
        .collect();
    format!("{} run {flag} -- {}", crate::program(), quoted.join(" "))
}

#[cfg(test)]
mod tests {
    use super::rerun_command;
    use std::ffi::OsString;

    fn words(line: &str) -> Vec<OsString> {
        line.split(' ').map(OsString::from).collect()
    }

    /// One test again, alone: the command's files and node ids give way to the test's node id,
    /// and a path that is an option's value stays.
    #[test]
    fn a_pytest_test_is_recorded_again_alone() {
        let here = env!("CARGO_MANIFEST_DIR");
        let file = format!("{here}/Cargo.toml");
        let line = format!("python -m pytest -q {file} {file}::x --ignore {here} -k chat");
        assert_eq!(
            rerun_command(&words(&line), "--record", Some("tests/a.py::test_b")),
            format!("cargo llmreplay run --record -- python -m pytest -q --ignore {here} -k chat tests/a.py::test_b")
        );
        // Without a test, the command as it was.
        assert_eq!(
            rerun_command(&words(&line), "--record-missing", None),
            format!("cargo llmreplay run --record-missing -- {line}")
        );
    }
}
