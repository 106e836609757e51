//! From an HTTP request to what is recorded and to its key. Normalisation (`[match] ignore` and
//! `[match] replace`) is applied once, here, so the key and the recorded request always agree and
//! a key can be recomputed from a cassette alone.

use crate::body::{json_within_depth, multipart_boundary, parse_multipart, Body, BodyFields};
use crate::{Error, TestId};
use bytes::Bytes;
use regex::Regex;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::fmt;

/// SHA-256 of a request's canonical form, as 64 lowercase hex digits.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Key(String);

/// A SHA-256 digest as 64 lower-case hex digits, written into one buffer: `hex::encode` pushes
/// char by char, about a hundredth of a replayed request's time.
fn hex_digest(digest: &[u8]) -> String {
    let mut out = vec![0u8; digest.len() * 2];
    hex::encode_to_slice(digest, &mut out).expect("twice the digest's length");
    String::from_utf8(out).expect("hex digits are ASCII")
}

impl Key {
    /// The key of a request as recorded (already normalised): method, path, query and body,
    /// with object keys sorted so that map order never matters.
    pub fn of(request: &RecordedRequest) -> Key {
        let mut canonical = Vec::with_capacity(256);
        canonical.extend_from_slice(request.method.as_bytes());
        canonical.push(b'\n');
        canonical.extend_from_slice(request.path.as_bytes());
        canonical.push(b'\n');
        canonical.extend_from_slice(request.query.as_deref().unwrap_or("").as_bytes());
        canonical.push(b'\n');
        request.body.write_key(&mut canonical);
        // Only sessions say so: every key of a plain request stays as it was.
        if request.websocket {
            canonical.extend_from_slice(b"\nwebsocket");
        }
        Key(hex_digest(&Sha256::digest(&canonical)))
    }

    /// The key as 64 hex digits.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A request as stored in a cassette: normalised, with no secret in it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawRequest", into = "RawRequest")]
pub struct RecordedRequest {
    /// The HTTP method.
    pub method: String,
    /// The path as the provider's API has it.
    pub path: String,
    /// The query without secrets, its pairs sorted.
    pub query: Option<String>,
    /// The body, normalised by the `[match]` rules.
    pub body: Body,
    /// An upgrade to a WebSocket session.
    pub websocket: bool,
}

#[derive(Serialize, Deserialize)]
struct RawRequest {
    method: String,
    path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    query: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    websocket: bool,
    #[serde(flatten)]
    body: BodyFields,
}

impl TryFrom<RawRequest> for RecordedRequest {
    type Error = String;
    fn try_from(r: RawRequest) -> Result<Self, String> {
        Ok(RecordedRequest {
            method: r.method,
            path: r.path,
            query: r.query,
            body: r.body.try_into()?,
            websocket: r.websocket,
        })
    }
}

impl From<RecordedRequest> for RawRequest {
    fn from(r: RecordedRequest) -> RawRequest {
        RawRequest {
            method: r.method,
            path: r.path,
            query: r.query,
            websocket: r.websocket,
            body: r.body.into(),
        }
    }
}

impl RecordedRequest {
    /// The body as one JSON value for comparison, whatever its form.
    pub fn body_value(&self) -> Value {
        self.body.to_value()
    }

    /// The whole request as one JSON value, for naming the fields two requests differ in.
    pub fn to_value(&self) -> Value {
        let mut v = serde_json::json!({
            "method": self.method,
            "path": self.path,
            "query": self.query,
            "body": self.body_value(),
        });
        if self.websocket {
            v["websocket"] = Value::Bool(true);
        }
        v
    }

    /// The JSON body, if the body is JSON.
    pub fn json(&self) -> Option<&Value> {
        match &self.body {
            Body::Json { value, .. } => Some(value),
            _ => None,
        }
    }

    /// A text field of a multipart upload (`model`, `prompt`).
    fn part_text(&self, name: &str) -> Option<String> {
        let Body::Parts(parts) = &self.body else {
            return None;
        };
        parts
            .iter()
            .find(|p| p.name == name)
            .and_then(|p| match &p.body {
                Body::Text(t) => Some(t.clone()),
                _ => None,
            })
    }

    /// The model a request asks for, in any family's shape (a multipart upload's `model` field
    /// included).
    pub fn model(&self) -> Option<String> {
        providers::model(&self.path, self.json()).or_else(|| self.part_text("model"))
    }

    /// The text of the last user message, for error messages and reports.
    pub fn last_user_text(&self) -> Option<String> {
        match self.json() {
            Some(body) => providers::prompt(body),
            None => self.part_text("prompt"),
        }
    }
}

/// One `[match] replace` rule: a regex and its replacement (`$1` refers to groups).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplaceRule {
    /// The regex.
    pub pattern: String,
    #[serde(alias = "with")]
    /// What a match becomes.
    pub replacement: String,
    /// The tests it applies to, by id or glob; none: every test.
    #[serde(default)]
    pub tests: Vec<String>,
}

/// One `[match] ignore` rule: a JSON pointer, alone (every test) or with the tests it applies
/// to (`{ pointer = "/x", tests = ["crate$t"] }`).
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum IgnoreRule {
    /// A pointer for every test.
    Pointer(String),
    /// A pointer for the tests named.
    Scoped {
        /// The pointer.
        pointer: String,
        /// The tests, by id or glob; none: every test.
        #[serde(default)]
        tests: Vec<String>,
    },
}

impl From<&str> for IgnoreRule {
    fn from(pointer: &str) -> Self {
        IgnoreRule::Pointer(pointer.to_string())
    }
}

impl IgnoreRule {
    fn parts(&self) -> (&str, &[String]) {
        match self {
            IgnoreRule::Pointer(p) => (p, &[]),
            IgnoreRule::Scoped { pointer, tests } => (pointer, tests),
        }
    }
}

/// The tests a rule applies to: each an exact test id or a glob over ids (`*` takes anything);
/// none: every test.
#[derive(Debug, Default)]
struct Scope(Vec<(String, Option<crate::glob::GlobMatcher>)>);

impl Scope {
    fn new(tests: &[String], rule: impl Fn() -> String) -> Result<Scope, Error> {
        tests
            .iter()
            .map(|t| {
                // An id with glob characters in it (pytest's `test_x[1-2]`) still names itself.
                let glob = crate::glob::glob(t, crate::glob::Separator::Any).ok();
                if t.is_empty() {
                    return Err(Error::BadRule {
                        rule: rule(),
                        reason: "an empty test name in `tests`".into(),
                    });
                }
                Ok((t.clone(), glob))
            })
            .collect::<Result<_, _>>()
            .map(Scope)
    }

    fn takes(&self, test: Option<&TestId>) -> bool {
        self.0.is_empty()
            || test.is_some_and(|t| {
                self.0.iter().any(|(name, glob)| {
                    name == t.as_str() || glob.as_ref().is_some_and(|g| g.is_match(t.as_str()))
                })
            })
    }
}

/// The most a `[match] replace` pattern may take once compiled. Every string of every request
/// runs through it, so a pattern with a large repetition (`(a{1,1000}){1,1000}`) would cost
/// seconds per request; ordinary patterns (dates, ids, `\w+`) take a few KiB.
pub const REGEX_SIZE_LIMIT: usize = 256 << 10;

/// The most states a `[match] replace` pattern's automaton may have. Counted repetitions
/// multiply (`(?:(?:a{20}){20}){20}` is 8,000 states), and keying a 256 KB prompt under that
/// one took 18 s: past what its lazy DFA's cache holds, the regex crate falls back to an
/// engine whose cost per byte grows with the states.
pub const MAX_PATTERN_STATES: usize = 1_000;

/// The lazy DFA's cache per pattern: enough for the worst patterns under
/// [`MAX_PATTERN_STATES`] (`a{990}b` on a run of `a`s) to key 1 MiB in about 10 ms
/// (`benches/keying.rs`); at regex's default of 2 MiB, or at 256 KiB, some took 6 to 11 s
/// once their cache was warm. Only a pattern that needs it fills it.
pub const REGEX_DFA_CACHE: usize = 4 << 20;

/// The request normalisation configured in `llmreplay.toml`, compiled once at start-up. A
/// rule may name its tests: [`Normalizer::for_test`] gives the rules one test's requests go
/// through.
#[derive(Debug, Default)]
pub struct Normalizer {
    ignore: Vec<(Vec<String>, Scope)>,
    replace: Vec<Replacer>,
    /// Secret-named body fields, whose values become a placeholder before keying.
    secrets: providers::redact::BodyFields,
    /// The same redaction by name, with credentials by value and shape: what keying and the
    /// store both apply, so that a request keys as it is stored, whatever its live secrets.
    guard: crate::secrets::Guard,
}

impl Normalizer {
    /// Fails on the first bad rule, naming it, so a typo shows at start-up and not per request.
    pub fn new(ignore: &[IgnoreRule], replace: &[ReplaceRule]) -> Result<Self, Error> {
        let ignore = ignore
            .iter()
            .map(|rule| {
                let (pointer, tests) = rule.parts();
                let scope = Scope::new(tests, || format!("[match] ignore {pointer:?}"))?;
                Ok((parse_pointer(pointer)?, scope))
            })
            .collect::<Result<_, Error>>()?;
        let replace = replace
            .iter()
            .map(|r| {
                let states = regex_automata::nfa::thompson::NFA::new(&r.pattern)
                    .map(|nfa| nfa.states().len())
                    .unwrap_or(0);
                if states > MAX_PATTERN_STATES {
                    return Err(Error::BadRule {
                        rule: format!("[match] replace pattern {:?}", r.pattern),
                        reason: format!(
                            "it compiles to {states} states, over the {MAX_PATTERN_STATES} a pattern may have: counted repetitions multiply, and a pattern this large can take seconds on one request. Use smaller counts, or + and * in their place"
                        ),
                    });
                }
                let scope = Scope::new(&r.tests, || format!("[match] replace pattern {:?}", r.pattern))?;
                regex::RegexBuilder::new(&r.pattern)
                    .size_limit(REGEX_SIZE_LIMIT)
                    .dfa_size_limit(REGEX_DFA_CACHE)
                    .build()
                    .map(|re| Replacer {
                        re,
                        numbered: r.replacement.contains(NUMBER),
                        with: r.replacement.clone(),
                        scope,
                    })
                    .map_err(|e| Error::BadRule {
                        rule: format!("[match] replace pattern {:?}", r.pattern),
                        reason: e.to_string(),
                    })
            })
            .collect::<Result<_, _>>()?;
        Ok(Normalizer {
            ignore,
            replace,
            secrets: Default::default(),
            guard: Default::default(),
        })
    }

    /// Adds `[redact] body_fields` to the secret field names of bodies.
    pub fn with_body_fields(mut self, extra: &[String]) -> Self {
        self.secrets = providers::redact::BodyFields::with(extra);
        self.guard =
            crate::secrets::Guard::new(self.secrets.clone(), self.guard.scrubber().clone());
        self
    }

    /// Replaces these credentials (name, value) wherever they stand, beside secret shapes.
    pub fn with_secret_values(mut self, values: Vec<(String, String)>) -> Self {
        self.guard =
            crate::secrets::Guard::new(self.secrets.clone(), crate::secrets::Scrubber::new(values));
        self
    }

    /// The redaction the store applies to what it records: the same as keying's.
    pub fn guard(&self) -> &crate::secrets::Guard {
        &self.guard
    }

    /// The secret field names of bodies, for answers and frames as for requests.
    pub fn body_fields(&self) -> &providers::redact::BodyFields {
        &self.secrets
    }

    /// The rules `test`'s requests go through: those that name no test, and those that name it.
    pub fn for_test<'a>(&'a self, test: &'a TestId) -> Rules<'a> {
        Rules {
            normalizer: self,
            test: Some(test),
        }
    }

    /// No rule at all, only the built-in secret handling: for requests built outside any run's
    /// configuration (fixtures, tests).
    pub fn plain() -> Rules<'static> {
        static PLAIN: std::sync::OnceLock<Normalizer> = std::sync::OnceLock::new();
        Rules {
            normalizer: PLAIN.get_or_init(Normalizer::default),
            test: None,
        }
    }
}

/// The rules of a [`Normalizer`] that apply to one test's requests.
#[derive(Clone, Copy, Debug)]
pub struct Rules<'a> {
    normalizer: &'a Normalizer,
    test: Option<&'a TestId>,
}

impl Rules<'_> {
    fn ignored(&self) -> impl Iterator<Item = &Vec<String>> {
        self.normalizer
            .ignore
            .iter()
            .filter(|(_, scope)| scope.takes(self.test))
            .map(|(pointer, _)| pointer)
    }

    /// The request as it will be keyed and recorded: secret query parameters dropped (their
    /// names percent-decoded first), the rest sorted, ignored JSON fields removed and replace
    /// rules applied to every string; a multipart upload split into its parts.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        query: Option<&str>,
        content_type: Option<&str>,
        body: &[u8],
        secret_params: &[&str],
    ) -> RecordedRequest {
        self.request_of(
            method,
            path,
            query,
            (content_type, None),
            body,
            None,
            secret_params,
        )
    }

    /// [`Normalizer::request`] for a body the caller holds as `Bytes`: a body kept as its bytes
    /// (over [`crate::body::TREE_LIMIT`]) shares them instead of copying. With the request's
    /// `content-encoding`, a compressed body is read decoded for secrets.
    pub fn request_shared(
        &self,
        method: &str,
        path: &str,
        query: Option<&str>,
        (content_type, content_encoding): (Option<&str>, Option<&str>),
        body: &Bytes,
        secret_params: &[&str],
    ) -> RecordedRequest {
        self.request_of(
            method,
            path,
            query,
            (content_type, content_encoding),
            body,
            Some(body),
            secret_params,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn request_of(
        &self,
        method: &str,
        path_in: &str,
        query: Option<&str>,
        (content_type, content_encoding): (Option<&str>, Option<&str>),
        body: &[u8],
        shared: Option<&Bytes>,
        secret_params: &[&str],
    ) -> RecordedRequest {
        let n = &mut Numbering::default();
        // Path, query, then body: the order numbered rules count in, here and on re-keying.
        let scrub = self.normalizer.guard.scrubber();
        let path = scrub.text(path_in);
        let path = self.replace_in(path.as_deref().unwrap_or(path_in), n);
        let query = query.and_then(|q| {
            let mut pairs: Vec<&str> = q
                .split('&')
                .filter(|pair| {
                    let raw = pair.split('=').next().unwrap_or("");
                    !pair.is_empty() && !providers::redact::is_one_of(raw, secret_params)
                })
                .collect();
            pairs.sort_unstable();
            let joined = pairs.join("&");
            let joined = scrub.text(&joined).unwrap_or(joined);
            (!pairs.is_empty()).then(|| self.replace_in(&joined, n))
        });
        RecordedRequest {
            method: method.to_string(),
            path,
            query,
            body: self.body((content_type, content_encoding), body, shared, n),
            websocket: false,
        }
    }

    /// The upgrade request of a WebSocket session, keyed by its path and query alone.
    pub fn session(
        &self,
        path: &str,
        query: Option<&str>,
        secret_params: &[&str],
    ) -> RecordedRequest {
        RecordedRequest {
            websocket: true,
            ..self.request("GET", path, query, None, b"", secret_params)
        }
    }

    /// A client frame as replay compares it: JSON with `[match] ignore` and `replace` applied.
    pub fn frame(&self, frame: &Value) -> Value {
        let mut value = frame.clone();
        self.normalizer.secrets.json(&mut value);
        self.normalizer.guard.scrubber().json(&mut value);
        for path in self.ignored() {
            remove_at(&mut value, path);
        }
        if !self.normalizer.replace.is_empty() {
            self.replace_strings(&mut value, &mut Numbering::default());
        }
        value
    }

    /// A recorded request under these rules, as if it came in now: for re-keying cassettes
    /// after `[match]` rules were added. Rules already applied change nothing again.
    pub fn renormalize(&self, request: &RecordedRequest) -> RecordedRequest {
        let n = &mut Numbering::default();
        let path = self.replace_in(&request.path, n);
        let query = request.query.as_ref().map(|q| self.replace_in(q, n));
        let body = match &request.body {
            Body::Json { value, layout } => {
                let mut value = value.clone();
                for pointer in self.ignored() {
                    remove_at(&mut value, pointer);
                }
                self.replace_strings(&mut value, n);
                Body::Json {
                    value,
                    layout: *layout,
                }
            }
            Body::Text(t) => Body::Text(self.replace_in(t, n)),
            Body::Parts(parts) => {
                let mut parts = parts.clone();
                for p in &mut parts {
                    if let Body::Text(t) = &mut p.body {
                        *t = self.replace_in(t, n);
                    }
                }
                Body::Parts(parts)
            }
            other => other.clone(),
        };
        RecordedRequest {
            method: request.method.clone(),
            path,
            query,
            body,
            websocket: request.websocket,
        }
    }

    fn body(
        &self,
        (content_type, content_encoding): (Option<&str>, Option<&str>),
        body: &[u8],
        shared: Option<&Bytes>,
        n: &mut Numbering,
    ) -> Body {
        if body.is_empty() {
            return Body::Empty;
        }
        // A compressed upload (gzip, deflate, brotli, as its `content-encoding` says) is read
        // decoded for secrets, and kept decoded once one is found.
        let encoding = content_encoding
            .map(str::trim)
            .filter(|e| !e.is_empty() && !e.eq_ignore_ascii_case("identity"));
        if let Some(encoding) = encoding {
            let bytes = shared
                .cloned()
                .unwrap_or_else(|| Bytes::copy_from_slice(body));
            let mut kept = Body::binary(bytes);
            self.normalizer
                .guard
                .request_encoded(&mut kept, Some(&encoding.to_ascii_lowercase()));
            return kept;
        }
        if let Some(mut parts) = content_type
            .and_then(multipart_boundary)
            .and_then(|b| parse_multipart(body, b))
        {
            for p in &mut parts {
                if let Body::Text(t) = &mut p.body {
                    *t = match self.normalizer.secrets.is_secret(&p.name) {
                        true => providers::redact::PLACEHOLDER.to_string(),
                        false => {
                            self.replace_in(&self.normalizer.guard.plain(t).unwrap_or(t.clone()), n)
                        }
                    };
                }
            }
            return Body::Parts(parts);
        }
        // Parsed, a large body would take many times its size (40 MB of numbers, 4 GB of
        // tree): past the limit it is kept, and keyed, as its bytes; `[match]` rules, which
        // work on parsed values, leave it as it is.
        if body.len() > crate::body::TREE_LIMIT {
            let bytes = shared
                .cloned()
                .unwrap_or_else(|| Bytes::copy_from_slice(body));
            let mut kept = Body::binary(bytes);
            self.normalizer.guard.request(&mut kept);
            return kept;
        }
        match json_within_depth(body) {
            // A bare `null` would read back as "no body"; keep it as text.
            Some(Value::Null) => Body::Text("null".into()),
            Some(mut value) => {
                // A secret sent by name is a secret wherever it turns up next: an answer
                // that echoes it loses it too.
                for found in self.normalizer.secrets.json(&mut value) {
                    self.normalizer
                        .guard
                        .scrubber()
                        .learn("a secret-named field", &found);
                }
                if std::str::from_utf8(body)
                    .is_ok_and(|raw| self.normalizer.guard.scrubber().holds(raw))
                {
                    self.normalizer.guard.scrubber().json(&mut value);
                }
                for pointer in self.ignored() {
                    remove_at(&mut value, pointer);
                }
                if !self.normalizer.replace.is_empty() {
                    self.replace_strings(&mut value, n);
                }
                Body::Json {
                    value,
                    layout: None,
                }
            }
            None => match std::str::from_utf8(body) {
                Ok(text) => match self.normalizer.guard.plain(text) {
                    Some(redacted) => Body::Text(self.replace_in(&redacted, n)),
                    None => Body::Text(self.replace_in(text, n)),
                },
                Err(_) => {
                    // Compressed (a gzip upload): kept decoded once a secret is found inside.
                    let mut kept = Body::binary(Bytes::copy_from_slice(body));
                    self.normalizer.guard.request(&mut kept);
                    kept
                }
            },
        }
    }

    fn replace_in(&self, s: &str, n: &mut Numbering) -> String {
        let mut out = s.to_string();
        for (i, r) in self.normalizer.replace.iter().enumerate() {
            if !r.scope.takes(self.test) || !r.re.is_match(&out) {
                continue;
            }
            out = match r.numbered {
                false => r.re.replace_all(&out, r.with.as_str()).into_owned(),
                true => {
                    let seen = n.of(i);
                    r.re.replace_all(&out, |caps: &regex::Captures<'_>| {
                        let next = seen.len() + 1;
                        let k = *seen.entry(caps[0].to_string()).or_insert(next);
                        let mut with = String::new();
                        caps.expand(&r.with, &mut with);
                        with.replace(NUMBER, &k.to_string())
                    })
                    .into_owned()
                }
            };
        }
        out
    }

    fn replace_strings(&self, value: &mut Value, n: &mut Numbering) {
        match value {
            Value::String(s) => *s = self.replace_in(s, n),
            Value::Array(items) => items.iter_mut().for_each(|v| self.replace_strings(v, n)),
            Value::Object(map) => map.values_mut().for_each(|v| self.replace_strings(v, n)),
            _ => {}
        }
    }
}

/// In a replacement, the number of the match among the distinct matches of its request.
const NUMBER: &str = "{n}";

/// One compiled `[match] replace` rule.
#[derive(Debug)]
struct Replacer {
    re: Regex,
    with: String,
    /// `{n}` in `with`: each distinct match of a request gets its own number, in the order
    /// they come, so an id a tool minted keys the same in every run and two ids stay apart.
    numbered: bool,
    /// The tests it applies to.
    scope: Scope,
}

/// The distinct matches of numbered rules in one request, per rule.
#[derive(Default)]
struct Numbering(std::collections::HashMap<usize, std::collections::HashMap<String, usize>>);

impl Numbering {
    fn of(&mut self, rule: usize) -> &mut std::collections::HashMap<String, usize> {
        self.0.entry(rule).or_default()
    }
}

/// RFC 6901 pointer, plus `*` for "every element or member", e.g. `/messages/*/timestamp`.
fn parse_pointer(pointer: &str) -> Result<Vec<String>, Error> {
    crate::pointer::parse(pointer).map_err(|reason| Error::BadRule {
        rule: format!("[match] ignore {pointer:?}"),
        reason: reason.to_string(),
    })
}

fn remove_at(value: &mut Value, path: &[String]) {
    let Some((head, rest)) = path.split_first() else {
        return;
    };
    match value {
        Value::Object(map) if rest.is_empty() => {
            if head == "*" {
                map.clear();
            } else {
                map.shift_remove(head);
            }
        }
        Value::Object(map) => {
            if head == "*" {
                map.values_mut().for_each(|v| remove_at(v, rest));
            } else if let Some(v) = map.get_mut(head) {
                remove_at(v, rest);
            }
        }
        Value::Array(items) => {
            if head == "*" {
                if rest.is_empty() {
                    items.clear();
                } else {
                    items.iter_mut().for_each(|v| remove_at(v, rest));
                }
            } else if let Ok(i) = head.parse::<usize>() {
                if rest.is_empty() {
                    if i < items.len() {
                        items.remove(i);
                    }
                } else if let Some(v) = items.get_mut(i) {
                    remove_at(v, rest);
                }
            }
        }
        _ => {}
    }
}

/// JSON pointers of the leaves where `a` and `b` differ, in document order.
pub fn differing_fields(a: &Value, b: &Value) -> Vec<String> {
    let mut out = Vec::new();
    diff_into(a, b, &mut String::new(), &mut out);
    out
}

fn diff_into(a: &Value, b: &Value, at: &mut String, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for (k, v) in x {
                let len = at.len();
                at.push('/');
                at.push_str(&crate::pointer::escape(k));
                match y.get(k) {
                    Some(w) => diff_into(v, w, at, out),
                    None => out.push(at.clone()),
                }
                at.truncate(len);
            }
            for k in y.keys().filter(|k| !x.contains_key(*k)) {
                out.push(format!("{at}/{}", crate::pointer::escape(k)));
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            for i in 0..x.len().max(y.len()) {
                let len = at.len();
                at.push('/');
                at.push_str(&i.to_string());
                match (x.get(i), y.get(i)) {
                    (Some(v), Some(w)) => diff_into(v, w, at, out),
                    _ => out.push(at.clone()),
                }
                at.truncate(len);
            }
        }
        _ if a != b => out.push(if at.is_empty() {
            "/".into()
        } else {
            at.clone()
        }),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// The rules as test `t` gets them (leaked: a test's rules live as long as the test).
    fn norm(ignore: &[&str], replace: &[(&str, &str)]) -> Rules<'static> {
        let ignore: Vec<IgnoreRule> = ignore.iter().map(|s| IgnoreRule::from(*s)).collect();
        let replace: Vec<ReplaceRule> = replace
            .iter()
            .map(|(p, w)| ReplaceRule {
                pattern: p.to_string(),
                replacement: w.to_string(),
                tests: vec![],
            })
            .collect();
        let n: &'static Normalizer =
            Box::leak(Box::new(Normalizer::new(&ignore, &replace).unwrap()));
        n.for_test(Box::leak(Box::new(TestId::new("t"))))
    }

    /// A rule that names its tests (by id, or glob) touches their requests and no other
    /// test's; a rule that names none touches every test's.
    #[test]
    fn a_rule_applies_to_the_tests_it_names() {
        let rule = |tests: &[&str]| ReplaceRule {
            pattern: r"\d{4}-\d{2}-\d{2}T[\d:]+Z".into(),
            replacement: "<TIME>".into(),
            tests: tests.iter().map(|t| t.to_string()).collect(),
        };
        let ignore = IgnoreRule::Scoped {
            pointer: "/seed".into(),
            tests: vec!["c$one".into()],
        };
        let n = Normalizer::new(&[ignore], &[rule(&["c$one", "c::chat$*", "py::t[1-2]"])]).unwrap();
        let body = br#"{"q":"at 2026-01-02T10:00:00Z","seed":7}"#;
        let keyed = |test: &str| {
            n.for_test(&TestId::new(test))
                .request("POST", "/v1/x", None, None, body, &[])
                .body_value()
        };
        assert_eq!(keyed("c$one"), json!({"q": "at <TIME>"}));
        assert_eq!(
            keyed("c::chat$greets"),
            json!({"q": "at <TIME>", "seed": 7})
        );
        assert_eq!(
            keyed("py::t[1-2]"),
            json!({"q": "at <TIME>", "seed": 7}),
            "an id names itself"
        );
        assert_eq!(
            keyed("c$two"),
            json!({"q": "at 2026-01-02T10:00:00Z", "seed": 7})
        );
        let every = Normalizer::new(&[], &[rule(&[])]).unwrap();
        let t = TestId::new("c$two");
        let v = every
            .for_test(&t)
            .request("POST", "/v1/x", None, None, body, &[])
            .body_value();
        assert_eq!(v["q"], "at <TIME>");
        // Recorded requests re-keyed take the same rules as live ones.
        let recorded = Normalizer::plain().request("POST", "/v1/x", None, None, body, &[]);
        assert_eq!(
            n.for_test(&TestId::new("c$two")).renormalize(&recorded),
            recorded
        );
        assert_eq!(
            n.for_test(&TestId::new("c$one"))
                .renormalize(&recorded)
                .body_value(),
            json!({"q": "at <TIME>"})
        );
    }

    /// `{n}` numbers the distinct matches of one request in the order they come, whatever
    /// their values: two runs whose tool minted other ids key the same, and two ids stay apart.
    #[test]
    fn a_numbered_rule_keys_minted_ids_by_their_order() {
        let n = norm(&[], &[(r"\bord_[a-z0-9]{6}\b", "<ORD_{n}>")]);
        let body = |a: &str, b: &str| {
            format!(
                r#"{{"messages":[{{"content":"made {a}"}},{{"content":"made {b}, then {a} again"}}]}}"#
            )
        };
        let keyed =
            |a: &str, b: &str| n.request("POST", "/v1/x", None, None, body(a, b).as_bytes(), &[]);
        let first = keyed("ord_abc123", "ord_def456");
        assert_eq!(
            first.json().unwrap()["messages"][1]["content"],
            "made <ORD_2>, then <ORD_1> again"
        );
        assert_eq!(Key::of(&first), Key::of(&keyed("ord_zzz999", "ord_yyy888")));
        assert_ne!(Key::of(&first), Key::of(&keyed("ord_abc123", "ord_abc123")));
        // Re-keying a request recorded before the rule gives the key of one made under it.
        let before = norm(&[], &[]).request(
            "POST",
            "/v1/x",
            None,
            None,
            body("ord_q1w2e3", "ord_r4t5y6").as_bytes(),
            &[],
        );
        let again = n.renormalize(&before);
        assert_eq!(Key::of(&again), Key::of(&first));
        assert_eq!(n.renormalize(&again), again);
    }

    #[test]
    fn replace_patterns_compile_under_a_size_limit() {
        let rule = |p: &str| ReplaceRule {
            pattern: p.into(),
            replacement: "X".into(),
            tests: vec![],
        };
        for ordinary in [
            r"\d{4}-\d{2}-\d{2}T[0-9:.]+Z",
            r"req_[A-Za-z0-9]{24}",
            r"\w+@\w+\.com",
            r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
        ] {
            Normalizer::new(&[], &[rule(ordinary)]).unwrap_or_else(|e| panic!("{ordinary}: {e}"));
        }
        for huge in [
            r"(a{1,1000}){1,1000}",
            r"\w{5000}",
            r"(x+x+)+y{1000}{100}",
            r"(?:(?:(?:a{20}){20}){20})b",
            r"(?:a{1,30}){30}b",
        ] {
            let e = Normalizer::new(&[], &[rule(huge)]).unwrap_err().to_string();
            assert!(
                e.contains("size limit") || e.contains("exceeds") || e.contains("states"),
                "{huge}: {e}"
            );
        }
    }

    #[test]
    fn key_ignores_map_order_and_secrets() {
        let n = Normalizer::plain();
        let a = n.request(
            "POST",
            "/v1/x",
            Some("k%65y=SECRET&b=2&a=1"),
            None,
            br#"{"a":1,"b":{"y":2,"x":1}}"#,
            &["key"],
        );
        let b = n.request(
            "POST",
            "/v1/x",
            Some("a=1&b=2"),
            None,
            br#"{"b":{"x":1,"y":2},"a":1}"#,
            &["key"],
        );
        assert_eq!(Key::of(&a), Key::of(&b));
        assert_eq!(a.query.as_deref(), Some("a=1&b=2"));
    }

    #[test]
    fn key_is_precise() {
        let n = Normalizer::plain();
        let a = n.request("POST", "/v1/x", None, None, br#"{"prompt":"hi"}"#, &[]);
        let b = n.request("POST", "/v1/x", None, None, br#"{"prompt":"hi!"}"#, &[]);
        let c = n.request("POST", "/v1/y", None, None, br#"{"prompt":"hi"}"#, &[]);
        assert_ne!(Key::of(&a), Key::of(&b));
        assert_ne!(Key::of(&a), Key::of(&c));
    }

    #[test]
    fn ignore_and_replace_apply_before_keying() {
        let n = norm(
            &["/metadata/ts", "/messages/*/id"],
            &[(r"\d{4}-\d{2}-\d{2}", "<DATE>")],
        );
        let a = n.request("POST", "/p", None, None, br#"{"metadata":{"ts":1,"k":2},"messages":[{"id":"a","content":"today is 2026-01-02"}]}"#, &[]);
        let b = n.request("POST", "/p", None, None, br#"{"metadata":{"ts":9,"k":2},"messages":[{"id":"b","content":"today is 2027-03-04"}]}"#, &[]);
        assert_eq!(Key::of(&a), Key::of(&b));
        assert_eq!(
            a.json(),
            Some(&json!({"metadata":{"k":2},"messages":[{"content":"today is <DATE>"}]}))
        );
    }

    #[test]
    fn bad_rules_are_named() {
        let e = Normalizer::new(&["metadata".into()], &[])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("\"metadata\"") && e.contains("starts with '/'"),
            "{e}"
        );
        let rule = ReplaceRule {
            pattern: "(".into(),
            replacement: "".into(),
            tests: vec![],
        };
        let e = Normalizer::new(&[], &[rule]).unwrap_err().to_string();
        assert!(e.contains("pattern \"(\""), "{e}");
    }

    #[test]
    fn differing_fields_names_leaves() {
        let a = json!({"model":"m","messages":[{"role":"user","content":"a"}],"t":1});
        let b = json!({"model":"m","messages":[{"role":"user","content":"b"}],"u":1});
        assert_eq!(
            differing_fields(&a, &b),
            vec!["/messages/0/content", "/t", "/u"]
        );
    }

    #[test]
    fn previews() {
        let r = Normalizer::plain().request("POST", "/v1/chat/completions", None, None,
            br#"{"model":"gpt","messages":[{"role":"user","content":"first"},{"role":"assistant","content":"x"},{"role":"user","content":[{"type":"text","text":"second"}]}]}"#, &[]);
        assert_eq!(r.model().as_deref(), Some("gpt"));
        assert_eq!(r.last_user_text().as_deref(), Some("second"));
        let g = Normalizer::plain().request(
            "POST",
            "/v1beta/models/gemini-2.0-flash:generateContent",
            None,
            None,
            br#"{"contents":[{"role":"user","parts":[{"text":"hello"}]}]}"#,
            &[],
        );
        assert_eq!(g.model().as_deref(), Some("gemini-2.0-flash"));
        assert_eq!(g.last_user_text().as_deref(), Some("hello"));
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            "\\PC{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec(("[a-z]{1,4}", inner), 0..4)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn key_survives_a_cassette_round_trip(body in json_value()) {
            let bytes = serde_json::to_vec(&body).unwrap();
            let req = Normalizer::plain().request("POST", "/v1/chat/completions", None, None, &bytes, &[]);
            let stored = serde_json::to_string_pretty(&req).unwrap();
            let back: RecordedRequest = serde_json::from_str(&stored).unwrap();
            prop_assert_eq!(Key::of(&back), Key::of(&req));
        }

        /// Whatever bytes a client sends, under whatever content type, the stored request keys
        /// the same once read back.
        #[test]
        fn any_body_keys_the_same_after_a_round_trip(
            bytes in prop::collection::vec(any::<u8>(), 0..512),
            content_type in prop_oneof![
                Just(None),
                Just(Some("application/json")),
                Just(Some("multipart/form-data; boundary=B")),
            ],
        ) {
            let n = Normalizer::plain();
            let req = n.request("POST", "/v1/x", None, content_type, &bytes, &[]);
            let stored = serde_json::to_string_pretty(&req).unwrap();
            let back: RecordedRequest = serde_json::from_str(&stored).unwrap();
            prop_assert_eq!(Key::of(&back), Key::of(&req));
        }

        #[test]
        fn key_does_not_depend_on_member_order(pairs in prop::collection::vec(("[a-z]{1,6}", any::<i32>()), 0..8)) {
            let forward: serde_json::Map<String, Value> = pairs.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
            let backward: serde_json::Map<String, Value> = forward.iter().rev().map(|(k, v)| (k.clone(), v.clone())).collect();
            let n = Normalizer::plain();
            let a = n.request("POST", "/p", None, None, &serde_json::to_vec(&Value::Object(forward)).unwrap(), &[]);
            let b = n.request("POST", "/p", None, None, &serde_json::to_vec(&Value::Object(backward)).unwrap(), &[]);
            prop_assert_eq!(Key::of(&a), Key::of(&b));
        }
    }
}
