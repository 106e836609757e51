//! A provider the daemon serves: a name in routes and cassette files, a family (whose file in
//! the `providers` crate knows everything that differs), and an upstream, with where it came
//! from. Also the transfer-level headers that are never forwarded or recorded.

use cassettes::ProviderName;
pub use providers::{Family, Kind};
use std::sync::Arc;

/// Where an upstream came from, first to last in precedence: said at start in record modes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UpstreamSource {
    /// `--upstream NAME=URL`.
    Flag,
    /// `[providers.NAME] upstream`.
    ConfigFile,
    /// The user's own environment variable, e.g. `OPENAI_BASE_URL` at a gateway.
    Env(&'static str),
    /// The family's own endpoint.
    BuiltIn,
    /// The host a test called through the daemon as its proxy (or `--upstream HOST=URL`).
    Captured,
}

impl std::fmt::Display for UpstreamSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UpstreamSource::Flag => f.write_str("--upstream"),
            UpstreamSource::ConfigFile => f.write_str("llmreplay.toml"),
            UpstreamSource::Env(var) => write!(f, "{var}"),
            UpstreamSource::BuiltIn => f.write_str("built in"),
            UpstreamSource::Captured => f.write_str("captured host"),
        }
    }
}

#[derive(Clone, Debug)]
/// A provider the daemon serves: its name, family and upstream.
pub struct Provider {
    /// Its name in routes and cassette files.
    pub name: ProviderName,
    /// The family it speaks.
    pub kind: Kind,
    /// `scheme://host[:port][/prefix]`, no trailing slash; none when the family has no default
    /// and nothing named one (Azure without `AZURE_OPENAI_ENDPOINT`).
    pub upstream: Option<String>,
    /// Where the upstream came from.
    pub source: UpstreamSource,
    /// The upstream's scheme, authority and path prefix, parsed on first use and kept: every
    /// upstream URL is built from these parts, never by pasting text.
    pub parsed: std::sync::OnceLock<Result<UpstreamRoot, UpstreamError>>,
    /// How its requests upstream are paced (`[providers.NAME] max_concurrent`,
    /// `min_interval_ms`), if they are.
    pub pace: Option<std::sync::Arc<crate::pace::Pace>>,
}

/// An upstream URL taken apart once.
#[derive(Clone, Debug)]
pub struct UpstreamRoot {
    scheme: http::uri::Scheme,
    authority: http::uri::Authority,
    /// The path before the client's, no trailing `/` (`/api` of `https://gw/api`).
    prefix: String,
}

impl Provider {
    /// A built-in family under its own name, with its default upstream.
    pub fn builtin(kind: Kind) -> Self {
        Provider {
            name: ProviderName::new(kind.as_str()).expect("built-in names are valid"),
            kind,
            upstream: kind
                .family()
                .default_upstream()
                .map(str::to_string)
                .or_else(|| {
                    kind.family()
                        .regional_upstream(&|name| std::env::var(name).ok())
                }),
            source: UpstreamSource::BuiltIn,
            parsed: Default::default(),
            pace: None,
        }
    }

    /// What its family knows.
    pub fn family(&self) -> &'static dyn Family {
        self.kind.family()
    }

    /// Environment variables that may hold this provider's key, in order: `<NAME>_API_KEY` for a
    /// gateway of your own, then the family's usual ones.
    pub fn key_vars(&self) -> Vec<String> {
        providers::env::key_vars_of(self.name.as_str(), self.kind)
    }

    /// The variables that point clients at this provider, each with its value after the
    /// daemon's base URL (`GEMINI_API_BASE`, `/gemini/v1beta`).
    pub fn base_url_vars(&self) -> Vec<(String, String)> {
        let routed = providers::env::Routed {
            name: self.name.to_string(),
            kind: self.kind,
        };
        providers::env::injected("", std::slice::from_ref(&routed))
    }

    /// The upstream, or an error that says how to name one.
    pub fn upstream(&self) -> Result<&str, UpstreamError> {
        self.upstream.as_deref().ok_or_else(|| UpstreamError::None {
            name: self.name.to_string(),
            var: providers::env::of(self.kind)
                .base_urls
                .first()
                .map_or("its base URL variable", |v| v.name),
        })
    }
}

impl Provider {
    /// The upstream URL of `path` (which starts with `/`) and `query`: built from the parsed
    /// root's scheme and authority, so that nothing in a path can name another host or port.
    pub fn upstream_uri(
        &self,
        path: &str,
        query: Option<&str>,
    ) -> Result<http::Uri, UpstreamError> {
        let root = self.upstream()?;
        let UpstreamRoot {
            scheme,
            authority,
            prefix,
        } = self
            .parsed
            .get_or_init(|| {
                let parsed: http::Uri = root.parse().map_err(|e| UpstreamError::NotUrl {
                    name: self.name.to_string(),
                    source: Arc::new(e),
                })?;
                match (parsed.scheme(), parsed.authority()) {
                    (Some(scheme), Some(authority)) => Ok(UpstreamRoot {
                        scheme: scheme.clone(),
                        authority: authority.clone(),
                        prefix: parsed.path().trim_end_matches('/').to_string(),
                    }),
                    _ => Err(UpstreamError::NoHost {
                        name: self.name.to_string(),
                        url: providers::redact::url(root).into_owned(),
                    }),
                }
            })
            .clone()?;
        let mut target = String::with_capacity(prefix.len() + path.len() + 1);
        target.push_str(&prefix);
        if !path.starts_with('/') {
            target.push('/');
        }
        target.push_str(path);
        if let Some(q) = query {
            target.push('?');
            target.push_str(q);
        }
        http::Uri::builder()
            .scheme(scheme.clone())
            .authority(authority.clone())
            .path_and_query(target)
            .build()
            .map_err(|e| UpstreamError::Path {
                path: providers::redact::url(path).into_owned(),
                source: Arc::new(e),
            })
    }
}

impl Provider {
    /// Whether a request to `uri` may go there with the credentials it carries: the key the
    /// client sent (`carries_key`), and for Bedrock the AWS credentials the daemon signs with.
    /// A host given to `--allow-credentials-to` always may. Bedrock's signature goes only to
    /// the family's own https hosts or an upstream the user's own environment named
    /// (`AWS_ENDPOINT_URL_BEDROCK_RUNTIME`). A client's key goes anywhere the user named
    /// (`--upstream`, a base URL variable), but an upstream that only `llmreplay.toml` names,
    /// a file a pull request can change, gets it only at the family's own https hosts or on
    /// loopback.
    pub fn may_send_credentials(
        &self,
        uri: &http::Uri,
        allowed: &[String],
        carries_key: bool,
    ) -> Result<(), UpstreamError> {
        let host = uri.host().unwrap_or("");
        let https = uri.scheme_str() == Some("https");
        if allows(allowed, uri) {
            return Ok(());
        }
        if !(self.family().may_receive_credentials(https, host)
            || matches!(self.source, UpstreamSource::Env(_)))
        {
            return Err(UpstreamError::Credentials {
                name: self.name.to_string(),
                url: providers::redact::url(self.upstream.as_deref().unwrap_or("")).into_owned(),
                host: host.to_string(),
            });
        }
        let own = is_loopback(host)
            || (https && self.kind != Kind::Http && providers::for_host(host).1 == self.kind);
        if carries_key && self.source == UpstreamSource::ConfigFile && !own {
            return Err(UpstreamError::CommittedUpstream {
                setting: self.setting(),
                url: providers::redact::url(self.upstream.as_deref().unwrap_or("")).into_owned(),
                host: host.to_string(),
            });
        }
        Ok(())
    }

    /// The `llmreplay.toml` setting that names this provider's upstream.
    fn setting(&self) -> String {
        match self.name.as_str().strip_prefix(cassettes::mcp::PREFIX) {
            Some(server) => format!("[mcp.{server}] url"),
            None => format!("[providers.{}] upstream", self.name.as_str()),
        }
    }
}

/// Whether `--allow-credentials-to` names `uri`'s host (or its host and port).
pub fn allows(allowed: &[String], uri: &http::Uri) -> bool {
    let host = uri.host().unwrap_or("");
    allowed.iter().any(|a| {
        a.eq_ignore_ascii_case(host)
            || uri
                .authority()
                .is_some_and(|auth| a.eq_ignore_ascii_case(auth.as_str()))
    })
}

/// Whether `host` is this machine: `localhost`, or a loopback address.
pub fn is_loopback(host: &str) -> bool {
    let host = host.trim_end_matches('.');
    host.eq_ignore_ascii_case("localhost")
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Whether a request carries a key: a secret header (every family's, and `[redact] headers`)
/// or a secret query parameter.
pub fn carries_key(headers: &http::HeaderMap, query: Option<&str>, redact: &[String]) -> bool {
    headers.keys().any(|name| {
        providers::redact::is_secret_header(name.as_str())
            || redact.iter().any(|r| r.eq_ignore_ascii_case(name.as_str()))
    }) || query.is_some_and(|q| {
        q.split('&')
            .any(|pair| providers::redact::is_secret_param(pair.split('=').next().unwrap_or("")))
    })
}

/// Why a request cannot go to a provider's upstream; each says what to set.
#[derive(Debug, Clone, thiserror::Error)]
pub enum UpstreamError {
    /// No upstream is known.
    #[error("cargo-llmreplay: the {name} provider has no upstream to record from. Set {var} to your endpoint before the run, or pass --upstream {name}=URL, or set [providers.{name}] upstream in llmreplay.toml")]
    None {
        /// The provider.
        name: String,
        /// Its first base URL variable.
        var: &'static str,
    },
    /// The upstream is not a URL.
    #[error("cargo-llmreplay: the {name} upstream is not a URL ({source})")]
    NotUrl {
        /// The provider.
        name: String,
        /// Why (shared: the parsed root is kept, errors too).
        source: Arc<http::uri::InvalidUri>,
    },
    /// The upstream has no scheme or host.
    #[error("cargo-llmreplay: the {name} upstream {url} has no scheme or host")]
    NoHost {
        /// The provider.
        name: String,
        /// The upstream, its secrets masked.
        url: String,
    },
    /// The path makes no URL with the upstream.
    #[error("cargo-llmreplay: no upstream URL for {path}: {source}")]
    Path {
        /// The path, its secrets masked.
        path: String,
        /// Why.
        source: Arc<http::Error>,
    },
    /// A client's key may not go to an upstream only `llmreplay.toml` names.
    #[error("cargo-llmreplay: {setting} in llmreplay.toml points at {url}, which is not the family's own https host nor loopback, so this request's key was not sent there (a committed file alone never sends keys elsewhere). If you trust {host}, pass --allow-credentials-to {host}")]
    CommittedUpstream {
        /// The setting: `[providers.NAME] upstream`, `[mcp.NAME] url`.
        setting: String,
        /// The upstream, its secrets masked.
        url: String,
        /// The host to allow.
        host: String,
    },
    /// A proxy only `llmreplay.toml` names could read a request that carries a key.
    #[error("cargo-llmreplay: [upstream] proxy in llmreplay.toml ({proxy}) would read this request and its key ({why}), so it was not sent (a committed file alone never sends keys elsewhere). If you trust {host}, pass --allow-credentials-to {host}")]
    CommittedProxy {
        /// The proxy, without its credentials.
        proxy: String,
        /// Why it could read it.
        why: &'static str,
        /// The host to allow.
        host: String,
    },
    /// The daemon's signing credentials may not go to this upstream.
    #[error("cargo-llmreplay: the {name} upstream {url} is not one of {name}'s own https hosts, so the credentials the daemon signs with are not sent there. If you trust it, pass --allow-credentials-to {host}")]
    Credentials {
        /// The provider.
        name: String,
        /// The upstream, its secrets masked.
        url: String,
        /// The host to allow.
        host: String,
    },
}

/// Request headers never forwarded as they came: hop-by-hop ones, and those the daemon sets.
pub const NOT_FORWARDED: &[&str] = &[
    "host",
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
    "accept-encoding",
    "x-test-id",
];

/// Response headers that describe one transfer rather than the answer: never recorded.
/// `content-encoding` is kept: a body is stored as the bytes received, so replay must say how
/// they are encoded. Secrets are every family's (`providers::secret_headers`).
pub const NOT_RECORDED: &[&str] = &[
    "connection",
    "keep-alive",
    "transfer-encoding",
    "content-length",
    "date",
    "alt-svc",
    "server-timing",
];
