//! The part of nextest's filterset language that makes sense over test ids
//! (`<binary id>$<test name>`), for `rerun -E` and the `[[faults]]` of `llmreplay.toml`: `test()`, `binary_id()`, `binary()`,
//! `package()`, `all()`, `none()`, with `=exact`, `~contains`, `/regex/` and `#glob` matchers,
//! combined with `|`/`or`, `&`/`and`, `-` (and not), `not`/`!` and parentheses.

use crate::TestId;
use regex::Regex;

/// Why a filterset does not parse; each says what was expected.
#[derive(Debug, thiserror::Error)]
pub enum FilterError {
    /// Not the filterset language.
    #[error("in the filter {expr:?} at character {at}: expected {wanted}. Supported: test(), binary_id(), binary(), package(), all(), none(), with =, ~, /regex/ or #glob, and |, &, -, not, ( )")]
    Syntax {
        /// The filterset.
        expr: String,
        /// Where, from 1.
        at: usize,
        /// What was expected there.
        wanted: &'static str,
    },
    /// A predicate of nextest's that recorded tests do not have.
    #[error("the filter predicate {0}() does not apply to recorded tests; use test(), binary_id(), binary(), package(), all() or none()")]
    Predicate(String),
    /// A `/regex/` that does not compile.
    #[error("bad regex {pattern}: {source}")]
    Regex {
        /// The matcher, as written.
        pattern: String,
        /// The regex crate's error.
        source: regex::Error,
    },
    /// A `#glob` that does not compile.
    #[error(transparent)]
    Glob(#[from] crate::glob::GlobError),
}

#[derive(Debug)]
/// A nextest filterset, as `[[faults]]` selects tests with it.
pub enum Filter {
    /// `all()`.
    All,
    /// `none()`.
    None,
    /// `test(...)`: the test's name.
    Test(Matcher),
    /// `binary_id(...)`.
    BinaryId(Matcher),
    /// `binary(...)`.
    Binary(Matcher),
    /// `package(...)`.
    Package(Matcher),
    /// `not` / `!`.
    Not(Box<Filter>),
    /// `and` / `&`.
    And(Box<Filter>, Box<Filter>),
    /// `or` / `|`.
    Or(Box<Filter>, Box<Filter>),
}

#[derive(Debug)]
/// How a predicate matches a name.
pub enum Matcher {
    /// `=name`: the whole name.
    Equal(String),
    /// `~name` (or bare, for `test`): a part of it.
    Contains(String),
    /// `/regex/`.
    Regex(Regex),
    /// `#glob`.
    Glob(crate::glob::GlobMatcher),
}

impl Matcher {
    fn matches(&self, s: &str) -> bool {
        match self {
            Matcher::Equal(x) => s == x,
            Matcher::Contains(x) => s.contains(x.as_str()),
            Matcher::Regex(r) => r.is_match(s),
            Matcher::Glob(g) => g.is_match(s),
        }
    }

    fn parse(arg: &str, contains_by_default: bool) -> Result<Matcher, FilterError> {
        let glob = |g: &str| -> Result<Matcher, FilterError> {
            Ok(crate::glob::glob(g, crate::glob::Separator::Any).map(Matcher::Glob)?)
        };
        if let Some(x) = arg.strip_prefix('=') {
            Ok(Matcher::Equal(x.to_string()))
        } else if let Some(x) = arg.strip_prefix('~') {
            Ok(Matcher::Contains(x.to_string()))
        } else if let Some(x) = arg.strip_prefix('#') {
            glob(x)
        } else if arg.len() >= 2 && arg.starts_with('/') && arg.ends_with('/') {
            Regex::new(&arg[1..arg.len() - 1])
                .map(Matcher::Regex)
                .map_err(|source| FilterError::Regex {
                    pattern: arg.to_string(),
                    source,
                })
        } else if contains_by_default {
            Ok(Matcher::Contains(arg.to_string()))
        } else {
            glob(arg)
        }
    }
}

impl Filter {
    /// Parses a filterset; the error says where and what was expected.
    pub fn parse(expr: &str) -> Result<Filter, FilterError> {
        let mut p = Parser { s: expr, at: 0 };
        let f = p.or()?;
        p.skip_space();
        if p.at < p.s.len() {
            return Err(p.error("an operator (|, &, -) or the end"));
        }
        Ok(f)
    }

    /// Whether the test id `<binary id>$<name>` (or an `X-Test-Id` without `$`) matches.
    pub fn matches(&self, test_id: &TestId) -> bool {
        let (binary_id, name) = (test_id.binary().unwrap_or(""), test_id.name());
        let package = binary_id.split("::").next().unwrap_or("");
        let binary = binary_id.split_once("::").map_or(package, |(_, b)| b);
        match self {
            Filter::All => true,
            Filter::None => false,
            Filter::Test(m) => m.matches(name),
            Filter::BinaryId(m) => m.matches(binary_id),
            Filter::Binary(m) => m.matches(binary),
            Filter::Package(m) => m.matches(package),
            Filter::Not(f) => !f.matches(test_id),
            Filter::And(a, b) => a.matches(test_id) && b.matches(test_id),
            Filter::Or(a, b) => a.matches(test_id) || b.matches(test_id),
        }
    }
}

struct Parser<'a> {
    s: &'a str,
    at: usize,
}

impl Parser<'_> {
    fn rest(&self) -> &str {
        &self.s[self.at..]
    }

    fn skip_space(&mut self) {
        let trimmed = self.rest().trim_start();
        self.at = self.s.len() - trimmed.len();
    }

    fn error(&self, wanted: &'static str) -> FilterError {
        FilterError::Syntax {
            expr: self.s.to_string(),
            at: self.at + 1,
            wanted,
        }
    }

    /// Eats `word` when it comes next as a whole word or symbol.
    fn eat(&mut self, word: &str) -> bool {
        self.skip_space();
        let rest = self.rest();
        if !rest.starts_with(word) {
            return false;
        }
        let alpha = word.chars().all(|c| c.is_ascii_alphabetic());
        let next = rest[word.len()..].chars().next();
        if alpha && next.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            return false;
        }
        self.at += word.len();
        true
    }

    fn or(&mut self) -> Result<Filter, FilterError> {
        let mut left = self.and()?;
        while self.eat("|") || self.eat("or") {
            left = Filter::Or(Box::new(left), Box::new(self.and()?));
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<Filter, FilterError> {
        let mut left = self.unary()?;
        loop {
            if self.eat("&") || self.eat("and") {
                left = Filter::And(Box::new(left), Box::new(self.unary()?));
            } else if self.eat("-") {
                let right = Filter::Not(Box::new(self.unary()?));
                left = Filter::And(Box::new(left), Box::new(right));
            } else {
                return Ok(left);
            }
        }
    }

    fn unary(&mut self) -> Result<Filter, FilterError> {
        if self.eat("not") || self.eat("!") {
            return Ok(Filter::Not(Box::new(self.unary()?)));
        }
        if self.eat("(") {
            let inner = self.or()?;
            if !self.eat(")") {
                return Err(self.error("a closing parenthesis"));
            }
            return Ok(inner);
        }
        self.atom()
    }

    fn atom(&mut self) -> Result<Filter, FilterError> {
        self.skip_space();
        let name: String = self
            .rest()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            return Err(self.error("a predicate such as test(=name)"));
        }
        self.at += name.len();
        if !self.eat("(") {
            return Err(self.error("( after the predicate's name"));
        }
        // A regex may hold parentheses: it runs to "/)".
        let rest = self.rest();
        let end = match rest.strip_prefix('/') {
            Some(regex) => regex.find("/)").map(|i| i + 2),
            None => rest.find(')'),
        };
        let Some(end) = end else {
            return Err(self.error("the predicate's closing parenthesis"));
        };
        let arg = rest[..end].trim().to_string();
        self.at += end + 1;
        let matcher = |contains: bool| Matcher::parse(&arg, contains);
        Ok(match name.as_str() {
            "all" => Filter::All,
            "none" => Filter::None,
            "test" => Filter::Test(matcher(true)?),
            "binary_id" => Filter::BinaryId(matcher(false)?),
            "binary" => Filter::Binary(matcher(false)?),
            "package" => Filter::Package(matcher(false)?),
            other => return Err(FilterError::Predicate(other.to_string())),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(expr: &str, id: &str) -> bool {
        Filter::parse(expr).unwrap().matches(&TestId::new(id))
    }

    #[test]
    fn predicates_matchers_and_operators() {
        let id = "my-crate::chat$streams_reply";
        assert!(m("test(=streams_reply)", id));
        assert!(!m("test(=streams)", id));
        assert!(m("test(streams)", id));
        assert!(m("test(/^str.*y$/)", id));
        assert!(m("test(/(a|r)eply/)", id));
        assert!(m("package(my-crate)", id));
        assert!(m("binary(chat)", id));
        assert!(m("binary_id(my-crate::*)", id));
        assert!(!m("binary_id(my-crate)", id));
        assert!(m("test(=x) | test(reply)", id));
        assert!(!m("test(reply) & not package(my-crate)", id));
        assert!(!m("all() - test(reply)", id));
        assert!(m("!(test(=a) or test(=b)) and all()", id));
        assert!(m("test(=plain)", "plain"), "an X-Test-Id without $");
    }

    #[test]
    fn errors_say_where_and_what() {
        let e = Filter::parse("test(=a) |").unwrap_err();
        assert!(e.to_string().contains("character 11"), "{e}");
        assert!(Filter::parse("platform(host)")
            .unwrap_err()
            .to_string()
            .contains("does not apply"));
        assert!(Filter::parse("test(/(/)")
            .unwrap_err()
            .to_string()
            .contains("bad regex"));
        assert!(Filter::parse("test(=a").is_err());
    }
}
