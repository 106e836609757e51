//! Which test a request belongs to, decided the same way on every route, the faults route
//! included (README, "Identifying a connection's test"): the path's `/t/<id>/`, else the
//! `X-Test-Id` header (percent-encoded allowed), else the process at the other end of the
//! connection, else `default`. The proxy names its test in its credentials, before the process.

use crate::{Conn, State};
use cassettes::TestId;
use percent_encoding::percent_decode_str;
use std::sync::Arc;

/// The test id of a path's `/t/<id>/` segment, percent-decoded.
pub(crate) fn path_id(encoded: &str) -> Result<TestId, String> {
    percent_decode_str(encoded)
        .decode_utf8()
        .map(TestId::new)
        .map_err(|_| {
            format!(
                "cargo-llmreplay: the test id in /t/{encoded}/ is not UTF-8 once percent-decoded"
            )
        })
}

/// The `X-Test-Id` header as text; refused when it is not UTF-8 (a Playwright title has `›`;
/// anything that is not text cannot name a folder).
pub(crate) fn header(headers: &http::HeaderMap) -> Result<Option<&str>, String> {
    match headers.get("x-test-id").map(|v| std::str::from_utf8(v.as_bytes())) {
        None => Ok(None),
        Some(Ok(id)) => Ok(Some(id)),
        Some(Err(_)) => Err("cargo-llmreplay: the X-Test-Id header is not UTF-8; send the test's name as UTF-8 text (or percent-encoded in the /t/<test id>/ path)".into()),
    }
}

/// The test an `X-Test-Id` header names: percent-decoded, since headers are ASCII for most
/// clients (httpx refuses anything else); none when it is empty.
pub(crate) fn header_id(raw: Option<&str>) -> Result<Option<TestId>, String> {
    let Some(raw) = raw.filter(|h| !h.is_empty()) else {
        return Ok(None);
    };
    percent_decode_str(raw)
        .decode_utf8()
        .map(|id| Some(TestId::new(id)))
        .map_err(|_| "cargo-llmreplay: the X-Test-Id header is not UTF-8 once percent-decoded; send the test's name as UTF-8, percent-encoded".into())
}

/// The test of a request that names none itself: the one its connection's process runs, else
/// `default` (which the report names).
pub(crate) async fn unnamed(state: &Arc<State>, conn: &Conn) -> TestId {
    match conn.peer_test(state).await {
        Some(test) => test,
        None => TestId::new(TestId::DEFAULT),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_headers_are_percent_decoded_and_text_only() {
        assert_eq!(path_id("k%3A%3At%24x").unwrap().as_str(), "k::t$x");
        assert!(path_id("%FF").is_err());
        assert_eq!(
            header_id(Some("suite %E2%80%BA one"))
                .unwrap()
                .unwrap()
                .as_str(),
            "suite \u{203a} one"
        );
        assert_eq!(header_id(Some("")).unwrap(), None);
        assert!(header_id(Some("%FF")).is_err());
        let mut headers = http::HeaderMap::new();
        headers.insert("x-test-id", http::HeaderValue::from_bytes(b"\xff").unwrap());
        assert!(header(&headers).is_err());
    }
}
