//! The run started: nextest spawned with every test pointed at the daemon, the daemon made
//! and serving (`run_core`), and the cassettes read while nextest builds.

use super::outcomes;
use super::plan::{RunPlan, Wiring};
use super::{runner_command, Resolved};
use crate::error::{Error, Result};
use crate::run_core::{CaThread, ChangesRead, Naming, Paths, Prepared, Serving};
use runner_plugin::{
    CAPTURE_BUNDLE_ENV, CAPTURE_CA_ENV, CHAIN_RUNNER_ENV, DAEMON_URL_ENV, RAN_FILE_ENV, SETTLE_ENV,
};

/// A run under way: nextest running against the daemon, and what reads beside them.
pub(super) struct Launched {
    pub(super) serving: Serving,
    pub(super) background: Option<std::thread::JoinHandle<Option<ChangesRead>>>,
    /// The environment of a run without a runner, for a `nextest list` of the same tests.
    pub(super) run_env: Vec<(String, String)>,
    /// A file the runner writes: which tests ran.
    pub(super) ran: Option<tempfile::NamedTempFile>,
    /// Reads how each test ended from nextest's stdout, in a run without a runner.
    /// Says when it read the last line.
    pub(super) outcomes: Option<std::sync::mpsc::Receiver<()>>,
}

/// Starts the run: nextest spawned with every test pointed at the daemon, the daemon made and
/// serving, and the cassettes read while nextest builds.
pub(super) fn launch(
    plan: &RunPlan,
    resolved: Resolved,
    ca: CaThread,
    runner_key: String,
    chain: Vec<String>,
) -> Result<Launched> {
    let paths = Paths {
        report: plan.report.clone(),
        log: plan.log.clone(),
    };
    let mut prepared = Prepared::new(resolved, Some(ca), paths)?;
    let mode = plan.mode;
    let runner_less = plan.wiring == Wiring::Environment;
    let runner = toml::Value::Array(
        runner_command()?
            .into_iter()
            .map(toml::Value::String)
            .collect(),
    );
    let temp = |prefix: &str| {
        tempfile::Builder::new()
            .prefix(prefix)
            .tempfile()
            .map_err(|e| Error::io("cannot make a temporary file", e))
    };
    // A run without a runner has no use for the list of tests that ran.
    let ran = (!runner_less).then(|| temp("llmreplay-ran-")).transpose()?;
    let mut nextest = crate::locate::nextest(["run"]);
    // One environment for the whole run, without a runner; the daemon reads each
    // connection's test from the process that opened it. The proxy names no test, so no secret.
    let run_env = match runner_less {
        true => prepared.env(false),
        false => Vec::new(),
    };
    // Without a runner, nextest's libtest JSON says how each test ended (README, "The run
    // log"), unless the user chose a format of their own or the tests print where it is read.
    let read_outcomes = runner_less
        && !outcomes::user_chose_format(&plan.nextest_args)
        && !outcomes::tests_print_there(&plan.nextest_args);
    if runner_less {
        nextest.envs(run_env.iter().map(|(k, v)| (k, v)));
    } else {
        nextest
            .arg("--config")
            .arg(format!("{runner_key}={runner}"))
            .env(DAEMON_URL_ENV, &prepared.url)
            .env(providers::env::GATEWAYS_ENV, &prepared.gateways);
    }
    if let Some(ran) = &ran {
        nextest.env(RAN_FILE_ENV, ran.path());
    }
    if let (Some((var, dir)), false) = (prepared.placeholders_env(), runner_less) {
        nextest.env(var, dir);
    }
    nextest
        .args(&plan.nextest_args)
        .env("LLMREPLAY_MODE", mode.as_str());
    if read_outcomes {
        nextest
            .args(outcomes::FORMAT_ARGS)
            .env(outcomes::EXPERIMENT_ENV, "1")
            .stdout(std::process::Stdio::piped());
    }
    if !chain.is_empty() {
        nextest.env(CHAIN_RUNNER_ENV, chain.join("\u{1f}"));
    }
    if plan.settle {
        nextest.env(SETTLE_ENV, "1");
    }
    if let (Some((ca, bundle)), false) = (&prepared.ca_files, runner_less) {
        nextest
            .env(CAPTURE_CA_ENV, ca)
            .env(CAPTURE_BUNDLE_ENV, bundle)
            .env(runner_plugin::PROXY_SECRET_ENV, &prepared.proxy_secret);
    }
    // nextest announces a target runner on every run ("info: using target runner ...");
    // ours is set for every run, so the line only says that this command ran. A NEXTEST_LOG
    // of the user's own is kept.
    if std::env::var_os("NEXTEST_LOG").is_none() {
        nextest.env("NEXTEST_LOG", "info,cargo_nextest::dispatch=warn");
    }
    prepared.ca_files_written()?;
    // nextest starts before the daemon is made, which happens while it builds: the tests'
    // connections wait in the listener's backlog until the daemon serves.
    let mut child = nextest
        .spawn()
        .map_err(|e| Error::io("cannot run cargo nextest", e))?;
    let ready = match prepared.start_daemon() {
        Ok(ready) => ready,
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(e);
        }
    };
    let stdout = child.stdout.take();
    let naming = match runner_less {
        true => {
            tracing::info!(target: "cargo_llmreplay::daemon", "no target runner: each connection's test is read from its process");
            Naming::Process(daemon::peer::IdVars::Nextest)
        }
        false => Naming::Said,
    };
    let serving = ready.serve(child, naming);
    let outcomes = stdout.map(|stdout| {
        let journal = serving.journal().clone();
        let (done, read) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            outcomes::read(stdout, journal);
            let _ = done.send(());
        });
        read
    });
    // While nextest builds and lists, on a core it mostly leaves idle: every cassette a
    // whole-suite replay will read, parsed before the first test asks, then what git says of
    // the cassettes in a run that writes none (a new file counted from what was just read,
    // not parsed again). Started after nextest, so as not to slow this command's own start.
    // The preload goes on ahead of the tests within the daemon's memory budget, until the
    // run stops it; git is asked beside it.
    if plan.preload {
        let store = serving.store().clone();
        std::thread::spawn(move || {
            in_background();
            store.preload();
        });
    }
    let background = plan.git.then(|| {
        let (store, dir) = (serving.store().clone(), serving.run.cassette_dir.clone());
        std::thread::spawn(move || {
            in_background();
            Some(review::git::changes_against_head_after(&dir, |path| {
                store.interactions_read(path)
            }))
        })
    });
    Ok(Launched {
        serving,
        background,
        run_env,
        ran,
        outcomes,
    })
}

/// Lowers the calling thread's priority, for work done while nextest builds and lists: it
/// takes what cargo and nextest leave of the cores, not a share of theirs. On Linux a nice
/// value is the thread's own.
fn in_background() {
    // No pid is this thread, as the kernel reads it.
    #[cfg(target_os = "linux")]
    let _ = rustix::process::setpriority_process(None, 19);
}
