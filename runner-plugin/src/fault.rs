//! `llmreplay_runner::fault()`: a test asks the daemon to fail some of its own requests, to test
//! its retry and error handling (a 429 with `retry-after`, a 500, a stream cut short, a slow or
//! malformed answer). Std only: one request over a plain socket to the test's own base URL.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A fault being described; `register` sends it. The default is one fault, on the first
/// request to any provider.
#[derive(Clone, Debug, Default)]
pub struct Fault {
    provider: Option<String>,
    after: u64,
    times: Option<String>,
    kind: Option<String>,
    headers: Vec<(String, String)>,
    body: Option<String>,
}

/// Starts describing a fault for the current test's requests.
pub fn fault() -> Fault {
    Fault::default()
}

/// Removes every fault of the current test.
pub fn clear_faults() -> std::io::Result<()> {
    send("DELETE", &base_url()?, "").map(|_| ())
}

impl Fault {
    /// Only requests to this provider (`openai`, `anthropic`, a gateway's name...).
    pub fn provider(mut self, name: &str) -> Self {
        self.provider = Some(name.to_string());
        self
    }

    /// Lets this many matching requests through first.
    pub fn after(mut self, requests: u64) -> Self {
        self.after = requests;
        self
    }

    /// Fails this many matching requests (1 by default).
    pub fn times(mut self, n: u64) -> Self {
        self.times = Some(n.to_string());
        self
    }

    /// Fails every matching request from `after` on.
    pub fn always(mut self) -> Self {
        self.times = Some("\"always\"".into());
        self
    }

    /// Answers this status, with the provider's own error body unless `body` says otherwise.
    pub fn status(mut self, code: u16) -> Self {
        self.kind = Some(format!("\"status\":{code}"));
        self
    }

    /// A header of the status answer, e.g. `retry-after`.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    /// The body of the status answer, as JSON text.
    pub fn body(mut self, json: &str) -> Self {
        self.body = Some(json.to_string());
        self
    }

    /// Sends the first `chunks` chunks of the answer, then cuts the connection.
    pub fn disconnect_after(mut self, chunks: usize) -> Self {
        self.kind = Some(format!("\"disconnect\":{{\"after_chunks\":{chunks}}}"));
        self
    }

    /// Waits this long before the first byte of the answer.
    pub fn delay_ms(mut self, ms: u64) -> Self {
        self.kind = Some(format!("\"delay_ms\":{ms}"));
        self
    }

    /// Answers a body that is not valid JSON, or a stream with a broken event.
    pub fn malformed(mut self) -> Self {
        self.kind = Some("\"malformed\":true".into());
        self
    }

    /// The fault as the daemon takes it.
    pub fn to_json(&self) -> String {
        let mut fields = Vec::new();
        if let Some(p) = &self.provider {
            fields.push(format!("\"provider\":{}", json_string(p)));
        }
        fields.push(format!("\"after\":{}", self.after));
        if let Some(t) = &self.times {
            fields.push(format!("\"times\":{t}"));
        }
        if let Some(k) = &self.kind {
            fields.push(k.clone());
        }
        if !self.headers.is_empty() {
            let h: Vec<String> = self
                .headers
                .iter()
                .map(|(k, v)| format!("{}:{}", json_string(k), json_string(v)))
                .collect();
            fields.push(format!("\"headers\":{{{}}}", h.join(",")));
        }
        if let Some(b) = &self.body {
            fields.push(format!("\"body\":{b}"));
        }
        format!("{{{}}}", fields.join(","))
    }

    /// Registers the fault for the current test (`LLMREPLAY_BASE_URL`); returns its id.
    pub fn register(self) -> std::io::Result<u64> {
        self.register_at(&base_url()?)
    }

    /// Registers the fault for the test whose per-test base URL is `base`, for clients that
    /// build it themselves (`test_base_url`, under plain `cargo test`).
    pub fn register_at(self, base: &str) -> std::io::Result<u64> {
        let answer = send("POST", base, &self.to_json())?;
        let id = answer
            .split("\"id\":")
            .nth(1)
            .map(|rest| {
                rest.chars()
                    .take_while(char::is_ascii_digit)
                    .collect::<String>()
            })
            .and_then(|n| n.parse().ok());
        id.ok_or_else(|| {
            std::io::Error::other(format!("the daemon did not take the fault: {answer}"))
        })
    }
}

/// The test's base URL: `LLMREPLAY_BASE_URL` as the runner sets it (`<root>/t/<id>`), or, when
/// one base URL serves the whole run (Linux, no target runner), that root with this test's id
/// as nextest names it.
fn base_url() -> std::io::Result<String> {
    let base = std::env::var("LLMREPLAY_BASE_URL").map_err(|_| {
        std::io::Error::other(
            "LLMREPLAY_BASE_URL is not set: run the test under `cargo llmreplay test`, or use register_at with the test's base URL",
        )
    })?;
    if base.contains("/t/") {
        return Ok(base);
    }
    match crate::nextest_test_id() {
        Some(id) => Ok(crate::test_base_url(&base, &id)),
        None => Ok(base),
    }
}

/// `METHOD <base>/__llmreplay/faults` with a JSON body; the answer's body, or an error with
/// the daemon's message for any status but 200 and 201.
fn send(method: &str, base: &str, body: &str) -> std::io::Result<String> {
    let rest = base
        .strip_prefix("http://")
        .ok_or_else(|| std::io::Error::other(format!("{base} is not an http:// URL")))?;
    let (addr, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        stream,
        "{method} {path}/__llmreplay/faults HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    let status = answer.get(9..12).unwrap_or("");
    let body = answer
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    if status == "200" || status == "201" {
        Ok(body)
    } else {
        Err(std::io::Error::other(format!(
            "the daemon answered {status}: {body}"
        )))
    }
}

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_the_json_the_daemon_takes() {
        let f = fault()
            .provider("openai")
            .after(1)
            .times(2)
            .status(429)
            .header("retry-after", "0.01")
            .body("{\"error\":{\"message\":\"slow \\\"down\\\"\"}}");
        assert_eq!(
            f.to_json(),
            r#"{"provider":"openai","after":1,"times":2,"status":429,"headers":{"retry-after":"0.01"},"body":{"error":{"message":"slow \"down\""}}}"#
        );
        assert_eq!(
            fault().always().disconnect_after(3).to_json(),
            r#"{"after":0,"times":"always","disconnect":{"after_chunks":3}}"#
        );
    }
}
