//! From a request's path and headers to the test it belongs to, the provider and the path to
//! send upstream. The three forms (README, "The daemon alone"): `/t/<test id>/<provider>/...`, `/<provider>/...` with
//! `X-Test-Id`, and well-known upstream paths with no provider prefix.

use crate::provider::{Kind, Provider};
use cassettes::TestId;
use percent_encoding::percent_decode_str;
use std::sync::Arc;

#[derive(Debug)]
pub struct Route {
    pub test: TestId,
    pub provider: Arc<Provider>,
    /// The path as the provider's own API has it, e.g. `/v1/chat/completions`.
    pub upstream_path: String,
    /// The host, for a call captured as the test's proxy rather than sent to a base URL: a
    /// miss of it in replay is a call that would have left the machine.
    pub captured: Option<String>,
}

impl Route {
    /// This route as messages show it: its path without the run's known secrets and secret
    /// shapes (a key a test put in an id, a bot's token), as its recordings store it.
    pub(crate) fn shown(&self, scrub: &cassettes::secrets::Scrubber) -> Route {
        Route {
            test: self.test.clone(),
            provider: self.provider.clone(),
            upstream_path: shown_path(scrub, &self.upstream_path),
            captured: self.captured.clone(),
        }
    }
}

/// `path` without the run's known secrets and secret shapes.
pub(crate) fn shown_path(scrub: &cassettes::secrets::Scrubber, path: &str) -> String {
    scrub.text(path).unwrap_or_else(|| path.to_string())
}

/// What a base URL's path says: its provider and upstream path, and the test it names.
#[derive(Debug)]
pub struct Resolved {
    /// The `/t/<id>/` segment, percent-encoded.
    pub test: Option<String>,
    pub provider: Arc<Provider>,
    pub upstream_path: String,
}

impl Resolved {
    /// The route, once its test is known.
    pub fn with_test(self, test: TestId) -> Route {
        Route {
            test,
            provider: self.provider,
            upstream_path: self.upstream_path,
            captured: None,
        }
    }
}

/// Why a path routes nowhere; each says what to do.
#[derive(Debug)]
pub enum RouteError {
    /// No provider prefix and no well-known path: 404.
    NoProvider(String),
    /// Not a path to send anywhere (dot segments, an undecodable test id): 400.
    Bad(String),
}

impl RouteError {
    pub fn status(&self) -> http::StatusCode {
        match self {
            RouteError::NoProvider(_) => http::StatusCode::NOT_FOUND,
            RouteError::Bad(_) => http::StatusCode::BAD_REQUEST,
        }
    }

    pub fn message(self) -> String {
        match self {
            RouteError::NoProvider(m) | RouteError::Bad(m) => m,
        }
    }
}

/// A path's provider, the path to send upstream and the `/t/<id>/` segment it names its test
/// with (percent-encoded, for `identity` to decide).
pub fn resolve(path: &str, providers: &[Arc<Provider>]) -> Result<Resolved, RouteError> {
    // An empty id (`<root>/t/${TEST_ID}/...` with the variable unset) would otherwise lose its
    // segment to the collapse below, and the provider's name would be read as the test's.
    if path.trim_start_matches('/').starts_with("t//") {
        return Err(RouteError::Bad(
            "cargo-llmreplay: the test id in /t/<id>/ is empty; name the test there (percent-encoded), or leave /t/ out".into(),
        ));
    }
    // A base URL that ends in `/` gives `//openai/...`: runs of slashes are one, so that no
    // part of a path can ever be read as an authority upstream.
    let path = collapse_slashes(path);
    let path = path.as_ref();
    // `..` would climb out of the upstream's prefix; clients that mean it resolve it themselves.
    let dot = path.split('/').any(|segment| {
        let decoded = percent_decode_str(segment).decode_utf8_lossy();
        decoded == "." || decoded == ".."
    });
    if dot {
        return Err(RouteError::Bad(format!(
            "cargo-llmreplay: the path {path:?} has a '.' or '..' segment; send the path as the provider's API names it"
        )));
    }
    let (test, rest) = match path.strip_prefix("/t/") {
        Some(after) => {
            let (encoded, rest) = after.split_at(after.find('/').unwrap_or(after.len()));
            (Some(encoded.to_string()), rest)
        }
        None => (None, path),
    };
    // Every path from here starts with one `/` (the test id's segment included).
    let rest = if rest.starts_with('/') { rest } else { "/" };
    let first = rest[1..].split('/').next().unwrap_or("");
    let named = providers
        .iter()
        .find(|p| p.name.as_str() == first)
        .or_else(|| builtin_of_host(first, providers));
    if let Some(p) = named {
        let upstream_path = &rest[1 + first.len()..];
        let upstream_path = if upstream_path.is_empty() {
            "/"
        } else {
            upstream_path
        };
        // A built-in family's clients may send another family's paths to its base URL.
        let p = match p.kind.family().hands_over(upstream_path) {
            Some(kind) if p.name.as_str() == p.kind.as_str() => builtin(kind, providers),
            _ => p,
        };
        return Ok(Resolved {
            test,
            provider: p.clone(),
            upstream_path: p.kind.family().api_path(upstream_path).into_owned(),
        });
    }
    if let Some(kind) = Kind::for_path(rest) {
        return Ok(Resolved {
            test,
            provider: builtin(kind, providers).clone(),
            upstream_path: rest.to_string(),
        });
    }
    let names: Vec<&str> = providers.iter().map(|p| p.name.as_str()).collect();
    Err(RouteError::NoProvider(format!(
        "cargo-llmreplay: no provider for path {rest:?}. Prefix the path with a provider name ({}), e.g. /openai/v1/chat/completions, or add one under [providers.NAME] in llmreplay.toml",
        names.join(", ")
    )))
}

/// The built-in provider of `kind`.
fn builtin(kind: Kind, providers: &[Arc<Provider>]) -> &Arc<Provider> {
    providers
        .iter()
        .find(|p| p.name.as_str() == kind.as_str())
        .expect("built-in providers are always present")
}

/// The built-in provider whose API's host a route segment names (`aiplatform.googleapis.com`):
/// google-genai keeps its paths only under a base URL that ends in `.googleapis.com`.
fn builtin_of_host<'a>(segment: &str, providers: &'a [Arc<Provider>]) -> Option<&'a Arc<Provider>> {
    if !segment.contains('.') {
        return None;
    }
    let (name, kind) = providers::for_host(segment);
    (kind != Kind::Http && name == kind.as_str()).then(|| builtin(kind, providers))
}

/// The path with every run of `/` made one.
fn collapse_slashes(path: &str) -> std::borrow::Cow<'_, str> {
    if !path.contains("//") {
        return std::borrow::Cow::Borrowed(path);
    }
    let mut out = String::with_capacity(path.len());
    for c in path.chars() {
        if !(c == '/' && out.ends_with('/')) {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Whether a `Host` header names this daemon on loopback: `127.0.0.1`, `localhost` or `[::1]`,
/// with its port (or none, as a client on port 80 would send).
pub(crate) fn loopback_host(host: Option<&http::HeaderValue>, port: u16) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;

    /// A base URL's route as the front door makes it: the path resolved, then its test
    /// identified from the path, the header or the peer.
    fn resolve(
        path: &str,
        header: Option<&str>,
        peer: Option<TestId>,
        providers: &[Arc<Provider>],
    ) -> Result<Route, RouteError> {
        let resolved = super::resolve(path, providers)?;
        let header = header.map(|h| http::HeaderValue::from_bytes(h.as_bytes()).unwrap());
        let claims = crate::identity::Claims {
            path: resolved.test.as_deref(),
            header: header.as_ref(),
            ..Default::default()
        };
        let challenged = std::sync::atomic::AtomicBool::new(false);
        let identity =
            crate::identity::identify(claims, "", std::future::ready(Ok(peer)), &challenged)
                .now_or_never()
                .unwrap()
                .map_err(|refused| match refused {
                    crate::identity::Refusal::Bad(why) => RouteError::Bad(why),
                    crate::identity::Refusal::Challenge
                    | crate::identity::Refusal::Ambiguous(_) => {
                        unreachable!("no proxy, no peer here")
                    }
                })?;
        Ok(resolved.with_test(identity.test))
    }

    fn providers() -> Vec<Arc<Provider>> {
        Kind::ALL
            .iter()
            .map(|k| Arc::new(Provider::builtin(*k)))
            .collect()
    }

    #[test]
    fn the_three_forms() {
        let ps = providers();
        let r = resolve(
            "/t/my-crate%3A%3Achat%24streams_reply/openai/v1/chat/completions",
            None,
            None,
            &ps,
        )
        .unwrap();
        assert_eq!(r.test.as_str(), "my-crate::chat$streams_reply");
        assert_eq!(
            (r.provider.name.as_str(), r.upstream_path.as_str()),
            ("openai", "/v1/chat/completions")
        );
        let r = resolve("/anthropic/v1/messages", Some("suite > one"), None, &ps).unwrap();
        assert_eq!(
            (r.test.as_str(), r.provider.name.as_str()),
            ("suite > one", "anthropic")
        );
        let r = resolve(
            "/anthropic/v1/messages",
            Some("suite %E2%80%BA one"),
            None,
            &ps,
        )
        .unwrap();
        assert_eq!(r.test.as_str(), "suite \u{203a} one");
        assert_eq!(
            resolve("/anthropic/v1/messages", Some("%FF"), None, &ps)
                .unwrap_err()
                .status(),
            400
        );
        let peer = || Some(TestId::new("from$peer"));
        let r = resolve("/anthropic/v1/messages", None, peer(), &ps).unwrap();
        assert_eq!(
            r.test.as_str(),
            "from$peer",
            "the peer's test when nothing else names one"
        );
        let r = resolve("/anthropic/v1/messages", Some("header"), peer(), &ps).unwrap();
        assert_eq!(r.test.as_str(), "header", "a header wins over the peer");
        let r = resolve("/v1beta/models/g:generateContent", None, None, &ps).unwrap();
        assert_eq!(
            (r.test.as_str(), r.provider.name.as_str()),
            ("default", "gemini")
        );
        let r = resolve("/t/x/api/chat", None, None, &ps).unwrap();
        assert_eq!(
            (
                r.test.as_str(),
                r.provider.name.as_str(),
                r.upstream_path.as_str()
            ),
            ("x", "ollama", "/api/chat")
        );
        for doubled in [
            "//openai/v1/chat/completions",
            "/t/x//openai//v1/chat/completions",
        ] {
            let r = resolve(doubled, None, None, &ps).unwrap();
            assert_eq!(
                (r.provider.name.as_str(), r.upstream_path.as_str()),
                ("openai", "/v1/chat/completions"),
                "{doubled}"
            );
        }
        for (quirk, canonical) in [
            ("/anthropic/messages", "/v1/messages"),
            ("/anthropic/v1/messages", "/v1/messages"),
            (
                "/gemini/models/g:generateContent",
                "/v1beta/models/g:generateContent",
            ),
            (
                "/gemini/v1beta/models/g:generateContent",
                "/v1beta/models/g:generateContent",
            ),
            ("/anthropic/messagesx", "/messagesx"),
        ] {
            let r = resolve(quirk, None, None, &ps).unwrap();
            assert_eq!(r.upstream_path, canonical, "{quirk}");
        }
        // google-genai's base URLs name the API's host; with `GOOGLE_GENAI_USE_VERTEXAI` alone
        // it sends Vertex's paths to its Gemini base URL.
        for (path, provider, upstream) in [
            (
                "/t/x/generativelanguage.googleapis.com/v1beta/models/g:generateContent",
                "gemini",
                "/v1beta/models/g:generateContent",
            ),
            (
                "/aiplatform.googleapis.com/v1beta1/projects/p/locations/l/publishers/google/models/g:generateContent",
                "vertex",
                "/v1beta1/projects/p/locations/l/publishers/google/models/g:generateContent",
            ),
            (
                "/generativelanguage.googleapis.com/v1beta1/projects/p/locations/l/publishers/google/models/g:streamGenerateContent",
                "vertex",
                "/v1beta1/projects/p/locations/l/publishers/google/models/g:streamGenerateContent",
            ),
            (
                "/gemini/v1beta1/projects/p/locations/l/publishers/google/models/g:generateContent",
                "vertex",
                "/v1beta1/projects/p/locations/l/publishers/google/models/g:generateContent",
            ),
        ] {
            let r = resolve(path, None, None, &ps).unwrap();
            assert_eq!(
                (r.provider.name.as_str(), r.upstream_path.as_str()),
                (provider, upstream),
                "{path}"
            );
        }
        assert!(resolve("/evil.example/v1/x", None, None, &ps).is_err());
        assert!(resolve("/t/x/elsewhere", None, None, &ps)
            .unwrap_err()
            .message()
            .contains("no provider"));
        for dots in [
            "/t/x/openai/v1/../../admin",
            "/openai/./v1/x",
            "/t/x/openai/v1/%2e%2E/y",
        ] {
            let e = resolve(dots, None, None, &ps).unwrap_err();
            assert_eq!(e.status(), 400, "{dots}");
        }
    }

    proptest::proptest! {
        /// Any path and test header: a route or an error, never a panic; a route's upstream
        /// path is a suffix of the path and has no dot segment.
        #[test]
        fn any_path_routes_or_errs(path in "/[\\PC/%.]{0,80}", header in proptest::option::of("\\PC{0,20}")) {
            let ps = providers();
            if let Ok(r) = resolve(&path, header.as_deref(), None, &ps) {
                let collapsed = collapse_slashes(&path);
                // A client quirk may put the API's version in front (`/v1` + `/messages`).
                let tail = ["/v1beta", "/v1"].iter().find_map(|v| {
                    r.upstream_path.strip_prefix(v).filter(|_| !collapsed.ends_with(&r.upstream_path))
                }).unwrap_or(&r.upstream_path);
                proptest::prop_assert!(collapsed.ends_with(tail) || r.upstream_path == "/");
                proptest::prop_assert!(!r.upstream_path.split('/').any(|s| s == ".."));
                proptest::prop_assert!(r.upstream_path.starts_with('/') && !r.upstream_path.starts_with("//"));
            }
        }
    }

    #[test]
    fn only_loopback_names_of_this_port_pass() {
        let ok = |h: &str| loopback_host(Some(&http::HeaderValue::from_str(h).unwrap()), 4090);
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
