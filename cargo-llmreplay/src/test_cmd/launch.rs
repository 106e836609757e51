//! The run started: the CA's files written, nextest spawned with every test pointed at the
//! daemon, the daemon made and serving, and the cassettes read while nextest builds.

use super::plan::{RunPlan, Wiring};
use super::{runner_command, Resolved};
use crate::error::{Error, Result};
use crate::render;
use daemon::Daemon;
use runner_plugin::{
    CAPTURE_BUNDLE_ENV, CAPTURE_CA_ENV, CHAIN_RUNNER_ENV, DAEMON_URL_ENV, RAN_FILE_ENV, SETTLE_ENV,
};
use std::path::PathBuf;

/// The thread that makes the run's CA, then writes its files where it is told.
pub(super) struct CaThread {
    pub(super) place: std::sync::mpsc::SyncSender<PathBuf>,
    pub(super) made: std::sync::mpsc::Receiver<CaMade>,
    pub(super) written: std::thread::JoinHandle<Result<()>>,
}

/// What git says of the cassettes, read beside the tests.
pub(super) type ChangesRead = std::result::Result<Option<Vec<review::git::Change>>, review::Error>;

/// The run's CA, or why it could not be made.
pub(crate) type CaMade =
    std::result::Result<std::sync::Arc<daemon::ca::RunCa>, daemon::ca::CaError>;

impl CaThread {
    pub(super) fn start() -> CaThread {
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
pub(super) struct Launched {
    pub(super) root: PathBuf,
    pub(super) cassette_dir: PathBuf,
    pub(super) child: std::process::Child,
    pub(super) runtime: tokio::runtime::Runtime,
    pub(super) journal: std::sync::Arc<daemon::Journal>,
    pub(super) store: std::sync::Arc<cassettes::Store>,
    pub(super) stop: tokio::sync::oneshot::Sender<()>,
    pub(super) served: tokio::task::JoinHandle<daemon::Stats>,
    pub(super) background: Option<std::thread::JoinHandle<Option<ChangesRead>>>,
    /// The environment of a run without a runner, for a `nextest list` of the same tests.
    pub(super) run_env: Vec<(String, String)>,
    /// A file the runner writes: which tests ran.
    pub(super) ran: Option<tempfile::NamedTempFile>,
    /// The run's folder of CA files, removed when the run ends.
    pub(super) run_dir: Option<crate::files::RunDir>,
    /// Set when the run is interrupted.
    pub(super) interrupted: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// Starts the run: the CA's files written, nextest spawned with every test pointed at the
/// daemon, the daemon made and serving, and the cassettes read while nextest builds.
pub(super) fn launch(
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
    let mut settings = resolved.settings;
    crate::recover::apply_left(&target_dir, &settings.cassette_dir)?;
    settings.run_dir = Some(daemon::settle::new_run_dir(&target_dir));
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
    let (listener, url) = crate::capture::loopback()?;

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
    if plan.settle {
        nextest.env(SETTLE_ENV, "1");
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
    let interrupted = daemon.interrupted();
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
    // The preload goes on ahead of the tests within the daemon's memory budget, until the
    // run stops it; git is asked beside it.
    let (preload, git) = (plan.preload, plan.git);
    if preload {
        let store = store.clone();
        std::thread::spawn(move || {
            in_background();
            store.preload();
        });
    }
    let background = git.then(|| {
        let (store, dir) = (store.clone(), cassette_dir.clone());
        std::thread::spawn(move || {
            in_background();
            Some(review::git::changes_against_head_after(&dir, |path| {
                store.interactions_read(path)
            }))
        })
    });
    Ok(Launched {
        root,
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
        run_dir,
        interrupted,
    })
}

/// The async runtime, with Ctrl-C caught, and the daemon on `listener` with the run's CA
/// (from its thread).
pub(crate) fn start_daemon(
    settings: daemon::Settings,
    listener: std::net::TcpListener,
    ca: Option<std::sync::mpsc::Receiver<CaMade>>,
) -> Result<(tokio::runtime::Runtime, Daemon)> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io("cannot start the async runtime", e))?;
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
    // Ctrl-C reaches the tests too (same process group); this process waits for them to
    // finish, then stops the daemon and reports, instead of dying with its child still running.
    // From then on no test's end removes a recording: an interrupted test may have said it
    // passed on its way out.
    let interrupted = daemon.interrupted();
    runtime.spawn(async move {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut int), Ok(mut term)) = (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) else {
            return;
        };
        loop {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            interrupted.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    });
    Ok((runtime, daemon))
}

/// Lowers the calling thread's priority, for work done while nextest builds and lists: it
/// takes what cargo and nextest leave of the cores, not a share of theirs. On Linux a nice
/// value is the thread's own.
pub(super) fn in_background() {
    // No pid is this thread, as the kernel reads it.
    #[cfg(target_os = "linux")]
    let _ = rustix::process::setpriority_process(None, 19);
}
