//! Google's Gemini API: the model in the path (`/v1beta/models/<model>:generateContent`),
//! `contents` with `parts`, candidates in answers, `usageMetadata`, and the key in
//! `x-goog-api-key` or `?key=`.

use crate::{args_text, count, header, last_user, str_at, Answer, Family, Kind, Tokens};
use serde_json::{json, Value};
use std::borrow::Cow;
use std::collections::BTreeMap;

pub struct Gemini;

impl Family for Gemini {
    fn display_name(&self) -> &'static str {
        "Gemini"
    }

    fn example_path(&self) -> Option<&'static str> {
        Some("/v1beta/models/<model>:generateContent")
    }

    fn kind(&self) -> Kind {
        Kind::Gemini
    }

    fn default_upstream(&self) -> Option<&'static str> {
        Some("https://generativelanguage.googleapis.com")
    }

    fn hosts(&self) -> &'static [&'static str] {
        &["generativelanguage.googleapis.com"]
    }

    fn owns_path(&self, path: &str) -> bool {
        path.contains(":generateContent")
            || path.contains(":streamGenerateContent")
            || path.contains(":embedContent")
            || path.starts_with("/v1beta/")
    }

    /// litellm builds `{GEMINI_API_BASE}/models/...`, expecting the API version inside the
    /// variable; google-genai appends `/v1beta/models/...` to a base without it.
    fn api_path<'a>(&self, path: &'a str) -> Cow<'a, str> {
        crate::versioned(
            path,
            &["/models", "/files", "/cachedContents", "/tunedModels"],
            "/v1beta",
        )
    }

    fn hands_over(&self, path: &str) -> Option<Kind> {
        Kind::Vertex
            .family()
            .owns_path(path)
            .then_some(Kind::Vertex)
    }

    fn knows_path(&self, path: &str) -> bool {
        ["/v1beta/", "/v1/", "/v1alpha/", "/upload/", "/download/"]
            .iter()
            .any(|p| path.starts_with(p))
    }

    fn secret_params(&self) -> &'static [&'static str] {
        &["key"]
    }

    fn secret_headers(&self) -> &'static [&'static str] {
        &["x-goog-api-key"]
    }

    fn auth_headers(&self, key: &str) -> Vec<(&'static str, String)> {
        vec![("x-goog-api-key", key.to_string())]
    }

    fn model(&self, path: &str, _body: Option<&Value>) -> Option<String> {
        let rest = path.split("/models/").nth(1)?;
        Some(rest.split(':').next().unwrap_or(rest).to_string())
    }

    /// The path names the model: `/v1beta/models/<model>:generateContent`.
    fn set_model(&self, path: &mut String, body: &mut Value, model: &str) {
        if body.get("model").is_some() {
            Kind::OpenAi.family().set_model(path, body, model);
        } else if let Some((head, rest)) = path.split_once("/models/") {
            let tail = rest.find(':').map_or("", |i| &rest[i..]);
            *path = format!("{head}/models/{model}{tail}");
        }
    }

    fn prompt(&self, body: &Value) -> Option<String> {
        last_user(body.get("contents")?, "parts")
    }

    fn read(&self, p: &Value, a: &mut Answer) {
        if let Some(u) = p.get("usageMetadata") {
            a.usage = Some(u.clone());
        }
        let candidates = p.get("candidates").and_then(Value::as_array);
        if let Some(list) = candidates.filter(|l| !l.is_empty()) {
            a.choice(list.len() - 1);
            a.finish(list[0].get("finishReason"));
        }
        for candidate in p
            .get("candidates")
            .and_then(Value::as_array)
            .into_iter()
            .take(1)
            .flatten()
        {
            for part in candidate
                .pointer("/content/parts")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                for kind in part.as_object().into_iter().flat_map(|o| o.keys()) {
                    if kind != "thoughtSignature" {
                        a.kind(kind);
                    }
                }
                if let Some(t) = part.get("text").and_then(Value::as_str) {
                    a.text.push_str(t);
                }
                if let Some(f) = part.get("functionCall") {
                    a.tools.push((
                        str_at(f, "name").unwrap_or_default(),
                        args_text(f.get("args")),
                    ));
                }
            }
        }
    }

    fn tokens(&self, usage: &Value) -> Option<Tokens> {
        let input = count(usage, "promptTokenCount");
        let output = count(usage, "candidatesTokenCount");
        let total = count(usage, "totalTokenCount");
        if input.is_none() && output.is_none() && total.is_none() {
            return None;
        }
        let input = input
            .unwrap_or(0)
            .saturating_add(count(usage, "toolUsePromptTokenCount").unwrap_or(0));
        let thoughts = count(usage, "thoughtsTokenCount").unwrap_or(0);
        // Thinking is billed as output but counted apart from the candidates; the cached
        // content is counted within the prompt.
        let output = match output {
            Some(candidates) => candidates.saturating_add(thoughts),
            None => total.unwrap_or(0).saturating_sub(input),
        };
        Some(Tokens {
            input,
            output,
            cache_read: count(usage, "cachedContentTokenCount").unwrap_or(0),
            cache_write: 0,
            reasoning: thoughts,
        })
    }

    fn volatile_fields(&self) -> &'static [&'static str] {
        &["responseId", "createTime"]
    }

    fn error_body(&self, status: u16, _code: &str, message: &str) -> Value {
        let s = if status == 404 {
            "NOT_FOUND"
        } else {
            "FAILED_PRECONDITION"
        };
        json!({ "error": { "code": status, "message": message, "status": s } })
    }

    fn request_id(&self, headers: &BTreeMap<String, String>, payloads: &[Value]) -> Option<String> {
        header(headers, &["x-goog-request-id"]).or_else(|| {
            payloads.iter().find_map(|p| {
                p.get("responseId")
                    .and_then(Value::as_str)
                    .map(str::to_string)
            })
        })
    }
}
