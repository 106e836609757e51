//! The one glob matcher: `#glob` in filters (`rerun -E`, `[[faults]]`) and cargo's workspace
//! `members` patterns. globset does the matching; the two uses differ only in whether `*`
//! stops at `/`.

pub use globset::GlobMatcher;

/// Whether `*` and `?` match `/`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Separator {
    /// A path: `*` stays within one component, `**` crosses them (cargo's `members`).
    Literal,
    /// A name: `*` matches anything (test names and binary ids).
    Any,
}

/// A glob that does not compile.
#[derive(Debug, thiserror::Error)]
#[error("bad glob {pattern:?}: {source}")]
pub struct GlobError {
    /// The glob, as written.
    pub pattern: String,
    /// globset's error.
    pub source: globset::Error,
}

/// Compiles `pattern`; the error names what is wrong with it.
pub fn glob(pattern: &str, separator: Separator) -> Result<GlobMatcher, GlobError> {
    globset::GlobBuilder::new(pattern)
        .literal_separator(separator == Separator::Literal)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|source| GlobError {
            pattern: pattern.to_string(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_names() {
        let path = |p| glob(p, Separator::Literal).unwrap();
        assert!(path("crates/*").is_match("crates/a"));
        assert!(!path("crates/*").is_match("crates/a/b"));
        assert!(path("crates/**").is_match("crates/a/b"));
        assert!(path("tool?").is_match("tool1"));
        let name = |p| glob(p, Separator::Any).unwrap();
        assert!(name("chat::*").is_match("chat::tests::one"));
        assert!(name("my-crate::bin/*").is_match("my-crate::bin/x"));
        assert!(name("*").is_match("a/b"));
        assert!(glob("[", Separator::Any).is_err());
    }
}
