//! What changed between two versions of a cassette, in a reviewer's terms: interactions added,
//! removed and changed, and for a changed one the request fields that moved (a prompt drift),
//! the answer's text as a line diff, and the token counts before and after. Ids, timestamps and
//! headers alone are not a change, as for a re-record.

use crate::format::{recording_ids, Cassette, Interaction, RecordedResponse, RecordingId, Summary};
use crate::key::differing_fields;
use crate::summary::Tokens;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::HashMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
/// How an interaction changed against the base.
pub enum Change {
    /// New.
    Added,
    /// Gone.
    Removed,
    /// In both, different.
    Changed,
}

/// One interaction that is not the same on both sides.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct InteractionDiff {
    /// How it changed.
    pub change: Change,
    /// The request's method.
    pub method: String,
    /// The request's path.
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    /// The model it asked for.
    pub model: Option<String>,
    /// The last user message: the new one, or the old one of a removed interaction.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// Request fields that differ (JSON pointers); empty when the same request got a new answer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub request_fields: Vec<String>,
    /// The previous last user message, when it changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_before: Option<String>,
    /// Response fields that differ when the answer's text does not (usage, finish reason...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub response_fields: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    /// The answer's status before.
    pub status_before: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    /// And after.
    pub status_after: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    /// The answer's text before.
    pub answer_before: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    /// And after.
    pub answer_after: Option<String>,
    /// A unified line diff of the answers, when their text differs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer_diff: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    /// Tokens used before.
    pub tokens_before: Option<Tokens>,
    #[serde(skip_serializing_if = "Option::is_none")]
    /// And after.
    pub tokens_after: Option<Tokens>,
}

impl InteractionDiff {
    /// True when the answer's text itself differs, not only the request or other fields.
    pub fn answer_changed(&self) -> bool {
        self.answer_diff.is_some()
    }
}

/// The answer of a response as text: the summary's text and tool calls, or for answers with
/// none (an error, an embedding) the body itself.
pub fn answer_text(response: &RecordedResponse) -> String {
    if let Some(summary) = Summary::of(response) {
        return summary.answer_text();
    }
    let Some(body) = response.whole() else {
        return response
            .payloads()
            .iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join("\n");
    };
    match body.decoded(response.content_encoding()) {
        Some(Value::String(t)) => t,
        Some(v) => serde_json::to_string_pretty(&v).unwrap_or_default(),
        // Audio, images: a change of size or hash is what a reviewer can see.
        None => body.describe_binary().unwrap_or_default(),
    }
}

/// A unified diff of two texts by line, or `None` when they are equal.
pub fn text_diff(before: &str, after: &str) -> Option<String> {
    if before == after {
        return None;
    }
    let with_newline = |s: &str| {
        if s.ends_with('\n') {
            s.to_string()
        } else {
            format!("{s}\n")
        }
    };
    let (a, b) = (with_newline(before), with_newline(after));
    let diff = similar::TextDiff::from_lines(&a, &b);
    let mut out = String::new();
    for change in diff.iter_all_changes() {
        let sign = match change.tag() {
            similar::ChangeTag::Delete => '-',
            similar::ChangeTag::Insert => '+',
            similar::ChangeTag::Equal => ' ',
        };
        out.push(sign);
        out.push_str(change.value());
    }
    Some(out)
}

/// The interactions that differ between `old` and `new` (either side may be absent), in the
/// new file's order, removed ones last.
pub fn diff_cassettes(old: Option<&Cassette>, new: Option<&Cassette>) -> Vec<InteractionDiff> {
    let none: Vec<Interaction> = Vec::new();
    let old = old.map_or(&none, |c| &c.interactions);
    let new = new.map_or(&none, |c| &c.interactions);
    // First as replay matches: the n-th recording of a key with the n-th.
    let ids = recording_ids;
    let old_ids = ids(old);
    let old_at: HashMap<&RecordingId, usize> =
        old_ids.iter().enumerate().map(|(i, id)| (id, i)).collect();
    let mut old_taken = vec![false; old.len()];
    let mut pairs: Vec<(Option<usize>, usize)> = Vec::new();
    for (j, id) in ids(new).iter().enumerate() {
        let i = old_at.get(id).copied();
        if let Some(i) = i {
            old_taken[i] = true;
        }
        pairs.push((i, j));
    }
    // Then a new request left over takes the first old one left over at the same method and
    // path: the same call with a drifted prompt, which a reviewer reads as one change.
    for pair in pairs.iter_mut().filter(|p| p.0.is_none()) {
        let n = &new[pair.1].request;
        if let Some(i) = (0..old.len()).find(|&i| {
            !old_taken[i] && old[i].request.method == n.method && old[i].request.path == n.path
        }) {
            old_taken[i] = true;
            pair.0 = Some(i);
        }
    }
    let mut out: Vec<InteractionDiff> = pairs
        .into_iter()
        .filter_map(|(i, j)| match i {
            Some(i) => changed(&old[i], &new[j]),
            None => Some(one_side(Change::Added, &new[j])),
        })
        .collect();
    out.extend(
        (0..old.len())
            .filter(|&i| !old_taken[i])
            .map(|i| one_side(Change::Removed, &old[i])),
    );
    out
}

fn blank(change: Change, x: &Interaction) -> InteractionDiff {
    InteractionDiff {
        change,
        method: x.request.method.clone(),
        path: x.request.path.clone(),
        model: x.request.model(),
        prompt: x.request.last_user_text(),
        request_fields: Vec::new(),
        prompt_before: None,
        response_fields: Vec::new(),
        status_before: None,
        status_after: None,
        answer_before: None,
        answer_after: None,
        answer_diff: None,
        tokens_before: None,
        tokens_after: None,
    }
}

/// The token counts of an answer, whichever provider's usage shape it has.
pub fn tokens(response: &RecordedResponse) -> Option<Tokens> {
    Summary::of(response).and_then(|s| s.tokens())
}

fn one_side(change: Change, x: &Interaction) -> InteractionDiff {
    let mut d = blank(change, x);
    let (answer, status, tokens) = (
        Some(answer_text(&x.response)),
        Some(x.response.status),
        tokens(&x.response),
    );
    if change == Change::Added {
        (d.answer_after, d.status_after, d.tokens_after) = (answer, status, tokens);
    } else {
        (d.answer_before, d.status_before, d.tokens_before) = (answer, status, tokens);
    }
    d
}

fn changed(old: &Interaction, new: &Interaction) -> Option<InteractionDiff> {
    let same_request = old.key == new.key;
    let (was, now) = (old.response.comparable(), new.response.comparable());
    if same_request && was == now {
        return None;
    }
    let mut d = blank(Change::Changed, new);
    if !same_request {
        d.request_fields = differing_fields(&old.request.to_value(), &new.request.to_value());
        let before = old.request.last_user_text();
        if before != d.prompt {
            d.prompt_before = before;
        }
    }
    let (before, after) = (answer_text(&old.response), answer_text(&new.response));
    d.answer_diff = text_diff(&before, &after);
    if d.answer_diff.is_none() && was != now {
        d.response_fields = differing_fields(&was, &now);
    }
    d.answer_before = Some(before);
    d.answer_after = Some(after);
    d.status_before = Some(old.response.status);
    d.status_after = Some(new.response.status);
    d.tokens_before = tokens(&old.response);
    d.tokens_after = tokens(&new.response);
    Some(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::interaction;
    use crate::Key;

    fn cassette(list: Vec<Interaction>) -> Cassette {
        let mut c = Cassette::new("t", "openai");
        c.interactions = list;
        c
    }

    /// A Realtime session whose answer changed: the diff is of the transcripts, deltas
    /// assembled, with new event ids alone not a change.
    #[test]
    fn a_session_is_reviewed_by_its_transcript() {
        use crate::session::{Side, WsFrame};
        let session = |ids: &str, deltas: &[&str]| {
            let mut frames = vec![WsFrame::new(
                Side::Client,
                false,
                bytes::Bytes::from(r#"{"type":"response.create"}"#),
                1,
            )];
            for d in deltas {
                let v = serde_json::json!({"type": "response.output_text.delta", "event_id": ids, "delta": d});
                frames.push(WsFrame::new(Side::Server, false, v.to_string().into(), 2));
            }
            let request = crate::Normalizer::default().session(
                "/v1/realtime",
                Some("model=gpt-realtime"),
                &[],
            );
            let response = RecordedResponse::session(frames);
            Interaction {
                key: Key::of(&request),
                seal: None,
                request,
                summary: Summary::of(&response),
                response,
                timing: None,
            }
        };
        let old = cassette(vec![session("e1", &["Hello ", "there"])]);
        let same = cassette(vec![session("e2", &["Hello ", "there"])]);
        assert!(
            diff_cassettes(Some(&old), Some(&same)).is_empty(),
            "ids alone"
        );
        let new = cassette(vec![session("e3", &["Hello ", "world"])]);
        let d = diff_cassettes(Some(&old), Some(&new));
        assert_eq!(d.len(), 1);
        assert_eq!(
            d[0].answer_diff.as_deref(),
            Some("-Hello there\n+Hello world\n")
        );
    }

    fn chat(text: &str, id: &str) -> String {
        format!(
            r#"{{"id":"{id}","created":1,"choices":[{{"message":{{"content":"{text}"}}}}],"usage":{{"prompt_tokens":3,"completion_tokens":{}}}}}"#,
            text.split(' ').count()
        )
    }

    #[test]
    fn added_removed_changed_and_volatile_only() {
        let old = cassette(vec![
            interaction("same", &chat("Stays", "chatcmpl-1")),
            interaction("volatile", &chat("Same text", "chatcmpl-2")),
            interaction("answer", &chat("Old answer\\nline two", "chatcmpl-3")),
            interaction("gone", &chat("Bye", "chatcmpl-4")),
        ]);
        let new = cassette(vec![
            interaction("same", &chat("Stays", "chatcmpl-1")),
            interaction("volatile", &chat("Same text", "chatcmpl-99")),
            interaction("answer", &chat("New answer here\\nline two", "chatcmpl-3")),
            interaction("fresh", &chat("Hello", "chatcmpl-5")),
        ]);
        let d = diff_cassettes(Some(&old), Some(&new));
        // "fresh" and "gone" share method and path: one call whose prompt drifted.
        assert_eq!(d.len(), 2, "{d:#?}");
        let answer = &d[0];
        assert_eq!(answer.change, Change::Changed);
        assert!(answer.request_fields.is_empty());
        assert_eq!(
            answer.answer_diff.as_deref(),
            Some("-Old answer\n+New answer here\n line two\n")
        );
        assert_eq!(answer.tokens_before.map(|t| t.output), Some(3));
        assert_eq!(answer.tokens_after.map(|t| t.output), Some(4));
        let drift = &d[1];
        assert_eq!(drift.request_fields, ["/body/messages/0/content"]);
        assert_eq!(drift.prompt_before.as_deref(), Some("gone"));
        assert_eq!(drift.prompt.as_deref(), Some("fresh"));
        assert_eq!(drift.answer_diff.as_deref(), Some("-Bye\n+Hello\n"));
    }

    #[test]
    fn whole_files_added_or_removed() {
        let c = cassette(vec![
            interaction("a", &chat("A", "x")),
            interaction("b", "{}"),
        ]);
        let added = diff_cassettes(None, Some(&c));
        assert_eq!(
            added.iter().map(|d| d.change).collect::<Vec<_>>(),
            [Change::Added, Change::Added]
        );
        assert_eq!(added[0].answer_after.as_deref(), Some("A"));
        let removed = diff_cassettes(Some(&c), None);
        assert!(removed.iter().all(|d| d.change == Change::Removed));
        assert!(diff_cassettes(Some(&c), Some(&c)).is_empty());
    }

    #[test]
    fn a_changed_usage_alone_names_the_field() {
        let old = cassette(vec![interaction("q", &chat("Same", "a"))]);
        let new_body = chat("Same", "a").replace("\"prompt_tokens\":3", "\"prompt_tokens\":30");
        let new = cassette(vec![interaction("q", &new_body)]);
        let d = diff_cassettes(Some(&old), Some(&new));
        assert_eq!(d.len(), 1);
        assert!(!d[0].answer_changed());
        assert_eq!(d[0].response_fields, ["/body/usage/prompt_tokens"]);
    }

    #[test]
    fn tool_calls_read_as_name_and_arguments() {
        let body = r#"{"choices":[{"message":{"content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]}}]}"#;
        let c = cassette(vec![interaction("w", body)]);
        let d = diff_cassettes(None, Some(&c));
        assert_eq!(
            d[0].answer_after.as_deref(),
            Some(r#"tool call: get_weather({"city":"Paris"})"#)
        );
    }
}
