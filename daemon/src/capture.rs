//! The daemon as each test's HTTP(S) proxy, on the same port as the base-URL routes: a
//! `CONNECT host:443` gets a TLS connection whose certificate the run's CA made for that host,
//! and every request inside it (and every absolute-form `http://` request) is routed as a
//! base-URL route would be: the host's family, or the `http` family named by the host, for the
//! test its proxy credentials name. A host `[capture] pass` names is tunnelled untouched.

use crate::identity::{identify_on, Claims, Source};
use crate::provider::{Provider, UpstreamSource};
use crate::respond::{self, Body};
use crate::route::Route;
use crate::state::{Conn, State};
use cassettes::ProviderName;
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::sync::Arc;

fn capture_off() -> Response<Body> {
    respond::text(
        StatusCode::FORBIDDEN,
        "cargo-llmreplay: capture is off ([capture] enabled = false in llmreplay.toml), so the daemon is no proxy; point the client at its base URL instead".into(),
    )
}

/// The port an authority (`host:port`, `[v6]:port`) names, if any; one out of range (which
/// the `http` crate reads as no port at all) is refused rather than taken as the default.
fn port_of(authority: &str) -> Result<Option<u16>, String> {
    let after_host = authority
        .rsplit_once(']')
        .map_or(authority, |(_, rest)| rest);
    let Some((_, port)) = after_host.rsplit_once(':') else {
        return Ok(None);
    };
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(Some(p)),
        _ => Err(format!(
            "cargo-llmreplay: {authority:?}: a port is a number from 1 to 65535"
        )),
    }
}

/// A cassette name for a host the families do not know: the host, lowercase, with its port
/// when it is not the scheme's.
pub(crate) fn name_for(host: &str, port: Option<u16>) -> ProviderName {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let (name, kind) = providers::for_host(host);
    let (name, own) = if host.parse::<std::net::Ipv6Addr>().is_ok() {
        // `::1` would lose every character but the last.
        (format!("ipv6-{}", host.replace(':', "-")), true)
    } else if kind == providers::Kind::Http
        && providers::Kind::ALL.iter().any(|k| k.as_str() == name)
    {
        // A host named as a family (`openai` in a docker-compose network) that is not that
        // family's API must not share its cassette.
        (format!("{name}-host"), true)
    } else {
        (name, false)
    };
    // A family's name stands for all its hosts and ports; a host's name keeps its port.
    let name = match port {
        Some(p) if own || name.contains('.') => format!("{name}_{p}"),
        _ => name,
    };
    let safe: String = name
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' | '.' | '-' | '_' => c,
            _ => '_',
        })
        .collect();
    ProviderName::new(safe.trim_start_matches(['.', '_', '-']))
        .unwrap_or_else(|| ProviderName::new("http").expect("a valid name"))
}

impl State {
    /// The provider of a captured host, made once per scheme, host and port.
    pub(crate) fn captured_provider(
        &self,
        scheme: &str,
        host: &str,
        port: Option<u16>,
    ) -> Arc<Provider> {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        let default_port = if scheme == "https" { 443 } else { 80 };
        let port = port.filter(|p| *p != default_port);
        let key = format!("{scheme}://{host}:{}", port.unwrap_or(default_port));
        if let Some(p) = self.captured.lock().expect("captured lock").get(&key) {
            return p.clone();
        }
        let (_, kind) = providers::for_host(&host);
        let provider = Arc::new(Provider {
            name: name_for(&host, port),
            kind,
            upstream: Some(self.settings.capture.upstream_of(scheme, &host, port)),
            source: UpstreamSource::Captured,
            parsed: Default::default(),
            pace: None,
        });
        let mut captured = self.captured.lock().expect("captured lock");
        // A client naming a new host on every call must not grow the daemon without bound.
        if captured.len() >= 10_000 {
            captured.clear();
        }
        captured.insert(key, provider.clone());
        provider
    }
}

/// `CONNECT host:port`: a tunnel that this daemon ends itself (TLS with a certificate for the
/// host, the requests inside routed to the test's cassettes), or, for a `pass` host, a plain
/// tunnel to it.
pub(crate) async fn connect(
    state: Arc<State>,
    req: Request<Incoming>,
    conn: &Conn,
) -> Response<Body> {
    let Some(ca) = state.ca.clone().filter(|_| state.settings.capture.enabled) else {
        return capture_off();
    };
    let Some(authority) = req.uri().authority().cloned() else {
        return respond::text(
            StatusCode::BAD_REQUEST,
            "cargo-llmreplay: CONNECT needs host:port".into(),
        );
    };
    let identity = match identify_on(&state, conn, Claims::proxy(req.headers())).await {
        Ok(identity) => identity,
        // A process running several tests at once: each request inside names its own.
        Err(crate::identity::Refusal::Ambiguous(_)) => crate::identity::Identity {
            test: cassettes::TestId::new(cassettes::TestId::DEFAULT),
            source: Source::Peer,
        },
        Err(refused) => return refused.answer(),
    };
    // A tunnel outlives a test when its client keeps it: a process that announces its tests
    // has each request inside filed under the test it runs then.
    let lineage = match identity.source {
        Source::Peer | Source::Default => conn.lineage_now(&state).await,
        _ => None,
    };
    let test = identity.test;
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = match port_of(authority.as_str()) {
        Ok(port) => port.unwrap_or(443),
        Err(why) => return respond::text(StatusCode::BAD_REQUEST, why),
    };
    if state.settings.capture.passes(&host) {
        let target = pass_target(&state, &host, port);
        tracing::info!(target: "cargo_llmreplay::capture", test = ?test.as_str(), host = %host, "tunnelled ([capture] pass)");
        state.journal.passed(&test, &format!("{host}:{port}"));
        let limits = state.settings.limits;
        tokio::spawn(async move {
            let Ok(upgraded) = hyper::upgrade::on(req).await else {
                return;
            };
            let connect = tokio::net::TcpStream::connect(&target);
            let Ok(Ok(upstream)) = tokio::time::timeout(limits.connect_timeout, connect).await
            else {
                tracing::warn!(target: "cargo_llmreplay::capture", host = %target, "could not reach a [capture] pass host");
                return;
            };
            tunnel(TokioIo::new(upgraded), upstream, limits.idle_timeout).await;
        });
        return Response::new(respond::empty());
    }
    let config = match ca.server_config(&host) {
        Ok(config) => config,
        Err(e) => return respond::text(StatusCode::BAD_GATEWAY, format!("cargo-llmreplay: {e}")),
    };
    let provider = state.captured_provider("https", &host, Some(port));
    let timeout = state.settings.limits.header_read_timeout;
    tokio::spawn(async move {
        let Ok(upgraded) = hyper::upgrade::on(req).await else {
            return;
        };
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        // A client that does not trust the run's CA ends the handshake here; its own error
        // names the certificate. One that never finishes it is cut off as a client that never
        // sends its request head is.
        let handshake = acceptor.accept(TokioIo::new(upgraded));
        let tls = match tokio::time::timeout(timeout, handshake).await {
            Ok(Ok(tls)) => tls,
            Ok(Err(_)) => {
                tracing::debug!(target: "cargo_llmreplay::capture", host = %host, "a client refused the run's certificate (is SSL_CERT_FILE, or NODE_EXTRA_CA_CERTS, read?)");
                return;
            }
            Err(_) => {
                tracing::debug!(target: "cargo_llmreplay::capture", host = %host, "a client did not finish its TLS handshake in time ([limits] header_read_timeout_s)");
                return;
            }
        };
        let served = state.clone();
        let service = move |inner: Request<Incoming>| {
            let (state, provider) = (served.clone(), provider.clone());
            // Each request inside names its own test, or its process's running one does, else
            // the tunnel's.
            let named = crate::identity::header_id(inner.headers().get("x-test-id"));
            let announced = lineage
                .as_deref()
                .filter(|_| state.announced.any())
                .and_then(|l| state.announced.of(l));
            let test = match (named, announced) {
                (Err(refused), _) => Err(refused),
                (Ok(Some(named)), _) => Ok(named),
                (Ok(None), Some(running)) => crate::identity::running_test(running),
                (Ok(None), None) => Ok(test.clone()),
            };
            let host = host.clone();
            async move {
                let test = match test {
                    Ok(test) => test,
                    Err(refused) => return Ok(refused.answer()),
                };
                let route = Route {
                    test,
                    upstream_path: inner.uri().path().to_string(),
                    provider,
                    captured: Some(host.clone()),
                };
                Ok::<_, std::convert::Infallible>(crate::routed::routed(state, route, inner).await)
            }
        };
        crate::server::serve_connection(state, TokioIo::new(tls), service).await;
    });
    Response::new(respond::empty())
}

/// Where a `pass` host's tunnel goes: `--upstream HOST=URL`'s host and port, else the host.
/// Copies bytes both ways until either side closes, or until neither has sent a byte for
/// `idle` (`[upstream] idle_timeout_s`): an abandoned tunnel does not hold its sockets for ever.
async fn tunnel<A, B>(client: A, upstream: B, idle: std::time::Duration)
where
    A: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    B: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut client_read, mut client_write) = tokio::io::split(client);
    let (mut up_read, mut up_write) = tokio::io::split(upstream);
    let (mut to_up, mut to_client) = (vec![0u8; 16 << 10], vec![0u8; 16 << 10]);
    loop {
        let step = tokio::time::timeout(idle, async {
            tokio::select! {
                n = client_read.read(&mut to_up) => match n {
                    Ok(n) if n > 0 => up_write.write_all(&to_up[..n]).await.is_ok(),
                    _ => false,
                },
                n = up_read.read(&mut to_client) => match n {
                    Ok(n) if n > 0 => client_write.write_all(&to_client[..n]).await.is_ok(),
                    _ => false,
                },
            }
        })
        .await;
        match step {
            Ok(true) => {}
            Ok(false) => break,
            Err(_) => {
                tracing::debug!(target: "cargo_llmreplay::capture", "closed a [capture] pass tunnel idle for {idle:?} ([upstream] idle_timeout_s)");
                break;
            }
        }
    }
    let _ = up_write.shutdown().await;
    let _ = client_write.shutdown().await;
}

fn pass_target(state: &State, host: &str, port: u16) -> String {
    let url = state
        .settings
        .capture
        .upstream_of("https", host, Some(port));
    let uri: http::Uri = url.parse().unwrap_or_default();
    match uri.authority() {
        Some(a) => format!("{}:{}", a.host(), a.port_u16().unwrap_or(port)),
        None => format!("{host}:{port}"),
    }
}

/// An absolute-form request (`GET http://host/path`), as a plain-HTTP client sends it to its
/// proxy: routed as a captured call of that host.
pub(crate) async fn absolute(
    state: Arc<State>,
    req: Request<Incoming>,
    conn: &Conn,
) -> Response<Body> {
    if state.ca.is_none() || !state.settings.capture.enabled {
        return capture_off();
    }
    let test = match identify_on(&state, conn, Claims::proxy(req.headers())).await {
        Ok(identity) => identity.test,
        Err(refused) => return refused.answer(),
    };
    let uri = req.uri().clone();
    let (Some(scheme), Some(host)) = (uri.scheme_str(), uri.host()) else {
        return respond::text(
            StatusCode::BAD_REQUEST,
            "cargo-llmreplay: a proxy request names its scheme and host".into(),
        );
    };
    if let Err(why) = port_of(uri.authority().map_or("", |a| a.as_str())) {
        return respond::text(StatusCode::BAD_REQUEST, why);
    }
    if scheme != "http" {
        return respond::text(
            StatusCode::BAD_REQUEST,
            format!("cargo-llmreplay: a proxy takes {scheme}:// through CONNECT, not as an absolute URL"),
        );
    }
    let provider = state.captured_provider(scheme, host, uri.port_u16());
    let route = Route {
        test,
        upstream_path: uri.path().to_string(),
        provider,
        captured: Some(host.to_ascii_lowercase()),
    };
    crate::routed::routed(state, route, req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_need_no_escaping_and_come_back() {
        use providers::env::{proxy_url, test_of_token, token};
        let id = "my-crate::chat$streams/reply ›";
        let t = token(id);
        assert!(t
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        assert_eq!(test_of_token(&t).as_deref(), Some(id));
        let url = proxy_url("http://127.0.0.1:9/", id, "0f3a");
        assert_eq!(url, format!("http://{t}:0f3a@127.0.0.1:9"));
    }

    #[test]
    fn ports_are_in_range_or_refused() {
        assert_eq!(port_of("h.example:8443"), Ok(Some(8443)));
        assert_eq!(port_of("[::1]:443"), Ok(Some(443)));
        assert_eq!(port_of("[::1]"), Ok(None));
        assert_eq!(port_of("h.example"), Ok(None));
        for bad in [
            "h.example:99999",
            "h.example:0",
            "h.example:",
            "[::1]:70000",
        ] {
            assert!(port_of(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn hosts_name_their_cassettes() {
        assert_eq!(name_for("api.openai.com", None).as_str(), "openai");
        assert_eq!(
            name_for("API.Search.example", None).as_str(),
            "api.search.example"
        );
        assert_eq!(name_for("127.0.0.1", Some(8443)).as_str(), "127.0.0.1_8443");
        assert_eq!(name_for("::1", None).as_str(), "ipv6---1");
        assert_eq!(name_for("[::1]", Some(8080)).as_str(), "ipv6---1_8080");
        assert_eq!(name_for("openai", None).as_str(), "openai-host");
        assert_eq!(
            name_for("ollama", Some(11434)).as_str(),
            "ollama-host_11434"
        );
    }
}
