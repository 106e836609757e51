//! Any other HTTP API, declared as a gateway with `kind = "http"`: recorded and replayed byte
//! for byte, keyed like every request, with nothing read from its bodies.

use crate::{Family, Kind};
use serde_json::{json, Value};

pub struct Http;

impl Family for Http {
    fn display_name(&self) -> &'static str {
        "any other HTTP API"
    }

    fn kind(&self) -> Kind {
        Kind::Http
    }

    fn default_upstream(&self) -> Option<&'static str> {
        None
    }

    fn auth_headers(&self, key: &str) -> Vec<(&'static str, String)> {
        vec![("authorization", format!("Bearer {key}"))]
    }

    /// Tracing that only reports, met through capture: Langfuse's OpenTelemetry export (its
    /// Python SDK 3 and later sends every span there) and its older ingestion endpoint. Each
    /// batch holds new ids and times, so recorded it would miss on every replay.
    fn telemetry_paths(&self) -> &'static [&'static str] {
        &["/api/public/otel/v1/traces", "/api/public/ingestion"]
    }

    fn error_body(&self, _status: u16, code: &str, message: &str) -> Value {
        json!({ "error": { "code": code, "message": message } })
    }
}
