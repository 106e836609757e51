//! Streamable HTTP MCP servers (`[mcp.NAME] url`), served at `/mcp/NAME`: each POSTed message
//! planned by [`super::begin`]; a forwarded one's answer (JSON, or an event stream passed on
//! event by event) saved as its steps; notifications and the client's answers acknowledged
//! with 202. Replay issues its own `Mcp-Session-Id` on `initialize`, answers GET (the server's
//! listening stream) with 405, which the protocol lets a server do, and DELETE with 200.

use super::{answer, begin, save, Begun, Pending};
use crate::journal::{Detail, Outcome};
use crate::respond::{self, text, Body};
use crate::route::Route;
use crate::state::State;
use bytes::Bytes;
use cassettes::{Chunk, ChunkContent, StreamFormat, TestId};
use http::header::CONTENT_TYPE;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use serde_json::Value;
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
    let provider = match super::provider(name, Some(origin)) {
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
    let live = state.settings.live_mcp(route.provider.name.as_str());
    let replays = state.settings.mode == crate::Mode::Replay && !live;
    match parts.method {
        Method::POST => {}
        Method::GET if replays => {
            return Response::builder()
                .status(StatusCode::METHOD_NOT_ALLOWED)
                .header(http::header::ALLOW, "POST, DELETE")
                .body(respond::empty())
                .expect("a valid answer")
        }
        Method::DELETE if replays => return answer(StatusCode::OK, None, Bytes::new()),
        // The listening stream and the session's end, while the server runs: passed on.
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
    let started = Instant::now();
    match begin(state, route.test.clone(), route.provider.clone(), &message).await {
        Begun::Replay {
            steps,
            content_type,
        } => replayed(&message, steps, content_type.as_deref()),
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

/// A recorded exchange as an HTTP answer: its recorded form (JSON or an event stream), the
/// server's messages only, and a session id of this daemon's for `initialize`.
fn replayed(message: &Value, steps: Vec<Value>, content_type: Option<&str>) -> Response<Body> {
    let server: Vec<Value> = steps
        .into_iter()
        .filter_map(|mut s| s.get_mut("server").map(Value::take))
        .collect();
    if server.is_empty() {
        return answer(StatusCode::ACCEPTED, None, Bytes::new());
    }
    let stream = content_type.is_some_and(|ct| ct.starts_with(SSE));
    let (ct, body) = if stream {
        let mut out = String::new();
        for m in &server {
            out.push_str("event: message\ndata: ");
            out.push_str(&serde_json::to_string(m).expect("JSON serialises"));
            out.push_str("\n\n");
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
    Response::builder()
        .status(StatusCode::OK)
        .header(CONTENT_TYPE, SSE)
        .body(BodyExt::boxed_unsync(StreamBody::new(body)))
        .expect("a valid answer")
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
            crate::proxy::answer_head(&head)
                .body(BodyExt::boxed_unsync(body.map_err(io::Error::other)))
                .expect("headers copied from a valid response")
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
            if let Some(pending) = pending {
                let detail = Detail::message(failed.message.clone());
                state.journal.log(
                    pending.call,
                    Outcome::Error,
                    failed.status.as_u16(),
                    Some(detail),
                );
            }
            return text(failed.status, failed.message);
        }
    };
    let (head, upstream) = forwarded.answer.into_parts();
    let response = crate::proxy::answer_head(&head);
    let content_type = head
        .headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let Some(pending) = pending.filter(|_| head.status == StatusCode::OK) else {
        return response
            .body(BodyExt::boxed_unsync(upstream.map_err(io::Error::other)))
            .expect("headers copied from a valid response");
    };
    let (tx, mut rx) = mpsc::channel::<Result<Frame<Bytes>, io::Error>>(64);
    let state = state.clone();
    tokio::spawn(async move {
        let idle = state.settings.limits.idle_timeout;
        let mut upstream = upstream;
        let mut whole = Vec::new();
        loop {
            let frame = match tokio::time::timeout(idle, upstream.frame()).await {
                Ok(Some(Ok(frame))) => frame,
                Ok(None) => break,
                Ok(Some(Err(e))) => {
                    let _ = tx.send(Err(io::Error::other(e))).await;
                    return;
                }
                Err(_) => break,
            };
            if let Ok(data) = frame.into_data() {
                whole.extend_from_slice(&data);
                let _ = tx.send(Ok(Frame::data(data))).await;
            }
        }
        let steps = steps_of(&whole, &content_type);
        let form = if content_type.starts_with(SSE) {
            SSE
        } else {
            "application/json"
        };
        if let Err(failure) = save(&state, pending, steps, Some(form), started).await {
            let _ = tx.send(Err(io::Error::other(failure))).await;
        }
    });
    let body = StreamBody::new(futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx)));
    response
        .body(BodyExt::boxed_unsync(body))
        .expect("headers copied from a valid response")
}

/// The server's messages in an answer's bytes, as steps.
fn steps_of(bytes: &[u8], content_type: &str) -> Vec<Value> {
    let messages: Vec<Value> = if content_type.starts_with(SSE) {
        let text = String::from_utf8_lossy(bytes).replace("\r\n", "\n");
        text.split("\n\n")
            .filter(|block| block.lines().any(|l| l.starts_with("data:")))
            .map(|block| {
                let chunk = Chunk {
                    content: ChunkContent::Raw(block.to_string()),
                    at_ms: 0,
                };
                let mut payload = chunk.payload(StreamFormat::Sse);
                payload["data"].take()
            })
            .collect()
    } else {
        serde_json::from_slice(bytes).into_iter().collect()
    };
    messages
        .into_iter()
        .filter(|m| cassettes::mcp::kind(m).is_some())
        .map(|m| serde_json::json!({ "server": m }))
        .collect()
}
