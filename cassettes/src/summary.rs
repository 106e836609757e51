//! The answer of a recorded response as text: what a reviewer reads in a pull request and what
//! `diff` and `rerun` compare. It knows the response shapes of OpenAI (chat completions and
//! responses), Anthropic messages, Gemini and Ollama, streamed or not.

use crate::format::{RecordedResponse, Summary, ToolCall};
use serde::{Deserialize, Serialize};
use serde_json::Value;

impl Summary {
    /// Derives the summary of a response; `None` when it carries no answer (an error, an
    /// embedding), so that no empty summary clutters the cassette.
    pub fn of(response: &RecordedResponse) -> Option<Summary> {
        let mut acc = Acc::default();
        for payload in response.payloads() {
            acc.take(&payload);
        }
        let summary = Summary {
            text: acc.text,
            tool_calls: acc
                .tools
                .into_iter()
                .map(|(name, arguments)| ToolCall { name, arguments })
                .collect(),
            usage: acc.usage,
        };
        (!summary.text.is_empty() || !summary.tool_calls.is_empty()).then_some(summary)
    }
}

/// Token counts read from any provider's usage object.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tokens {
    pub input: u64,
    pub output: u64,
}

impl Tokens {
    /// OpenAI (chat and responses), Anthropic, Gemini and Ollama name their counts apart.
    pub fn of(usage: &Value) -> Option<Tokens> {
        let n = |keys: &[&str]| {
            keys.iter()
                .find_map(|k| usage.get(*k).and_then(Value::as_u64))
        };
        let input = n(&[
            "prompt_tokens",
            "input_tokens",
            "promptTokenCount",
            "prompt_eval_count",
        ]);
        let output = n(&[
            "completion_tokens",
            "output_tokens",
            "candidatesTokenCount",
            "eval_count",
        ]);
        let total = n(&["total_tokens", "totalTokenCount"]);
        if input.is_none() && output.is_none() && total.is_none() {
            return None;
        }
        let input = input.unwrap_or(0);
        let output = output.unwrap_or_else(|| total.unwrap_or(0).saturating_sub(input));
        Some(Tokens { input, output })
    }

    pub fn total(&self) -> u64 {
        self.input + self.output
    }
}

impl Summary {
    pub fn tokens(&self) -> Option<Tokens> {
        self.usage.as_ref().and_then(Tokens::of)
    }

    /// The answer as reviewers read it: the text, then each tool call as `name(arguments)`.
    pub fn answer_text(&self) -> String {
        let mut out = self.text.clone();
        for call in &self.tool_calls {
            if !out.is_empty() && !out.ends_with('\n') {
                out.push('\n');
            }
            out.push_str(&format!("tool call: {}({})", call.name, call.arguments));
        }
        out
    }
}

#[derive(Default)]
struct Acc {
    text: String,
    tools: Vec<(String, String)>,
    usage: Option<Value>,
}

fn s(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_string)
}

fn args_text(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    }
}

impl Acc {
    fn take(&mut self, p: &Value) {
        let is_delta = p.get("type").and_then(Value::as_str) == Some("message_delta");
        if let Some(u) = p
            .get("usage")
            .or_else(|| p.get("usageMetadata"))
            .filter(|u| !u.is_null() && !is_delta)
        {
            self.usage = Some(u.clone());
        }
        if p.get("eval_count").is_some() {
            self.usage = Some(serde_json::json!({
                "prompt_eval_count": p.get("prompt_eval_count"),
                "eval_count": p.get("eval_count"),
            }));
        }
        // OpenAI chat completions, whole or as deltas.
        for choice in p
            .get("choices")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let Some(msg) = choice.get("message").or_else(|| choice.get("delta")) else {
                continue;
            };
            if let Some(t) = msg.get("content").and_then(Value::as_str) {
                self.text.push_str(t);
            }
            for call in msg
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let f = call.get("function").unwrap_or(call);
                let index = call.get("index").and_then(Value::as_u64);
                match (s(f, "name"), index) {
                    (Some(name), _) => self.tools.push((name, args_text(f.get("arguments")))),
                    (None, Some(_)) => {
                        if let Some(last) = self.tools.last_mut() {
                            last.1.push_str(&args_text(f.get("arguments")));
                        }
                    }
                    (None, None) => {}
                }
            }
        }
        // OpenAI responses API: text deltas when streamed, the whole object otherwise.
        match p.get("type").and_then(Value::as_str) {
            Some("response.output_text.delta") => {
                self.text.push_str(&s(p, "delta").unwrap_or_default())
            }
            Some("response.completed") => {
                if let Some(u) = p.pointer("/response/usage") {
                    self.usage = Some(u.clone());
                }
            }
            _ if p.get("object").and_then(Value::as_str) == Some("response") => {
                self.take_response_output(p)
            }
            _ => {}
        }
        // Anthropic messages, whole or as events.
        if p.get("type").and_then(Value::as_str) == Some("message") {
            for block in p
                .get("content")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                match block.get("type").and_then(Value::as_str) {
                    Some("text") => self.text.push_str(&s(block, "text").unwrap_or_default()),
                    Some("tool_use") => self.tools.push((
                        s(block, "name").unwrap_or_default(),
                        args_text(block.get("input")),
                    )),
                    _ => {}
                }
            }
        }
        match p.get("type").and_then(Value::as_str) {
            Some("message_start") => {
                if let Some(u) = p.pointer("/message/usage") {
                    self.usage = Some(u.clone());
                }
            }
            Some("content_block_start") => {
                if let Some(b) = p
                    .get("content_block")
                    .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_use"))
                {
                    self.tools
                        .push((s(b, "name").unwrap_or_default(), String::new()));
                }
            }
            Some("content_block_delta") => {
                let d = p.get("delta").unwrap_or(&Value::Null);
                match d.get("type").and_then(Value::as_str) {
                    Some("text_delta") => self.text.push_str(&s(d, "text").unwrap_or_default()),
                    Some("input_json_delta") => {
                        if let Some(last) = self.tools.last_mut() {
                            last.1.push_str(&s(d, "partial_json").unwrap_or_default());
                        }
                    }
                    _ => {}
                }
            }
            Some("message_delta") => {
                if let (Some(Value::Object(mut base)), Some(Value::Object(delta))) =
                    (self.usage.clone(), p.get("usage").cloned())
                {
                    base.extend(delta);
                    self.usage = Some(Value::Object(base));
                }
            }
            _ => {}
        }
        // Gemini.
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
                if let Some(t) = part.get("text").and_then(Value::as_str) {
                    self.text.push_str(t);
                }
                if let Some(f) = part.get("functionCall") {
                    self.tools
                        .push((s(f, "name").unwrap_or_default(), args_text(f.get("args"))));
                }
            }
        }
        // Ollama: /api/chat and /api/generate.
        if p.get("done").is_some() {
            if let Some(m) = p.get("message") {
                self.text.push_str(&s(m, "content").unwrap_or_default());
                for call in m
                    .get("tool_calls")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let f = call.get("function").unwrap_or(call);
                    self.tools.push((
                        s(f, "name").unwrap_or_default(),
                        args_text(f.get("arguments")),
                    ));
                }
            }
            self.text.push_str(&s(p, "response").unwrap_or_default());
        }
    }

    fn take_response_output(&mut self, response: &Value) {
        for item in response
            .get("output")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            match item.get("type").and_then(Value::as_str) {
                Some("message") => {
                    for c in item
                        .get("content")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                    {
                        self.text.push_str(&s(c, "text").unwrap_or_default());
                    }
                }
                Some("function_call") => self.tools.push((
                    s(item, "name").unwrap_or_default(),
                    args_text(item.get("arguments")),
                )),
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::StreamFormat;
    use bytes::Bytes;
    use std::collections::BTreeMap;

    fn body(json: &str) -> Summary {
        Summary::of(&RecordedResponse::with_body(
            200,
            BTreeMap::new(),
            json.as_bytes(),
        ))
        .unwrap()
    }

    fn stream(format: StreamFormat, text: &str) -> Summary {
        let frames = vec![(Bytes::from(text.to_string()), 0)];
        Summary::of(&RecordedResponse::with_stream(
            200,
            BTreeMap::new(),
            format,
            &frames,
        ))
        .unwrap()
    }

    #[test]
    fn openai_chat() {
        let s = body(
            r#"{"choices":[{"message":{"content":"Hello","tool_calls":[{"function":{"name":"f","arguments":"{\"a\":1}"}}]}}],"usage":{"total_tokens":3}}"#,
        );
        assert_eq!(s.text, "Hello");
        assert_eq!(
            s.tool_calls,
            vec![ToolCall {
                name: "f".into(),
                arguments: "{\"a\":1}".into()
            }]
        );
        assert_eq!(s.usage.unwrap()["total_tokens"], 3);
        let s = stream(StreamFormat::Sse, "data: {\"choices\":[{\"delta\":{\"content\":\"He\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"name\":\"f\",\"arguments\":\"\"}}]}}]}\n\ndata: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{}\"}}]}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"llo\"}}]}\n\ndata: [DONE]\n\n");
        assert_eq!(s.text, "Hello");
        assert_eq!(s.tool_calls[0].arguments, "{}");
    }

    #[test]
    fn anthropic_gemini_ollama() {
        let s = stream(StreamFormat::Sse, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":5}}}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":2}}\n\n");
        assert_eq!(s.text, "Hi");
        assert_eq!(
            s.usage.unwrap(),
            serde_json::json!({"input_tokens":5,"output_tokens":2})
        );
        let s = body(
            r#"{"type":"message","content":[{"type":"text","text":"Yo"},{"type":"tool_use","name":"g","input":{"q":1}}]}"#,
        );
        assert_eq!(
            (s.text.as_str(), s.tool_calls[0].arguments.as_str()),
            ("Yo", "{\"q\":1}")
        );
        let s = body(
            r#"{"candidates":[{"content":{"parts":[{"text":"Gem"}]}}],"usageMetadata":{"totalTokenCount":4}}"#,
        );
        assert_eq!(s.text, "Gem");
        let s = stream(StreamFormat::Ndjson, "{\"message\":{\"content\":\"Ol\"},\"done\":false}\n{\"message\":{\"content\":\"la\"},\"done\":true,\"eval_count\":2}\n");
        assert_eq!(s.text, "Olla");
    }

    #[test]
    fn openai_responses() {
        let s = body(
            r#"{"object":"response","output":[{"type":"message","content":[{"type":"output_text","text":"R"}]}],"usage":{"total_tokens":1}}"#,
        );
        assert_eq!(s.text, "R");
    }
}
