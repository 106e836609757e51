//! What the daemon says when it cannot answer from a recording: a miss (the request, its
//! closest recording, what differs and the command that records it; a session or one of its
//! frames), and a path its family's API does not have. The same words reach the client, the log and the report.

use crate::call::Call;
use crate::hints::Program;
use crate::journal::{short_json, Detail, FieldValues};
use crate::route::Route;
use cassettes::classify::{classify, match_table, Class, Verdict};
use cassettes::session::WsFrame;
use cassettes::{RecordedRequest, TestId};
use http::Method;

/// Longest prompt preview in a miss message.
const PROMPT_PREVIEW: usize = 200;

/// Why a request in replay found no recording, for the client and the report: the request,
/// its closest recording and what differs, and the command that records it.
pub(crate) fn miss(
    route: &Route,
    call: &Call,
    request: &RecordedRequest,
    hint: Option<&str>,
    program: &Program,
) -> (String, Detail) {
    let (entry, method, ordinal) = (&call.entry, &call.method, call.ordinal);
    let closest = entry.closest(request);
    let verdict = closest
        .as_ref()
        .map(|c| classify(&c.recorded, &request.to_value(), &c.differing))
        .unwrap_or_default();
    let model = request.model();
    let prompt = request
        .last_user_text()
        .map(|p| p.chars().take(PROMPT_PREVIEW).collect::<String>());
    let escaped = match &route.captured {
        Some(host) => format!(
            " It was captured on its way to {host} (a URL the test did not take from its environment) and never left the machine."
        ),
        None => String::new(),
    };
    let mut message = format!(
        "cargo-llmreplay: no recording for this request (replay mode).{escaped}\n  test: {}\n  request: {} {} {}{}\n",
        route.test,
        route.provider.name,
        method,
        call.path,
        model.as_deref().map(|m| format!(", model {m}")).unwrap_or_default(),
    );
    if let Some(p) = &prompt {
        message.push_str(&format!("  last user message: {p:?}\n"));
    }
    match &closest {
        Some(c) if c.differing.is_empty() => {
            message.push_str(&format!(
                "  the same request is recorded, but this is call #{} with it and {} holds fewer.\n  If the test ran before in this daemon's life (a script run twice against one `{program} serve`), start its sequence afresh: POST /__llmreplay/begin?test={} to the daemon, or restart it.\n  If the test really makes more calls, ",
                ordinal + 1,
                entry.path.display(),
                percent_encoding::utf8_percent_encode(route.test.as_str(), percent_encoding::NON_ALPHANUMERIC),
            ));
            message.push_str("record them with: ");
        }
        Some(c) => {
            message.push_str(&format!(
                "  closest recording: #{} in {}; what differs (recorded -> now):\n",
                c.index + 1,
                entry.path.display(),
            ));
            for (f, (was, now)) in verdict.fields.iter().zip(&c.values).take(8) {
                message.push_str(&format!(
                    "    {} ({}: {}): {} -> {}\n",
                    f.field,
                    f.class,
                    f.why,
                    short_json(was.as_ref(), 120),
                    short_json(now.as_ref(), 120)
                ));
            }
            if c.differing.len() > 8 {
                message.push_str(&format!("    and {} more\n", c.differing.len() - 8));
            }
            message.push_str(&fix_hint(program, &route.test, &verdict));
            if c.same_call() && route.test.is_nextest() {
                message.push_str(&format!(
                    "  if the test changed on purpose, record it again (its old recording is replaced): {}\n  or keep both, ",
                    crate::hints::rerecord_command(program, &route.test)
                ));
            } else {
                message.push_str("  ");
            }
            message.push_str("record it with: ");
        }
        None => message.push_str(&format!(
            "  no recordings for this test in {}\n  record it with: ",
            entry.path.display()
        )),
    }
    match hint.filter(|_| !route.test.is_nextest()) {
        Some(command) => message.push_str(command),
        None => message.push_str(&record_hint(program, &route.test)),
    }
    message.push_str(&format!(
        "\n  what to do: {}",
        crate::book::url(crate::book::MISS)
    ));
    let same_call = closest
        .as_ref()
        .is_some_and(|c| !c.differing.is_empty() && c.same_call());
    // A miss of SDK shape keeps every field, so that `rekey` can rebuild the request.
    let kept = match verdict.class {
        Some(Class::SdkShape) => MAX_SHAPE_FIELDS,
        _ => 8,
    };
    let values = closest
        .as_ref()
        .map(|c| {
            verdict
                .fields
                .iter()
                .zip(&c.values)
                .take(kept)
                .map(|(f, (recorded, now))| FieldValues {
                    field: f.field.clone(),
                    recorded: recorded.clone(),
                    now: now.clone(),
                    class: Some(f.class),
                    why: Some(f.why.clone()),
                })
                .collect()
        })
        .unwrap_or_default();
    let closest_at = closest.as_ref().map(|c| (c.index, c.key.to_string()));
    let detail = Detail {
        model,
        prompt,
        closest: closest.map(|c| c.differing),
        values,
        same_call,
        class: verdict.class,
        rules: verdict.rules,
        closest_at,
        host: route.captured.clone(),
        message: Some(message.clone()),
    };
    (message, detail)
}

/// The most fields a miss of SDK shape keeps in the report.
const MAX_SHAPE_FIELDS: usize = 64;

/// What fixes a miss of its class: the `[match]` rule for values that change every run, a
/// re-key for another shape of the same call; nothing for a real change.
fn fix_hint(program: &Program, test: &TestId, verdict: &Verdict) -> String {
    match verdict.class {
        Some(Class::Volatile) if !verdict.rules.is_empty() => {
            let table = match_table(&verdict.rules).replace('\n', "\n    ");
            format!(
                "  these values change on every run; this rule in llmreplay.toml keys them the same:\n    {}\n  or let {program} add it, re-key the cassettes and replay: {program} match suggest --apply\n",
                table.trim_end()
            )
        }
        Some(Class::SdkShape) => format!(
            "  the same call in another shape (a client or SDK change); keep the recorded answer under the new request: {}\n",
            crate::hints::rekey_command(program, test)
        ),
        _ => String::new(),
    }
}

/// Why a WebSocket session in replay found no recording.
/// `path` is the session's, as messages show it (secrets masked).
pub(crate) fn session_miss(
    route: &Route,
    path: &str,
    query: Option<&str>,
    program: &Program,
) -> String {
    format!(
        "cargo-llmreplay: no recording for this WebSocket session (replay mode).\n  test: {}\n  session: {} {}{}\n  record it with: {}",
        route.test,
        route.provider.name,
        path,
        query
            .map(|q| format!("?{}", providers::redact::query(q)))
            .unwrap_or_default(),
        crate::hints::record_command(program, &route.test),
    )
}

/// Why a client's frame matches no recorded one: the frame, and the fields that differ.
pub(crate) fn frame_miss(
    route: &Route,
    path: &str,
    sent: &WsFrame,
    fields: &[String],
    program: &Program,
) -> String {
    let preview: String = sent
        .payload()
        .map(|b| {
            String::from_utf8_lossy(&b)
                .chars()
                .take(PROMPT_PREVIEW)
                .collect()
        })
        .unwrap_or_default();
    format!(
        "cargo-llmreplay: no recording for this WebSocket frame (replay mode).\n  test: {}\n  session: {} {}\n  frame: {preview}\n  differs from the recorded frame at: {}\n  record it with: {}",
        route.test,
        route.provider.name,
        path,
        fields.join(", "),
        crate::hints::record_command(program, &route.test),
    )
}

/// The command that records a missing request, and the daemon's own way for other clients.
fn record_hint(program: &Program, test: &TestId) -> String {
    let command = crate::hints::record_command(program, test);
    if test.is_nextest() {
        format!("{command} (with a daemon of your own: {program} serve --mode record-missing)")
    } else {
        format!("LLMREPLAY_MODE=record-missing ({command})")
    }
}

/// What a 404 on a path its family does not know says: the path, the variables that point
/// clients at this provider (one of them was read, and what the client appended to it is not
/// the API's), and a path the API has.
/// `path` is the upstream path, as messages show it (secrets masked).
pub(crate) fn unknown_path(route: &Route, path: &str, method: &Method) -> String {
    let provider = &route.provider;
    let vars = provider
        .base_url_vars()
        .into_iter()
        .map(|(name, value)| format!("{name}=<daemon>{value}"))
        .collect::<Vec<_>>()
        .join(", ");
    let expected = provider
        .family()
        .example_path()
        .map(|p| format!(" (its paths look like {p})"))
        .unwrap_or_default();
    format!(
        "cargo-llmreplay: the {name} upstream answered 404 for {method} /{name}{path}, a path the {name} API does not have{expected}: not saved. The client built it from the base URL it read, one of {vars}, and appended a path of its own; check which variable your client reads and whether it expects the API version inside it (see {book}).",
        name = provider.name,
        book = crate::book::url(crate::book::PROVIDERS),
    )
}
