//! Where the tool's messages send people for more: pages of the book (`docs/src` of this
//! repository), named here once. A link is the page on the repository's web page, which shows
//! the Markdown as written, so that it opens for a user who installed the pip or npm package
//! and has no clone; a relative path would name a file only a clone has. A unit test checks
//! that every page and heading named here exists.

/// The book's pages on the repository's web page (the workspace's `repository`).
pub const BOOK: &str = concat!(env!("CARGO_PKG_REPOSITORY"), "/blob/main/docs/src/");

/// A request that found no recording, and what to do for each kind of miss.
pub const MISS: &str = "troubleshooting.md#no-recording-for-this-request";
/// A run that fails its gate, each reason with its fix.
pub const GATE: &str = "troubleshooting.md#the-run-fails-its-gate";
/// An upstream that refused the key (401, 403, 407) while recording.
pub const REFUSED_KEY: &str = "troubleshooting.md#the-upstream-answered-401-403-or-407-not-saved";
/// The base URLs each client reads, for a 404 on a path the provider's API does not have.
pub const PROVIDERS: &str = "reference/providers.md";
/// The book's first page, for the top-level help.
pub const INTRODUCTION: &str = "introduction.md";

/// The address of a page of the book (`page` as the constants above name it).
pub fn url(page: &str) -> String {
    format!("{BOOK}{page}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// mdbook's id of a heading: letters, digits, `_` and `-` lowercased, spaces as `-`.
    fn id(heading: &str) -> String {
        heading
            .chars()
            .filter_map(|c| match c {
                c if c.is_alphanumeric() || c == '_' || c == '-' => Some(c.to_ascii_lowercase()),
                c if c.is_whitespace() => Some('-'),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn every_page_a_message_names_exists_with_its_heading() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/src");
        for page in [MISS, GATE, REFUSED_KEY, PROVIDERS, INTRODUCTION] {
            let (file, anchor) = page.split_once('#').unwrap_or((page, ""));
            let text = std::fs::read_to_string(src.join(file))
                .unwrap_or_else(|e| panic!("docs/src/{file}, which a message names: {e}"));
            if !anchor.is_empty() {
                let ids: Vec<String> = text
                    .lines()
                    .filter_map(|l| l.strip_prefix("## "))
                    .map(|h| id(&h.replace('`', "")))
                    .collect();
                assert!(
                    ids.iter().any(|i| i == anchor),
                    "docs/src/{file} has no heading with the id #{anchor}, which a message names; its ids: {ids:?}"
                );
            }
        }
        assert!(
            url(MISS).starts_with("https://github.com/"),
            "{}",
            url(MISS)
        );
    }
}
