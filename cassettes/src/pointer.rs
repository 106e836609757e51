//! JSON pointers (RFC 6901), the one codec: `[match] ignore` rules, the request fields a
//! diff names, and `rerun --param`.

/// One reference token, escaped: `~` as `~0`, `/` as `~1`.
pub fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// One reference token read back: `~1` as `/`, `~0` as `~`.
pub fn unescape(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

/// A pointer made of these tokens.
pub fn join<'a>(tokens: impl IntoIterator<Item = &'a str>) -> String {
    tokens
        .into_iter()
        .map(|t| format!("/{}", escape(t)))
        .collect()
}

/// The tokens of `pointer`, unescaped. The error says what is wrong.
pub fn parse(pointer: &str) -> Result<Vec<String>, &'static str> {
    let rest = pointer
        .strip_prefix('/')
        .ok_or("a JSON pointer starts with '/', e.g. \"/metadata/request_id\"")?;
    rest.split('/')
        .map(|token| {
            let mut out = String::with_capacity(token.len());
            let mut chars = token.chars();
            while let Some(c) = chars.next() {
                if c != '~' {
                    out.push(c);
                    continue;
                }
                match chars.next() {
                    Some('0') => out.push('~'),
                    Some('1') => out.push('/'),
                    _ => return Err("'~' must be followed by 0 or 1 (RFC 6901 escapes)"),
                }
            }
            Ok(out)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let tokens = ["a/b", "c~d", "", "e"];
        let pointer = join(tokens);
        assert_eq!(pointer, "/a~1b/c~0d//e");
        assert_eq!(parse(&pointer).unwrap(), tokens);
        assert!(parse("a").is_err());
        assert!(parse("/a~2").is_err());
        assert_eq!(parse("/~01").unwrap(), ["~1"]);
    }
}
