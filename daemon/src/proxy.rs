//! Forwarding a request upstream: the URL built from the provider's parsed root (a path can
//! name no other host), the credentials the daemon adds only where they may go, the client's
//! headers less hop-by-hop ones, Bedrock's request signed again, and the connect and idle
//! timeouts. A failure comes back as what to answer, explained without a secret; what to do
//! with an answer (pass it on, record it) is `exchange`'s.

use crate::provider::{Kind, NOT_FORWARDED};
use crate::route::Route;
use crate::state::State;
use bytes::Bytes;
use http::header::ACCEPT_ENCODING;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use std::time::{Duration, Instant};

/// An upstream's answer, its head read.
pub(crate) struct Forwarded {
    pub answer: Response<Incoming>,
    /// When the request went out.
    pub started: Instant,
    /// How long the answer's head took.
    pub headers_at: Duration,
    /// Its place among its provider's paced requests: kept until the answer has been read.
    pub slot: Option<crate::pace::Slot>,
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
    let client = state.client().map_err(|m| {
        Failed::new(
            StatusCode::BAD_GATEWAY,
            "llmreplay_upstream_unreachable",
            format!("cargo-llmreplay: {m}"),
        )
    })?;
    let (mut retries, mut waited) = (0, Duration::ZERO);
    loop {
        let slot = match &provider.pace {
            Some(pace) => Some(pace.start().await),
            None => None,
        };
        let outgoing = build(parts, &uri, provider, &body)?;
        let sent = send(state, route, client, outgoing, &url, &root).await?;
        let Forwarded {
            answer,
            started,
            headers_at,
            ..
        } = sent;
        // A rate limit that says when to come back is waited out and asked again, within a
        // bound: the test goes on rather than failing on its provider's limit.
        if answer.status() == StatusCode::TOO_MANY_REQUESTS && retries < crate::pace::MAX_RETRIES {
            let (head, incoming) = answer.into_parts();
            let mut incoming = Some(incoming);
            let (wait, read) = match crate::pace::retry_after(&head.headers, None) {
                Some(wait) => (Some(wait), None),
                // Gemini says it only in its body.
                None if matches!(provider.kind, Kind::Gemini | Kind::Vertex) => {
                    let body = incoming.take().expect("not read yet");
                    let idle = state.settings.limits.idle_timeout;
                    let limited = http_body_util::Limited::new(body, 64 << 10).collect();
                    let read = match tokio::time::timeout(idle, limited).await {
                        Ok(Ok(read)) => read.to_bytes(),
                        _ => Bytes::new(),
                    };
                    (
                        crate::pace::retry_after(&head.headers, Some(&read)),
                        Some(read),
                    )
                }
                None => (None, None),
            };
            match (wait, read) {
                (Some(wait), _) if waited + wait <= crate::pace::MAX_RETRY_WAIT => {
                    drop(slot);
                    retries += 1;
                    waited += wait;
                    tracing::info!(target: "cargo_llmreplay::upstream", provider = %provider.name, wait_ms = wait.as_millis() as u64, retry = retries, "429: waiting as the provider asked, then sending again");
                    tokio::time::sleep(wait).await;
                    continue;
                }
                (_, Some(read)) => {
                    // Its body was read to find out: passed on as the client's error, and
                    // logged, so with the run's secrets replaced (a gateway may echo the key).
                    let read = String::from_utf8_lossy(&read);
                    let read = state
                        .settings
                        .normalizer
                        .guard()
                        .plain(&read)
                        .unwrap_or_else(|| read.into_owned());
                    return Err(Failed::new(
                        StatusCode::TOO_MANY_REQUESTS,
                        "llmreplay_rate_limited",
                        format!(
                            "cargo-llmreplay: the {} upstream answered 429 (not saved){}: {}",
                            provider.name,
                            gave_up(retries, waited),
                            providers::redact::text(&read)
                        ),
                    ));
                }
                (_, None) => {
                    let incoming = incoming.expect("not read");
                    return Ok(Forwarded {
                        answer: http::Response::from_parts(head, incoming),
                        started,
                        headers_at,
                        slot,
                    });
                }
            }
        }
        return Ok(Forwarded {
            answer,
            started,
            headers_at,
            slot,
        });
    }
}

/// After how many tries a rate limit was passed on, if it was tried again.
fn gave_up(retries: u32, waited: Duration) -> String {
    match retries {
        0 => String::new(),
        n => format!(
            " after {n} tries again over {:.1}s, as it asked (at most {} tries and {}s)",
            waited.as_secs_f64(),
            crate::pace::MAX_RETRIES,
            crate::pace::MAX_RETRY_WAIT.as_secs()
        ),
    }
}

/// The request to send upstream: the client's headers less those never forwarded, and
/// Bedrock's signed again; made anew for each try.
fn build(
    parts: &http::request::Parts,
    uri: &http::Uri,
    provider: &crate::provider::Provider,
    body: &Bytes,
) -> Result<Request<Full<Bytes>>, Failed> {
    let mut upstream = Request::builder()
        .method(parts.method.clone())
        .uri(uri.clone());
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
                providers::redact::url(&uri.to_string())
            ),
        )
    })?;
    if provider.family().resigns_requests() {
        crate::sigv4::resign(&mut upstream, body).map_err(|m| {
            Failed::new(
                StatusCode::BAD_GATEWAY,
                "llmreplay_cannot_sign",
                format!("cargo-llmreplay: {m}"),
            )
        })?;
    }
    Ok(upstream)
}

/// Sends one try and waits for its answer's head.
async fn send(
    state: &State,
    route: &Route,
    client: &crate::upstream::Client,
    upstream: Request<Full<Bytes>>,
    url: &str,
    root: &str,
) -> Result<Forwarded, Failed> {
    let provider = &route.provider;
    let started = Instant::now();
    let idle = state.settings.limits.idle_timeout;
    let name = &provider.name;
    match tokio::time::timeout(idle, client.request(upstream)).await {
        Ok(Ok(answer)) => Ok(Forwarded {
            answer,
            started,
            headers_at: started.elapsed(),
            slot: None,
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
            let message = match client.explain(url, &e) {
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
