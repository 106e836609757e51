//! The environment variables that point clients at a provider, per family: which ones the runner
//! sets in each test process (every base URL a popular client reads, and a placeholder for each
//! key in replay), and which ones, read from the user's own environment, say where recording
//! should go. Plain data and std only: the runner uses it and must start in microseconds.

use crate::Kind;

/// A variable that holds a base URL: `<daemon base>/<route><suffix>` when injected; a user's
/// value with `suffix` taken off is the upstream, since the daemon appends the client's path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BaseUrlVar {
    /// The variable's name.
    pub name: &'static str,
    /// What clients expect after the host: `/v1` for OpenAI-style clients, nothing for others.
    pub suffix: &'static str,
    /// Who reads it, for the README's table and for people reading this.
    pub read_by: &'static str,
    /// The route it names when not the provider's own name: google-genai keeps its paths
    /// (and Vertex's project and location) only for a base URL that ends in `.googleapis.com`,
    /// so its variables name the route by the API's host, which the daemon routes as well.
    pub route: Option<&'static str>,
}

/// Everything a family's clients read from the environment.
#[derive(Clone, Copy, Debug)]
pub struct FamilyEnv {
    /// The base-URL variables its clients read.
    pub base_urls: &'static [BaseUrlVar],
    /// Key variables that get a placeholder in replay when unset: SDKs refuse to start without.
    pub keys: &'static [&'static str],
    /// A credentials file its SDKs find through a variable, with what replay gives them when
    /// the variable is unset.
    pub credentials_file: Option<CredentialsFile>,
}

/// A credentials file a family's SDKs read from the file a variable names, and the placeholder
/// written for replay: a file they accept without reaching the network.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CredentialsFile {
    /// The variable that names the file.
    pub var: &'static str,
    /// The placeholder's file name, in the run's folder of placeholders.
    pub file_name: &'static str,
    /// The placeholder's contents.
    pub placeholder: &'static str,
}

const fn var(name: &'static str, suffix: &'static str, read_by: &'static str) -> BaseUrlVar {
    BaseUrlVar {
        name,
        suffix,
        read_by,
        route: None,
    }
}

/// [`var`], its route named by the API's host (see [`BaseUrlVar::route`]).
const fn host_var(name: &'static str, host: &'static str, read_by: &'static str) -> BaseUrlVar {
    BaseUrlVar {
        name,
        suffix: "",
        read_by,
        route: Some(host),
    }
}

const OPENAI: FamilyEnv = FamilyEnv {
    base_urls: &[
        var(
            "OPENAI_BASE_URL",
            "/v1",
            "openai (Python, Node), async-openai, rig",
        ),
        var("OPENAI_API_BASE", "/v1", "litellm, langchain-openai"),
    ],
    keys: &["OPENAI_API_KEY"],
    credentials_file: None,
};

const AZURE: FamilyEnv = FamilyEnv {
    base_urls: &[
        var(
            "AZURE_OPENAI_ENDPOINT",
            "",
            "openai's AzureOpenAI (Python, Node)",
        ),
        var("AZURE_API_BASE", "", "litellm"),
        var("AZURE_ENDPOINT", "", "rig"),
    ],
    keys: &["AZURE_OPENAI_API_KEY", "AZURE_API_KEY"],
    credentials_file: None,
};

const ANTHROPIC: FamilyEnv = FamilyEnv {
    base_urls: &[
        var(
            "ANTHROPIC_BASE_URL",
            "",
            "anthropic (Python, Node), @ai-sdk/anthropic, litellm",
        ),
        var("ANTHROPIC_API_URL", "", "langchain-anthropic"),
        var("ANTHROPIC_API_BASE", "", "litellm"),
    ],
    keys: &["ANTHROPIC_API_KEY"],
    credentials_file: None,
};

const GEMINI: FamilyEnv = FamilyEnv {
    base_urls: &[
        // google-genai reads this one for Vertex too when `GOOGLE_GENAI_USE_VERTEXAI` alone
        // says Vertex: the daemon hands a Vertex path on this route to Vertex.
        host_var(
            "GOOGLE_GEMINI_BASE_URL",
            "generativelanguage.googleapis.com",
            "google-genai",
        ),
        var("GEMINI_API_BASE", "/v1beta", "litellm"),
    ],
    keys: &["GEMINI_API_KEY", "GOOGLE_API_KEY"],
    credentials_file: None,
};

const OLLAMA: FamilyEnv = FamilyEnv {
    base_urls: &[
        var("OLLAMA_HOST", "", "ollama (Python)"),
        var("OLLAMA_API_BASE_URL", "", "rig"),
        var("OLLAMA_API_BASE", "", "litellm"),
    ],
    keys: &[],
    credentials_file: None,
};

const BEDROCK: FamilyEnv = FamilyEnv {
    base_urls: &[var(
        "AWS_ENDPOINT_URL_BEDROCK_RUNTIME",
        "",
        "boto3, botocore, the AWS SDKs (they keep the path)",
    )],
    // The SDKs sign every request: in replay, with placeholder credentials.
    keys: &["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"],
    credentials_file: None,
};

const VERTEX: FamilyEnv = FamilyEnv {
    base_urls: &[host_var(
        "GOOGLE_VERTEX_BASE_URL",
        "aiplatform.googleapis.com",
        "google-genai (vertexai=True)",
    )],
    keys: &[],
    credentials_file: Some(CredentialsFile {
        var: "GOOGLE_APPLICATION_CREDENTIALS",
        file_name: "google-application-credentials.json",
        // google-auth's Application Default Credentials, of a user: its access token is used
        // as it is until its expiry, so nothing asks Google's token endpoint for another.
        placeholder: r#"{"type": "authorized_user", "client_id": "llmreplay-replay", "client_secret": "llmreplay-replay", "refresh_token": "llmreplay-replay", "token": "llmreplay-replay-key", "expiry": "2999-12-31T00:00:00Z"}"#,
    }),
};

const HTTP: FamilyEnv = FamilyEnv {
    base_urls: &[],
    keys: &[],
    credentials_file: None,
};

/// Where clients and the daemon look for an HTTP(S) proxy, as curl does (either case).
pub const PROXY_VARS: &[&str] = &[
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "ALL_PROXY",
    "all_proxy",
];

/// The hosts reached without the proxy.
pub const NO_PROXY_VARS: &[&str] = &["NO_PROXY", "no_proxy"];

/// The variables that send a test's HTTPS through the daemon as its proxy, in both cases.
pub const CAPTURE_PROXY_VARS: &[&str] = &["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"];

/// Variables that replace a client's trust store with a file (OpenSSL and rustls'
/// native roots, Python's requests and httpx, curl, boto3 and the AWS CLI): they get a bundle
/// of the system's roots and the run's CA, since the file is all such a client trusts.
pub const CA_BUNDLE_VARS: &[&str] = &[
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "AWS_CA_BUNDLE",
];

/// A test's token in proxy credentials: its id, base64url without padding, so that no
/// character of it needs escaping in a URL's userinfo (a test id holds `:` and `$`).
pub fn token(test: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(test)
}

/// The test a token names.
pub fn test_of_token(token: &str) -> Option<String> {
    use base64::Engine as _;
    let id = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token.trim_end_matches('='))
        .ok()?;
    String::from_utf8(id).ok()
}

/// The proxy URL of a test: `http://<token>:<the run's secret>@<the daemon's host and port>`.
/// The secret (URL-safe characters only) is what tells the daemon that the process naming the
/// test was given it by the run.
pub fn proxy_url(daemon: &str, test: &str, secret: &str) -> String {
    let authority = daemon
        .strip_prefix("http://")
        .unwrap_or(daemon)
        .trim_end_matches('/');
    format!("http://{}:{secret}@{authority}", token(test))
}

/// What makes the daemon a test's proxy (README, "Capture"): the proxy variables naming it
/// with the test's credentials, the bundle for clients that take a whole trust store, the
/// run's CA for Node (`NODE_EXTRA_CA_CERTS` adds to its own roots), and Node's switch that
/// makes its built-in fetch read the proxy variables (22.21 and later).
pub fn capture_vars(proxy: &str, ca: &str, bundle: &str) -> Vec<(&'static str, String)> {
    let mut out: Vec<(&'static str, String)> = CAPTURE_PROXY_VARS
        .iter()
        .map(|v| (*v, proxy.to_string()))
        .collect();
    out.extend(CA_BUNDLE_VARS.iter().map(|v| (*v, bundle.to_string())));
    out.push(("NODE_EXTRA_CA_CERTS", ca.to_string()));
    out.push(("NODE_USE_ENV_PROXY", "1".to_string()));
    out
}

/// The table itself, one row per family.
pub fn of(kind: Kind) -> FamilyEnv {
    match kind {
        Kind::OpenAi => OPENAI,
        Kind::Azure => AZURE,
        Kind::Anthropic => ANTHROPIC,
        Kind::Gemini => GEMINI,
        Kind::Ollama => OLLAMA,
        Kind::Bedrock => BEDROCK,
        Kind::Vertex => VERTEX,
        Kind::Http => HTTP,
    }
}

/// A provider the runner points tests at: a built-in family or a gateway of `llmreplay.toml`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Routed {
    /// Its name in routes.
    pub name: String,
    /// Its family.
    pub kind: Kind,
}

impl Routed {
    /// The built-in families, each under its own name.
    pub fn builtins() -> Vec<Routed> {
        Kind::ALL
            .iter()
            .filter(|k| **k != Kind::Http)
            .map(|k| Routed {
                name: k.as_str().to_string(),
                kind: *k,
            })
            .collect()
    }

    fn is_gateway(&self) -> bool {
        self.name != self.kind.as_str()
    }

    /// `NAME` of a gateway as an environment variable prefix: `my-gw` is `MY_GW`.
    fn prefix(&self) -> String {
        self.name.to_ascii_uppercase().replace('-', "_")
    }

    /// The suffix its clients expect after the base: the family's first.
    fn suffix(&self) -> &'static str {
        of(self.kind).base_urls.first().map_or("", |v| v.suffix)
    }
}

/// The variables that point one test's clients at the daemon: `base` is the test's
/// `LLMREPLAY_BASE_URL`. A gateway `NAME` gets `<NAME>_BASE_URL`.
pub fn injected(base: &str, providers: &[Routed]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for p in providers {
        if p.is_gateway() {
            out.push((
                format!("{}_BASE_URL", p.prefix()),
                format!("{base}/{}{}", p.name, p.suffix()),
            ));
            continue;
        }
        for v in of(p.kind).base_urls {
            let route = v.route.unwrap_or(&p.name);
            out.push((v.name.to_string(), format!("{base}/{route}{}", v.suffix)));
        }
    }
    out
}

/// `<NAME>_MCP_URL` for each Streamable HTTP MCP server among `gateways` (as `NAME:mcp`):
/// the daemon's `/mcp/NAME` under the test's `base`.
pub fn mcp_urls(base: &str, gateways: Option<&str>) -> Vec<(String, String)> {
    gateways
        .unwrap_or("")
        .split(',')
        .filter_map(|pair| pair.strip_suffix(":mcp"))
        .filter(|name| !name.is_empty())
        .map(|name| {
            let var = name.to_ascii_uppercase().replace('-', "_");
            (format!("{var}_MCP_URL"), format!("{base}/mcp/{name}"))
        })
        .collect()
}

/// The base-URL variables every test gets, for help texts: `OPENAI_BASE_URL, ...`.
pub fn injected_names() -> String {
    let mut names: Vec<&str> = Vec::new();
    for kind in Kind::ALL {
        for v in of(kind).base_urls {
            if !names.contains(&v.name) {
                names.push(v.name);
            }
        }
    }
    names.join(", ")
}

/// The key variables that get a placeholder in replay when unset: a gateway `NAME` has
/// `<NAME>_API_KEY`.
pub fn key_vars(providers: &[Routed]) -> Vec<String> {
    let mut out = Vec::new();
    for p in providers {
        if p.is_gateway() {
            out.push(format!("{}_API_KEY", p.prefix()));
        } else {
            out.extend(of(p.kind).keys.iter().map(|k| k.to_string()));
        }
    }
    out
}

/// The key variables to read a provider's key from, for `rerun`: a gateway's own first.
pub fn key_vars_of(name: &str, kind: Kind) -> Vec<String> {
    let p = Routed {
        name: name.to_string(),
        kind,
    };
    let mut out = key_vars(std::slice::from_ref(&p));
    if p.is_gateway() {
        out.extend(of(kind).keys.iter().map(|k| k.to_string()));
    }
    out
}

/// The credentials files that get a placeholder in replay, one per family that has one.
pub fn credentials_files() -> Vec<CredentialsFile> {
    Kind::ALL
        .iter()
        .filter_map(|k| of(*k).credentials_file)
        .collect()
}

/// Gateways travel from `cargo llmreplay test` to the runner as `name:kind,name:kind`.
pub const GATEWAYS_ENV: &str = "LLMREPLAY_GATEWAYS";

/// The built-in families and the gateways of `GATEWAYS_ENV`, for the runner.
pub fn routed_from(gateways: Option<&str>) -> Vec<Routed> {
    let mut out = Routed::builtins();
    for pair in gateways.unwrap_or("").split(',').filter(|p| !p.is_empty()) {
        if let Some((name, kind)) = pair.split_once(':') {
            if let Some(kind) = Kind::ALL.iter().find(|k| k.as_str() == kind) {
                out.push(Routed {
                    name: name.to_string(),
                    kind: *kind,
                });
            }
        }
    }
    out
}

/// Where a user's environment already points a family's clients, as an upstream for recording:
/// the first of its variables that is set, with the suffix clients add taken off. `get` reads a
/// variable (the process environment, in practice).
pub fn upstream_from(
    kind: Kind,
    get: impl Fn(&str) -> Option<String>,
) -> Option<(String, &'static str)> {
    for v in of(kind).base_urls {
        let Some(value) = get(v.name).filter(|s| !s.trim().is_empty()) else {
            continue;
        };
        let mut url = value.trim().trim_end_matches('/').to_string();
        // OLLAMA_HOST is often `host:port` alone, or a bare host that means Ollama's own port.
        if !url.contains("://") {
            url = format!("http://{url}");
        }
        if kind == Kind::Ollama && !has_port(&url) {
            url.push_str(":11434");
        }
        if let Some(stripped) = url.strip_suffix(v.suffix).filter(|_| !v.suffix.is_empty()) {
            url = stripped.to_string();
        }
        return Some((url, v.name));
    }
    None
}

/// Whether `scheme://host[:port][/path]` names a port.
fn has_port(url: &str) -> bool {
    let authority = url.split("://").nth(1).unwrap_or(url);
    let host = authority.split('/').next().unwrap_or(authority);
    match host.rsplit_once(':') {
        Some((h, p)) => {
            !p.is_empty()
                && p.bytes().all(|b| b.is_ascii_digit())
                && (!h.contains('[') || h.ends_with(']'))
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_and_gateway_is_injected() {
        let mut routed = Routed::builtins();
        routed.push(Routed {
            name: "my-gw".into(),
            kind: Kind::OpenAi,
        });
        let vars = injected("http://d/t/x", &routed);
        let get = |n: &str| vars.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
        assert_eq!(get("OPENAI_BASE_URL"), Some("http://d/t/x/openai/v1"));
        assert_eq!(get("OPENAI_API_BASE"), Some("http://d/t/x/openai/v1"));
        assert_eq!(get("AZURE_OPENAI_ENDPOINT"), Some("http://d/t/x/azure"));
        assert_eq!(get("ANTHROPIC_API_URL"), Some("http://d/t/x/anthropic"));
        assert_eq!(get("OLLAMA_HOST"), Some("http://d/t/x/ollama"));
        assert_eq!(
            get("GOOGLE_VERTEX_BASE_URL"),
            Some("http://d/t/x/aiplatform.googleapis.com")
        );
        assert_eq!(get("MY_GW_BASE_URL"), Some("http://d/t/x/my-gw/v1"));
        let keys = key_vars(&routed);
        for k in [
            "OPENAI_API_KEY",
            "AZURE_OPENAI_API_KEY",
            "ANTHROPIC_API_KEY",
            "GEMINI_API_KEY",
            "GOOGLE_API_KEY",
            "MY_GW_API_KEY",
        ] {
            assert!(keys.iter().any(|v| v == k), "{k}");
        }
        assert_eq!(
            key_vars_of("my-gw", Kind::OpenAi),
            ["MY_GW_API_KEY", "OPENAI_API_KEY"]
        );
    }

    #[test]
    fn a_users_base_url_is_an_upstream() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |n: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == n)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(
            upstream_from(
                Kind::OpenAi,
                env(&[("OPENAI_BASE_URL", "https://gw.example/v1/")])
            ),
            Some(("https://gw.example".into(), "OPENAI_BASE_URL"))
        );
        assert_eq!(
            upstream_from(Kind::Ollama, env(&[("OLLAMA_HOST", "10.1.2.3:11434")])),
            Some(("http://10.1.2.3:11434".into(), "OLLAMA_HOST"))
        );
        assert_eq!(
            upstream_from(Kind::Ollama, env(&[("OLLAMA_HOST", "0.0.0.0")])),
            Some(("http://0.0.0.0:11434".into(), "OLLAMA_HOST"))
        );
        assert_eq!(upstream_from(Kind::Anthropic, env(&[])), None);
        assert_eq!(
            routed_from(Some("gw:anthropic,bad")).last(),
            Some(&Routed {
                name: "gw".into(),
                kind: Kind::Anthropic
            })
        );
    }
}
