//! Azure OpenAI: OpenAI's bodies, answers and errors, under the resource's own endpoint
//! (`/openai/deployments/<deployment>/...?api-version=...`, or the newer `/openai/v1/...`),
//! with the key in `api-key`. The deployment in the path stands for the model.

use crate::{header, Answer, Family, Kind, Tokens};
use serde_json::Value;
use std::collections::BTreeMap;

pub struct Azure;

const DEPLOYMENTS: &str = "/openai/deployments/";

fn openai() -> &'static dyn Family {
    Kind::OpenAi.family()
}

impl Family for Azure {
    fn display_name(&self) -> &'static str {
        "Azure OpenAI"
    }

    fn example_path(&self) -> Option<&'static str> {
        Some("/openai/deployments/<deployment>/chat/completions")
    }

    fn kind(&self) -> Kind {
        Kind::Azure
    }

    /// Each resource has its own: the user's `AZURE_OPENAI_ENDPOINT`, or `--upstream`.
    fn default_upstream(&self) -> Option<&'static str> {
        None
    }

    fn hosts(&self) -> &'static [&'static str] {
        &[
            "*.openai.azure.com",
            "*.cognitiveservices.azure.com",
            "*.services.ai.azure.com",
        ]
    }

    fn owns_path(&self, path: &str) -> bool {
        path.starts_with(DEPLOYMENTS)
    }

    fn knows_path(&self, path: &str) -> bool {
        path.starts_with("/openai/")
    }

    fn secret_params(&self) -> &'static [&'static str] {
        &["api-key"]
    }

    fn secret_headers(&self) -> &'static [&'static str] {
        &["api-key"]
    }

    fn auth_headers(&self, key: &str) -> Vec<(&'static str, String)> {
        vec![("api-key", key.to_string())]
    }

    fn model(&self, path: &str, _body: Option<&Value>) -> Option<String> {
        let rest = path.strip_prefix(DEPLOYMENTS)?;
        Some(rest.split('/').next().unwrap_or(rest).to_string())
    }

    /// The deployment names the model in the path; a body that names one too follows.
    fn set_model(&self, path: &mut String, body: &mut Value, model: &str) {
        if let Some(rest) = path.strip_prefix(DEPLOYMENTS) {
            let tail = rest.find('/').map_or("", |i| &rest[i..]);
            *path = format!("{DEPLOYMENTS}{model}{tail}");
            if body.get("model").is_some() {
                openai().set_model(path, body, model);
            }
        } else {
            openai().set_model(path, body, model);
        }
    }

    // Bodies and answers are OpenAI's, read there: nothing to add here.
    fn read(&self, _payload: &Value, _answer: &mut Answer) {}

    fn tokens(&self, _usage: &Value) -> Option<Tokens> {
        None
    }

    fn error_body(&self, status: u16, code: &str, message: &str) -> Value {
        openai().error_body(status, code, message)
    }

    fn session_error(&self, status: u16, code: &str, message: &str) -> Value {
        openai().session_error(status, code, message)
    }

    fn request_id(
        &self,
        headers: &BTreeMap<String, String>,
        _payloads: &[Value],
    ) -> Option<String> {
        header(headers, &["apim-request-id", "x-request-id"])
    }
}
