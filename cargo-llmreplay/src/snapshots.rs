//! Snapshots of every rendered output on fixed inputs: the report summary and its markdown,
//! `diff` as text, markdown and JSON, `status` as text and JSON, `rerun` as text and markdown.
//! Taken before the render module was written, so that refactoring shows no unintended change.

use crate::render::Styles;
use crate::report::{Report, ReportExt};
use review::git::Diff;
use serde_json::json;
use std::path::Path;

const KEY: &str = "3f2a9c0b1d4e5f60718293a4b5c6d7e8f90123456789abcdef0123456789abcd";

pub(crate) fn report() -> Report {
    serde_json::from_value(json!({
        "llmreplay_report": 1,
        "mode": "replay",
        "scope": {"filtered": false, "partition": null},
        "generated_at_ms": 1,
        "tests_passed": true,
        "cassette_dir": "/ws/tests/cassettes",
        "counts": {"requests": 7, "hits": 4, "misses": 1, "recorded": 1, "replaced": 0,
                   "unchanged": 0, "passthrough": 0, "broken": 0, "errors": 0, "faults": 1},
        "missing": [{
            "test": "sample::chat$answers_hello", "provider": "openai", "method": "POST",
            "path": "/v1/chat/completions",
            "cassette": "/ws/tests/cassettes/sample--chat--answers_hello/openai.json",
            "key": KEY, "ordinal": 0, "model": "gpt-4o-mini", "prompt": "Say hello",
            "closest": ["/body/messages/0/content"],
            "values": [{"field": "/body/messages/0/content", "recorded": "Hello", "now": "Say hello"}],
            "same_call": true,
            "command": "cargo llmreplay test --record-missing -E 'test(=answers_hello)'",
            "rerecord": "cargo llmreplay test --record -E 'test(=answers_hello)'"
        }, {
            "test": "sample::chat$says_hi", "provider": "openai", "method": "POST",
            "path": "/v1/chat/completions",
            "cassette": "/ws/tests/cassettes/sample--chat--says_hi/openai.json",
            "key": KEY, "ordinal": 0, "model": "gpt-4o-mini", "prompt": "Hi",
            "command": "cargo llmreplay test --record-missing -E 'test(=says_hi)'",
            "renamed_from": {"test": "sample::chat$greets",
                             "command": "cargo llmreplay mv 'sample::chat$greets' 'sample::chat$says_hi'"}
        }],
        "escaped": [{
            "test": "sample::chat$agent", "provider": "tools.example", "method": "GET",
            "path": "/search",
            "cassette": "/ws/tests/cassettes/sample--chat--agent/tools.example.json",
            "key": KEY, "ordinal": 0, "host": "tools.example",
            "command": "cargo llmreplay test --record-missing -E 'test(=agent)'"
        }],
        "unattributed": true,
        "stopped_early": true,
        "recorded": [
            {"test": "sample::chat$answers_twice", "added": 1, "replaced": 1, "removed": 2},
            {"test": "sample::chat$flaky", "added": 1, "replaced": 0, "removed": 0,
             "kept": "a request to openai went upstream and was not saved"}
        ],
        "unused": [
            {"kind": "recording", "test": "sample::chat$old", "provider": "openai",
             "cassette": "/ws/tests/cassettes/sample--chat--old/openai.json", "key": KEY,
             "ordinal": 1, "answer": "You said: old"},
            {"kind": "folder", "folder": "/ws/tests/cassettes/sample--gone"}
        ],
        "error_answers": [{
            "test": "sample::chat$bad", "provider": "openai", "method": "POST",
            "path": "/v1/chat/completions", "status": 400,
            "cassette": "/ws/tests/cassettes/sample--chat--bad/openai.json",
            "ordinal": 0, "recorded": true
        }],
        "log": "/ws/target/llmreplay/daemon.log",
        "faults": {"sample::chat$flaky": 1},
        "changed": [
            {"path": "tests/cassettes/sample--chat--new/openai.json", "kind": "new",
             "added": 1, "replaced": 0, "removed": 0, "unchanged": 0},
            {"path": "tests/cassettes/sample--chat--x/openai.json", "kind": "modified",
             "added": 1, "replaced": 2, "removed": 0, "unchanged": 3},
            {"path": "tests/cassettes/sample--chat--y/anthropic.json", "kind": "deleted",
             "added": 0, "replaced": 0, "removed": 2, "unchanged": 0}
        ],
        "git": true
    }))
    .unwrap()
}

pub(crate) fn diff() -> Diff {
    serde_json::from_value(json!({
        "base": "HEAD (1a2b3c4d)",
        "files": [
            {"path": "tests/cassettes/sample--chat--answers_hello/openai.json",
             "test": "sample::chat$answers_hello", "provider": "openai", "kind": "modified",
             "interactions": [{
                "change": "changed", "method": "POST", "path": "/v1/chat/completions",
                "model": "gpt-4o-mini", "prompt": "Hello there", "prompt_before": "Hello",
                "request_fields": ["/body/messages/0/content"],
                "answer_before": "You said: Hello", "answer_after": "You said: Hello there",
                "answer_diff": "-You said: Hello\n+You said: Hello there\n",
                "drift": ["wording"],
                "tokens_before": {"input": 5, "output": 3},
                "tokens_after": {"input": 5, "output": 4}
             }, {
                "change": "changed", "method": "POST", "path": "/v1/chat/completions",
                "model": "gpt-4o-mini", "prompt": "Same",
                "response_fields": ["/usage/total_tokens"],
                "answer_before": "Same answer", "answer_after": "Same answer",
                "drift": ["usage"],
                "tokens_before": {"input": 5, "output": 2},
                "tokens_after": {"input": 5, "output": 2}
             }]},
            {"path": "tests/cassettes/sample--chat--new/anthropic.json",
             "test": "sample::chat$new", "provider": "anthropic", "kind": "new",
             "interactions": [{
                "change": "added", "method": "POST", "path": "/v1/messages",
                "model": "claude-x", "prompt": "New question",
                "answer_after": "A ```fenced``` answer\nover two lines",
                "tokens_after": {"input": 5, "output": 6}
             }]},
            {"path": "tests/cassettes/sample--chat--weather/openai.json",
             "test": "sample::chat$weather", "provider": "openai", "kind": "modified",
             "interactions": [{
                "change": "changed", "method": "POST", "path": "/v1/chat/completions",
                "model": "gpt-4o-mini", "prompt": "Weather in Paris?",
                "answer_before": "tool call: get_weather({\"city\":\"Paris\"})",
                "answer_after": "tool call: get_weather({\"city\":\"Paris\",\"unit\":\"celsius\"})",
                "answer_diff": "-tool call: get_weather({\"city\":\"Paris\"})\n+tool call: get_weather({\"city\":\"Paris\",\"unit\":\"celsius\"})\n",
                "drift": ["tool_call"]
             }]},
            {"path": "tests/cassettes/sample--chat--broken/openai.json",
             "test": "sample::chat$broken", "provider": "openai", "kind": "modified",
             "interactions": [], "error": "expected value at line 1 column 1"}
        ]
    }))
    .unwrap()
}

fn status() -> crate::status::Status {
    serde_json::from_value(json!({
        "changed": [{"path": "tests/cassettes/a--b/openai.json", "kind": "modified",
                     "added": 1, "replaced": 0, "removed": 0, "unchanged": 1}],
        "git": true,
        "orphans": ["sample--gone"],
        "listed": true,
        "problems": [
            {"path": "/ws/tests/cassettes/a--b/openai.json", "problem": "key_mismatch", "index": 0},
            {"path": "/ws/tests/cassettes/a--c/openai.json", "problem": "corrupt",
             "message": "expected value at line 3 column 5"}
        ],
        "fixed": [{"path": "/ws/tests/cassettes/a--d/openai.json",
                   "interactions": [{"index": 1, "key": [KEY, KEY], "summary": true}]}],
        "spools": [{"run_dir": "/ws/target/llmreplay/runs/20261127T063302Z-42",
                    "tests": {"sample::chat$killed": 2}}],
        "stale": [{"folder": "a--old", "fresh": null},
                  {"folder": "a--b", "fresh": "2026-09-28T00:00:00Z", "age_s": 5184000}]
    }))
    .unwrap()
}

fn rerun_results() -> Vec<crate::rerun::RerunResult> {
    serde_json::from_value(json!([
        {"test": "sample::chat$answers_hello", "provider": "openai",
         "cassette": "/ws/tests/cassettes/sample--chat--answers_hello/openai.json",
         "interaction": 1, "method": "POST", "path": "/v1/chat/completions",
         "verdict": "changed", "diff": "-You said: Hello\n+Hi!\n",
         "tokens_before": {"input": 5, "output": 3}, "tokens_after": {"input": 5, "output": 1},
         "tokens_delta": -2,
         "latency_before": {"ttfb_ms": 100, "total_ms": 300},
         "latency_after": {"ttfb_ms": 80, "total_ms": 250}, "latency_delta_ms": -50,
         "request_id": "req_1"},
        {"test": "sample::chat$asks", "provider": "anthropic",
         "cassette": "/ws/tests/cassettes/sample--chat--asks/anthropic.json",
         "interaction": 2, "method": "POST", "path": "/v1/messages",
         "verdict": "failed", "error": "could not reach http://127.0.0.1:1/v1/messages"}
    ]))
    .unwrap()
}

#[test]
fn report_summary() {
    let r = report();
    let path = Path::new("/ws/target/llmreplay/report.json");
    insta::assert_snapshot!(
        "report_summary",
        r.summary(Path::new("/ws"), path, Styles::plain())
    );
    insta::assert_snapshot!(
        "report_summary_colour",
        r.summary(Path::new("/ws"), path, Styles::coloured())
    );
    insta::assert_snapshot!("report_markdown", r.markdown());
}

/// A prompt changed in two tests and a third test is new: the fix that replaces comes first,
/// and one command records every test (keeping old recordings, since one miss is not a
/// changed call).
#[test]
fn report_summary_with_several_misses() {
    let miss = |name: &str, same_call: bool| {
        let filter = format!("'test(={name})'");
        json!({
            "test": format!("sample::chat${name}"), "provider": "openai", "method": "POST",
            "path": "/v1/chat/completions",
            "cassette": format!("/ws/tests/cassettes/sample--chat--{name}/openai.json"),
            "key": KEY, "ordinal": 0, "model": "gpt-4o-mini", "prompt": "Now",
            "closest": if same_call { json!(["/body/messages/0/content"]) } else { json!(null) },
            "values": if same_call {
                json!([{"field": "/body/messages/0/content", "recorded": "Then", "now": "Now"}])
            } else { json!([]) },
            "same_call": same_call,
            "command": format!("cargo llmreplay test --record-missing -E {filter}"),
            "rerecord": same_call.then(|| format!("cargo llmreplay test --record -E {filter}")),
        })
    };
    let mut value = serde_json::to_value(report()).unwrap();
    value["missing"] = json!([
        miss("greets", true),
        miss("answers", true),
        miss("brand_new", false)
    ]);
    value["escaped"] = json!([]);
    let r: Report = serde_json::from_value(value.clone()).unwrap();
    let path = Path::new("/ws/target/llmreplay/report.json");
    let summary = r.summary(Path::new("/ws"), path, Styles::plain());
    let missing = &summary[summary.find("missing (3)").unwrap()..];
    let missing = &missing[..missing.find("\nunused").unwrap_or(missing.len())];
    insta::assert_snapshot!("report_summary_several_misses", missing);
    // Every miss a changed call: the one command replaces.
    value["missing"] = json!([miss("greets", true), miss("answers", true)]);
    let r: Report = serde_json::from_value(value).unwrap();
    assert!(r.summary(Path::new("/ws"), path, Styles::plain()).contains(
        "record them all: cargo llmreplay test --record -E 'test(=answers) | test(=greets)'"
    ));
}

/// An answer rewritten in another language reads as old lines then new ones, not as two
/// sentences interleaved word by word; a small change stays a word diff.
#[test]
fn a_rewrite_reads_as_lines() {
    let mut d = diff();
    let x = &mut d.files[0].interactions[0];
    x.answer_before = Some("Hi there! How can I help you today?".into());
    x.answer_after = Some("Bonjour ! Comment puis-je vous aider ?".into());
    x.answer_diff = review::review::text_diff(
        x.answer_before.as_deref().unwrap(),
        x.answer_after.as_deref().unwrap(),
    );
    let text = crate::diff_cmd::interaction_text(x, Styles::plain(), false, "");
    insta::assert_snapshot!("diff_text_rewrite", text);
    insta::assert_snapshot!("diff_markdown_rewrite", crate::diff_cmd::markdown(&d, &[]));
    assert!(!text.contains("[-"), "{text}");
    let small = crate::diff_cmd::interaction_text(
        &diff().files[0].interactions[0],
        Styles::plain(),
        false,
        "",
    );
    assert!(small.contains("You said: Hello{+ there+}"), "{small}");
}

/// A failed gate says each reason with its fix: what is missing, and what `--deny` found.
#[test]
fn a_failed_gate_says_why() {
    let r = report();
    let failures = r.gate_failures(&[crate::report::Deny::Unused, crate::report::Deny::Changed]);
    insta::assert_snapshot!("gate_failed", Report::gate_text(&failures, Styles::plain()));
    assert!(r.gate_failures(&[]).len() < failures.len());
}

#[test]
fn diff_outputs() {
    let d = diff();
    insta::assert_snapshot!("diff_text", crate::diff_cmd::text(&d, &[], Styles::plain()));
    insta::assert_snapshot!(
        "diff_text_colour",
        crate::diff_cmd::text(&d, &[], Styles::coloured())
    );
    insta::assert_snapshot!("diff_markdown", crate::diff_cmd::markdown(&d, &[]));
    insta::assert_snapshot!("diff_json", crate::diff_cmd::json(&d, &[]).unwrap());
}

#[test]
fn status_outputs() {
    let s = status();
    insta::assert_snapshot!(
        "status_text",
        crate::status::text(&s, Path::new("/ws"), Path::new("/ws/tests/cassettes"))
    );
    insta::assert_snapshot!("status_json", serde_json::to_string_pretty(&s).unwrap());
}

#[test]
fn rerun_outputs() {
    let r = rerun_results();
    let totals = crate::rerun::totals(&r);
    insta::assert_snapshot!("rerun_text", crate::rerun::text(&r, &totals));
    insta::assert_snapshot!("rerun_markdown", crate::rerun::markdown(&r, &totals));
}
