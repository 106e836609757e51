//! The one redaction every URL, query and header passes before it leaves the daemon in any
//! form: a cassette, the journal, the report, a log line, an error body or stderr. Secret query
//! parameters (every family's, their names percent-decoded) keep their name and lose their
//! value; userinfo in a URL (`https://user:TOKEN@gateway`) becomes `***`; secret headers are
//! shown as `***`.

use std::borrow::Cow;

/// What stands in for a secret.
pub const MASK: &str = "***";

/// Whether a query parameter's name (as sent, maybe percent-encoded) names a secret.
pub fn is_secret_param(raw_name: &str) -> bool {
    is_one_of(raw_name, crate::secret_params())
}

/// Whether a query parameter's name (as sent, maybe percent-encoded: `k%65y`) is one of
/// `secrets`, whatever its case: the one check that both keying and redaction make.
pub fn is_one_of(raw_name: &str, secrets: &[&str]) -> bool {
    let name = percent_encoding::percent_decode_str(raw_name).decode_utf8_lossy();
    let name = name.trim();
    secrets.iter().any(|s| s.eq_ignore_ascii_case(name))
}

/// Whether a header carries a key or a credential.
pub fn is_secret_header(name: &str) -> bool {
    crate::secret_headers()
        .iter()
        .any(|s| s.eq_ignore_ascii_case(name))
        || name.eq_ignore_ascii_case("x-amz-security-token")
}

/// A query string with the values of secret parameters masked; the rest as it was.
pub fn query(q: &str) -> Cow<'_, str> {
    if !q.split('&').any(|pair| is_secret_param(name_of(pair))) {
        return Cow::Borrowed(q);
    }
    let pairs: Vec<String> = q
        .split('&')
        .map(|pair| {
            let name = name_of(pair);
            if is_secret_param(name) {
                format!("{name}={MASK}")
            } else {
                pair.to_string()
            }
        })
        .collect();
    Cow::Owned(pairs.join("&"))
}

fn name_of(pair: &str) -> &str {
    pair.split('=').next().unwrap_or("")
}

/// A URL (absolute, or a path with a query) with its userinfo and secret query values masked.
pub fn url(u: &str) -> Cow<'_, str> {
    let (before_fragment, fragment) = match u.split_once('#') {
        Some((a, f)) => (a, Some(f)),
        None => (u, None),
    };
    let (head, q) = match before_fragment.split_once('?') {
        Some((h, q)) => (h, Some(q)),
        None => (before_fragment, None),
    };
    let head = userinfo(head);
    let q = q.map(query);
    if matches!(head, Cow::Borrowed(_)) && q.as_ref().is_none_or(|q| matches!(q, Cow::Borrowed(_)))
    {
        return Cow::Borrowed(u);
    }
    let mut out = head.into_owned();
    if let Some(q) = q {
        out.push('?');
        out.push_str(&q);
    }
    if let Some(f) = fragment {
        out.push('#');
        out.push_str(f);
    }
    Cow::Owned(out)
}

/// Free text (an error from a library, say) with every URL or query in it redacted: each
/// word that looks like one passes through [`url`].
pub fn text(s: &str) -> Cow<'_, str> {
    let suspicious = |w: &str| w.contains("://") || w.contains('?') || w.contains('=');
    if !s.split_whitespace().any(suspicious) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(start) = rest.find(|c: char| !c.is_whitespace()) {
        out.push_str(&rest[..start]);
        let word_len = rest[start..]
            .find(char::is_whitespace)
            .unwrap_or(rest.len() - start);
        let word = &rest[start..start + word_len];
        if suspicious(word) {
            // Punctuation around a URL or a pair, `(key=K)` or `"https://...",`, is not part of it.
            let core = word.trim_start_matches(['(', '[', '{', '"', '\'', '<', '`']);
            let core =
                core.trim_end_matches([')', ']', '}', '"', '\'', '>', '`', ',', ';', '.', ':']);
            let at = word.len()
                - word
                    .trim_start_matches(['(', '[', '{', '"', '\'', '<', '`'])
                    .len();
            out.push_str(&word[..at]);
            if core.contains("://") || core.contains('?') {
                out.push_str(&url(core));
            } else {
                out.push_str(&query(core));
            }
            out.push_str(&word[at + core.len()..]);
        } else {
            out.push_str(word);
        }
        rest = &rest[start + word_len..];
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// `scheme://user:pass@host/...` as `scheme://***@host/...`.
fn userinfo(head: &str) -> Cow<'_, str> {
    let Some(scheme_end) = head.find("://") else {
        return Cow::Borrowed(head);
    };
    let rest = &head[scheme_end + 3..];
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    match authority.rfind('@') {
        Some(at) => Cow::Owned(format!("{}{MASK}{}", &head[..scheme_end + 3], &rest[at..])),
        None => Cow::Borrowed(head),
    }
}

/// A header's value as it may be shown: masked when the header is a secret.
pub fn header<'a>(name: &str, value: &'a str) -> &'a str {
    if is_secret_header(name) {
        MASK
    } else {
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_userinfo_and_secret_values() {
        for (given, shown) in [
            (
                "https://user:TOKEN@gw.example:8443/v1?key=K&alt=sse",
                "https://***@gw.example:8443/v1?key=***&alt=sse",
            ),
            (
                "wss://h/ws?api_key=A&k%65y=B",
                "wss://h/ws?api_key=***&k%65y=***",
            ),
            (
                "/v1/realtime?model=m&ACCESS_TOKEN=T",
                "/v1/realtime?model=m&ACCESS_TOKEN=***",
            ),
            ("http://127.0.0.1:1/a@b?x=1", "http://127.0.0.1:1/a@b?x=1"),
            ("https://h/p?key=1#frag", "https://h/p?key=***#frag"),
            ("no url at all", "no url at all"),
        ] {
            assert_eq!(url(given), shown, "{given}");
        }
        assert!(matches!(url("https://h/p?model=x"), Cow::Borrowed(_)));
    }

    #[test]
    fn free_text_is_redacted_word_by_word() {
        assert_eq!(
            text("could not reach wss://u:p@h:1/x?key=K&a=1: refused (key=K2) \"api_key=K3\","),
            "could not reach wss://***@h:1/x?key=***&a=1: refused (key=***) \"api_key=***\","
        );
        assert!(matches!(text("nothing to hide here"), Cow::Borrowed(_)));
    }

    #[test]
    fn secret_headers_are_masked() {
        assert_eq!(header("Authorization", "Bearer sk"), MASK);
        assert_eq!(header("x-goog-api-key", "k"), MASK);
        assert_eq!(
            header("content-type", "application/json"),
            "application/json"
        );
    }
}
