//! Names people confuse, as distinct types: a test's id as nextest (or an `X-Test-Id` header)
//! gives it, the folder name derived from it, and a provider's name.

use regex::Regex;
use sha2::{Digest, Sha256};
use std::fmt;
use std::sync::LazyLock;

/// A test's id: nextest's `<binary-id>$<test-name>`, or whatever a client sent as `X-Test-Id`.
#[derive(
    Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct TestId(String);

impl TestId {
    /// The id used when a request names no test.
    pub const DEFAULT: &'static str = "default";

    /// Any text names a test: ids come from nextest, a header or a path.
    pub fn new(id: impl Into<String>) -> Self {
        TestId(id.into())
    }

    /// The id nextest gives a test: its binary's id and its name, joined by `$`.
    pub fn nextest(binary: &str, name: &str) -> Self {
        TestId(format!("{binary}${name}"))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether nextest named the test (`<binary-id>$<test-name>`), rather than a client.
    pub fn is_nextest(&self) -> bool {
        self.0.contains('$')
    }

    /// The nextest binary id of a test nextest named.
    pub fn binary(&self) -> Option<&str> {
        self.0.split_once('$').map(|(binary, _)| binary)
    }

    /// The test's name within its binary; the whole id of one a client named.
    pub fn name(&self) -> &str {
        self.0.split_once('$').map_or(&self.0, |(_, name)| name)
    }
}

// Reads as the text it is wherever text is wanted (printing, matching a filter).
impl std::ops::Deref for TestId {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl From<&str> for TestId {
    fn from(id: &str) -> Self {
        TestId::new(id)
    }
}

impl From<String> for TestId {
    fn from(id: String) -> Self {
        TestId(id)
    }
}

impl From<TestId> for String {
    fn from(id: TestId) -> String {
        id.0
    }
}

impl PartialEq<&str> for TestId {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<String> for TestId {
    fn eq(&self, other: &String) -> bool {
        &self.0 == other
    }
}

impl PartialEq<str> for TestId {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

// Lets maps keyed by `TestId` be searched with a `&str`: same hash and equality as the string.
impl std::borrow::Borrow<str> for TestId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A test's cassette folder name, derived from its [`TestId`] in one place only.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Slug(String);

/// Longest slug kept whole; longer ones are cut and given a hash suffix so they stay unique.
pub const MAX_SLUG_LEN: usize = 120;

// aimock drops a leading spec file name ("chat.spec.ts › ..."), as Playwright's title path
// joins it: teams moving from it keep their paths. A runner plugin's `file > suite > test`
// keeps its file, so two files' tests of one name stay apart.
static SPEC_FILE_PREFIX: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)^.*?\.(?:spec|test|e2e)\.(?:tsx|ts|jsx|js|mjs|cjs)(?:\s*›\s*|$)")
        .expect("static regex")
});
// The rule before 0.1.1, which dropped any spec file's name: only to find folders it named.
static LEGACY_SPEC_FILE_PREFIX: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)^.*?\.(?:spec|test|e2e)\.(?:tsx|ts|jsx|js|mjs|cjs)(?:\s*›\s*|\s+|$)")
        .expect("static regex")
});
static TITLE_SEPARATOR: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\s*[›>]\s*").expect("static regex"));

impl Slug {
    /// The rules README gives ("Cassettes"): `::`, `$`, `>` and `›` separate with `--`; letters
    /// of any script (after NFKC normalisation) and digits are kept, lowercased, with `_` and
    /// `-`; anything else becomes `-`; runs of three or more `-` become `--`; cut at 120 bytes
    /// plus a hash. A Playwright-style `X-Test-Id` (`file.spec.ts › suite › name`) follows
    /// aimock's rules, which these extend: its file prefix is dropped.
    pub fn from_test_id(id: &TestId) -> Slug {
        let normal: std::borrow::Cow<'_, str> = if id.as_str().is_ascii() {
            id.as_str().into()
        } else {
            unicode_normalization::UnicodeNormalization::nfkc(id.as_str())
                .collect::<String>()
                .into()
        };
        let separated = separate(&normal, &SPEC_FILE_PREFIX);
        let mapped = map_chars(&separated, true);
        let slug = finish(id, &mapped);
        // Names Windows keeps for devices: a folder of that name cannot be checked out there.
        let reserved = matches!(slug.0.as_str(), "con" | "prn" | "aux" | "nul")
            || (slug.0.len() == 4
                && (slug.0.starts_with("com") || slug.0.starts_with("lpt"))
                && slug.0.as_bytes()[3].is_ascii_digit());
        if reserved {
            return Slug(format!("{}_", slug.0));
        }
        slug
    }

    /// The folder name the rule before 0.1.1 gave `id` (ASCII only, every spec file's name
    /// dropped): where an older version kept this test's recordings, to move them from.
    pub fn legacy_from_test_id(id: &TestId) -> Slug {
        let separated = separate(id.as_str(), &LEGACY_SPEC_FILE_PREFIX);
        let mapped = map_chars(&separated, false);
        finish(id, &mapped)
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Each character as a folder name holds it: ASCII letters lowercased, digits, `_` and `-` as
/// they are, `$` as `--`; with `any_script`, letters of any script lowercased and a mark after
/// the letter it marks; everything else `-`.
fn map_chars(text: &str, any_script: bool) -> String {
    let mut mapped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            'A'..='Z' => mapped.push(c.to_ascii_lowercase()),
            'a'..='z' | '0'..='9' | '_' | '-' => mapped.push(c),
            '$' => mapped.push_str("--"),
            c if any_script && !c.is_ascii() && c.is_alphanumeric() => {
                mapped.extend(c.to_lowercase())
            }
            // A mark stays with the letter it marks; alone (a variation selector after an
            // emoji, a mark at the start) it would make a name no one can see.
            c if any_script
                && unicode_normalization::char::is_combining_mark(c)
                && mapped.chars().last().is_some_and(char::is_alphanumeric) =>
            {
                mapped.push(c)
            }
            _ => mapped.push('-'),
        }
    }
    mapped
}

/// The id with its title separators as `--`, and a spec file's name dropped where `prefix`
/// says so.
fn separate<'a>(id: &'a str, prefix: &Regex) -> std::borrow::Cow<'a, str> {
    // Neither pattern can match without one of these; a nextest id has none, and skips
    // compiling them (most of a millisecond, once per process).
    if !id.contains(['.', '›', '>']) {
        return id.into();
    }
    let stripped = prefix.replace(id, "");
    TITLE_SEPARATOR
        .replace_all(&stripped, "--")
        .into_owned()
        .into()
}

/// Runs of dashes collapsed and trimmed; an empty name is `default`; a long one cut (at a
/// character's boundary) and given a hash of the whole id.
fn finish(id: &TestId, mapped: &str) -> Slug {
    let mut slug = String::with_capacity(mapped.len());
    let mut dashes = 0;
    for c in mapped.chars() {
        if c == '-' {
            dashes += 1;
            continue;
        }
        push_dashes(&mut slug, dashes);
        dashes = 0;
        slug.push(c);
    }
    push_dashes(&mut slug, dashes);
    let trimmed = slug.trim_matches('-');
    let mut slug = if trimmed.is_empty() {
        TestId::DEFAULT.to_string()
    } else {
        trimmed.to_string()
    };
    if slug.len() > MAX_SLUG_LEN {
        let hash = Sha256::digest(id.as_str().as_bytes());
        let mut cut = MAX_SLUG_LEN;
        while !slug.is_char_boundary(cut) {
            cut -= 1;
        }
        slug.truncate(cut);
        slug.truncate(slug.trim_end_matches('-').len());
        slug.push_str(&format!("-{}", hex::encode(hash))[..9]);
    }
    Slug(slug)
}

// Lets maps keyed by `Slug` be searched with a folder's name, as for `TestId`.
impl std::borrow::Borrow<str> for Slug {
    fn borrow(&self) -> &str {
        &self.0
    }
}

fn push_dashes(out: &mut String, n: usize) {
    out.push_str(match n {
        0 => "",
        1 => "-",
        _ => "--",
    });
}

impl fmt::Display for Slug {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A provider's name as it appears in routes and cassette file names: `openai`, `anthropic`, ...
#[derive(
    Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(try_from = "String", into = "String")]
pub struct ProviderName(String);

impl TryFrom<String> for ProviderName {
    type Error = String;
    fn try_from(name: String) -> Result<Self, String> {
        ProviderName::new(&name).ok_or_else(|| {
            format!("{name:?} is not a provider name (lowercase letters, digits, '-', '_')")
        })
    }
}

impl std::ops::Deref for ProviderName {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl From<ProviderName> for String {
    fn from(name: ProviderName) -> String {
        name.0
    }
}

impl ProviderName {
    /// Accepts `[a-z0-9_.-]+` that starts with a letter or digit and has no `..`, so the name
    /// is safe as a path segment and a file name; a host's name is one (a call the daemon
    /// captured as a proxy is `<test>/<host>.json`).
    pub fn new(name: &str) -> Option<Self> {
        let ok = name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
            && !name.contains("..")
            && name.bytes().all(|b| {
                b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'-' | b'.')
            });
        ok.then(|| ProviderName(name.to_string()))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ProviderName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn slug(id: &str) -> String {
        Slug::from_test_id(&TestId::new(id)).0
    }

    #[test]
    fn nextest_ids() {
        assert_eq!(
            slug("my-crate::chat$streams_reply"),
            "my-crate--chat--streams_reply"
        );
        assert_eq!(slug("my-crate$Top_Level"), "my-crate--top_level");
        assert_eq!(slug("a::b::c$mod::x"), "a--b--c--mod--x");
        assert_eq!(slug("crate/bin::it$a.b c"), "crate-bin--it--a-b-c");
    }

    #[test]
    fn aimock_ids_match_aimock() {
        // Expected values computed with aimock 1.43's slugifyTestId.
        assert_eq!(
            slug("tests/chat.spec.ts › Chat › streams a reply"),
            "chat--streams-a-reply"
        );
        assert_eq!(slug("Suite > My Test!"), "suite--my-test");
        assert_eq!(slug("  hello world  "), "hello-world");
        assert_eq!(slug("a---b"), "a--b");
    }

    #[test]
    fn long_ids_are_cut_and_hashed() {
        let id = format!("crate$it_{}", "x".repeat(200));
        let other = format!("crate$it_{}y", "x".repeat(200));
        let (a, b) = (slug(&id), slug(&other));
        assert_eq!(a.len(), MAX_SLUG_LEN + 9);
        assert_ne!(a, b, "the hash keeps cut slugs apart");
        assert!(a.starts_with("crate--it_xxx"));
    }

    /// A runner plugin's id keeps its file: two files' tests of one name are two folders.
    #[test]
    fn plugin_ids_keep_their_file() {
        assert_eq!(
            slug("app.test.js > app > greets"),
            "app-test-js--app--greets"
        );
        assert_ne!(
            slug("a.test.js > app > works"),
            slug("b.test.js > app > works")
        );
        assert_eq!(
            slug("test/chat.test.mjs > chat > hello"),
            "test-chat-test-mjs--chat--hello"
        );
        assert_eq!(
            Slug::legacy_from_test_id(&TestId::new("app.test.js > app > greets")).0,
            "app--greets"
        );
    }

    /// Letters of any script stay (normalised, lowercased): titles in Japanese, Chinese or
    /// Cyrillic are folders of their own, not `default`.
    #[test]
    fn letters_of_any_script_stay() {
        assert_eq!(slug("chat.test.js > 挨拶する"), "chat-test-js--挨拶する");
        assert_eq!(
            slug("chat.test.js > Приветствие"),
            "chat-test-js--приветствие"
        );
        assert_ne!(slug("a.test.js > 你好"), slug("a.test.js > 再见"));
        // NFKC: fullwidth letters are the ASCII ones; a decomposed é is the composed one.
        assert_eq!(slug("Ｔｅｓｔ"), "test");
        assert_eq!(slug("cafe\u{301}"), slug("caf\u{e9}"));
        // A mark stays with its letter (Devanagari vowel signs); alone it goes.
        assert_eq!(slug("परीक्षण"), "परीक्षण");
        assert_eq!(slug("❤\u{fe0f} test"), "test");
        assert_eq!(slug("\u{301}x"), "x");
        // Windows' device names get a mark of their own.
        assert_eq!(slug("CON"), "con_");
        assert_eq!(slug("lpt1"), "lpt1_");
        assert_eq!(slug("console"), "console");
        assert_eq!(
            Slug::legacy_from_test_id(&TestId::new("x.test.js > 挨拶する")).0,
            "default"
        );
        // Cut at a character's boundary, hashed.
        let long = format!("t > {}", "挨".repeat(100));
        let s = slug(&long);
        assert!(s.len() <= MAX_SLUG_LEN + 9, "{s}");
        assert!(s.starts_with("t--挨挨"));
    }

    #[test]
    fn empty_id_has_a_folder() {
        assert_eq!(slug("$$$"), "default");
    }

    proptest! {
        #[test]
        fn slugs_are_safe_folder_names(id in "\\PC{0,300}") {
            let s = slug(&id);
            prop_assert!(!s.is_empty() && s.len() <= MAX_SLUG_LEN + 9);
            prop_assert!(s.chars().all(|c| c.is_alphanumeric()
                || unicode_normalization::char::is_combining_mark(c)
                || c == '_'
                || c == '-'));
            // No folder begins with a mark that is not itself a letter (one no one could see).
            let unseen = |c: char| {
                unicode_normalization::char::is_combining_mark(c) && !c.is_alphanumeric()
            };
            prop_assert!(!s.starts_with(unseen), "{s:?} begins with a mark");
            prop_assert!(!s.chars().any(|c| c.is_ascii_uppercase()));
            prop_assert!(!s.contains("---"));
            prop_assert!(!s.starts_with('-') && !s.ends_with('-'));
            prop_assert_eq!(slug(&id), s, "deterministic");
            let legacy = Slug::legacy_from_test_id(&TestId::new(id.as_str())).0;
            prop_assert!(legacy.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-'));
        }
    }
}
