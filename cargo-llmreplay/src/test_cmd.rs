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

/// The long flags of `cargo nextest run` and their aliases, as its own `--help` lists them (a
/// test compares the two, so a nextest that adds or drops a flag fails it rather than drifting
/// silently): known to be nextest's, so never refused as a typo of ours, and with no `--help`
/// asked of nextest to tell (a few hundred milliseconds, for `--retries` or `--release` on
/// every run). A flag of a newer nextest that is close to one of ours is still let through:
/// nextest's help is asked for those.
const NEXTEST_FLAGS: &[&str] = &[
    "--all",
    "--all-features",
    "--all-targets",
    "--archive-file",
    "--archive-format",
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

/// How each test is pointed at the daemon.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wiring {
    /// A target runner sets each test's environment, and says which tests ran and passed.
    Runner,
    /// One environment for the whole run; the daemon reads each connection's test from the
    /// process that opened it (no exec per test).
    Environment,
}

/// What a run will do, decided from its arguments and settings alone, before anything runs.
#[derive(Debug)]
struct RunPlan {
    mode: daemon::Mode,
    wiring: Wiring,
    /// What nextest is given: the user's arguments, and `--no-fail-fast` for a replay run
    /// that names no fail-fast of its own (it reports every missing recording).
    nextest_args: Vec<OsString>,
    /// Whether nextest stops at the first failure: then not every selected test ran.
    fail_fast: bool,
    scope: RunScope,
    /// Every cassette a whole-suite replay will read, parsed while nextest builds and lists.
    preload: bool,
    /// What git says of the cassettes, read while the tests run, in a run that writes none.
    git: bool,
    /// Whether the runner writes which tests passed (a re-record trims only those).
    results: bool,
    report: PathBuf,
    /// Beside the report: runs that keep their reports apart keep their logs apart too.
    log: PathBuf,
    /// `--review` after a run that went upstream.
    review: bool,
}

/// What a plan is made from besides the arguments.
struct Facts {
    mode: daemon::Mode,
    /// The user's own target runner, chained after ours.
    chained_runner: bool,
    /// Whether this system tells a connection's process (Linux).
    peers_supported: bool,
    default_report: PathBuf,
    target_dir: PathBuf,
}

impl RunPlan {
    fn new(args: &TestArgs, mut nextest_args: Vec<OsString>, facts: Facts) -> RunPlan {
        let mode = facts.mode;
        // Record modes keep the runner: it notes which tests passed, which a re-record needs.
        let wiring = match args.runner == RunnerChoice::Auto
            && mode == daemon::Mode::Replay
            && !facts.chained_runner
            && facts.peers_supported
        {
            true => Wiring::Environment,
            false => Wiring::Runner,
        };
        let scope = RunScope::of(&nextest_args);
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
        let report = args.report.clone().unwrap_or(facts.default_report);
        let log = match &args.report {
            Some(report) => report.with_extension("log"),
            None => facts.target_dir.join("llmreplay/daemon.log"),
        };
        RunPlan {
            mode,
            wiring,
            nextest_args,
            fail_fast,
            preload: mode == daemon::Mode::Replay && scope.whole_suite(),
            git: !mode.writes(),
            scope,
            results: mode == daemon::Mode::Record,
            report,
            log,
            review: args.review && mode.goes_upstream(),
        }
    }
}

pub fn run(args: Vec<OsString>) -> Result<Outcome> {
    // The run's CA, begun before anything else on its own thread: its key, then its files
    // once their place is known, are what nextest's start waits for.
    let ca = CaThread::start();
    let (own, nextest_args) = split_args(args);
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
    let (runner_key, chain) = user_runner(&resolved.root)?;
    let facts = Facts {
        mode: resolved.settings.mode,
        chained_runner: !chain.is_empty(),
        peers_supported: daemon::peer::Peers::supported(),
        default_report: resolved.default_report(),
        target_dir: resolved.target_dir(),
    };
    let plan = RunPlan::new(&args, nextest_args, facts);
    crate::log::init(0, Some(&plan.log))?;
    let launched = launch(&plan, resolved, ca, runner_key, chain)?;
    finish(&plan, &args.deny, launched)
}

/// The thread that makes the run's CA, then writes its files where it is told.
struct CaThread {
    place: std::sync::mpsc::SyncSender<PathBuf>,
    made: std::sync::mpsc::Receiver<CaMade>,
    written: std::thread::JoinHandle<Result<()>>,
}

/// What git says of the cassettes, read beside the tests.
type ChangesRead = std::result::Result<Option<Vec<review::git::Change>>, review::Error>;

/// The run's CA, or why it could not be made.
type CaMade = std::result::Result<std::sync::Arc<daemon::ca::RunCa>, daemon::ca::CaError>;

impl CaThread {
    fn start() -> CaThread {
        let (place, placed) = std::sync::mpsc::sync_channel::<PathBuf>(1);
        let (made, ca) = std::sync::mpsc::sync_channel(1);
        let written = std::thread::spawn(move || -> Result<()> {
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
        CaThread {
            place,
            made: ca,
            written,
        }
    }
}

/// A run under way: nextest running, the daemon serving, and what reads beside them.
struct Launched {
    root: PathBuf,
    target_dir: PathBuf,
    cassette_dir: PathBuf,
    child: std::process::Child,
    runtime: tokio::runtime::Runtime,
    journal: std::sync::Arc<daemon::Journal>,
    store: std::sync::Arc<cassettes::Store>,
    stop: tokio::sync::oneshot::Sender<()>,
    served: tokio::task::JoinHandle<daemon::Stats>,
    background: Option<std::thread::JoinHandle<Option<ChangesRead>>>,
    /// The environment of a run without a runner, for a `nextest list` of the same tests.
    run_env: Vec<(String, String)>,
    /// Files the runner writes: which tests ran, and under --record which passed.
    ran: Option<tempfile::NamedTempFile>,
    results: Option<tempfile::NamedTempFile>,
    /// The run's folder of CA files, removed when the run ends.
    run_dir: Option<crate::files::RunDir>,
}

/// Starts the run: the CA's files written, nextest spawned with every test pointed at the
/// daemon, the daemon made and serving, and the cassettes read while nextest builds.
fn launch(
    plan: &RunPlan,
    resolved: Resolved,
    ca: CaThread,
    runner_key: String,
    chain: Vec<String>,
) -> Result<Launched> {
    let root = resolved.root.clone();
    let target_dir = resolved.target_dir();
    // The CA's files, written while the rest starts: the bundle, a copy of the system's
    // roots, is the largest write of a run's start. Each run's are its own, under the target
    // dir (never beside a report in the repository), and go when it ends: a second run in
    // the same target dir does not replace the certificate the first one's tests trust.
    let mut run_dir = None;
    let CaThread {
        place,
        made,
        written,
    } = ca;
    let (ca, ca_files, ca_written) = match resolved.settings.capture.enabled {
        true => {
            let parent = target_dir.join("llmreplay");
            let dir = crate::files::RunDir::make(&parent).map_err(|e| {
                Error::io(format!("cannot make a folder in {}", parent.display()), e)
            })?;
            let stem = dir.path().join("ca");
            run_dir = Some(dir);
            let paths = crate::capture::ca_paths(&stem);
            let _ = place.send(stem);
            (Some(made), Some(paths), Some(written))
        }
        false => {
            drop(place);
            (None, None, None)
        }
    };
    let settings = resolved.settings;
    let proxy_secret = settings.proxy_secret.clone();
    let mode = plan.mode;
    let cassette_dir = settings.cassette_dir.clone();
    let gateways = settings.gateways();
    if mode.goes_upstream() {
        render::stderr(&format!(
            "cargo-llmreplay: {mode} mode; upstreams:\n{}",
            settings.upstream_report()
        ));
    }
    let runner_less = plan.wiring == Wiring::Environment;
    let runner = toml::Value::Array(
        runner_command()?
            .into_iter()
            .map(toml::Value::String)
            .collect(),
    );

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

    let temp = |prefix: &str| {
        tempfile::Builder::new()
            .prefix(prefix)
            .tempfile()
            .map_err(|e| Error::io("cannot make a temporary file", e))
    };
    // A run without a runner has no use for the list of tests that ran.
    let ran = (!runner_less).then(|| temp("llmreplay-ran-")).transpose()?;
    let results = plan
        .results
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
        .args(&plan.nextest_args)
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
    let (preload, git) = (plan.preload, plan.git);
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
    Ok(Launched {
        root,
        target_dir,
        cassette_dir,
        child,
        runtime,
        journal,
        store,
        stop,
        served,
        background,
        run_env,
        ran,
        results,
        run_dir,
    })
}

/// Waits for nextest, stops the daemon, settles what each test recorded, then writes the
/// report, prints its summary and, under `--review`, walks the changed answers.
fn finish(plan: &RunPlan, deny: &[Deny], launched: Launched) -> Result<Outcome> {
    let Launched {
        root,
        target_dir,
        cassette_dir,
        mut child,
        runtime,
        journal,
        store,
        stop,
        served,
        background,
        run_env,
        ran,
        results,
        run_dir,
    } = launched;
    let (mode, scope) = (plan.mode, &plan.scope);
    let status = child
        .wait()
        .map_err(|e| Error::io("cannot run cargo nextest", e))?;
    let stopped_early = plan.fail_fast && !status.success();
    // Without a runner, nothing says which tests ran but those that called. A cassette folder
    // of a test that did not call is the only thing that needs more (it is unused, or an
    // orphan, or its test was filtered out), and only then is the suite listed, for the run's
    // filter: most runs list nothing.
    let runner_less = plan.wiring == Wiring::Environment;
    let mut judged = !runner_less;
    if runner_less && (scope.partition.is_some() || silent_folders(&store, &journal)?) {
        let mut env = run_env;
        env.push(("LLMREPLAY_MODE".into(), mode.as_str().into()));
        let listed = report::spawn_list(&plan.nextest_args, &env)
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
            journal.begin(&cassettes::TestId::new(test));
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
        match report::list_tests(scope) {
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
        scope,
        listed: listed.as_ref(),
        tests_passed: status.success(),
        stopped_early,
        recorded,
        log: Some(&plan.log),
        changes: background
            .and_then(|read| read.join().unwrap_or_else(|p| std::panic::resume_unwind(p))),
    })?;
    report.write(&plan.report)?;
    render::stderr(&report.summary(&root, &plan.report, Styles::for_stderr()));
    report.to_step_summary();
    let outcome = report.outcome(Some(status), deny);
    if plan.review {
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
    ca: Option<std::sync::mpsc::Receiver<CaMade>>,
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
    // No pid is this thread, as the kernel reads it.
    #[cfg(target_os = "linux")]
    let _ = rustix::process::setpriority_process(None, 19);
}

/// Whether a cassette folder belongs to no test that called the daemon in this run.
fn silent_folders(store: &cassettes::Store, journal: &daemon::Journal) -> Result<bool> {
    let called: std::collections::BTreeSet<String> = journal
        .tests()
        .iter()
        .map(|t| cassettes::Slug::from_test_id(t).to_string())
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
            passed.insert(cassettes::TestId::new(id), word == "passed");
        }
    }
    let mut tests = journal.tests();
    tests.extend(passed.keys().cloned());
    let mut out = Vec::new();
    for test in tests {
        let trim = mode == daemon::Mode::Record && passed.get(&test) == Some(&true);
        let changes = store.finish_test(&test, trim)?;
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

    fn plan_of(args: &[&str], nextest: &[&str], mode: daemon::Mode) -> RunPlan {
        let args = TestArgs::try_parse_from(
            std::iter::once("cargo llmreplay test").chain(args.iter().copied()),
        )
        .unwrap();
        let facts = Facts {
            mode,
            chained_runner: false,
            peers_supported: true,
            default_report: PathBuf::from("target/llmreplay/report.json"),
            target_dir: PathBuf::from("target"),
        };
        RunPlan::new(&args, nextest.iter().map(OsString::from).collect(), facts)
    }

    #[test]
    fn a_replay_runs_every_test_without_a_runner() {
        let plan = plan_of(&[], &[], daemon::Mode::Replay);
        assert_eq!(plan.wiring, Wiring::Environment);
        assert_eq!(plan.nextest_args, vec![OsString::from("--no-fail-fast")]);
        assert!(!plan.fail_fast);
        assert!(plan.preload && plan.git && !plan.results && !plan.review);
        assert_eq!(plan.log, PathBuf::from("target/llmreplay/daemon.log"));
        assert_eq!(plan.report, PathBuf::from("target/llmreplay/report.json"));
    }

    #[test]
    fn the_users_fail_fast_and_filters_are_kept() {
        let plan = plan_of(
            &[],
            &["--max-fail=2", "-E", "test(=a)"],
            daemon::Mode::Replay,
        );
        assert!(plan.fail_fast, "the user's own fail-fast stands");
        assert_eq!(plan.nextest_args.len(), 3, "nothing added");
        assert!(!plan.preload, "a filtered run reads only what it asks for");
        let plan = plan_of(&[], &["--max-fail=all"], daemon::Mode::Record);
        assert!(!plan.fail_fast);
        let plan = plan_of(&[], &[], daemon::Mode::RecordMissing);
        assert!(plan.fail_fast, "nextest's default in record modes");
        assert_eq!(plan.nextest_args, Vec::<OsString>::new());
    }

    #[test]
    fn record_modes_keep_the_runner_and_write() {
        let plan = plan_of(
            &["--review", "--report", "out/r.json"],
            &[],
            daemon::Mode::Record,
        );
        assert_eq!(plan.wiring, Wiring::Runner);
        assert!(plan.results && plan.review && !plan.git && !plan.preload);
        assert_eq!(plan.log, PathBuf::from("out/r.log"));
        assert_eq!(plan.report, PathBuf::from("out/r.json"));
        let plan = plan_of(&["--runner", "exec"], &[], daemon::Mode::Replay);
        assert_eq!(plan.wiring, Wiring::Runner);
        let chained = {
            let args = TestArgs::try_parse_from(["cargo llmreplay test"]).unwrap();
            let facts = Facts {
                mode: daemon::Mode::Replay,
                chained_runner: true,
                peers_supported: true,
                default_report: PathBuf::from("r.json"),
                target_dir: PathBuf::from("t"),
            };
            RunPlan::new(&args, Vec::new(), facts)
        };
        assert_eq!(
            chained.wiring,
            Wiring::Runner,
            "a runner of the user's own is chained"
        );
    }

    /// The flag table is nextest's: every long flag and alias `cargo nextest run --help`
    /// lists, and nothing else.
    #[test]
    fn the_flag_table_is_nextests_own() {
        let out = crate::locate::nextest(["run", "--help"]).output();
        let help = match out {
            Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).into_owned(),
            _ if std::env::var_os("CI").is_some_and(|v| v == "true") => {
                panic!("cargo-nextest is needed for this test (CI=true)")
            }
            _ => {
                eprintln!("skipped: cargo-nextest is not installed");
                return;
            }
        };
        let flag = regex::Regex::new(r"^\s+(?:-\w, )?(--[a-z][a-z0-9-]*)").unwrap();
        let alias = regex::Regex::new(r"\[alias(?:es)?: ([^\]]*)\]").unwrap();
        let mut listed = std::collections::BTreeSet::new();
        for line in help.lines() {
            if let Some(c) = flag.captures(line) {
                listed.insert(c[1].to_string());
            }
            if let Some(c) = alias.captures(line) {
                for a in c[1].split(',') {
                    listed.insert(a.trim().to_string());
                }
            }
        }
        let table: std::collections::BTreeSet<String> =
            NEXTEST_FLAGS.iter().map(|f| f.to_string()).collect();
        assert_eq!(
            table.difference(&listed).collect::<Vec<_>>(),
            Vec::<&String>::new(),
            "in the table, not in nextest's help"
        );
        assert_eq!(
            listed.difference(&table).collect::<Vec<_>>(),
            Vec::<&String>::new(),
            "in nextest's help, not in the table: add them to NEXTEST_FLAGS"
        );
    }

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
