//! The credentials requests carry, learned as the run's secrets: each is replaced wherever it
//! turns up in what is keyed, stored or shown, as the environment's keys are.

use crate::state::State;

/// Takes the credentials a request carries in its secret headers and query parameters as
/// secrets of the run: wherever one turns up later (echoed in an answer, pasted in a prompt),
/// it is replaced, in what is keyed and stored alike. Proxy credentials name a test, not a key.
pub(crate) fn learn(state: &State, headers: &http::HeaderMap, query: Option<&str>) {
    let scrub = state.settings.normalizer.guard().scrubber();
    for (name, value) in headers {
        let name = name.as_str();
        if name == "proxy-authorization"
            || name == "cookie"
            || !providers::redact::is_secret_header(name)
        {
            continue;
        }
        let Ok(value) = value.to_str() else { continue };
        let value = value
            .split_once(' ')
            .filter(|(scheme, _)| {
                ["bearer", "basic", "token"].contains(&scheme.to_ascii_lowercase().as_str())
            })
            .map_or(value, |(_, v)| v);
        scrub.learn(&format!("the {name} header"), value);
    }
    for pair in query.unwrap_or("").split('&') {
        if let Some((name, value)) = pair.split_once('=') {
            if providers::redact::is_secret_param(name) {
                let value = percent_encoding::percent_decode_str(value).decode_utf8_lossy();
                scrub.learn("a secret query parameter", &value);
            }
        }
    }
}
