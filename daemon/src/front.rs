//! The front door: every request on the listener is a proxy's (`CONNECT`, or an absolute
//! URL), refused (another user's connection, a foreign `Host`), a control route, or a routed
//! request (a base URL's path, its test identified).

use crate::identity::{self, Claims};
use crate::respond::{self, Body};
use crate::route;
use crate::state::{Conn, State};
use crate::{capture, control};
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use std::sync::Arc;

/// The front door: a request to this daemon is a proxy's (`CONNECT`, or an absolute URL),
/// refused (a foreign `Host`), a control route, a WebSocket session, or one HTTP exchange.
pub(crate) async fn handle(
    state: Arc<State>,
    req: Request<Incoming>,
    conn: &Conn,
) -> Response<Body> {
    if !conn.admitted(&state) {
        return respond::text(
            StatusCode::FORBIDDEN,
            "cargo-llmreplay: this daemon serves only the user who started it; this connection is another user's".into(),
        );
    }
    // A proxy request names the host it is for, not this daemon: before the Host check.
    // Browsers send neither form to a server, so a page cannot use them to reach the daemon.
    if req.method() == http::Method::CONNECT {
        return capture::connect(state, req, conn).await;
    }
    if req.uri().scheme().is_some() {
        return capture::absolute(state, req, conn).await;
    }
    if let Some(port) = state.loopback_port {
        if !route::loopback_host(req.headers().get(http::header::HOST), port) {
            return respond::text(
                StatusCode::FORBIDDEN,
                format!("cargo-llmreplay: the Host header must name this daemon (127.0.0.1:{port}, localhost:{port} or [::1]:{port}); a web page reaching it through another name is refused. To serve other hosts, bind one with --addr"),
            );
        }
    }
    if let Some(refused) = refuse_a_page(&req) {
        return refused;
    }
    if let Some(prefix) = req.uri().path().strip_suffix("/__llmreplay/faults") {
        let prefix = prefix.to_string();
        return control::faults(&state, conn, &prefix, req).await;
    }
    if let Some(prefix) = req.uri().path().strip_suffix("/__llmreplay/mcp") {
        let prefix = prefix.to_string();
        return mcp_route(&state, conn, &prefix, None, req).await;
    }
    if let Some((prefix, name)) = mcp_server_path(req.uri().path()) {
        return mcp_route(&state, conn, &prefix, Some(name), req).await;
    }
    if let Some(rest) = req.uri().path().strip_prefix("/__llmreplay/") {
        let rest = rest.to_string();
        return control::control(&state, &rest, req).await;
    }
    let resolved = match route::resolve(req.uri().path(), &state.settings.providers) {
        Ok(resolved) => resolved,
        Err(e) => return respond::text(e.status(), e.message()),
    };
    let claims = Claims {
        path: resolved.test.as_deref(),
        header: req.headers().get("x-test-id"),
        ..Claims::default()
    };
    let test = match identity::identify_on(&state, conn, claims).await {
        Ok(identity) => identity.test,
        Err(refused) => return refused.answer(),
    };
    crate::routed::routed(state, resolved.with_test(test), req).await
}

/// A control route (`/__llmreplay/...`, under a test's prefix too) asked by a web page: a
/// browser names the page's origin on every cross-origin request and on every POST, and no
/// runner, plugin, shim or SDK of ours sends one. A page on the developer's machine must not
/// begin tests, plant faults or read the journal (MockServer's CVE-2021-32827). Provider
/// routes are left as they are: a browser-based SDK in a test may call them.
fn refuse_a_page(req: &Request<Incoming>) -> Option<Response<Body>> {
    if !req.uri().path().contains("/__llmreplay/") {
        return None;
    }
    let origin = req.headers().get(http::header::ORIGIN)?;
    Some(respond::text(
        StatusCode::FORBIDDEN,
        format!(
            "cargo-llmreplay: control routes (/__llmreplay/...) refuse requests from web pages (this one has Origin: {}); call them from a test, a runner or curl, which send no Origin",
            String::from_utf8_lossy(origin.as_bytes()).escape_debug()
        ),
    ))
}

/// `[/t/<test>]/mcp/<name>`: a Streamable HTTP MCP server's path, split into its test prefix
/// and the server's name.
fn mcp_server_path(path: &str) -> Option<(String, String)> {
    let (prefix, rest) = match path.find("/mcp/") {
        Some(0) => ("", &path[5..]),
        Some(at) if path.starts_with("/t/") && !path[3..at].contains('/') => {
            (&path[..at], &path[at + 5..])
        }
        _ => return None,
    };
    let name = rest.trim_end_matches('/');
    (!name.is_empty() && !name.contains('/')).then(|| (prefix.to_string(), name.to_string()))
}

/// The MCP routes: the stdio shim's (`…/__llmreplay/mcp`, `name` none) and a Streamable HTTP
/// server's (`…/mcp/<name>`), their test identified as every route's.
async fn mcp_route(
    state: &Arc<State>,
    conn: &Conn,
    prefix: &str,
    name: Option<String>,
    req: Request<Incoming>,
) -> Response<Body> {
    let Ok(path) = identity::route_prefix(prefix) else {
        return respond::text(
            StatusCode::NOT_FOUND,
            format!("cargo-llmreplay: MCP routes live at <LLMREPLAY_BASE_URL>/mcp/NAME and /__llmreplay/mcp, not under {prefix:?}"),
        );
    };
    let claims = Claims {
        path,
        header: req.headers().get("x-test-id"),
        ..Claims::default()
    };
    let test = match identity::identify_on(state, conn, claims).await {
        Ok(identity) => identity.test,
        Err(refused) => return refused.answer(),
    };
    match name {
        Some(name) => crate::mcp::http_transport::handle(state, test, &name, req).await,
        None => {
            let query = req.uri().query().unwrap_or("").to_string();
            crate::mcp::control(state, test, &query, req).await
        }
    }
}
