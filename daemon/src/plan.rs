//! What one exchange will do, decided once for HTTP requests and WebSocket sessions alike: a
//! fault it draws, its recording replayed, a miss, or the request forwarded upstream, its
//! answer saved or passed on. `exchange` and `session` carry the plan out.

use crate::call::Call;
use crate::config::Mode;
use crate::faults::FaultKind;
use crate::journal::{Detail, Outcome};
use crate::provider::Kind;
use crate::respond::{provider_error, Refused};
use crate::route::Route;
use crate::state::State;
use cassettes::{Key, Prepared};
use http::{Method, StatusCode};
use std::sync::Arc;
use std::time::Duration;

/// Which kind of exchange is planned: a session draws no faults, and only a recording with
/// frames replays it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Form {
    Http,
    Session,
    /// A request that only reports (traces): no fault is drawn for it, every one is answered by
    /// the test's one recording of it, and in replay it is answered even with none.
    Telemetry,
    /// An MCP server's GET listening stream: no fault is drawn for it, and in replay it is
    /// answered (with nothing on it) even with no recording.
    Listen,
}

/// What an exchange does.
pub(crate) enum Plan {
    /// A registered fault: a status, or the recording's answer cut or broken.
    Fault(FaultKind),
    /// The recording this request gets.
    Replay(Arc<Prepared>),
    /// No recording, and replay goes nowhere else: explained to the client and journalled.
    Miss,
    /// Telemetry with no recording, in replay: acknowledged here, never sent.
    Acknowledge,
    /// Sent upstream, the answer recorded (`Save::Yes`) or passed on as it came.
    Forward(Save),
}

/// Whether a forwarded answer is saved.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Save {
    Yes,
    PassOn,
}

/// A planned exchange: the call as the journal will know it, a delay a fault asked for first,
/// and what to do.
pub(crate) struct Planned {
    pub call: Call,
    pub delay: Option<Duration>,
    pub plan: Plan,
}

/// Decides what a request to `route` with `key` does: its cassette opened, a fault drawn
/// (HTTP only; with none registered this is one atomic load), its place in the test's
/// sequence, and then replay, miss or forward by the mode. A cassette that cannot be opened
/// or read refuses the request in the provider's shape (and is journalled once read).
pub(crate) fn plan(
    state: &State,
    route: &Route,
    method: Method,
    key: Key,
    form: Form,
    tool: Option<&str>,
) -> Result<Planned, Refused> {
    let kind = route.provider.kind;
    let call = call_for(state, route, method, key, form)?;
    let mut delay = None;
    if form == Form::Http {
        match state
            .faults
            .take_for(&route.test, &route.provider.name, tool)
        {
            None => {}
            Some(FaultKind::Delay { ms }) => delay = Some(Duration::from_millis(ms)),
            Some(fault) => {
                return Ok(Planned {
                    call,
                    delay,
                    plan: Plan::Fault(fault),
                })
            }
        }
    }
    let mode = state.settings.mode;
    if mode == Mode::Passthrough {
        let plan = Plan::Forward(Save::PassOn);
        return Ok(Planned { call, delay, plan });
    }
    let (mut call, hit) = next_in_sequence(state, call, kind, form)?;
    // A session's recording without frames is not one it can replay.
    let hit = hit.filter(|p| form != Form::Session || p.frames.is_some());
    if form == Form::Telemetry {
        // One recording a test: a re-record replaces it, quietly when its answer is the same.
        call.ordinal = 0;
    }
    let replaces = hit.is_some();
    let plan = match (mode, hit) {
        (Mode::Replay | Mode::RecordMissing, Some(prepared)) => Plan::Replay(prepared),
        (Mode::Replay, None) if matches!(form, Form::Telemetry | Form::Listen) => Plan::Acknowledge,
        (Mode::Replay, None) => Plan::Miss,
        _ => Plan::Forward(Save::Yes),
    };
    if matches!(plan, Plan::Forward(Save::Yes)) {
        if let Err(message) = within_cap(state, &call, replaces) {
            call.end(
                Outcome::Refused,
                402,
                Some(Detail::message(message.clone())),
            );
            return Err(Box::new(provider_error(
                kind,
                StatusCode::PAYMENT_REQUIRED,
                "llmreplay_max_spend",
                &message,
            )));
        }
    }
    Ok(Planned { call, delay, plan })
}

/// Whether a recording run's request may still go upstream under `--max-spend`: judged by
/// what the run spent, and, for a request that replaces a recording, by what that cost. 402
/// rather than 429: the SDKs retry a 429 (three refusals a call, each said), and no wait
/// helps.
fn within_cap(state: &State, call: &Call, replaces: bool) -> Result<(), String> {
    let spend = state.journal.spend();
    if spend.cap().is_none() {
        return Ok(());
    }
    let estimate = replaces
        .then(|| {
            call.entry.with_recorded(&call.key, call.ordinal, |i| {
                spend.prices().estimate(call.entry.provider.as_str(), i)
            })
        })
        .flatten()
        .and_then(|priced| match priced {
            ledger::Priced::Cost(m) => Some(m),
            ledger::Priced::Unpriced(_) => None,
        });
    spend.allow(estimate)
}

/// The journal's record of a request to `route` with `key`, before its place in the sequence
/// is known; a cassette the store cannot open refuses it in the provider's shape.
fn call_for(
    state: &State,
    route: &Route,
    method: Method,
    key: Key,
    form: Form,
) -> Result<Call, Refused> {
    let entry = state
        .store
        .entry(&route.test, &route.provider.name)
        .map_err(|e| {
            Box::new(provider_error(
                route.provider.kind,
                StatusCode::BAD_REQUEST,
                "llmreplay_error",
                &state.settings.program.speak(&e.to_string()),
            ))
        })?;
    Ok(Call::begin(
        &state.journal,
        entry,
        method,
        state.shown_path(&route.upstream_path),
        key,
        form == Form::Session,
    ))
}

/// The recording this call gets, if any, and its place in the test's sequence: replay never
/// starts a sequence for a key with no recording; a cassette that cannot be read is journalled
/// and refused in the provider's shape.
fn next_in_sequence(
    state: &State,
    mut call: Call,
    kind: Kind,
    form: Form,
) -> Result<(Call, Option<Arc<Prepared>>), Refused> {
    let repeat = state.settings.allow_repeats || form == Form::Telemetry;
    let lookup = match state.settings.mode {
        Mode::Replay => call.entry.next_recorded(&call.key, repeat),
        _ => call.entry.next(&call.key, repeat),
    };
    match lookup {
        Ok(lookup) => {
            call.ordinal = lookup.ordinal;
            Ok((call, lookup.hit))
        }
        Err(e) => {
            let message = state.settings.program.speak(&e.to_string()).into_owned();
            call.end(Outcome::Error, 400, Some(Detail::message(message.clone())));
            Err(Box::new(provider_error(
                kind,
                StatusCode::BAD_REQUEST,
                "llmreplay_error",
                &message,
            )))
        }
    }
}
