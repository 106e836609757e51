//! One exchange, recorded or replayed, for HTTP requests and WebSocket sessions alike: the
//! request keyed, its place in the test's sequence, the fault it draws, its recording replayed
//! or a miss explained, and a new recording saved and journalled. Forwarding is `proxy`'s;
//! building answers is `respond`'s.

use crate::call::Call;
use crate::faults::FaultKind;
use crate::journal::{Detail, Outcome};
use crate::plan::{plan, Form, Plan, Save};
use crate::provider::Kind;
use crate::proxy::Forwarded;
use crate::respond::{provider_error, text, Body};
use crate::route::Route;
use crate::state::State;
use bytes::Bytes;
use cassettes::{Interaction, Key, RecordedRequest, StreamFormat};
use http::header::CONTENT_TYPE;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use std::collections::BTreeMap;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Bodies up to this size are keyed on the async worker that read them; larger ones with the
/// worker's other tasks handed to another thread.
const KEY_ON_WORKER: usize = 64 << 10;

/// One HTTP exchange on `route`: the request read and keyed, then a fault it drew, its
/// recording replayed, a miss, or the request forwarded (and its answer recorded).
pub(crate) async fn http(
    state: Arc<State>,
    route: Route,
    req: Request<Incoming>,
) -> Response<Body> {
    let (parts, body) = match read_request(&state, &route, req).await {
        Ok(read) => read,
        Err(refused) => return refused,
    };
    http_read(state, route, parts, body).await
}

/// The request's head and whole body, within the limits, or the answer that refuses it.
pub(crate) async fn read_request(
    state: &State,
    route: &Route,
    req: Request<Incoming>,
) -> Result<(http::request::Parts, Bytes), Response<Body>> {
    let limits = &state.settings.limits;
    read_body(
        req,
        route.provider.kind,
        limits.body_bytes,
        limits.header_read_timeout,
    )
    .await
}

/// [`http`] for a request read already.
pub(crate) async fn http_read(
    state: Arc<State>,
    route: Route,
    parts: http::request::Parts,
    body: Bytes,
) -> Response<Body> {
    let kind = route.provider.kind;
    let content_type = parts
        .headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    // Telemetry is keyed, and kept, without its body: fresh ids in every batch, and what a
    // test's traces say is no answer to replay.
    let telemetry = state.settings.is_telemetry(&route);
    let keyed_body = if telemetry {
        Bytes::new()
    } else {
        body.clone()
    };
    crate::credentials::learn(&state, &parts.headers, parts.uri.query());
    let keyed = |state: &State, query: Option<&str>, content_type: Option<&str>| {
        let content_encoding = parts
            .headers
            .get(http::header::CONTENT_ENCODING)
            .and_then(|v| v.to_str().ok());
        let request = state
            .settings
            .normalizer
            .for_test(&route.test)
            .request_shared(
                parts.method.as_str(),
                &route.upstream_path,
                query,
                (content_type, content_encoding),
                &keyed_body,
                providers::secret_params(),
            );
        let key = Key::of(&request);
        (request, key)
    };
    // A large body is parsed, rewritten by the `[match]` rules and hashed on a blocking
    // thread: health and other tests' requests never wait behind it.
    let (request, key) = if body.len() <= KEY_ON_WORKER {
        keyed(&state, parts.uri.query(), content_type)
    } else {
        let query = parts.uri.query().map(str::to_string);
        let content_type = content_type.map(str::to_string);
        let on_worker = tokio::task::block_in_place;
        match tokio::runtime::Handle::current().runtime_flavor() {
            tokio::runtime::RuntimeFlavor::MultiThread => {
                on_worker(|| keyed(&state, query.as_deref(), content_type.as_deref()))
            }
            _ => keyed(&state, query.as_deref(), content_type.as_deref()),
        }
    };
    let form = if telemetry {
        Form::Telemetry
    } else {
        Form::Http
    };
    let planned = match plan(&state, &route, parts.method.clone(), key, form, None) {
        Ok(planned) => planned,
        Err(refused) => return *refused,
    };
    if let Some(delay) = planned.delay {
        tokio::time::sleep(delay).await;
    }
    let call = planned.call;
    match planned.plan {
        Plan::Fault(fault) => {
            // A cut or broken answer is the recording's, which the test then used.
            let recorded = match fault {
                FaultKind::Status { .. } => None,
                _ => call
                    .entry
                    .serve_fault(&call.key, state.settings.allow_repeats)
                    .ok()
                    .flatten(),
            };
            let response = crate::respond::fault(kind, fault, recorded.as_deref());
            let status = response.status().as_u16();
            call.end(Outcome::Fault, status, None);
            response
        }
        Plan::Replay(prepared) => {
            let mut call = call;
            call.bytes = Some(prepared.body.len() as u64);
            let outcome = if telemetry {
                Outcome::Telemetry
            } else {
                Outcome::Hit
            };
            call.end(outcome, prepared.status, None);
            crate::respond::replay(prepared, state.settings.realtime).await
        }
        Plan::Acknowledge => {
            call.end(Outcome::Telemetry, 204, None);
            Response::builder()
                .status(StatusCode::NO_CONTENT)
                .body(crate::respond::empty())
                .expect("a 204 builds")
        }
        Plan::Miss => {
            let hint = state.settings.record_hint.as_deref();
            let shown = route.shown(state.settings.normalizer.guard().scrubber());
            let (message, detail) =
                crate::explain::miss(&shown, &call, &request, hint, &state.settings.program);
            call.end(Outcome::Miss, 404, Some(detail));
            provider_error(
                kind,
                StatusCode::NOT_FOUND,
                "llmreplay_missing_recording",
                &message,
            )
        }
        Plan::Forward(save) => {
            let recording = Recording { call, request };
            record(&state, &parts, &route, body, recording, save).await
        }
    }
}

/// Why a request body was not read whole.
pub(crate) enum BodyError {
    /// Past the limit.
    TooLarge,
    /// No byte came for the header read timeout.
    Idle(Duration),
    /// The connection broke.
    Broken(String),
}

/// A request body read whole: at most `limit` bytes, each frame within `idle` of the last (a
/// client that stops sending midway is let go, as one that never sends its head is).
pub(crate) async fn read_limited(
    mut body: Incoming,
    limit: u64,
    idle: Duration,
) -> Result<Bytes, BodyError> {
    use hyper::body::Body as _;
    let mut out = bytes::BytesMut::new();
    loop {
        let frame = match tokio::time::timeout(idle, body.frame()).await {
            Err(_) => return Err(BodyError::Idle(idle)),
            Ok(None) => return Ok(out.freeze()),
            Ok(Some(Err(e))) => return Err(BodyError::Broken(e.to_string())),
            Ok(Some(Ok(frame))) => frame,
        };
        if let Ok(data) = frame.into_data() {
            if out.len() as u64 + data.len() as u64 > limit {
                return Err(BodyError::TooLarge);
            }
            if out.is_empty() && body.is_end_stream() {
                return Ok(data);
            }
            out.extend_from_slice(&data);
        }
    }
}

/// The request's head and whole body, or the answer that refuses it: 413 in the provider's
/// shape past `limit` bytes (said by `content-length`, or counted as the body arrives), 408
/// when it stops arriving for `idle`.
async fn read_body(
    req: Request<Incoming>,
    kind: Kind,
    limit: u64,
    idle: Duration,
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
    match read_limited(body, limit, idle).await {
        Ok(b) => Ok((parts, b)),
        Err(BodyError::TooLarge) => Err(too_large()),
        Err(BodyError::Idle(idle)) => Err(provider_error(
            kind,
            StatusCode::REQUEST_TIMEOUT,
            "llmreplay_body_timeout",
            &format!("cargo-llmreplay: the request body stopped arriving for {}s ([limits] header_read_timeout_s)", idle.as_secs_f64()),
        )),
        Err(BodyError::Broken(e)) => Err(text(
            StatusCode::BAD_REQUEST,
            format!("cargo-llmreplay: could not read the request body: {e}"),
        )),
    }
}

/// A request on its way upstream, and what will be recorded for it.
struct Recording {
    call: Call,
    request: RecordedRequest,
}

/// Forwards the request and answers as upstream did: passed on as it comes, and recorded
/// (`save`) unless it is a rate limit, a server error or a refused key.
async fn record(
    state: &Arc<State>,
    parts: &http::request::Parts,
    route: &Route,
    body: Bytes,
    recording: Recording,
    save: Save,
) -> Response<Body> {
    let Forwarded {
        answer,
        started,
        headers_at,
        slot,
    } = match crate::proxy::forward(state, parts, route, body).await {
        Ok(forwarded) => forwarded,
        Err(failed) => {
            recording.call.end(
                Outcome::Error,
                failed.status.as_u16(),
                Some(Detail::message(failed.message.clone())),
            );
            return provider_error(
                route.provider.kind,
                failed.status,
                failed.code,
                &failed.message,
            );
        }
    };
    let status = answer.status();
    let (answer_parts, answer_body) = answer.into_parts();
    let response = crate::proxy::answer_head(&answer_parts);
    if let Some(unsaved) = unsaved(status, route, &recording.call.path, &parts.method, save) {
        let (outcome, detail) = match &unsaved {
            Unsaved::Passed => (Outcome::Passthrough, None),
            Unsaved::Refused { message, .. } => {
                crate::request_log::message(tracing::Level::WARN, &recording.call, message);
                (Outcome::Refused, Some(Detail::message(message.clone())))
            }
        };
        recording.call.end(outcome, status.as_u16(), detail);
        return match unsaved {
            Unsaved::Refused {
                message,
                ours: true,
            } => provider_error(
                route.provider.kind,
                status,
                "llmreplay_unknown_path",
                &message,
            ),
            _ => response
                .body(BodyExt::boxed_unsync(answer_body.map_err(io::Error::other)))
                .expect("headers copied from a valid response"),
        };
    }
    let format = crate::tee::stream_format(&answer_parts.headers);
    let headers =
        crate::tee::recordable_headers(&answer_parts.headers, &state.settings.redact_headers);
    let (tx, mut rx) = mpsc::channel::<Result<Frame<Bytes>, io::Error>>(64);
    let tee = Tee {
        state: state.clone(),
        recording,
        status: status.as_u16(),
        headers,
        format,
        started,
        headers_at,
        slot,
    };
    tokio::spawn(tracing::Instrument::in_current_span(
        tee.run(answer_body, tx),
    ));
    // No content-length: the body ends only once the recording is on disk.
    let body = StreamBody::new(futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx)));
    response
        .body(BodyExt::boxed_unsync(body))
        .expect("headers copied from a valid response")
}

/// An upstream answer that is not saved.
enum Unsaved {
    /// Passthrough mode, a rate limit or a server error: passed on as it came.
    Passed,
    /// The answer says the request itself was wrong, which a recording would repeat forever.
    Refused {
        /// What to fix.
        message: String,
        /// The client gets `message` as the answer instead of upstream's (a wrong path's 404,
        /// whose body would say nothing of the base URL).
        ours: bool,
    },
}

/// Whether an upstream answer with `status` is not saved, and why: rate limits, server errors
/// and refused keys reach the client but are never saved (a wrong key must not be replayed
/// forever), nor is a 404 on a path the family's API does not have (a base URL the client
/// misread: a version missing or doubled).
/// `shown` is the path as messages show it (secrets masked).
fn unsaved(
    status: StatusCode,
    route: &Route,
    shown: &str,
    method: &Method,
    save: Save,
) -> Option<Unsaved> {
    if save == Save::PassOn || status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
        return Some(Unsaved::Passed);
    }
    if matches!(status.as_u16(), 401 | 403 | 407) {
        let vars = route.provider.key_vars().join(" or ");
        let message = format!(
            "cargo-llmreplay: the {} upstream answered {status} for {method} {}: not saved. Check the key in {vars} (and a proxy's credentials for 407); see {}",
            route.provider.name,
            shown,
            crate::book::url(crate::book::REFUSED_KEY)
        );
        return Some(Unsaved::Refused {
            message,
            ours: false,
        });
    }
    let path = &route.upstream_path;
    let known = route.provider.family().knows_path(path) && !providers::doubles_a_version(path);
    if status == StatusCode::NOT_FOUND && !known {
        return Some(Unsaved::Refused {
            message: crate::explain::unknown_path(route, shown, method),
            ours: true,
        });
    }
    None
}

/// Why a recording was not saved.
pub(crate) enum Unsaveable {
    /// The last secret guard refused it: the client still gets its whole answer.
    Secret,
    /// Anything else, said in the message: the client's read fails with it.
    Failed(String),
}

/// Saves `interaction` as `call`'s recording (off the async workers: it waits on the folder's
/// lock) and journals what that did; a recording that could not be saved is journalled as an
/// error and why returned, for the caller to fail its client with, or, for a secret, not.
pub(crate) async fn save(
    mut call: Call,
    mut interaction: Interaction,
    status: u16,
) -> Result<(), Unsaveable> {
    let (entry, ordinal) = (call.entry.clone(), call.ordinal);
    interaction.step = call.flight.as_ref().map(|f| f.step);
    // The facts of the answer as it is kept: redacted, as the cassette holds it.
    let recorded =
        tokio::task::spawn_blocking(move || entry.record_then(ordinal, interaction, answer_facts));
    let (failure, why) = match recorded.await {
        Ok(Ok((outcome, facts))) => {
            call.answer = Some(Box::new(facts));
            call.end(outcome.into(), status, None);
            return Ok(());
        }
        Ok(Err(e @ cassettes::Error::Secret { .. })) => (
            format!("{}{e}", crate::outcome::NOT_SAVED_SECRET),
            Unsaveable::Secret,
        ),
        Ok(Err(e)) => {
            let m = format!("cargo-llmreplay: the recording was not saved: {e}");
            (m.clone(), Unsaveable::Failed(m))
        }
        Err(e) => {
            let m = format!("cargo-llmreplay: recording task failed: {e}");
            (m.clone(), Unsaveable::Failed(m))
        }
    };
    crate::request_log::message(tracing::Level::ERROR, &call, &failure);
    call.end(Outcome::Error, status, Some(Detail::message(failure)));
    Err(why)
}

/// The model an answer names and its usage block, as far as its payloads say.
fn answer_facts(interaction: &Interaction) -> (Option<String>, Option<serde_json::Value>) {
    let usage = interaction.summary.as_ref().and_then(|s| s.usage.clone());
    let model = interaction.response.payloads().iter().find_map(|p| {
        p.get("model")
            .or_else(|| p.pointer("/message/model"))
            .or_else(|| p.pointer("/response/model"))
            .and_then(|m| m.as_str())
            .map(str::to_string)
    });
    (model, usage)
}

/// Forwards an upstream answer frame by frame while keeping a copy, then records it.
struct Tee {
    state: Arc<State>,
    recording: Recording,
    status: u16,
    headers: BTreeMap<String, String>,
    format: Option<StreamFormat>,
    started: Instant,
    headers_at: Duration,
    /// The request's place among its provider's paced ones, until its answer is read.
    slot: Option<crate::pace::Slot>,
}

impl Tee {
    async fn run(self, body: Incoming, tx: mpsc::Sender<Result<Frame<Bytes>, io::Error>>) {
        let Tee {
            state,
            recording: Recording { call, request },
            status,
            headers,
            format,
            started,
            headers_at,
            slot,
        } = self;
        let idle = state.settings.limits.idle_timeout;
        let forward = |data: Bytes| {
            let tx = tx.clone();
            // A client that went away does not stop the recording of a complete answer.
            async move {
                let _ = tx.send(Ok(Frame::data(data))).await;
            }
        };
        let captured = match crate::tee::read_answer(body, started, headers_at, idle, forward).await
        {
            Ok(captured) => captured,
            Err(e) => {
                let message = format!("cargo-llmreplay: the upstream answer broke off: {e}; passed on broken and not saved");
                call.end(Outcome::Broken, status, Some(Detail::message(message)));
                let _ = tx.send(Err(e)).await;
                return;
            }
        };
        // The provider's next paced request may start once this answer is read.
        drop(slot);
        let mut call = call;
        call.bytes = Some(captured.len());
        let (response, timing) = captured.into_response(status, headers, format);
        let interaction = Interaction::recorded(call.key.clone(), request, response, timing);
        match save(call, interaction, status).await {
            Ok(()) | Err(Unsaveable::Secret) => {}
            // Fail the client's read, so the test cannot pass on an unsaved recording.
            Err(Unsaveable::Failed(failure)) => {
                let _ = tx.send(Err(io::Error::other(failure))).await;
            }
        }
    }
}
