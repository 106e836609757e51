//! `cargo llmreplay test`: starts the daemon in this process, runs `cargo nextest run` with the
//! target runner that points every test at it, then reports what is missing, unused and changed.

use crate::args::{DaemonArgs, Resolved};
use crate::error::{Error, Outcome, Result};
use crate::render::{self, Styles};
use crate::report::{self, Deny, RunScope};
use clap::{CommandFactory, Parser};
use daemon::Daemon;
use runner_plugin::{
    CAPTURE_BUNDLE_ENV, CAPTURE_CA_ENV, CHAIN_RUNNER_ENV, DAEMON_URL_ENV, RAN_FILE_ENV,
    RESULTS_FILE_ENV,
};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The long help; the variables come from the families' tables, so it never drifts.
fn long_about() -> String {
    format!(
        "Run the crate's tests under cargo-nextest, each pointed at a per-run record/replay daemon.\n\n\
        Every test process gets LLMREPLAY_BASE_URL and the base URL every client reads ({}, and \
        <NAME>_BASE_URL for a gateway of llmreplay.toml) for its own cassettes in \
        tests/cassettes/<test>/. In replay mode (the default) nothing reaches the network; a request \
        with no recording fails. After the run it reports missing, unused and changed cassettes and \
        writes target/llmreplay/report.json.\n\n\
        Every argument not listed below goes to `cargo nextest run` (-E, -p, --workspace, \
        --partition, --retries, -- ...).",
        providers::env::injected_names()
    )
}

#[derive(Parser, Debug)]
#[command(
    name = "cargo llmreplay test",
    about = "Run the crate's tests under cargo-nextest, each pointed at a per-run record/replay daemon",
    long_about = long_about(),
    after_help = "Examples:\n  cargo llmreplay test                               # replay; fails on a missing cassette\n  \
        cargo llmreplay test --record-missing              # record what is not recorded yet\n  \
        cargo llmreplay test --record -E 'test(=chat)'     # re-record one test\n  \
        cargo llmreplay test --deny unused --deny changed  # strict CI gate"
)]
pub struct TestArgs {
    #[command(flatten)]
    daemon: DaemonArgs,
    /// Write the JSON report here [default: <target dir>/llmreplay/report.json].
    #[arg(long, value_name = "PATH")]
    report: Option<PathBuf>,
    /// Fail the run on unused recordings or on cassettes changed against git HEAD. Repeatable.
    #[arg(long, value_enum)]
    deny: Vec<Deny>,
    /// After the run, walk through every recorded answer that changed against git HEAD
    /// (cargo llmreplay review): accept, reject or skip each.
    #[arg(long)]
    review: bool,
    /// How tests are pointed at the daemon. auto: on Linux, in replay, with no target runner
    /// of your own, one environment for the whole run and each connection's test read from its
    /// process (no exec per test); else exec: a target runner sets each test's environment.
    #[arg(long, value_enum, default_value = "auto")]
    runner: RunnerChoice,
}

/// How each test is pointed at the daemon.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum RunnerChoice {
    /// Without a runner where that works, else exec.
    Auto,
    /// A target runner for every test process.
    Exec,
}

/// This command's own flags, from its clap definition: switches, and flags that take a value.
/// Everything else goes to nextest, so a flag added to `TestArgs` is never passed on by mistake.
fn own_flags() -> (Vec<String>, Vec<String>) {
    let mut cmd = TestArgs::command();
    cmd.build();
    let (mut switches, mut with_value) = (Vec::new(), Vec::new());
    for arg in cmd.get_arguments() {
        let mut names: Vec<String> = arg
            .get_long_and_visible_aliases()
            .unwrap_or_default()
            .into_iter()
            .map(|l| format!("--{l}"))
            .collect();
        names.extend(
            arg.get_short_and_visible_aliases()
                .unwrap_or_default()
                .into_iter()
                .map(|c| format!("-{c}")),
        );
        if arg.get_action().takes_values() {
            with_value.extend(names);
        } else {
            switches.extend(names);
        }
    }
    (switches, with_value)
}

/// Splits the command line into this command's own flags and nextest's.
fn split_args(args: Vec<OsString>) -> (Vec<OsString>, Vec<OsString>) {
    let (switches, with_value) = own_flags();
    let (mut own, mut nextest) = (Vec::new(), Vec::new());
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        let s = arg.to_string_lossy();
        if s == "--" {
            nextest.push(arg);
            nextest.extend(it.by_ref());
            break;
        }
        if switches.iter().any(|f| *f == s)
            || with_value.iter().any(|f| s.starts_with(&format!("{f}=")))
        {
            own.push(arg);
        } else if with_value.iter().any(|f| *f == s) {
            own.push(arg);
            own.extend(it.next());
        } else {
            nextest.push(arg);
        }
    }
    (own, nextest)
}

/// nextest's options that decide whether a run stops at its first failure.
const FAIL_FAST_FLAGS: &[&str] = &["--fail-fast", "--no-fail-fast", "--max-fail"];

/// The nextest arguments before `--` (what follows goes to the test binaries).
fn before_separator(args: &[OsString]) -> impl Iterator<Item = std::borrow::Cow<'_, str>> {
    args.iter()
        .take_while(|a| *a != "--")
        .map(|a| a.to_string_lossy())
}

/// The user's fail-fast option, if any: `--fail-fast`, `--no-fail-fast`, `--max-fail=N`.
fn fail_fast_option(args: &[OsString]) -> Option<String> {
    before_separator(args)
        .find(|a| FAIL_FAST_FLAGS.contains(&a.split('=').next().unwrap_or_default()))
        .map(|a| a.into_owned())
}

/// The long flags of `cargo nextest run` (0.9.143's help): known to be nextest's, so never
/// refused as a typo of ours, and with no `--help` asked of nextest to tell (a few hundred
/// milliseconds, for `--retries` or `--release` on every run). A flag of a newer nextest that
/// is close to one of ours is still let through: nextest's help is asked for those.
const NEXTEST_FLAGS: &[&str] = &[
    "--all",
    "--all-features",
    "--all-targets",
    "--archive-file",
    "--archive-format",
    "--args",
    "--bench",
    "--benches",
    "--bin",
    "--binaries-metadata",
    "--bins",
    "--build-dir-remap",
    "--build-jobs",
    "--cargo-message-format",
    "--cargo-metadata",
    "--cargo-profile",
    "--cargo-quiet",
    "--cargo-verbose",
    "--color",
    "--config",
    "--config-file",
    "--debugger",
    "--exact",
    "--example",
    "--examples",
    "--exclude",
    "--extract-overwrite",
    "--extract-to",
    "--fail-fast",
    "--failure-output",
    "--features",
    "--ff",
    "--filterset",
    "--final-status-level",
    "--flaky-result",
    "--frozen",
    "--future-incompat-report",
    "--help",
    "--hide-progress-bar",
    "--ignore-default-filter",
    "--ignore-rust-version",
    "--ignored",
    "--include-ignored",
    "--jobs",
    "--lib",
    "--locked",
    "--manifest-path",
    "--max-fail",
    "--max-progress-running",
    "--message-format",
    "--message-format-version",
    "--nff",
    "--no-capture",
    "--no-default-features",
    "--no-fail-fast",
    "--no-input-handler",
    "--no-output-indent",
    "--no-pager",
    "--no-run",
    "--no-tests",
    "--nocapture",
    "--offline",
    "--override-version-check",
    "--package",
    "--partition",
    "--persist-extract-tempdir",
    "--platform-filter",
    "--profile",
    "--release",
    "--rerun",
    "--retries",
    "--run-ignored",
    "--show-progress",
    "--skip",
    "--status-level",
    "--stress-count",
    "--stress-duration",
    "--success-output",
    "--target",
    "--target-dir",
    "--target-dir-remap",
    "--test",
    "--test-threads",
    "--tests",
    "--timings",
    "--tool-config-file",
    "--tracer",
    "--unit-graph",
    "--user-config-file",
    "--verbose",
    "--workspace",
    "--workspace-remap",
];

/// A flag meant for this command but mistyped (`--recrod`) would otherwise reach nextest,
/// which answers with its own usage and suggestions. A `--flag` that is not ours but close to
/// one of ours (clap's suggestion) and that nextest does not know is refused with clap's error.
fn check_typos(nextest_args: &[OsString]) -> std::result::Result<(), clap::Error> {
    let mut nextest_help: Option<String> = None;
    for arg in before_separator(nextest_args) {
        let Some(flag) = arg
            .split('=')
            .next()
            .filter(|f| f.starts_with("--") && !NEXTEST_FLAGS.contains(f))
        else {
            continue;
        };
        let Err(e) = TestArgs::command().try_get_matches_from(["cargo llmreplay test", flag])
        else {
            continue;
        };
        let suggested = e.kind() == clap::error::ErrorKind::UnknownArgument
            && e.get(clap::error::ContextKind::SuggestedArg).is_some();
        if !suggested {
            continue;
        }
        // Asked only for a near miss: a flag of nextest's own close to ours goes through.
        let help = nextest_help.get_or_insert_with(|| {
            crate::locate::nextest(["run", "--help"])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default()
        });
        let known = help.match_indices(flag).any(|(at, _)| {
            help[at + flag.len()..]
                .chars()
                .next()
                .is_none_or(|c| !(c.is_alphanumeric() || c == '-'))
        });
        if !known {
            return Err(e);
        }
    }
    Ok(())
}

pub fn run(args: Vec<OsString>) -> Result<Outcome> {
    // The run's CA, begun before anything else on its own thread: its key, then its files
    // once their place is known, are what nextest's start waits for.
    let (place, placed) = std::sync::mpsc::sync_channel::<PathBuf>(1);
    let (made, ca) = std::sync::mpsc::sync_channel(1);
    let ca_thread = std::thread::spawn(move || -> Result<()> {
        let run_ca = match daemon::ca::RunCa::new() {
            Ok(run_ca) => std::sync::Arc::new(run_ca),
            Err(e) => {
                let _ = made.send(Err(e));
                return Ok(());
            }
        };
        let pem = run_ca.pem().to_string();
        let _ = made.send(Ok(run_ca));
        // No place: the run captures nothing, or ended first.
        match placed.recv() {
            Ok(stem) => crate::capture::write_ca(&stem, &pem).map(|_| ()),
            Err(_) => Ok(()),
        }
    });
    let (own, mut nextest_args) = split_args(args);
    if let Err(e) = check_typos(&nextest_args) {
        let _ = e.print();
        return Ok(Outcome::Usage);
    }
    let args = match TestArgs::try_parse_from(
        std::iter::once(OsString::from("cargo llmreplay test")).chain(own),
    ) {
        Ok(args) => args,
        Err(e) => {
            // Help and version are printed on stdout and are no error.
            let _ = e.print();
            return Ok(if e.use_stderr() {
                Outcome::Usage
            } else {
                Outcome::Success
            });
        }
    };
    args.daemon.check_ci()?;
    let root = preconditions()?;
    let resolved = Resolved::daemon(root, None, &args.daemon)?;
    let root = resolved.root.clone();
    // The CA's files, written while the rest starts: the bundle, a copy of the system's
    // roots, is the largest write of a run's start. Each run's are its own, under the target
    // dir (never beside a report in the repository), and go when it ends: a second run in
    // the same target dir does not replace the certificate the first one's tests trust.
    let mut run_dir = None;
    let ca = match resolved.settings.capture.enabled {
        true => {
            let parent = resolved.target_dir().join("llmreplay");
            let dir = crate::files::RunDir::make(&parent).map_err(|e| {
                Error::io(format!("cannot make a folder in {}", parent.display()), e)
            })?;
            let stem = dir.path().join("ca");
            run_dir = Some(dir);
            let paths = crate::capture::ca_paths(&stem);
            let _ = place.send(stem);
            Some((ca, paths, ca_thread))
        }
        false => {
            drop(place);
            None
        }
    };
    // Beside the report: runs that keep their reports apart keep their logs apart too.
    let log = match &args.report {
        Some(report) => report.with_extension("log"),
        None => resolved.target_dir().join("llmreplay/daemon.log"),
    };
    crate::log::init(0, Some(&log))?;
    let report_path = args
        .report
        .clone()
        .unwrap_or_else(|| resolved.default_report());
    let target_dir = resolved.target_dir();
    let settings = resolved.settings;
    let proxy_secret = settings.proxy_secret.clone();
    let mode = settings.mode;
    let cassette_dir = settings.cassette_dir.clone();
    let gateways = settings.gateways();
    if mode.goes_upstream() {
        render::stderr(&format!(
            "cargo-llmreplay: {mode} mode; upstreams:\n{}",
            settings.upstream_report()
        ));
    }
    let (runner_key, chain) = user_runner(&root)?;
    // Record modes keep the runner: it notes which tests passed, which a re-record needs.
    let runner_less = args.runner == RunnerChoice::Auto
        && mode == daemon::Mode::Replay
        && chain.is_empty()
        && daemon::peer::Peers::supported();
    let runner = toml::Value::Array(
        runner_command()?
            .into_iter()
            .map(toml::Value::String)
            .collect(),
    );
    let scope = RunScope::of(&nextest_args);
    // A replay run reports every missing recording, not only those before the first failure.
    let user_fail_fast = fail_fast_option(&nextest_args);
    if mode == daemon::Mode::Replay && user_fail_fast.is_none() {
        nextest_args.insert(0, "--no-fail-fast".into());
    }
    let fail_fast = match user_fail_fast.as_deref() {
        Some("--no-fail-fast") | Some("--max-fail=all") => false,
        Some(_) => true,
        // nextest's default, unless the profile says otherwise.
        None => mode != daemon::Mode::Replay,
    };

    // The daemon's address goes to nextest before the daemon is made, which happens while
    // nextest starts: connections wait in the listener's backlog until it serves.
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    let listener = std::net::TcpListener::bind(addr)
        .map_err(|source| daemon::DaemonError::Bind { addr, source })?;
    let url = format!(
        "http://{}",
        listener
            .local_addr()
            .map_err(|source| daemon::DaemonError::Bind { addr, source })?
    );
    let (ca, ca_files, ca_written) = match ca {
        Some((ca, paths, written)) => (Some(ca), Some(paths), Some(written)),
        None => (None, None, None),
    };

    let temp = |prefix: &str| {
        tempfile::Builder::new()
            .prefix(prefix)
            .tempfile()
            .map_err(|e| Error::io("cannot make a temporary file", e))
    };
    // Files the runner writes: which tests ran, and under --record which passed. A run
    // without a runner has no use for the first.
    let ran = (!runner_less).then(|| temp("llmreplay-ran-")).transpose()?;
    let results = (mode == daemon::Mode::Record)
        .then(|| temp("llmreplay-results-"))
        .transpose()?;
    let mut nextest = crate::locate::nextest(["run"]);
    // One environment for the whole run, without a runner; the daemon reads each
    // connection's test from the process that opened it.
    let run_env = match runner_less {
        true => {
            let capture = ca_files
                .as_ref()
                .map(|(ca, bundle)| (ca.to_string_lossy(), bundle.to_string_lossy()));
            runner_plugin::daemon_env(
                &url,
                None,
                Some(&gateways),
                true,
                capture.as_ref().map(|(ca, bundle)| runner_plugin::Capture {
                    ca,
                    bundle,
                    // One environment for the run: the proxy names no test, so no secret.
                    secret: "",
                }),
            )
        }
        false => Vec::new(),
    };
    if runner_less {
        nextest.envs(run_env.iter().map(|(k, v)| (k, v)));
    } else {
        nextest
            .arg("--config")
            .arg(format!("{runner_key}={runner}"))
            .env(DAEMON_URL_ENV, &url)
            .env(providers::env::GATEWAYS_ENV, &gateways);
    }
    if let Some(ran) = &ran {
        nextest.env(RAN_FILE_ENV, ran.path());
    }
    nextest
        .args(&nextest_args)
        .env("LLMREPLAY_MODE", mode.as_str());
    if !chain.is_empty() {
        nextest.env(CHAIN_RUNNER_ENV, chain.join("\u{1f}"));
    }
    if let Some(results) = &results {
        nextest.env(RESULTS_FILE_ENV, results.path());
    }
    if let (Some((ca, bundle)), false) = (&ca_files, runner_less) {
        nextest
            .env(CAPTURE_CA_ENV, ca)
            .env(CAPTURE_BUNDLE_ENV, bundle)
            .env(runner_plugin::PROXY_SECRET_ENV, &proxy_secret);
    }
    // nextest announces a target runner on every run ("info: using target runner ...");
    // ours is set for every run, so the line only says that this command ran. A NEXTEST_LOG
    // of the user's own is kept.
    if std::env::var_os("NEXTEST_LOG").is_none() {
        nextest.env("NEXTEST_LOG", "info,cargo_nextest::dispatch=warn");
    }
    // The tests trust the CA's files: written before any can read them.
    if let Some(written) = ca_written {
        written
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))?;
    }
    let mut child = nextest
        .spawn()
        .map_err(|e| Error::io("cannot run cargo nextest", e))?;
    let (runtime, daemon) = match start_daemon(settings, listener, ca) {
        Ok(started) => started,
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(e);
        }
    };
    let (journal, store, peers) = (daemon.journal(), daemon.store(), daemon.peers());
    if runner_less {
        let _ = peers.set(daemon::peer::Peers::new(
            Some(child.id()),
            daemon::peer::IdVars::Nextest,
        ));
        tracing::info!(target: "cargo_llmreplay::daemon", "no target runner: each connection's test is read from its process");
    }
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = runtime.spawn(daemon.run(async {
        let _ = stopped.await;
    }));
    // While nextest builds and lists, on a core it mostly leaves idle: every cassette a
    // whole-suite replay will read, parsed before the first test asks, then what git says of
    // the cassettes in a run that writes none (a new file counted from what was just read,
    // not parsed again). Started after nextest, so as not to slow this command's own start.
    let preload = mode == daemon::Mode::Replay && scope.whole_suite();
    let git = !mode.writes();
    let background = (preload || git).then(|| {
        let (store, dir) = (store.clone(), cassette_dir.clone());
        std::thread::spawn(move || {
            in_background();
            if preload {
                store.preload();
            }
            git.then(|| {
                review::git::changes_against_head_after(&dir, |path| store.interactions_read(path))
            })
        })
    });
    let status = child
        .wait()
        .map_err(|e| Error::io("cannot run cargo nextest", e))?;
    let stopped_early = fail_fast && !status.success();
    // Without a runner, nothing says which tests ran but those that called. A cassette folder
    // of a test that did not call is the only thing that needs more (it is unused, or an
    // orphan, or its test was filtered out), and only then is the suite listed, for the run's
    // filter: most runs list nothing.
    let mut judged = !runner_less;
    if runner_less && (scope.partition.is_some() || silent_folders(&store, &journal)?) {
        let mut env = run_env.clone();
        env.push(("LLMREPLAY_MODE".into(), mode.as_str().into()));
        let listed = report::spawn_list(&nextest_args, &env)
            .map_err(|e| Error::io("cannot run cargo nextest list", e))
            .and_then(report::read_list);
        match listed {
            Ok((suite, selected)) => {
                journal.listed_all(suite);
                // A run that stopped early did not run every selected test.
                for test in selected.iter().filter(|_| !stopped_early) {
                    journal.begin(test);
                }
                judged = true;
            }
            Err(e) => render::stderr(&format!(
                "cargo-llmreplay: warning: no unused check: {}\n",
                render::term_lines(&e.to_string())
            )),
        }
    }
    if let Some(ran) = ran {
        for test in std::fs::read_to_string(ran.path())
            .unwrap_or_default()
            .lines()
        {
            journal.begin(test);
        }
    }
    let _ = stop.send(());
    let stats = runtime
        .block_on(served)
        .map_err(|e| Error::io("the daemon failed", std::io::Error::other(e)))?;
    let recorded = finish_tests(
        mode,
        &journal,
        &store,
        &results
            .and_then(|results| std::fs::read_to_string(results.path()).ok())
            .unwrap_or_default(),
    )?;

    // The runner saw nextest list the suite; asking `cargo nextest list` again is the fallback
    // (a chained runner that swallowed the list, say).
    let suite = journal.suite();
    let listed = if scope.filtered || !judged {
        // Unlisted without a runner: every cassette folder's test called, so none is an orphan.
        None
    } else if !suite.is_empty() {
        Some(suite)
    } else {
        match report::list_tests(&scope) {
            Ok(tests) => Some(tests),
            Err(e) => {
                render::stderr(&format!(
                    "cargo-llmreplay: warning: no orphan check: {}\n",
                    render::term_lines(&e.to_string())
                ));
                None
            }
        }
    };
    let report = report::Report::build(report::Inputs {
        mode,
        stats,
        journal: &journal,
        store: &store,
        cassette_dir: &cassette_dir,
        scope: &scope,
        listed: listed.as_ref(),
        tests_passed: status.success(),
        stopped_early,
        recorded,
        log: Some(&log),
        changes: background
            .and_then(|read| read.join().unwrap_or_else(|p| std::panic::resume_unwind(p))),
    })?;
    report.write(&report_path)?;
    render::stderr(&report.summary(&root, &report_path, Styles::for_stderr()));
    report.to_step_summary();
    let outcome = report.outcome(Some(status), &args.deny);
    if args.review && mode.goes_upstream() {
        crate::review_cmd::after_test_run(&cassette_dir, &target_dir)?;
    }
    // The command ends here: the runtime's threads and the cassettes read go with the
    // process, rather than each being joined or freed first.
    runtime.shutdown_background();
    std::mem::forget(store);
    drop(run_dir);
    Ok(outcome)
}

/// The async runtime, with Ctrl-C caught, and the daemon on `listener` with the run's CA
/// (from its thread).
fn start_daemon(
    settings: daemon::Settings,
    listener: std::net::TcpListener,
    ca: Option<
        std::sync::mpsc::Receiver<
            std::result::Result<std::sync::Arc<daemon::ca::RunCa>, daemon::ca::CaError>,
        >,
    >,
) -> Result<(tokio::runtime::Runtime, Daemon)> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io("cannot start the async runtime", e))?;
    // Ctrl-C reaches nextest too (same process group); this process waits for it to finish,
    // then stops the daemon and reports, instead of dying with its child still running.
    runtime.spawn(async { while tokio::signal::ctrl_c().await.is_ok() {} });
    let ca = match ca {
        Some(ca) => Some(
            ca.recv()
                .expect("the CA thread sends its CA or its error")
                .map_err(daemon::DaemonError::from)?,
        ),
        None => None,
    };
    let daemon = {
        let _entered = runtime.enter();
        Daemon::on_listener(settings, listener, ca)?
    };
    Ok((runtime, daemon))
}

/// Lowers the calling thread's priority, for work done while nextest builds and lists: it
/// takes what cargo and nextest leave of the cores, not a share of theirs. On Linux a nice
/// value is the thread's own.
fn in_background() {
    #[cfg(target_os = "linux")]
    // SAFETY: no pointers; `who` 0 is the calling thread.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, 0, 19);
    }
}

/// Whether a cassette folder belongs to no test that called the daemon in this run.
fn silent_folders(store: &cassettes::Store, journal: &daemon::Journal) -> Result<bool> {
    let called: std::collections::BTreeSet<String> = journal
        .tests()
        .iter()
        .map(|t| cassettes::Slug::from_test_id(&cassettes::TestId::new(t.as_str())).to_string())
        .collect();
    Ok(store.folders()?.iter().any(|f| !called.contains(f)))
}

/// Says what the run changed in each test's cassettes. Under `--record`, a test whose last
/// attempt passed ends holding exactly what it recorded in this run.
fn finish_tests(
    mode: daemon::Mode,
    journal: &daemon::Journal,
    store: &cassettes::Store,
    results: &str,
) -> Result<Vec<cassettes::TestChanges>> {
    if !mode.writes() {
        return Ok(Vec::new());
    }
    // Attempts end in order, so a test's last line is its last attempt.
    let mut passed = std::collections::BTreeMap::new();
    for line in results.lines() {
        if let Some((word, id)) = line.split_once(' ') {
            passed.insert(id.to_string(), word == "passed");
        }
    }
    let mut tests = journal.tests();
    tests.extend(passed.keys().cloned());
    let mut out = Vec::new();
    for test in tests {
        let trim = mode == daemon::Mode::Record && passed.get(&test) == Some(&true);
        let changes = store.finish_test(&cassettes::TestId::new(test), trim)?;
        if !changes.is_empty() {
            out.push(changes);
        }
    }
    Ok(out)
}

/// The nextest target runner: the small `cargo-llmreplay-runner` installed beside this program
/// (it starts in about half the time), else this program's own `__runner`.
fn runner_command() -> Result<Vec<String>> {
    let exe =
        std::env::current_exe().map_err(|e| Error::io("cannot find this program's path", e))?;
    let small = exe.with_file_name(format!(
        "cargo-llmreplay-runner{}",
        std::env::consts::EXE_SUFFIX
    ));
    Ok(if small.is_file() {
        vec![small.to_string_lossy().into_owned()]
    } else {
        vec![exe.to_string_lossy().into_owned(), "__runner".into()]
    })
}

/// Finds the workspace root and checks nextest: usually without a cargo call (see `locate`).
fn preconditions() -> Result<PathBuf> {
    let root = crate::locate::workspace_root()?;
    crate::locate::check_nextest(&crate::args::target_dir(&root))?;
    Ok(root)
}

/// Which runner key to set, and the user's own runner to chain. A runner for the host triple
/// (`CARGO_TARGET_<TRIPLE>_RUNNER`, or `target.<triple>.runner` in `.cargo/config.toml`) wins
/// over a `cfg(...)` one in cargo, so when there is one this sets that key instead.
fn user_runner(root: &Path) -> Result<(String, Vec<String>)> {
    let cfg_key = "target.'cfg(all())'.runner".to_string();
    let env_runner =
        std::env::vars().any(|(k, _)| k.starts_with("CARGO_TARGET_") && k.ends_with("_RUNNER"));
    let config_files: Vec<PathBuf> = [".cargo/config.toml", ".cargo/config"]
        .iter()
        .map(|f| root.join(f))
        .filter(|p| p.exists())
        .collect();
    if !env_runner && config_files.is_empty() {
        return Ok((cfg_key, Vec::new()));
    }
    let host = host_triple()?;
    let key = format!("target.{host}.runner");
    let var = format!(
        "CARGO_TARGET_{}_RUNNER",
        host.to_uppercase().replace(['-', '.'], "_")
    );
    if let Ok(r) = std::env::var(&var) {
        return Ok((key, r.split_whitespace().map(str::to_string).collect()));
    }
    for file in config_files {
        let text = std::fs::read_to_string(&file)
            .map_err(|e| Error::io(format!("cannot read {}", file.display()), e))?;
        let value: toml::Table = toml::from_str(&text)
            .map_err(|e| Error::Precondition(format!("{}: {e}", file.display())))?;
        let runner = value
            .get("target")
            .and_then(|t| t.get(&host))
            .and_then(|t| t.get("runner"));
        match runner {
            Some(toml::Value::String(s)) => {
                return Ok((key, s.split_whitespace().map(str::to_string).collect()))
            }
            Some(toml::Value::Array(a)) => {
                return Ok((
                    key,
                    a.iter()
                        .filter_map(|v| v.as_str().map(str::to_string))
                        .collect(),
                ))
            }
            _ => {}
        }
    }
    Ok((cfg_key, Vec::new()))
}

fn host_triple() -> Result<String> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let out = Command::new(rustc)
        .arg("-vV")
        .output()
        .map_err(|e| Error::io("cannot run rustc", e))?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_string))
        .ok_or_else(|| Error::Precondition("rustc -vV printed no host triple".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(args: &[&str]) -> (Vec<String>, Vec<String>) {
        let (a, b) = split_args(args.iter().map(OsString::from).collect());
        let s = |v: Vec<OsString>| v.into_iter().map(|x| x.into_string().unwrap()).collect();
        (s(a), s(b))
    }

    /// nextest's own flags close to ours pass without a look at nextest's help; a near miss of
    /// ours is clap's error with its suggestion.
    #[test]
    fn typos_of_ours_are_refused_and_nextest_flags_pass() {
        let args = |a: &[&str]| a.iter().map(OsString::from).collect::<Vec<_>>();
        for flag in [
            "--retries",
            "--release",
            "--run-ignored",
            "--color",
            "--target-dir",
        ] {
            assert!(check_typos(&args(&[flag, "x"])).is_ok(), "{flag}");
        }
        let e = check_typos(&args(&["--recrod"])).unwrap_err().to_string();
        assert!(e.contains("--record"), "{e}");
    }

    #[test]
    fn own_flags_anywhere_the_rest_to_nextest() {
        let (own, rest) = split(&[
            "-E",
            "test(=a)",
            "--record-missing",
            "--upstream",
            "openai=http://x",
            "--retries=2",
            "--deny=unused",
            "--",
            "--record",
        ]);
        assert_eq!(
            own,
            [
                "--record-missing",
                "--upstream",
                "openai=http://x",
                "--deny=unused"
            ]
        );
        assert_eq!(rest, ["-E", "test(=a)", "--retries=2", "--", "--record"]);
    }
}
