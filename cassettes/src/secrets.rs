//! Secrets in bodies, on their way into a key and a cassette. A recorded answer's secret-named fields
//! (a token endpoint's `access_token`, say) become the placeholder its request's already did,
//! in whole bodies, stream events and session frames alike. Then a last guard: no recording
//! that still holds the value of a key variable of the daemon's environment, or a string of a
//! well-known secret shape, is written; the write fails naming the field and what to do.

use crate::body::Body;
use providers::redact::BodyFields;
use providers::redact::PLACEHOLDER;
use regex::{Regex, RegexBuilder};
use serde_json::Value;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

/// The vendored rule set: gitleaks' standalone rules and our own (see the file's header).
const RULES: &str = include_str!("../shapes/gitleaks.toml");

#[derive(serde::Deserialize)]
struct RuleFile {
    rules: Vec<Rule>,
    local: Vec<Rule>,
}

#[derive(serde::Deserialize)]
struct Rule {
    id: String,
    regex: String,
    keywords: Vec<String>,
}

/// The vendored shapes. As gitleaks does, a rule is tried only on text holding one of its
/// keywords: one literal search over all keywords is cheap, while all rules compiled at once
/// take seconds and run slowly, so each is compiled the first time a keyword asks for it.
struct Shapes {
    /// Every keyword, found by one multi-literal search (SIMD-prefiltered, ASCII case
    /// folded): this runs over every keyed request's text, so it must cost next to nothing.
    keywords: aho_corasick::AhoCorasick,
    /// For each keyword, by its pattern's index, the rules it asks for.
    rules_of: Vec<Vec<usize>>,
    rules: Vec<(Rule, OnceLock<Regex>)>,
}

impl Shapes {
    /// The rules whose keywords `text` holds, in file order.
    fn asked(&self, text: &str) -> Vec<usize> {
        let mut asked: Vec<usize> = self
            .keywords
            .find_iter(text)
            .flat_map(|m| self.rules_of[m.pattern().as_usize()].iter().copied())
            .collect();
        asked.sort_unstable();
        asked.dedup();
        asked
    }

    fn regex(&self, i: usize) -> &Regex {
        let (rule, re) = &self.rules[i];
        re.get_or_init(|| {
            RegexBuilder::new(&rule.regex)
                .size_limit(64 << 20)
                .build()
                .unwrap_or_else(|e| panic!("shape {} does not compile: {e}", rule.id))
        })
    }

    /// The rules that match `text`.
    fn matching<'a>(&'a self, text: &'a str) -> impl Iterator<Item = usize> + 'a {
        self.asked(text)
            .into_iter()
            .filter(move |i| self.regex(*i).is_match(text))
    }
}

fn shapes() -> &'static Shapes {
    static SET: OnceLock<Shapes> = OnceLock::new();
    SET.get_or_init(|| {
        let file: RuleFile = toml::from_str(RULES).expect("the vendored rules parse");
        let rules: Vec<(Rule, OnceLock<Regex>)> = file
            .rules
            .into_iter()
            .chain(file.local)
            .map(|r| (r, OnceLock::new()))
            .collect();
        let mut rules_of: std::collections::HashMap<String, Vec<usize>> = Default::default();
        for (i, (rule, _)) in rules.iter().enumerate() {
            for k in &rule.keywords {
                rules_of.entry(k.to_lowercase()).or_default().push(i);
            }
        }
        // The search finds one keyword where several overlap (`sk-ant-api03` holds `sk-ant-`
        // and `sk-`): the longest asks for the rules of those it holds too.
        let all: Vec<(String, Vec<usize>)> = rules_of
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for (k, rules) in rules_of.iter_mut() {
            for (inner, more) in &all {
                if inner != k && k.contains(inner.as_str()) {
                    rules.extend(more);
                }
            }
            rules.sort_unstable();
            rules.dedup();
        }
        let mut words: Vec<(String, Vec<usize>)> = rules_of.into_iter().collect();
        words.sort();
        // Leftmost-longest, so that a keyword inside another (`sk-` in `sk-ant-`) does not
        // hide it.
        let keywords = aho_corasick::AhoCorasick::builder()
            .ascii_case_insensitive(true)
            .match_kind(aho_corasick::MatchKind::LeftmostLongest)
            .kind(Some(aho_corasick::AhoCorasickKind::DFA))
            .build(words.iter().map(|(w, _)| w))
            .expect("keywords are literals");
        Shapes {
            keywords,
            rules_of: words.into_iter().map(|(_, rules)| rules).collect(),
            rules,
        }
    })
}

/// Which rule of the vendored set `text` matches, if any (its gitleaks id, or ours).
pub fn shape_in(text: &str) -> Option<&'static str> {
    let shapes = shapes();
    shapes
        .matching(text)
        .next()
        .map(|i| shapes.rules[i].0.id.as_str())
}

/// Credentials by value: the secret-looking variables of the environment and what the run
/// has seen in secret headers and queries. Shared by keying and the guard, so that a request
/// keys as it is stored.
///
/// Every keyed request reads them (most often unchanged since the last), on every worker
/// thread at once: each thread keeps its own copy, renewed when the generation moves, so a
/// read costs a load of one counter rather than a lock's shared write.
#[derive(Debug)]
pub struct Values {
    all: RwLock<Arc<Vec<(String, String)>>>,
    generation: AtomicU64,
    id: u64,
}

impl Default for Values {
    fn default() -> Self {
        static IDS: AtomicU64 = AtomicU64::new(0);
        Values {
            all: RwLock::default(),
            generation: AtomicU64::new(0),
            id: IDS.fetch_add(1, Ordering::Relaxed),
        }
    }
}

/// Per thread: which [`Values`] (its id), at which generation, and its pairs then.
type Seen = Option<(u64, u64, Arc<Vec<(String, String)>>)>;

thread_local! {
    static SEEN: std::cell::RefCell<Seen> = const { std::cell::RefCell::new(None) };
}

/// Values shorter than this turn up in ordinary text, and are never taken as secrets.
pub const MIN_SECRET_LEN: usize = 8;

impl Values {
    /// The given (name, value) pairs, those long enough to be keys.
    pub fn new(values: Vec<(String, String)>) -> Self {
        let v = Values::default();
        for (name, value) in values {
            v.learn(&name, &value);
        }
        v
    }

    /// Takes `value` (named by where it was seen: `header authorization`) as a secret from now.
    pub fn learn(&self, name: &str, value: &str) {
        let value = value.trim();
        if value.len() < MIN_SECRET_LEN
            || value == PLACEHOLDER
            || value.contains(PLACEHOLDER)
            || self.with(|all| all.iter().any(|(_, v)| v == value))
        {
            return;
        }
        let mut all = self.all.write().expect("values lock");
        if all.iter().any(|(_, v)| v == value) {
            return;
        }
        let mut more = all.as_ref().clone();
        more.push((name.to_string(), value.to_string()));
        // Longest first: a value that holds another is replaced whole.
        more.sort_by_key(|(_, v)| std::cmp::Reverse(v.len()));
        *all = Arc::new(more);
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Runs `f` on the pairs as this thread last saw them, renewed if any was learnt since.
    fn with<R>(&self, f: impl FnOnce(&[(String, String)]) -> R) -> R {
        let generation = self.generation.load(Ordering::Acquire);
        SEEN.with_borrow_mut(|seen| {
            let fresh = matches!(seen, Some((id, g, _)) if *id == self.id && *g == generation);
            if !fresh {
                let all = self.all.read().expect("values lock").clone();
                *seen = Some((self.id, generation, all));
            }
            let (_, _, all) = seen.as_ref().expect("just seen");
            f(all)
        })
    }

    /// The name of the first value `text` holds.
    fn in_text(&self, text: &str) -> Option<String> {
        self.with(|all| {
            all.iter()
                .find(|(_, v)| text.contains(v.as_str()))
                .map(|(name, _)| name.clone())
        })
    }

    fn replace(&self, text: &str) -> Option<String> {
        self.with(|all| {
            let mut out: Option<String> = None;
            for (_, v) in all.iter() {
                let now = out.as_deref().unwrap_or(text);
                if now.contains(v.as_str()) {
                    out = Some(now.replace(v.as_str(), PLACEHOLDER));
                }
            }
            out
        })
    }
}

/// Replaces credentials by value and by shape, wherever they stand in text.
#[derive(Clone, Debug, Default)]
pub struct Scrubber {
    values: Arc<Values>,
}

impl Scrubber {
    /// Replaces `values` and the vendored shapes.
    pub fn new(values: Vec<(String, String)>) -> Self {
        Scrubber {
            values: Arc::new(Values::new(values)),
        }
    }

    /// Takes a credential seen in a header or a query as a secret from now on.
    pub fn learn(&self, name: &str, value: &str) {
        self.values.learn(name, value);
    }

    /// Whether `text` holds a known value or a secret's shape: one pass of each.
    pub fn holds(&self, text: &str) -> bool {
        self.values.in_text(text).is_some() || shapes().matching(text).next().is_some()
    }

    /// `text` with known values and shaped secrets replaced by the placeholder; `None` when it
    /// holds none.
    pub fn text(&self, text: &str) -> Option<String> {
        let by_value = self.values.replace(text);
        let now = by_value.as_deref().unwrap_or(text);
        let shapes = shapes();
        let hits: Vec<usize> = shapes.matching(now).collect();
        if hits.is_empty() {
            return by_value;
        }
        let mut out = now.to_string();
        for i in hits {
            let re = shapes.regex(i);
            out = re
                .replace_all(&out, |c: &regex::Captures<'_>| {
                    let whole = c.get(0).expect("a match");
                    match c.get(1) {
                        Some(secret) => {
                            let (a, b) =
                                (secret.start() - whole.start(), secret.end() - whole.start());
                            format!(
                                "{}{PLACEHOLDER}{}",
                                &whole.as_str()[..a],
                                &whole.as_str()[b..]
                            )
                        }
                        None => PLACEHOLDER.to_string(),
                    }
                })
                .into_owned();
        }
        Some(out)
    }

    /// Every string of `value`, object keys included, through [`Scrubber::text`]; whether
    /// anything changed.
    pub fn json(&self, value: &mut Value) -> bool {
        match value {
            Value::String(s) => match self.text(s) {
                Some(t) => {
                    *s = t;
                    true
                }
                None => false,
            },
            Value::Array(items) => items.iter_mut().fold(false, |c, v| self.json(v) | c),
            Value::Object(map) => {
                let mut changed = false;
                if map.keys().any(|k| self.holds(k)) {
                    let old = std::mem::take(map);
                    for (k, v) in old {
                        let k = self.text(&k).unwrap_or(k);
                        map.insert(k, v);
                    }
                    changed = true;
                }
                map.values_mut().fold(changed, |c, v| self.json(v) | c)
            }
            _ => false,
        }
    }

    /// Where in `text` known values and shaped secrets stand (byte ranges, sorted, merged):
    /// for text that is stored in pieces, as a stream's deltas are.
    pub(crate) fn spans(&self, text: &str) -> Vec<std::ops::Range<usize>> {
        let mut spans: Vec<std::ops::Range<usize>> = self.values.with(|all| {
            all.iter()
                .flat_map(|(_, v)| {
                    text.match_indices(v.as_str())
                        .map(|(at, v)| at..at + v.len())
                })
                .collect()
        });
        let shapes = shapes();
        for i in shapes.matching(text).collect::<Vec<_>>() {
            for c in shapes.regex(i).captures_iter(text) {
                let m = c.get(1).or_else(|| c.get(0)).expect("a match");
                spans.push(m.range());
            }
        }
        spans.sort_by_key(|r| (r.start, r.end));
        let mut merged: Vec<std::ops::Range<usize>> = Vec::new();
        for r in spans {
            match merged.last_mut() {
                Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
                _ => merged.push(r),
            }
        }
        merged
    }

    /// What `text` holds, for a message: "the value of HF_TOKEN", "shape openai-key".
    fn what(&self, text: &str) -> Option<String> {
        self.values
            .in_text(text)
            .map(|name| format!("the value of {name}"))
            .or_else(|| shape_in(text).map(|id| format!("a secret of shape {id}")))
    }
}

/// A secret found where it must not be written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    /// The JSON pointer of the field that holds it, in the interaction as stored.
    pub pointer: String,
    /// What it is: "the value of OPENAI_API_KEY", "an Anthropic API key".
    pub what: String,
}

/// The first string in `value` that holds one of `values` (by name) or has a secret's shape.
/// The pointer masks a segment that is itself a secret (a secret used as an object's key).
pub fn find(value: &Value, values: &[(String, String)]) -> Option<Found> {
    find_with(value, &Scrubber::new(values.to_vec()))
}

pub(crate) fn find_with(value: &Value, scrub: &Scrubber) -> Option<Found> {
    let mut found = None;
    walk(
        value,
        &mut String::new(),
        scrub,
        &mut |pointer, text| match scrub.what(text) {
            Some(what) => {
                found = Some(Found {
                    pointer: pointer.to_string(),
                    what,
                });
                true
            }
            None => false,
        },
    );
    found
}

/// Calls `visit` with each string (object keys included) and its pointer until it says stop.
fn walk(
    value: &Value,
    at: &mut String,
    scrub: &Scrubber,
    visit: &mut dyn FnMut(&str, &str) -> bool,
) -> bool {
    let len = at.len();
    let stop = match value {
        Value::String(s) => visit(at, s),
        Value::Array(items) => items.iter().enumerate().any(|(i, v)| {
            at.truncate(len);
            at.push_str(&format!("/{i}"));
            walk(v, at, scrub, visit)
        }),
        Value::Object(map) => map.iter().any(|(k, v)| {
            at.truncate(len);
            at.push('/');
            match scrub.holds(k) {
                true => at.push_str("<secret key>"),
                false => at.push_str(&k.replace('~', "~0").replace('/', "~1")),
            }
            visit(at, k) || walk(v, at, scrub, visit)
        }),
        _ => false,
    };
    at.truncate(len);
    stop
}

/// The guard a store applies to every recording it writes.
#[derive(Clone, Debug, Default)]
pub struct Guard {
    pub(crate) fields: BodyFields,
    scrub: Scrubber,
}

impl Guard {
    /// Redacts `fields` by name, and what `scrub` knows by value and shape.
    pub fn new(fields: BodyFields, scrub: Scrubber) -> Self {
        Guard { fields, scrub }
    }

    /// The credentials by value and shape this guard replaces.
    pub fn scrubber(&self) -> &Scrubber {
        &self.scrub
    }

    /// A request body that keying left as bytes (too large to parse, compressed): redacted as
    /// an answer's would be. Keying calls this too, so a request keys as it is stored.
    pub fn request(&self, body: &mut Body) -> bool {
        self.request_encoded(body, None)
    }

    /// [`Guard::request`] for a body sent with a `content-encoding` (lowercase): bytes are
    /// decoded as it says before they are read.
    pub fn request_encoded(&self, body: &mut Body, encoding: Option<&str>) -> bool {
        match body {
            Body::Bytes(_) | Body::Blob(_) | Body::Text(_) | Body::Parts(_) => {
                self.body(body, encoding).0
            }
            Body::Json { value, .. } => {
                let by_name = !self.fields.json(value).is_empty();
                self.scrub.json(value) | by_name
            }
            _ => false,
        }
    }

    /// Text with its secrets replaced by name (as JSON, form, XML, SSE, loosely past the size
    /// parsed) and by value and shape.
    pub fn plain(&self, text: &str) -> Option<String> {
        let by_name = self.fields.text(text);
        let now = by_name.as_deref().unwrap_or(text);
        self.scrub.text(now).or(by_name)
    }

    /// One body redacted in place; (changed, now kept decoded).
    pub(crate) fn body(&self, b: &mut Body, encoding: Option<&str>) -> (bool, bool) {
        match b {
            Body::Json { value, .. } => {
                let by_name = !self.fields.json(value).is_empty();
                (self.scrub.json(value) | by_name, false)
            }
            Body::Text(text) => match self.plain(text) {
                Some(t) => {
                    *text = t;
                    (true, false)
                }
                None => (false, false),
            },
            Body::Parts(parts) => {
                let mut changed = false;
                for p in parts.iter_mut() {
                    if self.fields.is_secret(&p.name) {
                        if let Body::Text(t) = &mut p.body {
                            if t != PLACEHOLDER {
                                *t = PLACEHOLDER.to_string();
                                changed = true;
                            }
                        }
                    }
                    changed |= self.body(&mut p.body, None).0;
                }
                (changed, false)
            }
            Body::Bytes(bytes) => self.bytes(bytes.clone(), encoding, b),
            Body::Blob(blob) => match blob.bytes.clone() {
                Some(bytes) => self.bytes(bytes, encoding, b),
                None => (false, false),
            },
            Body::Empty | Body::Digest(_) => (false, false),
        }
    }

    fn bytes(&self, bytes: bytes::Bytes, encoding: Option<&str>, b: &mut Body) -> (bool, bool) {
        let (plain, decoded) = match decode(&bytes, encoding) {
            Some(d) => (d, true),
            None => (bytes.to_vec(), false),
        };
        let Ok(text) = std::str::from_utf8(&plain) else {
            return (false, false);
        };
        let Some(redacted) = self.plain(text) else {
            return (false, false);
        };
        *b = Body::exact(redacted.as_bytes());
        (true, decoded)
    }

    /// A value as a miss shows it, at `pointer`: when its field's name or its text looks
    /// secret, only its length and a short hash, enough to see that it changed.
    pub fn shown(&self, pointer: &str, value: Value) -> Value {
        let field = pointer.rsplit('/').next().unwrap_or("");
        let by_name = self
            .fields
            .is_secret(&field.replace("~1", "/").replace("~0", "~"));
        let text = match &value {
            Value::String(s) if s == PLACEHOLDER => return value,
            Value::String(s) => s.clone(),
            Value::Null | Value::Bool(_) => return value,
            other if by_name => other.to_string(),
            _ => return value,
        };
        if by_name || self.scrub.holds(&text) {
            Value::String(masked(&text))
        } else {
            value
        }
    }
}

/// A secret as messages show it: `<secret: 41 chars, sha256 3fa2c1>`.
pub fn masked(secret: &str) -> String {
    let hash = crate::body::sha256_hex(secret.as_bytes());
    format!(
        "<secret: {} chars, sha256 {}>",
        secret.chars().count(),
        &hash[..6]
    )
}

/// Bytes with gzip, deflate or brotli undone, when they are compressed: as named, or by gzip's
/// magic.
fn decode(bytes: &[u8], encoding: Option<&str>) -> Option<Vec<u8>> {
    let gzip_magic = bytes.starts_with(&[0x1f, 0x8b]);
    crate::body::decompress(bytes, if gzip_magic { Some("gzip") } else { encoding })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::interaction;
    use std::io::Write;

    /// A brotli answer (as Node's zlib wrote it) is read and loses its token; a body that
    /// decodes past the limit is not decoded at all.
    #[test]
    fn brotli_is_read_and_bombs_are_not() {
        let br = hex::decode(
            "1b35004014a1d241e696fa336c006a3025b5900dd9090e39707fd496041a88570e4c713c79e054a36502fd57d73e1ed93a02c075cb72987d",
        )
        .unwrap();
        let plain = decode(&br, Some("br")).expect("brotli decodes");
        assert_eq!(
            String::from_utf8(plain).unwrap(),
            r#"{"access_token":"tok-live-XYZ12345","expires_in":3600}"#
        );
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&vec![b'a'; 1 << 20]).unwrap();
        let bomb = gz.finish().unwrap();
        assert!(crate::body::decompress_within(&bomb, Some("gzip"), 1 << 16).is_none());
        assert_eq!(
            crate::body::decompress_within(&bomb, Some("gzip"), 1 << 20).map(|d| d.len()),
            Some(1 << 20)
        );
    }

    /// Every vendored rule compiles with Rust's regex crate, and the shapes the run must catch
    /// are caught; ordinary text and a git commit id are not.
    #[test]
    fn shapes_are_found_and_ordinary_text_is_not() {
        for text in [
            "key sk-ant-api03-abcdefghijklmnopqrstuvwxyz012345",
            "sk-ant-oat01-abcdefghijklmnopqrstuvwxyz012345",
            "sk-proj-ABCDEFGHIJKLMNOPQRSTUVWX",
            "sk-abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUV",
            "X-Amz-Credential=AKIAIOSFODNN7EXAMPLE/20260101",
            "AIzaSyA1234567890abcdefghijklmnopqrstuv",
            "ghp_0123456789abcdefghijklmnopqrstuvwxyz",
            "ghs_0123456789abcdefghijklmnopqrstuvwxyz",
            "github_pat_0123456789abcdefghijklmnop",
            "glpat-0123456789abcdefghij",
            "ya29.a0AfH6SMBx1234567890abcdef",
            "ek_68af296e8e408191a1120ab6383263c2",
            "gsk_0123456789abcdefghijklmnopqrstuvwxyzABCD",
            "sk_live_0123456789abcdefghij",
            "hf_abcdefghijklmnopqrstuvwxyzABCDEFGH",
            "xoxb-1234567890-abcdef",
            "https://hooks.slack.com/services/T0000000/B0000000/abcdefghijklmnopqrstuvwx",
            "/bot123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsawQ/sendMessage",
            "-----BEGIN RSA PRIVATE KEY-----\nMII",
        ] {
            assert!(shape_in(text).is_some(), "{text}");
            let scrubbed = Scrubber::default().text(text).unwrap();
            assert!(scrubbed.contains(PLACEHOLDER), "{text}: {scrubbed}");
        }
        for text in [
            "sk-test",
            "You said: Hello",
            "AKIA is short",
            "risk-ant-ic",
            "day_of_week_0123456789abcdefghij",
            "3f14de6a0c1b2d3e4f5a6b7c8d9e0f1a2b3c4d5e",
        ] {
            assert_eq!(shape_in(text), None, "{text}");
        }
    }

    /// A token endpoint's answer loses its tokens in its own layout; an environment key's
    /// value anywhere is replaced, and so is a value learned later.
    #[test]
    fn answers_lose_secrets_by_name_value_and_shape() {
        let scrub = Scrubber::new(vec![("HF_TOKEN".into(), "hf-live-0123456789".into())]);
        let guard = Guard::new(BodyFields::default(), scrub.clone());
        let mut x = interaction(
            "q",
            "{\"access_token\": \"ya29.secret\", \"expires_in\": 3599, \"token_type\": \"Bearer\"}",
        );
        assert!(guard.redact_answer(&mut x));
        let body = x.response.whole().unwrap().bytes().unwrap();
        assert_eq!(
            std::str::from_utf8(&body).unwrap(),
            "{\"access_token\": \"llmreplay-redacted\", \"expires_in\": 3599, \"token_type\": \"Bearer\"}"
        );
        assert_eq!(guard.check(&x), None);
        scrub.learn("the authorization header", "seen-in-a-header-42");
        let mut echoed = interaction(
            "q",
            "{\"echo\": \"Bearer hf-live-0123456789 and seen-in-a-header-42\"}",
        );
        assert!(guard.redact_answer(&mut echoed));
        let text = serde_json::to_string(&echoed).unwrap();
        assert!(
            !text.contains("hf-live") && !text.contains("seen-in-a"),
            "{text}"
        );
        assert_eq!(guard.check(&echoed), None);
    }

    /// The answer of a path that names secrets (a Realtime client secret, a Key Vault secret)
    /// loses its bare `value`, whatever its shape; elsewhere a `value` is kept.
    #[test]
    fn a_bare_value_is_secret_where_the_path_names_secrets() {
        let guard = Guard::default();
        let answer = r#"{"value": "kv-plain-7Hq2Xzw", "id": "https://v.vault.azure.net/secrets/db/1", "attributes": {"enabled": true}}"#;
        for (path, secret) in [
            ("/secrets/db/1", true),
            ("/v1/realtime/client_secrets", true),
            ("/v1/chat/completions", false),
        ] {
            let mut x = interaction("q", answer);
            x.request.path = path.to_string();
            guard.redact_answer(&mut x);
            let text = serde_json::to_string(&x).unwrap();
            assert_eq!(!text.contains("kv-plain-7Hq2Xzw"), secret, "{path}: {text}");
            assert!(text.contains("enabled"), "{text}");
        }
    }

    /// A known value and a key's shape written across a stream's deltas, a few characters an
    /// event (a model echoing a key, or writing AWS' example key): cut from every delta, the
    /// first piece's place taking the placeholder, and the guard then finds nothing.
    #[test]
    fn a_secret_split_across_stream_deltas_is_cut_from_each() {
        use crate::format::{RecordedResponse, StreamFormat, Summary};
        let scrub = Scrubber::new(vec![("HF_TOKEN".into(), "hf-live-0123456789".into())]);
        let guard = Guard::new(BodyFields::default(), scrub);
        let chunk = |t: &str| {
            format!(
                "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":{}}}}}]}}\n\n",
                serde_json::to_string(t).unwrap()
            )
        };
        let said = [
            "Your key is hf-live-",
            "0123",
            "456789, and AWS' is AKIAIOS",
            "FODNN7EX",
            "AMPLE.",
        ];
        let frames: Vec<(bytes::Bytes, u64)> = said
            .iter()
            .map(|t| (bytes::Bytes::from(chunk(t)), 1))
            .collect();
        let mut x = interaction("q", "x");
        x.response =
            RecordedResponse::with_stream(200, Default::default(), StreamFormat::Sse, &frames);
        x.summary = Summary::of(&x.response);
        assert!(guard.check(&x).is_some(), "the guard would refuse it whole");
        assert!(guard.redact_answer(&mut x));
        x.summary = Summary::of(&x.response);
        assert_eq!(guard.check(&x), None);
        assert_eq!(
            x.summary.as_ref().unwrap().text,
            format!("Your key is {PLACEHOLDER}, and AWS' is {PLACEHOLDER}.")
        );
        let text = serde_json::to_string(&x).unwrap();
        for piece in ["0123", "456789", "FODNN7EX", "AMPLE"] {
            assert!(!text.contains(piece), "{piece} in {text}");
        }
    }

    /// A redirect's `location` loses the secrets its query and fragment name: an OAuth
    /// callback's `code`, the implicit flow's `access_token`.
    #[test]
    fn a_redirects_location_loses_its_code_and_token() {
        let guard = Guard::default();
        let mut x = interaction("q", "");
        x.response.status = 302;
        x.response.headers.insert(
            "location".into(),
            "http://localhost:8080/cb?code=4/0Aean-live-code&state=s1#access_token=at-live-9&token_type=bearer".into(),
        );
        assert!(guard.redact_answer(&mut x));
        let location = &x.response.headers["location"];
        assert!(
            !location.contains("live-code") && !location.contains("at-live-9"),
            "{location}"
        );
        assert!(location.contains("state=s1") && location.contains("token_type=bearer"));
    }

    /// What the guard says names the place and the rule, never the value; a secret that is an
    /// object's key is masked in the pointer.
    #[test]
    fn the_guard_names_places_and_rules_never_values() {
        let key = "ghp_0123456789abcdefghijklmnopqrstuvwxyz";
        let value = serde_json::json!({"a": [{"note": "x"}, {(key): 1}]});
        let found = find(&value, &[]).unwrap();
        assert_eq!(found.pointer, "/a/1/<secret key>");
        assert!(found.what.contains("github"), "{}", found.what);
        assert!(!format!("{found:?}").contains(key));
    }

    /// A miss shows a secret-named or secret-shaped value as its length and a short hash.
    #[test]
    fn misses_mask_secret_looking_values() {
        let guard = Guard::default();
        let shown = guard.shown("/body/db_password", Value::String("hunter2-x".into()));
        assert_eq!(shown, Value::String(masked("hunter2-x")));
        assert!(shown
            .as_str()
            .unwrap()
            .starts_with("<secret: 9 chars, sha256 "));
        let key = "sk-proj-ABCDEFGHIJKLMNOPQRSTUVWX";
        assert_eq!(
            guard.shown("/body/note", Value::String(key.into())),
            Value::String(masked(key))
        );
        assert_eq!(
            guard.shown("/body/model", Value::String("gpt-4o".into())),
            "gpt-4o"
        );
    }

    /// Each carrier a secret can hide in: gzip bytes, text past the size parsed, XML, spaced
    /// SSE, a binary frame of JSON.
    #[test]
    fn every_carrier_is_redacted() {
        let guard = Guard::default();
        let secret = "pw-0123456789-live";
        let json = format!("{{\"password\": \"{secret}\"}}");
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(json.as_bytes()).unwrap();
        let mut big = format!("[{json},");
        big.push_str(&"{\"n\": 1},".repeat((crate::body::TREE_LIMIT / 9) + 10));
        big.push_str("{}]");
        let carriers = vec![
            Body::binary(bytes::Bytes::from(gz.finish().unwrap())),
            Body::binary(bytes::Bytes::from(big)),
            Body::Text(format!(
                "<R><Credentials><SecretAccessKey>{secret}</SecretAccessKey><SessionToken>{secret}</SessionToken></Credentials></R>"
            )),
            Body::Text(format!("event: x\ndata: {{ \"access_token\" : \"{secret}\" }}\n\n")),
            Body::Bytes(bytes::Bytes::from(json.clone())),
            Body::Text(format!("a=1&&flag&client_secret={secret}&b={{x}}&\n")),
        ];
        for mut body in carriers {
            assert!(guard.request(&mut body), "{body:?}");
            let bytes = body.bytes().unwrap();
            let text = String::from_utf8_lossy(&bytes);
            assert!(!text.contains(secret), "{}", &text[..text.len().min(300)]);
            assert!(text.contains(PLACEHOLDER));
        }
    }
}
