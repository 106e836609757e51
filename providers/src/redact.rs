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

/// Field names whose values are secrets wherever they stand in a JSON, form or XML body, beside
/// those the word rule ([`is_secret_name`]) finds, compared without case, `-` or `_`. Each
/// family's own (OpenAI's `tools[].authorization`, Anthropic's
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

/// Query parameters that carry secrets for tools and clouds, beside every family's own and
/// those the word rule finds: they are masked wherever a URL is shown and left out of keys.
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

/// Words that make a name secret wherever they stand in it (`bearer_token`, `GITHUB_TOKEN`,
/// `clientSecret`, `db_password`).
const SECRET_WORDS: &[&str] = &[
    "token",
    "secret",
    "secrets",
    "password",
    "passwd",
    "passphrase",
    "credential",
    "credentials",
    "apikey",
    "auth",
    "authorization",
];

/// Two words that make a name secret when they stand together (`openai_api_key`, `accessKey`,
/// `x-goog-api-key`); neither alone does.
const SECRET_PAIRS: &[(&str, &str)] = &[
    ("api", "key"),
    ("private", "key"),
    ("access", "key"),
    ("signing", "key"),
    ("subscription", "key"),
];

/// Names the word rule would take that hold no secret, folded: counts and kinds of tokens,
/// pagination cursors, the ids and names of stored secrets. (`max_tokens`, `input_tokens`,
/// `tokenizer`, `author` hold no secret word at all.)
const NOT_SECRET: &[&str] = &[
    "tokentype",
    "tokencount",
    "tokenid",
    "tokenids",
    "tokenlogprobs",
    "tokenusage",
    "tokenlimit",
    "tokenbudget",
    "pagetoken",
    "nextpagetoken",
    "prevpagetoken",
    "previouspagetoken",
    "continuationtoken",
    "nexttoken",
    "secretid",
    "secretname",
    "secretarn",
    "secrettype",
    "authtype",
    "authmethod",
    "credentialtype",
];

/// Under a secret-named object, fields that say when or what, never the secret itself: they
/// keep their values so that clients still parse the answer (`expires_at`, STS' `Expiration`).
const KEPT_UNDER_SECRET: &[&str] = &[
    "expiresat",
    "expiresin",
    "expiration",
    "expiry",
    "expires",
    "type",
    "tokentype",
    "createdat",
    "created",
    "scope",
    "object",
];

/// Query parameters that are secrets only as parameters: an OAuth redirect's `code`.
const QUERY_ONLY: &[&str] = &["code"];

/// Fields beside which a JSON `code` is an OAuth authorization code (a token request sent as
/// JSON), not an error's or a tool's.
const OAUTH_CODE_BESIDE: &[&str] = &["grant_type", "redirect_uri", "code_verifier"];

/// Fields under which nothing is a secret, whatever it is called: a logprob's `token` is the
/// text the model wrote.
const NEVER_SECRET_UNDER: &[&str] = &["logprobs", "top_logprobs"];

/// Fields whose members are named by the user, not by meaning: a JSON schema's `properties`
/// name its fields, and a `password` property there is a schema, not a password.
const NAMES_NOT_VALUES_UNDER: &[&str] = &["properties"];

/// A field name as compared: lowercase, without `-` and `_`.
fn folded(name: &str) -> String {
    name.chars()
        .filter(|c| !matches!(c, '-' | '_' | '.' | ' '))
        .flat_map(char::to_lowercase)
        .collect()
}

/// The words of a name, lowercase: split at `-`, `_`, `.`, spaces and where camelCase turns
/// (`SecretAccessKey` is `secret access key`, `APIKey` is `api key`).
pub fn words(name: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let chars: Vec<char> = name.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if !c.is_alphanumeric() {
            if !word.is_empty() {
                out.push(std::mem::take(&mut word));
            }
            continue;
        }
        let prev = i.checked_sub(1).map(|p| chars[p]);
        let next = chars.get(i + 1).copied();
        let turns = c.is_uppercase()
            && prev.is_some_and(|p| {
                p.is_lowercase()
                    || p.is_ascii_digit()
                    || (p.is_uppercase() && next.is_some_and(char::is_lowercase))
            });
        if turns && !word.is_empty() {
            out.push(std::mem::take(&mut word));
        }
        word.extend(c.to_lowercase());
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

/// Whether a name (a JSON field, a form pair, an XML element, an environment variable) says
/// its value is a secret, by the words it holds.
pub fn is_secret_name(name: &str) -> bool {
    if name.len() > 200 || !may_hold_secret_word(name) {
        return false;
    }
    let words = words(name);
    let secret = words.iter().any(|w| is_secret_word(w))
        || words
            .windows(2)
            .any(|p| SECRET_PAIRS.contains(&(p[0].as_str(), p[1].as_str())));
    secret
        && !NOT_SECRET.contains(&folded(name).as_str())
        && !words.iter().any(|w| NOT_SECRET_WORDS.contains(&w.as_str()))
}

/// Words that end a name run together without separators (`ACCESSTOKEN`, `clientsecret`,
/// `DBPASSWORD`): the name is secret as if it were split.
const SECRET_ENDINGS: &[&str] = &[
    "token",
    "secret",
    "password",
    "passwd",
    "passphrase",
    "credential",
    "credentials",
    "apikey",
];

/// Whether one word of a name makes it secret: a secret word, a secret pair written as one
/// (`ACCESSKEY`, `privatekey`), or a word that ends in a secret word (`SESSIONTOKEN`).
fn is_secret_word(word: &str) -> bool {
    SECRET_WORDS.contains(&word)
        || SECRET_PAIRS.iter().any(|(a, b)| {
            word.len() == a.len() + b.len() && word.starts_with(a) && word.ends_with(b)
        })
        || SECRET_ENDINGS
            .iter()
            .any(|end| word.len() > end.len() && word.ends_with(end))
}

/// Whether a name holds any stem of a secret word at all, whatever its case: every name of
/// every keyed request is judged, and most (`model`, `messages`, `role`) hold none, so they
/// are answered without splitting them into words. A name beyond ASCII is split as ever.
fn may_hold_secret_word(name: &str) -> bool {
    const STEMS: &[&[u8]] = &[
        b"token",
        b"secret",
        b"passw",
        b"passphrase",
        b"credential",
        b"apikey",
        b"auth",
        b"key",
    ];
    if !name.is_ascii() {
        return true;
    }
    let bytes = name.as_bytes();
    STEMS.iter().any(|stem| {
        bytes
            .windows(stem.len())
            .any(|w| w.eq_ignore_ascii_case(stem))
    })
}

/// Words that make a name an address or a description of secrets, not a secret: OpenID
/// discovery's `token_endpoint`, `authorization_endpoint`,
/// `token_endpoint_auth_methods_supported`, an `auth_url`.
const NOT_SECRET_WORDS: &[&str] = &[
    "endpoint",
    "url",
    "uri",
    "methods",
    "supported",
    "types",
    "count",
];

/// The secret field names of bodies: the word rule, [`BODY_FIELDS`] and those `extra` adds.
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
        // The hot path: most names are short and plain; fold only when needed.
        let plain = name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        let listed = if plain {
            self.0.iter().any(|n| n == name)
        } else {
            self.0.contains(&folded(name))
        };
        listed || is_secret_name(name)
    }

    /// Whether a form pair or query parameter of this name holds a secret: the body rule, and
    /// an OAuth `code`.
    pub fn is_secret_param(&self, name: &str) -> bool {
        self.is_secret(name) || QUERY_ONLY.iter().any(|q| q.eq_ignore_ascii_case(name))
    }

    /// Replaces the secrets of `value` with [`PLACEHOLDER`]: every string (and number) of a
    /// secret-named field, every string under a secret-named object (`client_secret: {value}`),
    /// and the same inside strings that are JSON themselves (a tool call's `arguments`, a tool
    /// result's text), which keep their layout where they can. Returns the secrets replaced, so
    /// that text holding them elsewhere can lose them too.
    pub fn json(&self, value: &mut serde_json::Value) -> Vec<String> {
        let mut found = Vec::new();
        self.walk(value, &mut found, false);
        found
    }

    fn walk(&self, value: &mut serde_json::Value, found: &mut Vec<String>, names_only: bool) {
        use serde_json::Value;
        match value {
            Value::Object(map) => {
                let oauth_code = map.contains_key("code")
                    && OAUTH_CODE_BESIDE.iter().any(|k| map.contains_key(*k));
                for (name, v) in map.iter_mut() {
                    if NEVER_SECRET_UNDER.contains(&name.as_str()) {
                        continue;
                    }
                    let secret = self.is_secret(name) || (oauth_code && name == "code");
                    if !names_only && secret {
                        self.hide(v, found, true);
                    } else {
                        let names = NAMES_NOT_VALUES_UNDER.contains(&name.as_str());
                        self.walk(v, found, names);
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|v| self.walk(v, found, false)),
            Value::String(s) => {
                if let Some(inner) = self.inside(s, found) {
                    *s = inner;
                }
            }
            _ => {}
        }
    }

    /// A string that is JSON itself, redacted within; `None` when it is not or holds no secret.
    fn inside(&self, s: &str, found: &mut Vec<String>) -> Option<String> {
        if !looks_like_json(s) {
            return None;
        }
        let mut value: serde_json::Value = serde_json::from_str(s).ok()?;
        let mut here = Vec::new();
        self.walk(&mut value, &mut here, false);
        if here.is_empty() {
            return None;
        }
        let out = in_layout(s, &here, &value);
        found.extend(here);
        Some(out)
    }

    /// Everything a secret-named field holds becomes the placeholder: a string or number
    /// directly, the strings of an object or array under it (but its dates and kinds), the
    /// strings of JSON written inside a string.
    fn hide(&self, v: &mut serde_json::Value, found: &mut Vec<String>, direct: bool) {
        use serde_json::Value;
        match v {
            Value::String(s) if s.is_empty() || s == PLACEHOLDER => {}
            Value::String(s) => {
                if looks_like_json(s) {
                    if let Ok(mut inner) = serde_json::from_str::<Value>(s) {
                        let mut here = Vec::new();
                        self.hide(&mut inner, &mut here, false);
                        if !here.is_empty() {
                            *s = in_layout(s, &here, &inner);
                            found.extend(here);
                        }
                        return;
                    }
                }
                found.push(std::mem::replace(s, PLACEHOLDER.into()));
            }
            Value::Number(n) if direct => {
                found.push(n.to_string());
                *v = Value::String(PLACEHOLDER.into());
            }
            Value::Object(map) => {
                for (name, inner) in map.iter_mut() {
                    if !KEPT_UNDER_SECRET.contains(&folded(name).as_str()) {
                        self.hide(inner, found, false);
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|i| self.hide(i, found, false)),
            _ => {}
        }
    }

    /// A `application/x-www-form-urlencoded` body (`grant_type=refresh_token&client_secret=...`)
    /// with the values of its secret-named pairs replaced; `None` when it is no such body or
    /// has no secret. Empty pairs, pairs without `=`, a trailing newline and raw brackets in
    /// values are all still a form.
    pub fn form(&self, text: &str) -> Option<String> {
        let body = text.trim_end_matches(['\r', '\n']);
        let name_ok = |n: &str| {
            !n.is_empty()
                && n.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"_-.%+[]~*".contains(&b))
        };
        let looks_like_form = body.contains('=')
            && !body.contains(char::is_whitespace)
            && body
                .split('&')
                .filter(|p| !p.is_empty())
                .all(|pair| name_ok(pair.split('=').next().unwrap_or("")));
        if !looks_like_form {
            return None;
        }
        let mut changed = false;
        let pairs: Vec<String> = body
            .split('&')
            .map(|pair| {
                let Some((name, value)) = pair.split_once('=') else {
                    return pair.to_string();
                };
                let decoded = percent_encoding::percent_decode_str(&name.replace('+', " "))
                    .decode_utf8_lossy()
                    .into_owned();
                if !value.is_empty() && value != PLACEHOLDER && self.is_secret_param(&decoded) {
                    changed = true;
                    format!("{name}={PLACEHOLDER}")
                } else {
                    pair.to_string()
                }
            })
            .collect();
        changed.then(|| format!("{}{}", pairs.join("&"), &text[body.len()..]))
    }

    /// JSON, form, XML, SSE or other text with its secrets replaced, keeping everything else
    /// as it was written (spacing, key order, escapes); `None` when it holds none. JSON whose
    /// secret cannot be found as written is given back compact.
    pub fn text(&self, text: &str) -> Option<String> {
        if looks_like_json(text) && text.len() <= TEXT_PARSE_LIMIT {
            if let Ok(mut value) = serde_json::from_str::<serde_json::Value>(text) {
                let found = self.json(&mut value);
                return (!found.is_empty()).then(|| in_layout(text, &found, &value));
            }
        }
        if let Some(form) = self.form(text) {
            return Some(form);
        }
        self.loose(text)
    }

    /// Text that does not parse as a whole: SSE events (each `data:` line's JSON, however
    /// spaced), XML elements named as secrets (STS' `<SessionToken>`), and `"name": "value"`
    /// pairs wherever they stand (a body too large to parse, JSON cut short). Reads the text
    /// in one pass per form; no tree is built for the whole.
    pub fn loose(&self, text: &str) -> Option<String> {
        let mut out = std::borrow::Cow::Borrowed(text);
        if out.contains("data:") && out.len() <= TEXT_PARSE_LIMIT {
            let mut changed = false;
            let lines: Vec<String> = out
                .split('\n')
                .map(|line| {
                    let Some(rest) = line.strip_prefix("data:") else {
                        return line.to_string();
                    };
                    let (payload, cr) = match rest.strip_suffix('\r') {
                        Some(p) => (p, "\r"),
                        None => (rest, ""),
                    };
                    let lead = payload.len() - payload.trim_start().len();
                    match self.text(payload.trim_start()) {
                        Some(redacted) => {
                            changed = true;
                            format!("data:{}{redacted}{cr}", &payload[..lead])
                        }
                        None => line.to_string(),
                    }
                })
                .collect();
            if changed {
                out = std::borrow::Cow::Owned(lines.join("\n"));
            }
        }
        if out.contains("</") {
            let replaced = xml_elements().replace_all(&out, |c: &regex::Captures<'_>| {
                let (open, close, value) = (&c[1], &c[3], &c[2]);
                let name = open.rsplit(':').next().unwrap_or(open);
                if open == close
                    && !value.trim().is_empty()
                    && value != PLACEHOLDER
                    && self.is_secret(name)
                {
                    c[0].replace(&format!(">{value}<"), &format!(">{PLACEHOLDER}<"))
                } else {
                    c[0].to_string()
                }
            });
            if let std::borrow::Cow::Owned(o) = replaced {
                out = std::borrow::Cow::Owned(o);
            }
        }
        if out.contains('"') {
            let replaced = json_pairs().replace_all(&out, |c: &regex::Captures<'_>| {
                let name = serde_json::from_str::<String>(&format!("\"{}\"", &c[1]))
                    .unwrap_or_else(|_| c[1].to_string());
                let value = &c[2];
                if !value.is_empty() && value != PLACEHOLDER && self.is_secret(&name) {
                    let at = c[0].len() - value.len() - 1;
                    format!("{}{PLACEHOLDER}\"", &c[0][..at])
                } else {
                    c[0].to_string()
                }
            });
            if let std::borrow::Cow::Owned(o) = replaced {
                out = std::borrow::Cow::Owned(o);
            }
        }
        match out {
            std::borrow::Cow::Owned(o) if o != text => Some(o),
            _ => None,
        }
    }
}

/// Text longer than this is read by [`BodyFields::loose`] alone, never parsed whole.
pub const TEXT_PARSE_LIMIT: usize = 4 << 20;

fn looks_like_json(s: &str) -> bool {
    let t = s.trim_start();
    (t.starts_with('{') || t.starts_with('[')) && s.trim_end().ends_with(['}', ']'])
}

/// `text` with each of `found` (as JSON strings) replaced by the placeholder, in the layout it
/// was written; `value` compact when a secret cannot be found as written (escaped otherwise).
fn in_layout(text: &str, found: &[String], value: &serde_json::Value) -> String {
    let mut out = text.to_string();
    for secret in found {
        let written = serde_json::to_string(secret).expect("a string serialises");
        if !out.contains(&written) {
            return value.to_string();
        }
        out = out.replace(&written, &format!("\"{PLACEHOLDER}\""));
    }
    out
}

fn xml_elements() -> &'static regex::Regex {
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    RE.get_or_init(|| {
        regex::Regex::new(
            r"<([A-Za-z_][\w.:-]{0,100})(?:\s[^<>]*)?>([^<]*)</([A-Za-z_][\w.:-]{0,100})\s*>",
        )
        .expect("valid pattern")
    })
}

fn json_pairs() -> &'static regex::Regex {
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    RE.get_or_init(|| {
        regex::Regex::new(r#""((?:[^"\\\n]|\\.){1,200})"\s*:\s*"((?:[^"\\\n]|\\.)*)""#)
            .expect("valid pattern")
    })
}

/// Whether a query parameter's name (as sent, maybe percent-encoded) names a secret.
pub fn is_secret_param(raw_name: &str) -> bool {
    is_one_of(raw_name, crate::secret_params())
}

/// Whether a query parameter's name (as sent, maybe percent-encoded: `k%65y`) is one of
/// `secrets`, whatever its case, or is secret by its words ([`is_secret_name`]) or an OAuth
/// `code`: the one check that both keying and redaction make.
pub fn is_one_of(raw_name: &str, secrets: &[&str]) -> bool {
    let name = percent_encoding::percent_decode_str(raw_name).decode_utf8_lossy();
    let name = name.trim();
    secrets.iter().any(|s| s.eq_ignore_ascii_case(name))
        || is_secret_name(name)
        || QUERY_ONLY.iter().any(|q| q.eq_ignore_ascii_case(name))
        || is_signature(name)
}

/// A signed URL's signature, by any vendor's name for it (`X-Goog-Signature` of Google Cloud
/// Storage, `Signature` of S3's older presigning, `sig` of Azure's SAS): whoever holds the URL
/// holds the access it grants. Only as a query parameter: a body's `signature` (Anthropic's
/// thinking blocks) is content the client sends back.
fn is_signature(name: &str) -> bool {
    // Every query pair of every keyed request asks: most end in neither, answered unsplit.
    let ends_in = |end: &str| {
        name.len() >= end.len()
            && name.is_char_boundary(name.len() - end.len())
            && name[name.len() - end.len()..].eq_ignore_ascii_case(end)
    };
    (ends_in("sig") || ends_in("signature"))
        && words(name)
            .last()
            .is_some_and(|w| w == "signature" || w == "sig")
}

/// Whether a header carries a key or a credential.
pub fn is_secret_header(name: &str) -> bool {
    crate::secret_headers()
        .iter()
        .any(|s| s.eq_ignore_ascii_case(name))
        || name.eq_ignore_ascii_case("x-amz-security-token")
        // Any tool's or gateway's own (`X-Vault-Token`, `x-service-secret`): by its words.
        || is_secret_name(name)
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
    let head = match path_secrets(&userinfo(head)) {
        Some(masked) => Cow::Owned(masked),
        None => userinfo(head),
    };
    let q = q.map(query);
    // A fragment of pairs carries tokens too: OAuth's implicit flow answers
    // `#access_token=...&token_type=bearer`.
    let fragment = fragment.map(|f| match f.contains('=') {
        true => query(f),
        false => Cow::Borrowed(f),
    });
    if matches!(head, Cow::Borrowed(_))
        && q.as_ref().is_none_or(|q| matches!(q, Cow::Borrowed(_)))
        && fragment
            .as_ref()
            .is_none_or(|f| matches!(f, Cow::Borrowed(_)))
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
        out.push_str(&f);
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

/// A path with the credentials APIs put in paths masked, by segment: a Telegram bot's
/// `/bot<id>:<token>/`, a Slack webhook's `/services/T…/B…/<secret>`. `None` when it has none.
pub fn path_secrets(path: &str) -> Option<String> {
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let re = RE.get_or_init(|| {
        regex::Regex::new(
            r"(/bot\d{5,16}:|/services/T[A-Z0-9]{6,}/B[A-Z0-9]{6,}/)([A-Za-z0-9_\-]{16,})",
        )
        .expect("valid pattern")
    });
    re.is_match(path)
        .then(|| re.replace_all(path, format!("${{1}}{MASK}")).into_owned())
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
            (
                "http://localhost:8080/cb#access_token=ya29-x&token_type=bearer&expires_in=3599",
                "http://localhost:8080/cb#access_token=***&token_type=bearer&expires_in=3599",
            ),
            (
                "http://localhost:8080/cb?code=4/0Aean-live&state=s1",
                "http://localhost:8080/cb?code=***&state=s1",
            ),
            ("no url at all", "no url at all"),
            (
                "/bot123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsawQ/sendMessage",
                "/bot123456789:***/sendMessage",
            ),
            (
                "https://hooks.slack.com/services/T0000000/B0000000/abcdefghijklmnopqrstuvwx",
                "https://hooks.slack.com/services/T0000000/B0000000/***",
            ),
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

    /// Names are judged by their words, with a short list of names that only look secret.
    #[test]
    fn names_are_secret_by_their_words() {
        for name in [
            "api_token",
            "auth_token",
            "bearer_token",
            "secret_key",
            "client_token",
            "private_token",
            "accessKey",
            "openai_api_key",
            "credential",
            "x-goog-api-key",
            "GITHUB_TOKEN",
            "SecretAccessKey",
            "SessionToken",
            "APIKey",
            "db.password",
            "auth",
            // Run together, as upper-case variables and some SDKs write them.
            "ACCESSKEY",
            "SESSIONTOKEN",
            "BEARERTOKEN",
            "clientsecret",
            "DBPASSWORD",
            "PRIVATEKEY",
        ] {
            assert!(is_secret_name(name), "{name}");
        }
        for name in [
            "max_tokens",
            "max_completion_tokens",
            "input_tokens",
            "output_tokens",
            "total_tokens",
            "prompt_tokens",
            "completion_tokens",
            "cached_tokens",
            "reasoning_tokens",
            "tokenizer",
            "token_count",
            "tokens",
            "author",
            "authors",
            "token_type",
            "next_page_token",
            "monkey",
            "keyboard",
            "NEXTPAGETOKEN",
            "MAXTOKENS",
            "TOKENIZER",
        ] {
            assert!(!is_secret_name(name), "{name}");
        }
        for q in [
            "api_token",
            "auth",
            "access-token",
            "x-api-key",
            "code",
            "X-Goog-Signature",
            "x-goog-signature",
            "Signature",
            "sig",
        ] {
            assert!(is_one_of(q, &[]), "{q}");
        }
        for q in ["signature_version", "design", "signatures_count"] {
            assert!(!is_one_of(q, &[]), "{q}");
        }
    }

    /// JSON written inside strings, secret-named objects and environment maps lose their
    /// secrets; a schema's `password` property keeps its schema.
    #[test]
    fn secrets_inside_strings_and_under_secret_objects() {
        let fields = BodyFields::default();
        let mut v = serde_json::json!({
            "messages": [
                {"role": "assistant", "tool_calls": [{"function": {"name": "login",
                    "arguments": "{\"user\": \"ann\", \"password\": \"hunter2-secret\"}"}}]},
                {"role": "tool", "content": "{\"result\": {\"access_token\": \"tok-in-tool\"}}"},
                {"role": "user", "content": "[{\"text\": \"{\\\"api_key\\\": \\\"deep-key\\\"}\"}]"}
            ],
            "client_secret": {"value": "ek_live_1", "expires_at": 17},
            "SecretString": "{\"username\": \"u\", \"password\": \"p-1\"}",
            "env": {"GITHUB_TOKEN": "gh-env", "PATH": "/bin"},
            "parameters": {"properties": {"password": {"type": "string", "description": "d"}}}
        });
        let found = fields.json(&mut v);
        let text = v.to_string();
        for secret in [
            "hunter2-secret",
            "tok-in-tool",
            "deep-key",
            "ek_live_1",
            "p-1",
            "gh-env",
        ] {
            assert!(!text.contains(secret), "{secret} in {text}");
            assert!(found.iter().any(|f| f == secret), "{secret} not found");
        }
        assert_eq!(v["client_secret"]["expires_at"], 17);
        assert_eq!(v["env"]["PATH"], "/bin");
        assert_eq!(
            v["parameters"]["properties"]["password"]["description"],
            "d"
        );
        let arguments = v["messages"][0]["tool_calls"][0]["function"]["arguments"]
            .as_str()
            .unwrap();
        assert_eq!(
            arguments,
            format!("{{\"user\": \"ann\", \"password\": \"{PLACEHOLDER}\"}}")
        );
    }

    /// An OAuth authorization code sent as JSON (beside its `grant_type`, `redirect_uri` or
    /// `code_verifier`) is a secret; any other `code` (an error's, a tool's) is not.
    #[test]
    fn an_oauth_code_in_json_is_secret_and_other_codes_are_not() {
        let fields = BodyFields::default();
        let mut v = serde_json::json!({
            "grant_type": "authorization_code",
            "code": "4/0AeanS0b-live-code",
            "redirect_uri": "http://localhost:8080/cb",
            "tools": [{"type": "code_interpreter", "code": "print(1)"}],
            "error": {"code": "rate_limit_exceeded"}
        });
        let found = fields.json(&mut v);
        assert_eq!(found, ["4/0AeanS0b-live-code"]);
        assert_eq!(v["code"], PLACEHOLDER);
        assert_eq!(v["tools"][0]["code"], "print(1)");
        assert_eq!(v["error"]["code"], "rate_limit_exceeded");
        let mut pkce = serde_json::json!({"code": "abc-live-code-2", "code_verifier": "v-123"});
        fields.json(&mut pkce);
        assert_eq!(pkce["code"], PLACEHOLDER);
    }

    #[test]
    fn secret_headers_are_masked() {
        assert_eq!(header("Authorization", "Bearer sk"), MASK);
        assert_eq!(header("x-goog-api-key", "k"), MASK);
        for name in ["X-Vault-Token", "x-service-secret", "X-Custom-Api-Key"] {
            assert_eq!(header(name, "v"), MASK, "{name}");
        }
        for name in [
            "content-type",
            "x-ratelimit-remaining-tokens",
            "anthropic-ratelimit-tokens-remaining",
            "idempotency-key",
            "www-authenticate",
            "x-goog-api-client",
        ] {
            assert_eq!(header(name, "v"), "v", "{name}");
        }
    }
}
