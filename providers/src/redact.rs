//! The one redaction every URL, query and header passes before it leaves the daemon in any
//! form: a cassette, the journal, the report, a log line, an error body or stderr. Secret query
//! parameters (every family's, their names percent-decoded) keep their name and lose their
//! value; userinfo in a URL (`https://user:TOKEN@gateway`) becomes `***`; secret headers are
//! shown as `***`.

use std::borrow::Cow;

/// What stands in for a secret.
pub const MASK: &str = "***";

/// What a secret in a body becomes, in the request and the answer alike: one stable value, so
/// that a request keys the same whatever the live secret, and a token endpoint's answer
/// replays a token an SDK takes.
pub const PLACEHOLDER: &str = "llmreplay-redacted";

/// Field names whose values are secrets wherever they stand in a JSON or form body, compared
/// without case, `-` or `_` (`clientSecret` is `client_secret`). Each family's own (OpenAI's
/// `tools[].authorization` for a hosted MCP server, Anthropic's
/// `mcp_servers[].authorization_token`, AWS's `SecretAccessKey` and `SessionToken`) are among
/// them; `[redact] body_fields` adds more.
pub const BODY_FIELDS: &[&str] = &[
    "authorization",
    "authorization_token",
    "api_key",
    "apikey",
    "x_api_key",
    "access_token",
    "refresh_token",
    "id_token",
    "client_secret",
    "client_assertion",
    "assertion",
    "password",
    "passwd",
    "code_verifier",
    "token",
    "secret",
    "private_key",
    "secret_access_key",
    "session_token",
    "subscription_key",
];

/// Query parameters that carry secrets for tools and clouds, beside every family's own: they
/// are masked wherever a URL is shown and left out of keys.
pub const SHARED_PARAMS: &[&str] = &[
    "apikey",
    "appid",
    "token",
    "access_token",
    "refresh_token",
    "client_secret",
    "password",
    "code_verifier",
    "assertion",
    "client_assertion",
    "x-amz-signature",
    "x-amz-security-token",
    "x-amz-credential",
    "sig",
    "signature",
];

/// Fields under which nothing is a secret, whatever it is called: a logprob's `token` is the
/// text the model wrote.
const NEVER_SECRET_UNDER: &[&str] = &["logprobs", "top_logprobs"];

/// A field name as compared: lowercase, without `-` and `_`.
fn folded(name: &str) -> String {
    name.chars()
        .filter(|c| *c != '-' && *c != '_')
        .flat_map(char::to_lowercase)
        .collect()
}

/// The secret field names of bodies: [`BODY_FIELDS`] and those `extra` adds, folded.
#[derive(Clone, Debug)]
pub struct BodyFields(Vec<String>);

impl Default for BodyFields {
    fn default() -> Self {
        BodyFields::with(&[])
    }
}

impl BodyFields {
    /// The shared list and `extra` (`[redact] body_fields`).
    pub fn with(extra: &[String]) -> Self {
        let mut names: Vec<String> = BODY_FIELDS.iter().map(|n| folded(n)).collect();
        names.extend(extra.iter().map(|n| folded(n)));
        names.sort();
        names.dedup();
        BodyFields(names)
    }

    /// Whether a field of this name holds a secret.
    pub fn is_secret(&self, name: &str) -> bool {
        // The hot path: most names are not, and most are short; fold only when needed.
        let plain = name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        if plain {
            self.0.iter().any(|n| n == name)
        } else {
            self.0.contains(&folded(name))
        }
    }

    /// Replaces the value of every secret-named field in `value` (a string, or a number) with
    /// [`PLACEHOLDER`]; returns the secrets replaced, so that text holding them elsewhere can
    /// lose them too.
    pub fn json(&self, value: &mut serde_json::Value) -> Vec<String> {
        let mut found = Vec::new();
        self.walk(value, &mut found);
        found
    }

    fn walk(&self, value: &mut serde_json::Value, found: &mut Vec<String>) {
        use serde_json::Value;
        match value {
            Value::Object(map) => {
                for (name, v) in map.iter_mut() {
                    if NEVER_SECRET_UNDER.contains(&name.as_str()) {
                        continue;
                    }
                    let secret = match v {
                        Value::String(s) => !s.is_empty() && s != PLACEHOLDER,
                        Value::Number(_) => true,
                        _ => false,
                    };
                    if secret && self.is_secret(name) {
                        let old = std::mem::replace(v, Value::String(PLACEHOLDER.into()));
                        found.push(match old {
                            Value::String(s) => s,
                            other => other.to_string(),
                        });
                    } else {
                        self.walk(v, found);
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|v| self.walk(v, found)),
            _ => {}
        }
    }

    /// A `application/x-www-form-urlencoded` body (`grant_type=refresh_token&client_secret=...`)
    /// with the values of its secret-named pairs replaced; `None` when it is no such body or
    /// has no secret.
    pub fn form(&self, text: &str) -> Option<String> {
        let looks_like_form = !text.is_empty()
            && !text.contains(|c: char| c.is_whitespace() || matches!(c, '{' | '[' | '"'))
            && text.split('&').all(|pair| pair.contains('='));
        if !looks_like_form {
            return None;
        }
        let mut changed = false;
        let pairs: Vec<String> = text
            .split('&')
            .map(|pair| {
                let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
                let decoded = percent_encoding::percent_decode_str(&name.replace('+', " "))
                    .decode_utf8_lossy()
                    .into_owned();
                if !value.is_empty() && value != PLACEHOLDER && self.is_secret(&decoded) {
                    changed = true;
                    format!("{name}={PLACEHOLDER}")
                } else {
                    pair.to_string()
                }
            })
            .collect();
        changed.then(|| pairs.join("&"))
    }

    /// JSON or form text with its secrets replaced, keeping everything else as it was
    /// written (spacing, key order, escapes); `None` when it holds none. JSON whose secret
    /// cannot be found as written is given back compact.
    pub fn text(&self, text: &str) -> Option<String> {
        if let Ok(mut value) = serde_json::from_str::<serde_json::Value>(text) {
            let found = self.json(&mut value);
            if found.is_empty() {
                return None;
            }
            let mut out = text.to_string();
            for secret in &found {
                let written = serde_json::to_string(secret).expect("a string serialises");
                if !out.contains(&written) {
                    return Some(value.to_string());
                }
                out = out.replace(&written, &format!("\"{PLACEHOLDER}\""));
            }
            return Some(out);
        }
        self.form(text)
    }
}

/// Whether a query parameter's name (as sent, maybe percent-encoded) names a secret.
pub fn is_secret_param(raw_name: &str) -> bool {
    is_one_of(raw_name, crate::secret_params())
}

/// Whether a query parameter's name (as sent, maybe percent-encoded: `k%65y`) is one of
/// `secrets`, whatever its case: the one check that both keying and redaction make.
pub fn is_one_of(raw_name: &str, secrets: &[&str]) -> bool {
    let name = percent_encoding::percent_decode_str(raw_name).decode_utf8_lossy();
    let name = name.trim();
    secrets.iter().any(|s| s.eq_ignore_ascii_case(name))
}

/// Whether a header carries a key or a credential.
pub fn is_secret_header(name: &str) -> bool {
    crate::secret_headers()
        .iter()
        .any(|s| s.eq_ignore_ascii_case(name))
        || name.eq_ignore_ascii_case("x-amz-security-token")
}

/// A query string with the values of secret parameters masked; the rest as it was.
pub fn query(q: &str) -> Cow<'_, str> {
    if !q.split('&').any(|pair| is_secret_param(name_of(pair))) {
        return Cow::Borrowed(q);
    }
    let pairs: Vec<String> = q
        .split('&')
        .map(|pair| {
            let name = name_of(pair);
            if is_secret_param(name) {
                format!("{name}={MASK}")
            } else {
                pair.to_string()
            }
        })
        .collect();
    Cow::Owned(pairs.join("&"))
}

fn name_of(pair: &str) -> &str {
    pair.split('=').next().unwrap_or("")
}

/// A URL (absolute, or a path with a query) with its userinfo and secret query values masked.
pub fn url(u: &str) -> Cow<'_, str> {
    let (before_fragment, fragment) = match u.split_once('#') {
        Some((a, f)) => (a, Some(f)),
        None => (u, None),
    };
    let (head, q) = match before_fragment.split_once('?') {
        Some((h, q)) => (h, Some(q)),
        None => (before_fragment, None),
    };
    let head = userinfo(head);
    let q = q.map(query);
    if matches!(head, Cow::Borrowed(_)) && q.as_ref().is_none_or(|q| matches!(q, Cow::Borrowed(_)))
    {
        return Cow::Borrowed(u);
    }
    let mut out = head.into_owned();
    if let Some(q) = q {
        out.push('?');
        out.push_str(&q);
    }
    if let Some(f) = fragment {
        out.push('#');
        out.push_str(f);
    }
    Cow::Owned(out)
}

/// Free text (an error from a library, say) with every URL or query in it redacted: each
/// word that looks like one passes through [`url`].
pub fn text(s: &str) -> Cow<'_, str> {
    let suspicious = |w: &str| w.contains("://") || w.contains('?') || w.contains('=');
    if !s.split_whitespace().any(suspicious) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(start) = rest.find(|c: char| !c.is_whitespace()) {
        out.push_str(&rest[..start]);
        let word_len = rest[start..]
            .find(char::is_whitespace)
            .unwrap_or(rest.len() - start);
        let word = &rest[start..start + word_len];
        if suspicious(word) {
            // Punctuation around a URL or a pair, `(key=K)` or `"https://...",`, is not part of it.
            let core = word.trim_start_matches(['(', '[', '{', '"', '\'', '<', '`']);
            let core =
                core.trim_end_matches([')', ']', '}', '"', '\'', '>', '`', ',', ';', '.', ':']);
            let at = word.len()
                - word
                    .trim_start_matches(['(', '[', '{', '"', '\'', '<', '`'])
                    .len();
            out.push_str(&word[..at]);
            if core.contains("://") || core.contains('?') {
                out.push_str(&url(core));
            } else {
                out.push_str(&query(core));
            }
            out.push_str(&word[at + core.len()..]);
        } else {
            out.push_str(word);
        }
        rest = &rest[start + word_len..];
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// `scheme://user:pass@host/...` as `scheme://***@host/...`.
fn userinfo(head: &str) -> Cow<'_, str> {
    let Some(scheme_end) = head.find("://") else {
        return Cow::Borrowed(head);
    };
    let rest = &head[scheme_end + 3..];
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    match authority.rfind('@') {
        Some(at) => Cow::Owned(format!("{}{MASK}{}", &head[..scheme_end + 3], &rest[at..])),
        None => Cow::Borrowed(head),
    }
}

/// A header's value as it may be shown: masked when the header is a secret.
pub fn header<'a>(name: &str, value: &'a str) -> &'a str {
    if is_secret_header(name) {
        MASK
    } else {
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_userinfo_and_secret_values() {
        for (given, shown) in [
            (
                "https://user:TOKEN@gw.example:8443/v1?key=K&alt=sse",
                "https://***@gw.example:8443/v1?key=***&alt=sse",
            ),
            (
                "wss://h/ws?api_key=A&k%65y=B",
                "wss://h/ws?api_key=***&k%65y=***",
            ),
            (
                "/v1/realtime?model=m&ACCESS_TOKEN=T",
                "/v1/realtime?model=m&ACCESS_TOKEN=***",
            ),
            ("http://127.0.0.1:1/a@b?x=1", "http://127.0.0.1:1/a@b?x=1"),
            ("https://h/p?key=1#frag", "https://h/p?key=***#frag"),
            ("no url at all", "no url at all"),
        ] {
            assert_eq!(url(given), shown, "{given}");
        }
        assert!(matches!(url("https://h/p?model=x"), Cow::Borrowed(_)));
    }

    #[test]
    fn free_text_is_redacted_word_by_word() {
        assert_eq!(
            text("could not reach wss://u:p@h:1/x?key=K&a=1: refused (key=K2) \"api_key=K3\","),
            "could not reach wss://***@h:1/x?key=***&a=1: refused (key=***) \"api_key=***\","
        );
        assert!(matches!(text("nothing to hide here"), Cow::Borrowed(_)));
    }

    /// Secret-named fields lose their values in JSON and form bodies, at any depth and in
    /// any casing; a logprob's `token`, a schema's `password` property and names that only
    /// contain a secret's name keep theirs; text keeps its layout.
    #[test]
    fn body_secrets_become_the_placeholder() {
        let fields = BodyFields::with(&["x_custom".to_string()]);
        let mut v = serde_json::json!({
            "tools": [{"type": "mcp", "authorization": "tok-A", "server_url": "https://m"}],
            "mcp_servers": [{"authorization_token": "tok-B", "name": "n"}],
            "clientSecret": "cs", "Password": 1234, "X-Custom": "c",
            "logprobs": {"content": [{"token": "Hello"}]},
            "parameters": {"properties": {"password": {"type": "string"}}},
            "max_tokens": 5, "token_type": "Bearer", "empty": {"token": ""}
        });
        let found = fields.json(&mut v);
        assert_eq!(found, ["tok-A", "tok-B", "cs", "1234", "c"]);
        assert_eq!(v["tools"][0]["authorization"], PLACEHOLDER);
        assert_eq!(v["mcp_servers"][0]["authorization_token"], PLACEHOLDER);
        assert_eq!(v["Password"], PLACEHOLDER);
        assert_eq!(v["logprobs"]["content"][0]["token"], "Hello");
        assert_eq!(v["parameters"]["properties"]["password"]["type"], "string");
        assert_eq!(
            (v["max_tokens"].clone(), v["token_type"].clone()),
            (5.into(), "Bearer".into())
        );

        let form = "grant_type=refresh_token&client_id=c&client_secret=S%2F1&refresh_token=R";
        assert_eq!(
            fields.form(form).unwrap(),
            format!("grant_type=refresh_token&client_id=c&client_secret={PLACEHOLDER}&refresh_token={PLACEHOLDER}")
        );
        assert_eq!(fields.form("a=1&b=2"), None);
        assert_eq!(fields.form("{\"a\": 1}"), None);

        let python = "{\"access_token\": \"ya29.A\", \"expires_in\": 3599, \"scope\": \"s\"}";
        assert_eq!(
            fields.text(python).unwrap(),
            format!(
                "{{\"access_token\": \"{PLACEHOLDER}\", \"expires_in\": 3599, \"scope\": \"s\"}}"
            )
        );
        assert_eq!(fields.text("plain words"), None);
    }

    #[test]
    fn secret_headers_are_masked() {
        assert_eq!(header("Authorization", "Bearer sk"), MASK);
        assert_eq!(header("x-goog-api-key", "k"), MASK);
        assert_eq!(
            header("content-type", "application/json"),
            "application/json"
        );
    }
}
