//! Bedrock's streams, `application/vnd.amazon.eventstream`: binary frames with CRCs, kept in
//! cassettes exactly as received. Reviews and summaries read them decoded, frame by frame:
//! each frame's JSON payload, and for InvokeModel's `chunk` events the model's own JSON inside.

use base64::Engine as _;
use serde_json::Value;

/// The content type of a Bedrock stream.
pub const CONTENT_TYPE: &str = "application/vnd.amazon.eventstream";

/// Each frame's payload as JSON, with its event type as `:event-type`; `None` when `bytes` are
/// not a whole event stream.
pub fn payloads(bytes: &[u8]) -> Option<Vec<Value>> {
    let mut rest = bytes;
    let mut out = Vec::new();
    while !rest.is_empty() {
        let message = aws_smithy_eventstream::frame::read_message_from(&mut rest).ok()?;
        let event = message
            .headers()
            .iter()
            .find(|h| h.name().as_str() == ":event-type")
            .and_then(|h| h.value().as_string().ok())
            .map(|s| s.as_str().to_string());
        let mut payload: Value = serde_json::from_slice(message.payload()).unwrap_or(Value::Null);
        // InvokeModelWithResponseStream: `{"bytes": "<base64 of the model's JSON>"}`.
        if let Some(inner) = payload
            .get("bytes")
            .and_then(Value::as_str)
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        {
            payload = inner;
        }
        if let (Value::Object(map), Some(event)) = (&mut payload, event) {
            map.insert(":event-type".into(), Value::String(event));
        }
        out.push(payload);
    }
    Some(out)
}
