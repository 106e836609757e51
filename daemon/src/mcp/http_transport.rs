//! Streamable HTTP MCP servers (`[mcp.NAME] url`), served at `/mcp/NAME`: each POSTed message
//! planned by [`super::begin`]; a forwarded one's answer (JSON, or an event stream passed on
//! event by event) saved as its steps; notifications and the client's answers acknowledged
//! with 202. GET is the server's listening stream, recorded and replayed as
//! [`super::streams`] says, or the resumption of a stream with `Last-Event-ID`. Replay issues
//! its own `Mcp-Session-Id` on `initialize` and answers DELETE with 200.

use super::streams::{Parked, Session};
use super::{answer, begin, replayed_steps, save, Begun, Pending};
use crate::journal::{Detail, Outcome};
use crate::plan::{plan, Form, Plan, Save};
use crate::provider::UpstreamSource;
use crate::respond::{text, Body};
use crate::route::Route;
use crate::state::State;
use bytes::Bytes;
use cassettes::mcp::Kind as Message;
use cassettes::{Chunk, ChunkContent, Key, StreamFormat, TestId};
use http::header::CONTENT_TYPE;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use serde_json::{json, Value};
use std::io;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc;

const SSE: &str = "text/event-stream";

/// One request to MCP server `name` over Streamable HTTP, for `test`.
pub(crate) async fn handle(
    state: &Arc<State>,
    test: TestId,
    name: &str,
    req: Request<Incoming>,
) -> Response<Body> {
    let Some(url) = state.settings.mcp.get(name) else {
        let known: Vec<&str> = state.settings.mcp.keys().map(String::as_str).collect();
        return text(
            StatusCode::NOT_FOUND,
            format!(
                "cargo-llmreplay: no MCP server named {name:?} in llmreplay.toml (known: {}); add [mcp.{name}] url = \"https://…\"",
                if known.is_empty() { "none".to_string() } else { known.join(", ") }
            ),
        );
    };
    let (origin, path) = split_url(url);
    let provider = match super::provider(name, Some(origin), UpstreamSource::ConfigFile) {
        Ok(p) => p,
        Err(m) => return text(StatusCode::BAD_REQUEST, m),
    };
    let route = Route {
        test,
        provider,
        upstream_path: path,
        captured: None,
    };
    let (parts, body) = req.into_parts();
    match super::read_message(state, body).await {
        Ok(body) => serve(state, &route, parts, body).await,
        Err(refused) => refused,
    }
}

/// Whether a request to `route` may be an MCP server's, to be read before it is routed: a
/// captured host of no known family, with MCP's headers or a JSON POST.
pub(crate) fn may_be_mcp<B>(route: &Route, req: &Request<B>) -> bool {
    let headers = req.headers();
    let json = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/json"));
    route.captured.is_some()
        && route.provider.kind == crate::provider::Kind::Http
        && (headers.contains_key("mcp-protocol-version")
            || headers.contains_key("mcp-session-id")
            || (req.method() == Method::POST && json))
}

/// Whether a request read whole is an MCP server's: MCP's headers, or a JSON-RPC 2.0 body.
pub(crate) fn is_mcp(parts: &http::request::Parts, body: &[u8]) -> bool {
    parts.headers.contains_key("mcp-protocol-version")
        || parts.headers.contains_key("mcp-session-id")
        || serde_json::from_slice::<Value>(body).is_ok_and(|v| {
            v.get("jsonrpc").and_then(Value::as_str) == Some("2.0")
                && cassettes::mcp::kind(&v).is_some()
        })
}

/// A captured host's MCP server: its cassette is `mcp-<host's name>.json`.
pub(crate) async fn captured(
    state: Arc<State>,
    route: Route,
    parts: http::request::Parts,
    body: Bytes,
) -> Response<Body> {
    let provider = match super::provider(
        route.provider.name.as_str(),
        route.provider.upstream.clone(),
        route.provider.source.clone(),
    ) {
        Ok(p) => p,
        Err(m) => return text(StatusCode::BAD_REQUEST, m),
    };
    let route = Route { provider, ..route };
    serve(&state, &route, parts, body).await
}

/// One request of an MCP server's, read whole, on `route` (its provider the server's).
async fn serve(
    state: &Arc<State>,
    route: &Route,
    parts: http::request::Parts,
    body: Bytes,
) -> Response<Body> {
    // A client's bearer token for the server is a secret of the run, as a provider's key is:
    // wherever it turns up (a tool's arguments, a result), it is replaced.
    crate::credentials::learn(state, &parts.headers, parts.uri.query());
    let live = state.settings.live_mcp(route.provider.name.as_str());
    let replays = state.settings.mode == crate::Mode::Replay && !live;
    match parts.method {
        Method::POST => {}
        Method::GET if live => return pass_on(state, route, parts, body).await,
        Method::GET => return listen(state, route, parts, replays).await,
        Method::DELETE => {
            state
                .transports
                .get::<super::streams::Streams>()
                .end(&route.test, &route.provider.name);
            if replays {
                return answer(StatusCode::OK, None, Bytes::new());
            }
            return pass_on(state, route, parts, body).await;
        }
        _ => return pass_on(state, route, parts, body).await,
    }
    let message: Value = match serde_json::from_slice(&body) {
        Ok(m) => m,
        Err(e) => {
            return text(
                StatusCode::BAD_REQUEST,
                format!("cargo-llmreplay: an MCP POST carries one JSON-RPC message: {e}"),
            )
        }
    };
    let session = state
        .transports
        .get::<super::streams::Streams>()
        .session(&route.test, &route.provider.name);
    let method = cassettes::mcp::method(&message);
    if cassettes::mcp::kind(&message) == Some(Message::Request) && method != Some("ping") {
        // A listening stream's messages are replayed after as many requests as they came
        // after in the recording.
        session.request(method == Some("initialize"));
    }
    let started = Instant::now();
    match begin(state, route.test.clone(), route.provider.clone(), &message).await {
        Begun::Replay {
            steps,
            content_type,
        } => replayed(&session, &message, steps, content_type.as_deref()),
        Begun::Answer(error) => answer(
            StatusCode::OK,
            Some("application/json"),
            serde_json::to_vec(&error).expect("JSON serialises").into(),
        ),
        Begun::Nothing => answer(StatusCode::ACCEPTED, None, Bytes::new()),
        Begun::Exit => cut(),
        Begun::Forward(pending) => forward(state, route, parts, body, pending, started).await,
    }
}

/// `scheme://authority` and the path of a configured URL (checked when the config was read).
fn split_url(url: &str) -> (String, String) {
    match url.parse::<http::Uri>() {
        Ok(uri) => (
            format!(
                "{}://{}",
                uri.scheme_str().unwrap_or("http"),
                uri.authority().map(|a| a.as_str()).unwrap_or("")
            ),
            uri.path().to_string(),
        ),
        Err(_) => (url.to_string(), "/".into()),
    }
}

/// A recorded exchange as an HTTP answer: its recorded form (JSON or an event stream, its
/// events numbered in the session to resume from), the server's messages only, and a session
/// id of this daemon's for `initialize`.
fn replayed(
    session: &Session,
    message: &Value,
    steps: Vec<Value>,
    content_type: Option<&str>,
) -> Response<Body> {
    let server: Vec<Value> = steps
        .into_iter()
        .filter_map(|mut s| s.get_mut("server").map(Value::take))
        .collect();
    if server.is_empty() {
        return answer(StatusCode::ACCEPTED, None, Bytes::new());
    }
    let stream = content_type.is_some_and(|ct| ct.starts_with(SSE));
    let (ct, body) = if stream {
        let number = session.open(false);
        let mut out = Vec::new();
        for m in &server {
            out.extend_from_slice(&session.event(number, m));
        }
        (SSE, Bytes::from(out))
    } else {
        let last = server.last().expect("not empty");
        let bytes = serde_json::to_vec(last).expect("JSON serialises");
        ("application/json", Bytes::from(bytes))
    };
    let mut response = answer(StatusCode::OK, Some(ct), body);
    if cassettes::mcp::method(message) == Some("initialize") {
        let id = format!(
            "llmreplay-{}",
            cassettes::sha256_hex(format!("{:?}", Instant::now()).as_bytes())
                .get(..32)
                .unwrap_or_default()
        );
        response.headers_mut().insert(
            "mcp-session-id",
            http::HeaderValue::from_str(&id).expect("hex is a header value"),
        );
    }
    response
}

/// An answer that breaks off before its first byte: the server went away.
fn cut() -> Response<Body> {
    let body = futures_util::stream::once(async {
        Err::<Frame<Bytes>, io::Error>(io::Error::other(
            "cargo-llmreplay: fault: the MCP server went away",
        ))
    });
    answer_stream(StreamBody::new(body))
}

/// The server's answer, passed on as it comes.
fn as_it_came(head: &http::response::Parts, upstream: Incoming) -> Response<Body> {
    crate::proxy::answer_head(head)
        .body(BodyExt::boxed_unsync(upstream.map_err(io::Error::other)))
        .expect("headers copied from a valid response")
}

/// An answer with `head`'s status and headers whose body is what `rx` brings.
fn from_channel(
    head: &http::response::Parts,
    mut rx: mpsc::Receiver<Result<Frame<Bytes>, io::Error>>,
) -> Response<Body> {
    let body = StreamBody::new(futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx)));
    crate::proxy::answer_head(head)
        .body(BodyExt::boxed_unsync(body))
        .expect("headers copied from a valid response")
}

/// A request the server could not be asked: journalled against its exchange, and said.
fn not_forwarded(pending: Box<Pending>, failed: crate::proxy::Failed) -> Response<Body> {
    let detail = Detail::message(failed.message.clone());
    let status = failed.status.as_u16();
    pending.call.end(Outcome::Error, status, Some(detail));
    text(failed.status, failed.message)
}

/// Passes a request on to the server and its answer back, nothing recorded.
async fn pass_on(
    state: &Arc<State>,
    route: &Route,
    parts: http::request::Parts,
    body: Bytes,
) -> Response<Body> {
    match crate::proxy::forward(state, &parts, route, body).await {
        Ok(forwarded) => {
            let (head, body) = forwarded.answer.into_parts();
            as_it_came(&head, body)
        }
        Err(failed) => text(failed.status, failed.message),
    }
}

/// Sends a POSTed message to the server; its answer is passed on as it comes and, with a
/// pending exchange, saved as its steps once whole.
async fn forward(
    state: &Arc<State>,
    route: &Route,
    parts: http::request::Parts,
    body: Bytes,
    pending: Option<Box<Pending>>,
    started: Instant,
) -> Response<Body> {
    let forwarded = match crate::proxy::forward(state, &parts, route, body).await {
        Ok(forwarded) => forwarded,
        Err(failed) => {
            return match pending {
                Some(pending) => not_forwarded(pending, failed),
                None => text(failed.status, failed.message),
            }
        }
    };
    let (head, upstream) = forwarded.answer.into_parts();
    let Some(pending) = pending.filter(|_| head.status == StatusCode::OK) else {
        return as_it_came(&head, upstream);
    };
    let parked = Parked {
        pending,
        steps: Vec::new(),
        started,
    };
    relay(state, route, head, upstream, parked)
}

/// Passes an answer on as it comes and saves it, after the steps `parked` holds already, as
/// its exchange's steps once whole. An event stream that ends before the request's response
/// with an event id is parked instead, for the GET that resumes it.
fn relay(
    state: &Arc<State>,
    route: &Route,
    head: http::response::Parts,
    upstream: Incoming,
    parked: Parked,
) -> Response<Body> {
    let content_type = head
        .headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let sse = content_type.starts_with(SSE);
    let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, io::Error>>(64);
    let state = state.clone();
    let (test, provider) = (route.test.clone(), route.provider.name.clone());
    tokio::spawn(async move {
        let idle = state.settings.limits.idle_timeout;
        let Parked {
            pending,
            mut steps,
            started,
        } = parked;
        let mut upstream = upstream;
        let (mut whole, mut blocks) = (Vec::new(), Blocks::default());
        let (mut answered, mut last_id) = (false, None);
        while !answered {
            // A client that left does not stop this: the server's whole answer is recorded.
            let data = match tokio::time::timeout(idle, upstream.frame()).await {
                Ok(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => data,
                    Err(_) => continue,
                },
                Ok(Some(Err(e))) => {
                    let _ = tx.send(Err(io::Error::other(e))).await;
                    return;
                }
                Ok(None) | Err(_) => break,
            };
            if sse {
                for block in blocks.push(&data) {
                    last_id = block_id(&block).or(last_id);
                    if let Some(message) = block_message(&block) {
                        // The request's response ends the exchange, as the server should
                        // end the stream there.
                        answered |= cassettes::mcp::kind(&message) == Some(Message::Response);
                        steps.push(json!({ "server": message }));
                    }
                }
            } else {
                whole.extend_from_slice(&data);
            }
            let _ = tx.send(Ok(Frame::data(data))).await;
        }
        if !sse {
            steps.extend(steps_of(&whole, &content_type));
        }
        if let (true, false, Some(last)) = (sse, answered, last_id) {
            // The server closed the stream to be resumed (polling), or the client lost it:
            // the client comes back with a GET naming its last event, and the rest joins
            // this exchange.
            let parked = Parked {
                pending,
                steps,
                started,
            };
            if let Some(evicted) = state
                .transports
                .get::<super::streams::Streams>()
                .park(&test, &provider, last, parked)
            {
                save_as_it_stands(evicted).await;
            }
            return;
        }
        let form = if sse { SSE } else { "application/json" };
        if let Err(failure) = save(pending, steps, Some(form), started).await {
            let _ = tx.send(Err(io::Error::other(failure))).await;
        }
    });
    from_channel(&head, rx)
}

/// An event stream's bytes as they come, cut into whole events (carriage returns dropped).
#[derive(Default)]
struct Blocks {
    buffer: Vec<u8>,
}

impl Blocks {
    fn push(&mut self, data: &[u8]) -> Vec<String> {
        self.buffer.extend(data.iter().filter(|b| **b != b'\r'));
        let mut out = Vec::new();
        while let Some(end) = self.buffer.windows(2).position(|w| w == b"\n\n") {
            let block: Vec<u8> = self.buffer.drain(..end + 2).collect();
            out.push(String::from_utf8_lossy(&block).into_owned());
        }
        out
    }
}

/// Saves what a parked answer holds: it is all there is.
async fn save_as_it_stands(parked: Parked) {
    let _ = save(parked.pending, parked.steps, Some(SSE), parked.started).await;
}

/// Saves the answers still parked when the daemon stops: their client never resumed them,
/// and what they hold is all there is.
pub(crate) async fn save_parked(state: &State) {
    for parked in state
        .transports
        .get::<super::streams::Streams>()
        .take_parked()
    {
        save_as_it_stands(parked).await;
    }
}

/// GET: a stream resumed with `Last-Event-ID`, or the server's listening stream, recorded
/// (its messages, each with how many client requests came before it) or replayed.
async fn listen(
    state: &Arc<State>,
    route: &Route,
    parts: http::request::Parts,
    replays: bool,
) -> Response<Body> {
    let last_id = parts
        .headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    if let Some(last) = last_id {
        // An answer this daemon parked while recording, then one it replayed (its own ids);
        // else, while the server runs, a stream of the server's own.
        let streams = state.transports.get::<super::streams::Streams>();
        if let Some(parked) = streams.unpark(&route.test, &route.provider.name, &last) {
            return resume_recorded(state, route, parts, parked).await;
        }
        let session = streams.session(&route.test, &route.provider.name);
        let (tx, rx) = mpsc::unbounded_channel();
        if session.resume(&last, tx).is_some() {
            return event_stream(state, rx);
        }
        if !replays {
            return pass_on(state, route, parts, Bytes::new()).await;
        }
        return text(
            StatusCode::NOT_FOUND,
            format!(
                "cargo-llmreplay: no event {last:?} to resume in this test's session with MCP server {}; start a new stream without Last-Event-ID",
                route.provider.name
            ),
        );
    }
    let request = state.settings.normalizer.for_test(&route.test).request(
        "GET",
        &route.upstream_path,
        None,
        None,
        b"",
        &[],
    );
    let key = Key::of(&request);
    let planned = match plan(state, route, Method::GET, key, Form::Listen, None) {
        Ok(planned) => planned,
        Err(refused) => return *refused,
    };
    let call = planned.call;
    match planned.plan {
        Plan::Replay(prepared) => {
            let steps = replayed_steps(call, &prepared);
            replay_listening(state, route, steps)
        }
        Plan::Miss | Plan::Acknowledge | Plan::Fault(_) => {
            call.unasked();
            replay_listening(state, route, Vec::new())
        }
        Plan::Forward(Save::Yes) => {
            let pending = Box::new(Pending {
                call,
                request,
                test: route.test.clone(),
                live: None,
                notification: false,
            });
            record_listening(state, route, parts, pending).await
        }
        Plan::Forward(Save::PassOn) => {
            call.end(Outcome::Passthrough, 200, None);
            pass_on(state, route, parts, Bytes::new()).await
        }
    }
}

/// A recorded listening stream: each message sent once the client has made as many requests
/// as came before it in the recording; the stream stays open until the client leaves.
fn replay_listening(state: &Arc<State>, route: &Route, steps: Vec<Value>) -> Response<Body> {
    let session = state
        .transports
        .get::<super::streams::Streams>()
        .session(&route.test, &route.provider.name);
    let stream = session.open(true);
    let (tx, rx) = mpsc::unbounded_channel();
    session.attach(stream, tx);
    let mut stop = state.stop.subscribe();
    tokio::spawn(async move {
        for step in steps {
            let Some(message) = step.get("server") else {
                continue;
            };
            let after = step.get("after").and_then(Value::as_u64).unwrap_or(0);
            tokio::select! {
                _ = session.requests_reach(after) => {}
                _ = stop.wait_for(|stopped| *stopped) => return,
            }
            session.event(stream, message);
        }
    });
    event_stream(state, rx)
}

/// An event stream of what `rx` brings, until its senders are gone or the daemon stops.
fn event_stream(state: &State, rx: mpsc::UnboundedReceiver<Bytes>) -> Response<Body> {
    let stop = state.stop.subscribe();
    let events = futures_util::stream::unfold((rx, stop), |(mut rx, mut stop)| async move {
        if *stop.borrow() {
            return None;
        }
        let got = tokio::select! {
            got = rx.recv() => got,
            _ = stop.wait_for(|stopped| *stopped) => None,
        };
        got.map(|b| (Ok::<_, io::Error>(Frame::data(b)), (rx, stop)))
    });
    answer_stream(StreamBody::new(events))
}

/// An event stream answer (200), its body `body`.
fn answer_stream(
    body: impl hyper::body::Body<Data = Bytes, Error = io::Error> + Send + 'static,
) -> Response<Body> {
    Response::builder()
        .status(StatusCode::OK)
        .header(CONTENT_TYPE, SSE)
        .header(http::header::CACHE_CONTROL, "no-cache")
        .body(BodyExt::boxed_unsync(body))
        .expect("a valid answer")
}

/// The server's listening stream while recording: passed on as it comes, each message noted
/// with how many client requests came before it, saved when the stream ends, the client
/// leaves or the daemon stops (which waits for the save).
async fn record_listening(
    state: &Arc<State>,
    route: &Route,
    parts: http::request::Parts,
    pending: Box<Pending>,
) -> Response<Body> {
    let started = Instant::now();
    let forwarded = match crate::proxy::forward(state, &parts, route, Bytes::new()).await {
        Ok(forwarded) => forwarded,
        Err(failed) => return not_forwarded(pending, failed),
    };
    let (head, mut upstream) = forwarded.answer.into_parts();
    let is_stream = head
        .headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with(SSE));
    if head.status != StatusCode::OK || !is_stream {
        // No listening stream (405, say): nothing to record, and replay needs none.
        pending
            .call
            .end(Outcome::Passthrough, head.status.as_u16(), None);
        return as_it_came(&head, upstream);
    }
    let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, io::Error>>(64);
    let state = state.clone();
    let session = state
        .transports
        .get::<super::streams::Streams>()
        .session(&route.test, &route.provider.name);
    tokio::spawn(async move {
        let _open = state.sessions.enter();
        let mut stop = state.stop.subscribe();
        let (mut blocks, mut steps) = (Blocks::default(), Vec::new());
        loop {
            let frame = tokio::select! {
                frame = upstream.frame() => frame,
                _ = tx.closed() => break,
                _ = stop.wait_for(|stopped| *stopped) => break,
            };
            let data = match frame {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => data,
                    Err(_) => continue,
                },
                Some(Err(e)) => {
                    let _ = tx.send(Err(io::Error::other(e))).await;
                    break;
                }
                None => break,
            };
            for block in blocks.push(&data) {
                if let Some(message) = block_message(&block) {
                    steps.push(json!({ "server": message, "after": session.requests() }));
                }
            }
            let _ = tx.send(Ok(Frame::data(data))).await;
        }
        if steps.is_empty() {
            pending.call.end(Outcome::Passthrough, 200, None);
        } else {
            let _ = save(pending, steps, Some(SSE), started).await;
        }
    });
    from_channel(&head, rx)
}

/// GET with `Last-Event-ID` of an answer stream parked while recording: the server's rest of
/// it joins the exchange.
async fn resume_recorded(
    state: &Arc<State>,
    route: &Route,
    parts: http::request::Parts,
    parked: Parked,
) -> Response<Body> {
    match crate::proxy::forward(state, &parts, route, Bytes::new()).await {
        Ok(forwarded) => {
            let (head, upstream) = forwarded.answer.into_parts();
            if head.status == StatusCode::OK {
                return relay(state, route, head, upstream, parked);
            }
            // Not resumed: what the exchange holds is saved as it stands.
            save_as_it_stands(parked).await;
            as_it_came(&head, upstream)
        }
        Err(failed) => {
            save_as_it_stands(parked).await;
            text(failed.status, failed.message)
        }
    }
}

/// The JSON-RPC message an event carries, if any (a priming event carries none).
fn block_message(block: &str) -> Option<Value> {
    let chunk = Chunk {
        content: ChunkContent::Raw(block.to_string()),
        at_ms: 0,
    };
    let mut payload = chunk.payload(StreamFormat::Sse);
    Some(payload["data"].take()).filter(|m| cassettes::mcp::kind(m).is_some())
}

/// An event's id, if it has one.
fn block_id(block: &str) -> Option<String> {
    block
        .lines()
        .filter_map(|l| l.strip_prefix("id:"))
        .map(|id| id.trim().to_string())
        .rfind(|id| !id.is_empty())
}

/// The server's messages in an answer's bytes, as steps.
fn steps_of(bytes: &[u8], content_type: &str) -> Vec<Value> {
    let messages: Vec<Value> = if content_type.starts_with(SSE) {
        let text = String::from_utf8_lossy(bytes).replace("\r\n", "\n");
        text.split("\n\n").filter_map(block_message).collect()
    } else {
        serde_json::from_slice(bytes).into_iter().collect()
    };
    messages
        .into_iter()
        .filter(|m| cassettes::mcp::kind(m).is_some())
        .map(|m| json!({ "server": m }))
        .collect()
}

/// The event-stream assembler fed a server's hostile bytes, cut into frames anywhere.
#[cfg(test)]
mod blocks_fuzz {
    use super::{block_id, block_message, Blocks};
    use proptest::prelude::*;

    /// Cases per property: both together take well under a second in a debug build.
    const CASES: u32 = 256;

    /// A Streamable HTTP answer: a priming event, a server request, the response (CRLF).
    const ANSWER: &str = "id: 0\n\nid: 1\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"sampling/createMessage\"}\n\nid: 2\r\nevent: message\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"caf\u{e9}\"}]}}\r\n\r\n";

    /// The blocks of `bytes` pushed in the pieces `cuts` makes, and what is left over.
    fn assemble(bytes: &[u8], cuts: &[usize]) -> (Vec<String>, Vec<u8>) {
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
        cuts.sort_unstable();
        let (mut blocks, mut out, mut start) = (Blocks::default(), Vec::new(), 0);
        for c in cuts.into_iter().chain([bytes.len()]) {
            out.extend(blocks.push(&bytes[start..c]));
            start = c;
        }
        (out, blocks.buffer)
    }

    /// Whatever the cuts: the blocks one push gives; each a whole event ending in a blank
    /// line; with the rest, every byte but carriage returns, in order; ids and messages read
    /// without a panic.
    fn check(bytes: &[u8], cuts: &[usize]) -> Result<(), TestCaseError> {
        let (blocks, rest) = assemble(bytes, cuts);
        prop_assert_eq!(&(blocks.clone(), rest.clone()), &assemble(bytes, &[]));
        let stripped: Vec<u8> = bytes.iter().copied().filter(|b| *b != b'\r').collect();
        prop_assert!(blocks.len() <= stripped.len() / 2);
        for block in &blocks {
            prop_assert!(block.ends_with("\n\n"));
            let _ = (block_id(block), block_message(block));
        }
        if std::str::from_utf8(bytes).is_ok() {
            prop_assert_eq!([blocks.concat().into_bytes(), rest].concat(), stripped);
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(CASES))]

        #[test]
        fn any_bytes_assemble_alike_however_cut(
            bytes in prop::collection::vec(prop_oneof![any::<u8>(), Just(b'\n'), Just(b'\r')], 0..400),
            cuts in prop::collection::vec(any::<usize>(), 0..8),
        ) {
            check(&bytes, &cuts)?;
        }

        #[test]
        fn a_mutated_answer_assembles_alike_however_cut(
            edits in prop::collection::vec((0u8..3, any::<usize>(), any::<u8>()), 0..6),
            cuts in prop::collection::vec(any::<usize>(), 0..8),
        ) {
            let bytes = cassettes::testing::mutate(ANSWER.as_bytes().to_vec(), &edits);
            check(&bytes, &cuts)?;
        }
    }

    /// Unmutated, the answer's two messages and its last id come out, however cut.
    #[test]
    fn the_valid_answer_gives_its_messages() {
        let (blocks, rest) = assemble(ANSWER.as_bytes(), &[5, 6, 100, 101]);
        assert!(rest.is_empty());
        assert_eq!(blocks.len(), 3);
        assert_eq!(blocks.iter().filter_map(|b| block_message(b)).count(), 2);
        assert_eq!(block_id(&blocks[2]).as_deref(), Some("2"));
    }
}
