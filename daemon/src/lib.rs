//! The cargo-llmreplay daemon: an HTTP server on 127.0.0.1 that answers LLM API requests from
//! per-test cassettes (replay), or proxies them to the real provider and records the answers.
//! A request crosses it one way, through rooms that each do one thing: `route` (what a request
//! is: its test, provider and upstream path) → `exchange` (one recorded or replayed exchange,
//! for HTTP and WebSocket alike: key, sequence, fault, miss, save, journal) → `proxy` (upstream
//! forwarding) → `respond` (answers and errors in the family's shape); `control` serves the
//! `/__llmreplay/*` routes and `session` a WebSocket's frames beside them. What differs between
//! providers lives in the `providers` crate; what is recorded and how it is keyed, in
//! `cassettes`.
#![warn(missing_docs)]

pub mod ca;
pub mod call;
mod capture;
pub mod config;
mod control;
mod exchange;
pub mod faults;
mod identity;
mod intercept;
pub mod journal;
pub mod peer;
pub mod provider;
mod proxy;
pub mod request_log;
pub mod resend;
mod respond;
mod route;
mod session;
mod sigv4;
pub mod upstream;

pub use config::{ConfigError, Mode, Overrides, Settings, CONFIG_FILE};
pub use journal::{short_json, ErrorAnswer, FieldValues, Journal, Miss, Outcome, Stats};

/// The command that records a test's missing requests: a filter on the test under nextest,
/// else the daemon's record-missing mode for clients naming tests themselves. The filter is
/// escaped for nextest and the whole argument quoted for the shell, so that pasting it runs
/// exactly this command whatever the test is called.
pub fn record_command(test: &str) -> String {
    command_for(test, "--record-missing")
}

/// The command that records a test again from scratch: its cassettes then hold exactly what
/// it calls now, and a recording it no longer matches is replaced.
pub fn rerecord_command(test: &str) -> String {
    command_for(test, "--record")
}

fn command_for(test: &str, mode_flag: &str) -> String {
    match test.split_once('$') {
        Some((_, name)) => {
            let mut escaped = String::with_capacity(name.len());
            for c in name.chars() {
                if matches!(c, '\\' | ')' | ',') {
                    escaped.push('\\');
                }
                escaped.push(c);
            }
            let filter = format!("test(={escaped})");
            format!(
                "cargo llmreplay test {mode_flag} -E {}",
                cassettes::shell_quote(&filter)
            )
        }
        None => "cargo llmreplay serve --mode record-missing".into(),
    }
}

use cassettes::Store;
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use respond::Body;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tracing::Instrument;

/// How long the accept loop waits after an error, doubling up to the most.
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// How long shutdown waits for requests in flight (a recording stream, say) before it stops.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

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
}

pub(crate) struct State {
    pub settings: Settings,
    pub faults: faults::Faults,
    /// The port a `Host` header must name, when the daemon listens on loopback only: a page
    /// that reaches it through DNS rebinding names its own host instead.
    pub loopback_port: Option<u16>,
    pub store: Arc<Store>,
    pub journal: Arc<Journal>,
    /// Made on first use when the mode never goes upstream: loading the system's roots is
    /// most of a replay run's start.
    client: std::sync::OnceLock<Result<upstream::Client, String>>,
    /// WebSocket sessions still open: shutdown waits for them, so that a session that just
    /// closed is saved.
    pub sessions: Sessions,
    /// The run's CA, when capture is on: the daemon is then each test's HTTPS proxy.
    pub ca: Option<Arc<ca::RunCa>>,
    /// The providers of the hosts captured so far, by scheme, host and port.
    pub captured: std::sync::Mutex<std::collections::HashMap<String, Arc<provider::Provider>>>,
    /// How to tell a connection's test from its process, once set (README, "Identifying a
    /// connection's test").
    pub peers: Arc<std::sync::OnceLock<peer::Peers>>,
    /// The newest attempt seen of each test a peer named: a higher one starts its sequence
    /// afresh, as a retry does.
    pub attempts: std::sync::Mutex<std::collections::HashMap<String, u32>>,
    /// This process's uid, when the daemon listens on loopback and the system tells whose a
    /// connection is: another user's connections are refused.
    own_uid: Option<u32>,
}

/// What the daemon knows of one connection.
pub(crate) struct Conn {
    /// Whether a proxy request on it was already challenged for credentials.
    pub challenged: std::sync::atomic::AtomicBool,
    peer: SocketAddr,
    local: SocketAddr,
    /// Its test, from its process, once asked: a connection is one test's.
    identified: tokio::sync::OnceCell<Option<cassettes::TestId>>,
    /// Whether it is this user's (or cannot be told), once asked.
    admitted: std::sync::OnceLock<bool>,
}

impl Conn {
    /// Whether the connection may be served: on loopback, only this user's processes may
    /// use the daemon (its recordings, its keys for re-signing, its proxy). Another user's
    /// connection is refused and logged; one whose owner cannot be told is served.
    fn admitted(&self, state: &State) -> bool {
        let Some(uid) = state.own_uid else {
            return true;
        };
        *self.admitted.get_or_init(|| {
            match peer::Peers::socket_owner(self.peer, self.local) {
                Ok(owner) if owner != uid => {
                    tracing::warn!(target: "cargo_llmreplay::daemon", peer = %self.peer, owner, "refused a connection of another user (uid {owner}); the daemon serves only its own user's processes");
                    false
                }
                _ => true,
            }
        })
    }

    /// The test of the process at the other end, when peers are identified; cached.
    pub async fn peer_test(&self, state: &Arc<State>) -> Option<cassettes::TestId> {
        let peers = state.peers.get()?;
        self.identified
            .get_or_init(|| async {
                let (peer, local) = (self.peer, self.local);
                let started = std::time::Instant::now();
                // Tens of microseconds for a process seen before or a new test: on this
                // worker. The walk of the whole tree, rarer and slower, blocks a thread.
                let found = match peers.quick(peer, local) {
                    Ok(peer::Quick::Found(test)) => Ok(test),
                    Ok(peer::Quick::Walk(pending)) => {
                        match tokio::runtime::Handle::current().runtime_flavor() {
                            tokio::runtime::RuntimeFlavor::MultiThread => {
                                tokio::task::block_in_place(|| peers.walk(pending))
                            }
                            _ => peers.walk(pending),
                        }
                    }
                    Err(e) => Err(e),
                };
                tracing::trace!(target: "cargo_llmreplay::daemon", us = started.elapsed().as_micros() as u64, "identified a connection's process");
                match found {
                    Ok(p) => {
                        state.note_attempt(&p.test, p.attempt);
                        Some(cassettes::TestId::new(p.test))
                    }
                    Err(why) => {
                        tracing::warn!(target: "cargo_llmreplay::daemon", "cannot tell this connection's test from its process ({why}); its requests are filed under `default` unless they name their test");
                        None
                    }
                }
            })
            .await
            .clone()
    }
}

impl State {
    /// The client that reaches providers, made now if it was not at start.
    pub fn client(&self) -> Result<&upstream::Client, &str> {
        self.client
            .get_or_init(|| {
                upstream::client(self.settings.limits.connect_timeout, &self.settings.network)
                    .map_err(|e| format!("could not set up the upstream client: {e}"))
            })
            .as_ref()
            .map_err(String::as_str)
    }

    /// Notes that a peer's process runs `attempt` of `test`: the first attempt begins it, a
    /// later one starts its sequence afresh.
    fn note_attempt(&self, test: &str, attempt: u32) {
        let mut attempts = self.attempts.lock().expect("attempts lock");
        let last = attempts.entry(test.to_string()).or_insert(0);
        if attempt > *last {
            if *last > 0 {
                self.store.reset_test(&cassettes::TestId::new(test));
            }
            *last = attempt;
            self.journal.begin(test);
        }
    }
}

/// Counts the WebSocket sessions in flight; each holds a [`SessionGuard`].
#[derive(Default)]
pub(crate) struct Sessions {
    open: std::sync::atomic::AtomicUsize,
    idle: tokio::sync::Notify,
}

pub(crate) struct SessionGuard<'a>(&'a Sessions);

impl Sessions {
    pub fn enter(&self) -> SessionGuard<'_> {
        self.open.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        SessionGuard(self)
    }

    async fn idle(&self) {
        loop {
            let notified = self.idle.notified();
            if self.open.load(std::sync::atomic::Ordering::SeqCst) == 0 {
                return;
            }
            notified.await;
        }
    }
}

impl Drop for SessionGuard<'_> {
    fn drop(&mut self) {
        if self
            .0
            .open
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst)
            == 1
        {
            self.0.idle.notify_waiters();
        }
    }
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
        let state = Arc::new(State {
            store: Arc::new(
                Store::new(settings.cassette_dir.clone())
                    .with_lock_timeout(settings.limits.lock_timeout)
                    .with_guard(cassettes::secrets::Guard::new(
                        settings.normalizer.body_fields().clone(),
                        settings.secret_values.clone(),
                    )),
            ),
            loopback_port: local.ip().is_loopback().then_some(local.port()),
            faults: faults::Faults::with_declared(declared),
            settings,
            journal: Arc::default(),
            client,
            sessions: Sessions::default(),
            ca,
            captured: Default::default(),
            peers: Arc::default(),
            attempts: Default::default(),
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

    /// The cassettes as this run loaded and used them, for the report.
    pub fn store(&self) -> Arc<Store> {
        self.state.store.clone()
    }

    /// Serves until `shutdown` completes, then lets requests in flight finish (recordings are
    /// written before their response ends, so nothing is lost) and returns the counts.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Stats {
        // Connections are served with upgrades (WebSocket sessions), which hyper-util's
        // GracefulShutdown does not watch: a watch channel asks each to finish, and every
        // connection task holds a sender of `done`, so its receiver ends once all are gone.
        let (stop, stopping) = tokio::sync::watch::channel(false);
        let (done, mut all_done) = tokio::sync::mpsc::channel::<()>(1);
        tokio::pin!(shutdown);
        let header_read_timeout = self.state.settings.limits.header_read_timeout;
        let listening = self.listener.local_addr().ok();
        let mut backoff = ACCEPT_BACKOFF_MIN;
        loop {
            tokio::select! {
                accepted = self.listener.accept() => {
                    let (socket, peer) = match accepted {
                        Ok(accepted) => {
                            backoff = ACCEPT_BACKOFF_MIN;
                            accepted
                        }
                        // Out of file descriptors, say: the same error comes back at once, so
                        // wait before the next accept instead of spinning, and keep serving
                        // the connections already open.
                        Err(e) => {
                            tracing::warn!(target: "cargo_llmreplay::daemon", "cannot accept a connection ({e}); retrying in {backoff:?}");
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
                    // The local address only when a connection's process may be asked for
                    // its test, and asked of the socket only when the listener's is not
                    // the one every connection arrives at (a wildcard address).
                    let unknown: SocketAddr = ([0, 0, 0, 0], 0).into();
                    let asks = self.state.peers.get().is_some() || self.state.own_uid.is_some();
                    let local = match (asks, listening) {
                        (false, _) => unknown,
                        (true, Some(at)) if !at.ip().is_unspecified() => at,
                        (true, _) => socket.local_addr().unwrap_or(unknown),
                    };
                    let conn = Arc::new(Conn {
                        challenged: std::sync::atomic::AtomicBool::new(false),
                        peer,
                        local,
                        identified: tokio::sync::OnceCell::new(),
                        admitted: std::sync::OnceLock::new(),
                    });
                    let service = service_fn(move |req| {
                        let (state, conn) = (state.clone(), conn.clone());
                        async move { Ok::<_, Infallible>(handle(state, req, &conn).await) }
                    });
                    // The header read timeout also ends idle kept-alive connections: its clock
                    // starts whenever the connection waits for a request head.
                    let conn = http1::Builder::new()
                        .timer(TokioTimer::new())
                        .header_read_timeout(header_read_timeout)
                        .serve_connection(TokioIo::new(socket), service)
                        .with_upgrades();
                    let (mut stopping, done) = (stopping.clone(), done.clone());
                    tokio::spawn(async move {
                        let _done = done;
                        let mut conn = std::pin::pin!(conn);
                        let mut asked = false;
                        loop {
                            tokio::select! {
                                _ = conn.as_mut() => break,
                                _ = stopping.wait_for(|s| *s), if !asked => {
                                    asked = true;
                                    conn.as_mut().graceful_shutdown();
                                }
                            }
                        }
                    });
                }
                _ = &mut shutdown => break,
            }
        }
        drop(self.listener);
        let _ = stop.send(true);
        drop(done);
        let _ = tokio::time::timeout(DRAIN_TIMEOUT, async {
            all_done.recv().await;
            self.state.sessions.idle().await;
        })
        .await;
        self.state.journal.stats()
    }
}

/// The front door: a request to this daemon is a proxy's (`CONNECT`, or an absolute URL),
/// refused (a foreign `Host`), a control route, a WebSocket session, or one HTTP exchange.
async fn handle(state: Arc<State>, req: Request<Incoming>, conn: &Conn) -> Response<Body> {
    if !conn.admitted(&state) {
        return respond::text(
            StatusCode::FORBIDDEN,
            "cargo-llmreplay: this daemon serves only the user who started it; this connection is another user's".into(),
        );
    }
    // A proxy request names the host it is for, not this daemon: before the Host check.
    // Browsers send neither form to a server, so a page cannot use them to reach the daemon.
    if req.method() == http::Method::CONNECT {
        return intercept::connect(state, req, conn).await;
    }
    if req.uri().scheme().is_some() {
        return intercept::absolute(state, req, conn).await;
    }
    if let Some(port) = state.loopback_port {
        if !route::loopback_host(req.headers().get(http::header::HOST), port) {
            return respond::text(
                StatusCode::FORBIDDEN,
                format!("cargo-llmreplay: the Host header must name this daemon (127.0.0.1:{port}, localhost:{port} or [::1]:{port}); a web page reaching it through another name is refused. To serve other hosts, bind one with --addr"),
            );
        }
    }
    if let Some(prefix) = req.uri().path().strip_suffix("/__llmreplay/faults") {
        let prefix = prefix.to_string();
        return control::faults(&state, conn, &prefix, req).await;
    }
    if let Some(rest) = req.uri().path().strip_prefix("/__llmreplay/") {
        let rest = rest.to_string();
        return control::control(&state, &rest, req).await;
    }
    let test_header = match identity::header(req.headers()) {
        Ok(header) => header,
        Err(why) => return respond::text(StatusCode::BAD_REQUEST, why),
    };
    // Named by neither the path nor a header: the test of the process that sent it.
    let from_peer = match (req.uri().path().starts_with("/t/"), test_header) {
        (false, None) => conn.peer_test(&state).await,
        _ => None,
    };
    let route = match route::resolve(
        req.uri().path(),
        test_header,
        from_peer,
        &state.settings.providers,
    ) {
        Ok(route) => route,
        Err(e) => return respond::text(e.status(), e.message()),
    };
    dispatch(state, route, req).await
}

/// A routed request, from a base URL or captured as a proxy: one WebSocket session or one
/// HTTP exchange, in a span of its own.
pub(crate) async fn dispatch(
    state: Arc<State>,
    route: route::Route,
    req: Request<Incoming>,
) -> Response<Body> {
    let session = session::is_upgrade(&req);
    let method = (!session).then(|| req.method());
    let span = request_span(
        &route.test,
        &route.provider.name,
        method,
        &route.upstream_path,
    );
    // Request heads have a target of their own, which the log file of `test` leaves out.
    if tracing::enabled!(target: "cargo_llmreplay::head", tracing::Level::DEBUG) {
        span.in_scope(|| log_head(&req, &state.settings.redact_headers));
    }
    if session {
        return session::handle(state, route, req).instrument(span).await;
    }
    exchange::http(state, route, req).instrument(span).await
}

/// One span per request, or per session (no method): every line of the log about it names
/// them. Disabled, and nearly free, unless a tracing layer wants requests (`-v`, `RUST_LOG`);
/// the log file of `test` gets its lines from `request_log`.
fn request_span(
    test: &cassettes::TestId,
    provider: &cassettes::ProviderName,
    method: Option<&http::Method>,
    path: &str,
) -> tracing::Span {
    match method {
        None => {
            tracing::info_span!(target: "cargo_llmreplay::request", "session", test = ?test.as_str(), provider = %provider, path = %path)
        }
        Some(method) => {
            tracing::info_span!(target: "cargo_llmreplay::request", "request", test = ?test.as_str(), provider = %provider, method = %method, path = %path)
        }
    }
}

/// The request's query and headers, for `-vv`: secrets masked, as everywhere else, and the
/// headers `[redact] headers` names too.
fn log_head(req: &Request<Incoming>, redact: &[String]) {
    let query = req.uri().query().map(providers::redact::query);
    let headers: Vec<String> = req
        .headers()
        .iter()
        .map(|(name, value)| {
            let value = String::from_utf8_lossy(value.as_bytes());
            let shown = match redact.iter().any(|r| r == name.as_str()) {
                true => providers::redact::MASK,
                false => providers::redact::header(name.as_str(), &value),
            };
            format!("{name}: {}", providers::redact::text(shown))
        })
        .collect();
    tracing::debug!(target: "cargo_llmreplay::head", query = query.as_deref(), headers = ?headers, "head");
}

#[cfg(test)]
mod tests {
    use super::record_command;

    /// Pasted into a shell, the command runs itself and nothing else, whatever the test is
    /// called; nextest gets the name as one exact matcher.
    #[test]
    fn record_commands_paste_safely() {
        let dir = tempfile::tempdir().unwrap();
        for name in [
            "answers_hello",
            "quote'; touch pwned; echo '",
            "dollar $(touch pwned) `touch pwned`",
            "back\\slash, comma) paren",
            "new\nline",
        ] {
            let command = record_command(&format!("k::t${name}"));
            let args = command
                .strip_prefix("cargo llmreplay test --record-missing -E ")
                .unwrap_or_else(|| panic!("{command}"));
            let out = std::process::Command::new("bash")
                .arg("-c")
                .arg(format!("printf '%s' {args}"))
                .current_dir(dir.path())
                .output()
                .unwrap();
            assert!(out.status.success(), "{command}");
            assert!(
                !dir.path().join("pwned").exists(),
                "{command} ran something"
            );
            let filter = String::from_utf8(out.stdout).unwrap();
            let inner = filter
                .strip_prefix("test(=")
                .and_then(|f| f.strip_suffix(')'))
                .unwrap();
            let mut unescaped = String::new();
            let mut chars = inner.chars();
            while let Some(c) = chars.next() {
                unescaped.push(if c == '\\' { chars.next().unwrap() } else { c });
            }
            assert_eq!(unescaped, name, "{command}");
        }
        assert_eq!(
            record_command("k::t$answers_hello"),
            "cargo llmreplay test --record-missing -E 'test(=answers_hello)'"
        );
    }
}
