//! The cargo-llmreplay daemon: an HTTP server on 127.0.0.1 that answers LLM API requests from
//! per-test cassettes (replay), or proxies them to the real provider and records the answers.
//! Routing lives in `route`; what differs between providers in the `providers` crate; what is recorded and how
//! it is keyed lives in the `cassettes` crate; this crate is the HTTP in and out.

pub mod config;
mod handler;
pub mod journal;
pub mod provider;
pub mod resend;
mod route;
mod upstream;

pub use config::{ConfigError, Mode, Overrides, Settings, CONFIG_FILE};
pub use journal::{Journal, Miss, Outcome, Stats};

use cassettes::Store;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// How long shutdown waits for requests in flight (a recording stream, say) before it stops.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("could not listen on {addr}: {source}. Pick another address with --addr, or 127.0.0.1:0 for any free port")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("could not set up TLS for upstream requests: {0}")]
    Tls(String),
}

pub(crate) struct State {
    pub settings: Settings,
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
        let client = upstream::client().map_err(|e| DaemonError::Tls(e.to_string()))?;
        let state = Arc::new(State {
            store: Arc::new(Store::new(settings.cassette_dir.clone())),
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
        loop {
            tokio::select! {
                accepted = self.listener.accept() => {
                    let Ok((socket, _)) = accepted else { continue };
                    // Streams are many small writes: without this they wait on delayed ACKs.
                    let _ = socket.set_nodelay(true);
                    let state = self.state.clone();
                    let service = service_fn(move |req| {
                        let state = state.clone();
                        async move { Ok::<_, Infallible>(handler::handle(state, req).await) }
                    });
                    let conn = http1::Builder::new().serve_connection(TokioIo::new(socket), service);
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
