//! `cargo llmreplay trajectory`: each selected test's recorded exchanges in the order the test
//! made them (model calls with the tools they asked for, HTTP tool calls, MCP calls), built by
//! `review::trajectory` and rendered here as text, JSON or a Chrome trace that Perfetto opens.

use crate::args::{CassetteDirArg, Resolved, TestSelection};
use crate::error::{Error, Outcome, Result};
use crate::render::{self, plural, term, Styles};
use cassettes::{Cassette, TestId};
use clap::{Args, ValueEnum};
use review::trajectory::{Call, Gather, Step, Trajectory, TrajectoryDiff};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt::Write as _;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TrajectoryFormat {
    Text,
    Json,
    /// Chrome trace event JSON: open it in Perfetto (ui.perfetto.dev) or chrome://tracing.
    Chrome,
}

#[derive(Args)]
#[command(
    about = "Show each test's recorded calls in order: model, HTTP tools and MCP",
    long_about = "Show each test's recorded calls in order: model, HTTP tools and MCP.\n\n\
        For every test whose cassettes match FILTER (a substring of the test id) or -E (nextest's \
        filter language over test ids), its recordings across all its cassette files in the order \
        the test made them when it was recorded: model calls (the model, the tools the answer asked \
        for with their arguments, its text, tokens), HTTP calls to captured hosts (method, path, \
        status) and MCP calls (server, method, tool, arguments, result), each with how long it \
        took. Recordings made before steps were kept have no recorded order: they follow the \
        others by file then position, and the output says the order is a guess.\n\n\
        With --base, each test whose cassettes changed against that commit is shown as the base \
        recorded it too, with what moved: a tool chosen instead of another, calls added or removed, \
        other arguments, the turns, the final answer's drift, and whether the tool calls changed \
        as [drift] trajectory in llmreplay.toml compares them (strict, unordered, subset, superset).",
    after_help = "Examples:\n  cargo llmreplay trajectory agent                          # tests whose id contains \"agent\"\n  \
        cargo llmreplay trajectory -E 'test(=books_a_flight)' --format json\n  \
        cargo llmreplay trajectory --format chrome > trace.json  # open in ui.perfetto.dev\n  \
        cargo llmreplay trajectory agent --base main              # the run as main recorded it, and now"
)]
pub struct TrajectoryArgs {
    #[command(flatten)]
    tests: TestSelection,
    /// How it prints.
    #[arg(long, value_enum, default_value = "text")]
    format: TrajectoryFormat,
    /// Also show each changed test's run as this commit recorded it, and what moved.
    #[arg(long, value_name = "REF")]
    base: Option<String>,
    #[command(flatten)]
    cassettes: CassetteDirArg,
}

pub fn run(args: TrajectoryArgs) -> Result<Outcome> {
    let resolved = Resolved::workspace(&args.cassettes)?;
    let selected = args.tests.matcher()?;
    let mut by_test: BTreeMap<TestId, Vec<(String, Cassette)>> = BTreeMap::new();
    for path in cassettes::cassette_files(resolved.cassette_dir())? {
        let cassette = cassettes::read_cassette(&path)?;
        if !selected(&cassette.test) {
            continue;
        }
        let file = path
            .file_name()
            .map_or_else(String::new, |f| f.to_string_lossy().into_owned());
        by_test
            .entry(cassette.test.clone())
            .or_default()
            .push((file, cassette));
    }
    if by_test.is_empty() {
        return Err(Error::Usage(format!(
            "no recorded test matches{} in {}",
            args.tests.described(),
            resolved.cassette_dir().display()
        )));
    }
    let trajectories: Vec<Trajectory> = by_test
        .into_iter()
        .map(|(test, files)| Trajectory::of(test, &files))
        .collect();
    let against = match &args.base {
        Some(base) => Some(against(&resolved, base, &selected)?),
        None => None,
    };
    let out =
        match (args.format, &against) {
            (TrajectoryFormat::Text, None) => text(&trajectories, Styles::for_stdout()),
            (TrajectoryFormat::Text, Some((label, runs, changed))) => {
                compared(&trajectories, label, runs, changed, Styles::for_stdout())
            }
            (TrajectoryFormat::Json, None) => pretty(&json!({ "trajectories": trajectories }))?,
            (TrajectoryFormat::Json, Some((label, runs, _))) => {
                let base: Vec<Value> = runs
                    .iter()
                    .map(|r| json!({"test": r.test, "steps": r.timelines[0]}))
                    .collect();
                pretty(&json!({
                    "trajectories": trajectories,
                    "base": {"commit": label, "trajectories": base},
                    "drift": runs,
                }))?
            }
            (TrajectoryFormat::Chrome, None) => pretty(&chrome(&trajectories))?,
            (TrajectoryFormat::Chrome, Some(_)) => return Err(Error::Usage(
                "--format chrome traces one run; leave out --base, or use --format text or json"
                    .into(),
            )),
        };
    render::stdout(&out).map_err(|e| Error::io("cannot write to stdout", e))?;
    Ok(Outcome::Success)
}

/// Each selected test's run against `base`'s, for the tests whose cassettes changed, the base
/// as git names it, and each test whose cassettes changed: true when all of them are new.
fn against(
    resolved: &Resolved,
    base: &str,
    selected: &dyn Fn(&TestId) -> bool,
) -> Result<(String, Vec<TrajectoryDiff>, BTreeMap<TestId, bool>)> {
    let mut gather = Gather::default();
    let mut changed: BTreeMap<TestId, bool> = BTreeMap::new();
    let diff = review::git::diff_against_with(
        resolved.cassette_dir(),
        review::git::Base::Rev(Some(base)),
        &[],
        Some(&mut |workdir, file| {
            let new = file.kind == review::git::ChangeKind::New;
            *changed.entry(file.test.clone()).or_insert(true) &= new;
            if selected(&file.test) {
                gather.add(workdir, file)
            }
        }),
    )?;
    Ok((
        diff.base,
        gather.compare(resolved.settings.trajectory_mode),
        changed,
    ))
}

/// Each test as now recorded; a changed one also as the base recorded it, then what moved.
fn compared(
    trajectories: &[Trajectory],
    base: &str,
    runs: &[TrajectoryDiff],
    changed: &BTreeMap<TestId, bool>,
    styles: Styles,
) -> String {
    let mut out = String::new();
    for t in trajectories {
        let Some(run) = runs.iter().find(|r| r.test == t.test) else {
            out.push_str(&text(std::slice::from_ref(t), styles));
            // Only a test whose cassettes git finds the same is unchanged: a new one has no
            // base run, and one whose recordings changed may keep its steps and tools.
            let base = term(base);
            let how = match changed.get(&t.test) {
                Some(true) => format!("new against {base}"),
                Some(false) => format!("changed against {base}; its steps and tool calls did not"),
                None => format!("unchanged against {base}"),
            };
            let _ = writeln!(out, "  ({how})");
            continue;
        };
        let _ = writeln!(out, "{}", styles.bold(&term(&t.test)));
        let _ = writeln!(
            out,
            " as {} recorded it ({}):",
            term(base),
            plural(run.timelines[0].len(), "step")
        );
        for step in &run.timelines[0] {
            step_lines(&mut out, step);
        }
        let _ = writeln!(out, " now ({}):", plural(t.steps.len(), "step"));
        for step in &t.steps {
            step_lines(&mut out, step);
        }
        out.push_str(&crate::diff_cmd::trajectory_text(run, styles, " "));
    }
    out
}

fn pretty(value: &Value) -> Result<String> {
    let mut out = serde_json::to_string_pretty(value)
        .map_err(|e| Error::Report(format!("cannot write the trajectories as JSON: {e}")))?;
    out.push('\n');
    Ok(out)
}

/// Each test, then its steps a line each, with what a tool call asked and what came back on
/// the lines under it; everything read from a cassette escaped for the terminal.
fn text(trajectories: &[Trajectory], styles: Styles) -> String {
    let mut out = String::new();
    for t in trajectories {
        let _ = writeln!(
            out,
            "{} ({})",
            styles.bold(&term(&t.test)),
            plural(t.steps.len(), "step")
        );
        if t.order_guessed {
            let _ = writeln!(
                out,
                "  {}",
                styles.warning(
                    "order guessed: recordings without a step (recorded before steps were kept) follow the others by file then position"
                )
            );
        }
        for step in &t.steps {
            step_lines(&mut out, step);
        }
    }
    out
}

fn step_lines(out: &mut String, step: &Step) {
    let place = step
        .step
        .map_or_else(|| "#?".to_string(), |n| format!("#{n}"));
    let took = step
        .timing
        .as_ref()
        .map(|t| format!("  {} ms", t.total_ms))
        .unwrap_or_default();
    let _ = write!(
        out,
        "  {place:<4} {:<5} {}",
        step.call.kind(),
        term(&step.call.title())
    );
    match &step.call {
        Call::Model {
            tool_calls,
            text,
            tokens,
            ..
        } => {
            let tokens = tokens
                .as_ref()
                .map(|t| format!("  {} in, {} out", t.input, t.output))
                .unwrap_or_default();
            let _ = writeln!(out, "{took}{tokens}");
            for call in tool_calls {
                let _ = writeln!(
                    out,
                    "         tool call: {}({})",
                    term(&call.name),
                    term(&call.arguments)
                );
            }
            if !text.is_empty() {
                let _ = writeln!(out, "         answer: {}", term(text));
            }
        }
        Call::Http { status, .. } => {
            let _ = writeln!(out, "  {status}{took}");
        }
        Call::Mcp {
            arguments, text, ..
        } => {
            let _ = writeln!(out, "{took}");
            if let Some(arguments) = arguments {
                let _ = writeln!(out, "         arguments: {}", term(&arguments.to_string()));
            }
            if let Some(text) = text {
                let _ = writeln!(out, "         result: {}", term(text));
            }
        }
    }
}

/// The track of each kind of call, so that Perfetto shows models, HTTP tools and MCP apart.
fn track(call: &Call) -> u64 {
    match call {
        Call::Model { .. } => 1,
        Call::Http { .. } => 2,
        Call::Mcp { .. } => 3,
    }
}

/// Chrome's trace event format, as nextest writes its runs: one process per test, named for
/// it, one thread per kind of call, each step a complete event ("X") at its place in the
/// test's time, in microseconds.
fn chrome(trajectories: &[Trajectory]) -> Value {
    let mut events = Vec::new();
    for (index, t) in trajectories.iter().enumerate() {
        let pid = index + 1;
        events.push(json!({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": t.test}}));
        for (tid, name) in [(1, "model"), (2, "http"), (3, "mcp")] {
            events.push(json!({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}));
        }
        for step in &t.steps {
            let dur_ms = step.timing.as_ref().map_or(0, |t| t.total_ms);
            events.push(json!({
                "name": step.call.title(),
                "cat": step.call.kind(),
                "ph": "X",
                "ts": step.start_ms * 1000,
                "dur": dur_ms * 1000,
                "pid": pid,
                "tid": track(&step.call),
                "args": step,
            }));
        }
    }
    json!({ "traceEvents": events, "displayTimeUnit": "ms" })
}

#[cfg(test)]
mod tests {
    use super::*;
    use cassettes::ToolCall;

    /// A test id, an answer and tool arguments that would clear a terminal and reorder a line.
    #[test]
    fn text_escapes_what_came_from_a_cassette_and_says_when_the_order_is_a_guess() {
        let t = Trajectory {
            test: TestId::new("t$evil\u{1b}[2J"),
            order_guessed: true,
            steps: vec![Step {
                step: None,
                cassette: "openai.json".into(),
                interaction: 1,
                start_ms: 0,
                timing: None,
                call: Call::Model {
                    provider: "openai".into(),
                    model: Some("m\u{202e}x".into()),
                    tool_calls: vec![ToolCall {
                        name: "rm\u{7}".into(),
                        arguments: "{\"a\":\"\u{1b}]8;;\"}".into(),
                    }],
                    text: "line one\nline two".into(),
                    tokens: None,
                },
            }],
            final_answer: None,
        };
        let out = text(&[t], Styles::plain());
        assert!(!out.contains(['\u{1b}', '\u{202e}', '\u{7}']), "{out}");
        assert!(out.contains("t$evil\\u{1b}[2J (1 step)"), "{out}");
        assert!(out.contains("  #?   model openai m\\u{202e}x"), "{out}");
        assert!(
            out.contains("tool call: rm\\u{7}({\"a\":\"\\u{1b}]8;;\"})"),
            "{out}"
        );
        assert!(out.contains("answer: line one\\u{a}line two"), "{out}");
        assert!(out.contains("order guessed"), "{out}");
    }
}
