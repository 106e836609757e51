//! Which test a request belongs to, decided in one place for every route, the faults route and
//! the proxy included (README, "Identifying a connection's test"). In order: the base URL's
//! `/t/<id>/` segment, the faults route's `?test=`, the `X-Test-Id` header (percent-encoded
//! allowed), a proxy's credentials, the process at the other end of the connection, else
//! `default`. A proxy request that names none is challenged for credentials once first.

use crate::respond::{self, Body};
use crate::state::{Conn, Running, State};
use base64::Engine as _;
use cassettes::TestId;
use http::{HeaderValue, Response, StatusCode};
use percent_encoding::percent_decode_str;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// What a request says of its test; every part is optional.
#[derive(Default, Clone, Copy)]
pub(crate) struct Claims<'a> {
    /// A base URL's `/t/<id>/` segment, percent-encoded.
    pub path: Option<&'a str>,
    /// The faults route's `?test=` value, percent-encoded.
    pub query: Option<&'a str>,
    /// The `X-Test-Id` header.
    pub header: Option<&'a HeaderValue>,
    /// A proxy request's `Proxy-Authorization`.
    pub credentials: Option<&'a HeaderValue>,
    /// A proxy request: one that names no test is challenged for credentials, once per
    /// connection (clients that have them send them then).
    pub challenge: bool,
}

impl<'a> Claims<'a> {
    /// What a proxy request says: its `X-Test-Id`, its credentials, and a challenge when
    /// neither names a test.
    pub fn proxy(headers: &'a http::HeaderMap) -> Claims<'a> {
        Claims {
            header: headers.get("x-test-id"),
            credentials: headers.get(http::header::PROXY_AUTHORIZATION),
            challenge: true,
            ..Claims::default()
        }
    }
}

/// Where a request's test was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    Path,
    Query,
    Header,
    Credentials,
    Peer,
    Default,
}

/// Who the caller is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Identity {
    pub test: TestId,
    pub source: Source,
}

/// Why a request gets no test.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// A test id that is not text: 400, saying what to send.
    Bad(String),
    /// A proxy request with no credentials: 407, asking for them.
    Challenge,
    /// A request naming no test from a process that runs several at once: 409, naming them.
    Ambiguous(String),
}

impl Refusal {
    /// The answer that refuses the request.
    pub fn answer(self) -> Response<Body> {
        match self {
            Refusal::Bad(why) => respond::text(StatusCode::BAD_REQUEST, why),
            Refusal::Ambiguous(why) => respond::text(StatusCode::CONFLICT, why),
            Refusal::Challenge => {
                let mut answer = respond::text(
                    StatusCode::PROXY_AUTHENTICATION_REQUIRED,
                    "cargo-llmreplay: this proxy files each call under its test, named in the proxy's credentials; `cargo llmreplay test` sets HTTPS_PROXY with them for every test".into(),
                );
                answer.headers_mut().insert(
                    http::header::PROXY_AUTHENTICATE,
                    HeaderValue::from_static("Basic realm=\"cargo-llmreplay\""),
                );
                answer
            }
        }
    }
}

/// The `/t/<test id>` before a route of the daemon's own (`…/__llmreplay/faults`, the MCP
/// routes): the id still percent-encoded, none for no prefix, and `Err` for any other prefix.
pub(crate) fn route_prefix(prefix: &str) -> Result<Option<&str>, ()> {
    match prefix.strip_prefix("/t/") {
        Some(encoded) if !encoded.contains('/') => Ok(Some(encoded)),
        _ if prefix.is_empty() => Ok(None),
        _ => Err(()),
    }
}

/// The test of a request on `conn`.
pub(crate) async fn identify_on(
    state: &Arc<State>,
    conn: &Conn,
    claims: Claims<'_>,
) -> Result<Identity, Refusal> {
    let peer = async { conn.peer_test(state).await.map(running_test).transpose() };
    identify(claims, &state.settings.proxy_secret, peer, &conn.challenged).await
}

/// The test a request that names none belongs to, from what its process runs: the one test,
/// else a refusal that names those running (a request of a client the test plugin does not
/// reach, or from a thread the test started, in a process that runs several tests at once).
pub(crate) fn running_test(running: Running) -> Result<TestId, Refusal> {
    match running {
        Running::One(test) => Ok(test),
        Running::Several(pid, tests) => {
            let names: Vec<String> = tests
                .iter()
                .take(5)
                .map(|t| format!("{:?}", t.as_str()))
                .collect();
            let more = match tests.len().saturating_sub(names.len()) {
                0 => String::new(),
                n => format!(" and {n} more"),
            };
            Err(Refusal::Ambiguous(format!(
                "cargo-llmreplay: process {pid} runs {} tests at once ({}{more}) and this request names none of them: a client the test plugin does not reach, or a thread the test started. Name the test in an X-Test-Id header (percent-encoded), or run that test alone in its process",
                tests.len(),
                names.join(", ")
            )))
        }
    }
}

/// The test `claims` name, else the one `peer` finds the connection's process running, else
/// `default`; `challenged` is the connection's, so that a proxy is challenged only once.
pub(crate) async fn identify(
    claims: Claims<'_>,
    proxy_secret: &str,
    peer: impl Future<Output = Result<Option<TestId>, Refusal>>,
    challenged: &AtomicBool,
) -> Result<Identity, Refusal> {
    let found = |test, source| Ok(Identity { test, source });
    if let Some(encoded) = claims.path {
        return found(path_id(encoded)?, Source::Path);
    }
    if let Some(value) = claims.query {
        let test = TestId::new(percent_decode_str(value).decode_utf8_lossy());
        return found(test, Source::Query);
    }
    if let Some(test) = header_id(claims.header)? {
        return found(test, Source::Header);
    }
    // Credentials with the run's secret that name no test (`serve --env` with no `--test-id`)
    // leave it to the process, and are not challenged: the client has no others.
    let trusted = claims
        .credentials
        .and_then(|c| credentials_id(c, proxy_secret));
    if let Some(Some(test)) = trusted {
        return found(test, Source::Credentials);
    }
    if let Some(test) = peer.await? {
        return found(test, Source::Peer);
    }
    if claims.challenge && trusted.is_none() && !challenged.swap(true, Ordering::Relaxed) {
        return Err(Refusal::Challenge);
    }
    found(TestId::new(TestId::DEFAULT), Source::Default)
}

/// The test id of a path's `/t/<id>/` segment, percent-decoded.
fn path_id(encoded: &str) -> Result<TestId, Refusal> {
    percent_decode_str(encoded)
        .decode_utf8()
        .map(TestId::new)
        .map_err(|_| {
            Refusal::Bad(format!(
                "cargo-llmreplay: the test id in /t/{encoded}/ is not UTF-8 once percent-decoded"
            ))
        })
}

/// The test an `X-Test-Id` header names: text (a Playwright title has `›`; anything that is
/// not text cannot name a folder), percent-decoded, since headers are ASCII for most clients
/// (httpx refuses anything else); none when it is empty.
pub(crate) fn header_id(header: Option<&HeaderValue>) -> Result<Option<TestId>, Refusal> {
    let Some(header) = header else {
        return Ok(None);
    };
    let Ok(raw) = std::str::from_utf8(header.as_bytes()) else {
        return Err(Refusal::Bad("cargo-llmreplay: the X-Test-Id header is not UTF-8; send the test's name as UTF-8 text (or percent-encoded in the /t/<test id>/ path)".into()));
    };
    if raw.is_empty() {
        return Ok(None);
    }
    percent_decode_str(raw)
        .decode_utf8()
        .map(|id| Some(TestId::new(id)))
        .map_err(|_| Refusal::Bad("cargo-llmreplay: the X-Test-Id header is not UTF-8 once percent-decoded; send the test's name as UTF-8, percent-encoded".into()))
}

/// What a proxy's credentials say, if they carry the run's secret (a token alone, a test's id
/// in base64url, is no more than a guess at a name): the test they name, or none for an empty
/// token.
fn credentials_id(value: &HeaderValue, secret: &str) -> Option<Option<TestId>> {
    let basic = value.to_str().ok()?.strip_prefix("Basic ")?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(basic.trim())
        .ok()?;
    let user = String::from_utf8(decoded).ok()?;
    let (user, password) = user.split_once(':')?;
    if password != secret {
        tracing::warn!(target: "cargo_llmreplay::capture", "proxy credentials without this run's secret; they name no test");
        return None;
    }
    // The token as given, or percent-encoded by a client that encodes userinfo.
    let user = percent_decode_str(user).decode_utf8().ok()?;
    if user.is_empty() {
        return Some(None);
    }
    providers::env::test_of_token(&user).map(|t| Some(TestId::new(t)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;

    const SECRET: &str = "0f3a";

    /// `identify` with a peer that runs `peer`, on a connection not yet challenged unless
    /// `challenged`.
    fn who(claims: Claims<'_>, peer: Option<&str>, challenged: bool) -> Result<Identity, Refusal> {
        let peer = std::future::ready(Ok(peer.map(TestId::new)));
        identify(claims, SECRET, peer, &AtomicBool::new(challenged))
            .now_or_never()
            .expect("no await pends")
    }

    fn named(result: Result<Identity, Refusal>) -> (String, Source) {
        let identity = result.expect("identified");
        (identity.test.as_str().to_string(), identity.source)
    }

    fn credentials(test: &str, secret: &str) -> HeaderValue {
        let user = format!("{}:{secret}", providers::env::token(test));
        let encoded = base64::engine::general_purpose::STANDARD.encode(user);
        HeaderValue::from_str(&format!("Basic {encoded}")).unwrap()
    }

    #[test]
    fn a_process_running_several_tests_names_them_in_its_refusal() {
        let (a, b) = (TestId::new("a.test.js > a"), TestId::new("b.test.js > b"));
        assert_eq!(running_test(Running::One(a.clone())), Ok(a.clone()));
        let Err(Refusal::Ambiguous(why)) = running_test(Running::Several(7, vec![a, b])) else {
            panic!("refused as ambiguous");
        };
        assert!(
            why.contains("process 7 runs 2 tests at once (\"a.test.js > a\", \"b.test.js > b\")")
                && why.contains("X-Test-Id"),
            "{why}"
        );
    }

    #[test]
    fn every_source_in_its_order() {
        let header = HeaderValue::from_static("from%20header");
        let creds = credentials("from$credentials", SECRET);
        let all = Claims {
            path: Some("k%3A%3At%24x"),
            query: Some("from%24query"),
            header: Some(&header),
            credentials: Some(&creds),
            challenge: true,
        };
        assert_eq!(
            named(who(all, Some("p"), false)),
            ("k::t$x".into(), Source::Path)
        );
        let no_path = Claims { path: None, ..all };
        assert_eq!(
            named(who(no_path, Some("p"), false)),
            ("from$query".into(), Source::Query)
        );
        let no_query = Claims {
            query: None,
            ..no_path
        };
        assert_eq!(
            named(who(no_query, Some("p"), false)),
            ("from header".into(), Source::Header)
        );
        let no_header = Claims {
            header: None,
            ..no_query
        };
        assert_eq!(
            named(who(no_header, Some("p"), false)),
            ("from$credentials".into(), Source::Credentials)
        );
        let no_credentials = Claims {
            credentials: None,
            ..no_header
        };
        assert_eq!(
            named(who(no_credentials, Some("from$peer"), false)),
            ("from$peer".into(), Source::Peer)
        );
        let plain = Claims {
            challenge: false,
            ..no_credentials
        };
        assert_eq!(
            named(who(plain, None, false)),
            ("default".into(), Source::Default)
        );
    }

    #[test]
    fn a_proxy_is_challenged_once_then_default() {
        let proxy = Claims {
            challenge: true,
            ..Claims::default()
        };
        assert_eq!(who(proxy, None, false), Err(Refusal::Challenge));
        assert_eq!(
            named(who(proxy, None, true)),
            ("default".into(), Source::Default)
        );
        let challenged = AtomicBool::new(false);
        let mut twice = (0..2).map(|_| {
            identify(proxy, SECRET, std::future::ready(Ok(None)), &challenged)
                .now_or_never()
                .unwrap()
        });
        assert_eq!(twice.next().unwrap(), Err(Refusal::Challenge));
        assert_eq!(twice.next().unwrap().unwrap().source, Source::Default);
    }

    #[test]
    fn refusals_and_what_names_nothing() {
        assert!(matches!(
            who(
                Claims {
                    path: Some("%FF"),
                    ..Claims::default()
                },
                None,
                false
            ),
            Err(Refusal::Bad(_))
        ));
        let binary = HeaderValue::from_bytes(b"\xff").unwrap();
        let undecodable = HeaderValue::from_static("%FF");
        for header in [&binary, &undecodable] {
            let claims = Claims {
                header: Some(header),
                ..Claims::default()
            };
            assert!(matches!(who(claims, None, false), Err(Refusal::Bad(_))));
        }
        // An empty header names nothing: the peer's test, as with no header.
        let empty = HeaderValue::from_static("");
        let claims = Claims {
            header: Some(&empty),
            ..Claims::default()
        };
        assert_eq!(named(who(claims, Some("p$q"), false)).1, Source::Peer);
        // Credentials without the run's secret name nothing either.
        let guessed = credentials("k$t", "not-the-secret");
        let claims = Claims {
            credentials: Some(&guessed),
            ..Claims::default()
        };
        assert_eq!(named(who(claims, None, false)).1, Source::Default);
        // The run's secret with no test: the process decides, and no challenge.
        let nameless = credentials("", SECRET);
        let claims = Claims {
            credentials: Some(&nameless),
            challenge: true,
            ..Claims::default()
        };
        assert_eq!(named(who(claims, Some("p$q"), false)).1, Source::Peer);
        assert_eq!(named(who(claims, None, false)).1, Source::Default);
        let encoded = HeaderValue::from_static("suite %E2%80%BA one");
        let claims = Claims {
            header: Some(&encoded),
            ..Claims::default()
        };
        assert_eq!(named(who(claims, None, false)).0, "suite \u{203a} one");
    }
}
