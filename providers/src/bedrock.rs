//! Amazon Bedrock Runtime: Converse and ConverseStream (`/model/<id>/converse[-stream]`) and
//! InvokeModel (`/model/<id>/invoke[-with-response-stream]`, the model's own body). Requests
//! are SigV4-signed for the host the client called, so recording signs them again for the
//! real one (the daemon does, with the environment's credentials); the signing headers are
//! never stored. Streams are `application/vnd.amazon.eventstream` frames, kept as received;
//! their decoded payloads come here as JSON.

use crate::{args_text, count, header, str_at, Answer, Family, Kind, Tokens};
use serde_json::{json, Value};
use std::collections::BTreeMap;

pub struct Bedrock;

/// The request headers of SigV4: they sign for the daemon's host, never for the real one.
pub const SIGNING_HEADERS: &[&str] = &[
    "authorization",
    "x-amz-date",
    "x-amz-security-token",
    "x-amz-content-sha256",
];

impl Family for Bedrock {
    fn display_name(&self) -> &'static str {
        "Bedrock"
    }

    fn example_path(&self) -> Option<&'static str> {
        Some("/model/<model>/converse")
    }

    fn kind(&self) -> Kind {
        Kind::Bedrock
    }

    /// Per region: `https://bedrock-runtime.<region>.amazonaws.com`, from the environment.
    fn default_upstream(&self) -> Option<&'static str> {
        None
    }

    fn hosts(&self) -> &'static [&'static str] {
        &[
            "bedrock-runtime.*.amazonaws.com",
            "bedrock-runtime-fips.*.amazonaws.com",
        ]
    }

    fn owns_path(&self, path: &str) -> bool {
        path.starts_with("/model/")
            && [
                "/converse",
                "/converse-stream",
                "/invoke",
                "/invoke-with-response-stream",
            ]
            .iter()
            .any(|end| path.ends_with(end))
    }

    fn knows_path(&self, path: &str) -> bool {
        path.starts_with("/model/") || path.starts_with("/async-invoke")
    }

    fn secret_headers(&self) -> &'static [&'static str] {
        SIGNING_HEADERS
    }

    /// `https://bedrock-runtime.<region>.amazonaws.com`: `AWS_REGION`, else
    /// `AWS_DEFAULT_REGION`, else us-east-1.
    fn regional_upstream(&self, env: &dyn Fn(&str) -> Option<String>) -> Option<String> {
        let region = crate::first_env(env, &["AWS_REGION", "AWS_DEFAULT_REGION"], "us-east-1");
        Some(format!("https://bedrock-runtime.{region}.amazonaws.com"))
    }

    fn resigns_requests(&self) -> bool {
        true
    }

    /// The re-signed request carries the access key id and session token: only AWS's own
    /// hosts, over TLS, get it.
    fn may_receive_credentials(&self, https: bool, host: &str) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        https && (host == "amazonaws.com" || host.ends_with(".amazonaws.com"))
    }

    /// `/model/<id>/converse`, the id percent-encoded (`:` as `%3A`).
    fn model(&self, path: &str, _body: Option<&Value>) -> Option<String> {
        let id = path.strip_prefix("/model/")?.rsplit_once('/')?.0;
        Some(percent_decode(id))
    }

    fn set_model(&self, path: &mut String, _body: &mut Value, model: &str) {
        if let Some((_, action)) = path
            .strip_prefix("/model/")
            .and_then(|r| r.rsplit_once('/'))
        {
            *path = format!("/model/{}/{action}", model.replace(':', "%3A"));
        }
    }

    fn prompt(&self, body: &Value) -> Option<String> {
        // Converse: messages with content blocks; InvokeModel: the model's own body.
        let last = body
            .get("messages")?
            .as_array()?
            .iter()
            .rev()
            .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))?;
        match last.get("content")? {
            Value::String(s) => Some(s.clone()),
            Value::Array(blocks) => {
                let text: Vec<&str> = blocks
                    .iter()
                    .filter_map(|b| b.get("text").and_then(Value::as_str))
                    .collect();
                (!text.is_empty()).then(|| text.join("\n"))
            }
            _ => None,
        }
    }

    fn read(&self, p: &Value, a: &mut Answer) {
        // Converse's whole answer, and ConverseStream's messageStop event.
        a.finish(p.get("stopReason"));
        for block in p
            .pointer("/output/message/content")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            for kind in block.as_object().into_iter().flat_map(|o| o.keys()) {
                a.kind(kind);
            }
            if let Some(t) = block.get("text").and_then(Value::as_str) {
                a.text.push_str(t);
            }
            if let Some(tool) = block.get("toolUse") {
                a.tools.push((
                    str_at(tool, "name").unwrap_or_default(),
                    args_text(tool.get("input")),
                ));
            }
        }
        // ConverseStream's events: contentBlockStart (a tool), contentBlockDelta, metadata.
        // They carry `contentBlockIndex` and no `type`; Anthropic's own events (InvokeModel)
        // have a `type` and are Anthropic's to read.
        if p.get("type").is_some() || p.get("contentBlockIndex").is_none() {
            if let Some(u) = p.get("usage").filter(|u| u.get("inputTokens").is_some()) {
                a.usage = Some(u.clone());
            }
            return;
        }
        if let Some(tool) = p.pointer("/start/toolUse") {
            a.tools
                .push((str_at(tool, "name").unwrap_or_default(), String::new()));
        }
        if let Some(delta) = p.get("delta") {
            if let Some(t) = delta.get("text").and_then(Value::as_str) {
                a.text.push_str(t);
            }
            if let Some(input) = delta.pointer("/toolUse/input").and_then(Value::as_str) {
                if let Some(last) = a.tools.last_mut() {
                    last.1.push_str(input);
                }
            }
        }
        if let Some(u) = p.get("usage").filter(|u| u.get("inputTokens").is_some()) {
            a.usage = Some(u.clone());
        }
        // InvokeModel's bodies are the model's own: their family reads them.
    }

    fn tokens(&self, usage: &Value) -> Option<Tokens> {
        match (count(usage, "inputTokens"), count(usage, "outputTokens")) {
            (None, None) => None,
            (i, o) => {
                // The Converse API counts cache reads and writes apart from `inputTokens`.
                let cache_read = count(usage, "cacheReadInputTokens").unwrap_or(0);
                let cache_write = count(usage, "cacheWriteInputTokens").unwrap_or(0);
                Some(Tokens {
                    input: i
                        .unwrap_or(0)
                        .saturating_add(cache_read)
                        .saturating_add(cache_write),
                    output: o.unwrap_or(0),
                    cache_read,
                    cache_write,
                    reasoning: 0,
                })
            }
        }
    }

    fn volatile_fields(&self) -> &'static [&'static str] {
        // `p` pads stream events to hide their length; `latencyMs` is timing.
        &["p", "latencyMs"]
    }

    /// What boto3 and the AWS SDKs read: `message`, and the error's type in a header that the
    /// daemon's answer does not carry; botocore falls back to the status.
    fn error_body(&self, _status: u16, _code: &str, message: &str) -> Value {
        json!({ "message": message })
    }

    fn request_id(
        &self,
        headers: &BTreeMap<String, String>,
        _payloads: &[Value],
    ) -> Option<String> {
        header(headers, &["x-amzn-requestid"])
    }
}

fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}
