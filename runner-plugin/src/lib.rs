//! What runs inside a test's process tree: the nextest target runner that points each test at
//! the daemon (`cargo-llmreplay __runner`), the per-test base URL, helpers that give a test its
//! id under plain `cargo test`, and `fault()` for a test's own faults. No async runtime: the
//! runner must start in microseconds.
#![warn(missing_docs)]

mod fault;
mod runner;

pub use fault::{clear_faults, fault, Fault};
pub use runner::{
    daemon_env, run, Capture, Replay, CAPTURE_BUNDLE_ENV, CAPTURE_CA_ENV, CHAIN_RUNNER_ENV,
    DAEMON_URL_ENV, PLACEHOLDERS_ENV, PLACEHOLDER_KEY, PROXY_SECRET_ENV, RAN_FILE_ENV,
    RUNNER_FAILED, SETTLE_ENV,
};

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

/// This process's test id from the variables nextest sets in every test process.
pub fn nextest_test_id() -> Option<String> {
    let binary = std::env::var("NEXTEST_BINARY_ID").ok()?;
    let name = std::env::var("NEXTEST_TEST_NAME").ok()?;
    Some(format!("{binary}${name}"))
}

/// A test id as nextest would give it, `<binary id>$<test name>`, for the test running on this
/// thread under plain `cargo test` (libtest names each test's thread after the test). Under
/// `cargo llmreplay test`, `LLMREPLAY_TEST_ID` (set by the runner) or nextest's own variables
/// win. Use [`test_id!`] to fill in the binary id.
pub fn thread_test_id(binary_id: &str) -> Option<String> {
    if let Ok(id) = std::env::var("LLMREPLAY_TEST_ID") {
        return Some(id);
    }
    if let Some(id) = nextest_test_id() {
        return Some(id);
    }
    let thread = std::thread::current();
    let name = thread.name().filter(|n| *n != "main")?;
    Some(format!("{binary_id}${name}"))
}

/// nextest's binary id of the calling crate: `my-crate` for unit tests of its library,
/// `my-crate::chat` for the integration test `tests/chat.rs`.
pub fn binary_id(package: &str, crate_name: &str) -> String {
    if crate_name == package.replace('-', "_") {
        package.to_string()
    } else {
        format!("{package}::{crate_name}")
    }
}

/// The current test's id, as nextest names it, under nextest or plain `cargo test`:
/// `llmreplay_runner::test_id!()`. `None` outside a test thread.
#[macro_export]
macro_rules! test_id {
    () => {
        $crate::thread_test_id(&$crate::binary_id(
            env!("CARGO_PKG_NAME"),
            env!("CARGO_CRATE_NAME"),
        ))
    };
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

    #[test]
    fn binary_ids_follow_nextest() {
        assert_eq!(binary_id("my-crate", "my_crate"), "my-crate");
        assert_eq!(binary_id("my-crate", "chat"), "my-crate::chat");
    }

    #[test]
    fn thread_names_are_test_names() {
        // libtest names this thread `tests::thread_names_are_test_names`, unless nextest runs it.
        let id = test_id!().unwrap();
        if std::env::var_os("LLMREPLAY_TEST_ID").is_none() {
            assert!(id.ends_with("$tests::thread_names_are_test_names"), "{id}");
            assert!(id.starts_with("llmreplay-runner$"), "{id}");
        }
    }
}
