//! What changed between two versions of a cassette, in a reviewer's terms: interactions added,
//! removed and changed, and for a changed one the request fields that moved (a prompt drift),
//! the answer's text as a line diff, and the token counts before and after. Ids, timestamps and
//! headers alone are not a change, as for a re-record.

use cassettes::differing_fields;
use cassettes::Tokens;
use cassettes::{recording_ids, Cassette, Interaction, RecordedResponse, RecordingId, Summary};
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

/// What kind of change an answer, or a test's run, went through. The order is the order of
/// harm: the first five can break code that reads the answer, the rest only a snapshot of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Drift {
    /// The status class changed: an answer became an error, or the reverse.
    Error,
    /// The test's sequence of tool calls changed (other tools, in another order, more or
    /// fewer), as `[drift] trajectory` compares them: a class of the test, not of one answer.
    Trajectory,
    /// A tool call's name or arguments changed, or one came or went.
    ToolCall,
    /// An MCP server's `tools/list` lists other tools, or the same tools with other input or
    /// output schemas: the agent's calls may no longer fit.
    ToolSchema,
    /// The answer's shape changed: why it stopped, its number of choices, its kinds of
    /// content, or the JSON shape of a structured answer.
    Structure,
    /// Only the text changed.
    Wording,
    /// Only the token counts changed.
    Usage,
    /// Neither text, tool calls, shape nor usage: only what describes the answer (its model,
    /// ids, fingerprint, headers).
    Metadata,
    /// The answer is byte for byte the one recorded; only the request moved: a recording
    /// re-keyed after a client change (`cargo llmreplay rekey`).
    RequestOnly,
}

impl Drift {
    /// Every class, worst first.
    pub const ALL: [Drift; 9] = [
        Drift::Error,
        Drift::Trajectory,
        Drift::ToolCall,
        Drift::ToolSchema,
        Drift::Structure,
        Drift::Wording,
        Drift::Usage,
        Drift::Metadata,
        Drift::RequestOnly,
    ];

    /// Its name as people read it.
    pub fn as_str(self) -> &'static str {
        match self {
            Drift::Error => "error",
            Drift::Trajectory => "trajectory",
            Drift::ToolCall => "tool call",
            Drift::ToolSchema => "tool schema",
            Drift::Structure => "structure",
            Drift::Wording => "wording",
            Drift::Usage => "usage",
            Drift::Metadata => "metadata",
            Drift::RequestOnly => "request only",
        }
    }

    /// True for the classes that can break the code under test.
    pub fn can_break_code(self) -> bool {
        matches!(
            self,
            Drift::Error
                | Drift::Trajectory
                | Drift::ToolCall
                | Drift::ToolSchema
                | Drift::Structure
        )
    }
}

/// The drift classes of an answer that changed from `old` to `new`, worst first; empty when
/// only volatile fields moved.
pub fn drift(old: &RecordedResponse, new: &RecordedResponse) -> Vec<Drift> {
    let mut out = Vec::new();
    if old.comparable() == new.comparable() {
        return out;
    }
    // An answer that became an error (or stopped being one) changed in every other way too;
    // that it is an error is what a reviewer needs to read.
    if old.status / 100 != new.status / 100 {
        return vec![Drift::Error];
    }
    let (a, b) = (read(old), read(new));
    let calls = |x: &providers::Answer| -> Vec<(String, Value)> {
        x.tools
            .iter()
            .map(|(name, args)| {
                let args =
                    serde_json::from_str(args).unwrap_or_else(|_| Value::String(args.clone()));
                (name.clone(), args)
            })
            .collect()
    };
    if calls(&a) != calls(&b) {
        out.push(Drift::ToolCall);
    }
    if !cassettes::mcp::schema_changes(old, new).is_empty() {
        out.push(Drift::ToolSchema);
    }
    let kinds = |x: &providers::Answer| {
        let mut k = x.kinds.clone();
        k.sort();
        k
    };
    let text_shape = |t: &str| {
        serde_json::from_str::<Value>(t.trim())
            .ok()
            .map(|v| shape(&v))
    };
    let body_shape = |r: &RecordedResponse| r.payloads().iter().map(shape).collect::<Vec<_>>();
    let answered =
        !a.text.is_empty() || !a.tools.is_empty() || !b.text.is_empty() || !b.tools.is_empty();
    // A structured answer whose JSON changed shape: its words changing is no news.
    let reshaped = text_shape(&a.text) != text_shape(&b.text);
    let structure = a.finish != b.finish
        || a.choices != b.choices
        || kinds(&a) != kinds(&b)
        || reshaped
        // An answer no family reads (an embedding, an error body): its JSON's shape.
        || (!answered && old.frames().is_none() && body_shape(old) != body_shape(new));
    if structure {
        out.push(Drift::Structure);
    }
    let (text_a, text_b) = (answer_text(old), answer_text(new));
    if (a.text != b.text && !reshaped) || (!answered && text_a != text_b && !structure) {
        out.push(Drift::Wording);
    }
    if out.is_empty() {
        let usage = a.usage != b.usage || tokens(old) != tokens(new);
        // Anything else that moved (the model, an id, a header) describes the answer; its words
        // are the same.
        out.push(if usage { Drift::Usage } else { Drift::Metadata });
    }
    out
}

/// What every family reads of an answer; a session's transcript as its text.
fn read(response: &RecordedResponse) -> providers::Answer {
    if let Some(frames) = response.frames() {
        return providers::Answer {
            text: cassettes::session::transcript(frames),
            ..providers::Answer::default()
        };
    }
    providers::read_answer(&response.payloads())
}

/// A JSON value with its leaves replaced by their types: two answers of one schema have the
/// same shape. An array's shape is that of its elements, merged, so a longer list is not a
/// change of shape.
fn shape(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            Value::Object(map.iter().map(|(k, v)| (k.clone(), shape(v))).collect())
        }
        Value::Array(items) => {
            let mut kinds: Vec<Value> = Vec::new();
            for item in items {
                let s = shape(item);
                if !kinds.contains(&s) {
                    kinds.push(s);
                }
            }
            Value::Array(kinds)
        }
        Value::String(_) => Value::String("string".into()),
        Value::Number(_) => Value::String("number".into()),
        Value::Bool(_) => Value::String("bool".into()),
        Value::Null => Value::Null,
    }
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
    /// What kind of change the answer went through, worst first; empty when only the
    /// request changed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drift: Vec<Drift>,
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

/// Whether most of an answer changed (under half of its words kept): a rewrite reads best as
/// whole lines, old then new; a small change as the words that changed.
pub fn mostly_rewritten(before: &str, after: &str) -> bool {
    rewritten(&word_diff(before, after))
}

/// [`mostly_rewritten`] of a word diff already made.
pub fn rewritten(words: &[Words]) -> bool {
    // Words only: the spaces and punctuation two sentences share say nothing of their words.
    let count = |t: &str| {
        t.split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .count()
    };
    let (mut kept, mut old, mut new) = (0, 0, 0);
    for w in words {
        match w {
            Words::Same(t) => kept += count(t),
            Words::Removed(t) => old += count(t),
            Words::Added(t) => new += count(t),
        }
    }
    kept * 2 < (kept + old).max(kept + new)
}

/// A run of words of a word-level diff.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum Words {
    /// On both sides.
    Same(String),
    /// Only before.
    Removed(String),
    /// Only after.
    Added(String),
}

/// A word-level diff of two texts (similar's word diff, as insta shows a changed line): one
/// copy of the text, with what was removed and added marked where it changed, so a one-word
/// change in a long answer reads as that word.
pub fn word_diff(before: &str, after: &str) -> Vec<Words> {
    let diff = similar::TextDiff::configure()
        .timeout(std::time::Duration::from_millis(200))
        .diff_unicode_words(before, after);
    let mut out: Vec<Words> = Vec::new();
    for change in diff.iter_all_changes() {
        let text = change.value();
        match (change.tag(), out.last_mut()) {
            (similar::ChangeTag::Equal, Some(Words::Same(s)))
            | (similar::ChangeTag::Delete, Some(Words::Removed(s)))
            | (similar::ChangeTag::Insert, Some(Words::Added(s))) => s.push_str(text),
            (similar::ChangeTag::Equal, _) => out.push(Words::Same(text.into())),
            (similar::ChangeTag::Delete, _) => out.push(Words::Removed(text.into())),
            (similar::ChangeTag::Insert, _) => out.push(Words::Added(text.into())),
        }
    }
    out
}

/// The interactions that differ between `old` and `new` (either side may be absent), in the
/// new file's order, removed ones last.
pub fn diff_cassettes(old: Option<&Cassette>, new: Option<&Cassette>) -> Vec<InteractionDiff> {
    paired_diffs(old, new).into_iter().map(|p| p.diff).collect()
}

/// One difference and where it is: its position in the old file and in the new one.
#[derive(Clone, Debug)]
pub struct Paired {
    /// Its position in the old file, if it is there.
    pub old: Option<usize>,
    /// Its position in the new file, if it is there.
    pub new: Option<usize>,
    /// What differs.
    pub diff: InteractionDiff,
}

/// As [`diff_cassettes`], with each difference's positions on both sides.
pub fn paired_diffs(old: Option<&Cassette>, new: Option<&Cassette>) -> Vec<Paired> {
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
    let mut out: Vec<Paired> = pairs
        .into_iter()
        .filter_map(|(i, j)| {
            let diff = match i {
                Some(i) => changed(&old[i], &new[j])?,
                None => one_side(Change::Added, &new[j]),
            };
            Some(Paired {
                old: i,
                new: Some(j),
                diff,
            })
        })
        .collect();
    out.extend((0..old.len()).filter(|&i| !old_taken[i]).map(|i| Paired {
        old: Some(i),
        new: None,
        diff: one_side(Change::Removed, &old[i]),
    }));
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
        drift: Vec::new(),
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
    d.drift = drift(&old.response, &new.response);
    // The very answer, seal for seal, under another request: a re-key. A re-record whose
    // answer reads the same has new ids, and stays a plain request change.
    if d.drift.is_empty() && !same_request && old.seal.is_some() && old.seal == new.seal {
        d.drift.push(Drift::RequestOnly);
    }
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
    use cassettes::Key;

    /// An answer kept as the gzip bytes received reads as its decoded text.
    #[test]
    fn a_gzip_answer_reads_decoded() {
        use std::io::Write;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(br#"{"choices":[{"message":{"content":"Zipped"}}]}"#)
            .unwrap();
        let headers =
            std::collections::BTreeMap::from([("content-encoding".into(), "gzip".into())]);
        let r = RecordedResponse::with_body(200, headers, &gz.finish().unwrap());
        assert_eq!(answer_text(&r), "Zipped");
    }

    fn cassette(list: Vec<Interaction>) -> Cassette {
        let mut c = Cassette::new(
            &cassettes::TestId::new("t"),
            &cassettes::ProviderName::new("openai").unwrap(),
        );
        c.interactions = list;
        c
    }

    /// A Realtime session whose answer changed: the diff is of the transcripts, deltas
    /// assembled, with new event ids alone not a change.
    #[test]
    fn a_session_is_reviewed_by_its_transcript() {
        use cassettes::session::{Side, WsFrame};
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
            let request = cassettes::Normalizer::plain().session(
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
                recorded_at: None,
                verified_at: None,
                step: None,
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

    /// Each fixture under `src/fixtures/drift/` is an answer before and after, and the classes
    /// its change must get.
    #[test]
    fn drift_classes_of_each_fixture() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/fixtures/drift");
        let mut seen = std::collections::HashSet::new();
        for file in std::fs::read_dir(&dir).unwrap() {
            let path = file.unwrap().path();
            let fixture: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
            let response = |side: &str| {
                let body = serde_json::to_vec(&fixture[side]["body"]).unwrap();
                let status = fixture[side]["status"].as_u64().unwrap() as u16;
                RecordedResponse::with_body(status, Default::default(), &body)
            };
            let expected: Vec<Drift> = serde_json::from_value(fixture["expect"].clone()).unwrap();
            assert_eq!(
                drift(&response("before"), &response("after")),
                expected,
                "{}",
                path.display()
            );
            seen.extend(expected);
        }
        // `request only` is a matter of the whole interaction, not of two answers: tested below;
        // `trajectory` of a test's whole run (the trajectory module's tests).
        assert_eq!(
            seen.len(),
            Drift::ALL.len() - 2,
            "a fixture for every class"
        );
    }

    /// The very answer, seal and all, under another request: a re-key, of its own class. The
    /// same words recorded again (new ids, another seal) stay a plain request change.
    #[test]
    fn a_rekeyed_recording_is_request_only() {
        let sealed = |prompt: &str, answer: &str| {
            let mut x = interaction(prompt, answer);
            x.seal = Some(cassettes::seal_of(&x.response));
            x
        };
        let old = sealed(
            "Hi",
            r#"{"id":"a","choices":[{"message":{"content":"Hello"}}]}"#,
        );
        let rekeyed = sealed(
            "Hi there",
            r#"{"id":"a","choices":[{"message":{"content":"Hello"}}]}"#,
        );
        let d = changed(&old, &rekeyed).unwrap();
        assert_eq!(d.drift, [Drift::RequestOnly]);
        let again = sealed(
            "Hi there",
            r#"{"id":"b","choices":[{"message":{"content":"Hello"}}]}"#,
        );
        assert!(changed(&old, &again).unwrap().drift.is_empty());
    }

    #[test]
    fn a_rewrite_is_told_from_a_small_change() {
        assert!(mostly_rewritten(
            "Hi there! How can I help you today?",
            "Bonjour ! Comment puis-je vous aider ?"
        ));
        assert!(!mostly_rewritten(
            "You said: Hello",
            "You said: Hello there"
        ));
        assert!(!mostly_rewritten(
            r#"tool call: get_weather({"city":"Paris"})"#,
            r#"tool call: get_weather({"city":"Paris","unit":"celsius"})"#
        ));
    }

    #[test]
    fn a_one_word_change_is_that_word() {
        let before = "The quick brown fox jumps over the lazy dog.\nSecond line stays.";
        let after = "The quick red fox jumps over the lazy dog.\nSecond line stays.";
        let words = word_diff(before, after);
        assert_eq!(
            words[..3],
            [
                Words::Same("The quick ".into()),
                Words::Removed("brown".into()),
                Words::Added("red".into()),
            ]
        );
        assert_eq!(words.len(), 4);
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
