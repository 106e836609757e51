//! What runs inside a test's process tree. For now: the per-test base URL, built the same way
//! the daemon parses it (`<base>/t/<percent-encoded test id>`). The nextest target runner that
//! sets it for every test comes with `cargo llmreplay test`.

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

/// Everything but unreserved URL characters is encoded, so `::`, `$` and `/` in a test id can
/// never be read as path separators.
const TEST_ID: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// `<root>/t/<test id, percent-encoded>`: the value of `LLMREPLAY_BASE_URL` for one test.
pub fn test_base_url(root: &str, test_id: &str) -> String {
    format!(
        "{}/t/{}",
        root.trim_end_matches('/'),
        utf8_percent_encode(test_id, TEST_ID)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_one_path_segment() {
        assert_eq!(
            test_base_url("http://127.0.0.1:9/", "my-crate::chat$streams/reply"),
            "http://127.0.0.1:9/t/my-crate%3A%3Achat%24streams%2Freply"
        );
    }
}
