//! Anthropic's Messages API: whole messages and their event stream (message_start,
//! content_block_start and _delta, message_delta with the final usage).

use crate::{args_text, count, header, last_user, str_at, Answer, Family, Kind, Tokens};
use serde_json::{json, Value};
use std::borrow::Cow;
use std::collections::BTreeMap;

pub struct Anthropic;

/// The API refuses requests without a version; cassettes keep no request headers.
const VERSION: &str = "2023-06-01";

impl Family for Anthropic {
    fn display_name(&self) -> &'static str {
        "Anthropic"
    }

    fn example_path(&self) -> Option<&'static str> {
        Some("/v1/messages")
    }

    fn kind(&self) -> Kind {
        Kind::Anthropic
    }

    fn default_upstream(&self) -> Option<&'static str> {
        Some("https://api.anthropic.com")
    }

    fn hosts(&self) -> &'static [&'static str] {
        &["api.anthropic.com"]
    }

    fn owns_path(&self, path: &str) -> bool {
        path.starts_with("/v1/messages") || path.starts_with("/v1/complete")
    }

    /// Vercel's `@ai-sdk/anthropic` expects `/v1` inside `ANTHROPIC_BASE_URL` (its default is
    /// `https://api.anthropic.com/v1`) and appends `/messages`; the official SDKs append
    /// `/v1/messages` to a base without it. Both are the same call.
    fn api_path<'a>(&self, path: &'a str) -> Cow<'a, str> {
        crate::versioned(path, &["/messages", "/complete", "/models"], "/v1")
    }

    fn knows_path(&self, path: &str) -> bool {
        path.starts_with("/v1/")
    }

    fn secret_headers(&self) -> &'static [&'static str] {
        &["x-api-key", "anthropic-organization-id"]
    }

    fn auth_headers(&self, key: &str) -> Vec<(&'static str, String)> {
        vec![("x-api-key", key.to_string())]
    }

    fn required_headers(&self) -> &'static [(&'static str, &'static str)] {
        &[("anthropic-version", VERSION)]
    }

    fn prompt(&self, body: &Value) -> Option<String> {
        // Same shape as OpenAI's messages; read here too for bodies with `system` and no model.
        last_user(body.get("messages")?, "content")
    }

    fn read(&self, p: &Value, a: &mut Answer) {
        match p.get("type").and_then(Value::as_str) {
            Some("message") => {
                if let Some(u) = p.get("usage") {
                    a.usage = Some(u.clone());
                }
                a.choice(0);
                a.finish(p.get("stop_reason"));
                for block in p
                    .get("content")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    if let Some(kind) = block.get("type").and_then(Value::as_str) {
                        a.kind(kind);
                    }
                    match block.get("type").and_then(Value::as_str) {
                        Some("text") => a.text.push_str(&str_at(block, "text").unwrap_or_default()),
                        Some("tool_use") => a.tools.push((
                            str_at(block, "name").unwrap_or_default(),
                            args_text(block.get("input")),
                        )),
                        _ => {}
                    }
                }
            }
            Some("message_start") => {
                if let Some(u) = p.pointer("/message/usage") {
                    a.usage = Some(u.clone());
                }
            }
            Some("content_block_start") => {
                if let Some(kind) = p.pointer("/content_block/type").and_then(Value::as_str) {
                    a.kind(kind);
                }
                if let Some(b) = p
                    .get("content_block")
                    .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_use"))
                {
                    a.tools
                        .push((str_at(b, "name").unwrap_or_default(), String::new()));
                }
            }
            Some("content_block_delta") => {
                let d = p.get("delta").unwrap_or(&Value::Null);
                match d.get("type").and_then(Value::as_str) {
                    Some("text_delta") => a.text.push_str(&str_at(d, "text").unwrap_or_default()),
                    Some("input_json_delta") => {
                        if let Some(last) = a.tools.last_mut() {
                            last.1
                                .push_str(&str_at(d, "partial_json").unwrap_or_default());
                        }
                    }
                    _ => {}
                }
            }
            // The final counts come as a delta on those of message_start.
            Some("message_delta") => {
                a.finish(p.pointer("/delta/stop_reason"));
                if let (Some(Value::Object(mut base)), Some(Value::Object(delta))) =
                    (a.usage.clone(), p.get("usage").cloned())
                {
                    base.extend(delta);
                    a.usage = Some(Value::Object(base));
                }
            }
            _ => {}
        }
    }

    fn tokens(&self, usage: &Value) -> Option<Tokens> {
        // OpenAI's Responses API names its counts the same; that family reads those first.
        let uncached = count(usage, "input_tokens")?;
        let cache_read = count(usage, "cache_read_input_tokens").unwrap_or(0);
        let cache_write = count(usage, "cache_creation_input_tokens").unwrap_or(0);
        // Anthropic's `input_tokens` leaves out what the cache read and wrote; prices count
        // them as input, at their own rates.
        Some(Tokens {
            input: uncached
                .saturating_add(cache_read)
                .saturating_add(cache_write),
            output: count(usage, "output_tokens").unwrap_or(0),
            cache_read,
            cache_write,
            reasoning: 0,
        })
    }

    fn volatile_fields(&self) -> &'static [&'static str] {
        &["id"]
    }

    fn error_body(&self, status: u16, _code: &str, message: &str) -> Value {
        let kind = if status == 404 {
            "not_found_error"
        } else {
            "invalid_request_error"
        };
        json!({ "type": "error", "error": { "type": kind, "message": message } })
    }

    fn request_id(
        &self,
        headers: &BTreeMap<String, String>,
        _payloads: &[Value],
    ) -> Option<String> {
        header(headers, &["request-id"])
    }
}
