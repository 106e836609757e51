//! The running code `test` and `run` share: a daemon of the run's own around one child process.
//! A run goes through named phases, one type each: [`Prepared`] (settings applied, the listener
//! bound, the CA's files placed), [`Ready`] (the daemon made), [`Serving`] (the child running
//! against it), [`Stopped`] (the recordings settled) and [`Reported`] (the report built, then
//! concluded, then the run ended). The commands say only what differs: the child, its wiring.

use crate::args::Resolved;
use crate::error::{Error, Outcome, Result};
use crate::render;
use crate::report::{self, Deny, Report, ReportExt, RunScope};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

/// The run's CA, or why it could not be made.
type CaMade = std::result::Result<Arc<daemon::ca::RunCa>, daemon::ca::CaError>;

/// What git says of the cassettes, read beside the tests.
pub(crate) type ChangesRead = std::result::Result<Option<Vec<review::git::Change>>, review::Error>;

/// The thread that makes the run's CA, then writes its files where it is told.
pub(crate) struct CaThread {
    place: SyncSender<PathBuf>,
    made: Receiver<CaMade>,
    written: JoinHandle<Result<()>>,
}

impl CaThread {
    /// Begins making the CA: its key is the slowest part of a run's start.
    pub(crate) fn start() -> CaThread {
        let (place, placed) = std::sync::mpsc::sync_channel::<PathBuf>(1);
        let (made, ca) = std::sync::mpsc::sync_channel(1);
        let written = std::thread::spawn(move || -> Result<()> {
            let run_ca = match daemon::ca::RunCa::new() {
                Ok(run_ca) => Arc::new(run_ca),
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

/// Where a run writes its report and its daemon's log.
pub(crate) struct Paths {
    pub(crate) report: PathBuf,
    pub(crate) log: PathBuf,
}

/// What every phase of a run knows: where it runs, in which mode, where it reports.
pub(crate) struct Run {
    pub(crate) root: PathBuf,
    pub(crate) cassette_dir: PathBuf,
    pub(crate) mode: daemon::Mode,
    /// `[drift] trajectory`, for the review after a recording run.
    pub(crate) trajectory_mode: cassettes::sequence::SequenceMode,
    pub(crate) paths: Paths,
    /// The run's folder of CA files, removed when the run ends.
    ca_dir: Option<crate::files::RunDir>,
}

/// A run prepared, its daemon not made yet: what it needs to point a child at the daemon.
pub(crate) struct Prepared {
    pub(crate) run: Run,
    settings: daemon::Settings,
    listener: std::net::TcpListener,
    /// The daemon's URL, known before it is made: connections wait in the listener's backlog
    /// until it serves.
    pub(crate) url: String,
    pub(crate) gateways: String,
    pub(crate) proxy_secret: String,
    /// The CA's certificate and bundle, with capture on.
    pub(crate) ca_files: Option<(PathBuf, PathBuf)>,
    /// The folder of the placeholder credentials files, in replay.
    pub(crate) placeholders: Option<PathBuf>,
    ca_made: Option<Receiver<CaMade>>,
    ca_written: Option<JoinHandle<Result<()>>>,
}

impl Prepared {
    /// Starts a run from its settings: the daemon's log opened, the CA's files placed (made on
    /// `ca`, or on a thread started here), a dead run's spool applied, the run's folder named,
    /// the upstreams said, the listener bound.
    pub(crate) fn new(resolved: Resolved, ca: Option<CaThread>, paths: Paths) -> Result<Prepared> {
        crate::log::init(0, Some(&paths.log))?;
        let target_dir = resolved.target_dir();
        let mut settings = resolved.settings;
        // The CA's files, written while the rest starts: the bundle, a copy of the system's
        // roots, is the largest write of a run's start. Each run's are its own, under the target
        // dir (never beside a report in the repository), and go when it ends: a second run in
        // the same target dir does not replace the certificate the first one's tests trust.
        let (ca_dir, ca_files, ca_made, ca_written) = match settings.capture.enabled {
            true => {
                let CaThread {
                    place,
                    made,
                    written,
                } = ca.unwrap_or_else(CaThread::start);
                let parent = target_dir.join("llmreplay");
                let dir = crate::files::RunDir::make(&parent).map_err(|e| {
                    Error::io(format!("cannot make a folder in {}", parent.display()), e)
                })?;
                let stem = dir.path().join("ca");
                let files = crate::capture::ca_paths(&stem);
                let _ = place.send(stem);
                (Some(dir), Some(files), Some(made), Some(written))
            }
            false => {
                // Told no place, the thread ends once its CA is made.
                drop(ca);
                (None, None, None, None)
            }
        };
        crate::recover::apply_left(&target_dir, &settings.cassette_dir)?;
        settings.run_dir = Some(daemon::settle::new_run_dir(&target_dir));
        let mode = settings.mode;
        if mode.goes_upstream() {
            render::stderr(&format!(
                "cargo-llmreplay: {mode} mode; upstreams:\n{}",
                settings.upstream_report()
            ));
        }
        let placeholders = match mode {
            daemon::Mode::Replay => Some(write_placeholders(&target_dir)?),
            _ => None,
        };
        let (listener, url) = crate::capture::loopback()?;
        Ok(Prepared {
            run: Run {
                root: resolved.root,
                cassette_dir: settings.cassette_dir.clone(),
                mode,
                trajectory_mode: settings.trajectory_mode,
                paths,
                ca_dir,
            },
            url,
            gateways: settings.gateways(),
            proxy_secret: settings.proxy_secret.clone(),
            settings,
            listener,
            ca_files,
            placeholders,
            ca_made,
            ca_written,
        })
    }

    /// One environment for every process of the child, whose tests the daemon tells from
    /// their processes. With `secret`, the proxy's credentials carry the run's secret.
    pub(crate) fn env(&self, secret: bool) -> Vec<(String, String)> {
        let capture = self
            .ca_files
            .as_ref()
            .map(|(ca, bundle)| (ca.to_string_lossy(), bundle.to_string_lossy()));
        let placeholders = self.placeholders.as_ref().map(|p| p.to_string_lossy());
        runner_plugin::daemon_env(
            &self.url,
            None,
            Some(&self.gateways),
            (self.run.mode == daemon::Mode::Replay).then_some(runner_plugin::Replay {
                placeholders: placeholders.as_deref(),
            }),
            capture.as_ref().map(|(ca, bundle)| runner_plugin::Capture {
                ca,
                bundle,
                secret: if secret { &self.proxy_secret } else { "" },
            }),
        )
    }

    /// The environment's name and value that tell the target runner where the placeholder
    /// credentials files are, in replay.
    pub(crate) fn placeholders_env(&self) -> Option<(&'static str, &Path)> {
        self.placeholders
            .as_deref()
            .map(|dir| (runner_plugin::PLACEHOLDERS_ENV, dir))
    }

    /// Waits until the CA's files are written: a child that trusts them starts after this.
    pub(crate) fn ca_files_written(&mut self) -> Result<()> {
        match self.ca_written.take() {
            Some(written) => written
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p)),
            None => Ok(()),
        }
    }

    /// The async runtime, with Ctrl-C caught, and the daemon on the listener with the run's CA
    /// (from its thread); it serves from [`Ready::serve`].
    pub(crate) fn start_daemon(self) -> Result<Ready> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::io("cannot start the async runtime", e))?;
        let ca = match self.ca_made {
            Some(ca) => Some(
                ca.recv()
                    .expect("the CA thread sends its CA or its error")
                    .map_err(daemon::DaemonError::from)?,
            ),
            None => None,
        };
        let daemon = {
            let _entered = runtime.enter();
            daemon::Daemon::on_listener(self.settings, self.listener, ca)?
        };
        // Ctrl-C reaches the child too (same process group); this process waits for it to
        // finish, then stops the daemon and reports, instead of dying with its child still
        // running. From then on no test's end removes a recording: an interrupted test may have
        // said it passed on its way out. SIGTERM is most often sent to this process alone
        // (`timeout`, `kill PID`, a CI runner's cancel): it is passed on to the child, which
        // would otherwise run on while this process waits for it.
        let interrupted = daemon.interrupted();
        let child = ChildPid::default();
        let terminate = child.clone();
        runtime.spawn(async move {
            use tokio::signal::unix::{signal, SignalKind};
            let (Ok(mut int), Ok(mut term)) = (
                signal(SignalKind::interrupt()),
                signal(SignalKind::terminate()),
            ) else {
                return;
            };
            loop {
                let termed = tokio::select! {
                    _ = int.recv() => false,
                    _ = term.recv() => true,
                };
                interrupted.store(true, Ordering::SeqCst);
                if termed {
                    terminate.terminate();
                }
            }
        });
        Ok(Ready {
            run: self.run,
            runtime,
            daemon,
            child,
        })
    }
}

/// A run whose daemon is made and not serving yet.
pub(crate) struct Ready {
    pub(crate) run: Run,
    runtime: tokio::runtime::Runtime,
    daemon: daemon::Daemon,
    /// The child, once it runs: a SIGTERM this process gets is passed on to it.
    child: ChildPid,
}

/// The child's process id once it runs (0 before), and whether a SIGTERM came: one that came
/// before the child ran is passed on as it starts.
#[derive(Clone, Default)]
struct ChildPid(Arc<(std::sync::atomic::AtomicU32, AtomicBool)>);

impl ChildPid {
    /// A SIGTERM came: passed on to the child, if it runs.
    fn terminate(&self) {
        self.0 .1.store(true, Ordering::SeqCst);
        self.send();
    }

    /// The child runs as `pid`.
    fn running(&self, pid: u32) {
        self.0 .0.store(pid, Ordering::SeqCst);
        if self.0 .1.load(Ordering::SeqCst) {
            self.send();
        }
    }

    fn send(&self) {
        let pid = self.0 .0.load(Ordering::SeqCst);
        if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
    }
}

/// How the daemon tells a connection's test when the connection does not name it.
pub(crate) enum Naming {
    /// Every connection names its own (a target runner's URLs and credentials).
    Said,
    /// From the connecting process under the child: these variables in its environment.
    Process(daemon::peer::IdVars),
    /// As `Process`, else by the program at the top of its process tree under the child.
    Tree(daemon::peer::IdVars),
}

impl Ready {
    /// Tells the daemon how the child's processes name their tests, then serves them.
    pub(crate) fn serve(self, child: Child, naming: Naming) -> Serving {
        let Ready {
            run,
            runtime,
            daemon,
            child: child_pid,
        } = self;
        child_pid.running(child.id());
        // Before it serves: no connection is filed before the daemon can tell its test.
        let tree = matches!(naming, Naming::Tree(_));
        if let Naming::Process(vars) | Naming::Tree(vars) = naming {
            let _ = daemon
                .peers()
                .set(daemon::peer::Peers::new(Some(child.id()), vars));
        }
        if tree {
            let _ = daemon.trees().set(child.id());
        }
        let (journal, store, interrupted) =
            (daemon.journal(), daemon.store(), daemon.interrupted());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let served = runtime.spawn(daemon.run(async {
            let _ = stopped.await;
        }));
        Serving {
            run,
            child,
            child_pid,
            stop,
            served,
            handles: Handles {
                runtime,
                journal,
                store,
                interrupted,
            },
        }
    }
}

/// What outlives the daemon's serving: its runtime, and what it answered and loaded.
struct Handles {
    runtime: tokio::runtime::Runtime,
    journal: Arc<daemon::Journal>,
    store: Arc<cassettes::Store>,
    /// Set when the run is interrupted.
    interrupted: Arc<AtomicBool>,
}

/// How long a command's test waits at its end for its exchanges under way, as a test a
/// runner ended does.
const COMMAND_END_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// A run under way: the child running, the daemon serving it.
pub(crate) struct Serving {
    pub(crate) run: Run,
    child: Child,
    child_pid: ChildPid,
    stop: tokio::sync::oneshot::Sender<()>,
    served: tokio::task::JoinHandle<daemon::Stats>,
    handles: Handles,
}

impl Serving {
    /// What the daemon answered so far.
    pub(crate) fn journal(&self) -> &Arc<daemon::Journal> {
        &self.handles.journal
    }

    /// The cassettes as the daemon loaded them.
    pub(crate) fn store(&self) -> &Arc<cassettes::Store> {
        &self.handles.store
    }

    /// Waits for the child to exit; `context` says what failed when it cannot be waited for.
    pub(crate) fn wait(&mut self, context: &str) -> Result<ExitStatus> {
        let status = self.child.wait().map_err(|e| Error::io(context, e));
        // Gone: its id may be another process's from now on.
        self.child_pid.0 .0.store(0, Ordering::SeqCst);
        status
    }

    /// A command that is its own one test (no runner of tests under it says when each ends)
    /// passed when it exited 0 in a run not interrupted: each test it called under and whose end
    /// nothing said ends passed, and under `--record` then holds exactly this run's set. Not a
    /// test whose beginning a plugin said (one whose end it did not say crashed), nor any while
    /// a process the command started still runs with `marker` (`NAME=value`) in its
    /// environment: it may call again, and what it has not recorded yet would be lost.
    pub(crate) fn command_passed(&self, status: ExitStatus, marker: (&str, &str)) {
        if !status.success() || self.handles.interrupted.load(Ordering::SeqCst) {
            return;
        }
        let (journal, store) = (&self.handles.journal, &self.handles.store);
        let said = journal.outcomes();
        let tests: Vec<cassettes::TestId> = journal
            .tests()
            .into_iter()
            .filter(|t| !said.contains_key(t) && !journal.began_was_said(t))
            .collect();
        if tests.is_empty() {
            return;
        }
        let trim = self.run.mode == daemon::config::Mode::Record;
        let left = daemon::peer::holding_env(marker.0, marker.1).unwrap_or_default();
        if let Some(pid) = left.first() {
            if !trim {
                return;
            }
            let why = format!(
                "a process the command started (pid {pid}) still ran when the command exited"
            );
            for test in tests {
                journal.settled(cassettes::TestChanges {
                    test,
                    added: 0,
                    replaced: 0,
                    removed: 0,
                    kept: Some(why.clone()),
                    superseded: None,
                });
            }
            return;
        }
        let mode = self.run.mode;
        for test in tests {
            let passed = runlog::TestOutcome::Passed;
            journal.ended(&test, passed);
            if mode.writes() {
                // As a test a runner ended; one that cannot be written is settled again, and
                // reported, at the run's end.
                let _ = daemon::settle::write_ended(
                    store,
                    journal,
                    &test,
                    passed,
                    mode,
                    false,
                    COMMAND_END_WAIT,
                );
            }
        }
    }

    /// Stops the daemon once its last exchange ended, then settles what each test recorded.
    pub(crate) fn stop(self, status: ExitStatus) -> Result<Stopped> {
        let _ = self.stop.send(());
        let stats = self
            .handles
            .runtime
            .block_on(self.served)
            .map_err(|e| Error::io("the daemon failed", std::io::Error::other(e)))?;
        let (recorded, unwritten) = finish_tests(&self.handles.journal, &self.handles.store)?;
        Ok(Stopped {
            run: self.run,
            status,
            stats,
            recorded,
            unwritten,
            handles: self.handles,
        })
    }

    /// Stops the daemon of a run with nothing to report: nothing is settled or concluded, and
    /// the CA's files go.
    pub(crate) fn abandon(self) {
        let _ = self.stop.send(());
        let _ = self.handles.runtime.block_on(self.served);
        // Its run log ends, and its spool (empty: no test ran) goes.
        daemon::settle::finish_run(&self.handles.store, &self.handles.journal, false);
    }
}

/// A run whose child exited and whose daemon stopped, its recordings in their cassettes.
pub(crate) struct Stopped {
    pub(crate) run: Run,
    status: ExitStatus,
    stats: daemon::Stats,
    recorded: Vec<cassettes::TestChanges>,
    /// Tests whose recordings could not be written to their cassettes (kept in the spool).
    unwritten: usize,
    handles: Handles,
}

/// What the command knows of its run that the daemon does not, for the report.
pub(crate) struct Known<'a> {
    pub(crate) scope: &'a RunScope,
    /// The suite's test ids as nextest listed them, if known.
    pub(crate) listed: Option<&'a BTreeSet<cassettes::TestId>>,
    /// nextest ran fail-fast and the run failed.
    pub(crate) stopped_early: bool,
    /// What git says of the cassettes, when read beside the tests.
    pub(crate) changes: Option<ChangesRead>,
}

impl Stopped {
    /// What the daemon saw of the run's tests.
    pub(crate) fn journal(&self) -> &daemon::Journal {
        &self.handles.journal
    }

    /// The run's report, from what the daemon saw and what the command knows.
    pub(crate) fn report(self, known: Known) -> Result<Reported> {
        let report = Report::build(report::Inputs {
            mode: self.run.mode,
            stats: self.stats,
            journal: &self.handles.journal,
            store: &self.handles.store,
            cassette_dir: &self.run.cassette_dir,
            scope: known.scope,
            listed: known.listed,
            tests_passed: self.status.success(),
            stopped_early: known.stopped_early,
            recorded: self.recorded,
            log: Some(&self.run.paths.log),
            changes: known.changes,
        })?;
        Ok(Reported {
            run: self.run,
            status: self.status,
            report,
            unwritten: self.unwritten,
            handles: self.handles,
        })
    }
}

/// A run with its report built: the command may add to it before it is concluded.
pub(crate) struct Reported {
    pub(crate) run: Run,
    pub(crate) status: ExitStatus,
    pub(crate) report: Report,
    unwritten: usize,
    handles: Handles,
}

impl Reported {
    /// Writes the report, prints its summary and the gate's verdict, and says how the run ends.
    pub(crate) fn conclude(&mut self, deny: &[Deny]) -> Result<Outcome> {
        let outcome =
            self.report
                .conclude(&self.run.paths.report, &self.run.root, self.status, deny)?;
        // Answers the secret guard kept out of the cassettes: their tests passed on them, so
        // the run fails here, naming each and what would save it.
        let refused = self.handles.journal.not_saved();
        for failure in &refused {
            crate::render::stderr(&format!(
                "cargo-llmreplay: error: {}: {}\n",
                crate::render::term(failure.test.as_str()),
                crate::render::term_lines(&failure.message)
            ));
        }
        // Recordings that could not reach their cassettes fail the run, whatever else passed.
        if (self.unwritten > 0 || !refused.is_empty()) && outcome == Outcome::Success {
            return Ok(Outcome::GateFailed);
        }
        Ok(outcome)
    }

    /// Ends the run: its run log closed, its spool removed once all of it settled, its CA's
    /// files removed.
    pub(crate) fn end(self) {
        let Reported { run, handles, .. } = self;
        let interrupted = handles.interrupted.load(Ordering::SeqCst);
        daemon::settle::finish_run(&handles.store, &handles.journal, interrupted);
        // The command ends here: the runtime's threads and the cassettes read go with the
        // process, rather than each being joined or freed first.
        handles.runtime.shutdown_background();
        std::mem::forget(handles.store);
        drop(run.ca_dir);
    }
}

/// Once every exchange ended: the recordings of tests whose end was never said reach their
/// cassettes (added, nothing removed), and what every test's end changed is said, test by
/// test, with the files another run has since replaced with its own recordings.
fn finish_tests(
    journal: &daemon::Journal,
    store: &cassettes::Store,
) -> Result<(Vec<cassettes::TestChanges>, usize)> {
    let unwritten = daemon::settle::settle_rest(store, journal);
    for (test, e) in &unwritten {
        crate::render::stderr(&format!(
            "cargo-llmreplay: error: the recordings of {} were not written to its cassettes: {}. They are kept in the run's spool: fix that, then `{}` adds them\n",
            crate::render::term(test.as_str()),
            crate::render::term_lines(&e.to_string()),
            format_args!("{} recover", crate::program()),
        ));
    }
    // A test settles at each attempt's end: one line a test, its counts added up.
    let mut out: Vec<cassettes::TestChanges> = Vec::new();
    for changes in journal.changes() {
        match out.iter_mut().find(|c| c.test == changes.test) {
            Some(c) => {
                c.added += changes.added;
                c.replaced += changes.replaced;
                c.removed += changes.removed;
                c.kept = changes.kept.or(c.kept.take());
            }
            None => out.push(changes),
        }
    }
    for (test, file) in store.superseded()? {
        match out.iter_mut().find(|c| c.test == test) {
            Some(c) => c.superseded = Some(file),
            None => out.push(cassettes::TestChanges {
                test,
                added: 0,
                replaced: 0,
                removed: 0,
                kept: None,
                superseded: Some(file),
            }),
        }
    }
    Ok((out, unwritten.len()))
}

/// The placeholder credentials files replay gives the SDKs that would read real ones
/// (`providers::env::credentials_files`), under the target dir, shared by every run: each is
/// the same bytes for every run, so one rewritten while another run reads it reads the same.
fn write_placeholders(target_dir: &Path) -> Result<PathBuf> {
    let dir = target_dir.join("llmreplay").join("placeholders");
    std::fs::create_dir_all(&dir)
        .map_err(|e| Error::io(format!("cannot make {}", dir.display()), e))?;
    for file in providers::env::credentials_files() {
        let path = dir.join(file.file_name);
        if std::fs::read(&path).is_ok_and(|b| b == file.placeholder.as_bytes()) {
            continue;
        }
        crate::files::replace_atomically(&path, file.placeholder)
            .map_err(|e| Error::io(format!("cannot write {}", path.display()), e))?;
    }
    Ok(dir)
}
