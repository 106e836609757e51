//! Faults on demand, per test: a test registers, through its own base URL, which of its requests
//! fail and how (a status such as 429 or 500, a connection cut after some chunks, a delay before
//! the first byte, a malformed body). Deterministic and scoped to the one test: nothing random,
//! nothing shared. A faulted request is answered here: never forwarded, never saved, and it does
//! not move the test's replay sequence. With no fault registered the request path pays one
//! atomic load.

use cassettes::filter::Filter;
use cassettes::{ProviderName, TestId};
use serde::Deserialize;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

/// What a fault does to the request it takes.
#[derive(Clone, Debug, PartialEq)]
pub enum FaultKind {
    /// Answers this status; `body` (its bytes, checked and serialised when the fault was
    /// registered) defaults to the provider's own error shape.
    Status {
        /// The status to answer.
        status: u16,
        /// Headers to add, checked.
        headers: Vec<(http::HeaderName, http::HeaderValue)>,
        /// The body to send, if not the provider's error shape.
        body: Option<bytes::Bytes>,
    },
    /// Sends the first `after_chunks` chunks of the recorded answer, then cuts the connection
    /// (0: before any byte).
    Disconnect {
        /// Chunks sent before the cut.
        after_chunks: usize,
    },
    /// Waits this long before the first byte, then answers as usual.
    Delay {
        /// Milliseconds to wait.
        ms: u64,
    },
    /// Answers a body that is not valid JSON, or a stream whose last event is broken.
    Malformed,
}

/// How many matching requests a fault takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Times {
    /// This many times.
    Count(u64),
    /// Every time.
    Always,
}

/// One registered fault.
#[derive(Clone, Debug)]
pub struct Fault {
    /// Its id, as the POST answered it.
    pub id: u64,
    /// Only this provider's requests; none for any.
    pub provider: Option<ProviderName>,
    /// Only an MCP server's calls of this tool.
    pub tool: Option<String>,
    /// Matching requests let through before it fires.
    pub after: u64,
    /// How many requests it takes.
    pub times: Times,
    /// What it does.
    pub kind: FaultKind,
    seen: u64,
    fired: u64,
}

/// The request body of `POST .../__llmreplay/faults`, and of a `[[faults]]` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultSpec {
    /// `"provider"`: a provider's name, or `any`.
    pub provider: Option<String>,
    /// `"after"`: matching requests to let through first.
    pub after: Option<i64>,
    /// `"times"`: a count, or `"always"`.
    pub times: Option<Value>,
    /// `"status"`: answer this status.
    pub status: Option<i64>,
    /// `"headers"`, with a status.
    pub headers: Option<BTreeMap<String, String>>,
    /// `"body"`, with a status: a string as it is, other JSON serialised.
    pub body: Option<Value>,
    /// `"disconnect"`: cut the answer.
    pub disconnect: Option<DisconnectSpec>,
    /// `"delay_ms"`: wait before the first byte.
    pub delay_ms: Option<i64>,
    /// `"malformed": true`: break the body.
    pub malformed: Option<bool>,
    /// `"tool"`: only an MCP server's `tools/call` of this tool.
    pub tool: Option<String>,
    /// `"error"`: an MCP error with this message (a 500 with it as body elsewhere).
    pub error: Option<String>,
    /// `"exit": true`: the MCP server goes away (a cut before any byte elsewhere).
    pub exit: Option<bool>,
    /// A nextest filterset, in `llmreplay.toml` only.
    #[serde(default)]
    pub test: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
/// `"disconnect": {"after_chunks": N}`.
pub struct DisconnectSpec {
    /// Chunks sent before the cut; 0 cuts before any byte.
    pub after_chunks: i64,
}

/// Why a fault is refused; each says what to change.
#[derive(Debug, thiserror::Error)]
pub enum FaultError {
    /// No kind given.
    #[error(
        "a fault needs one of \"status\", \"disconnect\", \"delay_ms\", \"malformed\": true, or for an MCP server \"error\" or \"exit\": true"
    )]
    NoKind,
    /// More than one kind given.
    #[error("a fault is one kind at a time; this one has {0}")]
    Kinds(String),
    /// A status that is not final.
    #[error("\"status\": {0} is not a final HTTP status (200 to 599)")]
    Status(i64),
    /// A header name that is not one.
    #[error("\"headers\": {0:?} is not a valid header name")]
    HeaderName(String),
    /// A header the daemon sets itself.
    #[error("\"headers\": {0:?} is set by the daemon from the body it sends; leave it out")]
    ReservedHeader(String),
    /// A header value that is not one.
    #[error("\"headers\": the value of {0:?} is not a valid header value")]
    HeaderValue(String),
    /// Headers or a body without a status.
    #[error("\"headers\" and \"body\" go with \"status\" only")]
    BodyWithoutStatus,
    /// A count below zero.
    #[error("\"{name}\": {n} is negative")]
    Negative {
        /// The field.
        name: &'static str,
        /// Its value.
        n: i64,
    },
    /// A provider the daemon does not know.
    #[error("no provider named {name:?}; known: {known}")]
    Provider {
        /// The name given.
        name: String,
        /// The names known.
        known: String,
    },
    /// A `times` that is no count.
    #[error("\"times\": {0} is not a count of 1 or more, nor \"always\"")]
    Times(String),
    /// The test has as many faults waiting as it may.
    #[error("this test has {MAX_PER_TEST} faults waiting already; DELETE <LLMREPLAY_BASE_URL>/__llmreplay/faults clears them")]
    TooMany,
    /// The faults waiting hold as much body as they may.
    #[error("the faults waiting hold {held_mib} MiB of bodies already, and this one would pass the {} MiB all faults may hold; DELETE <LLMREPLAY_BASE_URL>/__llmreplay/faults clears a test's, or give the fault a smaller body", MAX_BODY_BYTES >> 20)]
    TooMuchBody {
        /// What they hold, in MiB.
        held_mib: u64,
    },
}

impl FaultSpec {
    /// Checks a spec: exactly one kind, counts that are not negative, a provider that exists.
    /// The error says what is wrong.
    pub fn into_fault(self, id: u64, providers: &[&str]) -> Result<Fault, FaultError> {
        let kinds: Vec<&str> = [
            ("status", self.status.is_some()),
            ("disconnect", self.disconnect.is_some()),
            ("delay_ms", self.delay_ms.is_some()),
            ("malformed", self.malformed == Some(true)),
            ("error", self.error.is_some()),
            ("exit", self.exit == Some(true)),
        ]
        .iter()
        .filter(|k| k.1)
        .map(|k| k.0)
        .collect();
        match kinds.len() {
            0 => return Err(FaultError::NoKind),
            1 => {}
            _ => return Err(FaultError::Kinds(kinds.join(" and "))),
        }
        let mut spec = self;
        if let Some(message) = spec.error.take() {
            spec.status = Some(500);
            spec.body = Some(Value::String(message));
        }
        if spec.exit == Some(true) {
            spec.disconnect = Some(DisconnectSpec { after_chunks: 0 });
        }
        let kind = if let Some(status) = spec.status {
            // 1xx would turn the connection into something else (101 hijacks it).
            if !(200..=599).contains(&status) {
                return Err(FaultError::Status(status));
            }
            let mut headers = Vec::new();
            for (name, value) in spec.headers.iter().flatten() {
                let parsed = http::HeaderName::from_bytes(name.as_bytes())
                    .map_err(|_| FaultError::HeaderName(name.clone()))?;
                if RESERVED_HEADERS.contains(&parsed.as_str()) {
                    return Err(FaultError::ReservedHeader(name.clone()));
                }
                let value = http::HeaderValue::from_str(value)
                    .map_err(|_| FaultError::HeaderValue(name.clone()))?;
                headers.push((parsed, value));
            }
            let body = spec.body.as_ref().map(|b| match b {
                Value::String(s) => bytes::Bytes::from(s.clone()),
                other => serde_json::to_vec(other).expect("JSON serialises").into(),
            });
            FaultKind::Status {
                status: status as u16,
                headers,
                body,
            }
        } else {
            if spec.headers.is_some() || spec.body.is_some() {
                return Err(FaultError::BodyWithoutStatus);
            }
            if let Some(d) = &spec.disconnect {
                FaultKind::Disconnect {
                    after_chunks: non_negative("disconnect.after_chunks", d.after_chunks)? as usize,
                }
            } else if let Some(ms) = spec.delay_ms {
                FaultKind::Delay {
                    ms: non_negative("delay_ms", ms)?,
                }
            } else {
                FaultKind::Malformed
            }
        };
        let provider = match spec.provider.as_deref() {
            None | Some("any") => None,
            Some(name) if providers.contains(&name) => ProviderName::new(name),
            // MCP servers are known once their shim or route is used.
            Some(name) if cassettes::mcp::is_mcp(name) => ProviderName::new(name),
            Some(name) => {
                return Err(FaultError::Provider {
                    name: name.to_string(),
                    known: providers.join(", "),
                })
            }
        };
        let times = match &spec.times {
            None => Times::Count(1),
            Some(Value::String(s)) if s == "always" => Times::Always,
            Some(v) => match v.as_i64() {
                Some(n) if n >= 1 => Times::Count(n as u64),
                _ => return Err(FaultError::Times(v.to_string())),
            },
        };
        Ok(Fault {
            id,
            provider,
            tool: spec.tool,
            after: non_negative("after", spec.after.unwrap_or(0))?,
            times,
            kind,
            seen: 0,
            fired: 0,
        })
    }
}

/// Headers that describe the transfer, not the answer: a fault that set them would send a
/// body of another length than it says, and break the next answer on a kept-alive connection.
const RESERVED_HEADERS: &[&str] = &[
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "upgrade",
    "te",
    "trailer",
    "proxy-connection",
];

/// How many faults one test may have waiting: past it, a loop that posts faults is a bug.
pub const MAX_PER_TEST: usize = 1000;

/// The most the bodies of all faults waiting, every test's together, may hold: each is under
/// the body limit, but many of them would not be.
pub const MAX_BODY_BYTES: usize = 128 << 20;

impl Fault {
    /// The bytes of its body, if it has one of its own.
    fn body_len(&self) -> usize {
        match &self.kind {
            FaultKind::Status { body: Some(b), .. } => b.len(),
            _ => 0,
        }
    }
}

fn non_negative(name: &'static str, n: i64) -> Result<u64, FaultError> {
    u64::try_from(n).map_err(|_| FaultError::Negative { name, n })
}

/// A `[[faults]]` table of `llmreplay.toml`: a fault for every test its filterset selects.
#[derive(Debug)]
pub struct Declared {
    /// The tests it is for.
    pub filter: Filter,
    /// The fault each of them gets its own copy of.
    pub fault: Fault,
}

/// Every test's faults.
#[derive(Default)]
pub struct Faults {
    /// False while no fault was ever registered or declared: the request path checks only this.
    any: AtomicBool,
    next_id: AtomicU64,
    declared: Vec<Declared>,
    /// One lock per test, found under a shared read lock: a test that registers many faults
    /// never holds up another test's requests.
    by_test: RwLock<HashMap<TestId, Arc<Mutex<PerTest>>>>,
    /// The bytes the bodies of the posted faults waiting hold, every test's together.
    body_bytes: std::sync::atomic::AtomicUsize,
}

#[derive(Default)]
struct PerTest {
    faults: Vec<Fault>,
    /// Given its declared faults already (or cleared): each test gets its own copy, once per
    /// attempt.
    seeded: bool,
}

impl Faults {
    /// The faults of `llmreplay.toml`, given to each test its filterset selects.
    pub fn with_declared(declared: Vec<Declared>) -> Faults {
        Faults {
            any: AtomicBool::new(!declared.is_empty()),
            declared,
            ..Faults::default()
        }
    }

    /// Registers a fault for `test`; returns its id.
    pub fn add(
        &self,
        test: TestId,
        spec: FaultSpec,
        providers: &[&str],
    ) -> Result<u64, FaultError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let fault = spec.into_fault(id, providers)?;
        let per_test = self.of(&test);
        let mut state = per_test.lock().expect("faults lock");
        self.seed(&mut state, &test);
        if state.faults.len() >= MAX_PER_TEST {
            return Err(FaultError::TooMany);
        }
        let len = fault.body_len();
        let held = self.body_bytes.fetch_add(len, Ordering::AcqRel);
        if held + len > MAX_BODY_BYTES {
            self.body_bytes.fetch_sub(len, Ordering::AcqRel);
            return Err(FaultError::TooMuchBody {
                held_mib: (held >> 20) as u64,
            });
        }
        state.faults.push(fault);
        self.any.store(true, Ordering::Release);
        Ok(id)
    }

    /// Removes every fault of `test`; returns how many there were.
    pub fn clear(&self, test: &TestId) -> usize {
        let per_test = self.of(test);
        let mut state = per_test.lock().expect("faults lock");
        // Cleared means cleared: its declared faults do not come back either.
        state.seeded = true;
        let cleared = std::mem::take(&mut state.faults);
        self.release(&cleared);
        cleared.len()
    }

    /// Gives back the body bytes of faults gone.
    fn release(&self, gone: &[Fault]) {
        let len: usize = gone.iter().map(Fault::body_len).sum();
        self.body_bytes.fetch_sub(len, Ordering::AcqRel);
    }

    /// A new attempt of `test` (`begin`): its posted faults are gone and its declared ones
    /// armed afresh, so a retried test meets the faults its first attempt met.
    pub fn reset(&self, test: &TestId) {
        let found = self.by_test.read().expect("faults lock").get(test).cloned();
        if let Some(per_test) = found {
            let gone = std::mem::take(&mut *per_test.lock().expect("faults lock"));
            self.release(&gone.faults);
        }
    }

    /// The lock of `test`'s faults, made on first use.
    fn of(&self, test: &TestId) -> Arc<Mutex<PerTest>> {
        if let Some(found) = self.by_test.read().expect("faults lock").get(test) {
            return found.clone();
        }
        self.by_test
            .write()
            .expect("faults lock")
            .entry(test.clone())
            .or_default()
            .clone()
    }

    /// Gives `test` its declared faults, the first time it is seen in an attempt.
    fn seed(&self, state: &mut PerTest, test: &TestId) {
        if self.declared.is_empty() || std::mem::replace(&mut state.seeded, true) {
            return;
        }
        for d in self.declared.iter().filter(|d| d.filter.matches(test)) {
            let mut fault = d.fault.clone();
            fault.id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
            // Counted as posted ones are, so that clearing gives back what it took.
            self.body_bytes
                .fetch_add(fault.body_len(), Ordering::AcqRel);
            state.faults.push(fault);
        }
    }

    /// The fault that takes this request of `test` to `provider`, if one does: every matching
    /// fault counts the request, and the first that is due fires.
    pub fn take(&self, test: &TestId, provider: &ProviderName) -> Option<FaultKind> {
        self.take_for(test, provider, None)
    }

    /// [`Faults::take`] for a request that names `tool` (an MCP `tools/call`): faults for
    /// another tool, or for one when it names none, let it through uncounted.
    pub fn take_for(
        &self,
        test: &TestId,
        provider: &ProviderName,
        tool: Option<&str>,
    ) -> Option<FaultKind> {
        if !self.any.load(Ordering::Acquire) {
            return None;
        }
        let per_test = if self.declared.is_empty() {
            self.by_test.read().expect("faults lock").get(test)?.clone()
        } else {
            self.of(test)
        };
        let mut state = per_test.lock().expect("faults lock");
        self.seed(&mut state, test);
        let mut fired = None;
        for f in state.faults.iter_mut() {
            if f.provider.as_ref().is_some_and(|p| p != provider) {
                continue;
            }
            if f.tool.is_some() && f.tool.as_deref() != tool {
                continue;
            }
            f.seen += 1;
            let due = f.seen > f.after
                && match f.times {
                    Times::Always => true,
                    Times::Count(n) => f.fired < n,
                };
            if due && fired.is_none() {
                f.fired += 1;
                fired = Some(f.kind.clone());
            }
        }
        fired
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(v: Value) -> FaultSpec {
        serde_json::from_value(v).unwrap()
    }

    const PROVIDERS: &[&str] = &["openai", "anthropic"];

    /// Every test's fault bodies together stay under [`MAX_BODY_BYTES`]; clearing gives
    /// their room back.
    #[test]
    fn fault_bodies_have_a_total_cap() {
        let faults = Faults::default();
        let big = "x".repeat(20 << 20);
        let body = json!({"status": 500, "body": {"pad": big}});
        let mut accepted = 0;
        let refused = loop {
            let test = TestId::new(format!("t$b{accepted}"));
            match faults.add(test, spec(body.clone()), PROVIDERS) {
                Ok(_) => accepted += 1,
                Err(e) => break e,
            }
            assert!(accepted <= 10, "no cap");
        };
        assert_eq!(accepted, 6, "six 20 MiB bodies fit in 128 MiB");
        assert!(refused.to_string().contains("128 MiB"), "{refused}");
        faults.clear(&TestId::new("t$b0"));
        assert!(faults
            .add(TestId::new("t$again"), spec(body), PROVIDERS)
            .is_ok());
    }

    #[test]
    fn bad_specs_say_what_is_wrong() {
        for (v, says) in [
            (json!({}), "needs one of"),
            (json!({"status": 429, "delay_ms": 5}), "status and delay_ms"),
            (json!({"status": 429, "times": -1}), "\"times\": -1"),
            (json!({"delay_ms": -3}), "\"delay_ms\": -3 is negative"),
            (
                json!({"status": 429, "after": -1}),
                "\"after\": -1 is negative",
            ),
            (
                json!({"status": 429, "provider": "nope"}),
                "no provider named \"nope\"",
            ),
            (json!({"status": 42}), "not a final HTTP status"),
            (json!({"status": 101}), "not a final HTTP status"),
            (json!({"status": 600}), "not a final HTTP status"),
            (
                json!({"status": 500, "headers": {"content-length": "5"}}),
                "\"content-length\" is set by the daemon",
            ),
            (
                json!({"status": 500, "headers": {"Transfer-Encoding": "chunked"}}),
                "set by the daemon",
            ),
            (
                json!({"status": 500, "headers": {"bad name": "x"}}),
                "\"bad name\" is not a valid header name",
            ),
            (
                json!({"status": 500, "headers": {"x-ok": "line\nbreak"}}),
                "the value of \"x-ok\" is not a valid header value",
            ),
            (
                json!({"malformed": true, "body": "x"}),
                "go with \"status\" only",
            ),
        ] {
            let e = spec(v.clone()).into_fault(1, PROVIDERS).unwrap_err();
            assert!(e.to_string().contains(says), "{v}: {e}");
        }
        assert!(serde_json::from_value::<FaultSpec>(json!({"kind": "x"})).is_err());
    }

    #[test]
    fn after_times_and_providers() {
        let faults = Faults::default();
        let (t, other) = (TestId::new("a$t"), TestId::new("a$other"));
        let (openai, anthropic) = (
            ProviderName::new("openai").unwrap(),
            ProviderName::new("anthropic").unwrap(),
        );
        assert_eq!(faults.take(&t, &openai), None, "none registered");
        faults
            .add(
                t.clone(),
                spec(json!({"provider": "openai", "after": 1, "times": 2, "status": 500})),
                PROVIDERS,
            )
            .unwrap();
        let fired: Vec<bool> = (0..5).map(|_| faults.take(&t, &openai).is_some()).collect();
        assert_eq!(fired, [false, true, true, false, false]);
        assert_eq!(faults.take(&t, &anthropic), None, "another provider");
        assert_eq!(faults.take(&other, &openai), None, "another test");
        faults
            .add(
                t.clone(),
                spec(json!({"times": "always", "delay_ms": 1})),
                PROVIDERS,
            )
            .unwrap();
        assert!((0..3).all(|_| faults.take(&t, &anthropic) == Some(FaultKind::Delay { ms: 1 })));
        assert_eq!(faults.clear(&t), 2);
        assert_eq!(faults.take(&t, &anthropic), None);
    }

    #[test]
    fn declared_faults_are_each_tests_own() {
        let declared = |expr: &str| Declared {
            filter: Filter::parse(expr).unwrap(),
            fault: spec(json!({"status": 429}))
                .into_fault(0, PROVIDERS)
                .unwrap(),
        };
        let faults = Faults::with_declared(vec![declared("test(~rate)")]);
        let openai = ProviderName::new("openai").unwrap();
        let (a, b, c) = (
            TestId::new("k$rate_a"),
            TestId::new("k$rate_b"),
            TestId::new("k$calm"),
        );
        assert!(faults.take(&a, &openai).is_some());
        assert!(faults.take(&a, &openai).is_none(), "once, by default");
        assert!(
            faults.take(&b, &openai).is_some(),
            "each selected test has its own"
        );
        assert!(faults.take(&c, &openai).is_none(), "not selected");
        assert_eq!(faults.clear(&b), 1);
        assert!(faults.take(&b, &openai).is_none(), "cleared stays cleared");
        faults.reset(&a);
        assert!(faults.take(&a, &openai).is_some(), "a new attempt re-arms");
        assert!(faults.take(&a, &openai).is_none());
    }

    #[test]
    fn a_test_has_a_bounded_number_of_faults() {
        let faults = Faults::default();
        let t = TestId::new("a$many");
        for _ in 0..MAX_PER_TEST {
            faults
                .add(t.clone(), spec(json!({"status": 500})), PROVIDERS)
                .unwrap();
        }
        let e = faults
            .add(t.clone(), spec(json!({"status": 500})), PROVIDERS)
            .unwrap_err();
        assert!(e.to_string().contains("1000 faults waiting"), "{e}");
        let other = TestId::new("a$other");
        assert!(faults
            .add(other, spec(json!({"status": 500})), PROVIDERS)
            .is_ok());
        faults.reset(&t);
        assert!(faults
            .add(t, spec(json!({"status": 500})), PROVIDERS)
            .is_ok());
    }
}
