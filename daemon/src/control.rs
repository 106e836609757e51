//! The control routes under `/__llmreplay/`: health, stats and the journal for people and the
//! runner; `begin` (a test's attempt starts afresh: its sequence and its faults; with `pid`, the
//! process runs it from now on), `end` (its outcome, for record semantics) and `listed` from the
//! runner and the runners' plugins; and `faults`, where a test registers the faults of its own requests.

use crate::faults::FaultSpec;
use crate::identity::{identify_on, Claims};
use crate::journal::{IDS_BUDGET, MAX_TEST_ID_BYTES};
use crate::respond::{json, text, Body};
use crate::state::{Conn, State};
use cassettes::TestId;
use http::header::CONTENT_TYPE;
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use std::sync::Arc;

/// The most a `begin` body (a test process's secret-looking variables) may hold.
const BEGIN_BODY_LIMIT: u64 = 256 << 10;

/// Learns the values of a test process's secret-looking variables, as the daemon's own are
/// (`*_TOKEN`, `*_KEY`, `*_SECRET`, `*_PASSWORD`, `*_CREDENTIALS`, 8 characters or more).
fn learn_env(state: &State, body: &[u8]) -> Result<(), String> {
    #[derive(serde::Deserialize)]
    struct Begin {
        #[serde(default)]
        env: std::collections::BTreeMap<String, String>,
    }
    // Said by place, never by value: serde's message would quote a value of the wrong type.
    let begin: Begin = serde_json::from_slice(body)
        .map_err(|e| format!("not that JSON (line {}, column {})", e.line(), e.column()))?;
    let scrub = state.settings.normalizer.guard().scrubber();
    for (name, value) in crate::config::secret_values(begin.env.into_iter()) {
        scrub.learn(&name, &value);
    }
    Ok(())
}

pub(crate) async fn control(
    state: &Arc<State>,
    rest: &str,
    req: Request<Incoming>,
) -> Response<Body> {
    let param = |name: &str| {
        req.uri()
            .query()
            .and_then(|q| {
                q.split('&')
                    .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            })
            .map(|v| {
                percent_encoding::percent_decode_str(v)
                    .decode_utf8_lossy()
                    .into_owned()
            })
    };
    // The header is percent-decoded, as every route decodes it: a test's begin and end name
    // the test its requests are filed under.
    let test = || {
        param("test").or_else(|| {
            req.headers().get("x-test-id").map(|v| {
                percent_encoding::percent_decode(v.as_bytes())
                    .decode_utf8_lossy()
                    .into_owned()
            })
        })
    };
    match (req.method(), rest) {
        (&Method::GET, "health") => json(serde_json::json!({
            "status": "ok",
            "mode": state.settings.mode.as_str(),
            "cassette_dir": state.settings.cassette_dir.display().to_string(),
            "version": env!("CARGO_PKG_VERSION"),
        })),
        (&Method::GET, "stats") => json(serde_json::to_value(state.journal.stats()).expect("stats serialise")),
        (&Method::GET, "journal") => Response::builder()
            .header(CONTENT_TYPE, "application/json")
            .body(crate::respond::full(state.journal.to_json().into()))
            .expect("static headers"),
        (&Method::POST, "begin") => {
            let pid = match param("pid").map(|p| p.parse::<u32>()) {
                Some(Ok(pid)) => Some(pid),
                Some(Err(_)) => return text(StatusCode::BAD_REQUEST, "cargo-llmreplay: begin's pid is the announcing process's id, a number".into()),
                None => None,
            };
            match test() {
                Some(t) => {
                    if let Some(refused) = refuse_id(state, "begin", &t) {
                        return refused;
                    }
                    // A plugin sends its process's secret-looking variables (a `.env` a
                    // conftest loaded, say): their values are the run's secrets from now on.
                    let idle = state.settings.limits.header_read_timeout;
                    match crate::exchange::read_limited(req.into_body(), BEGIN_BODY_LIMIT, idle).await {
                        Ok(body) if body.is_empty() => {}
                        Ok(body) => {
                            if let Err(why) = learn_env(state, &body) {
                                return text(StatusCode::BAD_REQUEST, format!("cargo-llmreplay: begin's body is {{\"env\": {{NAME: VALUE}}}}, the test process's secret-looking variables: {why}"));
                            }
                        }
                        Err(_) => return text(StatusCode::PAYLOAD_TOO_LARGE, format!("cargo-llmreplay: begin's body (the test process's secret-looking variables) is at most {} KiB", BEGIN_BODY_LIMIT >> 10)),
                    }
                    let test = TestId::new(t);
                    // From now on, requests from this process (and what it spawns) are this
                    // test's, whatever connection they come on.
                    if let Some(pid) = pid {
                        let _ = state.peers.set(crate::peer::Peers::new(None, crate::peer::IdVars::Announced));
                        if let Err(why) = state.announced.begin(pid, &test) {
                            return text(
                                StatusCode::SERVICE_UNAVAILABLE,
                                format!("cargo-llmreplay: begin for process {pid} is refused: {why}"),
                            );
                        }
                    }
                    state.journal.begin(&test);
                    state.store.reset_test(&test);
                    state.faults.reset(&test);
                    json(serde_json::json!({ "status": "ok", "peers": crate::peer::Peers::supported() }))
                }
                None => text(StatusCode::BAD_REQUEST, "cargo-llmreplay: begin needs ?test=<test id> or an X-Test-Id header".into()),
            }
        }
        (&Method::POST, "end") => {
            let word = param("outcome").unwrap_or_default();
            let Some(outcome) = runlog::TestOutcome::parse(&word) else {
                return text(StatusCode::BAD_REQUEST, "cargo-llmreplay: end needs ?outcome=passed, failed, skipped, interrupted or killed".into());
            };
            let pid = param("pid").and_then(|p| p.parse::<u32>().ok());
            let Some(t) = test() else {
                // The process runs none of its tests any more, whichever they were.
                if let Some(pid) = pid {
                    state.announced.end(pid, None);
                }
                return text(StatusCode::BAD_REQUEST, "cargo-llmreplay: end needs ?test=<test id> or an X-Test-Id header".into());
            };
            if t.len() > MAX_TEST_ID_BYTES {
                return text(StatusCode::BAD_REQUEST, too_long("end", t.len()));
            }
            let t = TestId::new(t);
            // Only this test: another the same process runs at once goes on.
            if let Some(pid) = pid {
                state.announced.end(pid, Some(&t));
            }
            crate::mcp::end_test(state, &t);
            // Answered once the test's recordings are in its cassettes: the runner's test
            // process then ends with its files written.
            crate::settle::test_ended(state, t.clone(), outcome).await;
            // Its cassettes are read again if it calls later (a retry).
            state.store.release_test(&t);
            json(serde_json::json!({ "status": "ok" }))
        }
        (&Method::POST, "flush") => {
            // `serve` writes its tests' recordings when it stops; a long-lived one is asked to
            // write them now.
            let (store, journal) = (state.store.clone(), state.journal.clone());
            let wait = std::time::Duration::from_secs(10);
            match tokio::task::spawn_blocking(move || crate::settle::settle_all(&store, &journal, wait)).await {
                Ok(failed) if failed.is_empty() => json(serde_json::json!({ "status": "ok" })),
                Ok(failed) => {
                    let said: Vec<String> = failed.iter().map(|(t, e)| format!("{t}: {e}")).collect();
                    text(StatusCode::INTERNAL_SERVER_ERROR, format!("cargo-llmreplay: the recordings of {} test(s) were not written, and are kept in the run's spool: {}", failed.len(), said.join("; ")))
                }
                Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("cargo-llmreplay: flushing failed: {e}")),
            }
        }
        (&Method::POST, "listed") => {
            let binary = param("binary").unwrap_or_default();
            let (runner, filtered) = (param("runner"), param("filtered"));
            let limits = &state.settings.limits;
            let (limit, idle) = (limits.body_bytes, limits.header_read_timeout);
            let body = match crate::exchange::read_limited(req.into_body(), limit, idle).await {
                Ok(body) => body,
                Err(crate::exchange::BodyError::TooLarge) => return text(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("cargo-llmreplay: the list of tests is over the body limit of {limit} bytes ([limits] body_mib in llmreplay.toml)"),
                ),
                Err(crate::exchange::BodyError::Idle(idle)) => return text(
                    StatusCode::REQUEST_TIMEOUT,
                    format!("cargo-llmreplay: the list of tests stopped arriving for {}s ([limits] header_read_timeout_s)", idle.as_secs_f64()),
                ),
                Err(crate::exchange::BodyError::Broken(e)) => return text(StatusCode::BAD_REQUEST, format!("cargo-llmreplay: could not read the list: {e}")),
            };
            let names = String::from_utf8_lossy(&body);
            if let Some(id) = names.lines().map(|n| binary.len() + 1 + n.len()).find(|id| *id > MAX_TEST_ID_BYTES) {
                return text(StatusCode::BAD_REQUEST, too_long("listed", id));
            }
            // A test plugin's collected suite names its runner; nextest's lists, a binary.
            let noted = match runner {
                Some(runner) if binary.is_empty() => {
                    let filtered = match filtered.as_deref() {
                        Some("true" | "1") => true,
                        Some("false" | "0") | None => false,
                        Some(other) => return text(StatusCode::BAD_REQUEST, format!("cargo-llmreplay: listed's filtered is true or false (whether the runner's own selection left tests out), not {other:?}")),
                    };
                    match state.journal.collected(&runner, filtered, names.lines()) {
                        Ok(met) if !met.is_empty() => {
                            let pairs: Vec<String> = met
                                .iter()
                                .take(10)
                                .map(|(folder, one, other)| format!("{:?} and {:?} (folder {folder})", one.as_str(), other.as_str()))
                                .collect();
                            return text(StatusCode::CONFLICT, format!("cargo-llmreplay: tests whose ids share a cassette folder: {}; rename one of each pair (a distinct test name, pytest's ids=, a distinct describe or it title)", pairs.join("; ")));
                        }
                        Ok(_) => Ok(()),
                        Err(bytes) => Err(bytes),
                    }
                }
                _ => state.journal.listed(&binary, names.lines()),
            };
            match noted {
                Ok(()) => json(serde_json::json!({ "status": "ok" })),
                Err(bytes) => text(StatusCode::INSUFFICIENT_STORAGE, no_room("listed", bytes, state)),
            }
        }
        _ => text(
            StatusCode::NOT_FOUND,
            format!("cargo-llmreplay: no control route {} /__llmreplay/{rest}; there are GET health, stats, journal and POST begin, end, flush, listed, faults", req.method()),
        ),
    }
}

/// Refuses a test id `route` would keep: one too long, or one past the ids' budget.
fn refuse_id(state: &State, route: &str, id: &str) -> Option<Response<Body>> {
    if id.len() > MAX_TEST_ID_BYTES {
        return Some(text(StatusCode::BAD_REQUEST, too_long(route, id.len())));
    }
    if !state.journal.has_begun(&TestId::new(id)) && !state.journal.has_room_for_ids(id.len()) {
        return Some(text(
            StatusCode::INSUFFICIENT_STORAGE,
            no_room(route, id.len(), state),
        ));
    }
    None
}

fn too_long(route: &str, len: usize) -> String {
    format!("cargo-llmreplay: {route} refused a test id of {len} bytes: test ids are at most {MAX_TEST_ID_BYTES} bytes")
}

fn no_room(route: &str, bytes: usize, state: &State) -> String {
    format!(
        "cargo-llmreplay: {route} refused {bytes} bytes of test ids: the daemon keeps at most {} MiB of the ids of tests begun and listed, and holds {} bytes already; a suite this large is more likely ids made up at random",
        IDS_BUDGET >> 20,
        state.journal.id_bytes()
    )
}

/// `POST .../__llmreplay/faults` registers a fault for the request's test, decided as on every
/// other route (the base URL's, `X-Test-Id`'s, the connection's process's, else `default`),
/// or `?test=`'s; `DELETE` clears its faults.
pub(crate) async fn faults(
    state: &Arc<State>,
    conn: &Conn,
    prefix: &str,
    req: Request<Incoming>,
) -> Response<Body> {
    let Ok(path) = crate::identity::route_prefix(prefix) else {
        return text(StatusCode::NOT_FOUND, format!("cargo-llmreplay: faults live at <LLMREPLAY_BASE_URL>/__llmreplay/faults, not under {prefix:?}"));
    };
    let query = req
        .uri()
        .query()
        .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("test=")));
    let claims = Claims {
        path,
        query,
        header: req.headers().get("x-test-id"),
        ..Claims::default()
    };
    let test = match identify_on(state, conn, claims).await {
        Ok(identity) => identity.test,
        Err(refused) => return refused.answer(),
    };
    match *req.method() {
        Method::DELETE => {
            let cleared = state.faults.clear(&test);
            json(serde_json::json!({ "cleared": cleared }))
        }
        Method::POST => {
            let limits = &state.settings.limits;
            let (limit, idle) = (limits.body_bytes, limits.header_read_timeout);
            let body = match crate::exchange::read_limited(req.into_body(), limit, idle).await {
                Ok(b) => b,
                Err(crate::exchange::BodyError::TooLarge) => {
                    return text(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        format!("cargo-llmreplay: the fault is over the body limit of {limit} bytes ([limits] body_mib in llmreplay.toml)"),
                    )
                }
                Err(crate::exchange::BodyError::Idle(idle)) => {
                    return text(
                        StatusCode::REQUEST_TIMEOUT,
                        format!("cargo-llmreplay: the fault's body stopped arriving for {}s ([limits] header_read_timeout_s)", idle.as_secs_f64()),
                    )
                }
                Err(crate::exchange::BodyError::Broken(e)) => {
                    return text(
                        StatusCode::BAD_REQUEST,
                        format!("cargo-llmreplay: could not read the fault: {e}"),
                    )
                }
            };
            let spec: FaultSpec = match serde_json::from_slice(&body) {
                Ok(spec) => spec,
                Err(e) => return text(StatusCode::BAD_REQUEST, format!("cargo-llmreplay: the fault is not valid: {e}. Send JSON such as {{\"status\": 429, \"headers\": {{\"retry-after\": \"1\"}}}}")),
            };
            if spec.test.is_some() {
                return text(StatusCode::BAD_REQUEST, "cargo-llmreplay: \"test\" belongs in [[faults]] of llmreplay.toml; a posted fault is for the test of its URL".into());
            }
            let names: Vec<&str> = state
                .settings
                .providers
                .iter()
                .map(|p| p.name.as_str())
                .collect();
            match state.faults.add(test, spec, &names) {
                Ok(id) => {
                    let mut r = json(serde_json::json!({ "id": id }));
                    *r.status_mut() = StatusCode::CREATED;
                    r
                }
                Err(message) => text(
                    StatusCode::BAD_REQUEST,
                    format!("cargo-llmreplay: {message}"),
                ),
            }
        }
        _ => text(
            StatusCode::METHOD_NOT_ALLOWED,
            "cargo-llmreplay: POST a fault, or DELETE to clear them".into(),
        ),
    }
}
