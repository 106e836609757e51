//! OpenAI, and every OpenAI-compatible gateway: chat completions (whole and streamed deltas),
//! the Responses API (whole and as events), embeddings, audio and images.

use crate::{
    args_text, content_text, count, count_at, header, last_user, str_at, Answer, Family, Kind,
    Tokens,
};
use serde_json::{json, Value};
use std::collections::BTreeMap;

pub struct OpenAi;

impl Family for OpenAi {
    fn display_name(&self) -> &'static str {
        "OpenAI"
    }

    fn example_path(&self) -> Option<&'static str> {
        Some("/v1/chat/completions")
    }

    fn kind(&self) -> Kind {
        Kind::OpenAi
    }

    fn default_upstream(&self) -> Option<&'static str> {
        Some("https://api.openai.com")
    }

    fn telemetry_paths(&self) -> &'static [&'static str] {
        // The Agents SDK's trace exporter, with fresh ids in every batch.
        &["/v1/traces/ingest"]
    }

    fn hosts(&self) -> &'static [&'static str] {
        &["api.openai.com"]
    }

    fn compatible_hosts(&self) -> &'static [(&'static str, &'static str)] {
        &[
            ("api.mistral.ai", "mistral"),
            ("api.groq.com", "groq"),
            ("api.together.xyz", "together"),
            ("api.deepseek.com", "deepseek"),
            ("openrouter.ai", "openrouter"),
            ("api.fireworks.ai", "fireworks"),
            ("api.x.ai", "xai"),
            ("api.perplexity.ai", "perplexity"),
        ]
    }

    fn owns_path(&self, path: &str) -> bool {
        path.starts_with("/v1/")
    }

    fn knows_path(&self, path: &str) -> bool {
        path.starts_with("/v1/")
    }

    fn secret_params(&self) -> &'static [&'static str] {
        &["api_key", "access_token"]
    }

    fn secret_headers(&self) -> &'static [&'static str] {
        &["openai-organization", "openai-project"]
    }

    fn auth_headers(&self, key: &str) -> Vec<(&'static str, String)> {
        vec![("authorization", format!("Bearer {key}"))]
    }

    fn prompt(&self, body: &Value) -> Option<String> {
        if let Some(t) = body.get("messages").and_then(|m| last_user(m, "content")) {
            return Some(t);
        }
        match body.get("input")? {
            list @ Value::Array(_) => {
                last_user(list, "content").or_else(|| Some(content_text(list)))
            }
            other => Some(content_text(other)),
        }
    }

    fn read(&self, p: &Value, a: &mut Answer) {
        if let Some(u) = p
            .get("usage")
            .filter(|u| !u.is_null() && p.get("choices").is_some())
        {
            a.usage = Some(u.clone());
        }
        // Chat completions, whole or as deltas.
        for choice in p
            .get("choices")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            a.choice(choice.get("index").and_then(Value::as_u64).unwrap_or(0) as usize);
            a.finish(choice.get("finish_reason"));
            let Some(msg) = choice.get("message").or_else(|| choice.get("delta")) else {
                continue;
            };
            if let Some(t) = msg.get("content").and_then(Value::as_str) {
                a.text.push_str(t);
                if !t.is_empty() {
                    a.kind("text");
                }
            }
            if msg.get("refusal").is_some_and(|r| !r.is_null()) {
                a.kind("refusal");
            }
            if msg.get("tool_calls").is_some_and(|t| !t.is_null()) {
                a.kind("tool_calls");
            }
            for call in msg
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let f = call.get("function").unwrap_or(call);
                // A streamed call names itself once, then sends its arguments in pieces.
                match (str_at(f, "name"), call.get("index")) {
                    (Some(name), _) => a.tools.push((name, args_text(f.get("arguments")))),
                    (None, Some(_)) => {
                        if let Some(last) = a.tools.last_mut() {
                            last.1.push_str(&args_text(f.get("arguments")));
                        }
                    }
                    (None, None) => {}
                }
            }
        }
        // The Responses API: text deltas when streamed, the whole object otherwise.
        match p.get("type").and_then(Value::as_str) {
            Some("response.output_text.delta") => {
                a.text.push_str(&str_at(p, "delta").unwrap_or_default())
            }
            Some("response.completed") => {
                if let Some(u) = p.pointer("/response/usage").filter(|u| !u.is_null()) {
                    a.usage = Some(u.clone());
                }
                a.finish(p.pointer("/response/status"));
            }
            Some("response.output_item.added") => {
                if let Some(kind) = p.pointer("/item/type").and_then(Value::as_str) {
                    a.kind(kind);
                }
            }
            _ if p.get("object").and_then(Value::as_str) == Some("response") => {
                if let Some(u) = p.get("usage").filter(|u| !u.is_null()) {
                    a.usage = Some(u.clone());
                }
                a.finish(p.get("status"));
                read_output(p, a);
            }
            _ => {}
        }
    }

    fn tokens(&self, usage: &Value) -> Option<Tokens> {
        // Anthropic names its counts as the Responses API does, and counts its cache apart.
        if usage.get("cache_read_input_tokens").is_some()
            || usage.get("cache_creation_input_tokens").is_some()
        {
            return None;
        }
        let input = count(usage, "prompt_tokens").or_else(|| count(usage, "input_tokens"));
        let output = count(usage, "completion_tokens").or_else(|| count(usage, "output_tokens"));
        let total = count(usage, "total_tokens");
        if input.is_none() && output.is_none() && total.is_none() {
            return None;
        }
        let input = input.unwrap_or(0);
        // Chat Completions and Responses name the details differently; both count cached
        // tokens within the input and reasoning tokens within the output.
        let detail = |chat: &str, responses: &str| {
            count_at(usage, chat)
                .or_else(|| count_at(usage, responses))
                .unwrap_or(0)
        };
        Some(Tokens {
            input,
            output: output.unwrap_or_else(|| total.unwrap_or(0).saturating_sub(input)),
            cache_read: detail(
                "/prompt_tokens_details/cached_tokens",
                "/input_tokens_details/cached_tokens",
            ),
            cache_write: 0,
            reasoning: detail(
                "/completion_tokens_details/reasoning_tokens",
                "/output_tokens_details/reasoning_tokens",
            ),
        })
    }

    fn volatile_fields(&self) -> &'static [&'static str] {
        &[
            "id",
            "created",
            "created_at",
            "system_fingerprint",
            "request_id",
            // Realtime: client and server event ids, item and response ids, session expiry.
            "event_id",
            "item_id",
            "previous_item_id",
            "response_id",
            "expires_at",
        ]
    }

    fn error_body(&self, _status: u16, code: &str, message: &str) -> Value {
        json!({ "error": { "message": message, "type": code, "param": null, "code": code } })
    }

    /// Realtime's `error` event, which its SDKs raise.
    fn session_error(&self, _status: u16, code: &str, message: &str) -> Value {
        json!({
            "type": "error",
            "error": { "type": "invalid_request_error", "code": code, "message": message }
        })
    }

    fn request_id(
        &self,
        headers: &BTreeMap<String, String>,
        _payloads: &[Value],
    ) -> Option<String> {
        header(headers, &["x-request-id"])
    }
}

/// The `output` items of a whole Responses API object: messages and function calls.
fn read_output(response: &Value, a: &mut Answer) {
    for item in response
        .get("output")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(kind) = item.get("type").and_then(Value::as_str) {
            a.kind(kind);
        }
        match item.get("type").and_then(Value::as_str) {
            Some("message") => {
                for c in item
                    .get("content")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    a.text.push_str(&str_at(c, "text").unwrap_or_default());
                }
            }
            Some("function_call") => a.tools.push((
                str_at(item, "name").unwrap_or_default(),
                args_text(item.get("arguments")),
            )),
            _ => {}
        }
    }
}
