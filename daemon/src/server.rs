//! Connections in and out of service: the accept loop, one HTTP/1 serving function for the
//! listener's connections and the proxy's TLS tunnels alike (the same timeouts, the same
//! drain), and the drain at shutdown.

use crate::respond::Body;
use crate::state::{Conn, State};
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
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

/// Accepts connections, each request answered by `handle`, until `shutdown` completes, then asks every connection to finish and
/// waits for them and for open WebSocket sessions, up to [`DRAIN_TIMEOUT`].
pub(crate) async fn serve<H, F>(
    listener: TcpListener,
    state: Arc<State>,
    handle: H,
    shutdown: impl Future<Output = ()>,
) where
    H: Fn(Arc<State>, Request<Incoming>, Arc<Conn>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    tokio::pin!(shutdown);
    let listening = listener.local_addr().ok();
    let mut backoff = ACCEPT_BACKOFF_MIN;
    loop {
        tokio::select! {
            accepted = listener.accept() => {
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
                let local = asked_address(&state, listening, &socket);
                let conn = Arc::new(Conn::new(peer, local));
                let (served, handle) = (state.clone(), handle.clone());
                let service = move |req: Request<Incoming>| {
                    let answer = handle(served.clone(), req, conn.clone());
                    async move { Ok::<_, Infallible>(answer.await) }
                };
                tokio::spawn(serve_connection(state.clone(), TokioIo::new(socket), service));
            }
            _ = &mut shutdown => break,
        }
    }
    drop(listener);
    state.stop.send_replace(true);
    let _ = tokio::time::timeout(DRAIN_TIMEOUT, async {
        state.connections.idle().await;
        state.sessions.idle().await;
    })
    .await;
}

/// The local address only when a connection's process may be asked for its test (or its
/// owner), and asked of the socket only when the listener's is not the one every connection
/// arrives at (a wildcard address).
fn asked_address(
    state: &State,
    listening: Option<SocketAddr>,
    socket: &tokio::net::TcpStream,
) -> SocketAddr {
    let unknown: SocketAddr = ([0, 0, 0, 0], 0).into();
    let asks = state.peers.get().is_some() || state.own_uid.is_some();
    match (asks, listening) {
        (false, _) => unknown,
        (true, Some(at)) if !at.ip().is_unspecified() => at,
        (true, _) => socket.local_addr().unwrap_or(unknown),
    }
}

/// Serves one connection's requests with `service` until it closes, or until shutdown asks
/// it to finish the request in flight. The header read timeout also ends idle kept-alive
/// connections: its clock starts whenever the connection waits for a request head.
pub(crate) async fn serve_connection<I, S, F>(state: Arc<State>, io: I, service: S)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    S: Fn(Request<Incoming>) -> F + Send + 'static,
    F: Future<Output = Result<Response<Body>, Infallible>> + Send + 'static,
{
    let _open = state.connections.enter();
    // Served with upgrades (WebSocket sessions), which hyper-util's GracefulShutdown does
    // not watch: the stop signal asks each connection to finish instead.
    let mut stopping = state.stop.subscribe();
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(state.settings.limits.header_read_timeout)
        .serve_connection(io, service_fn(service))
        .with_upgrades();
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
}
