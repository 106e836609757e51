//! A routed request, from a base URL or captured as a proxy: one WebSocket session or one
//! HTTP exchange, in a span of its own.

use crate::respond::Body;
use crate::route::Route;
use crate::state::State;
use crate::{exchange, session};
use http::{Request, Response};
use hyper::body::Incoming;
use std::sync::Arc;
use tracing::Instrument;

/// A routed request, from a base URL or captured as a proxy: one WebSocket session or one
/// HTTP exchange, in a span of its own.
pub(crate) async fn routed(
    state: Arc<State>,
    route: Route,
    req: Request<Incoming>,
) -> Response<Body> {
    let session = session::is_upgrade(&req);
    let method = (!session).then(|| req.method());
    let span = request_span(
        &route.test,
        &route.provider.name,
        method,
        &crate::route::shown_path(
            state.settings.normalizer.guard().scrubber(),
            &route.upstream_path,
        ),
    );
    // Request heads have a target of their own, which the log file of `test` leaves out.
    if tracing::enabled!(target: "cargo_llmreplay::head", tracing::Level::DEBUG) {
        span.in_scope(|| log_head(&req, &state.settings.redact_headers));
    }
    if session {
        return session::handle(state, route, req).instrument(span).await;
    }
    if crate::mcp::http_transport::may_be_mcp(&route, &req) {
        // A captured host's JSON-RPC is an MCP server's (README, "MCP servers").
        let (parts, body) = match exchange::read_request(&state, &route, req).await {
            Ok(read) => read,
            Err(refused) => return refused,
        };
        if crate::mcp::http_transport::is_mcp(&parts, &body) {
            return crate::mcp::http_transport::captured(state, route, parts, body)
                .instrument(span)
                .await;
        }
        return exchange::http_read(state, route, parts, body)
            .instrument(span)
            .await;
    }
    exchange::http(state, route, req).instrument(span).await
}

/// One span per request, or per session (no method): every line of the log about it names
/// them. Disabled, and nearly free, unless a tracing layer wants requests (`-v`, `RUST_LOG`);
/// the log file of `test` gets its lines from `request_log`.
pub(crate) fn request_span(
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
