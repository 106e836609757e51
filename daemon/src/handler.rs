//! One request, start to end: control routes, then route -> key -> store, and from there a
//! replay (prepared bytes), a miss (an error the SDK will not retry, naming what to do), or a
//! proxied call whose answer is forwarded as it arrives and recorded when it ends.

use crate::config::Mode;
use crate::faults::{FaultKind, FaultSpec};
use crate::journal::{Call, Detail, Outcome};
use crate::provider::{Kind, NOT_FORWARDED, NOT_RECORDED};
use crate::route::{self, Route};
use crate::State;
use bytes::Bytes;
use cassettes::{
    Interaction, Key, Prepared, RecordOutcome, RecordedRequest, RecordedResponse, StreamFormat,
    Summary, TestId,
};
use http::header::{ACCEPT_ENCODING, CONTENT_TYPE};
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use std::collections::BTreeMap;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

pub type Body = UnsyncBoxBody<Bytes, io::Error>;

/// The answer that ends a request early, boxed: it is far larger than what succeeds.
pub(crate) type Refused = Box<Response<Body>>;

/// Longest prompt preview in a miss message.
const PROMPT_PREVIEW: usize = 200;

pub async fn handle(state: Arc<State>, req: Request<Incoming>) -> Response<Body> {
    if let Some(port) = state.loopback_port {
        if !loopback_host(req.headers().get(http::header::HOST), port) {
            return text(
                StatusCode::FORBIDDEN,
                format!("cargo-llmreplay: the Host header must name this daemon (127.0.0.1:{port}, localhost:{port} or [::1]:{port}); a web page reaching it through another name is refused. To serve other hosts, bind one with --addr"),
            );
        }
    }
    if let Some(prefix) = req.uri().path().strip_suffix("/__llmreplay/faults") {
        let prefix = prefix.to_string();
        return faults_route(&state, &prefix, req).await;
    }
    if let Some(rest) = req.uri().path().strip_prefix("/__llmreplay/") {
        let rest = rest.to_string();
        return control(&state, &rest, req).await;
    }
    // Test names are UTF-8 (a Playwright title has `›`); anything else cannot name a folder.
    let test_header = match req.headers().get("x-test-id").map(|v| std::str::from_utf8(v.as_bytes())) {
        None => None,
        Some(Ok(id)) => Some(id),
        Some(Err(_)) => {
            return text(
                StatusCode::BAD_REQUEST,
                "cargo-llmreplay: the X-Test-Id header is not UTF-8; send the test's name as UTF-8 text (or percent-encoded in the /t/<test id>/ path)".into(),
            )
        }
    };
    let route = match route::resolve(req.uri().path(), test_header, &state.settings.providers) {
        Ok(route) => route,
        Err(e) => return text(e.status(), e.message()),
    };
    if crate::session::is_upgrade(&req) {
        return crate::session::handle(state, route, req).await;
    }
    let kind = route.provider.kind;
    let (parts, body) = match read_body(req, kind, state.settings.limits.body_bytes).await {
        Ok(read) => read,
        Err(refused) => return refused,
    };
    let content_type = parts
        .headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    let request = state.settings.normalizer.request_shared(
        parts.method.as_str(),
        &route.upstream_path,
        parts.uri.query(),
        content_type,
        &body,
        providers::secret_params(),
    );
    let key = Key::of(&request);
    let call = match call_for(&state, &route, parts.method.clone(), key) {
        Ok(call) => call,
        Err(refused) => return *refused,
    };
    // With no fault registered this is one atomic load.
    match state.faults.take(&route.test, &route.provider.name) {
        None => {}
        Some(FaultKind::Delay { ms }) => tokio::time::sleep(Duration::from_millis(ms)).await,
        Some(fault) => {
            let recorded = call.entry.peek(&call.key, state.settings.allow_repeats);
            return answer_fault(&state, call, kind, fault, recorded.ok().flatten());
        }
    }
    if state.settings.mode == Mode::Passthrough {
        let recording = Recording { call, request };
        return proxy(&state, &parts, &route, body, recording, false).await;
    }
    let (call, hit) = match next_in_sequence(&state, call, kind) {
        Ok(found) => found,
        Err(refused) => return *refused,
    };
    match (state.settings.mode, hit) {
        (Mode::Replay | Mode::RecordMissing, Some(prepared)) => {
            state.journal.log(call, Outcome::Hit, prepared.status, None);
            replay(prepared, state.settings.realtime).await
        }
        (Mode::Replay, None) => miss(&state, &route, call, request),
        _ => {
            let recording = Recording { call, request };
            proxy(&state, &parts, &route, body, recording, true).await
        }
    }
}

/// The journal's record of a request to `route` with `key`, before its place in the sequence
/// is known; a cassette the store cannot open refuses it in the provider's shape.
pub(crate) fn call_for(
    state: &State,
    route: &Route,
    method: Method,
    key: Key,
) -> Result<Call, Refused> {
    let entry = state
        .store
        .entry(&route.test, &route.provider.name)
        .map_err(|e| {
            Box::new(provider_error(
                route.provider.kind,
                StatusCode::BAD_REQUEST,
                "llmreplay_error",
                &e.to_string(),
            ))
        })?;
    Ok(Call {
        entry,
        method,
        path: route.upstream_path.clone(),
        key,
        ordinal: 0,
    })
}

/// The recording this call gets, if any, and its place in the test's sequence: replay never
/// starts a sequence for a key with no recording; a cassette that cannot be read is journalled
/// and refused in the provider's shape.
pub(crate) fn next_in_sequence(
    state: &State,
    mut call: Call,
    kind: Kind,
) -> Result<(Call, Option<Arc<Prepared>>), Refused> {
    let repeat = state.settings.allow_repeats;
    let lookup = match state.settings.mode {
        Mode::Replay => call.entry.next_recorded(&call.key, repeat),
        _ => call.entry.next(&call.key, repeat),
    };
    match lookup {
        Ok(lookup) => {
            call.ordinal = lookup.ordinal;
            Ok((call, lookup.hit))
        }
        Err(e) => {
            let message = e.to_string();
            state.journal.log(
                call,
                Outcome::Error,
                400,
                Some(Detail::message(message.clone())),
            );
            Err(Box::new(provider_error(
                kind,
                StatusCode::BAD_REQUEST,
                "llmreplay_error",
                &message,
            )))
        }
    }
}

/// Answers a request with the fault it drew, from the recording it would have got (if any),
/// without moving the sequence, forwarding or saving anything.
fn answer_fault(
    state: &State,
    call: Call,
    kind: Kind,
    fault: FaultKind,
    recorded: Option<Arc<Prepared>>,
) -> Response<Body> {
    let response = match fault {
        FaultKind::Status {
            status,
            headers,
            body,
        } => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let bytes = body.unwrap_or_else(|| {
                let shape = kind.family().error_body(
                    status.as_u16(),
                    "llmreplay_fault",
                    &format!("cargo-llmreplay: a fault this test asked for ({})", status),
                );
                serde_json::to_vec(&shape).expect("JSON serialises").into()
            });
            let mut b = Response::builder()
                .status(status)
                .header(CONTENT_TYPE, "application/json");
            for (name, value) in headers {
                b = b.header(name, value);
            }
            b.body(full(bytes))
        }
        FaultKind::Disconnect { after_chunks } => {
            let (head, pieces) = recorded_pieces(recorded.as_deref());
            let items: Vec<Result<Frame<Bytes>, io::Error>> = pieces
                .into_iter()
                .take(after_chunks)
                .map(|p| Ok(Frame::data(p)))
                .collect();
            // An error ends the body without its end: the connection closes mid-answer, as a
            // real one does. The yield before it lets hyper flush what came first.
            let sent = !items.is_empty();
            let cut = futures_util::stream::once(async move {
                if sent {
                    tokio::task::yield_now().await;
                }
                Err(io::Error::other("a fault this test asked for: disconnect"))
            });
            let body = futures_util::StreamExt::chain(futures_util::stream::iter(items), cut);
            head.body(BodyExt::boxed_unsync(StreamBody::new(body)))
        }
        FaultKind::Malformed => {
            let (head, pieces) = recorded_pieces(recorded.as_deref());
            let streamed = recorded.as_ref().is_some_and(|p| p.chunks.is_some());
            let mut bytes: Vec<u8> = Vec::new();
            if streamed {
                // The first event as recorded, then one that breaks off mid-JSON.
                bytes.extend_from_slice(pieces.first().map_or(&b""[..], |p| &p[..]));
                bytes.extend_from_slice(b"data: {\"choices\": [{\"delta\": \n\n");
            } else {
                bytes.extend_from_slice(b"{\"malformed\": ");
            }
            head.body(full(bytes.into()))
        }
        FaultKind::Delay { .. } => unreachable!("a delay is answered as usual"),
    };
    let response = response.unwrap_or_else(|e| {
        text(
            StatusCode::BAD_REQUEST,
            format!("cargo-llmreplay: the fault's headers are not valid: {e}"),
        )
    });
    state
        .journal
        .log(call, Outcome::Fault, response.status().as_u16(), None);
    response
}

/// The recorded status and headers, and the answer in pieces: its stream chunks, or its body
/// in 1 KiB slices. With no recording, a 200 of JSON and nothing in it.
fn recorded_pieces(recorded: Option<&Prepared>) -> (http::response::Builder, Vec<Bytes>) {
    let Some(p) = recorded else {
        let head = Response::builder().header(CONTENT_TYPE, "application/json");
        return (head, Vec::new());
    };
    let mut head = Response::builder().status(p.status);
    for (name, value) in &p.headers {
        head = head.header(name, value);
    }
    let pieces = match &p.chunks {
        Some(chunks) => chunks.iter().map(|(b, _)| b.clone()).collect(),
        None => (0..p.body.len())
            .step_by(1024)
            .map(|i| p.body.slice(i..(i + 1024).min(p.body.len())))
            .collect(),
    };
    (head, pieces)
}

/// `POST .../__llmreplay/faults` registers a fault for the test of the base URL (or of
/// `X-Test-Id`, or `?test=`); `DELETE` clears its faults.
async fn faults_route(state: &State, prefix: &str, req: Request<Incoming>) -> Response<Body> {
    let from_path = match prefix.strip_prefix("/t/") {
        Some(encoded) if !encoded.contains('/') => {
            match percent_encoding::percent_decode_str(encoded).decode_utf8() {
                Ok(id) => Some(id.into_owned()),
                Err(_) => {
                    return text(StatusCode::BAD_REQUEST, "cargo-llmreplay: the test id in the path is not UTF-8 once percent-decoded".into())
                }
            }
        }
        _ if prefix.is_empty() => None,
        _ => {
            return text(StatusCode::NOT_FOUND, format!("cargo-llmreplay: faults live at <LLMREPLAY_BASE_URL>/__llmreplay/faults, not under {prefix:?}"))
        }
    };
    let test = from_path
        .or_else(|| {
            req.uri().query().and_then(|q| {
                q.split('&')
                    .find_map(|kv| kv.strip_prefix("test="))
                    .map(|v| {
                        percent_encoding::percent_decode_str(v)
                            .decode_utf8_lossy()
                            .into_owned()
                    })
            })
        })
        .or_else(|| {
            req.headers()
                .get("x-test-id")
                .and_then(|v| std::str::from_utf8(v.as_bytes()).ok())
                .map(str::to_string)
        });
    let Some(test) = test else {
        return text(StatusCode::BAD_REQUEST, "cargo-llmreplay: a fault belongs to a test: post it to <LLMREPLAY_BASE_URL>/__llmreplay/faults (the per-test base URL), or send X-Test-Id".into());
    };
    let test = TestId::new(test);
    match *req.method() {
        Method::DELETE => {
            let cleared = state.faults.clear(&test);
            json(serde_json::json!({ "cleared": cleared }))
        }
        Method::POST => {
            let limit = state.settings.limits.body_bytes;
            let body = match http_body_util::Limited::new(req.into_body(), limit as usize)
                .collect()
                .await
            {
                Ok(b) => b.to_bytes(),
                Err(e) if e.is::<http_body_util::LengthLimitError>() => {
                    return text(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        format!("cargo-llmreplay: the fault is over the body limit of {limit} bytes ([limits] body_mib in llmreplay.toml)"),
                    )
                }
                Err(e) => {
                    return text(
                        StatusCode::BAD_REQUEST,
                        format!("cargo-llmreplay: could not read the fault: {e}"),
                    )
                }
            };
            let spec: FaultSpec = match serde_json::from_slice(&body) {
                Ok(spec) => spec,
                Err(e) => return text(StatusCode::BAD_REQUEST, format!("cargo-llmreplay: the fault is not valid: {e}. Send JSON such as {{\"status\": 429, \"headers\": {{\"retry-after\": \"1\"}}}}")),
            };
            if spec.test.is_some() {
                return text(StatusCode::BAD_REQUEST, "cargo-llmreplay: \"test\" belongs in [[faults]] of llmreplay.toml; a posted fault is for the test of its URL".into());
            }
            let names: Vec<&str> = state
                .settings
                .providers
                .iter()
                .map(|p| p.name.as_str())
                .collect();
            match state.faults.add(test, spec, &names) {
                Ok(id) => {
                    let mut r = json(serde_json::json!({ "id": id }));
                    *r.status_mut() = StatusCode::CREATED;
                    r
                }
                Err(message) => text(
                    StatusCode::BAD_REQUEST,
                    format!("cargo-llmreplay: {message}"),
                ),
            }
        }
        _ => text(
            StatusCode::METHOD_NOT_ALLOWED,
            "cargo-llmreplay: POST a fault, or DELETE to clear them".into(),
        ),
    }
}

/// The request's head and whole body, or the answer that refuses it: 413 in the provider's
/// shape past `limit` bytes (said by `content-length`, or counted as the body arrives).
async fn read_body(
    req: Request<Incoming>,
    kind: Kind,
    limit: u64,
) -> Result<(http::request::Parts, Bytes), Response<Body>> {
    let too_large = || {
        provider_error(
            kind,
            StatusCode::PAYLOAD_TOO_LARGE,
            "llmreplay_body_too_large",
            &format!("cargo-llmreplay: the request body is over the limit of {limit} bytes; raise [limits] body_mib in llmreplay.toml if this is meant"),
        )
    };
    let declared = req
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(too_large());
    }
    let (parts, body) = req.into_parts();
    match http_body_util::Limited::new(body, limit as usize)
        .collect()
        .await
    {
        Ok(b) => Ok((parts, b.to_bytes())),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(too_large()),
        Err(e) => Err(text(
            StatusCode::BAD_REQUEST,
            format!("cargo-llmreplay: could not read the request body: {e}"),
        )),
    }
}

async fn replay(prepared: Arc<Prepared>, realtime: bool) -> Response<Body> {
    let mut response = Response::builder().status(prepared.status);
    for (name, value) in &prepared.headers {
        response = response.header(name, value);
    }
    let body = match (&prepared.chunks, realtime) {
        (Some(chunks), true) => paced(chunks.clone()),
        (None, true) => {
            tokio::time::sleep(Duration::from_millis(prepared.ttfb_ms)).await;
            full(prepared.body.clone())
        }
        // One write for the whole stream: its chunks are already in order.
        (_, false) => full(prepared.body.clone()),
    };
    response.body(body).unwrap_or_else(|e| {
        text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cargo-llmreplay: a recorded header is not valid: {e}"),
        )
    })
}

/// Sends each chunk at its recorded time after the request arrived.
fn paced(chunks: Vec<(Bytes, u64)>) -> Body {
    let start = tokio::time::Instant::now();
    let stream = futures_util::stream::unfold(chunks.into_iter(), move |mut rest| async move {
        let (bytes, at_ms) = rest.next()?;
        tokio::time::sleep_until(start + Duration::from_millis(at_ms)).await;
        Some((Ok(Frame::data(bytes)), rest))
    });
    BodyExt::boxed_unsync(StreamBody::new(stream))
}

fn miss(state: &State, route: &Route, call: Call, request: RecordedRequest) -> Response<Body> {
    let (entry, method, ordinal) = (&call.entry, &call.method, call.ordinal);
    let closest = entry.closest(&request);
    let model = request.model();
    let prompt = request
        .last_user_text()
        .map(|p| p.chars().take(PROMPT_PREVIEW).collect::<String>());
    let mut message = format!(
        "cargo-llmreplay: no recording for this request (replay mode).\n  test: {}\n  request: {} {} {}{}\n",
        route.test,
        route.provider.name,
        method,
        route.upstream_path,
        model.as_deref().map(|m| format!(", model {m}")).unwrap_or_default(),
    );
    if let Some(p) = &prompt {
        message.push_str(&format!("  last user message: {p:?}\n"));
    }
    match &closest {
        Some(c) if c.differing.is_empty() => message.push_str(&format!(
            "  the same request is recorded, but this is call #{} with it and {} holds fewer; record the extra calls\n",
            ordinal + 1,
            entry.path.display()
        )),
        Some(c) => message.push_str(&format!(
            "  closest recording: #{} in {}, differs at {}\n",
            c.index + 1,
            entry.path.display(),
            c.differing.iter().take(8).cloned().collect::<Vec<_>>().join(", ")
        )),
        None => message.push_str(&format!("  no recordings for this test in {}\n", entry.path.display())),
    }
    message.push_str(&format!("  record it with: {}", record_hint(&route.test)));
    let detail = Detail {
        model,
        prompt,
        closest: closest.map(|c| c.differing),
        message: Some(message.clone()),
    };
    state.journal.log(call, Outcome::Miss, 404, Some(detail));
    provider_error(
        route.provider.kind,
        StatusCode::NOT_FOUND,
        "llmreplay_missing_recording",
        &message,
    )
}

/// The command that records a missing request, and the daemon's own way for other clients.
fn record_hint(test: &TestId) -> String {
    let command = crate::record_command(test.as_str());
    if test.as_str().contains('$') {
        format!(
            "{command} (with a daemon of your own: cargo llmreplay serve --mode record-missing)"
        )
    } else {
        format!("LLMREPLAY_MODE=record-missing ({command})")
    }
}

/// A request on its way upstream, and what will be recorded for it.
struct Recording {
    call: Call,
    request: RecordedRequest,
}

async fn proxy(
    state: &Arc<State>,
    parts: &http::request::Parts,
    route: &Route,
    body: Bytes,
    recording: Recording,
    save: bool,
) -> Response<Body> {
    let kind = route.provider.kind;
    let uri = match route
        .provider
        .upstream_uri(&route.upstream_path, parts.uri.query())
    {
        Ok(uri) => uri,
        Err(message) => {
            return upstream_failed(
                state,
                recording.call,
                kind,
                StatusCode::BAD_GATEWAY,
                "llmreplay_no_upstream",
                message,
            )
        }
    };
    // What messages may say of the upstream: never its userinfo nor a secret in its query.
    let root =
        providers::redact::url(route.provider.upstream.as_deref().unwrap_or("")).into_owned();
    let url = uri.to_string();
    if let Err(message) = route
        .provider
        .may_send_credentials(&uri, &state.settings.allow_credentials_to)
    {
        return upstream_failed(
            state,
            recording.call,
            kind,
            StatusCode::BAD_GATEWAY,
            "llmreplay_credentials_refused",
            message,
        );
    }
    let mut upstream = Request::builder().method(parts.method.clone()).uri(uri);
    for (name, value) in &parts.headers {
        if !NOT_FORWARDED.contains(&name.as_str()) {
            upstream = upstream.header(name, value);
        }
    }
    // Cassettes hold text, not gzip.
    upstream = upstream.header(ACCEPT_ENCODING, "identity");
    let mut upstream = match upstream.body(Full::new(body.clone())) {
        Ok(r) => r,
        Err(e) => {
            return provider_error(
                kind,
                StatusCode::BAD_REQUEST,
                "llmreplay_error",
                &format!(
                    "cargo-llmreplay: bad upstream request {}: {e}",
                    providers::redact::url(&url)
                ),
            )
        }
    };
    if kind == Kind::Bedrock {
        if let Err(message) = crate::sigv4::resign(&mut upstream, &body) {
            let message = format!("cargo-llmreplay: {message}");
            return upstream_failed(
                state,
                recording.call,
                kind,
                StatusCode::BAD_GATEWAY,
                "llmreplay_cannot_sign",
                message,
            );
        }
    }
    let started = Instant::now();
    let idle = state.settings.limits.idle_timeout;
    let answer = match tokio::time::timeout(idle, state.client.request(upstream)).await {
        Ok(Ok(answer)) => answer,
        Err(_) => {
            let message = format!(
                "cargo-llmreplay: the {} upstream at {root} sent nothing for {}s; nothing was saved. Raise [upstream] idle_timeout_s in llmreplay.toml if it is this slow",
                route.provider.name,
                idle.as_secs_f64()
            );
            state.journal.log(
                recording.call,
                Outcome::Error,
                504,
                Some(Detail::message(message.clone())),
            );
            return provider_error(
                kind,
                StatusCode::GATEWAY_TIMEOUT,
                "llmreplay_upstream_timeout",
                &message,
            );
        }
        Ok(Err(e)) if timed_out(&e) => {
            let message = format!(
                "cargo-llmreplay: the {} upstream at {root} did not accept a connection within {}s; nothing was saved. Raise [upstream] connect_timeout_s in llmreplay.toml, or check the upstream",
                route.provider.name,
                state.settings.limits.connect_timeout.as_secs_f64()
            );
            return upstream_failed(
                state,
                recording.call,
                kind,
                StatusCode::GATEWAY_TIMEOUT,
                "llmreplay_upstream_timeout",
                message,
            );
        }
        Ok(Err(e)) => {
            let message = match state.client.explain(&url, &e) {
                Some(why) => format!(
                    "cargo-llmreplay: could not reach the {} upstream at {root}: {why}",
                    route.provider.name
                ),
                None => format!(
                    "cargo-llmreplay: could not reach the {} upstream at {}: {}. Check --upstream {}=URL or [providers.{}] upstream",
                    route.provider.name,
                    root,
                    providers::redact::text(&format!("{e:?}")),
                    route.provider.name,
                    route.provider.name
                ),
            };
            return upstream_failed(
                state,
                recording.call,
                kind,
                StatusCode::BAD_GATEWAY,
                "llmreplay_upstream_unreachable",
                message,
            );
        }
    };
    let headers_at = started.elapsed();
    let status = answer.status();
    let (answer_parts, answer_body) = answer.into_parts();
    let mut response = Response::builder().status(status);
    for (name, value) in &answer_parts.headers {
        if !matches!(
            name.as_str(),
            "connection" | "keep-alive" | "transfer-encoding" | "content-length"
        ) {
            response = response.header(name, value);
        }
    }
    // Rate limits, server errors and refused keys reach the client but are never saved: a
    // wrong key must not be replayed forever.
    let refused = matches!(status.as_u16(), 401 | 403 | 407);
    if !save || status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() || refused {
        let detail = (save && refused).then(|| {
            let vars = route.provider.key_vars().join(" or ");
            let message = format!(
                "cargo-llmreplay: the {} upstream answered {status} for {} {}: not saved. Check the key in {vars} (and a proxy's credentials for 407)",
                route.provider.name, parts.method, route.upstream_path
            );
            tracing::warn!("{message}");
            Detail::message(message)
        });
        state.journal.log(
            recording.call,
            Outcome::Passthrough,
            status.as_u16(),
            detail,
        );
        return response
            .body(BodyExt::boxed_unsync(answer_body.map_err(io::Error::other)))
            .expect("headers copied from a valid response");
    }
    let format = stream_format(&answer_parts.headers);
    let headers = recordable_headers(&answer_parts.headers, &state.settings.redact_headers);
    let (tx, mut rx) = mpsc::channel::<Result<Frame<Bytes>, io::Error>>(64);
    let capture = Capture {
        state: state.clone(),
        recording,
        status: status.as_u16(),
        headers,
        format,
        started,
        headers_at,
    };
    tokio::spawn(capture.run(answer_body, tx));
    // No content-length: the body ends only once the recording is on disk.
    let body = StreamBody::new(futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx)));
    response
        .body(BodyExt::boxed_unsync(body))
        .expect("headers copied from a valid response")
}

/// A request that got no answer from upstream: journalled as an error, answered with `status`
/// in the provider's shape.
fn upstream_failed(
    state: &State,
    call: Call,
    kind: Kind,
    status: StatusCode,
    code: &str,
    message: String,
) -> Response<Body> {
    state.journal.log(
        call,
        Outcome::Error,
        status.as_u16(),
        Some(Detail::message(message.clone())),
    );
    provider_error(kind, status, code, &message)
}

/// Whether a client error comes from a timeout somewhere in its chain (the connect timeout).
fn timed_out(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(e);
    while let Some(err) = next {
        if err
            .downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::TimedOut)
        {
            return true;
        }
        next = err.source();
    }
    false
}

/// Whether a `Host` header names this daemon on loopback: `127.0.0.1`, `localhost` or `[::1]`,
/// with its port (or none, as a client on port 80 would send).
fn loopback_host(host: Option<&http::HeaderValue>, port: u16) -> bool {
    let Some(value) = host else {
        // HTTP/1.0 clients may send none; a browser always does.
        return true;
    };
    let Ok(host) = value.to_str() else {
        return false;
    };
    let (name, given) = match host.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((addr, rest)) => (format!("[{addr}]"), rest.strip_prefix(':')),
            None => return false,
        },
        None => match host.split_once(':') {
            Some((name, p)) => (name.to_string(), Some(p)),
            None => (host.to_string(), None),
        },
    };
    let port_ok = given.is_none_or(|p| p.parse::<u16>() == Ok(port));
    port_ok
        && matches!(
            name.to_ascii_lowercase().as_str(),
            "127.0.0.1" | "localhost" | "[::1]"
        )
}

/// The response headers a cassette keeps: no secrets, cookies, account ids or transfer details.
pub(crate) fn recordable_headers(
    headers: &http::HeaderMap,
    redact: &[String],
) -> BTreeMap<String, String> {
    headers
        .iter()
        .filter(|(name, _)| {
            let name = name.as_str();
            !NOT_RECORDED.contains(&name)
                && !providers::secret_headers().contains(&name)
                && !redact.iter().any(|r| r == name)
        })
        .map(|(name, value)| {
            (
                name.as_str().to_string(),
                String::from_utf8_lossy(value.as_bytes()).into_owned(),
            )
        })
        .collect()
}

/// The recorded form of a whole answer: a stream's events, or its body.
pub(crate) fn recorded_response(
    status: u16,
    headers: BTreeMap<String, String>,
    format: Option<StreamFormat>,
    frames: &[(Bytes, u64)],
) -> RecordedResponse {
    match format {
        Some(format) => RecordedResponse::with_stream(status, headers, format, frames),
        None => {
            let bytes = frames
                .iter()
                .map(|(b, _)| &b[..])
                .collect::<Vec<_>>()
                .concat();
            RecordedResponse::with_body(status, headers, &bytes)
        }
    }
}

/// The stream format of an answer from its content type; none for a compressed answer, which
/// is kept whole as the bytes received.
pub(crate) fn stream_format(headers: &http::HeaderMap) -> Option<StreamFormat> {
    if headers
        .get(http::header::CONTENT_ENCODING)
        .is_some_and(|e| !e.as_bytes().eq_ignore_ascii_case(b"identity"))
    {
        return None;
    }
    let ct = headers
        .get(CONTENT_TYPE)?
        .to_str()
        .ok()?
        .to_ascii_lowercase();
    if ct.starts_with("text/event-stream") {
        Some(StreamFormat::Sse)
    } else if ct.starts_with("application/x-ndjson") || ct.starts_with("application/jsonl") {
        Some(StreamFormat::Ndjson)
    } else {
        None
    }
}

/// Forwards an upstream answer frame by frame while keeping a copy, then records it.
struct Capture {
    state: Arc<State>,
    recording: Recording,
    status: u16,
    headers: BTreeMap<String, String>,
    format: Option<StreamFormat>,
    started: Instant,
    headers_at: Duration,
}

impl Capture {
    async fn run(self, body: Incoming, tx: mpsc::Sender<Result<Frame<Bytes>, io::Error>>) {
        let Capture {
            state,
            recording: Recording { call, request },
            status,
            headers,
            format,
            started,
            headers_at,
        } = self;
        let idle = state.settings.limits.idle_timeout;
        let forward = |data: Bytes| {
            let tx = tx.clone();
            // A client that went away does not stop the recording of a complete answer.
            async move {
                let _ = tx.send(Ok(Frame::data(data))).await;
            }
        };
        let captured = match crate::capture::capture(body, started, headers_at, idle, forward).await
        {
            Ok(captured) => captured,
            Err(e) => {
                let message = format!("cargo-llmreplay: the upstream answer broke off: {e}; passed on broken and not saved");
                state.journal.log(
                    call,
                    Outcome::Broken,
                    status,
                    Some(Detail::message(message)),
                );
                let _ = tx.send(Err(e)).await;
                return;
            }
        };
        let (response, timing) = captured.into_response(status, headers, format);
        let interaction = Interaction {
            key: call.key.clone(),
            seal: None,
            request,
            summary: Summary::of(&response),
            response,
            timing: Some(timing),
        };
        let (entry, ordinal) = (call.entry.clone(), call.ordinal);
        let written = tokio::task::spawn_blocking(move || entry.record(ordinal, interaction)).await;
        let failure = match written {
            Ok(Ok(outcome)) => {
                let outcome = match outcome {
                    RecordOutcome::Appended => Outcome::Recorded,
                    RecordOutcome::Replaced => Outcome::Replaced,
                    RecordOutcome::Unchanged => Outcome::Unchanged,
                };
                state.journal.log(call, outcome, status, None);
                return;
            }
            Ok(Err(e)) => format!("cargo-llmreplay: the answer was not saved: {e}"),
            Err(e) => format!("cargo-llmreplay: recording task failed: {e}"),
        };
        tracing::error!("{failure}");
        state.journal.log(
            call,
            Outcome::Error,
            status,
            Some(Detail::message(failure.clone())),
        );
        // Fail the client's read, so the test cannot pass on an unsaved recording.
        let _ = tx.send(Err(io::Error::other(failure))).await;
    }
}

async fn control(state: &State, rest: &str, req: Request<Incoming>) -> Response<Body> {
    let param = |name: &str| {
        req.uri()
            .query()
            .and_then(|q| {
                q.split('&')
                    .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            })
            .map(|v| {
                percent_encoding::percent_decode_str(v)
                    .decode_utf8_lossy()
                    .into_owned()
            })
    };
    let test = || {
        param("test").or_else(|| {
            req.headers()
                .get("x-test-id")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        })
    };
    match (req.method(), rest) {
        (&Method::GET, "health") => json(serde_json::json!({
            "status": "ok",
            "mode": state.settings.mode.as_str(),
            "cassette_dir": state.settings.cassette_dir.display().to_string(),
            "version": env!("CARGO_PKG_VERSION"),
        })),
        (&Method::GET, "stats") => json(serde_json::to_value(state.journal.stats()).expect("stats serialise")),
        (&Method::GET, "journal") => Response::builder()
            .header(CONTENT_TYPE, "application/json")
            .body(full(state.journal.to_json().into()))
            .expect("static headers"),
        (&Method::POST, "begin") => match test() {
            Some(t) => {
                state.journal.begin(&t);
                let test = TestId::new(t);
                state.store.reset_test(&test);
                state.faults.reset(&test);
                json(serde_json::json!({ "status": "ok" }))
            }
            None => text(StatusCode::BAD_REQUEST, "cargo-llmreplay: begin needs ?test=<test id> or an X-Test-Id header".into()),
        },
        (&Method::POST, "listed") => {
            let binary = param("binary").unwrap_or_default();
            match req.into_body().collect().await {
                Ok(body) => {
                    let names = String::from_utf8_lossy(&body.to_bytes()).into_owned();
                    state.journal.listed(&binary, names.lines());
                    json(serde_json::json!({ "status": "ok" }))
                }
                Err(e) => text(StatusCode::BAD_REQUEST, format!("cargo-llmreplay: could not read the list: {e}")),
            }
        }
        _ => text(
            StatusCode::NOT_FOUND,
            format!("cargo-llmreplay: no control route {} /__llmreplay/{rest}; there are GET health, stats, journal and POST begin, listed, faults", req.method()),
        ),
    }
}

/// An empty body.
pub(crate) fn empty() -> Body {
    full(Bytes::new())
}

fn full(bytes: Bytes) -> Body {
    BodyExt::boxed_unsync(Full::new(bytes).map_err(|never| match never {}))
}

fn json(value: serde_json::Value) -> Response<Body> {
    Response::builder()
        .header(CONTENT_TYPE, "application/json")
        .body(full(
            serde_json::to_vec(&value).expect("JSON serialises").into(),
        ))
        .expect("static headers")
}

fn text(status: StatusCode, message: String) -> Response<Body> {
    Response::builder()
        .status(status)
        .header(CONTENT_TYPE, "text/plain; charset=utf-8")
        .body(full(message.into()))
        .expect("static headers")
}

pub(crate) fn provider_error(
    kind: Kind,
    status: StatusCode,
    code: &str,
    message: &str,
) -> Response<Body> {
    let body = kind.family().error_body(status.as_u16(), code, message);
    Response::builder()
        .status(status)
        .header(CONTENT_TYPE, "application/json")
        .body(full(
            serde_json::to_vec(&body).expect("JSON serialises").into(),
        ))
        .expect("static headers")
}

#[cfg(test)]
mod tests {
    use super::loopback_host;
    use http::HeaderValue;

    #[test]
    fn only_loopback_names_of_this_port_pass() {
        let ok = |h: &str| loopback_host(Some(&HeaderValue::from_str(h).unwrap()), 4090);
        for good in [
            "127.0.0.1:4090",
            "localhost:4090",
            "LOCALHOST:4090",
            "[::1]:4090",
            "localhost",
        ] {
            assert!(ok(good), "{good}");
        }
        for bad in [
            "evil.example:4090",
            "127.0.0.1:4091",
            "attacker.localhost.evil:4090",
            "[::1]:80",
            "127.0.0.2:4090",
            "localhost:x",
        ] {
            assert!(!ok(bad), "{bad}");
        }
        assert!(loopback_host(None, 4090), "HTTP/1.0 without Host");
    }
}
