//! `cargo llmreplay run [FLAGS] -- COMMAND...`: what `test` does around nextest, around any test
//! command: a daemon of its own, the environment that points every process at it, then the
//! summary, the report, the gates and the exit status. Tests are told apart by what names them:
//! the pytest plugin and the vitest and jest setup files announce each test from the process
//! that runs it; a process whose environment has `LLMREPLAY_TEST_ID`, or a request with
//! `X-Test-Id`, names its own; else each process tree under the command is its own test, named
//! for its program (one folder per `go test` package binary).

use crate::args::{DaemonArgs, Resolved};
use crate::error::{Error, Outcome, Result};
use crate::render;
use crate::report::{self, ReportExt, RunScope};
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
    let resolved = Resolved::daemon(root.clone(), None, &args.daemon)?;
    let report_path = args
        .gates
        .report
        .clone()
        .unwrap_or_else(|| resolved.default_report());
    let log = report_path.with_extension("log");
    crate::log::init(0, Some(&log))?;
    let target_dir = resolved.target_dir();
    let mut settings = resolved.settings;
    // A miss tells the test's own output how to record it: with this very command.
    settings.record_hint = Some(rerun_command(&args.command, "--record-missing", None));
    crate::recover::apply_left(&target_dir, &settings.cassette_dir)?;
    settings.run_dir = Some(daemon::settle::new_run_dir(&target_dir));
    let mode = settings.mode;
    let cassette_dir = settings.cassette_dir.clone();
    let gateways = settings.gateways();
    let secret = settings.proxy_secret.clone();
    let capture = settings.capture.enabled;
    if mode.goes_upstream() {
        render::stderr(&format!(
            "cargo-llmreplay: {mode} mode; upstreams:\n{}",
            settings.upstream_report()
        ));
    }
    let (listener, url) = crate::capture::loopback()?;
    let (runtime, daemon) = crate::test_cmd::launch::start_daemon(settings, listener, None)?;
    // The CA's files, the run's own, removed when it ends.
    let (run_dir, ca_files) = match (capture, daemon.ca_pem()) {
        (true, Some(pem)) => {
            let (dir, files) = crate::capture::write_run_ca(&target_dir, &pem)?;
            (Some(dir), Some(files))
        }
        _ => (None, None),
    };
    let names = ca_files
        .as_ref()
        .map(|(ca, bundle)| (ca.to_string_lossy(), bundle.to_string_lossy()));
    let env = runner_plugin::daemon_env(
        &url,
        None,
        Some(&gateways),
        mode == daemon::Mode::Replay,
        names.as_ref().map(|(ca, bundle)| runner_plugin::Capture {
            ca,
            bundle,
            secret: &secret,
        }),
    );
    let (journal, store, peers, trees) = (
        daemon.journal(),
        daemon.store(),
        daemon.peers(),
        daemon.trees(),
    );
    let interrupted = daemon.interrupted();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = runtime.spawn(daemon.run(async {
        let _ = stopped.await;
    }));
    let (program, rest) = args.command.split_first().expect("clap requires a command");
    let mut child = std::process::Command::new(program);
    child
        .args(rest)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("LLMREPLAY_MODE", mode.as_str());
    let mut child = match child.spawn() {
        Ok(child) => child,
        Err(e) => {
            let _ = stop.send(());
            let _ = runtime.block_on(served);
            return Err(Error::Precondition(format!(
                "cannot run {}: {e}",
                program.to_string_lossy()
            )));
        }
    };
    // Processes of the command's tree name their test in their environment, or announce it.
    let _ = peers.set(daemon::peer::Peers::new(
        Some(child.id()),
        daemon::peer::IdVars::Named("LLMREPLAY_TEST_ID".into()),
    ));
    let _ = trees.set(child.id());
    let status = child
        .wait()
        .map_err(|e| Error::io(format!("waiting for {}", program.to_string_lossy()), e))?;
    let _ = stop.send(());
    let stats = runtime
        .block_on(served)
        .map_err(|e| Error::io("the daemon failed", std::io::Error::other(e)))?;
    let recorded = crate::test_cmd::finish::finish_tests(&journal, &store)?;
    // Only the tests that ran are known: folders of the others are not judged.
    let scope = RunScope {
        filtered: true,
        ..RunScope::default()
    };
    let mut report = report::Report::build(report::Inputs {
        mode,
        stats,
        journal: &journal,
        store: &store,
        cassette_dir: &cassette_dir,
        scope: &scope,
        listed: None,
        tests_passed: status.success(),
        stopped_early: false,
        recorded,
        log: Some(&log),
        changes: None,
    })?;
    // The commands that record, for this command: pytest selects one test by its node id.
    let pytest = is_pytest(&args.command);
    for m in &mut report.missing {
        m.command = rerun_command(&args.command, "--record-missing", None);
        m.rerecord = (m.miss.detail.same_call && pytest)
            .then(|| rerun_command(&args.command, "--record", Some(m.miss.test.as_str())));
    }
    let outcome = report.conclude(&report_path, &root, status, &args.gates.deny)?;
    daemon::settle::finish_run(
        &store,
        &journal,
        interrupted.load(std::sync::atomic::Ordering::SeqCst),
    );
    runtime.shutdown_background();
    drop(run_dir);
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

/// `cargo llmreplay run FLAG -- COMMAND [TEST]`, quoted for the shell.
fn rerun_command(command: &[OsString], flag: &str, test: Option<&str>) -> String {
    let mut words: Vec<String> = command
        .iter()
        .map(|w| cassettes::shell_quote(&w.to_string_lossy()).into_owned())
        .collect();
    if let Some(test) = test {
        words.push(cassettes::shell_quote(test).into_owned());
    }
    format!("cargo llmreplay run {flag} -- {}", words.join(" "))
}
