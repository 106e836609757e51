//! Google Vertex AI: Gemini's bodies and streams under
//! `/v1/projects/<project>/locations/<location>/publishers/google/models/<model>:generateContent`
//! (and `v1beta1`), with short-lived OAuth bearer tokens (never stored: `authorization` is no
//! cassette's). The upstream is per location, `https://<location>-aiplatform.googleapis.com`.

use crate::{Family, Kind};
use serde_json::Value;
use std::collections::BTreeMap;

pub struct Vertex;

impl Family for Vertex {
    fn display_name(&self) -> &'static str {
        "Vertex AI"
    }

    fn example_path(&self) -> Option<&'static str> {
        Some("/v1/projects/<p>/locations/<l>/publishers/google/models/<model>:generateContent")
    }

    /// `https://<location>-aiplatform.googleapis.com` from `GOOGLE_CLOUD_LOCATION` (else
    /// us-central1); `global` has no location in its host.
    fn regional_upstream(&self, env: &dyn Fn(&str) -> Option<String>) -> Option<String> {
        let location = crate::first_env(env, &["GOOGLE_CLOUD_LOCATION"], "us-central1");
        Some(if location == "global" {
            "https://aiplatform.googleapis.com".into()
        } else {
            format!("https://{location}-aiplatform.googleapis.com")
        })
    }

    fn kind(&self) -> Kind {
        Kind::Vertex
    }

    fn default_upstream(&self) -> Option<&'static str> {
        None
    }

    fn hosts(&self) -> &'static [&'static str] {
        &["aiplatform.googleapis.com", "*-aiplatform.googleapis.com"]
    }

    fn owns_path(&self, path: &str) -> bool {
        path.contains("/publishers/") && path.contains("/projects/")
    }

    fn knows_path(&self, path: &str) -> bool {
        path.starts_with("/v1/") || path.starts_with("/v1beta1/")
    }

    fn secret_params(&self) -> &'static [&'static str] {
        &["key"]
    }

    fn auth_headers(&self, key: &str) -> Vec<(&'static str, String)> {
        vec![("authorization", format!("Bearer {key}"))]
    }

    fn model(&self, path: &str, body: Option<&Value>) -> Option<String> {
        Kind::Gemini.family().model(path, body)
    }

    fn set_model(&self, path: &mut String, body: &mut Value, model: &str) {
        Kind::Gemini.family().set_model(path, body, model)
    }

    fn prompt(&self, body: &Value) -> Option<String> {
        Kind::Gemini.family().prompt(body)
    }

    // Answers are Gemini's: the gemini family reads them (every family reads every payload).

    fn error_body(&self, status: u16, code: &str, message: &str) -> Value {
        Kind::Gemini.family().error_body(status, code, message)
    }

    fn request_id(&self, headers: &BTreeMap<String, String>, payloads: &[Value]) -> Option<String> {
        Kind::Gemini.family().request_id(headers, payloads)
    }
}
