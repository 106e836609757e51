//! The cargo-llmreplay daemon: an HTTP server on 127.0.0.1 that answers LLM API requests from
//! per-test cassettes (replay), or proxies them to the real provider and records the answers.
//! Routing lives in `route`; what differs between providers in the `providers` crate; what is recorded and how
//! it is keyed lives in the `cassettes` crate; this crate is the HTTP in and out.

mod capture;
pub mod config;
pub mod faults;
mod handler;
pub mod journal;
pub mod provider;
pub mod resend;
mod route;
pub mod upstream;

pub use config::{ConfigError, Mode, Overrides, Settings, CONFIG_FILE};
pub use journal::{Journal, Miss, Outcome, Stats};

/// The command that records a test's missing requests: a filter on the test under nextest,
/// else the daemon's record-missing mode for clients naming tests themselves.
pub fn record_command(test: &str) -> String {
    match test.split_once('$') {
        Some((_, name)) => format!("cargo llmreplay test --record-missing -E 'test(={name})'"),
        None => "cargo llmreplay serve --mode record-missing".into(),
    }
}

use cassettes::Store;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// How long the accept loop waits after an error, doubling up to the most.
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// How long shutdown waits for requests in flight (a recording stream, say) before it stops.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("could not listen on {addr}: {source}. Pick another address with --addr, or 127.0.0.1:0 for any free port")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("could not set up the upstream client: {0}")]
    Tls(String),
}

pub(crate) struct State {
    pub settings: Settings,
    pub faults: faults::Faults,
    /// The port a `Host` header must name, when the daemon listens on loopback only: a page
    /// that reaches it through DNS rebinding names its own host instead.
    pub loopback_port: Option<u16>,
    pub store: Arc<Store>,
    pub journal: Arc<Journal>,
    pub client: upstream::Client,
}

/// A bound daemon, not yet serving.
pub struct Daemon {
    listener: TcpListener,
    state: Arc<State>,
}

impl Daemon {
    pub async fn bind(settings: Settings, addr: SocketAddr) -> Result<Daemon, DaemonError> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| DaemonError::Bind { addr, source })?;
        let client = upstream::client(settings.limits.connect_timeout, &settings.network)
            .map_err(DaemonError::Tls)?;
        let local = listener
            .local_addr()
            .map_err(|source| DaemonError::Bind { addr, source })?;
        let mut settings = settings;
        let declared = std::mem::take(&mut settings.declared_faults);
        let state = Arc::new(State {
            store: Arc::new(
                Store::new(settings.cassette_dir.clone())
                    .with_lock_timeout(settings.limits.lock_timeout),
            ),
            loopback_port: local.ip().is_loopback().then_some(local.port()),
            faults: faults::Faults::with_declared(declared),
            settings,
            journal: Arc::default(),
            client,
        });
        Ok(Daemon { listener, state })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    pub fn journal(&self) -> Arc<Journal> {
        self.state.journal.clone()
    }

    /// The cassettes as this run loaded and used them, for the report.
    pub fn store(&self) -> Arc<Store> {
        self.state.store.clone()
    }

    /// Serves until `shutdown` completes, then lets requests in flight finish (recordings are
    /// written before their response ends, so nothing is lost) and returns the counts.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Stats {
        let graceful = GracefulShutdown::new();
        tokio::pin!(shutdown);
        let header_read_timeout = self.state.settings.limits.header_read_timeout;
        let mut backoff = ACCEPT_BACKOFF_MIN;
        loop {
            tokio::select! {
                accepted = self.listener.accept() => {
                    let socket = match accepted {
                        Ok((socket, _)) => {
                            backoff = ACCEPT_BACKOFF_MIN;
                            socket
                        }
                        // Out of file descriptors, say: the same error comes back at once, so
                        // wait before the next accept instead of spinning, and keep serving
                        // the connections already open.
                        Err(e) => {
                            tracing::warn!("cargo-llmreplay: cannot accept a connection ({e}); retrying in {backoff:?}");
                            tokio::select! {
                                _ = tokio::time::sleep(backoff) => {}
                                _ = &mut shutdown => break,
                            }
                            backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
                            continue;
                        }
                    };
                    // Streams are many small writes: without this they wait on delayed ACKs.
                    let _ = socket.set_nodelay(true);
                    let state = self.state.clone();
                    let service = service_fn(move |req| {
                        let state = state.clone();
                        async move { Ok::<_, Infallible>(handler::handle(state, req).await) }
                    });
                    // The header read timeout also ends idle kept-alive connections: its clock
                    // starts whenever the connection waits for a request head.
                    let conn = http1::Builder::new()
                        .timer(TokioTimer::new())
                        .header_read_timeout(header_read_timeout)
                        .serve_connection(TokioIo::new(socket), service);
                    let conn = graceful.watch(conn);
                    tokio::spawn(async move {
                        let _ = conn.await;
                    });
                }
                _ = &mut shutdown => break,
            }
        }
        drop(self.listener);
        let _ = tokio::time::timeout(DRAIN_TIMEOUT, graceful.shutdown()).await;
        self.state.journal.stats()
    }
}
