//! Ollama: `/api/chat` and `/api/generate`, answered whole or as NDJSON lines that end with
//! `done: true` and the counts, on a local server with no key.

use crate::{args_text, count, last_user, str_at, Answer, Family, Kind, Tokens};
use serde_json::{json, Value};

pub struct Ollama;

impl Family for Ollama {
    fn display_name(&self) -> &'static str {
        "Ollama"
    }

    fn example_path(&self) -> Option<&'static str> {
        Some("/api/chat")
    }

    fn kind(&self) -> Kind {
        Kind::Ollama
    }

    fn default_upstream(&self) -> Option<&'static str> {
        Some("http://127.0.0.1:11434")
    }

    fn owns_path(&self, path: &str) -> bool {
        path.starts_with("/api/")
    }

    /// Its own API, and the OpenAI-compatible one under `/v1`.
    fn knows_path(&self, path: &str) -> bool {
        path.starts_with("/api/") || path.starts_with("/v1/")
    }

    fn auth_headers(&self, key: &str) -> Vec<(&'static str, String)> {
        vec![("authorization", format!("Bearer {key}"))]
    }

    fn prompt(&self, body: &Value) -> Option<String> {
        if let Some(t) = body.get("messages").and_then(|m| last_user(m, "content")) {
            return Some(t);
        }
        str_at(body, "prompt")
    }

    fn read(&self, p: &Value, a: &mut Answer) {
        if p.get("done").is_none() {
            return;
        }
        a.finish(p.get("done_reason"));
        if p.get("eval_count").is_some() {
            a.usage = Some(json!({
                "prompt_eval_count": p.get("prompt_eval_count"),
                "eval_count": p.get("eval_count"),
            }));
        }
        if let Some(m) = p.get("message") {
            a.text.push_str(&str_at(m, "content").unwrap_or_default());
            for call in m
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let f = call.get("function").unwrap_or(call);
                a.tools.push((
                    str_at(f, "name").unwrap_or_default(),
                    args_text(f.get("arguments")),
                ));
            }
        }
        a.text.push_str(&str_at(p, "response").unwrap_or_default());
    }

    fn tokens(&self, usage: &Value) -> Option<Tokens> {
        let input = count(usage, "prompt_eval_count");
        let output = count(usage, "eval_count");
        if input.is_none() && output.is_none() {
            return None;
        }
        Some(Tokens {
            input: input.unwrap_or(0),
            output: output.unwrap_or(0),
            ..Tokens::default()
        })
    }

    fn volatile_fields(&self) -> &'static [&'static str] {
        &[
            "created_at",
            "total_duration",
            "load_duration",
            "prompt_eval_duration",
            "eval_duration",
        ]
    }

    fn error_body(&self, _status: u16, _code: &str, message: &str) -> Value {
        json!({ "error": message })
    }
}
