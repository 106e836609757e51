//! WebSocket sessions (OpenAI Realtime, Azure realtime, Gemini Live). An upgrade on a provider
//! route is keyed by its path and query. Recording relays every frame both ways as it comes
//! and saves the session when it closes cleanly; replay sends the server frames recorded
//! before the first client frame, then answers each client frame that matches the next
//! recorded one (ids set aside, `[match]` rules applied) with the server frames that followed
//! it. A frame that does not match gets an `error` event in the provider's shape and a close
//! with 1008, and the session is reported as missing, naming the field that differs.

use crate::call::Call;
use crate::journal::{Detail, Outcome};
use crate::plan::{plan, Form, Plan, Save};
use crate::provider::Kind;
use crate::respond::Body;
use crate::route::Route;
use crate::state::State;
use bytes::Bytes;
use cassettes::session::{comparable, Side, WsFrame};
use cassettes::{Interaction, Key, RecordedResponse, Timing};
use futures_util::{SinkExt, StreamExt};
use http::header::{
    CONNECTION, SEC_WEBSOCKET_ACCEPT, SEC_WEBSOCKET_KEY, SEC_WEBSOCKET_PROTOCOL, UPGRADE,
};
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

/// Headers of the client's upgrade that belong to its own handshake, not to the upstream's.
const HANDSHAKE: &[&str] = &[
    "host",
    "connection",
    "upgrade",
    "sec-websocket-key",
    "sec-websocket-version",
    "sec-websocket-extensions",
    "content-length",
    "x-test-id",
];

/// Ends the close handshake: sends the close answer tungstenite queued (or a close of our
/// own), then reads until the client hangs up, for a short while at most.
async fn finish(ws: &mut Socket) {
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        let _ = ws.close(None).await;
        let _ = ws.flush().await;
        while let Some(Ok(_)) = ws.next().await {}
    })
    .await;
}

/// Whether `req` asks to become a WebSocket.
pub fn is_upgrade<B>(req: &Request<B>) -> bool {
    let has = |name, token: &str| {
        req.headers().get_all(name).iter().any(|v| {
            v.to_str()
                .is_ok_and(|s| s.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
        })
    };
    has(UPGRADE, "websocket") && has(CONNECTION, "upgrade")
}

/// What RFC 6455 asks of an opening handshake: a GET, version 13, and a key that is 16 bytes
/// in base64. Anything else is refused before a session begins.
fn check_handshake<B>(req: &Request<B>) -> Result<(), (StatusCode, String)> {
    if req.method() != http::Method::GET {
        return Err((
            StatusCode::BAD_REQUEST,
            format!(
                "cargo-llmreplay: a WebSocket upgrade is a GET, not a {}",
                req.method()
            ),
        ));
    }
    let version = req.headers().get(http::header::SEC_WEBSOCKET_VERSION);
    if version.is_none_or(|v| v.as_bytes() != b"13") {
        return Err((
            StatusCode::UPGRADE_REQUIRED,
            "cargo-llmreplay: a WebSocket upgrade needs Sec-WebSocket-Version: 13".into(),
        ));
    }
    let key = req.headers().get(SEC_WEBSOCKET_KEY).map(|k| {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD
            .decode(k.as_bytes())
            .is_ok_and(|b| b.len() == 16)
    });
    if key != Some(true) {
        return Err((
            StatusCode::BAD_REQUEST,
            "cargo-llmreplay: a WebSocket upgrade needs Sec-WebSocket-Key, 16 bytes in base64"
                .into(),
        ));
    }
    Ok(())
}

/// Answers an upgrade request: a replayed session, a recorded one, or a refusal.
pub async fn handle(state: Arc<State>, route: Route, req: Request<Incoming>) -> Response<Body> {
    let kind = route.provider.kind;
    if let Err((status, why)) = check_handshake(&req) {
        let mut refused = crate::respond::provider_error(kind, status, "llmreplay_error", &why);
        if status == StatusCode::UPGRADE_REQUIRED {
            refused.headers_mut().insert(
                http::header::SEC_WEBSOCKET_VERSION,
                http::HeaderValue::from_static("13"),
            );
        }
        return refused;
    }
    let client_key = req
        .headers()
        .get(SEC_WEBSOCKET_KEY)
        .cloned()
        .expect("the handshake was checked: it has a key");
    crate::credentials::learn(&state, req.headers(), req.uri().query());
    let request = state.settings.normalizer.for_test(&route.test).session(
        &route.upstream_path,
        req.uri().query(),
        providers::secret_params(),
    );
    let key = Key::of(&request);
    let protocol = req
        .headers()
        .get(SEC_WEBSOCKET_PROTOCOL)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(',').next())
        .map(|p| p.trim().to_string());
    let planned = match plan(&state, &route, http::Method::GET, key, Form::Session, None) {
        Ok(planned) => planned,
        Err(refused) => return *refused,
    };
    let call = planned.call;
    match planned.plan {
        Plan::Replay(prepared) => {
            let frames = prepared.frames.clone().expect("planned only with frames");
            let response = switching(&client_key, protocol.as_deref());
            tokio::spawn(tracing::Instrument::in_current_span(async move {
                let _open = state.sessions.enter();
                replay(state.clone(), route, call, req, frames).await;
            }));
            response
        }
        Plan::Miss => {
            let response = switching(&client_key, protocol.as_deref());
            let shown = route.shown(state.settings.normalizer.guard().scrubber());
            let message =
                crate::explain::session_miss(&shown, req.uri().query(), &state.settings.program);
            tokio::spawn(tracing::Instrument::in_current_span(async move {
                let _open = state.sessions.enter();
                // Journalled before the refusal: the client may read it at once.
                let detail = Detail {
                    host: route.captured.clone(),
                    ..Detail::message(message.clone())
                };
                call.end(Outcome::Miss, 101, Some(detail));
                if let Some(mut ws) = accept(req).await {
                    refuse(&mut ws, kind, &message).await;
                }
            }));
            response
        }
        Plan::Forward(save) => record(state, route, call, request, req, client_key, save).await,
        Plan::Fault(_) | Plan::Acknowledge => {
            unreachable!("sessions draw no faults and are not telemetry")
        }
    }
}

/// The 101 that completes the client's handshake.
fn switching(client_key: &http::HeaderValue, protocol: Option<&str>) -> Response<Body> {
    let mut b = Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header(UPGRADE, "websocket")
        .header(CONNECTION, "Upgrade")
        .header(
            SEC_WEBSOCKET_ACCEPT,
            derive_accept_key(client_key.as_bytes()),
        );
    if let Some(p) = protocol {
        b = b.header(SEC_WEBSOCKET_PROTOCOL, p);
    }
    b.body(crate::respond::empty())
        .expect("valid handshake headers")
}

type Socket = WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

/// The client's side of the connection once hyper has answered the upgrade.
async fn accept(req: Request<Incoming>) -> Option<Socket> {
    let upgraded = hyper::upgrade::on(req).await.ok()?;
    Some(WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None).await)
}

/// An `error` event in the provider's shape, then close 1008.
async fn refuse(ws: &mut Socket, kind: Kind, message: &str) {
    let event = kind
        .family()
        .session_error(404, "llmreplay_missing_recording", message);
    let _ = ws.send(Message::text(event.to_string())).await;
    // A close reason is at most 123 bytes; the event carries the whole message.
    let reason: String = "cargo-llmreplay: no recording for this frame; see the error event"
        .chars()
        .take(120)
        .collect();
    let _ = ws
        .send(Message::Close(Some(CloseFrame {
            code: CloseCode::Policy,
            reason: reason.into(),
        })))
        .await;
    // Read on until the client answers the close: a socket closed with unread frames in it
    // is reset, and the client may lose the error event it has not read yet.
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(Ok(m)) = ws.next().await {
            if matches!(m, Message::Close(_)) {
                break;
            }
        }
    })
    .await;
}

fn message_of(frame: &WsFrame) -> Option<Message> {
    let payload = frame.payload()?;
    Some(if frame.binary {
        Message::binary(payload)
    } else {
        Message::text(String::from_utf8_lossy(&payload).into_owned())
    })
}

/// Plays a recorded session back to the client.
async fn replay(
    state: Arc<State>,
    route: Route,
    call: Call,
    req: Request<Incoming>,
    frames: Arc<Vec<WsFrame>>,
) {
    let Some(mut ws) = accept(req).await else {
        return;
    };
    let realtime = state.settings.realtime;
    let started = tokio::time::Instant::now();
    let mut next = 0;
    loop {
        // The server frames up to the next client frame: queued, then flushed once (one
        // write for the burst), unless they go at their recorded pace.
        let mut gone = false;
        while let Some(f) = frames.get(next).filter(|f| f.from == Side::Server) {
            if realtime {
                tokio::time::sleep_until(started + Duration::from_millis(f.at_ms)).await;
            }
            if let Some(close) = &f.close {
                // The provider ended the session here: so does its replay.
                // 1005 says the close had no code: it is never sent as one.
                let frame = (close.code != 1005).then(|| CloseFrame {
                    code: CloseCode::from(close.code),
                    reason: close.reason.clone().into(),
                });
                let _ = ws.send(Message::Close(frame)).await;
                finish(&mut ws).await;
                call.end(Outcome::Hit, 101, None);
                return;
            }
            if let Some(m) = message_of(f) {
                let sent = if realtime {
                    ws.send(m).await
                } else {
                    ws.feed(m).await
                };
                gone |= sent.is_err();
            }
            next += 1;
        }
        if gone || ws.flush().await.is_err() {
            call.end(Outcome::Hit, 101, None);
            return;
        }
        let got = loop {
            match ws.next().await {
                Some(Ok(Message::Text(t))) => {
                    break Some((false, Bytes::from(t.as_str().to_string())))
                }
                Some(Ok(Message::Binary(b))) => break Some((true, b)),
                Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => continue,
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => break None,
            }
        };
        let Some((binary, payload)) = got else {
            // The client is done: a session replayed as far as it went. Its close is
            // answered, as a server does, so it sees a normal closure.
            call.end(Outcome::Hit, 101, None);
            finish(&mut ws).await;
            return;
        };
        let expected = frames.get(next);
        let differing = match expected {
            None => Some(vec!["(a frame after the last recorded one)".to_string()]),
            Some(e) => differing(&state, &route.test, e, binary, &payload),
        };
        match differing {
            None => next += 1,
            Some(fields) => {
                let sent = WsFrame::new(Side::Client, binary, payload, 0);
                let shown = route.shown(state.settings.normalizer.guard().scrubber());
                let message =
                    crate::explain::frame_miss(&shown, &sent, &fields, &state.settings.program);
                let detail = Detail {
                    closest: Some(fields),
                    message: Some(message.clone()),
                    host: route.captured.clone(),
                    ..Detail::default()
                };
                call.end(Outcome::Miss, 101, Some(detail));
                refuse(&mut ws, route.provider.kind, &message).await;
                return;
            }
        }
    }
}

/// `None` when the client's frame matches the recorded one; else the fields that differ.
fn differing(
    state: &State,
    test: &cassettes::TestId,
    expected: &WsFrame,
    binary: bool,
    payload: &Bytes,
) -> Option<Vec<String>> {
    if expected.from != Side::Client {
        return Some(vec!["(the recording has no client frame here)".into()]);
    }
    let got = WsFrame::new(Side::Client, binary, payload.clone(), 0);
    match (expected.json(), got.json()) {
        (Some(a), Some(b)) => {
            let norm = state.settings.normalizer.for_test(test);
            let (a, b) = (comparable(&norm.frame(&a)), comparable(&norm.frame(&b)));
            if a == b {
                None
            } else {
                let fields = cassettes::differing_fields(&a, &b);
                Some(if fields.is_empty() {
                    vec!["/".into()]
                } else {
                    fields
                })
            }
        }
        _ => (expected.payload().as_ref() != Some(payload)).then(|| vec!["(frame bytes)".into()]),
    }
}

/// Connects upstream, answers the client's upgrade as upstream answered it, then relays every
/// frame both ways, and saves the session when it closes cleanly (`save`).
async fn record(
    state: Arc<State>,
    route: Route,
    call: Call,
    request: cassettes::RecordedRequest,
    req: Request<Incoming>,
    client_key: http::HeaderValue,
    save: Save,
) -> Response<Body> {
    let kind = route.provider.kind;
    let uri = match route
        .provider
        .upstream_uri(&route.upstream_path, req.uri().query())
    {
        Ok(uri) => uri,
        Err(e) => {
            let message = e.to_string();
            call.end(Outcome::Error, 502, Some(Detail::message(message.clone())));
            return crate::respond::provider_error(
                kind,
                StatusCode::BAD_GATEWAY,
                "llmreplay_no_upstream",
                &message,
            );
        }
    };
    let url = uri.to_string();
    let failed = |call: Call, status: StatusCode, message: String| {
        call.end(
            Outcome::Error,
            status.as_u16(),
            Some(Detail::message(message.clone())),
        );
        crate::respond::provider_error(kind, status, "llmreplay_upstream_unreachable", &message)
    };
    let carries_key = crate::provider::carries_key(
        req.headers(),
        req.uri().query(),
        &state.settings.redact_headers,
    );
    let allowed = route
        .provider
        .may_send_credentials(&uri, &state.settings.allow_credentials_to, carries_key)
        .and_then(|()| match carries_key {
            true => state.settings.may_send_key_through_proxy(&uri),
            false => Ok(()),
        });
    if let Err(e) = allowed {
        return failed(call, StatusCode::BAD_GATEWAY, e.to_string());
    }
    let tls = uri.scheme_str() == Some("https");
    let host = uri.host().unwrap_or("").to_string();
    let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
    let ws_url = format!(
        "{}://{}{}",
        if tls { "wss" } else { "ws" },
        uri.authority().map_or("", |a| a.as_str()),
        uri.path_and_query().map_or("/", |p| p.as_str())
    );
    // What messages may say of it: no userinfo, no secret in the query.
    let shown = providers::redact::url(&ws_url).into_owned();
    let mut upstream_req =
        match tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(
            ws_url.as_str(),
        ) {
            Ok(r) => r,
            Err(e) => {
                return failed(
                    call,
                    StatusCode::BAD_GATEWAY,
                    format!("cargo-llmreplay: bad upstream URL {shown}: {e}"),
                )
            }
        };
    for (name, value) in req.headers() {
        if !HANDSHAKE.contains(&name.as_str()) {
            upstream_req.headers_mut().append(name, value.clone());
        }
    }
    let connect = async {
        let client = state.client().map_err(str::to_string)?;
        let io = client.open(&host, port, tls).await.map_err(|e| {
            client
                .explain(&url, e.as_ref())
                .unwrap_or_else(|| e.to_string())
        })?;
        tokio_tungstenite::client_async(upstream_req, io)
            .await
            .map_err(|e| match e {
                tokio_tungstenite::tungstenite::Error::Http(r) => format!(
                    "the upstream refused the session with {}: {}",
                    r.status(),
                    r.body()
                        .as_deref()
                        .map(String::from_utf8_lossy)
                        .unwrap_or_default()
                ),
                other => other.to_string(),
            })
    };
    let timeout = state.settings.limits.connect_timeout;
    let (upstream, answer) = match tokio::time::timeout(timeout, connect).await {
        Ok(Ok(pair)) => pair,
        Ok(Err(why)) => {
            let why = providers::redact::text(&why).into_owned();
            let message = format!("cargo-llmreplay: could not open the {} session at {shown}: {why}; nothing was saved", route.provider.name);
            return failed(call, StatusCode::BAD_GATEWAY, message);
        }
        Err(_) => {
            let message = format!(
                "cargo-llmreplay: the {} upstream at {shown} did not answer the upgrade within {}s",
                route.provider.name,
                timeout.as_secs_f64()
            );
            return failed(call, StatusCode::GATEWAY_TIMEOUT, message);
        }
    };
    let protocol = answer
        .headers()
        .get(SEC_WEBSOCKET_PROTOCOL)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let response = switching(&client_key, protocol.as_deref());
    tokio::spawn(tracing::Instrument::in_current_span(async move {
        let _open = state.sessions.enter();
        let Some(client) = accept(req).await else {
            return;
        };
        relay(call, request, client, upstream, save == Save::Yes).await;
    }));
    response
}

/// How a relayed session ended.
enum End {
    /// A close frame from either side: the session is whole.
    Closed,
    /// A connection broke without one: passed on, not saved.
    Broken(String),
}

async fn relay<U>(
    call: Call,
    request: cassettes::RecordedRequest,
    client: Socket,
    upstream: WebSocketStream<U>,
    save: bool,
) where
    U: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let started = Instant::now();
    let at = || started.elapsed().as_millis() as u64;
    let (mut client_tx, mut client_rx) = client.split();
    let (mut up_tx, mut up_rx) = upstream.split();
    let mut frames: Vec<WsFrame> = Vec::new();
    let keep = |frames: &mut Vec<WsFrame>, from: Side, m: &Message, at_ms: u64| {
        frames.extend(frame_of(from, m, at_ms))
    };
    let end = loop {
        tokio::select! {
            m = client_rx.next() => match m {
                Some(Ok(m)) => {
                    let close = matches!(m, Message::Close(_));
                    keep(&mut frames, Side::Client, &m, at());
                    let _ = up_tx.send(m).await;
                    if close {
                        break End::Closed;
                    }
                }
                Some(Err(e)) => {
                    let _ = up_tx.close().await;
                    break End::Broken(format!("the client's connection broke: {e}"));
                }
                None => {
                    let _ = up_tx.close().await;
                    break End::Broken("the client went away without closing".into());
                }
            },
            m = up_rx.next() => match m {
                Some(Ok(m)) => {
                    let close = matches!(m, Message::Close(_));
                    keep(&mut frames, Side::Server, &m, at());
                    let _ = client_tx.send(m).await;
                    if close {
                        break End::Closed;
                    }
                }
                Some(Err(e)) => {
                    // Passed on as a broken connection: the client sees what the upstream did.
                    let _ = client_tx
                        .send(Message::Close(Some(CloseFrame { code: CloseCode::Error, reason: "cargo-llmreplay: the upstream session broke off".into() })))
                        .await;
                    break End::Broken(format!("the upstream session broke off: {e}"));
                }
                None => {
                    let _ = client_tx.close().await;
                    break End::Broken("the upstream went away without closing".into());
                }
            },
        }
    };
    // Let the other side's close answer pass, without waiting on it for long.
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        let _ = client_tx.close().await;
        let _ = up_tx.close().await;
    })
    .await;
    if let End::Broken(why) = end {
        let message = format!("cargo-llmreplay: {why}; passed on and not saved");
        call.end(Outcome::Broken, 101, Some(Detail::message(message)));
        return;
    }
    if !save {
        call.end(Outcome::Passthrough, 101, None);
        return;
    }
    let response = RecordedResponse::session(frames);
    let ttfb_ms = response
        .frames()
        .and_then(|f| f.iter().find(|f| f.from == Side::Server))
        .map_or(0, |f| f.at_ms);
    let timing = Timing {
        ttfb_ms,
        total_ms: at(),
    };
    let interaction = Interaction::recorded(call.key.clone(), request, response, timing);
    // The session is over: a failure to save is journalled, and there is no client to tell.
    let _ = crate::exchange::save(call, interaction, 101).await;
}

/// The recorded form of a message read from `from`, if it is one a session keeps.
fn frame_of(from: Side, m: &Message, at_ms: u64) -> Option<WsFrame> {
    match m {
        // A text frame is copied to its exact size: sharing the message's bytes would keep
        // alive the larger read buffer they are a slice of (measured: +30% peak on 200 KiB
        // frames).
        Message::Text(t) => Some(WsFrame::new(
            from,
            false,
            Bytes::copy_from_slice(t.as_bytes()),
            at_ms,
        )),
        Message::Binary(b) => Some(WsFrame::new(from, true, b.clone(), at_ms)),
        // A close the server starts is part of what it said (1008 "quota exceeded"); the
        // client's close only ends the session.
        Message::Close(c) if from == Side::Server => Some(WsFrame::close(
            from,
            c.as_ref().map_or(1005, |c| u16::from(c.code)),
            c.as_ref().map(|c| c.reason.to_string()).unwrap_or_default(),
            at_ms,
        )),
        _ => None,
    }
}

/// The frame reader fed hostile bytes from either side, as a session's relay reads them:
/// tungstenite's reader with the daemon's settings, then the frames kept for the cassette.
#[cfg(test)]
mod frame_fuzz {
    use super::*;
    use proptest::prelude::*;
    use std::collections::VecDeque;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    /// Cases per property: both together take well under a second in a debug build.
    const CASES: u32 = 256;

    /// A connection that gives its bytes in the given pieces, one a read, and takes any
    /// writes (pongs, close answers) without keeping them.
    struct Pieces(VecDeque<Vec<u8>>);

    impl tokio::io::AsyncRead for Pieces {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            if let Some(mut piece) = self.0.pop_front() {
                let n = piece.len().min(buf.remaining());
                buf.put_slice(&piece[..n]);
                if n < piece.len() {
                    piece.drain(..n);
                    self.0.push_front(piece);
                }
            }
            Poll::Ready(Ok(()))
        }
    }

    impl tokio::io::AsyncWrite for Pieces {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// What the reader made of `bytes` cut at `cuts`: the messages, and whether it ended on
    /// an error rather than the end of the bytes.
    fn read(bytes: &[u8], cuts: &[usize], from: Side) -> (Vec<Message>, bool) {
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
        cuts.sort_unstable();
        let mut pieces = VecDeque::new();
        let mut start = 0;
        for c in cuts.into_iter().chain([bytes.len()]) {
            // An empty read is the end of the connection: no piece is empty.
            if c > start {
                pieces.push_back(bytes[start..c].to_vec());
            }
            start = c;
        }
        // The client's frames are read as the server reads them, and the other way round.
        let role = match from {
            Side::Client => Role::Server,
            Side::Server => Role::Client,
        };
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(async {
                let mut ws = WebSocketStream::from_raw_socket(Pieces(pieces), role, None).await;
                let mut out = Vec::new();
                loop {
                    match ws.next().await {
                        Some(Ok(m)) => out.push(m),
                        Some(Err(_)) => return (out, true),
                        None => return (out, false),
                    }
                }
            })
    }

    /// A frame as `from` sends it: a client's masked, a server's not.
    fn frame(from: Side, fin: bool, opcode: u8, payload: &[u8]) -> Vec<u8> {
        let mut out = vec![if fin { 0x80 } else { 0 } | opcode];
        let mask = if from == Side::Client { 0x80 } else { 0 };
        match payload.len() {
            n if n < 126 => out.push(mask | n as u8),
            n => {
                out.push(mask | 126);
                out.extend_from_slice(&(n as u16).to_be_bytes());
            }
        }
        if from == Side::Client {
            let key = [0x37, 0xfa, 0x21, 0x3d];
            out.extend_from_slice(&key);
            out.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
        } else {
            out.extend_from_slice(payload);
        }
        out
    }

    /// A realtime session's frames from `from`: JSON text, binary audio, a ping, a text message
    /// in two fragments, and a close with its code and reason.
    fn session(from: Side) -> Vec<u8> {
        let audio: Vec<u8> = (0..=255u8).cycle().take(300).collect();
        [
            frame(
                from,
                true,
                1,
                br#"{"type":"session.update","session":{"voice":"alloy"}}"#,
            ),
            frame(from, true, 2, &audio),
            frame(from, true, 9, b"ping"),
            frame(from, false, 1, "{\"delta\":\"caf".as_bytes()),
            frame(from, true, 0, "\u{e9}\"}".as_bytes()),
            frame(from, true, 8, b"\x03\xf0quota exceeded"),
        ]
        .concat()
    }

    fn side(server: bool) -> Side {
        if server {
            Side::Server
        } else {
            Side::Client
        }
    }

    /// What holds for whatever was read: the same messages however the bytes were cut; no
    /// more payload than bytes; each kept frame gives back its message's bytes and reads back
    /// from a cassette equal.
    fn check(bytes: &[u8], cuts: &[usize], from: Side) -> Result<(), TestCaseError> {
        let whole = read(bytes, &[], from);
        let (messages, failed) = read(bytes, cuts, from);
        prop_assert_eq!(&messages, &whole.0);
        prop_assert_eq!(failed, whole.1);
        let payload: usize = messages.iter().map(Message::len).sum();
        prop_assert!(payload <= bytes.len());
        for (i, m) in messages.iter().enumerate() {
            let Some(kept) = frame_of(from, m, i as u64) else {
                continue;
            };
            if let Message::Text(_) | Message::Binary(_) = m {
                prop_assert_eq!(&kept.payload().unwrap()[..], &m.clone().into_data()[..]);
            }
            let response = RecordedResponse::session(vec![kept]);
            let mut x = Interaction::recorded(
                Key::of(&cassettes::Normalizer::plain().request("GET", "/", None, None, b"", &[])),
                cassettes::Normalizer::plain().request("GET", "/", None, None, b"", &[]),
                response,
                Timing {
                    ttfb_ms: 0,
                    total_ms: 0,
                },
            );
            x.summary = None;
            let text = serde_json::to_string(&x).unwrap();
            let back: Interaction = serde_json::from_str(&text).unwrap();
            prop_assert_eq!(back.response.frames(), x.response.frames());
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(CASES))]

        /// Any bytes from either side, cut anywhere: no panic, and the rules above.
        #[test]
        fn any_bytes_read_alike_however_cut(
            bytes in prop::collection::vec(any::<u8>(), 0..400),
            cuts in prop::collection::vec(any::<usize>(), 0..8),
            server in any::<bool>(),
        ) {
            check(&bytes, &cuts, side(server))?;
        }

        /// A real session with bytes flipped, inserted and deleted, cut anywhere.
        #[test]
        fn a_mutated_session_reads_alike_however_cut(
            edits in prop::collection::vec((0u8..3, any::<usize>(), any::<u8>()), 0..6),
            cuts in prop::collection::vec(any::<usize>(), 0..8),
            server in any::<bool>(),
        ) {
            let bytes = cassettes::testing::mutate(session(side(server)), &edits);
            check(&bytes, &cuts, side(server))?;
        }
    }

    /// Unmutated, the session reads whole: JSON, audio, the joined fragments, and from the
    /// server its close.
    #[test]
    fn the_valid_session_reads_whole() {
        for from in [Side::Client, Side::Server] {
            let (messages, failed) = read(&session(from), &[3, 40, 41, 200], from);
            assert!(!failed);
            let kept: Vec<WsFrame> = messages
                .iter()
                .filter_map(|m| frame_of(from, m, 0))
                .collect();
            assert_eq!(
                kept.len(),
                if from == Side::Server { 4 } else { 3 },
                "{kept:?}"
            );
            assert_eq!(
                kept[2].payload().unwrap(),
                "{\"delta\":\"caf\u{e9}\"}".as_bytes()
            );
        }
    }
}

#[cfg(test)]
mod handshake_tests {
    use super::*;

    #[test]
    fn only_a_get_of_version_13_with_a_16_byte_key_upgrades() {
        let req = |method: &str, version: Option<&str>, key: Option<&str>| {
            let mut b = Request::builder()
                .method(method)
                .uri("/v1/realtime")
                .header(UPGRADE, "websocket")
                .header(CONNECTION, "Upgrade");
            if let Some(v) = version {
                b = b.header(http::header::SEC_WEBSOCKET_VERSION, v);
            }
            if let Some(k) = key {
                b = b.header(SEC_WEBSOCKET_KEY, k);
            }
            b.body(()).unwrap()
        };
        let good = "dGhlIHNhbXBsZSBub25jZQ==";
        assert!(check_handshake(&req("GET", Some("13"), Some(good))).is_ok());
        let status = |r: Request<()>| check_handshake(&r).unwrap_err().0.as_u16();
        assert_eq!(status(req("POST", Some("13"), Some(good))), 400);
        assert_eq!(status(req("GET", Some("8"), Some(good))), 426);
        assert_eq!(status(req("GET", None, Some(good))), 426);
        assert_eq!(status(req("GET", Some("13"), Some("garbage!"))), 400);
        assert_eq!(status(req("GET", Some("13"), Some("c2hvcnQ="))), 400);
        assert_eq!(status(req("GET", Some("13"), None)), 400);
    }
}
