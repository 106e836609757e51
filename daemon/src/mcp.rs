//! MCP servers, recorded per test beside the model's calls (README, "MCP servers"). Each client
//! message is one exchange of the test's `mcp-<name>.json`, planned as every HTTP exchange is
//! (its fault, its place in the sequence, replay, miss or forward), keyed by its method and
//! params (`cassettes::mcp::keyed`). Two transports reach it: the stdio shim
//! (`cargo llmreplay mcp`), which asks this daemon what to do with each message through
//! `…/__llmreplay/mcp` and relays to the server itself; and Streamable HTTP (`[mcp.NAME] url`),
//! served at `/mcp/NAME`, forwarded from here.

use crate::call::Call;
use crate::exchange::{read_limited, BodyError};
use crate::faults::FaultKind;
use crate::journal::{Detail, Outcome};
use crate::plan::{plan, Form, Plan, Save};
use crate::provider::{Kind, Provider, UpstreamSource};
use crate::respond::{self, text, Body};
use crate::route::Route;
use crate::state::State;
use bytes::Bytes;
use cassettes::mcp::{self as protocol, Kind as Message};
use cassettes::{Interaction, Key, ProviderName, RecordedRequest, TestId, Timing};
use http::header::CONTENT_TYPE;
use http::{Method, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Exchanges forwarded by the stdio shim whose answers are not in yet, by ticket.
#[derive(Default)]
pub(crate) struct Tickets {
    next: AtomicU64,
    waiting: Mutex<HashMap<u64, Box<Pending>>>,
}

/// The most exchanges one daemon waits on at once: past it, the oldest shim is not answering.
const MAX_TICKETS: usize = 10_000;

/// An exchange sent to the server, its answer still to be saved (or compared, live).
pub(crate) struct Pending {
    call: Call,
    request: RecordedRequest,
    test: TestId,
    /// `--live`: the recording the answer is compared with (none: nothing to compare with).
    live: Option<Option<Arc<cassettes::Prepared>>>,
    /// A client's notification: nothing need come after it, so an empty answer is no break.
    notification: bool,
}

/// What to do with one client message.
pub(crate) enum Begun {
    /// Answer with these server steps (`{"server": …}` or `{"client": …}`), the recorded
    /// response given the live id; `content_type` is the HTTP answer's recorded form.
    Replay {
        steps: Vec<Value>,
        content_type: Option<String>,
    },
    /// Send it to the server; save (or compare, live) what comes back with the pending exchange.
    Forward(Option<Box<Pending>>),
    /// Answer this message in the server's place (a miss, a fault's error).
    Answer(Value),
    /// Nothing to answer: a notification with no recording, or the client's answer to a
    /// request of the server's.
    Nothing,
    /// A fault: the server goes away.
    Exit,
}

/// The provider of MCP server `name`: its cassette is `mcp-<name>.json`.
/// `source` says who named its upstream: `llmreplay.toml`, or the test's own call when
/// captured.
pub(crate) fn provider(
    name: &str,
    upstream: Option<String>,
    source: UpstreamSource,
) -> Result<Arc<Provider>, String> {
    let full = format!("{}{name}", protocol::PREFIX);
    let name = ProviderName::new(&full).ok_or_else(|| {
        format!("cargo-llmreplay: {name:?} is no MCP server name; use letters, digits, '-' and '_'")
    })?;
    Ok(Arc::new(Provider {
        name,
        kind: Kind::Http,
        upstream,
        source,
        parsed: Default::default(),
        pace: None,
    }))
}

/// Decides what `message` (a client's, to MCP server `provider`, in `test`) does.
pub(crate) async fn begin(
    state: &Arc<State>,
    test: TestId,
    provider: Arc<Provider>,
    message: &Value,
) -> Begun {
    let Some(kind) = protocol::kind(message) else {
        return Begun::Answer(protocol::miss_error(
            message.get("id").unwrap_or(&Value::Null),
            "cargo-llmreplay: this is no JSON-RPC 2.0 request, notification or response",
        ));
    };
    let live = state.settings.live_mcp(provider.name.as_str());
    let mode = state.settings.mode;
    if kind == Message::Response {
        // The client's answer to a request of the server's: part of the exchange that request
        // came in, relayed by the shim, replayed in its place.
        return match mode {
            crate::Mode::Replay if !live => Begun::Nothing,
            _ => Begun::Forward(None),
        };
    }
    let method_name = protocol::method(message).unwrap_or("").to_string();
    let keyed = protocol::keyed(message);
    let bytes = serde_json::to_vec(&keyed).expect("JSON values serialise");
    let request = state.settings.normalizer.for_test(&test).request(
        "MCP",
        &method_name,
        None,
        Some("application/json"),
        &bytes,
        &[],
    );
    let key = Key::of(&request);
    let route = Route {
        test: test.clone(),
        provider,
        upstream_path: method_name,
        captured: None,
    };
    let mcp = Method::from_bytes(b"MCP").expect("a token");
    let planned = match plan(state, &route, mcp, key, Form::Http, protocol::tool(message)) {
        Ok(planned) => planned,
        Err(refused) => {
            let why = refusal_text(*refused).await;
            return Begun::Answer(protocol::miss_error(id_of(message), &why));
        }
    };
    if let Some(delay) = planned.delay {
        tokio::time::sleep(delay).await;
    }
    let call = planned.call;
    if live {
        // The server runs; what it answers is compared with the recording, which is not moved.
        let recorded = match planned.plan {
            Plan::Replay(prepared) => Some(prepared),
            _ => None,
        };
        let pending = Pending {
            call,
            request,
            test,
            live: Some(recorded),
            notification: kind == Message::Notification,
        };
        return Begun::Forward(Some(Box::new(pending)));
    }
    match planned.plan {
        Plan::Fault(fault) => fault_answer(call, fault, message),
        Plan::Replay(prepared) => {
            let content_type = prepared
                .headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case("content-type"))
                .map(|(_, v)| v.clone());
            let steps = replayed_steps(call, &prepared);
            Begun::Replay {
                steps: live_ids(steps, message),
                content_type,
            }
        }
        Plan::Miss | Plan::Acknowledge if kind == Message::Notification => {
            call.unasked();
            Begun::Nothing
        }
        // A ping says the other end is alive whenever the client likes: answered, never missed.
        Plan::Miss | Plan::Acknowledge if route.upstream_path == "ping" => {
            call.unasked();
            Begun::Answer(json!({
                "jsonrpc": "2.0",
                "id": id_of(message),
                "result": {},
            }))
        }
        Plan::Miss | Plan::Acknowledge => {
            let hint = state.settings.record_hint.as_deref();
            let shown = route.shown(state.settings.normalizer.guard().scrubber());
            let (mut text, detail) =
                crate::explain::miss(&shown, &call, &request, hint, &state.settings.program);
            if let Some(tool) = protocol::tool(message) {
                text = text.replacen(
                    "(replay mode).",
                    &format!(
                        "(replay mode): MCP {} of tool {tool:?}.",
                        route.upstream_path
                    ),
                    1,
                );
            }
            call.end(Outcome::Miss, 404, Some(detail));
            Begun::Answer(protocol::miss_error(id_of(message), &text))
        }
        Plan::Forward(Save::Yes) => Begun::Forward(Some(Box::new(Pending {
            call,
            request,
            test,
            live: None,
            notification: kind == Message::Notification,
        }))),
        Plan::Forward(Save::PassOn) => {
            call.end(Outcome::Passthrough, 200, None);
            Begun::Forward(None)
        }
    }
}

/// A recording's steps, its replay journalled as a hit.
fn replayed_steps(mut call: Call, prepared: &cassettes::Prepared) -> Vec<Value> {
    call.bytes = Some(prepared.body.len() as u64);
    call.end(Outcome::Hit, 200, None);
    match serde_json::from_slice::<Value>(&prepared.body) {
        Ok(Value::Array(steps)) => steps,
        _ => Vec::new(),
    }
}

fn id_of(message: &Value) -> &Value {
    message.get("id").unwrap_or(&Value::Null)
}

async fn refusal_text(refused: Response<Body>) -> String {
    use http_body_util::BodyExt;
    let bytes = refused
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    serde_json::from_slice::<Value>(&bytes)
        .ok()
        .and_then(|v| {
            v.pointer("/error/message")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .unwrap_or_else(|| String::from_utf8_lossy(&bytes).into_owned())
}

/// The recorded steps with the request's response given the live request's id. The client's
/// answers stay as recorded: they are the shim's to wait for, never sent.
fn live_ids(steps: Vec<Value>, message: &Value) -> Vec<Value> {
    let Some(id) = message.get("id").filter(|id| !id.is_null()) else {
        return steps;
    };
    let token = message.pointer("/params/_meta/progressToken");
    let n = steps.len();
    steps
        .into_iter()
        .enumerate()
        .map(|(i, mut step)| {
            // The exchange ends with the request's response; a response before it answers a
            // request the client sent before this one.
            let last_response = i + 1 == n;
            if let Some(server) = step.get_mut("server") {
                if last_response && protocol::kind(server) == Some(Message::Response) {
                    *server = protocol::with_id(server.take(), id);
                }
                // Progress is reported against the token the live request gave.
                if let (Some(token), Some(Value::Object(params))) =
                    (token, server.get_mut("params"))
                {
                    if params.contains_key("progressToken") {
                        params.insert("progressToken".into(), token.clone());
                    }
                }
            }
            step
        })
        .collect()
}

/// What a fault does to a message: an MCP error, the server gone, a cut answer.
fn fault_answer(call: Call, fault: FaultKind, message: &Value) -> Begun {
    let begun = match &fault {
        FaultKind::Status { status, body, .. } => {
            let text = body
                .as_ref()
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .unwrap_or_else(|| format!("cargo-llmreplay: fault {status} for this test"));
            // A tool fails as tools do, with a result the model reads; any other method
            // with a JSON-RPC error.
            Begun::Answer(match protocol::tool(message) {
                Some(_) => json!({
                    "jsonrpc": "2.0",
                    "id": id_of(message),
                    "result": {"content": [{"type": "text", "text": text}], "isError": true},
                }),
                None => json!({
                    "jsonrpc": "2.0",
                    "id": id_of(message),
                    "error": {"code": -32_603, "message": text},
                }),
            })
        }
        FaultKind::Disconnect { .. } | FaultKind::Malformed | FaultKind::Delay { .. } => {
            Begun::Exit
        }
    };
    call.end(Outcome::Fault, 200, None);
    begun
}

/// Saves what the server answered to a forwarded exchange (steps in order); a live exchange
/// is compared with its recording instead, and a difference journalled.
pub(crate) async fn save(
    pending: Box<Pending>,
    steps: Vec<Value>,
    content_type: Option<&str>,
    started: Instant,
) -> Result<(), String> {
    let Pending {
        call,
        request,
        test,
        live,
        ..
    } = *pending;
    let mut response = protocol::steps_response(steps);
    if let Some(ct) = content_type {
        response.headers.insert("content-type".into(), ct.into());
    }
    let ms = started.elapsed().as_millis() as u64;
    let timing = Timing {
        ttfb_ms: ms,
        total_ms: ms,
    };
    if let Some(recorded) = live {
        compare_live(call, &request, response, recorded.as_deref(), &test);
        return Ok(());
    }
    let interaction = Interaction::recorded(call.key.clone(), request, response, timing);
    match crate::exchange::save(call, interaction, 200).await {
        // The client has its answer; the run fails at its end, naming it.
        Ok(()) | Err(crate::exchange::Unsaveable::Secret) => Ok(()),
        Err(crate::exchange::Unsaveable::Failed(failure)) => Err(failure),
    }
}

/// `--live mcp:NAME`: what the server answered now against the recording of the same message.
fn compare_live(
    call: Call,
    request: &RecordedRequest,
    live: cassettes::RecordedResponse,
    recorded: Option<&cassettes::Prepared>,
    test: &TestId,
) {
    let now = answers(&protocol::server_messages(&live));
    let detail = match recorded {
        None => Some(format!(
            "cargo-llmreplay: live MCP {} in test {test} has no recording to compare with",
            request.path
        )),
        Some(prepared) => {
            let steps = serde_json::from_slice::<Value>(&prepared.body).unwrap_or(Value::Null);
            let then = answers(
                &steps
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|s| s.get("server").cloned())
                    .collect::<Vec<_>>(),
            );
            (then != now).then(|| {
                let fields = cassettes::differing_fields(&then, &now);
                format!(
                    "cargo-llmreplay: the live MCP server answered {} in test {test} otherwise than its recording; differs at {}",
                    request.path,
                    fields.iter().take(8).cloned().collect::<Vec<_>>().join(", ")
                )
            })
        }
    };
    match detail {
        Some(message) => {
            tracing::warn!(target: "cargo_llmreplay::daemon", "{message}");
            call.end(Outcome::LiveDiffers, 200, Some(Detail::message(message)));
        }
        None => call.end(Outcome::Passthrough, 200, None),
    }
}

/// The results and errors of the responses among `messages`, ids left out: what a live server
/// is compared on.
fn answers(messages: &[Value]) -> Value {
    Value::Array(
        messages
            .iter()
            .filter(|m| protocol::kind(m) == Some(Message::Response))
            .map(|m| {
                let mut m = m.clone();
                if let Some(o) = m.as_object_mut() {
                    o.remove("id");
                }
                m
            })
            .collect(),
    )
}

impl Tickets {
    fn put(&self, pending: Box<Pending>) -> Result<u64, String> {
        let mut waiting = self.waiting.lock().expect("tickets lock");
        if waiting.len() >= MAX_TICKETS {
            return Err(format!("cargo-llmreplay: {MAX_TICKETS} MCP exchanges are waiting for their answers already"));
        }
        let ticket = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        waiting.insert(ticket, pending);
        Ok(ticket)
    }

    fn take(&self, ticket: u64) -> Option<Box<Pending>> {
        self.waiting.lock().expect("tickets lock").remove(&ticket)
    }
}

/// `POST …/__llmreplay/mcp?name=NAME&op=call|save[&ticket=N]` from the stdio shim: `call`
/// asks what to do with a client message; `save` brings the steps a forwarded one drew.
pub(crate) async fn control(
    state: &Arc<State>,
    test: TestId,
    query: &str,
    req: http::Request<Incoming>,
) -> Response<Body> {
    let param = |name: &str| {
        query.split('&').find_map(|kv| {
            let v = kv.strip_prefix(name)?.strip_prefix('=')?;
            Some(
                percent_encoding::percent_decode_str(v)
                    .decode_utf8_lossy()
                    .into_owned(),
            )
        })
    };
    let Some(name) = param("name") else {
        return text(
            StatusCode::BAD_REQUEST,
            "cargo-llmreplay: the MCP route needs ?name=<server name>".into(),
        );
    };
    let provider = match provider(&name, None, UpstreamSource::ConfigFile) {
        Ok(p) => p,
        Err(m) => return text(StatusCode::BAD_REQUEST, m),
    };
    let body = match read_message(state, req.into_body()).await {
        Ok(body) => body,
        Err(refused) => return refused,
    };
    let value: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            return text(
                StatusCode::BAD_REQUEST,
                format!("cargo-llmreplay: the MCP route takes JSON: {e}"),
            )
        }
    };
    match param("op").as_deref() {
        Some("open") => respond::json(json!({
            "mode": state.settings.mode.as_str(),
            "live": state.settings.live_mcp(provider.name.as_str()),
            "test": test.as_str(),
            // The shim caps a stdio line at it: a longer message could not be recorded.
            "body_bytes": state.settings.limits.body_bytes,
        })),
        Some("call") => {
            let started = Instant::now();
            let answer = match begin(state, test, provider, &value).await {
                Begun::Replay { steps, .. } => json!({"do": "replay", "steps": steps}),
                Begun::Forward(None) => json!({"do": "forward"}),
                Begun::Forward(Some(pending)) => {
                    match state.transports.get::<Tickets>().put(pending) {
                        Ok(ticket) => {
                            json!({"do": "forward", "ticket": ticket, "t0": started.elapsed().as_micros() as u64})
                        }
                        Err(m) => return text(StatusCode::SERVICE_UNAVAILABLE, m),
                    }
                }
                Begun::Answer(message) => json!({"do": "answer", "message": message}),
                Begun::Nothing => json!({"do": "nothing"}),
                Begun::Exit => json!({"do": "exit"}),
            };
            respond::json(answer)
        }
        Some("save") => {
            let Some(pending) = param("ticket")
                .and_then(|t| t.parse().ok())
                .and_then(|t| state.transports.get::<Tickets>().take(t))
            else {
                return text(
                    StatusCode::BAD_REQUEST,
                    "cargo-llmreplay: save needs the ticket its call was given, once".into(),
                );
            };
            let steps = match value {
                // The shim's server ended with this exchange open: it ends broken, saying so
                // (dropped, it would blame the client).
                Value::Array(steps)
                    if steps.is_empty() && param("ended").as_deref() == Some("server") =>
                {
                    let call = pending.call;
                    call.entry.note_unsaved();
                    call.end(
                        Outcome::Broken,
                        502,
                        Some(Detail::message(
                            "cargo-llmreplay: the MCP server ended before answering; nothing saved"
                                .into(),
                        )),
                    );
                    return respond::json(json!({"status": "ok"}));
                }
                // A notification the server said nothing after: nothing to keep, and nothing
                // broken (dropped, the call would blame the client, and keep a re-recorded
                // test's old recordings beside its new ones).
                Value::Array(steps) if steps.is_empty() && pending.notification => {
                    pending.call.unasked();
                    return respond::json(json!({"status": "ok"}));
                }
                // A request the server never answered (the client left first): dropped, it
                // ends broken, so its test keeps the recording it may still need.
                Value::Array(steps) if steps.is_empty() => {
                    drop(pending);
                    return respond::json(json!({"status": "ok"}));
                }
                Value::Array(steps) => steps,
                _ => {
                    return text(
                        StatusCode::BAD_REQUEST,
                        "cargo-llmreplay: save takes the steps as a JSON array".into(),
                    )
                }
            };
            let elapsed = param("ms").and_then(|m| m.parse::<u64>().ok()).unwrap_or(0);
            let started = Instant::now() - std::time::Duration::from_millis(elapsed);
            match save(pending, steps, None, started).await {
                Ok(()) => respond::json(json!({"status": "ok"})),
                Err(m) => text(StatusCode::INTERNAL_SERVER_ERROR, m),
            }
        }
        _ => text(
            StatusCode::BAD_REQUEST,
            "cargo-llmreplay: the MCP route's op is open, call or save".into(),
        ),
    }
}

/// An MCP message's bytes, within the body limit, or the answer that refuses it.
pub(crate) async fn read_message(state: &State, body: Incoming) -> Result<Bytes, Response<Body>> {
    let limits = &state.settings.limits;
    read_limited(body, limits.body_bytes, limits.header_read_timeout)
        .await
        .map_err(|e| match e {
            BodyError::TooLarge => text(StatusCode::PAYLOAD_TOO_LARGE, format!("cargo-llmreplay: an MCP message over the limit of {} bytes; raise [limits] body_mib in llmreplay.toml", limits.body_bytes)),
            BodyError::Idle(_) => text(StatusCode::REQUEST_TIMEOUT, "cargo-llmreplay: the MCP message stopped arriving".into()),
            BodyError::Broken(e) => text(StatusCode::BAD_REQUEST, format!("cargo-llmreplay: could not read the MCP message: {e}")),
        })
}

/// Answers built from bytes, for the HTTP transport.
fn answer(status: StatusCode, content_type: Option<&str>, body: Bytes) -> Response<Body> {
    let mut builder = Response::builder().status(status);
    if let Some(ct) = content_type {
        builder = builder.header(CONTENT_TYPE, ct);
    }
    builder.body(respond::full(body)).expect("a valid answer")
}

pub(crate) mod http_transport;
pub(crate) mod streams;

/// A test said it ended: its MCP sessions over HTTP end with it.
pub(crate) fn end_test(state: &State, test: &cassettes::TestId) {
    state.transports.get::<streams::Streams>().end_test(test);
}
