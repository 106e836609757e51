//! Model Context Protocol messages as recordings (README, "MCP servers"). A client message
//! (a request, or a notification the server answered with messages of its own) is one
//! interaction of `<slug>/mcp-<name>.json`: keyed by its method and params, with its JSON-RPC
//! id, the volatile `_meta` keys and `clientInfo.version` left out, so that a run with other
//! ids, progress tokens, trace context or a newer SDK finds its recordings. Its answer is what
//! the server sent until the request's response: over stdio, a list of the messages in order
//! (with the client's answers to the server's own requests in between); over HTTP, the
//! response's JSON body or event stream.

use crate::format::{RecordedResponse, ResponseBody};
use crate::Body;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// The prefix of an MCP server's cassette name: `mcp-<name>.json`.
pub const PREFIX: &str = "mcp-";

/// `_meta` keys that differ on every run: progress tokens and trace context.
const VOLATILE_META: &[&str] = &["progressToken", "traceparent", "tracestate", "baggage"];

/// Whether `provider` (a cassette's provider name) is an MCP server's.
pub fn is_mcp(provider: &str) -> bool {
    provider.starts_with(PREFIX)
}

/// What a JSON-RPC message is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A method call that expects a response: `method` and `id`.
    Request,
    /// A method call with no `id`: never answered.
    Notification,
    /// An answer to a request: `result` or `error`, and `id`.
    Response,
}

/// The kind of `message`, or `None` for what is no JSON-RPC 2.0 message (a batch included:
/// the protocol's current revision has none).
pub fn kind(message: &Value) -> Option<Kind> {
    let object = message.as_object()?;
    let has_id = object.get("id").is_some_and(|id| !id.is_null());
    match (object.get("method").and_then(Value::as_str), has_id) {
        (Some(_), true) => Some(Kind::Request),
        (Some(_), false) => Some(Kind::Notification),
        (None, true) if object.contains_key("result") || object.contains_key("error") => {
            Some(Kind::Response)
        }
        _ => None,
    }
}

/// The method of a request or notification.
pub fn method(message: &Value) -> Option<&str> {
    message.get("method").and_then(Value::as_str)
}

/// The tool a `tools/call` names.
pub fn tool(message: &Value) -> Option<&str> {
    (method(message) == Some("tools/call"))
        .then(|| message.pointer("/params/name").and_then(Value::as_str))
        .flatten()
}

/// A client message as it is keyed and recorded: without its `id`, the volatile `_meta` keys
/// (an emptied `_meta` goes too) and `params.clientInfo.version`.
pub fn keyed(message: &Value) -> Value {
    let mut value = message.clone();
    if let Some(object) = value.as_object_mut() {
        object.remove("id");
        for part in ["params", "result"] {
            if let Some(Value::Object(inner)) = object.get_mut(part) {
                strip_meta(inner);
            }
        }
        if let Some(Value::Object(info)) = value.pointer_mut("/params/clientInfo") {
            info.remove("version");
        }
    }
    value
}

fn strip_meta(object: &mut Map<String, Value>) {
    if let Some(Value::Object(meta)) = object.get_mut("_meta") {
        for key in VOLATILE_META {
            meta.remove(*key);
        }
        if meta.is_empty() {
            object.remove("_meta");
        }
    }
}

/// The messages the server sent in a recorded answer, in order: a stdio recording's list, an
/// HTTP answer's JSON body or its events.
pub fn server_messages(response: &RecordedResponse) -> Vec<Value> {
    match &response.body {
        ResponseBody::Whole(Body::Json { value, .. }) => match value {
            Value::Array(steps) => steps
                .iter()
                .filter_map(|s| s.get("server").cloned())
                .collect(),
            Value::Object(_) if kind(value).is_some() => vec![value.clone()],
            _ => Vec::new(),
        },
        ResponseBody::Stream { .. } => response
            .payloads()
            .into_iter()
            .filter(|v| kind(v).is_some())
            .collect(),
        _ => Vec::new(),
    }
}

/// A stdio recording's answer: the steps as they crossed, each `{"server": message}` or
/// `{"client": message}` (the client's answer to a request of the server's).
pub fn steps_response(steps: Vec<Value>) -> RecordedResponse {
    let bytes = serde_json::to_vec(&Value::Array(steps)).expect("JSON values serialise");
    RecordedResponse {
        status: 200,
        headers: BTreeMap::new(),
        body: ResponseBody::Whole(Body::exact(&bytes)),
    }
}

/// Each tool a `tools/list` answer lists, by name, with its schemas (`inputSchema`,
/// `outputSchema`); `None` when the answer lists none.
pub fn tool_schemas(response: &RecordedResponse) -> Option<BTreeMap<String, Value>> {
    let messages = server_messages(response);
    let tools = messages
        .iter()
        .find_map(|m| m.pointer("/result/tools"))?
        .as_array()?;
    Some(
        tools
            .iter()
            .filter_map(|tool| {
                let name = tool.get("name")?.as_str()?.to_string();
                let schemas = serde_json::json!({
                    "inputSchema": tool.get("inputSchema"),
                    "outputSchema": tool.get("outputSchema"),
                });
                Some((name, schemas))
            })
            .collect(),
    )
}

/// The tools whose schemas differ between two `tools/list` answers (added, removed or changed),
/// each with what happened; empty when both list the same tools with the same schemas, or
/// either is no `tools/list` answer.
pub fn schema_changes(old: &RecordedResponse, new: &RecordedResponse) -> Vec<String> {
    let (Some(old), Some(new)) = (tool_schemas(old), tool_schemas(new)) else {
        return Vec::new();
    };
    let mut changes = Vec::new();
    for (name, schema) in &new {
        match old.get(name) {
            None => changes.push(format!("{name} added")),
            Some(before) if canonical(before) != canonical(schema) => {
                changes.push(format!("{name} changed"))
            }
            Some(_) => {}
        }
    }
    changes.extend(
        old.keys()
            .filter(|name| !new.contains_key(*name))
            .map(|name| format!("{name} removed")),
    );
    changes
}

fn canonical(value: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    crate::canonical::write_canonical(value, &mut out);
    out
}

/// What a reviewer reads of an MCP answer: each text the results carry, the tools a
/// `tools/list` lists, an error's message.
pub fn answer_text(response: &RecordedResponse) -> Option<String> {
    let mut out = Vec::new();
    for message in server_messages(response) {
        if kind(&message) != Some(Kind::Response) {
            continue;
        }
        if let Some(error) = message.get("error") {
            let text = error.get("message").and_then(Value::as_str).unwrap_or("");
            out.push(format!("error: {text}"));
            continue;
        }
        let result = message.get("result").cloned().unwrap_or(Value::Null);
        if let Some(tools) = result.get("tools").and_then(Value::as_array) {
            let names: Vec<&str> = tools
                .iter()
                .filter_map(|t| t.get("name").and_then(Value::as_str))
                .collect();
            out.push(format!("tools: {}", names.join(", ")));
        }
        let blocks = result
            .get("content")
            .or_else(|| result.get("contents"))
            .and_then(Value::as_array);
        for block in blocks.into_iter().flatten() {
            if let Some(text) = block.get("text").and_then(Value::as_str) {
                out.push(text.to_string());
            }
        }
    }
    (!out.is_empty()).then(|| out.join("\n"))
}

/// The JSON-RPC error that answers a message no recording matched.
pub fn miss_error(id: &Value, message: &str) -> Value {
    serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {"code": MISS_CODE, "message": message},
    })
}

/// The JSON-RPC error code of a miss: in the range the specification leaves to servers.
pub const MISS_CODE: i64 = -32_001;

/// `message` answering the live request `id`: a recorded response gets the live id.
pub fn with_id(mut message: Value, id: &Value) -> Value {
    if let Some(object) = message.as_object_mut() {
        object.insert("id".into(), id.clone());
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_leave_out_ids_volatile_meta_and_the_client_version() {
        let a = json!({"jsonrpc": "2.0", "id": 7, "method": "initialize", "params": {
            "clientInfo": {"name": "agent", "version": "1.2.3"},
            "_meta": {"progressToken": 4, "traceparent": "00-ab-cd-01"}}});
        let b = json!({"jsonrpc": "2.0", "id": "x", "method": "initialize", "params": {
            "clientInfo": {"name": "agent", "version": "2.0.0"}}});
        assert_eq!(keyed(&a), keyed(&b));
        let other = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "clientInfo": {"name": "other"}}});
        assert_ne!(keyed(&a), keyed(&other));
        // A _meta key that is not known to be volatile stays.
        let kept = json!({"method": "tools/call", "params": {"_meta": {"tenant": "a"}}});
        assert_eq!(keyed(&kept)["params"]["_meta"]["tenant"], "a");
    }

    #[test]
    fn kinds() {
        assert_eq!(
            kind(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})),
            Some(Kind::Request)
        );
        assert_eq!(
            kind(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"})),
            Some(Kind::Notification)
        );
        assert_eq!(
            kind(&json!({"jsonrpc": "2.0", "id": 1, "result": {}})),
            Some(Kind::Response)
        );
        assert_eq!(kind(&json!([{"id": 1}])), None);
    }

    #[test]
    fn a_changed_schema_is_named() {
        let list = |schema: Value| {
            steps_response(vec![
                json!({"server": {"jsonrpc": "2.0", "id": 1, "result": {"tools": [
                    {"name": "add", "inputSchema": schema},
                    {"name": "echo", "inputSchema": {"type": "object"}},
                ]}}}),
            ])
        };
        let a = list(json!({"type": "object", "properties": {"a": {"type": "number"}}}));
        let b = list(json!({"type": "object", "properties": {"a": {"type": "string"}}}));
        assert_eq!(schema_changes(&a, &a), Vec::<String>::new());
        assert_eq!(schema_changes(&a, &b), vec!["add changed".to_string()]);
        assert_eq!(answer_text(&a).unwrap(), "tools: add, echo");
    }
}
