//! A provider the daemon serves: a name in routes and cassette files, a family (whose file in
//! the `providers` crate knows everything that differs), and an upstream, with where it came
//! from. Also the transfer-level headers that are never forwarded or recorded.

use cassettes::ProviderName;
pub use providers::{Family, Kind};

/// Where an upstream came from, first to last in precedence: said at start in record modes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UpstreamSource {
    Flag,
    ConfigFile,
    /// The user's own environment variable, e.g. `OPENAI_BASE_URL` at a gateway.
    Env(&'static str),
    BuiltIn,
}

impl std::fmt::Display for UpstreamSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UpstreamSource::Flag => f.write_str("--upstream"),
            UpstreamSource::ConfigFile => f.write_str("llmreplay.toml"),
            UpstreamSource::Env(var) => write!(f, "{var}"),
            UpstreamSource::BuiltIn => f.write_str("built in"),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Provider {
    pub name: ProviderName,
    pub kind: Kind,
    /// `scheme://host[:port][/prefix]`, no trailing slash; none when the family has no default
    /// and nothing named one (Azure without `AZURE_OPENAI_ENDPOINT`).
    pub upstream: Option<String>,
    pub source: UpstreamSource,
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
                .or_else(|| regional_upstream(kind)),
            source: UpstreamSource::BuiltIn,
        }
    }

    pub fn family(&self) -> &'static dyn Family {
        self.kind.family()
    }

    /// Environment variables that may hold this provider's key, in order: `<NAME>_API_KEY` for a
    /// gateway of your own, then the family's usual ones.
    pub fn key_vars(&self) -> Vec<String> {
        providers::env::key_vars_of(self.name.as_str(), self.kind)
    }

    /// The upstream, or an error that says how to name one.
    pub fn upstream(&self) -> Result<&str, String> {
        self.upstream.as_deref().ok_or_else(|| {
            let vars: Vec<&str> = providers::env::of(self.kind)
                .base_urls
                .iter()
                .map(|v| v.name)
                .collect();
            format!(
                "cargo-llmreplay: the {name} provider has no upstream to record from. Set {} to your endpoint before the run, or pass --upstream {name}=URL, or set [providers.{name}] upstream in llmreplay.toml",
                vars.first().copied().unwrap_or("its base URL variable"),
                name = self.name
            )
        })
    }
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

/// The real endpoint of a family whose host names a region or location, from the variables
/// its SDKs read: Bedrock's `AWS_REGION` (else `AWS_DEFAULT_REGION`, else us-east-1), Vertex
/// AI's `GOOGLE_CLOUD_LOCATION` (else us-central1).
fn regional_upstream(kind: Kind) -> Option<String> {
    let env = |names: &[&str], default: &str| {
        names
            .iter()
            .find_map(|n| std::env::var(n).ok().filter(|v| !v.is_empty()))
            .unwrap_or_else(|| default.to_string())
    };
    match kind {
        Kind::Bedrock => Some(format!(
            "https://bedrock-runtime.{}.amazonaws.com",
            env(&["AWS_REGION", "AWS_DEFAULT_REGION"], "us-east-1")
        )),
        Kind::Vertex => {
            let location = env(&["GOOGLE_CLOUD_LOCATION"], "us-central1");
            Some(if location == "global" {
                "https://aiplatform.googleapis.com".into()
            } else {
                format!("https://{location}-aiplatform.googleapis.com")
            })
        }
        _ => None,
    }
}
