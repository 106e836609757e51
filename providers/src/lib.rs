//! Everything that differs between provider families, one file each behind the [`Family`]
//! trait: routes, secrets, environment variables, how a request names its model and prompt, how
//! an answer carries its text, tool calls and usage, which fields change on every call, the
//! error shape its SDK understands, the request id, and how `rerun` swaps the model. The
//! daemon, the cassettes' summaries and reviews, `rerun` and the runner call in here; none of
//! them names a provider. Adding a family is adding a file and a [`Kind`].
#![warn(missing_docs)]

mod anthropic;
mod azure;
mod bedrock;
pub mod env;
mod gemini;
mod http;
mod ollama;
mod openai;
pub mod redact;
mod vertex;

pub use bedrock::SIGNING_HEADERS as BEDROCK_SIGNING_HEADERS;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::OnceLock;

/// A provider family: the wire format a provider speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// OpenAI and every OpenAI-compatible gateway.
    #[serde(alias = "openai-compatible")]
    OpenAi,
    /// Azure OpenAI: OpenAI's bodies under deployment paths, `api-key` and `api-version`.
    Azure,
    /// Anthropic's Messages API.
    Anthropic,
    /// Google's Gemini API.
    Gemini,
    /// Ollama's API.
    Ollama,
    /// Amazon Bedrock Runtime: SigV4-signed, event streams.
    Bedrock,
    /// Google Vertex AI: Gemini's bodies under project and location paths, OAuth tokens.
    Vertex,
    /// Any other HTTP API: recorded and replayed, with nothing read from its bodies.
    Http,
}

impl Kind {
    /// Every family, `Http` last.
    pub const ALL: [Kind; 8] = [
        Kind::OpenAi,
        Kind::Azure,
        Kind::Anthropic,
        Kind::Gemini,
        Kind::Ollama,
        Kind::Bedrock,
        Kind::Vertex,
        Kind::Http,
    ];

    /// Its name: the built-in provider's route and file name.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::OpenAi => "openai",
            Kind::Azure => "azure",
            Kind::Anthropic => "anthropic",
            Kind::Gemini => "gemini",
            Kind::Ollama => "ollama",
            Kind::Bedrock => "bedrock",
            Kind::Vertex => "vertex",
            Kind::Http => "http",
        }
    }

    /// What it knows.
    pub fn family(self) -> &'static dyn Family {
        match self {
            Kind::OpenAi => &openai::OpenAi,
            Kind::Azure => &azure::Azure,
            Kind::Anthropic => &anthropic::Anthropic,
            Kind::Gemini => &gemini::Gemini,
            Kind::Ollama => &ollama::Ollama,
            Kind::Bedrock => &bedrock::Bedrock,
            Kind::Vertex => &vertex::Vertex,
            Kind::Http => &http::Http,
        }
    }

    /// The family a path without a provider prefix belongs to, from its well-known shape.
    pub fn for_path(path: &str) -> Option<Kind> {
        // Most specific first: Anthropic's and Azure's paths would also pass for OpenAI's,
        // Vertex's for Gemini's.
        [
            Kind::Anthropic,
            Kind::Azure,
            Kind::Bedrock,
            Kind::Vertex,
            Kind::Gemini,
            Kind::Ollama,
            Kind::OpenAi,
        ]
        .into_iter()
        .find(|k| k.family().owns_path(path))
    }
}

/// What one family knows. Defaults fit a family that has nothing special to say.
pub trait Family: Sync {
    /// Its [`Kind`].
    fn kind(&self) -> Kind;

    /// Its name for people, in help texts.
    fn display_name(&self) -> &'static str;

    /// A path of its API that routes to it with no provider prefix, for help texts.
    fn example_path(&self) -> Option<&'static str> {
        None
    }

    /// The real API's root, when it is the same for everybody (Azure's is per resource).
    fn default_upstream(&self) -> Option<&'static str>;

    /// Whether a path with no provider prefix is this family's.
    fn owns_path(&self, _path: &str) -> bool {
        false
    }

    /// The hosts of its API, for a call the daemon captures as a proxy: each a name, or a
    /// pattern with one `*` standing for one or more characters of a label
    /// (`*.openai.azure.com`, `*-aiplatform.googleapis.com`).
    fn hosts(&self) -> &'static [&'static str] {
        &[]
    }

    /// Other APIs that speak this family's protocol at hosts of their own, each with the name
    /// its cassette gets (`api.mistral.ai` speaks OpenAI's as `mistral`).
    fn compatible_hosts(&self) -> &'static [(&'static str, &'static str)] {
        &[]
    }

    /// The path as the API names it, for a path some clients build another way (from a base
    /// URL that lacks the version they expect it to hold): both are one route and one key.
    fn api_path<'a>(&self, path: &'a str) -> Cow<'a, str> {
        Cow::Borrowed(path)
    }

    /// The family a path sent to this family's base URL belongs to when it is another's:
    /// google-genai sends Vertex's paths to its Gemini base URL when only the environment
    /// (`GOOGLE_GENAI_USE_VERTEXAI`) says Vertex.
    fn hands_over(&self, _path: &str) -> Option<Kind> {
        None
    }

    /// Whether a path (after the provider's prefix, as [`Family::api_path`] gives it) is of
    /// this family's API. An upstream 404 for any other path means the client built its URL
    /// from a base it misread, and is not saved.
    fn knows_path(&self, _path: &str) -> bool {
        true
    }

    /// The real endpoint of a family whose host names a region or location, from the variables
    /// its SDKs read (`env` looks one up); none for a family with one host for everybody.
    fn regional_upstream(&self, _env: &dyn Fn(&str) -> Option<String>) -> Option<String> {
        None
    }

    /// Whether recording signs this family's requests again for the real host (the client
    /// signed them for the daemon's), with the environment's credentials.
    fn resigns_requests(&self) -> bool {
        false
    }

    /// Whether an upstream at `host` may receive the credentials the daemon itself adds to a
    /// request of this family (Bedrock's re-signing with the environment's AWS keys). Families
    /// that add none accept every host.
    fn may_receive_credentials(&self, _https: bool, _host: &str) -> bool {
        true
    }

    /// Query parameters that carry a key: forwarded upstream, never recorded nor keyed.
    fn secret_params(&self) -> &'static [&'static str] {
        &[]
    }

    /// Paths that only report (an SDK's traces): telemetry, not a conversation to replay.
    fn telemetry_paths(&self) -> &'static [&'static str] {
        &[]
    }

    /// Response headers that carry keys or account ids: never recorded.
    fn secret_headers(&self) -> &'static [&'static str] {
        &[]
    }

    /// The headers that carry a key the way this family's API expects it.
    fn auth_headers(&self, _key: &str) -> Vec<(&'static str, String)> {
        Vec::new()
    }

    /// Headers its API requires on every request; cassettes keep no request headers, so
    /// `rerun` adds these.
    fn required_headers(&self) -> &'static [(&'static str, &'static str)] {
        &[]
    }

    /// The model a request asks for: `model` in its body for most.
    fn model(&self, _path: &str, body: Option<&Value>) -> Option<String> {
        body?.get("model")?.as_str().map(str::to_string)
    }

    /// Points a request at another model, for `rerun --model`.
    fn set_model(&self, _path: &mut String, body: &mut Value, model: &str) {
        if let Value::Object(map) = body {
            map.insert("model".into(), Value::String(model.into()));
        }
    }

    /// The last user message of a request body in this family's shape.
    fn prompt(&self, _body: &Value) -> Option<String> {
        None
    }

    /// Adds what one payload of an answer (a whole body, or one stream event's data) says to
    /// `answer`, when it is in this family's shape.
    fn read(&self, _payload: &Value, _answer: &mut Answer) {}

    /// Token counts from this family's usage object.
    fn tokens(&self, _usage: &Value) -> Option<Tokens> {
        None
    }

    /// Answer fields that differ on every call with the same answer: ids, timestamps.
    fn volatile_fields(&self) -> &'static [&'static str] {
        &[]
    }

    /// An error body its SDK surfaces with `message`.
    fn error_body(&self, status: u16, code: &str, message: &str) -> Value;

    /// The event a WebSocket session of this family gets for an error, before its close: the
    /// family's error body, unless its sessions speak events of their own (OpenAI Realtime).
    fn session_error(&self, status: u16, code: &str, message: &str) -> Value {
        self.error_body(status, code, message)
    }

    /// The provider's id for a request, from its answer's headers or payloads.
    fn request_id(
        &self,
        _headers: &BTreeMap<String, String>,
        _payloads: &[Value],
    ) -> Option<String> {
        None
    }
}

/// What an answer says, read from its payloads: text, tool calls as (name, arguments), usage.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Answer {
    /// The answer's text.
    pub text: String,
    /// Its tool calls: name and arguments.
    pub tools: Vec<(String, String)>,
    /// Its usage block.
    pub usage: Option<Value>,
    /// Why the model stopped (`stop`, `end_turn`, `tool_use`, `MAX_TOKENS`...), as the last
    /// payload that says it.
    pub finish: Option<String>,
    /// How many choices (candidates) it holds.
    pub choices: usize,
    /// The kinds of content it holds (`text`, `tool_use`, `thinking`...), each once, in the
    /// order first seen.
    pub kinds: Vec<String>,
}

impl Answer {
    /// Notes a kind of content.
    pub fn kind(&mut self, kind: &str) {
        if !self.kinds.iter().any(|k| k == kind) {
            self.kinds.push(kind.to_string());
        }
    }

    /// Notes why the model stopped, when the payload says it.
    pub fn finish(&mut self, reason: Option<&Value>) {
        if let Some(r) = reason.and_then(Value::as_str) {
            self.finish = Some(r.to_string());
        }
    }

    /// Notes a choice's index (from 0).
    pub fn choice(&mut self, index: usize) {
        self.choices = self.choices.max(index + 1);
    }
}

/// Token counts, whatever the family names them, counted the way prices are: `input` is every
/// token the prompt held (cache reads and writes among them, though Anthropic counts those
/// apart), `output` every token generated (reasoning among them, though Gemini counts those
/// apart).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tokens {
    /// Tokens in.
    pub input: u64,
    /// Tokens out.
    pub output: u64,
    /// Of `input`, those read from the provider's prompt cache.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_read: u64,
    /// Of `input`, those written to the provider's prompt cache (Anthropic, Bedrock).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write: u64,
    /// Of `output`, those the model reasoned with and did not show.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reasoning: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Tokens {
    /// Tokens in and out.
    pub fn total(&self) -> u64 {
        self.input.saturating_add(self.output)
    }

    /// Reads a usage object of any family.
    pub fn of(usage: &Value) -> Option<Tokens> {
        families().find_map(|f| f.tokens(usage))
    }
}

fn families() -> impl Iterator<Item = &'static dyn Family> {
    Kind::ALL.into_iter().map(Kind::family)
}

/// The provider a captured call to `host` belongs to: its cassette's name and its family. A
/// family's own host is that family under its own name; a compatible API's host has the name
/// its family gives it; any other host is the `http` family, named by the host itself.
pub fn for_host(host: &str) -> (String, Kind) {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    for f in families() {
        if f.hosts().iter().any(|p| host_matches(p, &host)) {
            return (f.kind().as_str().to_string(), f.kind());
        }
        if let Some((_, name)) = f.compatible_hosts().iter().find(|(h, _)| *h == host) {
            return (name.to_string(), f.kind());
        }
    }
    (host, Kind::Http)
}

/// Whether `host` matches `pattern`, whose one `*` stands for one or more characters that are
/// not a dot.
fn host_matches(pattern: &str, host: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == host,
        Some((before, after)) => {
            host.len() > before.len() + after.len()
                && host.starts_with(before)
                && host.ends_with(after)
                && !host[before.len()..host.len() - after.len()].contains('.')
        }
    }
}

/// Whether `path` names an API version (or an API's prefix) twice, as in
/// `/v1/v1/chat/completions`: the commonest base-URL mistake, a version in the base URL and
/// again in the path the client appends. No family's API has such a path, whatever its
/// prefix lets through.
pub fn doubles_a_version(path: &str) -> bool {
    let versioned = |s: &&str| {
        matches!(*s, "api" | "openai")
            || s.strip_prefix('v').is_some_and(|rest| {
                rest.starts_with(|c: char| c.is_ascii_digit())
                    && rest.chars().all(|c| c.is_ascii_alphanumeric())
            })
    };
    let segments: Vec<&str> = path
        .split(['?', ':'])
        .next()
        .unwrap_or_default()
        .split('/')
        .filter(versioned)
        .collect();
    segments
        .iter()
        .enumerate()
        .any(|(i, s)| segments[..i].contains(s))
}

/// Reads an answer's payloads in every family's shape: a stored cassette does not say which
/// family its gateway speaks, and the shapes do not overlap.
pub fn read_answer(payloads: &[Value]) -> Answer {
    let mut answer = Answer::default();
    for payload in payloads {
        for f in families() {
            f.read(payload, &mut answer);
        }
    }
    answer
}

/// Whether an answer field is volatile in any family.
pub fn is_volatile(field: &str) -> bool {
    families().any(|f| f.volatile_fields().contains(&field))
}

/// The model of a request in any family's shape.
pub fn model(path: &str, body: Option<&Value>) -> Option<String> {
    families().find_map(|f| f.model(path, body))
}

/// The last user message of a request body in any family's shape.
pub fn prompt(body: &Value) -> Option<String> {
    families().find_map(|f| f.prompt(body))
}

/// The families by name, for help texts: "OpenAI, Azure OpenAI, ..., any other HTTP API".
pub fn family_names() -> String {
    families()
        .map(|f| f.display_name())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A well-known path of each family, for help texts.
pub fn example_paths() -> String {
    families()
        .filter_map(|f| f.example_path())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Every family's secret query parameters, lowercase: none is recorded, whoever the provider,
/// since a gateway may take any family's.
pub fn secret_params() -> &'static [&'static str] {
    static ALL: OnceLock<Vec<&'static str>> = OnceLock::new();
    ALL.get_or_init(|| {
        let mut all: Vec<&'static str> = families()
            .flat_map(|f| f.secret_params().iter().copied())
            .chain(redact::SHARED_PARAMS.iter().copied())
            .collect();
        all.sort_unstable();
        all.dedup();
        all
    })
}

/// Response headers never recorded for any provider: every family's secrets, and cookies.
pub fn secret_headers() -> &'static [&'static str] {
    static ALL: OnceLock<Vec<&'static str>> = OnceLock::new();
    ALL.get_or_init(|| {
        [
            "authorization",
            "proxy-authorization",
            "cookie",
            "set-cookie",
            // Tools' own key headers (Brave search, Azure API Management, RapidAPI, GitLab).
            "x-subscription-token",
            "ocp-apim-subscription-key",
            "x-rapidapi-key",
            "private-token",
            "x-api-token",
            "x-auth-token",
        ]
        .into_iter()
        .chain(families().flat_map(|f| f.secret_headers().iter().copied()))
        .collect()
    })
}

// Helpers the families share.

/// `path` with the API's `version` in front when it is one of `roots` or below one: a client
/// that expects the version inside its base URL sends it without.
fn versioned<'a>(path: &'a str, roots: &[&str], version: &str) -> Cow<'a, str> {
    let under = |root: &str| {
        path.strip_prefix(root)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    };
    if roots.iter().any(|r| under(r)) {
        Cow::Owned(format!("{version}{path}"))
    } else {
        Cow::Borrowed(path)
    }
}

/// The first of `names` that `env` holds (not empty), else `default`.
fn first_env(env: &dyn Fn(&str) -> Option<String>, names: &[&str], default: &str) -> String {
    names
        .iter()
        .find_map(|n| env(n).filter(|v| !v.is_empty()))
        .unwrap_or_else(|| default.to_string())
}

fn str_at(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_string)
}

/// Tool arguments as text, whether sent as a JSON string or an object.
fn args_text(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    }
}

/// Text of a message content in any family's shape: a string, or a list of parts.
fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| match p {
                Value::String(s) => Some(s.clone()),
                other => other
                    .get("text")
                    .and_then(Value::as_str)
                    .map(str::to_string),
            })
            .collect::<Vec<_>>()
            .join(" "),
        other => other.to_string(),
    }
}

/// The content of the last message with role `user` in a list of messages.
fn last_user(list: &Value, content_key: &str) -> Option<String> {
    let last = list
        .as_array()?
        .iter()
        .rev()
        .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))?;
    Some(content_text(last.get(content_key)?))
}

/// The first of `names` that is a header of `headers`.
fn header(headers: &BTreeMap<String, String>, names: &[&str]) -> Option<String> {
    names.iter().find_map(|n| headers.get(*n).cloned())
}

fn count(usage: &Value, key: &str) -> Option<u64> {
    usage.get(key).and_then(Value::as_u64)
}

/// A count inside `usage`, at a JSON pointer (`/prompt_tokens_details/cached_tokens`).
fn count_at(usage: &Value, pointer: &str) -> Option<u64> {
    usage.pointer(pointer).and_then(Value::as_u64)
}

#[cfg(test)]
mod tests {
    /// A version named twice is no family's path; one version, or two different segments
    /// that only look alike, are.
    #[test]
    fn doubled_versions_are_no_path_of_any_api() {
        for doubled in [
            "/v1/v1/chat/completions",
            "/v1beta/v1beta/models/gemini-2.0-flash:generateContent",
            "/api/api/chat",
            "/v1/openai/v1/responses",
            "/openai/openai/deployments/d/chat/completions",
        ] {
            assert!(super::doubles_a_version(doubled), "{doubled}");
        }
        for fine in [
            "/v1/chat/completions",
            "/v1beta/models/gemini-2.0-flash:generateContent",
            "/upload/v1beta/files",
            "/api/chat",
            "/openai/deployments/d/chat/completions?api-version=2024-10-21",
            "/v1/files/v1abc/content",
            "/model/anthropic.claude-v2/invoke",
        ] {
            assert!(!super::doubles_a_version(fine), "{fine}");
        }
    }

    #[test]
    fn captured_hosts_find_their_family() {
        let of = |h: &str| {
            let (name, kind) = crate::for_host(h);
            (name, kind)
        };
        assert_eq!(of("api.openai.com"), ("openai".into(), Kind::OpenAi));
        assert_eq!(
            of("API.Anthropic.com."),
            ("anthropic".into(), Kind::Anthropic)
        );
        assert_eq!(of("my-res.openai.azure.com"), ("azure".into(), Kind::Azure));
        assert_eq!(of("a.b.openai.azure.com").1, Kind::Http, "one label only");
        assert_eq!(of("europe-west4-aiplatform.googleapis.com").1, Kind::Vertex);
        assert_eq!(
            of("bedrock-runtime.us-east-1.amazonaws.com").1,
            Kind::Bedrock
        );
        assert_eq!(of("api.mistral.ai"), ("mistral".into(), Kind::OpenAi));
        assert_eq!(of("search.example"), ("search.example".into(), Kind::Http));
    }

    use super::*;
    use serde_json::json;

    #[test]
    fn known_paths() {
        use Kind::*;
        for (path, kind) in [
            ("/v1/chat/completions", Some(OpenAi)),
            ("/v1/responses", Some(OpenAi)),
            ("/v1/messages", Some(Anthropic)),
            ("/api/chat", Some(Ollama)),
            ("/v1beta/models/g:streamGenerateContent", Some(Gemini)),
            ("/v1/models/g:generateContent", Some(Gemini)),
            ("/openai/deployments/gpt4o/chat/completions", Some(Azure)),
            ("/nothing", None),
        ] {
            assert_eq!(Kind::for_path(path), kind, "{path}");
        }
    }

    #[test]
    fn models_and_prompts_of_every_family() {
        let chat = json!({"model":"gpt","messages":[{"role":"user","content":"first"},{"role":"assistant","content":"x"},{"role":"user","content":[{"type":"text","text":"second"}]}]});
        assert_eq!(
            model("/v1/chat/completions", Some(&chat)).as_deref(),
            Some("gpt")
        );
        assert_eq!(prompt(&chat).as_deref(), Some("second"));
        let gemini = json!({"contents":[{"role":"user","parts":[{"text":"hello"}]}]});
        assert_eq!(
            model(
                "/v1beta/models/gemini-2.0-flash:generateContent",
                Some(&gemini)
            )
            .as_deref(),
            Some("gemini-2.0-flash")
        );
        assert_eq!(prompt(&gemini).as_deref(), Some("hello"));
        assert_eq!(
            model("/openai/deployments/my-4o/chat/completions", None).as_deref(),
            Some("my-4o")
        );
        assert_eq!(prompt(&json!({"input": "say"})).as_deref(), Some("say"));
        assert_eq!(prompt(&json!({"prompt": "gen"})).as_deref(), Some("gen"));
    }

    #[test]
    fn error_shapes_carry_the_message() {
        for kind in Kind::ALL {
            let body = kind
                .family()
                .error_body(404, "llmreplay_missing_recording", "no recording");
            assert!(
                body.to_string().contains("no recording"),
                "{kind:?}: {body}"
            );
        }
        let body = Kind::Anthropic.family().error_body(404, "x", "m");
        assert_eq!(body["error"]["type"], "not_found_error");
    }

    #[test]
    fn secrets_of_every_family() {
        let params = secret_params();
        for p in ["key", "api-key", "api_key", "access_token"] {
            assert!(params.contains(&p), "{p}");
        }
        let headers = secret_headers();
        for h in [
            "authorization",
            "x-api-key",
            "api-key",
            "x-goog-api-key",
            "set-cookie",
            "openai-organization",
        ] {
            assert!(headers.contains(&h), "{h}");
        }
    }
}
