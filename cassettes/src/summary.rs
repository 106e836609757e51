//! The answer of a recorded response as text: what a reviewer reads in a pull request and what
//! `diff` and `rerun` compare. Each provider family reads its own shapes (the `providers`
//! crate); this turns what they read into the stored summary.

use crate::format::{RecordedResponse, Summary, ToolCall};
pub use providers::Tokens;

impl Summary {
    /// Derives the summary of a response; `None` when it carries no answer (an error, an
    /// embedding), so that no empty summary clutters the cassette.
    pub fn of(response: &RecordedResponse) -> Option<Summary> {
        if let Some(frames) = response.frames() {
            // A session's transcript: deltas assembled, audio as byte counts.
            let text = crate::session::transcript(frames);
            let usage = frames
                .iter()
                .rev()
                .filter_map(crate::session::WsFrame::json)
                .find_map(|v| v.pointer("/response/usage").cloned());
            return (!text.is_empty()).then_some(Summary {
                text,
                tool_calls: Vec::new(),
                usage,
            });
        }
        if let Some(text) = crate::mcp::answer_text(response) {
            return Some(Summary {
                text,
                tool_calls: Vec::new(),
                usage: None,
            });
        }
        let answer = providers::read_answer(&response.payloads());
        let summary = Summary {
            text: answer.text,
            tool_calls: answer
                .tools
                .into_iter()
                .map(|(name, arguments)| ToolCall { name, arguments })
                .collect(),
            usage: answer.usage,
        };
        (!summary.text.is_empty() || !summary.tool_calls.is_empty()).then_some(summary)
    }

    /// The tokens its usage block counts.
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

    /// An answer kept as the gzip bytes received is read for its summary once decoded.
    #[test]
    fn a_gzip_answer_is_summarised_decoded() {
        use std::io::Write;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(br#"{"choices":[{"message":{"content":"Zipped"}}]}"#)
            .unwrap();
        let headers = BTreeMap::from([("content-encoding".to_string(), "gzip".to_string())]);
        let r = RecordedResponse::with_body(200, headers, &gz.finish().unwrap());
        assert!(matches!(r.whole(), Some(crate::Body::Bytes(_))));
        assert_eq!(Summary::of(&r).unwrap().text, "Zipped");
    }

    #[test]
    fn openai_responses() {
        let s = body(
            r#"{"object":"response","output":[{"type":"message","content":[{"type":"output_text","text":"R"}]}],"usage":{"total_tokens":1}}"#,
        );
        assert_eq!(s.text, "R");
    }
}
