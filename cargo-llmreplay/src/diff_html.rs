//! `cargo llmreplay diff --format html`: the diff as one self-contained page for a CI job's
//! artifacts. The headline and what can break code, then the run's report (its `Sections`,
//! rendered by `report::html`), then a section per test: its drift classes, its trajectory with
//! the base's and the work tree's timelines side by side, and each interaction that changed.
//!
//! The page runs nothing and fetches nothing: no script, only an inline style, and a content
//! security policy that forbids the rest. Everything from the cassettes goes through
//! `render::html` (one line) or `render::html_lines` (inside `<pre>`), so a test id or an answer
//! holding markup or bidi overrides shows as text.

use crate::diff_view::{
    answer_change, breaking, by_run, by_test, change_word, cost_words, counts, file_counts,
    headline, kind, request_line, run_cost, tokens_line, AnswerChange,
};
use crate::render::{html, html_lines, plural};
use crate::report::sections::Sections;
use review::git::{Diff, FileDiff};
use review::review::{Change, Drift, InteractionDiff, Words};
use review::trajectory::{Call, Step, TrajectoryDiff};
use std::collections::BTreeSet;
use std::fmt::Write as _;

/// Only the inline style may apply; nothing is loaded, run, framed or sent.
const POLICY: &str = "default-src 'none'; style-src 'unsafe-inline'";

const STYLE: &str = r#"
body { font: 15px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 72em; padding: 0 1em; color: #1f2328; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; } h3, h4 { font-size: 1em; }
code, pre { font-family: ui-monospace, monospace; font-size: 0.92em; }
pre { background: #f6f8fa; padding: 0.6em; white-space: pre-wrap; overflow-wrap: anywhere; }
.breaking, .gate h3, .severity-error > h4, p.severity-error { color: #b3261e; }
.severity-warning > h4, p.severity-warning { color: #8a5a00; }
section.test { border-top: 1px solid #d0d7de; }
.badge { display: inline-block; border-radius: 1em; padding: 0 0.6em; margin-right: 0.3em; background: #eaeef2; font-size: 0.85em; }
.badge.breaks { background: #ffebe9; color: #b3261e; font-weight: bold; }
.timelines { display: grid; grid-template-columns: 1fr 1fr; gap: 1.5em; }
ol.timeline { list-style: none; padding: 0; margin: 0; }
li.step { display: grid; grid-template-columns: 16em 1fr; gap: 0.5em; align-items: center; margin: 0.2em 0; }
.step .label { overflow-wrap: anywhere; font-size: 0.85em; }
.step .track { position: relative; height: 1.1em; background: #f6f8fa; }
.step .bar { position: absolute; top: 0; bottom: 0; min-width: 2px; }
.kind-model .bar { background: #5b8def; } .kind-http .bar { background: #e0a030; } .kind-mcp .bar { background: #3fa66b; }
del { background: #ffebe9; color: #82071e; } ins { background: #dafbe1; color: #116329; text-decoration: none; }
.interaction { margin: 1em 0 1em 1em; }
.tokens, .scope, li.none { color: #59636e; }
"#;

/// The page: the diff of `diff` and `trajectories`, opened by the run's report when there is one.
pub fn page(
    diff: &Diff,
    trajectories: &[TrajectoryDiff],
    run: Option<&Sections>,
    prices: &ledger::Prices,
) -> String {
    let c = counts(diff, trajectories);
    let mut out = format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"{POLICY}\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>cargo-llmreplay: recorded answers</title>\n<style>{STYLE}</style>\n</head>\n<body>\n\
         <header>\n<h1>cargo-llmreplay: recorded answers</h1>\n"
    );
    if diff.files.is_empty() {
        let _ = writeln!(
            out,
            "<p class=\"headline\">No cassette changed against <code>{}</code>.</p>",
            html(&diff.base)
        );
    } else {
        if let Some(sentence) = breaking(&c) {
            let _ = writeln!(
                out,
                "<p class=\"breaking\"><strong>Can break code: {}.</strong></p>",
                html(&sentence)
            );
        }
        let _ = writeln!(
            out,
            "<p class=\"headline\"><strong>{}</strong>, in {} (against <code>{}</code>).</p>",
            html(&headline(&c)),
            plural(c.files, "cassette"),
            html(&diff.base)
        );
    }
    out.push_str("</header>\n");
    if let Some(sections) = run {
        out.push_str(&crate::report::html::sections(sections));
    }
    let runs = by_run(trajectories);
    let sources = crate::source::Sources::new(&diff.workdir);
    for (n, (test, files)) in by_test(diff).into_iter().enumerate() {
        let run = runs.get(test).copied();
        let _ = writeln!(
            out,
            "<section class=\"test\" id=\"test-{}\">\n<h2><code>{}</code></h2>",
            n + 1,
            html(test)
        );
        out.push_str(&badges(&files, run));
        if let Some(at) = sources.of(&cassettes::TestId::new(test)) {
            let _ = writeln!(
                out,
                "<p class=\"source\">Source: <code>{}</code></p>",
                html(&at)
            );
        }
        if let Some(t) = run {
            out.push_str(&trajectory(t, prices));
        }
        for f in files {
            file(&mut out, f);
        }
        out.push_str("</section>\n");
    }
    out.push_str("</body>\n</html>\n");
    out
}

/// The test's drift classes, worst first, those that can break code marked.
fn badges(files: &[&FileDiff], run: Option<&TrajectoryDiff>) -> String {
    let mut classes: BTreeSet<Drift> = files
        .iter()
        .flat_map(|f| &f.interactions)
        .flat_map(|d| d.drift.iter().copied())
        .collect();
    if run.is_some_and(|t| t.changed) {
        classes.insert(Drift::Trajectory);
    }
    if classes.is_empty() {
        return String::new();
    }
    let mut out = String::from("<p class=\"classes\">");
    for class in classes {
        let _ = write!(
            out,
            "<span class=\"badge drift-{}{}\">{}</span>",
            class.as_str().replace(' ', "-"),
            if class.can_break_code() {
                " breaks"
            } else {
                ""
            },
            class.as_str()
        );
    }
    out.push_str("</p>\n");
    out
}

/// How the test's tool calls moved, then its two runs as timelines on one scale.
fn trajectory(t: &TrajectoryDiff, prices: &ledger::Prices) -> String {
    let mode = html(t.mode.as_str());
    let judged = match t.changed {
        true => format!("<strong>Trajectory changed</strong> (<code>{mode}</code>)"),
        false => format!("Trajectory, its tools the same as <code>{mode}</code> compares them"),
    };
    let mut out = format!(
        "<div class=\"trajectory\">\n<p>{judged}: {}</p>\n",
        html(&t.headline())
    );
    let cost = |steps: &[Step]| cost_words(&run_cost(steps, prices));
    let _ = writeln!(
        out,
        "<p class=\"cost\">cost: {} → {} (prices of {})</p>",
        html(&cost(&t.timelines[0])),
        html(&cost(&t.timelines[1])),
        html(prices.date())
    );
    if !t.changes.is_empty() {
        out.push_str("<ul class=\"changes\">\n");
        for change in &t.changes {
            let _ = writeln!(out, "<li>{}</li>", html(&change.sentence()));
        }
        out.push_str("</ul>\n");
    }
    // Both runs on the longer one's scale, so that a bar's length compares across them.
    let end = |steps: &[Step]| {
        steps
            .iter()
            .map(|s| s.start_ms + s.timing.as_ref().map_or(0, |t| t.total_ms))
            .max()
            .unwrap_or(0)
    };
    let scale = end(&t.timelines[0]).max(end(&t.timelines[1]));
    out.push_str("<div class=\"timelines\">\n");
    for (side, steps) in [("base", &t.timelines[0]), ("now", &t.timelines[1])] {
        let _ = writeln!(
            out,
            "<div class=\"side {side}\">\n<h3>{side} ({})</h3>\n<ol class=\"timeline\">",
            plural(steps.len(), "step")
        );
        if steps.is_empty() {
            out.push_str("<li class=\"none\">nothing recorded</li>\n");
        }
        for step in steps {
            timeline_step(&mut out, step, scale);
        }
        out.push_str("</ol>\n</div>\n");
    }
    out.push_str("</div>\n</div>\n");
    out
}

fn timeline_step(out: &mut String, step: &Step, scale: u64) {
    let took = step.timing.as_ref().map_or(0, |t| t.total_ms);
    let percent = |ms: u64| match scale {
        0 => 0.0,
        scale => ms as f64 * 100.0 / scale as f64,
    };
    // What the step did beside what it was: the tools a model asked for, a host's status.
    let did = match &step.call {
        Call::Model { tool_calls, .. } if !tool_calls.is_empty() => {
            let names: Vec<&str> = tool_calls.iter().map(|c| c.name.as_str()).collect();
            format!("calls {}", names.join(", "))
        }
        Call::Model { .. } => "answers".to_string(),
        Call::Http { status, .. } => status.to_string(),
        Call::Mcp { .. } => String::new(),
    };
    let _ = writeln!(
        out,
        "<li class=\"step kind-{}\" title=\"{} ms\"><span class=\"label\">{}<br><span class=\"did\">{}</span></span>\
         <span class=\"track\"><span class=\"bar\" style=\"left:{:.2}%;width:{:.2}%\"></span></span></li>",
        step.call.kind(),
        took,
        html(&step.call.title()),
        html(&did),
        percent(step.start_ms),
        percent(took),
    );
}

/// A cassette file: how it changed, then each of its interactions.
fn file(out: &mut String, f: &FileDiff) {
    let _ = writeln!(
        out,
        "<div class=\"file\">\n<h3><code>{}</code> ({}): {}</h3>",
        html(&f.path.to_string_lossy()),
        html(&kind(f)),
        html(&file_counts(f))
    );
    if let Some(e) = &f.error {
        let _ = writeln!(
            out,
            "<p class=\"severity-error\">does not parse: <code>{}</code></p>",
            html(e)
        );
    }
    for d in &f.interactions {
        interaction(out, d);
    }
    out.push_str("</div>\n");
}

fn interaction(out: &mut String, d: &InteractionDiff) {
    let word = change_word(d.change);
    let _ = write!(
        out,
        "<div class=\"interaction {word}\">\n<p><strong>{word}</strong> <code>{}</code>",
        html(&request_line(d))
    );
    for class in &d.drift {
        let _ = write!(out, " <span class=\"badge\">{}</span>", class.as_str());
    }
    out.push_str("</p>\n");
    match (&d.prompt_before, &d.prompt) {
        (Some(a), Some(b)) => {
            let _ = writeln!(
                out,
                "<p>prompt: <q>{}</q> → <q>{}</q></p>",
                html(a),
                html(b)
            );
        }
        (None, Some(p)) => {
            let _ = writeln!(out, "<p>prompt: <q>{}</q></p>", html(p));
        }
        _ => {}
    }
    for (what, fields) in [
        ("request fields changed", &d.request_fields),
        ("response fields changed", &d.response_fields),
    ] {
        if !fields.is_empty() {
            let _ = writeln!(
                out,
                "<p>{what}: <code>{}</code></p>",
                html(&fields.join(", "))
            );
        }
    }
    match answer_change(d) {
        Some(AnswerChange::Words(words)) => {
            out.push_str("<p>answer, word by word:</p>\n<pre class=\"answer words\">");
            for w in &words {
                let _ = match w {
                    Words::Same(t) => write!(out, "{}", html_lines(t)),
                    Words::Removed(t) => write!(out, "<del>{}</del>", html_lines(t)),
                    Words::Added(t) => write!(out, "<ins>{}</ins>", html_lines(t)),
                };
            }
            out.push_str("</pre>\n");
        }
        Some(AnswerChange::Lines(lines)) => {
            out.push_str("<p>answer, rewritten:</p>\n<pre class=\"answer lines\">");
            for line in lines.lines() {
                let shown = html_lines(line);
                let _ = match line.as_bytes().first() {
                    Some(b'-') => writeln!(out, "<del>{shown}</del>"),
                    Some(b'+') => writeln!(out, "<ins>{shown}</ins>"),
                    _ => writeln!(out, "{shown}"),
                };
            }
            out.push_str("</pre>\n");
        }
        None => {
            if let Some(a) = d.answer_after.as_ref().or(d.answer_before.as_ref()) {
                let label = match d.change {
                    Change::Changed => "answer (unchanged)",
                    _ => "answer",
                };
                let _ = writeln!(
                    out,
                    "<p>{label}:</p>\n<pre class=\"answer\">{}</pre>",
                    html_lines(a)
                );
            }
        }
    }
    if let Some(t) = tokens_line(d) {
        let _ = writeln!(out, "<p class=\"tokens\">{}</p>", html(&t));
    }
    out.push_str("</div>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_diff_is_a_page_that_loads_nothing() {
        let diff = Diff {
            base: "<main>".into(),
            workdir: std::path::PathBuf::from("/nonexistent"),
            files: Vec::new(),
        };
        let page = page(&diff, &[], None, &ledger::Prices::vendored());
        assert!(page.starts_with("<!DOCTYPE html>"), "{page}");
        assert!(page.contains(&format!("content=\"{POLICY}\"")), "{page}");
        assert!(page.contains("against <code>&lt;main&gt;</code>"), "{page}");
        for fetches in [
            "<script", "<link", "<img", "src=", "href=", "url(", "@import",
        ] {
            assert!(!page.contains(fetches), "{fetches} in {page}");
        }
    }
}
