//! What the daemon runs with: the mode, the cassette folder, the providers and their upstreams,
//! and the normalisation rules, read from `llmreplay.toml` and overridden by flags. Every bad
//! value is reported here, at start-up, never at request time.

use crate::provider::{Kind, Provider, UpstreamSource};
use cassettes::{IgnoreRule, Normalizer, ProviderName, ReplaceRule};
pub use runlog::report::Mode;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The file name looked for at the workspace root.
pub const CONFIG_FILE: &str = "llmreplay.toml";

#[derive(Debug, thiserror::Error)]
/// What is wrong with the configuration; exit 2.
pub enum ConfigError {
    #[error("{path}: {message}")]
    /// A problem in a file.
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong, and where.
        message: String,
    },
    #[error("{0}")]
    /// A `[match]` rule that does not compile.
    Rule(#[from] cassettes::Error),
    #[error("{0}")]
    /// A value out of range or of the wrong form.
    Invalid(String),
    #[error("{0}")]
    /// A variable of the environment the daemon cannot work with (a SOCKS proxy, say): no
    /// file's fault.
    Environment(#[source] crate::upstream::NetworkError),
    #[error(transparent)]
    /// An `[upstream]` proxy or certificate file that does not work.
    Network(#[from] crate::upstream::NetworkError),
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    cassette_dir: Option<PathBuf>,
    #[serde(default)]
    providers: BTreeMap<String, ProviderEntry>,
    #[serde(default, rename = "match")]
    matching: MatchSection,
    #[serde(default)]
    redact: RedactSection,
    #[serde(default)]
    upstream: UpstreamSection,
    #[serde(default)]
    limits: LimitsSection,
    #[serde(default)]
    faults: Vec<crate::faults::FaultSpec>,
    #[serde(default)]
    capture: CaptureSection,
    #[serde(default)]
    telemetry: TelemetrySection,
    #[serde(default)]
    mcp: BTreeMap<String, McpEntry>,
    /// `[prices."MODEL"]`: prices over the vendored table's.
    #[serde(default)]
    prices: BTreeMap<String, ledger::PriceOverride>,
    #[serde(default)]
    drift: DriftSection,
}

/// `[drift]`: how `diff` and `review` judge what changed.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct DriftSection {
    /// How a test's tool calls compare with the base's.
    #[serde(default)]
    trajectory: cassettes::sequence::SequenceMode,
}

/// `[mcp.NAME]`: a Streamable HTTP MCP server, served at `/mcp/NAME`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct McpEntry {
    url: String,
}

/// `[telemetry]`: more paths that only report, beside the families' own.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TelemetrySection {
    #[serde(default)]
    paths: Vec<String>,
}

/// `[capture]`: the daemon as each test's HTTPS proxy.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CaptureSection {
    enabled: Option<bool>,
    #[serde(default)]
    pass: Vec<String>,
}

/// What the daemon does as each test's proxy (README, "Capture").
#[derive(Debug, Clone)]
pub struct Capture {
    /// `[capture] enabled`: whether tests are given the daemon as their proxy.
    pub enabled: bool,
    /// `[capture] pass`: hosts tunnelled untouched, besides [`PASS_ALWAYS`].
    pub pass: Vec<(String, cassettes::glob::GlobMatcher)>,
    /// `--upstream HOST=URL`: where a captured host's calls go instead of the host itself.
    pub hosts: BTreeMap<String, String>,
}

/// Hosts always tunnelled untouched: package registries, which a build or a test's setup may
/// reach through the proxy the run sets, and nothing else (a tool calling the GitHub API is a
/// call to record, not to let out unseen). A name, or `*.` and the suffix of one: matched as
/// such, since compiling them as globs would take a millisecond of every run's start.
pub const PASS_ALWAYS: &[&str] = &[
    "crates.io",
    "*.crates.io",
    "static.rust-lang.org",
    "pypi.org",
    "files.pythonhosted.org",
    "registry.npmjs.org",
];

impl Default for Capture {
    fn default() -> Self {
        Capture {
            enabled: true,
            pass: Vec::new(),
            hosts: BTreeMap::new(),
        }
    }
}

impl Capture {
    /// Whether `host` is tunnelled untouched.
    pub fn passes(&self, host: &str) -> bool {
        let host = host.to_ascii_lowercase();
        let always = |p: &&str| match p.strip_prefix('*') {
            Some(suffix) => host.ends_with(suffix),
            None => host == *p,
        };
        PASS_ALWAYS.iter().any(always) || self.pass.iter().any(|(_, m)| m.is_match(&host))
    }

    /// Where a captured call to `host` (and `port`) goes: `--upstream HOST=URL` (or
    /// `HOST:PORT=URL`), else the host itself over `scheme`.
    pub fn upstream_of(&self, scheme: &str, host: &str, port: Option<u16>) -> String {
        let host = host.to_ascii_lowercase();
        let with_port = port.map(|p| format!("{host}:{p}"));
        if let Some(url) = with_port
            .as_ref()
            .and_then(|h| self.hosts.get(h))
            .or_else(|| self.hosts.get(&host))
        {
            return url.clone();
        }
        let default_port = if scheme == "https" { 443 } else { 80 };
        match port.filter(|p| *p != default_port) {
            Some(p) => format!("{scheme}://{host}:{p}"),
            None => format!("{scheme}://{host}"),
        }
    }
}

/// `[upstream]`: how long to wait for a provider.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct UpstreamSection {
    connect_timeout_s: Option<f64>,
    idle_timeout_s: Option<f64>,
    ca_file: Option<PathBuf>,
    proxy: Option<String>,
    no_proxy: Option<String>,
}

/// `[limits]`: what the daemon accepts from clients and waits for.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitsSection {
    body_mib: Option<f64>,
    header_read_timeout_s: Option<f64>,
    lock_timeout_s: Option<f64>,
    cassette_cache_mib: Option<f64>,
}

/// Timeouts and sizes, each with its default (README, "Limits and hostile input") and a key
/// in `llmreplay.toml`.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// `[upstream] connect_timeout_s`: a provider that does not accept the connection.
    pub connect_timeout: Duration,
    /// `[upstream] idle_timeout_s`: a provider that sends no byte for this long.
    pub idle_timeout: Duration,
    /// `[limits] body_mib`: larger request bodies get 413.
    pub body_bytes: u64,
    /// `[limits] header_read_timeout_s`: a client that has not sent a whole request head this
    /// long after connecting, or after its last answer on a kept-alive connection, is dropped.
    pub header_read_timeout: Duration,
    /// `[limits] lock_timeout_s`: how long a recording waits for a folder another process holds.
    pub lock_timeout: Duration,
    /// `[limits] cassette_cache_mib`: the loaded cassettes' answers and requests kept in
    /// memory; past it, those used least recently are read again when asked for.
    pub cassette_cache_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            connect_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(300),
            body_bytes: 100 << 20,
            header_read_timeout: Duration::from_secs(60),
            lock_timeout: cassettes::DEFAULT_LOCK_TIMEOUT,
            cassette_cache_bytes: cassettes::DEFAULT_BUDGET,
        }
    }
}

/// The longest timeout `llmreplay.toml` may set: past it a number is a typo (and `1e30`
/// seconds is no duration at all).
const MAX_SECONDS: f64 = 86_400.0;

/// The largest body limit: a body is held in memory while it is keyed and recorded.
const MAX_BODY_MIB: f64 = 4096.0;

impl Limits {
    fn read(upstream: &UpstreamSection, limits: &LimitsSection) -> Result<Limits, ConfigError> {
        let d = Limits::default();
        let seconds = |v: Option<f64>, name: &str, default: Duration| match v {
            None => Ok(default),
            Some(s) if s > 0.0 && s <= MAX_SECONDS => Ok(Duration::from_secs_f64(s)),
            Some(s) => Err(ConfigError::Invalid(format!(
                "{name} = {s}: give a number of seconds above 0 and at most {MAX_SECONDS} (a day)"
            ))),
        };
        Ok(Limits {
            connect_timeout: seconds(
                upstream.connect_timeout_s,
                "[upstream] connect_timeout_s",
                d.connect_timeout,
            )?,
            idle_timeout: seconds(
                upstream.idle_timeout_s,
                "[upstream] idle_timeout_s",
                d.idle_timeout,
            )?,
            header_read_timeout: seconds(
                limits.header_read_timeout_s,
                "[limits] header_read_timeout_s",
                d.header_read_timeout,
            )?,
            lock_timeout: seconds(
                limits.lock_timeout_s,
                "[limits] lock_timeout_s",
                d.lock_timeout,
            )?,
            cassette_cache_bytes: match limits.cassette_cache_mib {
                None => d.cassette_cache_bytes,
                Some(m) if (1.0..=MAX_BODY_MIB * 16.0).contains(&m) => (m * (1u64 << 20) as f64) as usize,
                Some(m) => {
                    return Err(ConfigError::Invalid(format!(
                        "[limits] cassette_cache_mib = {m}: give a size in MiB of at least 1 and at most {}",
                        MAX_BODY_MIB * 16.0
                    )))
                }
            },
            body_bytes: match limits.body_mib {
                None => d.body_bytes,
                Some(m) if m > 0.0 && m <= MAX_BODY_MIB => (m * (1u64 << 20) as f64) as u64,
                Some(m) => {
                    return Err(ConfigError::Invalid(format!(
                        "[limits] body_mib = {m}: give a size in MiB above 0 and at most {MAX_BODY_MIB}"
                    )))
                }
            },
        })
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProviderEntry {
    upstream: Option<String>,
    kind: Option<Kind>,
    /// The most requests in flight to it while recording.
    max_concurrent: Option<usize>,
    /// The least time between two requests' starts while recording.
    min_interval_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct MatchSection {
    #[serde(default)]
    ignore: Vec<IgnoreRule>,
    #[serde(default)]
    replace: Vec<ReplaceRule>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RedactSection {
    #[serde(default)]
    headers: Vec<String>,
    #[serde(default)]
    body_fields: Vec<String>,
}

/// What the command line sets; each `Some` wins over the file.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    /// `--mode` and its shorthands.
    pub mode: Option<Mode>,
    /// `--cassette-dir`.
    pub cassette_dir: Option<PathBuf>,
    /// `NAME=URL` pairs from `--upstream`.
    pub upstreams: Vec<String>,
    /// `--realtime`.
    pub realtime: bool,
    /// `--allow-repeats`.
    pub allow_repeats: bool,
    /// `--allow-credentials-to HOST`: hosts that may receive keys and re-signed credentials
    /// though only `llmreplay.toml` names them.
    pub allow_credentials_to: Vec<String>,
    /// `--live mcp:NAME`: MCP servers run live in replay, their answers compared.
    pub live_mcp: Vec<String>,
    /// `--max-spend`: what the answers recorded may cost before no request is sent upstream.
    pub max_spend: Option<ledger::Money>,
}

/// The daemon's settings, checked and compiled.
#[derive(Debug)]
pub struct Settings {
    /// How requests are answered.
    pub mode: Mode,
    /// Where the cassettes are.
    pub cassette_dir: PathBuf,
    /// Every provider, built-in and from the file, with its upstream.
    pub providers: Vec<Arc<Provider>>,
    /// The `[match]` rules, compiled.
    pub normalizer: Normalizer,
    /// `[telemetry] paths`: paths of any provider that only report, as globs over the path:
    /// `*` stays within one segment, `**` takes any number of them.
    pub telemetry: Vec<cassettes::glob::GlobMatcher>,
    /// Response headers never written, lowercase, on top of the built-in secret list.
    pub redact_headers: Vec<String>,
    /// Replay streams at their recorded pace.
    pub realtime: bool,
    /// Replay the last recording of a key to requests beyond its recordings, instead of missing.
    pub allow_repeats: bool,
    /// Timeouts and sizes.
    pub limits: Limits,
    /// `[[faults]]`: faults for the tests each filterset selects.
    pub declared_faults: Vec<crate::faults::Declared>,
    /// The command that records a missing request of a test no nextest runs, for the miss
    /// message: `cargo llmreplay run` sets its own (`run --record-missing -- <command>`).
    pub record_hint: Option<String>,
    /// The name the program was started by, which every command the daemon prints begins with.
    pub program: crate::hints::Program,
    /// `[upstream] ca_file`, `proxy` and `no_proxy`.
    pub network: crate::upstream::Network,
    /// Which proxy each upstream goes through.
    pub proxies: Arc<crate::upstream::Proxies>,
    /// Hosts outside a family's own that may receive keys and the credentials the daemon signs
    /// with, though only `llmreplay.toml` names them.
    pub allow_credentials_to: Vec<String>,
    /// The daemon as each test's HTTPS proxy.
    pub capture: Capture,
    /// The key variables of the daemon's own environment and their values, which no
    /// recording may hold.
    pub secret_values: Vec<(String, String)>,
    /// The secret a test's proxy credentials carry beside its id, new for every run: a
    /// credential that names a test without it names none.
    pub proxy_secret: String,
    /// `[mcp.NAME] url`: Streamable HTTP MCP servers by name.
    pub mcp: BTreeMap<String, String>,
    /// MCP servers (by name, without `mcp-`) run live in replay (`--live mcp:NAME`).
    pub live_mcp: Vec<String>,
    /// The run's folder (`target/llmreplay/runs/<run id>`): its event log and, when the mode
    /// records, its spool. None: no run log (a daemon inside a library's test, say).
    pub run_dir: Option<PathBuf>,
    /// The vendored price table with `[prices]` over it.
    pub prices: ledger::Prices,
    /// `--max-spend`.
    pub max_spend: Option<ledger::Money>,
    /// `[drift] trajectory`: when a test's tool calls have changed against the base's.
    pub trajectory_mode: cassettes::sequence::SequenceMode,
}

/// 128 random bits, as hex: the run's proxy secret.
fn new_proxy_secret() -> String {
    let mut bytes = [0u8; 16];
    // Without a random source, the clock and the process stand in: still new for each run.
    if getrandom::fill(&mut bytes).is_err() {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
            ^ u128::from(std::process::id()) << 64;
        bytes = seed.to_le_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The variables whose values are keys, by the names providers and clouds give them.
const SECRET_VAR_SUFFIXES: &[&str] = &["_TOKEN", "_KEY", "_SECRET", "_PASSWORD", "_CREDENTIALS"];

/// The secret-looking variables among `vars` (`*_TOKEN`, `*_KEY`, `*_SECRET`, `*_PASSWORD`,
/// `*_CREDENTIALS`: `HF_TOKEN`, `OPENAI_API_KEY`, `AWS_SECRET_ACCESS_KEY`) with values long
/// enough to be keys (a short value would turn up in ordinary text); the placeholder replay
/// gives tests is none. Tests inherit this environment, so their keys are among these.
pub(crate) fn secret_values(vars: impl Iterator<Item = (String, String)>) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = vars
        .filter(|(name, value)| {
            let upper = name.to_ascii_uppercase();
            SECRET_VAR_SUFFIXES.iter().any(|s| upper.ends_with(s))
                && value.trim().len() >= cassettes::secrets::MIN_SECRET_LEN
                && value != runner_placeholder()
        })
        .map(|(name, value)| (name, value.trim().to_string()))
        .collect();
    out.sort();
    out
}

/// The key placeholder replay runs give tests (`llmreplay-replay-key`).
fn runner_placeholder() -> &'static str {
    "llmreplay-replay-key"
}

impl Settings {
    /// Whether a request to `uri` that carries a key may go through the proxy it would take: a
    /// proxy only `llmreplay.toml` names reads what it carries when the request is plain http,
    /// or when the same file's `[upstream] ca_file` lets it stand in for the host. Loopback
    /// proxies and hosts given to `--allow-credentials-to` may.
    pub fn may_send_key_through_proxy(
        &self,
        uri: &http::Uri,
    ) -> Result<(), crate::provider::UpstreamError> {
        let why = if uri.scheme_str() == Some("http") {
            "the request is plain http"
        } else if self.network.ca_file.is_some() {
            "[upstream] ca_file lets it stand in for the host"
        } else {
            return Ok(());
        };
        let Some((proxy, true)) = self.proxies.proxy_for(uri) else {
            return Ok(());
        };
        let host = proxy.host().unwrap_or("");
        if crate::provider::is_loopback(host)
            || crate::provider::allows(&self.allow_credentials_to, &proxy)
        {
            return Ok(());
        }
        Err(crate::provider::UpstreamError::CommittedProxy {
            proxy: crate::upstream::without_credentials(&proxy.to_string()),
            why,
            host: host.to_string(),
        })
    }

    /// Whether the MCP server of cassette `provider` (`mcp-NAME`) runs live in replay.
    pub fn live_mcp(&self, provider: &str) -> bool {
        provider
            .strip_prefix(cassettes::mcp::PREFIX)
            .is_some_and(|name| self.live_mcp.iter().any(|n| n == name))
    }

    /// Whether `route` only reports: a path its family names as telemetry, or one of
    /// `[telemetry] paths`.
    pub fn is_telemetry(&self, route: &crate::route::Route) -> bool {
        let path = route.upstream_path.as_str();
        route.provider.family().telemetry_paths().contains(&path) || self.configured_telemetry(path)
    }

    /// Whether `path` is one of `[telemetry] paths`.
    fn configured_telemetry(&self, path: &str) -> bool {
        self.telemetry.iter().any(|p| p.is_match(path))
    }

    /// Reads `config` (when it exists; a missing `llmreplay.toml` means every default), relative
    /// paths being taken from `root`, then applies the overrides.
    pub fn load(
        root: &Path,
        config: Option<&Path>,
        overrides: &Overrides,
    ) -> Result<Self, ConfigError> {
        let default_path = root.join(CONFIG_FILE);
        let path = config.map(Path::to_path_buf).unwrap_or(default_path);
        let (file, read) = match std::fs::read_to_string(&path) {
            Ok(text) => (
                toml::from_str::<FileConfig>(&text).map_err(|e| ConfigError::File {
                    path: path.clone(),
                    message: e.to_string(),
                })?,
                true,
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && config.is_none() => {
                (FileConfig::default(), false)
            }
            Err(e) => {
                return Err(ConfigError::File {
                    path,
                    message: e.to_string(),
                })
            }
        };
        // A value is the file's to blame only when there is a file.
        Self::build(root, file, overrides).map_err(|e| match e {
            ConfigError::Invalid(message) if read => ConfigError::File { path, message },
            other => other,
        })
    }

    /// Settings with every default, for tests and `serve` without a file.
    pub fn defaults(cassette_dir: PathBuf, mode: Mode) -> Self {
        let overrides = Overrides {
            mode: Some(mode),
            cassette_dir: Some(cassette_dir),
            ..Overrides::default()
        };
        Self::build(Path::new("."), FileConfig::default(), &overrides).expect("defaults are valid")
    }

    fn build(root: &Path, file: FileConfig, overrides: &Overrides) -> Result<Self, ConfigError> {
        let mut settings =
            Self::build_with_env(root, file, overrides, |name| std::env::var(name).ok())?;
        settings.secret_values = secret_values(std::env::vars());
        settings.normalizer = std::mem::take(&mut settings.normalizer)
            .with_secret_values(settings.secret_values.clone());
        Ok(settings)
    }

    /// `env` reads the user's environment: where it already points a family's clients is where
    /// recording goes, unless a flag or the file says otherwise.
    fn build_with_env(
        root: &Path,
        file: FileConfig,
        overrides: &Overrides,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let mut providers: BTreeMap<String, Provider> = Kind::ALL
            .iter()
            .filter(|k| **k != Kind::Http)
            .map(|k| {
                let mut p = Provider::builtin(*k);
                if let Some((url, var)) = providers::env::upstream_from(*k, &env) {
                    if check_upstream(&url).is_ok() {
                        p.upstream = Some(url);
                        p.source = UpstreamSource::Env(var);
                    }
                }
                (k.as_str().to_string(), p)
            })
            .collect();
        for (name, entry) in file.providers {
            let pname = ProviderName::new(&name).filter(|_| name != "t").ok_or_else(|| {
                ConfigError::Invalid(format!(
                    "[providers.{name}]: a provider name is lowercase letters, digits, '-' and '_' (and not \"t\")"
                ))
            })?;
            let builtin = providers.get(&name).map(|p| p.kind);
            // A gateway's name makes its variables (`<NAME>_BASE_URL`, `<NAME>_API_KEY`), which
            // `serve --env` exports: a dot or a leading digit would make no variable a shell takes.
            let variable_safe =
                name.starts_with(|c: char| c.is_ascii_lowercase()) && !name.contains('.');
            if builtin.is_none() && !variable_safe {
                return Err(ConfigError::Invalid(format!(
                    "[providers.{name:?}]: a gateway's name makes its environment variables ({}_BASE_URL, {}_API_KEY), so it is lowercase letters, digits, '-' and '_', starting with a letter; rename it, e.g. [providers.{}]",
                    name.to_ascii_uppercase(),
                    name.to_ascii_uppercase(),
                    name.replace('.', "_").trim_start_matches(|c: char| !c.is_ascii_lowercase())
                )));
            }
            let kind = entry.kind.or(builtin).unwrap_or(Kind::OpenAi);
            let (upstream, source) = match (entry.upstream, providers.get(&name)) {
                (Some(u), _) => (
                    Some(check_upstream(&u).map_err(|m| {
                        ConfigError::Invalid(format!(
                            "[providers.{name}] upstream {:?}: {m}",
                            providers::redact::url(&u)
                        ))
                    })?),
                    UpstreamSource::ConfigFile,
                ),
                (None, Some(p)) => (p.upstream.clone(), p.source.clone()),
                (None, None) => {
                    return Err(ConfigError::Invalid(format!(
                        "[providers.{name}] needs an upstream, e.g. upstream = \"https://gateway.example.com\""
                    )))
                }
            };
            // Past this, a bound is none (and past tokio's own limit, a panic at start).
            if let Some(n) = entry.max_concurrent.filter(|n| *n > MAX_CONCURRENT) {
                return Err(ConfigError::Invalid(format!(
                    "[providers.{name}] max_concurrent = {n} is no bound; set at most {MAX_CONCURRENT}, or remove it for no bound"
                )));
            }
            if entry.max_concurrent == Some(0) {
                return Err(ConfigError::Invalid(format!(
                    "[providers.{name}] max_concurrent = 0 would send nothing; set at least 1, or remove it for no bound"
                )));
            }
            // Each request waits its turn with no bound of its own, so a spacing past what a
            // test waits would hang the suite rather than fail it.
            if let Some(ms) = entry
                .min_interval_ms
                .filter(|ms| *ms > MAX_MIN_INTERVAL.as_millis() as u64)
            {
                return Err(ConfigError::Invalid(format!(
                    "[providers.{name}] min_interval_ms = {ms} would keep a test waiting over {}s for each request; set at most {} (one request a minute)",
                    MAX_MIN_INTERVAL.as_secs(),
                    MAX_MIN_INTERVAL.as_millis()
                )));
            }
            let pace = crate::pace::Pace::new(
                entry.max_concurrent,
                entry.min_interval_ms.map(Duration::from_millis),
            );
            providers.insert(
                name,
                Provider {
                    name: pname,
                    kind,
                    upstream,
                    source,
                    parsed: Default::default(),
                    pace: pace.map(Arc::new),
                },
            );
        }
        let mut capture = Capture {
            enabled: file.capture.enabled.unwrap_or(true),
            ..Capture::default()
        };
        for pattern in &file.capture.pass {
            let matcher = cassettes::glob::glob(
                &pattern.to_ascii_lowercase(),
                cassettes::glob::Separator::Any,
            )
            .map_err(|e| ConfigError::Invalid(format!("[capture] pass: {e}")))?;
            capture.pass.push((pattern.clone(), matcher));
        }
        for pair in &overrides.upstreams {
            let shown = providers::redact::url(pair);
            let (name, url) = pair.split_once('=').ok_or_else(|| {
                ConfigError::Invalid(format!(
                    "--upstream {shown:?}: expected NAME=URL or HOST=URL, e.g. openai=http://127.0.0.1:8080 or api.mistral.ai=https://127.0.0.1:8443"
                ))
            })?;
            let url = check_upstream(url)
                .map_err(|m| ConfigError::Invalid(format!("--upstream {shown:?}: {m}")))?;
            // A host (it has a dot or a port): where the calls the proxy captures for it go.
            if name.contains(['.', ':']) {
                capture.hosts.insert(name.to_ascii_lowercase(), url);
                continue;
            }
            let known = providers.keys().cloned().collect::<Vec<_>>().join(", ");
            let provider = providers.get_mut(name).ok_or_else(|| {
                ConfigError::Invalid(format!(
                    "--upstream {shown:?}: no provider named {name:?}; known: {known}. Add new ones under [providers.NAME] in {CONFIG_FILE}"
                ))
            })?;
            provider.upstream = Some(url);
            provider.source = UpstreamSource::Flag;
        }
        let names: Vec<&str> = providers.keys().map(String::as_str).collect();
        let mut declared_faults = Vec::new();
        for (i, spec) in file.faults.into_iter().enumerate() {
            let at = format!("[[faults]] #{}", i + 1);
            let Some(expr) = spec.test.clone() else {
                return Err(ConfigError::Invalid(format!(
                    "{at}: needs test = \"<filterset>\", e.g. test = \"test(=handles_rate_limits)\""
                )));
            };
            let filter = cassettes::filter::Filter::parse(&expr)
                .map_err(|e| ConfigError::Invalid(format!("{at}: test = {expr:?}: {e}")))?;
            let fault = spec
                .into_fault(0, &names)
                .map_err(|e| ConfigError::Invalid(format!("{at}: {e}")))?;
            declared_faults.push(crate::faults::Declared { filter, fault });
        }
        let normalizer = Normalizer::new(&file.matching.ignore, &file.matching.replace)?
            .with_body_fields(&file.redact.body_fields);
        if let Some(bad) = file.telemetry.paths.iter().find(|p| !p.starts_with('/')) {
            return Err(ConfigError::Invalid(format!(
                "[telemetry] paths: {bad:?} is not a path; write it as the API has it, from its first '/', e.g. \"/api/public/ingestion\""
            )));
        }
        let telemetry = file
            .telemetry
            .paths
            .iter()
            .map(|p| cassettes::glob::glob(p, cassettes::glob::Separator::Literal))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ConfigError::Invalid(format!("[telemetry] paths: {e}")))?;
        let network = crate::upstream::Network {
            ca_file: file.upstream.ca_file.as_ref().map(|f| root.join(f)),
            proxy: file.upstream.proxy.clone(),
            no_proxy: file.upstream.no_proxy.clone(),
        };
        if network.no_proxy.is_some() && network.proxy.is_none() {
            return Err(ConfigError::Invalid(
                "[upstream] no_proxy needs [upstream] proxy; without it, set NO_PROXY".into(),
            ));
        }
        // A CA file that cannot be read fails here, at start, not at the first recording.
        crate::upstream::Roots::check_ca_file(&network)?;
        let proxies =
            Arc::new(
                crate::upstream::Proxies::new(&network).map_err(|m| match network.proxy {
                    Some(_) => ConfigError::Network(m),
                    None => ConfigError::Environment(m),
                })?,
            );
        let cassette_dir = overrides
            .cassette_dir
            .clone()
            .or(file.cassette_dir)
            .unwrap_or_else(|| PathBuf::from("tests/cassettes"));
        let mut mcp = BTreeMap::new();
        for (name, entry) in file.mcp {
            let url = entry.url;
            let valid_name =
                cassettes::ProviderName::new(&format!("{}{name}", cassettes::mcp::PREFIX))
                    .is_some();
            if !valid_name {
                return Err(ConfigError::Invalid(format!(
                    "[mcp.{name}]: an MCP server's name takes letters, digits, '-' and '_'"
                )));
            }
            let parsed = url.parse::<http::Uri>().ok().filter(|u| {
                matches!(u.scheme_str(), Some("http" | "https")) && u.authority().is_some()
            });
            if parsed.is_none() {
                return Err(ConfigError::Invalid(format!(
                    "[mcp.{name}] url = {url:?}: give the server's full URL, e.g. \"https://mcp.example.com/mcp\""
                )));
            }
            mcp.insert(name, url);
        }
        let prices = ledger::Prices::vendored()
            .with_overrides(&file.prices)
            .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        Ok(Settings {
            mode: overrides.mode.unwrap_or_default(),
            cassette_dir: root.join(cassette_dir),
            providers: providers.into_values().map(Arc::new).collect(),
            normalizer,
            telemetry,
            redact_headers: file
                .redact
                .headers
                .iter()
                .map(|h| h.to_ascii_lowercase())
                .collect(),
            realtime: overrides.realtime,
            allow_repeats: overrides.allow_repeats,
            limits: Limits::read(&file.upstream, &file.limits)?,
            declared_faults,
            record_hint: None,
            program: crate::hints::Program::default(),
            proxies,
            network,
            allow_credentials_to: overrides.allow_credentials_to.clone(),
            capture,
            secret_values: Vec::new(),
            proxy_secret: new_proxy_secret(),
            mcp,
            live_mcp: overrides.live_mcp.clone(),
            run_dir: None,
            prices,
            max_spend: overrides.max_spend,
            trajectory_mode: file.drift.trajectory,
        })
    }
}

impl Settings {
    /// Where requests go and why, for record modes to print once at start: a line per provider
    /// with an upstream (a suite whose `OPENAI_BASE_URL` points at a gateway records through
    /// it), a line per captured host sent elsewhere, and one for the providers with none.
    pub fn upstream_report(&self) -> String {
        let mut out = String::new();
        let mut none = Vec::new();
        for p in &self.providers {
            match &p.upstream {
                Some(u) => out.push_str(&format!(
                    "  {:<10} -> {} ({}), {}\n",
                    p.name.as_str(),
                    providers::redact::url(u),
                    p.source,
                    self.proxies.describe(u)
                )),
                None => none.push(format!(
                    "{} ({})",
                    p.name.as_str(),
                    providers::env::of(p.kind)
                        .base_urls
                        .first()
                        .map_or("its base URL", |v| v.name)
                )),
            }
        }
        // Captured hosts sent elsewhere: the rest go to the host itself.
        for (host, url) in &self.capture.hosts {
            out.push_str(&format!(
                "  {host} -> {} (--upstream), {}\n",
                providers::redact::url(url),
                self.proxies.describe(url)
            ));
        }
        if !none.is_empty() {
            out.push_str(&format!(
                "  no upstream, so not recorded: {}; set the variable or pass --upstream NAME=URL\n",
                none.join(", ")
            ));
        }
        out
    }

    /// [`providers::env::GATEWAYS_ENV`]: `name:kind,...`.
    pub fn gateways(&self) -> String {
        self.providers
            .iter()
            .filter(|p| p.name.as_str() != p.kind.as_str())
            .map(|p| format!("{}:{}", p.name.as_str(), p.kind.as_str()))
            // Streamable HTTP MCP servers, for their `<NAME>_MCP_URL`.
            .chain(self.mcp.keys().map(|name| format!("{name}:mcp")))
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// An upstream is `http(s)://host[:port][/prefix]`; the path the client sent is appended to it.
fn check_upstream(url: &str) -> Result<String, String> {
    let uri: http::Uri = url.parse().map_err(|e| format!("not a URL ({e})"))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        _ => return Err("use an http:// or https:// URL".into()),
    }
    if uri.host().is_none() {
        return Err("the URL has no host".into());
    }
    if uri.query().is_some() {
        return Err("an upstream takes no query string".into());
    }
    Ok(url.trim_end_matches('/').to_string())
}

/// The largest `max_concurrent`.
const MAX_CONCURRENT: usize = 1_000_000;

/// The widest `min_interval_ms`: a minute, as a provider's slowest published limit asks.
const MAX_MIN_INTERVAL: Duration = Duration::from_secs(60);

#[cfg(test)]
mod tests {
    use super::*;

    /// A pace that could never send, or would keep a test waiting for ever, is refused when
    /// the configuration is read rather than hanging the suite.
    #[test]
    fn paces_that_would_hang_a_suite_are_refused() {
        let pace = |line: &str| {
            load(
                &format!("[providers.openai]\n{line}\n"),
                &Overrides::default(),
            )
        };
        assert!(pace("min_interval_ms = 60000").is_ok());
        assert!(pace("max_concurrent = 1").is_ok());
        assert!(pace("max_concurrent = 1000000").is_ok());
        for bad in [
            "max_concurrent = 0",
            "max_concurrent = 9223372036854775807",
            "max_concurrent = 1000001",
            "min_interval_ms = 60001",
            "min_interval_ms = 9223372036854775807",
        ] {
            let e = pace(bad).unwrap_err().to_string();
            assert!(e.contains("set at"), "{bad}: {e}");
        }
    }

    fn load(text: &str, overrides: &Overrides) -> Result<Settings, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(CONFIG_FILE), text).unwrap();
        Settings::load(dir.path(), None, overrides)
    }

    /// A `*` in `[telemetry] paths` stays within one segment of the path; `**` crosses them.
    #[test]
    fn telemetry_globs_match_whole_segments() {
        let s = load(
            "[telemetry]\npaths = [\"/runs/batch*\", \"/api/public/ingestion\", \"/traces/**\", \"/v1/*/ingest\"]\n",
            &Overrides::default(),
        )
        .unwrap();
        let t = |p| s.configured_telemetry(p);
        assert!(t("/runs/batch") && t("/runs/batches"));
        assert!(!t("/runs/batch/one"), "a * does not cross a '/'");
        assert!(t("/api/public/ingestion"));
        assert!(!t("/api/public/ingestion/more") && !t("/api/public/ingestions"));
        assert!(t("/traces/a") && t("/traces/a/b/c"));
        assert!(!t("/tracesx/a"));
        assert!(t("/v1/abc/ingest") && !t("/v1/a/b/ingest"));
    }

    #[test]
    fn defaults_and_custom_providers() {
        let s = load(
            "cassette_dir = \"cas\"\n[providers.gw]\nupstream = \"http://127.0.0.1:9/api/\"\n",
            &Overrides {
                upstreams: vec!["openai=http://127.0.0.1:1".into()],
                ..Default::default()
            },
        )
        .unwrap();
        assert!(s.cassette_dir.ends_with("cas"));
        let gw = s
            .providers
            .iter()
            .find(|p| p.name.as_str() == "gw")
            .unwrap();
        assert_eq!(
            (gw.kind, gw.upstream.as_deref()),
            (Kind::OpenAi, Some("http://127.0.0.1:9/api"))
        );
        let oa = s
            .providers
            .iter()
            .find(|p| p.name.as_str() == "openai")
            .unwrap();
        assert_eq!(oa.upstream.as_deref(), Some("http://127.0.0.1:1"));
        assert_eq!(oa.source, UpstreamSource::Flag);
    }

    /// The precedence README gives: the flag, the file, the user's environment, the built-in
    /// default.
    #[test]
    fn registries_always_pass_and_the_files_globs_add_to_them() {
        let s = load(
            "[capture]\npass = [\"*.internal.example\"]\n",
            &Overrides::default(),
        )
        .unwrap();
        for host in [
            "crates.io",
            "index.crates.io",
            "PyPI.org",
            "api.internal.example",
        ] {
            assert!(s.capture.passes(host), "{host}");
        }
        for host in [
            "evilcrates.io",
            "api.github.com",
            "objects.githubusercontent.com",
            "github.com.evil.example",
            "api.openai.com",
            "internal.example",
        ] {
            assert!(!s.capture.passes(host), "{host}");
        }
    }

    #[test]
    fn upstreams_from_the_users_environment() {
        let env = |name: &str| match name {
            "OPENAI_BASE_URL" => Some("https://gw.example/v1".to_string()),
            "AZURE_OPENAI_ENDPOINT" => Some("https://res.openai.azure.com/".to_string()),
            "ANTHROPIC_BASE_URL" => Some("https://claude-gw.example".to_string()),
            _ => None,
        };
        let file: FileConfig =
            toml::from_str("[providers.anthropic]\nupstream = \"https://file.example\"\n").unwrap();
        let overrides = Overrides {
            upstreams: vec!["gemini=http://127.0.0.1:7".into()],
            ..Default::default()
        };
        let s = Settings::build_with_env(Path::new("."), file, &overrides, env).unwrap();
        let p = |n: &str| {
            s.providers
                .iter()
                .find(|p| p.name.as_str() == n)
                .unwrap()
                .clone()
        };
        let (openai, azure) = (p("openai"), p("azure"));
        assert_eq!(openai.upstream.as_deref(), Some("https://gw.example"));
        assert_eq!(openai.source, UpstreamSource::Env("OPENAI_BASE_URL"));
        assert_eq!(
            azure.upstream.as_deref(),
            Some("https://res.openai.azure.com")
        );
        assert_eq!(p("anthropic").source, UpstreamSource::ConfigFile);
        assert_eq!(p("gemini").source, UpstreamSource::Flag);
        assert_eq!(p("ollama").source, UpstreamSource::BuiltIn);
        let none = Settings::build_with_env(
            Path::new("."),
            FileConfig::default(),
            &Overrides::default(),
            |_| None,
        )
        .unwrap();
        let azure = none
            .providers
            .iter()
            .find(|p| p.name.as_str() == "azure")
            .unwrap();
        assert!(azure
            .upstream()
            .unwrap_err()
            .to_string()
            .contains("AZURE_OPENAI_ENDPOINT"));
    }

    #[test]
    fn errors_name_what_is_wrong() {
        let o = Overrides::default();
        let e = load("[match]\nignore = [\"nope\"]\n", &o)
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"nope\""), "{e}");
        let e = load(
            "[match]\nreplace = [{ pattern = \"(\", with = \"x\" }]\n",
            &o,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("pattern \"(\""), "{e}");
        for gateway in ["my.gw", "1gw"] {
            let text = format!("[providers.\"{gateway}\"]\nupstream = \"https://gw.example\"\n");
            let e = load(&text, &o).unwrap_err().to_string();
            assert!(e.contains("environment variables"), "{gateway}: {e}");
        }
        assert!(load(
            "[providers.my-gw_2]\nupstream = \"https://gw.example\"\n",
            &o
        )
        .is_ok());
        for bad in [
            "[upstream]\nconnect_timeout_s = 1e30\n",
            "[upstream]\nidle_timeout_s = inf\n",
            "[limits]\nlock_timeout_s = -1\n",
            "[limits]\nbody_mib = 1e30\n",
            "[limits]\nheader_read_timeout_s = nan\n",
        ] {
            let e = load(bad, &o).unwrap_err().to_string();
            assert!(e.contains("at most"), "{bad}: {e}");
        }
        let e = load("[telemetry]\npaths = [\"api/public/ingestion\"]\n", &o)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("[telemetry] paths: \"api/public/ingestion\" is not a path"),
            "{e}"
        );
        let e = load("[telemetry]\npaths = [\"/a/[\"]\n", &o)
            .unwrap_err()
            .to_string();
        assert!(e.contains("[telemetry] paths") && e.contains("/a/["), "{e}");
        let e = load("casette_dir = 1\n", &o).unwrap_err().to_string();
        assert!(e.contains("line 1") && e.contains("casette_dir"), "{e}");
        let e = load("[providers.x]\nkind = \"openai\"\n", &o)
            .unwrap_err()
            .to_string();
        assert!(e.contains("[providers.x] needs an upstream"), "{e}");
        let bad = Overrides {
            upstreams: vec!["nobody=http://x".into()],
            ..Default::default()
        };
        let e = load("", &bad).unwrap_err().to_string();
        assert!(e.contains("no provider named \"nobody\""), "{e}");
    }
}
