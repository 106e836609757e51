//! A test's trajectory: every exchange its recordings hold, across all its cassette files, in
//! the order the test made them (each interaction's `step`), as model calls (the tools each
//! asked for, its text, its tokens), HTTP tool calls and MCP calls, laid out in time by their
//! timings. Data only: the CLI renders it as text, JSON or a Chrome trace.

use crate::git::FileDiff;
use crate::review::{drift, Drift};
use cassettes::sequence::SequenceMode;
use cassettes::{
    mcp, Cassette, Interaction, RecordedResponse, Summary, TestId, Timing, Tokens, ToolCall,
};
use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One test's exchanges in order.
#[derive(Clone, Debug, Serialize)]
pub struct Trajectory {
    /// The test.
    pub test: TestId,
    /// Whether the order is a guess: some recording has no step (a cassette of before steps
    /// were kept), so those are placed after the others, by file then position.
    pub order_guessed: bool,
    /// The exchanges, first first.
    pub steps: Vec<Step>,
    /// The last model answer that said something, whole: what the test ends on, for its drift.
    #[serde(skip)]
    pub final_answer: Option<RecordedResponse>,
}

/// One exchange of the test.
#[derive(Clone, Debug, Serialize)]
pub struct Step {
    /// Its recorded place among the test's exchanges; none in older cassettes.
    pub step: Option<u64>,
    /// The cassette file it is in (`openai.json`).
    pub cassette: String,
    /// Its position in that file, from 1.
    pub interaction: usize,
    /// Milliseconds from the test's first exchange: the timings of those before it, added up
    /// (recordings keep how long each took, not when it began).
    pub start_ms: u64,
    /// How long it took.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timing: Option<Timing>,
    /// What it was.
    #[serde(flatten)]
    pub call: Call,
}

/// What an exchange was.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Call {
    /// A request to a model.
    Model {
        /// The cassette's provider.
        provider: String,
        /// The model the request named.
        #[serde(skip_serializing_if = "Option::is_none")]
        model: Option<String>,
        /// The tools the answer asked for, in order.
        tool_calls: Vec<ToolCall>,
        /// The answer's text.
        text: String,
        /// The tokens its usage counts.
        #[serde(skip_serializing_if = "Option::is_none")]
        tokens: Option<Tokens>,
    },
    /// A request to a host that is no model (a captured host, a tool's API).
    Http {
        /// The host (the cassette's name).
        host: String,
        /// The HTTP method.
        method: String,
        /// The path, with its query.
        path: String,
        /// The answer's status.
        status: u16,
    },
    /// A message to an MCP server.
    Mcp {
        /// The server's name (`mcp-<name>.json`).
        server: String,
        /// The JSON-RPC method.
        method: String,
        /// The tool a `tools/call` names.
        #[serde(skip_serializing_if = "Option::is_none")]
        tool: Option<String>,
        /// A `tools/call`'s arguments.
        #[serde(skip_serializing_if = "Option::is_none")]
        arguments: Option<Value>,
        /// The server's `result` (or `error`), as it answered.
        #[serde(skip_serializing_if = "Option::is_none")]
        result: Option<Value>,
        /// What a reviewer reads of the answer: its texts, the tools listed, an error.
        #[serde(skip_serializing_if = "Option::is_none")]
        text: Option<String>,
    },
}

impl Call {
    /// The kind's name, as JSON has it: `model`, `http` or `mcp`.
    pub fn kind(&self) -> &'static str {
        match self {
            Call::Model { .. } => "model",
            Call::Http { .. } => "http",
            Call::Mcp { .. } => "mcp",
        }
    }

    /// What the exchange is, on one line: `openai gpt-4o`, `GET tools.example/weather`,
    /// `calc tools/call add`.
    pub fn title(&self) -> String {
        match self {
            Call::Model {
                provider, model, ..
            } => match model {
                Some(model) => format!("{provider} {model}"),
                None => provider.clone(),
            },
            Call::Http {
                host, method, path, ..
            } => format!("{method} {host}{path}"),
            Call::Mcp {
                server,
                method,
                tool,
                ..
            } => match tool {
                Some(tool) => format!("{server} {method} {tool}"),
                None => format!("{server} {method}"),
            },
        }
    }
}

impl Trajectory {
    /// The trajectory of `test` from its cassettes, each with its file's name.
    pub fn of(test: TestId, cassettes: &[(String, Cassette)]) -> Trajectory {
        let parts = cassettes
            .iter()
            .map(|(file, cassette)| Part::of(file, cassette))
            .collect();
        Trajectory::of_parts(test, parts)
    }

    /// The trajectory of `test` from each of its files' part.
    pub fn of_parts(test: TestId, parts: Vec<Part>) -> Trajectory {
        let mut steps = Vec::new();
        let mut last: Option<Part> = None;
        for mut part in parts {
            steps.append(&mut part.steps);
            let later = match (&last, &part.last_answer) {
                (_, None) => false,
                (None, Some(_)) => true,
                (Some(l), Some((key, _))) => l.last_answer.as_ref().is_some_and(|(k, _)| key > k),
            };
            if later {
                last = Some(part);
            }
        }
        // Recorded steps first, in their order; the others after, by file then position. Two
        // recordings of one step (a test recorded again in part, by a later run) keep that order.
        steps.sort_by_key(order);
        let order_guessed = steps.iter().any(|s| s.step.is_none());
        let mut start_ms = 0;
        for s in &mut steps {
            s.start_ms = start_ms;
            start_ms += s.timing.as_ref().map_or(0, |t| t.total_ms);
        }
        Trajectory {
            test,
            order_guessed,
            steps,
            final_answer: last.and_then(|p| p.last_answer).map(|(_, answer)| answer),
        }
    }

    /// Every tool called, in order: those the model asked for, each MCP `tools/call`, and each
    /// call to a host that is no model.
    pub fn tool_uses(&self) -> Vec<ToolUse> {
        let mut out = Vec::new();
        for step in &self.steps {
            match &step.call {
                Call::Model { tool_calls, .. } => out.extend(tool_calls.iter().map(|c| {
                    ToolUse {
                        tool: c.name.clone(),
                        arguments: serde_json::from_str(&c.arguments)
                            .unwrap_or_else(|_| Value::String(c.arguments.clone())),
                    }
                })),
                Call::Mcp {
                    server,
                    tool: Some(tool),
                    arguments,
                    ..
                } => out.push(ToolUse {
                    tool: format!("mcp {server}: {tool}"),
                    arguments: arguments.clone().unwrap_or(Value::Null),
                }),
                Call::Mcp { .. } => {}
                Call::Http {
                    host, method, path, ..
                } => {
                    let (path, query) = path.split_once('?').unwrap_or((path, ""));
                    out.push(ToolUse {
                        tool: format!("{method} {host}{path}"),
                        arguments: match query {
                            "" => Value::Null,
                            query => Value::String(query.to_string()),
                        },
                    })
                }
            }
        }
        out
    }

    /// How many times the model was asked.
    pub fn turns(&self) -> usize {
        self.steps
            .iter()
            .filter(|s| matches!(s.call, Call::Model { .. }))
            .count()
    }
}

/// Where a step goes among a test's steps: recorded steps in their order, then the others by
/// file then position.
type Order = (bool, Option<u64>, String, usize);

fn order(s: &Step) -> Order {
    (s.step.is_none(), s.step, s.cassette.clone(), s.interaction)
}

/// One cassette file's share of a trajectory: its steps, and the last of its model answers
/// that said something, whole (what a test ends on may be in any of its files). Smaller than
/// the cassette: headers, raw bodies and streams are left behind.
#[derive(Clone, Debug)]
pub struct Part {
    steps: Vec<Step>,
    last_answer: Option<(Order, RecordedResponse)>,
}

impl Part {
    /// `cassette`'s share, the file named `file`.
    pub fn of(file: &str, cassette: &Cassette) -> Part {
        let mut last_answer: Option<(Order, RecordedResponse)> = None;
        let steps = cassette
            .interactions
            .iter()
            .enumerate()
            .map(|(position, x)| {
                let s = Step {
                    step: x.step,
                    cassette: file.to_string(),
                    interaction: position + 1,
                    start_ms: 0,
                    timing: x.timing.clone(),
                    call: call_of(cassette.provider.as_str(), x),
                };
                if matches!(&s.call, Call::Model { text, .. } if !text.is_empty()) {
                    let key = order(&s);
                    if last_answer.as_ref().is_none_or(|(k, _)| &key > k) {
                        last_answer = Some((key, x.response.clone()));
                    }
                }
                s
            })
            .collect();
        Part { steps, last_answer }
    }
}

/// A call of a tool, as trajectories compare them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ToolUse {
    /// Which tool: one the model asked for by name (`weather`), an MCP server's (`mcp calc:
    /// add`), or a host's path (`GET tools.example/weather`).
    pub tool: String,
    /// Its arguments (a host's query, as a string).
    pub arguments: Value,
}

/// How one tool call of the base's trajectory differs from the work tree's. Positions count
/// tool calls from 1.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "change", rename_all = "snake_case")]
pub enum ToolChange {
    /// Another tool was called in this one's place.
    Chosen {
        /// Its place now.
        position: usize,
        /// The base's tool.
        before: String,
        /// The tool called now.
        after: String,
    },
    /// A tool call the base did not make.
    Added {
        /// Its place now.
        position: usize,
        /// The tool.
        tool: String,
    },
    /// A tool call of the base's the test no longer makes.
    Removed {
        /// Its place in the base.
        position: usize,
        /// The tool.
        tool: String,
    },
    /// The same tool, called with other arguments.
    Arguments {
        /// Its place now.
        position: usize,
        /// The tool.
        tool: String,
        /// The base's arguments.
        before: Value,
        /// Now's.
        after: Value,
    },
}

impl ToolChange {
    /// In a few words, unescaped: `call 2: forecast instead of weather`.
    pub fn sentence(&self) -> String {
        match self {
            ToolChange::Chosen {
                position,
                before,
                after,
            } => format!("call {position}: {after} instead of {before}"),
            ToolChange::Added { position, tool } => format!("call {position} added: {tool}"),
            ToolChange::Removed { position, tool } => {
                format!("call {position} of the base removed: {tool}")
            }
            ToolChange::Arguments {
                position,
                tool,
                before,
                after,
            } => format!("call {position} {tool}: arguments {before} -> {after}"),
        }
    }
}

/// A test's trajectory against the base's: the tools it called, how they changed, its turns
/// and steps, and how its final answer drifted.
#[derive(Clone, Debug, Serialize)]
pub struct TrajectoryDiff {
    /// The test.
    pub test: TestId,
    /// How the tool calls were compared (`[drift] trajectory`).
    pub mode: SequenceMode,
    /// Whether the tool calls changed, as the mode judges them: the `trajectory` drift class.
    pub changed: bool,
    /// The tools called, in the base and now, in order.
    pub tools: [Vec<String>; 2],
    /// Call by call, what differs (whatever the mode says of it).
    pub changes: Vec<ToolChange>,
    /// The model's turns, in the base and now.
    pub turns: [usize; 2],
    /// The exchanges, in the base and now.
    pub steps: [usize; 2],
    /// How the final answer changed, when it did: its drift classes.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub final_answer: Vec<Drift>,
    /// The base's steps, and now's: the timelines side by side.
    #[serde(skip)]
    pub timelines: [Vec<Step>; 2],
}

impl TrajectoryDiff {
    /// `base` against `now` in `mode`; None when nothing a reviewer reads of the run moved
    /// (the tools, their arguments, the turns, the steps and the final answer alike), and for
    /// what is no agent's run: a test new or gone (its files say so), or one that called no
    /// tool and made one exchange (its answer's drift says all).
    pub fn between(base: &Trajectory, now: &Trajectory, mode: SequenceMode) -> Option<Self> {
        let (was, is) = (base.tool_uses(), now.tool_uses());
        let agent = |t: &Trajectory, uses: &[ToolUse]| t.steps.len() > 1 || !uses.is_empty();
        if base.steps.is_empty() || now.steps.is_empty() || !(agent(base, &was) || agent(now, &is))
        {
            return None;
        }
        let names = |uses: &[ToolUse]| uses.iter().map(|u| u.tool.clone()).collect::<Vec<_>>();
        let tools = [names(&was), names(&is)];
        let changes = tool_changes(&was, &is);
        let final_answer = match (&base.final_answer, &now.final_answer) {
            (Some(a), Some(b)) => drift(a, b),
            (None, None) => Vec::new(),
            _ => vec![Drift::Structure],
        };
        let turns = [base.turns(), now.turns()];
        let steps = [base.steps.len(), now.steps.len()];
        if changes.is_empty()
            && final_answer.is_empty()
            && turns[0] == turns[1]
            && steps[0] == steps[1]
        {
            return None;
        }
        Some(TrajectoryDiff {
            test: now.test.clone(),
            mode,
            changed: !mode.holds(&tools[0], &tools[1]),
            tools,
            changes,
            turns,
            steps,
            final_answer,
            timelines: [base.steps.clone(), now.steps.clone()],
        })
    }

    /// What changed, in a sentence, unescaped: `tools search, weather -> search, forecast;
    /// turns 2 -> 3`.
    pub fn headline(&self) -> String {
        let list = |tools: &[String]| match tools.is_empty() {
            true => "none".to_string(),
            false => tools.join(", "),
        };
        let mut parts = Vec::new();
        if self.tools[0] != self.tools[1] {
            parts.push(format!(
                "tools {} -> {}",
                list(&self.tools[0]),
                list(&self.tools[1])
            ));
        } else if !self.tools[0].is_empty() {
            parts.push(format!("tools {} (same)", list(&self.tools[0])));
        }
        if self.turns[0] != self.turns[1] {
            parts.push(format!(
                "turns {} -> {} ({:+})",
                self.turns[0],
                self.turns[1],
                self.turns[1] as i64 - self.turns[0] as i64
            ));
        }
        if self.steps[0] != self.steps[1] {
            parts.push(format!("steps {} -> {}", self.steps[0], self.steps[1]));
        }
        if !self.final_answer.is_empty() {
            let classes: Vec<&str> = self.final_answer.iter().map(|d| d.as_str()).collect();
            parts.push(format!("final answer: {}", classes.join(", ")));
        }
        parts.join("; ")
    }
}

/// Gathers the changed cassette files of each test as a diff reads them, each as the base has
/// it and as the work tree has it, then compares each test's trajectory with the base's.
#[derive(Default)]
pub struct Gather {
    tests: BTreeMap<TestId, (PathBuf, Vec<Sides>)>,
}

/// A file's name and its share of each side's trajectory: memory follows what the runs say,
/// not the cassettes.
type Sides = (String, Option<Part>, Option<Part>);

impl Gather {
    /// Keeps `file`'s share of each side's trajectory under its test (its cassettes are
    /// left to it); `workdir` is the diff's.
    pub fn add(&mut self, workdir: &Path, file: &FileDiff) {
        let name = file
            .path
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        let folder = workdir.join(file.path.parent().unwrap_or(Path::new("")));
        let (base, work) = (
            file.sides.base.as_ref().map(|c| Part::of(&name, c)),
            file.sides.work.as_ref().map(|c| Part::of(&name, c)),
        );
        self.tests
            .entry(file.test.clone())
            .or_insert_with(|| (folder, Vec::new()))
            .1
            .push((name, base, work));
    }

    /// Each test's trajectory against the base's, in `mode`, for the tests whose run moved. A
    /// test's files that did not change are read from the work tree: they are the base's too.
    pub fn compare(self, mode: SequenceMode) -> Vec<TrajectoryDiff> {
        let mut out = Vec::new();
        for (test, (folder, mut files)) in self.tests {
            let changed: BTreeSet<String> = files.iter().map(|f| f.0.clone()).collect();
            // A folder that cannot be listed, or a file that does not parse, leaves the
            // trajectory without it: the file's own diff says what is wrong with it.
            for path in cassettes::json_files(&folder).unwrap_or_default() {
                let name = path
                    .file_name()
                    .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
                if changed.contains(&name) {
                    continue;
                }
                if let Ok(c) = cassettes::read_cassette(&path) {
                    let part = Part::of(&name, &c);
                    files.push((name, Some(part.clone()), Some(part)));
                }
            }
            let (mut base, mut work) = (Vec::new(), Vec::new());
            for (_, b, w) in files {
                base.extend(b);
                work.extend(w);
            }
            let (before, now) = (
                Trajectory::of_parts(test.clone(), base),
                Trajectory::of_parts(test, work),
            );
            out.extend(TrajectoryDiff::between(&before, &now, mode));
        }
        out
    }
}

/// Call by call, by the tools' names in order (the longest run they share kept in place):
/// one called instead of another, calls added and removed, the same tool with other arguments.
fn tool_changes(was: &[ToolUse], is: &[ToolUse]) -> Vec<ToolChange> {
    use similar::DiffOp;
    let (a, b): (Vec<&str>, Vec<&str>) = (
        was.iter().map(|u| u.tool.as_str()).collect(),
        is.iter().map(|u| u.tool.as_str()).collect(),
    );
    let mut out = Vec::new();
    let removed = |i: usize| ToolChange::Removed {
        position: i + 1,
        tool: was[i].tool.clone(),
    };
    let added = |j: usize| ToolChange::Added {
        position: j + 1,
        tool: is[j].tool.clone(),
    };
    for op in similar::capture_diff_slices(similar::Algorithm::Myers, &a, &b) {
        match op {
            DiffOp::Equal {
                old_index,
                new_index,
                len,
            } => {
                for k in 0..len {
                    let (x, y) = (&was[old_index + k], &is[new_index + k]);
                    if x.arguments != y.arguments {
                        out.push(ToolChange::Arguments {
                            position: new_index + k + 1,
                            tool: y.tool.clone(),
                            before: x.arguments.clone(),
                            after: y.arguments.clone(),
                        });
                    }
                }
            }
            DiffOp::Delete {
                old_index, old_len, ..
            } => out.extend((old_index..old_index + old_len).map(removed)),
            DiffOp::Insert {
                new_index, new_len, ..
            } => out.extend((new_index..new_index + new_len).map(added)),
            DiffOp::Replace {
                old_index,
                old_len,
                new_index,
                new_len,
            } => {
                let paired = old_len.min(new_len);
                for k in 0..paired {
                    out.push(ToolChange::Chosen {
                        position: new_index + k + 1,
                        before: was[old_index + k].tool.clone(),
                        after: is[new_index + k].tool.clone(),
                    });
                }
                out.extend((old_index + paired..old_index + old_len).map(removed));
                out.extend((new_index + paired..new_index + new_len).map(added));
            }
        }
    }
    out
}

/// What `x`, recorded in `provider`'s cassette, was: an MCP server's by its name; a model call
/// when the request names a model or the answer counts tokens or asks for tools; else an HTTP
/// call to the host the cassette is named for.
fn call_of(provider: &str, x: &Interaction) -> Call {
    if let Some(server) = provider.strip_prefix(mcp::PREFIX) {
        return mcp_call(server, x);
    }
    let summary = x.summary.clone().or_else(|| Summary::of(&x.response));
    let model = x.request.model();
    let asks_model = model.is_some()
        || summary
            .as_ref()
            .is_some_and(|s| s.usage.is_some() || !s.tool_calls.is_empty());
    if asks_model {
        let summary = summary.unwrap_or_default();
        return Call::Model {
            provider: provider.to_string(),
            model,
            tokens: summary.tokens(),
            tool_calls: summary.tool_calls,
            text: summary.text,
        };
    }
    let path = match &x.request.query {
        Some(query) => format!("{}?{query}", x.request.path),
        None => x.request.path.clone(),
    };
    Call::Http {
        host: provider.to_string(),
        method: x.request.method.clone(),
        path,
        status: x.response.status,
    }
}

fn mcp_call(server: &str, x: &Interaction) -> Call {
    let message = x.request.json();
    let method = message
        .and_then(mcp::method)
        .map_or_else(|| x.request.path.clone(), str::to_string);
    let tool = message.and_then(mcp::tool).map(str::to_string);
    let arguments = message
        .and_then(|m| m.pointer("/params/arguments"))
        .cloned();
    let result = mcp::server_messages(&x.response)
        .into_iter()
        .filter(|m| mcp::kind(m) == Some(mcp::Kind::Response))
        .find_map(|m| m.get("result").or_else(|| m.get("error")).cloned());
    Call::Mcp {
        server: server.to_string(),
        method,
        tool,
        arguments,
        result,
        text: mcp::answer_text(&x.response),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cassettes::{Key, ProviderName, RecordedRequest, RecordedResponse};
    use std::collections::BTreeMap;

    fn interaction(
        method: &str,
        path: &str,
        body: Value,
        answer: Value,
        step: Option<u64>,
        total_ms: u64,
    ) -> Interaction {
        let request = RecordedRequest {
            method: method.into(),
            path: path.into(),
            query: None,
            body: cassettes::Body::exact(&serde_json::to_vec(&body).unwrap()),
            websocket: false,
        };
        let response =
            RecordedResponse::with_body(200, BTreeMap::new(), answer.to_string().as_bytes());
        let mut x = Interaction::recorded(
            Key::of(&request),
            request,
            response,
            Timing {
                ttfb_ms: total_ms / 2,
                total_ms,
            },
        );
        x.step = step;
        x
    }

    fn cassette(provider: &str, interactions: Vec<Interaction>) -> Cassette {
        let mut c = Cassette::new(
            &TestId::new("t$agent"),
            &ProviderName::new(provider).unwrap(),
        );
        c.interactions = interactions;
        c
    }

    fn model_asking_tool(step: Option<u64>) -> Interaction {
        interaction(
            "POST",
            "/v1/chat/completions",
            serde_json::json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "weather?"}]}),
            serde_json::json!({"model": "gpt-4o", "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}}]}, "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 9, "completion_tokens": 7, "total_tokens": 16}}),
            step,
            100,
        )
    }

    fn model_answering(step: Option<u64>) -> Interaction {
        interaction(
            "POST",
            "/v1/chat/completions",
            serde_json::json!({"model": "gpt-4o", "messages": [{"role": "tool", "content": "sunny"}]}),
            serde_json::json!({"model": "gpt-4o", "choices": [{"index": 0, "message": {"role": "assistant", "content": "It is sunny."}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 20, "completion_tokens": 4, "total_tokens": 24}}),
            step,
            50,
        )
    }

    fn mcp_call_add(step: Option<u64>) -> Interaction {
        interaction(
            "MCP",
            "tools/call",
            serde_json::json!({"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "add", "arguments": {"a": 2, "b": 3}}}),
            serde_json::json!([{"server": {"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": "5"}]}}}]),
            step,
            10,
        )
    }

    fn kinds(t: &Trajectory) -> Vec<String> {
        t.steps.iter().map(|s| s.call.title()).collect()
    }

    #[test]
    fn steps_across_two_files_interleave_in_the_order_they_were_made() {
        let files = vec![
            (
                "mcp-calc.json".to_string(),
                cassette("mcp-calc", vec![mcp_call_add(Some(1))]),
            ),
            (
                "openai.json".to_string(),
                cassette(
                    "openai",
                    vec![model_asking_tool(Some(0)), model_answering(Some(2))],
                ),
            ),
        ];
        let t = Trajectory::of(TestId::new("t$agent"), &files);
        assert!(!t.order_guessed);
        assert_eq!(
            kinds(&t),
            ["openai gpt-4o", "calc tools/call add", "openai gpt-4o"]
        );
        assert_eq!(
            t.steps.iter().map(|s| s.start_ms).collect::<Vec<_>>(),
            [0, 100, 110]
        );
        match &t.steps[0].call {
            Call::Model {
                tool_calls, tokens, ..
            } => {
                assert_eq!(tool_calls[0].name, "weather");
                assert_eq!(tool_calls[0].arguments, "{\"city\":\"Paris\"}");
                assert_eq!(tokens.as_ref().map(|t| (t.input, t.output)), Some((9, 7)));
            }
            other => panic!("a model call, not {other:?}"),
        }
        match &t.steps[1].call {
            Call::Mcp {
                arguments, result, ..
            } => {
                assert_eq!(arguments, &Some(serde_json::json!({"a": 2, "b": 3})));
                assert_eq!(result.as_ref().unwrap()["content"][0]["text"], "5");
            }
            other => panic!("an MCP call, not {other:?}"),
        }
        assert_eq!(
            (t.steps[2].cassette.as_str(), t.steps[2].interaction),
            ("openai.json", 2)
        );
    }

    #[test]
    fn a_missing_step_goes_after_the_known_ones_by_file_then_position_and_is_a_guess() {
        let files = vec![
            (
                "mcp-calc.json".to_string(),
                cassette("mcp-calc", vec![mcp_call_add(None)]),
            ),
            (
                "openai.json".to_string(),
                cassette(
                    "openai",
                    vec![model_asking_tool(Some(1)), model_answering(Some(0))],
                ),
            ),
        ];
        let t = Trajectory::of(TestId::new("t$agent"), &files);
        assert!(t.order_guessed);
        assert_eq!(
            t.steps.iter().map(|s| s.step).collect::<Vec<_>>(),
            [Some(0), Some(1), None]
        );
        assert_eq!(t.steps[2].cassette, "mcp-calc.json");
    }

    #[test]
    fn without_steps_the_order_is_file_then_position() {
        let files = vec![
            (
                "openai.json".to_string(),
                cassette(
                    "openai",
                    vec![model_asking_tool(None), model_answering(None)],
                ),
            ),
            (
                "tools.example.json".to_string(),
                cassette(
                    "tools.example",
                    vec![interaction(
                        "GET",
                        "/weather",
                        Value::Null,
                        serde_json::json!({"sky": "sunny"}),
                        None,
                        5,
                    )],
                ),
            ),
        ];
        let t = Trajectory::of(TestId::new("t$agent"), &files);
        assert!(t.order_guessed);
        assert_eq!(
            kinds(&t),
            [
                "openai gpt-4o",
                "openai gpt-4o",
                "GET tools.example/weather"
            ]
        );
        assert_eq!(
            t.steps[2].call,
            Call::Http {
                host: "tools.example".into(),
                method: "GET".into(),
                path: "/weather".into(),
                status: 200
            }
        );
    }

    fn model_asking(tool: &str, args: &str, step: u64) -> Interaction {
        interaction(
            "POST",
            "/v1/chat/completions",
            serde_json::json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "weather?"}]}),
            serde_json::json!({"model": "gpt-4o", "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": tool, "arguments": args}}]}, "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 9, "completion_tokens": 7, "total_tokens": 16}}),
            Some(step),
            100,
        )
    }

    fn run_of(calls: &[(&str, &str)]) -> Trajectory {
        let mut xs: Vec<Interaction> = calls
            .iter()
            .enumerate()
            .map(|(i, (tool, args))| model_asking(tool, args, i as u64))
            .collect();
        xs.push(model_answering(Some(calls.len() as u64)));
        Trajectory::of(
            TestId::new("t$agent"),
            &[("openai.json".to_string(), cassette("openai", xs))],
        )
    }

    #[test]
    fn a_tool_chosen_instead_of_another_is_a_trajectory_change_in_every_mode() {
        let base = run_of(&[("search", "{}"), ("weather", r#"{"city":"Paris"}"#)]);
        let now = run_of(&[("search", "{}"), ("forecast", r#"{"city":"Paris"}"#)]);
        for mode in [
            SequenceMode::Strict,
            SequenceMode::Unordered,
            SequenceMode::Subset,
            SequenceMode::Superset,
        ] {
            let d = TrajectoryDiff::between(&base, &now, mode).unwrap();
            assert!(d.changed, "{mode:?}");
        }
        let d = TrajectoryDiff::between(&base, &now, SequenceMode::Strict).unwrap();
        assert_eq!(
            d.changes,
            [ToolChange::Chosen {
                position: 2,
                before: "weather".into(),
                after: "forecast".into()
            }]
        );
        assert_eq!(
            d.changes[0].sentence(),
            "call 2: forecast instead of weather"
        );
        assert_eq!(d.turns, [3, 3]);
        assert!(d.final_answer.is_empty(), "{:?}", d.final_answer);
        assert_eq!(d.headline(), "tools search, weather -> search, forecast");
    }

    #[test]
    fn reordered_dropped_and_added_calls_are_judged_by_the_mode() {
        let base = run_of(&[("search", "{}"), ("weather", "{}")]);
        let judged = |now: &Trajectory| {
            [
                SequenceMode::Strict,
                SequenceMode::Unordered,
                SequenceMode::Subset,
                SequenceMode::Superset,
            ]
            .map(|mode| TrajectoryDiff::between(&base, now, mode).unwrap().changed)
        };
        let reordered = run_of(&[("weather", "{}"), ("search", "{}")]);
        assert_eq!(judged(&reordered), [true, false, false, false]);
        let dropped = run_of(&[("search", "{}")]);
        assert_eq!(judged(&dropped), [true, true, false, true]);
        let added = run_of(&[("search", "{}"), ("weather", "{}"), ("calc", "{}")]);
        assert_eq!(judged(&added), [true, true, true, false]);
        let d = TrajectoryDiff::between(&base, &added, SequenceMode::Superset).unwrap();
        assert_eq!(
            d.changes,
            [ToolChange::Added {
                position: 3,
                tool: "calc".into()
            }]
        );
        assert_eq!(d.turns, [3, 4]);
        assert!(
            d.headline().contains("turns 3 -> 4 (+1)"),
            "{}",
            d.headline()
        );
        let d = TrajectoryDiff::between(&base, &dropped, SequenceMode::Strict).unwrap();
        assert_eq!(
            d.changes,
            [ToolChange::Removed {
                position: 2,
                tool: "weather".into()
            }]
        );
    }

    #[test]
    fn other_arguments_are_told_but_are_no_trajectory_change_and_an_unchanged_run_is_none() {
        let base = run_of(&[("weather", r#"{"city":"Paris"}"#)]);
        let now = run_of(&[("weather", r#"{"city":"Lyon"}"#)]);
        let d = TrajectoryDiff::between(&base, &now, SequenceMode::Strict).unwrap();
        assert!(!d.changed);
        assert_eq!(
            d.changes[0].sentence(),
            r#"call 1 weather: arguments {"city":"Paris"} -> {"city":"Lyon"}"#
        );
        assert!(TrajectoryDiff::between(&base, &base, SequenceMode::Strict).is_none());
        // One answer and no tool is no agent's run: its answer's drift says all.
        let one = |x: Interaction| {
            Trajectory::of(
                TestId::new("t$chat"),
                &[("openai.json".to_string(), cassette("openai", vec![x]))],
            )
        };
        let (a, b) = (
            one(model_answering(Some(0))),
            one(model_asking_tool(Some(0))),
        );
        assert!(
            TrajectoryDiff::between(&a, &one(model_answering(None)), SequenceMode::Strict)
                .is_none()
        );
        assert!(
            TrajectoryDiff::between(&a, &b, SequenceMode::Strict)
                .unwrap()
                .changed
        );
    }
}
