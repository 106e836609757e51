//! What differs between provider families: default upstream, the paths that identify them, the
//! query parameters that carry keys, and the shape of an error answer their SDKs understand.
//! Streams are recognised by content type, which is the same across families.

use cassettes::ProviderName;
use serde::Deserialize;
use serde_json::{json, Value};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// OpenAI and every OpenAI-compatible gateway.
    #[serde(alias = "openai-compatible")]
    OpenAi,
    Anthropic,
    Gemini,
    Ollama,
}

impl ProviderKind {
    pub const ALL: [ProviderKind; 4] = [
        ProviderKind::OpenAi,
        ProviderKind::Anthropic,
        ProviderKind::Gemini,
        ProviderKind::Ollama,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::OpenAi => "openai",
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::Gemini => "gemini",
            ProviderKind::Ollama => "ollama",
        }
    }

    fn default_upstream(self) -> &'static str {
        match self {
            ProviderKind::OpenAi => "https://api.openai.com",
            ProviderKind::Anthropic => "https://api.anthropic.com",
            ProviderKind::Gemini => "https://generativelanguage.googleapis.com",
            ProviderKind::Ollama => "http://127.0.0.1:11434",
        }
    }

    /// The family a path without a provider prefix belongs to, from its well-known shape.
    pub fn for_path(path: &str) -> Option<ProviderKind> {
        if path.starts_with("/v1/messages") || path.starts_with("/v1/complete") {
            Some(ProviderKind::Anthropic)
        } else if path.contains(":generateContent")
            || path.contains(":streamGenerateContent")
            || path.contains(":embedContent")
            || path.starts_with("/v1beta/")
        {
            Some(ProviderKind::Gemini)
        } else if path.starts_with("/api/") {
            Some(ProviderKind::Ollama)
        } else if path.starts_with("/v1/") {
            Some(ProviderKind::OpenAi)
        } else {
            None
        }
    }

    /// Query parameters that carry a key; forwarded upstream, never recorded.
    pub fn secret_params(self) -> &'static [&'static str] {
        &["key", "api_key", "api-key", "access_token"]
    }

    /// An error body in the family's own shape, so its SDK surfaces `message` to the test.
    pub fn error_body(self, status: u16, kind: &str, message: &str) -> Value {
        match self {
            ProviderKind::OpenAi => json!({
                "error": { "message": message, "type": kind, "param": null, "code": kind }
            }),
            ProviderKind::Anthropic => json!({
                "type": "error",
                "error": { "type": if status == 404 { "not_found_error" } else { "invalid_request_error" }, "message": message }
            }),
            ProviderKind::Gemini => json!({
                "error": { "code": status, "message": message, "status": if status == 404 { "NOT_FOUND" } else { "FAILED_PRECONDITION" } }
            }),
            ProviderKind::Ollama => json!({ "error": message }),
        }
    }
}

/// A provider the daemon serves: a name in routes and cassette files, a family and an upstream.
#[derive(Clone, Debug)]
pub struct Provider {
    pub name: ProviderName,
    pub kind: ProviderKind,
    /// `scheme://host[:port][/prefix]`, no trailing slash.
    pub upstream: String,
}

impl Provider {
    pub fn builtin(kind: ProviderKind) -> Self {
        Provider {
            name: ProviderName::new(kind.as_str()).expect("built-in names are valid"),
            kind,
            upstream: kind.default_upstream().to_string(),
        }
    }
}

impl Provider {
    /// Environment variables that may hold this provider's key, in order: `<NAME>_API_KEY` for a
    /// gateway of your own, then the family's usual one.
    pub fn key_vars(&self) -> Vec<String> {
        let mut vars = Vec::new();
        if self.name.as_str() != self.kind.as_str() {
            vars.push(format!(
                "{}_API_KEY",
                self.name.as_str().to_uppercase().replace('-', "_")
            ));
        }
        vars.extend(
            match self.kind {
                ProviderKind::OpenAi => &["OPENAI_API_KEY"][..],
                ProviderKind::Anthropic => &["ANTHROPIC_API_KEY"],
                ProviderKind::Gemini => &["GEMINI_API_KEY", "GOOGLE_API_KEY"],
                ProviderKind::Ollama => &["OLLAMA_API_KEY"],
            }
            .iter()
            .map(|v| v.to_string()),
        );
        vars
    }

    /// The headers that carry `key` the way this family's API expects it.
    pub fn auth_headers(&self, key: &str) -> Vec<(&'static str, String)> {
        match self.kind {
            ProviderKind::OpenAi | ProviderKind::Ollama => {
                vec![("authorization", format!("Bearer {key}"))]
            }
            ProviderKind::Anthropic => vec![("x-api-key", key.to_string())],
            ProviderKind::Gemini => vec![("x-goog-api-key", key.to_string())],
        }
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

/// Response headers never written to a cassette: secrets, cookies, account ids, and those that
/// describe one transfer rather than the answer. `content-encoding` is kept: a body is stored as
/// the bytes received, so replay must say how they are encoded.
pub const NOT_RECORDED: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "x-api-key",
    "api-key",
    "x-goog-api-key",
    "cookie",
    "set-cookie",
    "openai-organization",
    "openai-project",
    "anthropic-organization-id",
    "connection",
    "keep-alive",
    "transfer-encoding",
    "content-length",
    "date",
    "alt-svc",
    "server-timing",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_paths() {
        use ProviderKind::*;
        assert_eq!(ProviderKind::for_path("/v1/chat/completions"), Some(OpenAi));
        assert_eq!(ProviderKind::for_path("/v1/responses"), Some(OpenAi));
        assert_eq!(ProviderKind::for_path("/v1/messages"), Some(Anthropic));
        assert_eq!(ProviderKind::for_path("/api/chat"), Some(Ollama));
        assert_eq!(
            ProviderKind::for_path("/v1beta/models/g:streamGenerateContent"),
            Some(Gemini)
        );
        assert_eq!(
            ProviderKind::for_path("/v1/models/g:generateContent"),
            Some(Gemini)
        );
        assert_eq!(ProviderKind::for_path("/nothing"), None);
    }
}
