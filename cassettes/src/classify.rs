//! Why a request missed the recording closest to it, field by field: a value that changes on
//! every run (a time, a UUID, an id a tool minted), another shape of the same call (an SDK that
//! added a field with its default, or changed a key's casing), or a real change of what is
//! asked. A volatile field comes with the `[match]` rule that keys it the same; a miss of SDK
//! shape alone can take the new request into the old recording (`cargo llmreplay rekey`).

use regex::Regex;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeSet;
use std::fmt;
use std::sync::LazyLock;

/// What kind of difference a field is, from harmless to meaningful.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// Changes on every run: a `[match]` rule keys it the same.
    Volatile,
    /// The same call in another client's shape: re-keying keeps the answer.
    SdkShape,
    /// What is asked changed: record it again.
    Semantic,
}

impl Class {
    /// Its name as people read it.
    pub fn as_str(self) -> &'static str {
        match self {
            Class::Volatile => "volatile",
            Class::SdkShape => "sdk shape",
            Class::Semantic => "semantic",
        }
    }
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One differing field and its class, with the evidence in a few words.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldClass {
    /// The JSON pointer, as the miss names it (`/body/messages/0/content`).
    pub field: String,
    /// Its class.
    pub class: Class,
    /// Why: `a UUID and a time`, `added with its default`, `key casing`.
    pub why: String,
}

/// A `[match]` rule for `llmreplay.toml`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Rule {
    /// Leave this body field out of the key (a pointer into the body).
    Ignore {
        /// The pointer.
        pointer: String,
    },
    /// Replace every match of `pattern` in every string of a request.
    Replace {
        /// The regex.
        pattern: String,
        /// What a match becomes; `{n}` numbers the distinct matches of one request.
        with: String,
    },
}

impl Rule {
    /// The rule as one line of `llmreplay.toml`'s `[match]` table.
    pub fn toml(&self) -> String {
        match self {
            Rule::Ignore { pointer } => format!("ignore = [{}]", toml_string(pointer)),
            Rule::Replace { pattern, with } => format!(
                "replace = [{{ pattern = {}, with = {} }}]",
                toml_string(pattern),
                toml_string(with)
            ),
        }
    }
}

/// Rules as `llmreplay.toml`'s `[match]` table: its header, then one `ignore` and one
/// `replace` line holding every rule of its kind.
pub fn match_table(rules: &[Rule]) -> String {
    let mut ignore = Vec::new();
    let mut replace = Vec::new();
    for rule in rules {
        match rule {
            Rule::Ignore { pointer } => ignore.push(toml_string(pointer)),
            Rule::Replace { pattern, with } => replace.push(format!(
                "{{ pattern = {}, with = {} }}",
                toml_string(pattern),
                toml_string(with)
            )),
        }
    }
    let mut out = String::from("[match]\n");
    for (name, items) in [("ignore", ignore), ("replace", replace)] {
        match items.len() {
            0 => {}
            1 => out.push_str(&format!("{name} = [{}]\n", items[0])),
            _ => {
                out.push_str(&format!("{name} = [\n"));
                for item in items {
                    out.push_str(&format!("  {item},\n"));
                }
                out.push_str("]\n");
            }
        }
    }
    out
}

/// A TOML string: literal (single quotes) when it can be, so a regex reads as written.
fn toml_string(s: &str) -> String {
    if !s.contains('\'') && !s.contains('\n') {
        format!("'{s}'")
    } else {
        format!("{:?}", s)
    }
}

/// A miss's fields classified, its class (the most meaningful of its fields') and the rules
/// that would key its volatile fields the same.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    /// The class of the miss; none when no field differs.
    pub class: Option<Class>,
    /// Each differing field.
    pub fields: Vec<FieldClass>,
    /// The rules for its volatile fields, narrowest first.
    pub rules: Vec<Rule>,
}

/// Classifies the fields `differing` between a recorded request and the one that missed, both
/// as [`crate::RecordedRequest::to_value`] gives them.
pub fn classify(recorded: &Value, now: &Value, differing: &[String]) -> Verdict {
    let mut fields = Vec::new();
    let mut rules: Vec<Rule> = Vec::new();
    let mut replaced: BTreeSet<Shape> = BTreeSet::new();
    for field in differing {
        let (a, b) = (recorded.pointer(field), now.pointer(field));
        let (class, why) = match field_class(field, a, b, recorded, now) {
            Found::Volatile { why, whole, shapes } => {
                match (whole, field.strip_prefix("/body")) {
                    (true, Some(pointer)) if !pointer.is_empty() => {
                        let rule = Rule::Ignore {
                            pointer: pointer.to_string(),
                        };
                        if !rules.contains(&rule) {
                            rules.push(rule);
                        }
                    }
                    _ => replaced.extend(shapes),
                }
                (Class::Volatile, why)
            }
            Found::Shape(why) => (Class::SdkShape, why),
            Found::Semantic(why) => (Class::Semantic, why),
        };
        fields.push(FieldClass {
            field: field.clone(),
            class,
            why,
        });
    }
    // Ignore rules (one field each) before replace rules (every string of every request), and
    // those in the order the shapes are told apart: a time before the digits inside it.
    rules.extend(replaced.into_iter().map(|shape| shape.rule(now)));
    Verdict {
        class: fields.iter().map(|f| f.class).max(),
        fields,
        rules,
    }
}

enum Found {
    Volatile {
        why: String,
        /// The whole value is volatile: the field itself can be ignored.
        whole: bool,
        shapes: Vec<Shape>,
    },
    Shape(String),
    Semantic(String),
}

/// Parameters an SDK sends only to shape the cache, never what is asked nor what the answer
/// holds. A parameter that changes what the answer holds (`stream_options.include_usage` adds
/// a usage chunk; `n`, `logprobs`, `top_logprobs`, `response_format`, `tools`, `stream` at any
/// value but their default) is not one: an old answer would lack what the new request gets.
const SDK_ONLY_KEYS: &[&str] = &["cache_control"];

/// Parameters whose value, made explicit, is what the provider assumes when it is absent.
fn is_known_default(key: &str, value: &Value) -> bool {
    match key {
        "n" | "candidate_count" => value == 1,
        "stream" | "logprobs" | "echo" | "include_usage" => value == false,
        "include_obfuscation" => value == true,
        // Every option at its default: the stream holds what it held without them.
        "stream_options" => value
            .as_object()
            .is_some_and(|o| o.iter().all(|(k, v)| is_known_default(k, v))),
        "parallel_tool_calls" => value == true,
        "service_tier" => value == "auto" || value == "default",
        _ => false,
    }
}

fn is_empty_like(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

fn field_class(
    field: &str,
    a: Option<&Value>,
    b: Option<&Value>,
    recorded: &Value,
    now: &Value,
) -> Found {
    if field == "/method" || field == "/path" {
        return Found::Semantic("another endpoint".into());
    }
    match (a, b) {
        (Some(x), Some(y)) => both_present(x, y),
        (Some(v), None) | (None, Some(v)) => {
            let added = b.is_some();
            one_side(field, v, added, recorded, now)
        }
        (None, None) => Found::Semantic("changed".into()),
    }
}

fn both_present(x: &Value, y: &Value) -> Found {
    match (x, y) {
        (Value::String(s), Value::String(t)) => match volatile_between(s, t) {
            Some((shapes, whole)) => Found::Volatile {
                why: Shape::names(&shapes),
                whole,
                shapes,
            },
            None => Found::Semantic("its text changed".into()),
        },
        (Value::Number(m), Value::Number(n)) if is_epoch(m) && is_epoch(n) => Found::Volatile {
            why: "an epoch time".into(),
            whole: true,
            shapes: vec![Shape::Epoch],
        },
        _ => Found::Semantic("its value changed".into()),
    }
}

/// A field only one side has: a default made explicit, a key renamed by casing, a parameter
/// only an SDK sends, or an id the client adds on its own.
fn one_side(field: &str, value: &Value, added: bool, recorded: &Value, now: &Value) -> Found {
    let (parent, key) = match field.rsplit_once('/') {
        Some((p, k)) => (p, crate::pointer::unescape(k)),
        None => return Found::Semantic("changed".into()),
    };
    let verb = if added { "added" } else { "dropped" };
    // Only an object's member can be a matter of shape; an element added to a list (a message,
    // a tool) changes what is asked.
    let other = if added { recorded } else { now };
    let same_side = if added { now } else { recorded };
    if !matches!(same_side.pointer(parent), Some(Value::Object(_))) {
        return Found::Semantic(format!("an element {verb}"));
    }
    if let Some(Value::Object(siblings)) = other.pointer(parent) {
        if let Some((renamed, _)) = siblings
            .iter()
            .find(|(k, v)| *k != &key && fold_case(k) == fold_case(&key) && *v == value)
        {
            return Found::Shape(format!("key casing ({renamed} and {key})"));
        }
    }
    if let Value::String(s) = value {
        if let Some(shape) = whole_shape(s) {
            return Found::Volatile {
                why: format!("{} {verb}", shape.name()),
                whole: true,
                shapes: vec![shape],
            };
        }
    }
    if is_empty_like(value) || is_known_default(&key, value) {
        return Found::Shape(format!("{verb} with its default value"));
    }
    if SDK_ONLY_KEYS.contains(&key.as_str()) {
        return Found::Shape(format!(
            "{key} {verb}: it shapes the cache, not the question"
        ));
    }
    if key == "stream_options" {
        return Found::Semantic(format!(
            "{key} {verb}: it changes what the answer holds (a usage chunk, say)"
        ));
    }
    Found::Semantic(format!("a parameter {verb}"))
}

/// A key without its casing and separators: `maxTokens`, `max_tokens`, `max-tokens` are one.
fn fold_case(key: &str) -> String {
    key.chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .collect()
}

fn is_epoch(n: &serde_json::Number) -> bool {
    n.as_u64().is_some_and(|n| {
        (1_000_000_000..2_100_000_000).contains(&n)
            || (1_000_000_000_000..2_100_000_000_000).contains(&n)
    })
}

/// The shapes of values that change on every run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Shape {
    Time,
    Uuid,
    Ulid,
    /// `call_...`, `toolu_...`, `file-...`: a prefix, then random letters and digits.
    Prefixed,
    /// Hex digits of one length (a hash, a trace id).
    Hex,
    Epoch,
}

/// Every shape in one pattern, tried in this order at each position.
static VOLATILE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(concat!(
        // A date alone is what a prompt asks about; only a time of day makes it the clock's.
        r"(?P<time>\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)",
        r"|(?P<uuid>\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b)",
        r"|(?P<ulid>\b[0-9A-HJKMNP-TV-Z]{26}\b)",
        r"|(?P<prefixed>\b[a-z]{2,12}[_-][A-Za-z0-9]{8,}\b)",
        r"|(?P<hex>\b[0-9a-f]{12,}\b)",
        r"|(?P<epoch>\b1[0-9]{9}(?:[0-9]{3})?\b)",
    ))
    .expect("the volatile shapes compile")
});

impl Shape {
    fn name(self) -> &'static str {
        match self {
            Shape::Time => "a time",
            Shape::Uuid => "a UUID",
            Shape::Ulid => "a ULID",
            Shape::Prefixed => "a minted id",
            Shape::Hex => "a hex id",
            Shape::Epoch => "an epoch time",
        }
    }

    fn names(shapes: &[Shape]) -> String {
        let names: Vec<&str> = shapes.iter().map(|s| s.name()).collect();
        match names.split_last() {
            Some((last, [])) => last.to_string(),
            Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
            None => "changes every run".into(),
        }
    }

    /// The shape of one match, or none when it is a word that only looks like one (a hex run
    /// with no digit, an id whose tail is a plain word).
    fn of(caps: &regex::Captures<'_>) -> Option<(Shape, String)> {
        let (shape, text) = [
            ("time", Shape::Time),
            ("uuid", Shape::Uuid),
            ("ulid", Shape::Ulid),
            ("prefixed", Shape::Prefixed),
            ("hex", Shape::Hex),
            ("epoch", Shape::Epoch),
        ]
        .into_iter()
        .find_map(|(name, shape)| caps.name(name).map(|m| (shape, m.as_str())))?;
        let mixed = |s: &str| {
            s.chars().any(|c| c.is_ascii_digit()) && s.chars().any(|c| c.is_ascii_alphabetic())
        };
        let token = match shape {
            Shape::Prefixed => {
                let (prefix, tail) = text.split_at(text.find(['_', '-'])? + 1);
                if !mixed(tail) {
                    return None;
                }
                format!("{prefix}{}", tail.len())
            }
            Shape::Hex | Shape::Ulid => {
                if !mixed(text) {
                    return None;
                }
                text.len().to_string()
            }
            _ => String::new(),
        };
        Some((shape, token))
    }

    /// The narrowest replace rule for this shape as the request shows it: a minted id's own
    /// prefix and length, a hex id's length; numbered when the request holds several.
    fn rule(self, now: &Value) -> Rule {
        let mut seen: Vec<(String, String)> = Vec::new();
        strings(now, &mut |s| {
            for caps in VOLATILE.captures_iter(s) {
                if let Some((shape, token)) = Shape::of(&caps) {
                    if shape == self {
                        seen.push((token, caps[0].to_string()));
                    }
                }
            }
        });
        let (pattern, tag) = match self {
            Shape::Time => (
                r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?"
                    .to_string(),
                "TIME".to_string(),
            ),
            Shape::Uuid => {
                let lower = seen
                    .iter()
                    .all(|(_, s)| !s.chars().any(|c| c.is_ascii_uppercase()));
                let hex = if lower { "[0-9a-f]" } else { "[0-9a-fA-F]" };
                (
                    format!(r"\b{hex}{{8}}-{hex}{{4}}-{hex}{{4}}-{hex}{{4}}-{hex}{{12}}\b"),
                    "UUID".to_string(),
                )
            }
            Shape::Ulid => (
                r"\b[0-9A-HJKMNP-TV-Z]{26}\b".to_string(),
                "ULID".to_string(),
            ),
            Shape::Prefixed => {
                // The first id's prefix and length: `call_` and 24.
                let text = seen.first().map(|(_, s)| s.as_str()).unwrap_or("id_");
                let cut = text.find(['_', '-']).map_or(0, |i| i + 1);
                let (prefix, tail) = text.split_at(cut);
                let tag = prefix.trim_end_matches(['_', '-']).to_ascii_uppercase();
                (
                    format!(
                        r"\b{}[A-Za-z0-9]{{{}}}\b",
                        regex::escape(prefix),
                        tail.len()
                    ),
                    format!("{tag}_ID"),
                )
            }
            Shape::Hex => {
                let len = seen.first().map_or(32, |(_, s)| s.len());
                (format!(r"\b[0-9a-f]{{{len}}}\b"), "HEX".to_string())
            }
            Shape::Epoch => (
                r"\b1[0-9]{9}(?:[0-9]{3})?\b".to_string(),
                "EPOCH".to_string(),
            ),
        };
        let distinct: BTreeSet<&str> = seen.iter().map(|(_, s)| s.as_str()).collect();
        let with = match distinct.len() > 1 {
            // Several ids of one kind: numbered, the key still tells which is which.
            true => format!("<{tag}_{{n}}>"),
            false => format!("<{tag}>"),
        };
        Rule::Replace { pattern, with }
    }
}

/// The rule for a text that took another value in each run of the same code, none of a known
/// shape: the run of letters or digits that changed, between the words around it, so that the
/// rest of the text still keys (`(about )[a-z]{8}( please)` becomes `${1}<VALUE>${2}`). None
/// when the texts differ in more than one run of such characters.
pub fn between_runs(texts: &[&str]) -> Option<Rule> {
    let first: Vec<char> = texts.first()?.chars().collect();
    let all: Vec<Vec<char>> = texts.iter().map(|t| t.chars().collect()).collect();
    let shortest = all.iter().map(Vec::len).min()?;
    let mut pre = (0..shortest)
        .take_while(|&i| all.iter().all(|t| t[i] == first[i]))
        .count();
    let mut suf = (0..shortest - pre)
        .take_while(|&i| {
            all.iter()
                .all(|t| t[t.len() - 1 - i] == first[first.len() - 1 - i])
        })
        .count();
    let middles = |pre: usize, suf: usize| -> Vec<&[char]> {
        all.iter().map(|t| &t[pre..t.len() - suf]).collect()
    };
    let class_of = |c: char| match c {
        'a'..='z' => Some("a-z"),
        'A'..='Z' => Some("A-Z"),
        '0'..='9' => Some("0-9"),
        _ => None,
    };
    let mut classes: BTreeSet<&str> = BTreeSet::new();
    for m in middles(pre, suf) {
        for c in m {
            classes.insert(class_of(*c)?);
        }
    }
    // Widen to the whole run: the shared letters next to it belong to the value.
    while pre > 0 && class_of(first[pre - 1]).is_some_and(|c| classes.contains(c)) {
        pre -= 1;
    }
    while suf > 0 && class_of(first[first.len() - suf]).is_some_and(|c| classes.contains(c)) {
        suf -= 1;
    }
    let lens: Vec<usize> = middles(pre, suf).iter().map(|m| m.len()).collect();
    let (min, max) = (*lens.iter().min()?, *lens.iter().max()?);
    if min == 0 {
        return None;
    }
    let context = |chars: &[char]| regex::escape(&chars.iter().collect::<String>());
    // Up to 16 characters of context each side, whole words only.
    let mut before = &first[pre.saturating_sub(16)..pre];
    if pre > 16 {
        let cut = before
            .iter()
            .position(|c| c.is_whitespace())
            .map_or(0, |i| i + 1);
        before = &before[cut..];
    }
    let end = (first.len() - suf + 16).min(first.len());
    let mut after = &first[first.len() - suf..end];
    if end < first.len() {
        let cut = after
            .iter()
            .rposition(|c| c.is_whitespace())
            .unwrap_or(after.len());
        after = &after[..cut];
    }
    let count = match min == max {
        true => format!("{{{min}}}"),
        false => format!("{{{min},{max}}}"),
    };
    let set: String = classes.into_iter().collect();
    Some(Rule::Replace {
        pattern: format!("({})[{set}]{count}({})", context(before), context(after)),
        with: "${1}<VALUE>${2}".into(),
    })
}

fn strings(value: &Value, f: &mut impl FnMut(&str)) {
    match value {
        Value::String(s) => f(s),
        Value::Array(items) => items.iter().for_each(|v| strings(v, f)),
        Value::Object(map) => map.values().for_each(|v| strings(v, f)),
        _ => {}
    }
}

/// The string with each volatile value masked by its shape, and the values per shape.
fn mask(s: &str) -> (String, Vec<(Shape, String)>) {
    let mut out = String::with_capacity(s.len());
    let mut found = Vec::new();
    let mut last = 0;
    for caps in VOLATILE.captures_iter(s) {
        let Some((shape, token)) = Shape::of(&caps) else {
            continue;
        };
        let m = caps.get(0).expect("group 0");
        out.push_str(&s[last..m.start()]);
        out.push_str(&format!("\u{0}{shape:?}{token}\u{0}"));
        found.push((shape, m.as_str().to_string()));
        last = m.end();
    }
    out.push_str(&s[last..]);
    (out, found)
}

/// When two strings differ only in volatile values: the shapes that differ, and whether each
/// string is one such value whole.
fn volatile_between(s: &str, t: &str) -> Option<(Vec<Shape>, bool)> {
    let ((ms, fs), (mt, ft)) = (mask(s), mask(t));
    if ms != mt || fs.len() != ft.len() {
        return None;
    }
    let mut shapes: Vec<Shape> = fs
        .iter()
        .zip(&ft)
        .filter(|(a, b)| a.1 != b.1)
        .map(|(a, _)| a.0)
        .collect();
    shapes.sort();
    shapes.dedup();
    if shapes.is_empty() {
        return None;
    }
    let whole = fs.len() == 1 && fs[0].1 == s;
    Some((shapes, whole))
}

/// The shape of a string that is one volatile value and nothing else.
fn whole_shape(s: &str) -> Option<Shape> {
    let caps = VOLATILE.captures(s)?;
    let m = caps.get(0)?;
    if m.start() != 0 || m.end() != s.len() {
        return None;
    }
    Shape::of(&caps).map(|(shape, _)| shape)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(body: Value) -> Value {
        json!({"method": "POST", "path": "/v1/chat/completions", "query": null, "body": body})
    }

    fn verdict(a: Value, b: Value) -> Verdict {
        let (a, b) = (request(a), request(b));
        classify(&a, &b, &crate::differing_fields(&a, &b))
    }

    #[test]
    fn a_prompt_with_a_time_and_a_uuid_is_volatile_with_a_rule_per_shape() {
        let v = verdict(
            json!({"messages": [{"role": "user", "content": "At 2026-11-24T10:00:01.123456 order 0b9d3a52-63f5-4c1e-9a0c-7f3b2c1d4e5f"}]}),
            json!({"messages": [{"role": "user", "content": "At 2026-11-25T14:52:32.000001 order 5e4d3c2b-1a09-4f8e-b7d6-c5b4a3928170"}]}),
        );
        assert_eq!(v.class, Some(Class::Volatile));
        assert_eq!(v.fields[0].why, "a time and a UUID");
        assert_eq!(v.rules.len(), 2, "{:?}", v.rules);
        assert!(v.rules.iter().all(|r| matches!(r, Rule::Replace { .. })));
        assert!(v.rules[0].toml().contains("<TIME>"), "{:?}", v.rules);
        assert!(v.rules[1].toml().contains("<UUID>"), "{:?}", v.rules);
    }

    /// A date alone is what is asked: a prompt about 2025-06-30 is not the one about
    /// 2024-01-01. The rule a time suggests leaves bare dates alone.
    #[test]
    fn a_bare_date_is_semantic_and_the_time_rule_needs_a_time_of_day() {
        let v = verdict(
            request(json!("What happened on 2024-01-01?")),
            request(json!("What happened on 2025-06-30?")),
        );
        assert_eq!(v.class, Some(Class::Semantic), "{v:?}");
        assert!(v.rules.is_empty(), "{v:?}");

        let v = verdict(
            request(json!("It is 2024-01-01T10:00:00Z. On 2024-01-01, say hi")),
            request(json!("It is 2025-06-30T08:15:02Z. On 2024-01-01, say hi")),
        );
        assert_eq!(v.class, Some(Class::Volatile), "{v:?}");
        let Some(Rule::Replace { pattern, with }) = v.rules.first() else {
            panic!("{v:?}");
        };
        let rule = crate::key::ReplaceRule {
            pattern: pattern.clone(),
            replacement: with.clone(),
            tests: vec![],
        };
        let normalizer = crate::Normalizer::new(&[], &[rule]).unwrap();
        let test = crate::TestId::new("t");
        let keyed = |text: &str| {
            normalizer
                .for_test(&test)
                .request(
                    "POST",
                    "/",
                    None,
                    None,
                    json!({"q": text}).to_string().as_bytes(),
                    &[],
                )
                .body_value()
        };
        assert_eq!(
            keyed("It is 2025-06-30T08:15:02Z"),
            keyed("It is 2026-01-02 09:00")
        );
        assert_ne!(keyed("About 2025-06-30"), keyed("About 2024-01-01"));
    }

    #[test]
    fn a_whole_id_field_is_ignored_by_its_pointer() {
        let v = verdict(
            json!({"model": "m", "metadata": {"user_id": "4f1c2a9e-0000-4000-8000-0123456789ab"}}),
            json!({"model": "m", "metadata": {"user_id": "9a8b7c6d-1111-4111-9111-fedcba987654"}}),
        );
        assert_eq!(v.class, Some(Class::Volatile));
        assert_eq!(
            v.rules,
            vec![Rule::Ignore {
                pointer: "/metadata/user_id".into()
            }]
        );
        assert_eq!(v.rules[0].toml(), "ignore = ['/metadata/user_id']");
    }

    #[test]
    fn several_minted_ids_get_a_numbered_rule_with_their_prefix() {
        let v = verdict(
            json!({"messages": [{"role": "tool", "content": "made file-A1b2C3d4E5f6G7h8 and file-Z9y8X7w6V5u4T3s2"}]}),
            json!({"messages": [{"role": "tool", "content": "made file-Q1w2E3r4T5y6U7i8 and file-P0o9I8u7Y6t5R4e3"}]}),
        );
        assert_eq!(v.class, Some(Class::Volatile));
        assert_eq!(
            v.rules,
            vec![Rule::Replace {
                pattern: r"\bfile\-[A-Za-z0-9]{16}\b".into(),
                with: "<FILE_ID_{n}>".into()
            }]
        );
    }

    #[test]
    fn an_option_an_sdk_adds_is_sdk_shape_and_a_new_prompt_is_semantic() {
        let before =
            json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "Hi"}]});
        let mut with = before.clone();
        with["stream_options"] = json!({"include_usage": false});
        with["messages"][0]["cache_control"] = json!({"type": "ephemeral"});
        let v = verdict(before.clone(), with);
        assert_eq!(v.class, Some(Class::SdkShape), "{v:?}");
        assert!(v.rules.is_empty());

        let mut casing = before.clone();
        casing["maxTokens"] = json!(16);
        let mut snake = before.clone();
        snake["max_tokens"] = json!(16);
        assert_eq!(verdict(snake, casing).class, Some(Class::SdkShape));

        let mut explicit = before.clone();
        explicit["n"] = json!(1);
        explicit["tools"] = json!([]);
        assert_eq!(
            verdict(before.clone(), explicit).class,
            Some(Class::SdkShape)
        );

        let mut other = before.clone();
        other["messages"][0]["content"] = json!("Hello there");
        other["stream_options"] = json!({"include_usage": true});
        let v = verdict(before.clone(), other);
        assert_eq!(v.class, Some(Class::Semantic));
        assert_eq!(v.fields.len(), 2);

        let mut more = before.clone();
        more["temperature"] = json!(0.2);
        assert_eq!(verdict(before, more).class, Some(Class::Semantic));
    }

    /// A parameter that changes what the answer holds is semantic: an old answer would lack
    /// the usage chunk, the second choice, the logprobs or the JSON the new request gets.
    #[test]
    fn a_parameter_that_changes_what_the_answer_holds_is_semantic() {
        let before =
            json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "Hi"}]});
        for (key, value) in [
            ("stream_options", json!({"include_usage": true})),
            ("stream_options", json!({"include_obfuscation": false})),
            ("n", json!(2)),
            ("logprobs", json!(true)),
            ("top_logprobs", json!(3)),
            ("response_format", json!({"type": "json_object"})),
            (
                "tools",
                json!([{"type": "function", "function": {"name": "f"}}]),
            ),
        ] {
            let mut now = before.clone();
            now[key] = value.clone();
            let v = verdict(before.clone(), now);
            assert_eq!(v.class, Some(Class::Semantic), "{key}: {value}: {v:?}");
        }
        let mut streams = before.clone();
        streams.as_object_mut().unwrap().remove("stream");
        assert_eq!(
            verdict(streams, before.clone()).class,
            Some(Class::Semantic)
        );
        let mut nested = before.clone();
        nested["stream_options"] = json!({});
        let mut usage = before.clone();
        usage["stream_options"] = json!({"include_usage": true});
        assert_eq!(verdict(nested, usage).class, Some(Class::Semantic));
    }

    #[test]
    fn a_value_that_moves_between_runs_is_replaced_between_its_words() {
        let rule = between_runs(&[
            "Tell me about xkqzvbnm please",
            "Tell me about plmoknij please",
            "Tell me about qawsedrf please",
        ])
        .unwrap();
        let Rule::Replace { pattern, with } = &rule else {
            panic!("{rule:?}")
        };
        assert_eq!(pattern, r"(Tell me about )[a-z]{8}( please)");
        let re = Regex::new(pattern).unwrap();
        assert_eq!(
            re.replace_all("Tell me about zzzzzzzz please", with.as_str()),
            "Tell me about <VALUE> please"
        );
        // Two runs of changes, or signs inside one: no narrow rule.
        assert_eq!(between_runs(&["a 1 b 2", "a 3 b 4"]), None);
        assert_eq!(between_runs(&["id: a-b", "id: c-d"]), None);
    }

    #[test]
    fn words_that_look_like_ids_are_not_volatile() {
        for (a, b) in [
            ("a well-established fact", "a well-organised fact"),
            ("decade facade", "accede efface"),
            ("Summarise chapter 1", "Summarise chapter 2"),
        ] {
            let v = verdict(json!({"prompt": a}), json!({"prompt": b}));
            assert_eq!(v.class, Some(Class::Semantic), "{a} / {b}");
        }
    }
}
