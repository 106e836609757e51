//! A test's trajectory: every exchange its recordings hold, across all its cassette files, in
//! the order the test made them (each interaction's `step`), as model calls (the tools each
//! asked for, its text, its tokens), HTTP tool calls and MCP calls, laid out in time by their
//! timings. Data only: the CLI renders it as text, JSON or a Chrome trace.

use cassettes::{mcp, Cassette, Interaction, Summary, TestId, Timing, Tokens, ToolCall};
use serde::Serialize;
use serde_json::Value;

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
        let mut placed: Vec<(Option<u64>, &str, usize, &Cassette, &Interaction)> = Vec::new();
        for (file, cassette) in cassettes {
            for (position, x) in cassette.interactions.iter().enumerate() {
                placed.push((x.step, file, position, cassette, x));
            }
        }
        // Recorded steps first, in their order; the others after, by file then position. Two
        // recordings of one step (a test recorded again in part, by a later run) keep that order.
        placed.sort_by(|a, b| (a.0.is_none(), a.0, a.1, a.2).cmp(&(b.0.is_none(), b.0, b.1, b.2)));
        let order_guessed = placed.iter().any(|p| p.0.is_none());
        let mut start_ms = 0;
        let steps = placed
            .into_iter()
            .map(|(step, file, position, cassette, x)| {
                let s = Step {
                    step,
                    cassette: file.to_string(),
                    interaction: position + 1,
                    start_ms,
                    timing: x.timing.clone(),
                    call: call_of(cassette.provider.as_str(), x),
                };
                start_ms += x.timing.as_ref().map_or(0, |t| t.total_ms);
                s
            })
            .collect();
        Trajectory {
            test,
            order_guessed,
            steps,
        }
    }
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
}
