//! The cargo-llmreplay daemon: an HTTP server on 127.0.0.1 that answers LLM API requests from
//! per-test cassettes (replay), or proxies them to the real provider and records the answers.
//! A request crosses it one way, through rooms that each do one thing: `server` (connections
//! and their drain) → `front` (the front door: proxy forms to `capture`, control routes to
//! `control`, the rest routed by `route` with its test from `identity`) → `plan` (what one
//! exchange will do, decided once) → `exchange` or `session` (HTTP or a WebSocket's frames,
//! carrying the plan out) → `proxy` (upstream forwarding, with `tee` reading answers into
//! their recorded form) → `respond` (answers and errors in the family's shape). `explain`
//! says why a request missed, `hints` every command printed for people to paste. What differs
//! between providers lives in the `providers` crate; what is recorded and how it is keyed, in
//! `cassettes`.
#![warn(missing_docs)]

pub mod book;
pub mod ca;
pub mod call;
mod capture;
pub mod config;
mod control;
mod credentials;
mod exchange;
mod explain;
pub mod faults;
mod front;
mod hints;
mod identity;
pub mod journal;
mod mcp;
pub mod outcome;
pub mod pace;
pub mod peer;
mod plan;
pub mod provider;
mod proxy;
pub mod request_log;
pub mod resend;
mod respond;
mod route;
mod routed;
pub mod run_log;
mod server;
mod session;
pub mod settle;
mod sigv4;
mod state;
mod tee;
pub mod upstream;

pub use config::{ConfigError, Mode, Overrides, Settings, CONFIG_FILE};
pub use hints::{
    record_all_command, record_command, rekey_command, rerecord_command, tests_filter, Program,
};
pub use journal::{short_json, ErrorAnswer, FieldValues, Journal, Listings, Miss, Outcome, Stats};
pub use sigv4::SigningError;

use cassettes::Store;
use state::{InFlight, State};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;

#[derive(Debug, thiserror::Error)]
/// Why the daemon could not start.
pub enum DaemonError {
    #[error("could not listen on {addr}: {source}. Pick another address with --addr, or 127.0.0.1:0 for any free port")]
    /// The address could not be bound.
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The system's error.
        source: std::io::Error,
    },
    /// The client that reaches providers could not be made.
    #[error("could not set up the upstream client: {0}")]
    Upstream(#[from] upstream::ClientError),
    /// The run's CA could not be made.
    #[error("{0}")]
    Ca(#[from] ca::CaError),
    /// The run's spool could not be made.
    #[error("could not make the run's spool: {0}. Check that target/llmreplay is writable")]
    Spool(#[from] cassettes::Error),
}

/// A bound daemon, not yet serving.
pub struct Daemon {
    listener: TcpListener,
    state: Arc<State>,
}

impl Daemon {
    /// Binds `addr` and makes the upstream client; serves nothing until [`Daemon::run`].
    pub async fn bind(settings: Settings, addr: SocketAddr) -> Result<Daemon, DaemonError> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| DaemonError::Bind { addr, source })?;
        Daemon::with_listener(settings, listener, addr, None)
    }

    /// [`Daemon::bind`] on a listener bound beforehand, whose address could be handed out
    /// before the daemon was made: connections wait in its backlog until [`Daemon::run`].
    /// `ca` is the run's CA when it was made beforehand; with `None`, one is made here when
    /// `[capture]` is on. Called within a tokio runtime.
    pub fn on_listener(
        settings: Settings,
        listener: std::net::TcpListener,
        ca: Option<Arc<ca::RunCa>>,
    ) -> Result<Daemon, DaemonError> {
        let addr = listener
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], 0)));
        let listener = listener
            .set_nonblocking(true)
            .and_then(|()| TcpListener::from_std(listener))
            .map_err(|source| DaemonError::Bind { addr, source })?;
        Daemon::with_listener(settings, listener, addr, ca)
    }

    fn with_listener(
        settings: Settings,
        listener: TcpListener,
        addr: SocketAddr,
        ca: Option<Arc<ca::RunCa>>,
    ) -> Result<Daemon, DaemonError> {
        let client = std::sync::OnceLock::new();
        if settings.mode.goes_upstream() {
            let made = upstream::client(settings.limits.connect_timeout, &settings.network)
                .map_err(DaemonError::Upstream)?;
            let _ = client.set(Ok(made));
        }
        let local = listener
            .local_addr()
            .map_err(|source| DaemonError::Bind { addr, source })?;
        let mut settings = settings;
        let declared = std::mem::take(&mut settings.declared_faults);
        let ca = match (settings.capture.enabled, ca) {
            (true, Some(ca)) => Some(ca),
            (true, None) => Some(Arc::new(ca::RunCa::new()?)),
            (false, _) => None,
        };
        let mut store = Store::new(settings.cassette_dir.clone())
            .with_lock_timeout(settings.limits.lock_timeout)
            .with_budget(settings.limits.cassette_cache_bytes)
            .with_guard(settings.normalizer.guard().clone());
        let mut run_log = None;
        if let Some(dir) = &settings.run_dir {
            run_log = settle::begin_run(dir, settings.mode, &settings.cassette_dir);
            if settings.mode.writes() {
                store = store.with_spool(cassettes::spool::Spool::create(
                    dir,
                    &settings.cassette_dir,
                )?);
            }
        }
        let state = Arc::new(State {
            store: Arc::new(store),
            interrupted: Arc::default(),
            loopback_port: local.ip().is_loopback().then_some(local.port()),
            faults: faults::Faults::with_declared(declared),
            settings,
            journal: Arc::new(Journal::default().with_run_log(run_log)),
            client,
            sessions: InFlight::default(),
            connections: InFlight::default(),
            stop: tokio::sync::watch::channel(false).0,
            ca,
            captured: Default::default(),
            peers: Arc::default(),
            attempts: Default::default(),
            announced: Default::default(),
            transports: Default::default(),
            trees: Arc::default(),
            own_uid: local
                .ip()
                .is_loopback()
                .then(peer::Peers::own_uid)
                .flatten(),
        });
        Ok(Daemon { listener, state })
    }

    /// Where to set how a connection's test is told from its process: once the test run's
    /// root process is known (`cargo llmreplay test`), or at start (`serve --test-id-env`).
    pub fn peers(&self) -> Arc<std::sync::OnceLock<peer::Peers>> {
        self.state.peers.clone()
    }

    /// Where to set the root process of a command (`cargo llmreplay run`) whose process trees
    /// name their calls when nothing else does: each child of the root (a `go test` package's
    /// binary, a tool a script runs) by its program's name.
    pub fn trees(&self) -> Arc<std::sync::OnceLock<u32>> {
        self.state.trees.clone()
    }

    /// The secret a test's proxy credentials must carry (README, "Capture").
    pub fn proxy_secret(&self) -> &str {
        &self.state.settings.proxy_secret
    }

    /// The run's CA certificate (PEM), when the daemon is the tests' proxy.
    pub fn ca_pem(&self) -> Option<String> {
        self.state.ca.as_ref().map(|ca| ca.pem().to_string())
    }

    /// The address it listens on (the port chosen, for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    /// What it answered, for the report.
    pub fn journal(&self) -> Arc<Journal> {
        self.state.journal.clone()
    }

    /// Set when the run is interrupted (SIGINT, SIGTERM): from then on, no test's end removes
    /// a recording.
    pub fn interrupted(&self) -> Arc<std::sync::atomic::AtomicBool> {
        self.state.interrupted.clone()
    }

    /// The cassettes as this run loaded and used them, for the report.
    pub fn store(&self) -> Arc<Store> {
        self.state.store.clone()
    }

    /// Serves until `shutdown` completes, then lets requests in flight finish (recordings are
    /// written before their response ends, so nothing is lost) and returns the counts.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Stats {
        let handle = |state, req, conn: Arc<state::Conn>| async move {
            front::handle(state, req, &conn).await
        };
        server::serve(self.listener, self.state.clone(), handle, shutdown).await;
        mcp::http_transport::save_parked(&self.state).await;
        // The run ends after its last exchange: a stream whose client stopped reading, a
        // recording being saved, is journalled before anything reports on the run.
        let store = self.state.store.clone();
        let wait = self.state.settings.limits.idle_timeout;
        let _ = tokio::task::spawn_blocking(move || store.wait_for_all(wait)).await;
        self.state.journal.stats()
    }
}
