//! Forwarding a request upstream: the URL built from the provider's parsed root (a path can
//! name no other host), the credentials the daemon adds only where they may go, the client's
//! headers less hop-by-hop ones, Bedrock's request signed again, and the connect and idle
//! timeouts. A failure comes back as what to answer, explained without a secret; what to do
//! with an answer (pass it on, record it) is `exchange`'s.

use crate::provider::NOT_FORWARDED;
use crate::route::Route;
use crate::state::State;
use bytes::Bytes;
use http::header::ACCEPT_ENCODING;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use std::time::{Duration, Instant};

/// An upstream's answer, its head read.
pub(crate) struct Forwarded {
    pub answer: Response<Incoming>,
    /// When the request went out.
    pub started: Instant,
    /// How long the answer's head took.
    pub headers_at: Duration,
}

/// Why a request got no answer from upstream: what to answer the client, in the provider's
/// shape, and to journal.
pub(crate) struct Failed {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl Failed {
    fn new(status: StatusCode, code: &'static str, message: String) -> Failed {
        Failed {
            status,
            code,
            message,
        }
    }
}

/// Sends the request (`parts` and `body`) to `route`'s upstream and waits for its answer's head.
pub(crate) async fn forward(
    state: &State,
    parts: &http::request::Parts,
    route: &Route,
    body: Bytes,
) -> Result<Forwarded, Failed> {
    let provider = &route.provider;
    let uri = provider
        .upstream_uri(&route.upstream_path, parts.uri.query())
        .map_err(|e| {
            Failed::new(
                StatusCode::BAD_GATEWAY,
                "llmreplay_no_upstream",
                e.to_string(),
            )
        })?;
    // What messages may say of the upstream: never its userinfo nor a secret in its query.
    let root = providers::redact::url(provider.upstream.as_deref().unwrap_or("")).into_owned();
    let url = uri.to_string();
    let carries_key = crate::provider::carries_key(
        &parts.headers,
        parts.uri.query(),
        &state.settings.redact_headers,
    );
    provider
        .may_send_credentials(&uri, &state.settings.allow_credentials_to, carries_key)
        .and_then(|()| match carries_key {
            true => state.settings.may_send_key_through_proxy(&uri),
            false => Ok(()),
        })
        .map_err(|e| {
            Failed::new(
                StatusCode::BAD_GATEWAY,
                "llmreplay_credentials_refused",
                e.to_string(),
            )
        })?;
    let mut upstream = Request::builder().method(parts.method.clone()).uri(uri);
    for (name, value) in &parts.headers {
        if !NOT_FORWARDED.contains(&name.as_str()) {
            upstream = upstream.header(name, value);
        }
    }
    // Cassettes hold text, not gzip.
    upstream = upstream.header(ACCEPT_ENCODING, "identity");
    let mut upstream = upstream.body(Full::new(body.clone())).map_err(|e| {
        Failed::new(
            StatusCode::BAD_REQUEST,
            "llmreplay_error",
            format!(
                "cargo-llmreplay: bad upstream request {}: {e}",
                providers::redact::url(&url)
            ),
        )
    })?;
    if provider.family().resigns_requests() {
        crate::sigv4::resign(&mut upstream, &body).map_err(|m| {
            Failed::new(
                StatusCode::BAD_GATEWAY,
                "llmreplay_cannot_sign",
                format!("cargo-llmreplay: {m}"),
            )
        })?;
    }
    let client = state.client().map_err(|m| {
        Failed::new(
            StatusCode::BAD_GATEWAY,
            "llmreplay_upstream_unreachable",
            format!("cargo-llmreplay: {m}"),
        )
    })?;
    let started = Instant::now();
    let idle = state.settings.limits.idle_timeout;
    let name = &provider.name;
    match tokio::time::timeout(idle, client.request(upstream)).await {
        Ok(Ok(answer)) => Ok(Forwarded {
            answer,
            started,
            headers_at: started.elapsed(),
        }),
        Err(_) => Err(Failed::new(
            StatusCode::GATEWAY_TIMEOUT,
            "llmreplay_upstream_timeout",
            format!(
                "cargo-llmreplay: the {name} upstream at {root} sent nothing for {}s; nothing was saved. Raise [upstream] idle_timeout_s in llmreplay.toml if it is this slow",
                idle.as_secs_f64()
            ),
        )),
        Ok(Err(e)) if timed_out(&e) => Err(Failed::new(
            StatusCode::GATEWAY_TIMEOUT,
            "llmreplay_upstream_timeout",
            format!(
                "cargo-llmreplay: the {name} upstream at {root} did not accept a connection within {}s; nothing was saved. Raise [upstream] connect_timeout_s in llmreplay.toml, or check the upstream",
                state.settings.limits.connect_timeout.as_secs_f64()
            ),
        )),
        Ok(Err(e)) => {
            let message = match client.explain(&url, &e) {
                Some(why) => format!(
                    "cargo-llmreplay: could not reach the {name} upstream at {root}: {why}"
                ),
                None => {
                    // A captured call is redirected by its host; a base URL's by its provider.
                    let fix = match &route.captured {
                        Some(host) => format!("--upstream {host}=URL"),
                        None => format!("--upstream {name}=URL or [providers.{name}] upstream"),
                    };
                    format!(
                        "cargo-llmreplay: could not reach the {name} upstream at {root}: {}. Check {fix}",
                        providers::redact::text(&format!("{e:?}")),
                    )
                }
            };
            Err(Failed::new(
                StatusCode::BAD_GATEWAY,
                "llmreplay_upstream_unreachable",
                message,
            ))
        }
    }
}

/// The head of the answer to pass on: the upstream's status and headers, less those of its
/// transfer (the daemon's own connection sets them).
pub(crate) fn answer_head(parts: &http::response::Parts) -> http::response::Builder {
    let mut head = Response::builder().status(parts.status);
    for (name, value) in &parts.headers {
        if !matches!(
            name.as_str(),
            "connection" | "keep-alive" | "transfer-encoding" | "content-length"
        ) {
            head = head.header(name, value);
        }
    }
    head
}

/// Whether a client error comes from a timeout somewhere in its chain (the connect timeout).
fn timed_out(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(e);
    while let Some(err) = next {
        if err
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
        {
            return true;
        }
        next = err.source();
    }
    false
}
