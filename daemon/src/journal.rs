//! Every request the daemon answered, in order: the raw material of the post-run report. Hits
//! are recorded cheaply (shared handles, no strings built); details are made only for misses
//! and errors, and everything is rendered to JSON on demand.

use crate::call::Call;
use cassettes::TestId;
pub use runlog::report::{Detail, ErrorAnswer, Failure, FieldValues, Miss, Passed, Stats};
use serde::Serialize;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Hits kept one by one; past this they are only counted, so a long-running daemon (or a load
/// test) does not grow without bound.
pub const MAX_KEPT_HITS: usize = 100_000;

/// Misses, recordings and errors kept one by one, with their details; past this they are only
/// counted (and their tests noted), so memory stays bounded for every outcome. The report lists
/// the first ones and counts all.
pub const MAX_KEPT_OTHERS: usize = 10_000;

/// The longest test id the control routes take (`begin`, `end`, `listed`): a long pytest
/// parameter id is a few hundred bytes; 30 KB ids by the thousand are an attack on memory.
pub const MAX_TEST_ID_BYTES: usize = 4096;

/// The test ids kept as begun and listed, in bytes: past it a new one is refused. About
/// 300,000 ids of 200 bytes, more than any suite lists.
pub const IDS_BUDGET: usize = 64 << 20;

pub use crate::outcome::{short_json, Outcome};

struct Record {
    call: Call,
    outcome: Outcome,
    status: u16,
    detail: Option<Box<Detail>>,
}

/// One line of the journal as JSON.
#[derive(Serialize)]
pub struct JournalLine<'a> {
    /// The test.
    pub test: &'a str,
    /// Its folder.
    pub slug: &'a str,
    /// The provider.
    pub provider: &'a str,
    /// The cassette file.
    pub cassette: String,
    /// The method.
    pub method: &'a str,
    /// The upstream path.
    pub path: &'a str,
    /// The key.
    pub key: &'a str,
    /// Which request with this key: 0 for the first.
    pub ordinal: usize,
    /// What happened.
    pub outcome: Outcome,
    /// The status answered.
    pub status: u16,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    /// What a miss or an error says.
    pub detail: Option<&'a Detail>,
}

/// What the test plugins of a run said of the suites they collected.
#[derive(Debug, Default, Clone)]
pub struct Listings {
    /// The runners that listed (pytest, vitest...): none when no plugin did.
    pub runners: std::collections::BTreeSet<String>,
    /// Whether any runner's own selection left tests out (`-k`, `-t`, a test named).
    pub filtered: bool,
    /// Each collected test's cassette folder, to find two that meet before either runs.
    folders: std::collections::HashMap<String, TestId>,
}

#[derive(Default)]
/// Everything the daemon answered in this run, bounded: the report is built from it.
pub struct Journal {
    records: Mutex<Vec<Record>>,
    /// Tests the runner announced, whether or not they made a request.
    began: Mutex<std::collections::BTreeSet<TestId>>,
    /// Tests whose beginning a runner or plugin said (`begin`): it says their end too, so one
    /// whose end it never said did not finish (its process crashed).
    said_began: Mutex<std::collections::BTreeSet<TestId>>,
    /// Every test of the suite, as the runner saw nextest list them, or as a test plugin
    /// collected them.
    listed: Mutex<std::collections::BTreeSet<TestId>>,
    /// What test plugins said of the suites they collected.
    listings: Mutex<Listings>,
    /// The bytes of the ids `began` and `listed` hold, against [`IDS_BUDGET`].
    id_bytes: AtomicUsize,
    kept_hits: AtomicUsize,
    counted_hits: AtomicUsize,
    kept_others: AtomicUsize,
    /// Faults answered, per test: small (one count a test), so always kept.
    faults: Mutex<std::collections::BTreeMap<String, usize>>,
    /// How each test ended, as its runner or plugin said: its last attempt's outcome.
    ended: Mutex<std::collections::BTreeMap<TestId, runlog::TestOutcome>>,
    /// Tunnels to `[capture] pass` hosts, per test and host: how many each opened. Bounded by
    /// the tests and hosts of a run, as the faults' counts are.
    passed: Mutex<std::collections::BTreeMap<(TestId, String), usize>>,
    /// What was only counted, past `MAX_KEPT_OTHERS`.
    overflow: Mutex<Overflow>,
    /// What each test's end wrote to its cassettes, in the order tests settled.
    settled: Mutex<Vec<cassettes::TestChanges>>,
    /// Where the run's events go on disk, if anywhere.
    run_log: Option<std::sync::Arc<crate::run_log::RunLog>>,
    /// What the answers saved cost, against `--max-spend`.
    spend: crate::spend::Spend,
}

#[derive(Default)]
struct Overflow {
    stats: Stats,
    tests: std::collections::BTreeSet<TestId>,
}

/// The count of `outcome` among `stats`.
fn count_of(stats: &mut Stats, outcome: Outcome) -> &mut usize {
    match outcome {
        Outcome::Hit => &mut stats.hits,
        Outcome::Miss => &mut stats.misses,
        Outcome::Recorded => &mut stats.recorded,
        Outcome::Replaced => &mut stats.replaced,
        Outcome::Unchanged => &mut stats.unchanged,
        Outcome::Passthrough => &mut stats.passthrough,
        Outcome::Refused => &mut stats.refused,
        Outcome::Broken => &mut stats.broken,
        Outcome::Error => &mut stats.errors,
        Outcome::Fault => &mut stats.faults,
        Outcome::Telemetry => &mut stats.telemetry,
        Outcome::LiveDiffers => &mut stats.live_differs,
    }
}

impl crate::call::Sink for Journal {
    fn ended(&self, call: Call, outcome: Outcome, status: u16, detail: Option<Detail>) {
        self.log(call, outcome, status, detail);
    }
}

impl crate::call::Began for Journal {
    fn ran(&self, test: &TestId) {
        Journal::ran(self, test);
    }
}

impl Journal {
    /// What became of `call`, which [`Call::end`] hands here: a line of the daemon's log (in
    /// the request's span, which names its test, provider, method and path), its event in the
    /// run log, and a record for the report.
    pub(crate) fn log(
        &self,
        mut call: Call,
        outcome: Outcome,
        status: u16,
        detail: Option<Detail>,
    ) {
        let ms = call.started.elapsed().as_millis() as u64;
        // The exchange has ended: whoever waits for its test goes on once it is recorded here.
        let flight = call.flight.take();
        let step = flight.as_ref().map(|f| f.step);
        let answer = call.answer.take();
        let (model, usage) = match answer.as_deref() {
            Some((model, usage)) => (model.as_deref(), usage.as_ref()),
            None => (None, None),
        };
        if outcome.saved() {
            self.spend
                .recorded(call.entry.provider.as_str(), model, usage);
        }
        if let Some(run_log) = &self.run_log {
            run_log.exchange(&runlog::Exchange {
                test: call.entry.test.as_str().into(),
                step,
                transport: if call.session {
                    "session"
                } else if call.entry.provider.as_str().starts_with("mcp-") {
                    "mcp"
                } else {
                    "http"
                }
                .into(),
                provider: call.entry.provider.as_str().into(),
                method: call.method.as_str().into(),
                path: call.path.as_str().into(),
                key: call.key.as_str().into(),
                ordinal: call.ordinal,
                outcome: outcome.key().into(),
                status,
                started_ms: run_log.ms_at(call.started),
                ms,
                bytes: call.bytes,
                model: model.map(Into::into),
                usage: usage.map(std::borrow::Cow::Borrowed),
            });
        }
        if let Some(flight) = flight {
            call.entry.end_exchange(flight);
        }
        let key = call.key.as_str().get(..12).unwrap_or(call.key.as_str());
        tracing::info!(
            target: "cargo_llmreplay::request",
            status,
            bytes = call.bytes,
            ms,
            key = %key,
            ordinal = call.ordinal,
            "{}",
            outcome.as_str()
        );
        crate::request_log::line(
            tracing::Level::INFO,
            &call,
            format_args!(
                "{} status={status}{} ms={ms} key={key} ordinal={}",
                outcome.as_str(),
                crate::request_log::Optional("bytes", &call.bytes),
                call.ordinal
            ),
        );
        if let Some(message) = detail.as_ref().and_then(|d| d.message.as_deref()) {
            crate::request_log::message(tracing::Level::DEBUG, &call, message);
        }
        let record = Record {
            call,
            outcome,
            status,
            detail: detail.map(Box::new),
        };
        if record.outcome == Outcome::Fault {
            *self
                .faults
                .lock()
                .expect("journal lock")
                .entry(record.call.entry.test.to_string())
                .or_default() += 1;
        }
        if record.outcome == Outcome::Hit
            && self.kept_hits.fetch_add(1, Ordering::Relaxed) >= MAX_KEPT_HITS
        {
            self.counted_hits.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if record.outcome != Outcome::Hit
            && self.kept_others.fetch_add(1, Ordering::Relaxed) >= MAX_KEPT_OTHERS
        {
            let mut overflow = self.overflow.lock().expect("journal lock");
            overflow.stats.requests += 1;
            *count_of(&mut overflow.stats, record.outcome) += 1;
            if !overflow.tests.contains(record.call.entry.test.as_str()) {
                overflow.tests.insert(record.call.entry.test.clone());
            }
            return;
        }
        self.records.lock().expect("journal lock").push(record);
    }

    /// The counts so far.
    pub fn stats(&self) -> Stats {
        let records = self.records.lock().expect("journal lock");
        let counted = self.counted_hits.load(Ordering::Relaxed);
        let mut s = Stats {
            requests: records.len() + counted,
            hits: counted,
            ..Stats::default()
        };
        for r in records.iter() {
            *count_of(&mut s, r.outcome) += 1;
        }
        s += &self.overflow.lock().expect("journal lock").stats;
        s
    }

    /// The journal as a JSON array.
    pub fn to_json(&self) -> Vec<u8> {
        let records = self.records.lock().expect("journal lock");
        let lines: Vec<JournalLine> = records
            .iter()
            .map(|r| JournalLine {
                test: r.call.entry.test.as_str(),
                slug: r.call.entry.slug.as_str(),
                provider: r.call.entry.provider.as_str(),
                cassette: r.call.entry.path.display().to_string(),
                method: r.call.method.as_str(),
                path: &r.call.path,
                key: r.call.key.as_str(),
                ordinal: r.call.ordinal,
                outcome: r.outcome,
                status: r.status,
                detail: r.detail.as_deref(),
            })
            .collect();
        serde_json::to_vec_pretty(&lines).expect("journal serialises")
    }

    /// How many requests of each test a fault answered.
    pub fn faults(&self) -> std::collections::BTreeMap<String, usize> {
        self.faults.lock().expect("journal lock").clone()
    }

    /// Notes a tunnel a test opened to a `[capture] pass` host (`host:port`): it left the
    /// machine unrecorded, and the report says so.
    /// The tunnel is the exchange, and it ends here, as it opens: what passes inside it is
    /// not ours to see, and a kept-alive tunnel may outlive its test, whose end must not wait
    /// for it.
    pub fn passed(&self, test: &TestId, host: &str) {
        if let Some(run_log) = &self.run_log {
            let now = run_log.now_ms();
            run_log.exchange(&runlog::Exchange {
                test: test.as_str().into(),
                step: None,
                transport: "tunnel".into(),
                provider: "".into(),
                method: "CONNECT".into(),
                path: host.into(),
                key: "".into(),
                ordinal: 0,
                outcome: "passthrough".into(),
                status: 200,
                started_ms: now,
                ms: 0,
                bytes: None,
                model: None,
                usage: None,
            });
        }
        let mut passed = self.passed.lock().expect("journal lock");
        // Past this many tests and hosts, one more is only counted under the last it saw.
        const MAX_PASSED: usize = 10_000;
        let key = (test.clone(), host.to_string());
        if passed.len() < MAX_PASSED || passed.contains_key(&key) {
            *passed.entry(key).or_default() += 1;
        }
    }

    /// The tunnels to `[capture] pass` hosts: test, host, and how many.
    pub fn passed_through(&self) -> Vec<Passed> {
        self.passed
            .lock()
            .expect("journal lock")
            .iter()
            .map(|((test, host), count)| Passed {
                test: test.clone(),
                host: host.clone(),
                tunnels: *count,
            })
            .collect()
    }

    /// Prices the answers it saves, and holds the run to a cap, with `spend`.
    pub fn with_spend(mut self, spend: crate::spend::Spend) -> Self {
        self.spend = spend;
        self
    }

    /// What the answers saved so far cost, against `--max-spend`.
    pub fn spend(&self) -> &crate::spend::Spend {
        &self.spend
    }

    /// The run's ledger: each replay priced by what its recording cost (read from its
    /// cassette now, once, rather than as it was answered), each answer saved by what it
    /// reported. Replays past [`MAX_KEPT_HITS`] are counted as unpriced.
    pub fn ledger(&self) -> runlog::report::Ledger {
        let began = std::time::Instant::now();
        let prices = self.spend.prices();
        let mut replays = ledger::Tally::default();
        {
            let records = self.records.lock().expect("journal lock");
            for r in records.iter().filter(|r| r.outcome == Outcome::Hit) {
                let provider = r.call.entry.provider.as_str();
                match r
                    .call
                    .entry
                    .with_recorded(&r.call.key, r.call.ordinal, |i| {
                        prices.estimate(provider, i)
                    }) {
                    Some(priced) => replays.add(priced),
                    None => {
                        *replays
                            .unpriced
                            .entry("(recording no longer in its cassette)".to_string())
                            .or_default() += 1
                    }
                }
            }
        }
        let past_kept = self.counted_hits.load(Ordering::Relaxed);
        if past_kept > 0 {
            *replays
                .unpriced
                .entry("(replays past the journal's limit)".to_string())
                .or_default() += past_kept;
        }
        let n = replays.priced + replays.unpriced_count();
        tracing::info!(
            target: "cargo_llmreplay::ledger",
            replays = n,
            us = began.elapsed().as_micros() as u64,
            "replays priced"
        );
        let recorded = self.spend.tally();
        let mut unpriced = replays.unpriced.clone();
        for (model, n) in &recorded.unpriced {
            *unpriced.entry(model.clone()).or_default() += n;
        }
        runlog::report::Ledger {
            prices_date: prices.date().to_string(),
            saved_micros: replays.cost.micros(),
            replays_priced: replays.priced,
            replays_unpriced: replays.unpriced_count(),
            spent_micros: recorded.cost.micros(),
            recordings_priced: recorded.priced,
            recordings_unpriced: recorded.unpriced_count(),
            unpriced,
            max_spend_micros: self.spend.cap().map(ledger::Money::micros),
            refused_over_cap: self.spend.refused(),
        }
    }

    /// Writes its events to `run_log` too.
    pub fn with_run_log(mut self, run_log: Option<std::sync::Arc<crate::run_log::RunLog>>) -> Self {
        self.run_log = run_log;
        self
    }

    /// The run's event log, if any.
    pub fn run_log(&self) -> Option<&crate::run_log::RunLog> {
        self.run_log.as_deref()
    }

    /// Notes how a test's attempt ended: its last word is its last attempt's.
    pub fn ended(&self, test: &TestId, outcome: runlog::TestOutcome) {
        if let Some(run_log) = &self.run_log {
            run_log.emit(runlog::Event::TestEnded {
                test: test.to_string(),
                outcome,
                at_ms: run_log.now_ms(),
            });
        }
        let mut ended = self.ended.lock().expect("journal lock");
        if ended.len() < MAX_KEPT_OTHERS || ended.contains_key(test) {
            ended.insert(test.clone(), outcome);
        }
    }

    /// How each test ended, as its runner or plugin said.
    pub fn outcomes(&self) -> std::collections::BTreeMap<TestId, runlog::TestOutcome> {
        self.ended.lock().expect("journal lock").clone()
    }

    /// Notes what a test's end wrote to its cassettes.
    pub fn settled(&self, changes: cassettes::TestChanges) {
        if changes.is_empty() {
            return;
        }
        if let Some(run_log) = &self.run_log {
            run_log.emit(runlog::Event::TestSettled {
                test: changes.test.to_string(),
                added: changes.added,
                replaced: changes.replaced,
                removed: changes.removed,
                kept: changes.kept.clone(),
                at_ms: run_log.now_ms(),
            });
        }
        let mut settled = self.settled.lock().expect("journal lock");
        if settled.len() < MAX_KEPT_OTHERS {
            settled.push(changes);
        }
    }

    /// What the tests' ends wrote to their cassettes, test by test.
    pub fn changes(&self) -> Vec<cassettes::TestChanges> {
        self.settled.lock().expect("journal lock").clone()
    }

    /// Notes that a test started (the runner says so before it execs the test).
    pub fn begin(&self, test: &TestId) {
        self.said_began
            .lock()
            .expect("journal lock")
            .insert(test.clone());
        self.attempt_began(test);
    }

    /// Notes that an attempt of a test began, as its process's environment names it (nothing
    /// said so, and nothing will say how it ended).
    pub fn attempt_began(&self, test: &TestId) {
        let new = self
            .began
            .lock()
            .expect("journal lock")
            .insert(test.clone());
        if new {
            self.id_bytes
                .fetch_add(test.as_str().len(), Ordering::Relaxed);
        }
        self.began_event(test);
    }

    /// Whether a runner or plugin said that `test` began (then it says how it ended).
    pub fn began_was_said(&self, test: &TestId) -> bool {
        self.said_began.lock().expect("journal lock").contains(test)
    }

    /// Whether `bytes` more of test ids fit in [`IDS_BUDGET`] beside those kept.
    pub fn has_room_for_ids(&self, bytes: usize) -> bool {
        self.id_bytes.load(Ordering::Relaxed).saturating_add(bytes) <= IDS_BUDGET
    }

    /// The bytes of test ids kept, begun and listed.
    pub fn id_bytes(&self) -> usize {
        self.id_bytes.load(Ordering::Relaxed)
    }

    /// Notes that a test ran, where nothing said when it began (a first attempt under the
    /// target runner, which says nothing to spare its test a round trip): the run log has it
    /// begin at its first exchange, or now if it made none.
    pub fn ran(&self, test: &TestId) {
        let new = self
            .began
            .lock()
            .expect("journal lock")
            .insert(test.clone());
        if new {
            self.id_bytes
                .fetch_add(test.as_str().len(), Ordering::Relaxed);
            self.began_event(test);
        }
    }

    /// Whether the test is known to have begun: it was said to, or it made a call.
    pub fn has_begun(&self, test: &TestId) -> bool {
        self.began.lock().expect("journal lock").contains(test)
    }

    fn began_event(&self, test: &TestId) {
        if let Some(run_log) = &self.run_log {
            run_log.emit(runlog::Event::TestBegan {
                test: test.to_string(),
                at_ms: run_log.now_ms(),
            });
        }
    }

    /// Notes the tests a test binary holds (`<binary id>$<name>` each), all or none: the bytes
    /// of those not noted before, when they do not fit in [`IDS_BUDGET`].
    pub fn listed<'a>(
        &self,
        binary: &str,
        names: impl Iterator<Item = &'a str>,
    ) -> Result<(), usize> {
        self.note_listed(names.map(|n| TestId::nextest(binary, n)))
    }

    /// Notes the suite a test plugin collected (`runner`: pytest, vitest...), its ids as its
    /// tests begin, and whether the runner's own selection left tests out (`filtered`). Says
    /// which of them meet another collected test at one cassette folder, before either runs:
    /// `(folder, one, other)` each.
    pub fn collected<'a>(
        &self,
        runner: &str,
        filtered: bool,
        ids: impl Iterator<Item = &'a str>,
    ) -> Result<Vec<(String, TestId, TestId)>, usize> {
        let ids: Vec<TestId> = ids.filter(|n| !n.is_empty()).map(TestId::new).collect();
        self.note_listed(ids.iter().cloned())?;
        let mut listings = self.listings.lock().expect("journal lock");
        if listings.runners.len() < 16 {
            listings.runners.insert(runner.to_string());
        }
        listings.filtered |= filtered;
        let mut met = Vec::new();
        for id in ids {
            let slug = cassettes::Slug::from_test_id(&id).to_string();
            match listings.folders.get(&slug) {
                Some(owner) if *owner != id => met.push((slug, owner.clone(), id)),
                Some(_) => {}
                None => {
                    listings.folders.insert(slug, id);
                }
            }
        }
        Ok(met)
    }

    /// What test plugins said of the suites they collected in this run.
    pub fn listings(&self) -> Listings {
        self.listings.lock().expect("journal lock").clone()
    }

    fn note_listed(&self, ids: impl Iterator<Item = TestId>) -> Result<(), usize> {
        let mut listed = self.listed.lock().expect("journal lock");
        let new: std::collections::BTreeSet<TestId> = ids
            .filter(|t| !t.as_str().is_empty() && !listed.contains(t))
            .collect();
        let bytes = new.iter().map(|t| t.as_str().len()).sum();
        if !self.has_room_for_ids(bytes) {
            return Err(bytes);
        }
        self.id_bytes.fetch_add(bytes, Ordering::Relaxed);
        listed.extend(new);
        Ok(())
    }

    /// Notes the whole suite at once, as `cargo nextest list` gave it.
    pub fn listed_all(&self, tests: std::collections::BTreeSet<TestId>) {
        let mut listed = self.listed.lock().expect("journal lock");
        for test in tests {
            let len = test.as_str().len();
            if listed.insert(test) {
                self.id_bytes.fetch_add(len, Ordering::Relaxed);
            }
        }
    }

    /// The suite as listed by nextest in this run, ignored tests included.
    pub fn suite(&self) -> std::collections::BTreeSet<TestId> {
        self.listed.lock().expect("journal lock").clone()
    }

    /// Tests that started in this run, or made a request.
    pub fn tests(&self) -> std::collections::BTreeSet<TestId> {
        let mut tests = self.began.lock().expect("journal lock").clone();
        for r in self.records.lock().expect("journal lock").iter() {
            tests.insert(r.call.entry.test.clone());
        }
        tests.extend(
            self.overflow
                .lock()
                .expect("journal lock")
                .tests
                .iter()
                .cloned(),
        );
        tests
    }

    /// The error answers this run recorded or replayed, each recording once, in order.
    pub fn error_answers(&self) -> Vec<ErrorAnswer> {
        let records = self.records.lock().expect("journal lock");
        let mut seen = std::collections::BTreeSet::new();
        records
            .iter()
            .filter(|r| {
                (400..500).contains(&r.status) && (r.outcome.saved() || r.outcome == Outcome::Hit)
            })
            .filter(|r| {
                seen.insert((
                    r.call.entry.test.clone(),
                    r.call.entry.provider.clone(),
                    r.call.key.clone(),
                    r.call.ordinal,
                ))
            })
            .map(|r| ErrorAnswer {
                test: r.call.entry.test.clone(),
                provider: r.call.entry.provider.clone(),
                method: r.call.method.to_string(),
                path: r.call.path.clone(),
                status: r.status,
                cassette: r.call.entry.path.display().to_string(),
                ordinal: r.call.ordinal,
                recorded: r.outcome.saved(),
            })
            .collect()
    }

    /// The first request that failed on its way, and what it said.
    pub fn first_failure(&self) -> Option<Failure> {
        let records = self.records.lock().expect("journal lock");
        records
            .iter()
            .filter(|r| {
                matches!(
                    r.outcome,
                    Outcome::Error | Outcome::Broken | Outcome::Refused
                )
            })
            .find_map(|r| {
                Some(Failure {
                    test: r.call.entry.test.clone(),
                    status: r.status,
                    message: r.detail.as_ref()?.message.clone()?,
                })
            })
    }

    /// The recordings the last secret guard refused to write, each with its message: their
    /// clients got their answers, so the run fails at its end instead.
    pub fn not_saved(&self) -> Vec<Failure> {
        let records = self.records.lock().expect("journal lock");
        records
            .iter()
            .filter(|r| r.outcome == Outcome::Error)
            .filter_map(|r| {
                let message = r.detail.as_ref()?.message.clone()?;
                message
                    .starts_with(crate::outcome::NOT_SAVED_SECRET)
                    .then(|| Failure {
                        test: r.call.entry.test.clone(),
                        status: r.status,
                        message,
                    })
            })
            .collect()
    }

    /// The misses, in order, with what the report shows of each.
    pub fn misses(&self) -> Vec<Miss> {
        self.of_outcome(Outcome::Miss)
    }

    /// The messages to MCP servers run live whose answers differ from their recordings.
    pub fn live_differences(&self) -> Vec<Miss> {
        self.of_outcome(Outcome::LiveDiffers)
    }

    fn of_outcome(&self, outcome: Outcome) -> Vec<Miss> {
        let records = self.records.lock().expect("journal lock");
        records
            .iter()
            .filter(|r| r.outcome == outcome)
            .map(|r| Miss {
                test: r.call.entry.test.clone(),
                provider: r.call.entry.provider.clone(),
                method: r.call.method.to_string(),
                path: r.call.path.clone(),
                cassette: r.call.entry.path.display().to_string(),
                key: r.call.key.to_string(),
                ordinal: r.call.ordinal,
                detail: r.detail.as_deref().cloned().unwrap_or_default(),
            })
            .collect()
    }
}

impl From<cassettes::RecordOutcome> for Outcome {
    fn from(outcome: cassettes::RecordOutcome) -> Outcome {
        match outcome {
            cassettes::RecordOutcome::Appended => Outcome::Recorded,
            cassettes::RecordOutcome::Replaced => Outcome::Replaced,
            cassettes::RecordOutcome::Unchanged => Outcome::Unchanged,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cassettes::{ProviderName, Store, TestId};

    /// Replays are priced from the recordings they replayed, by their key and ordinal (the
    /// last recording for an ordinal past them); answers saved from what they reported.
    /// gpt-4o-mini, 1,000 in and 100 out: 150 + 60 = 210 micro-dollars.
    #[test]
    fn the_ledger_prices_replays_from_their_recordings() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path());
        let journal = Journal::default();
        let entry = store
            .entry(&TestId::new("t$a"), &ProviderName::new("openai").unwrap())
            .unwrap();
        let key_of = |prompt: &str| {
            let body = serde_json::json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": prompt}]});
            let request = cassettes::Normalizer::plain().request(
                "POST",
                "/v1/chat/completions",
                None,
                Some("application/json"),
                body.to_string().as_bytes(),
                &[],
            );
            (cassettes::Key::of(&request), request)
        };
        let answer = |tokens: u64| {
            cassettes::RecordedResponse::with_body(
                200,
                Default::default(),
                serde_json::json!({"model": "gpt-4o-mini", "choices": [{"message": {"content": "hi"}}],
                    "usage": {"prompt_tokens": tokens, "completion_tokens": 100}})
                .to_string()
                .as_bytes(),
            )
        };
        let (key, request) = key_of("one");
        for (ordinal, tokens) in [(0, 1000), (1, 2000)] {
            let x = cassettes::Interaction::recorded(
                key.clone(),
                request.clone(),
                answer(tokens),
                cassettes::Timing {
                    ttfb_ms: 1,
                    total_ms: 2,
                },
            );
            entry.record(ordinal, x).unwrap();
        }
        let (unknown, _) = key_of("never recorded");
        let hit = |key: &cassettes::Key, ordinal| Call {
            entry: entry.clone(),
            method: http::Method::POST,
            path: "/v1/chat/completions".into(),
            key: key.clone(),
            ordinal,
            started: std::time::Instant::now(),
            bytes: None,
            session: false,
            flight: None,
            answer: None,
            sink: None,
        };
        for ordinal in [0, 1, 2] {
            journal.log(hit(&key, ordinal), Outcome::Hit, 200, None);
        }
        journal.log(hit(&unknown, 0), Outcome::Hit, 200, None);
        let mut saved = hit(&unknown, 0);
        saved.answer = Some(Box::new((
            Some("gpt-4o-mini".into()),
            Some(serde_json::json!({"prompt_tokens": 1000, "completion_tokens": 100})),
        )));
        journal.log(saved, Outcome::Recorded, 200, None);
        let l = journal.ledger();
        // 210, then 2,000 × 0.15 + 60 = 360 twice (the second is past the recordings).
        assert_eq!(l.saved_micros, 210 + 360 + 360);
        assert_eq!((l.replays_priced, l.replays_unpriced), (3, 1));
        assert_eq!(
            l.unpriced,
            [("(recording no longer in its cassette)".to_string(), 1)].into()
        );
        assert_eq!((l.spent_micros, l.recordings_priced), (210, 1));
    }

    /// 20,000 misses keep at most `MAX_KEPT_OTHERS` records with details, and count them all.
    #[test]
    fn memory_is_bounded_for_every_outcome() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path());
        let journal = Journal::default();
        let provider = ProviderName::new("openai").unwrap();
        for i in 0..20_000 {
            let entry = store
                .entry(&TestId::new(format!("t${}", i % 7)), &provider)
                .unwrap();
            let call = Call {
                entry,
                method: http::Method::POST,
                path: "/v1/chat/completions".into(),
                key: cassettes::Key::of(&cassettes::Normalizer::plain().request(
                    "POST",
                    "/",
                    None,
                    None,
                    b"",
                    &[],
                )),
                ordinal: i,
                started: std::time::Instant::now(),
                bytes: None,
                session: false,
                flight: None,
                answer: None,
                sink: None,
            };
            journal.log(
                call,
                Outcome::Miss,
                404,
                Some(Detail::message("x".repeat(500))),
            );
        }
        assert_eq!(journal.records.lock().unwrap().len(), MAX_KEPT_OTHERS);
        let stats = journal.stats();
        assert_eq!((stats.requests, stats.misses), (20_000, 20_000));
        assert_eq!(journal.misses().len(), MAX_KEPT_OTHERS);
        assert_eq!(journal.tests().len(), 7);
    }
}
