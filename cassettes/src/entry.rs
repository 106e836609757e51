//! One test's cassette for one provider: the recordings it holds, prepared for replay, this
//! run's sequence over them, and a new recording merged into the file under its folder's lock.

use crate::format::{
    ordinals, Cassette, Interaction, Prepared, RecordOutcome, RecordingId, Summary,
};
use crate::fs::confined;
use crate::id::{ProviderName, Slug, TestId};
use crate::key::{differing_fields, Key, RecordedRequest};
use crate::maintenance::mv_command;
use crate::secrets::Guard;
use crate::Error;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the loaded cassettes of a store hold, against its budget: a suite of many tests keeps
/// in memory the cassettes of the tests running now and of those about to run, not all of them.
#[derive(Debug)]
pub(crate) struct Resident {
    /// Bytes held by loaded cassettes (their answers and requests, as [`Loaded::bytes`]).
    pub(crate) total: AtomicUsize,
    /// Of these, the bytes of cassettes a request used since they were loaded: what can go
    /// first (a test, once run, rarely calls again).
    pub(crate) used: AtomicUsize,
    /// A clock that ticks at each load; a lookup notes its time: which entry was used least
    /// recently.
    pub(crate) clock: AtomicU64,
    /// Past this, cassettes are unloaded.
    pub(crate) budget: usize,
    /// Told when cassettes are unloaded, for a preload waiting for room.
    pub(crate) room: std::sync::Condvar,
    pub(crate) gate: Mutex<()>,
}

impl Resident {
    pub(crate) fn new(budget: usize) -> Resident {
        Resident {
            total: AtomicUsize::new(0),
            used: AtomicUsize::new(0),
            clock: AtomicU64::new(0),
            budget,
            room: std::sync::Condvar::new(),
            gate: Mutex::new(()),
        }
    }

    /// Whether used cassettes should go now: the loaded ones fill three quarters of the
    /// budget and an eighth of it is used ones (so that a scan frees that much at least).
    pub(crate) fn pressed(&self) -> bool {
        self.total.load(Ordering::Relaxed) > self.budget / 4 * 3
            && self.used.load(Ordering::Relaxed) > self.budget / 8
            || self.total.load(Ordering::Relaxed) > self.budget
    }
}

/// One test's cassette for one provider, and this run's sequence cursors over it.
pub struct Entry {
    /// The test.
    pub test: TestId,
    /// Its folder's name.
    pub slug: Slug,
    /// The provider.
    pub provider: ProviderName,
    /// The cassette file.
    pub path: PathBuf,
    /// The cassette directory, which no write may leave.
    pub(crate) root: PathBuf,
    pub(crate) lock_timeout: Duration,
    pub(crate) guard: Arc<Guard>,
    /// Held (on a blocking thread) for the whole of a write, so this process writes the file
    /// one recording at a time; `state` is only ever held briefly, never across a file lock, so
    /// a lock another process holds delays this test's recordings alone.
    pub(crate) writing: Mutex<()>,
    pub(crate) state: Mutex<State>,
    /// The store's budget, shared by all its entries.
    pub(crate) resident: Arc<Resident>,
    /// Bytes this entry's loaded cassette holds (0: not loaded).
    pub(crate) held: AtomicUsize,
    /// The store's clock at this entry's last lookup (0: none yet).
    pub(crate) last: AtomicU64,
    /// Its loaded cassette is counted in [`Resident::used`].
    pub(crate) counted: std::sync::atomic::AtomicBool,
    /// Every recording of the cassette as last loaded, kept when it is unloaded: whether a
    /// test left any unused is known without reading the file again.
    pub(crate) catalog: Mutex<Option<Arc<[RecordingId]>>>,
    /// What every entry of this test shares: its exchanges under way and its step count.
    pub(crate) shared: Arc<TestShared>,
    /// Where this run's recordings go first.
    pub(crate) spool: Option<Arc<crate::spool::Spool>>,
}

/// One test's count of exchanges, shared by its entries (one per provider): how many are under
/// way, which a test's end waits for, and how many began, which numbers its steps.
#[derive(Debug, Default)]
pub struct TestShared {
    /// Whether any exchange of the test began in this run.
    pub(crate) began: std::sync::atomic::AtomicBool,
    pub(crate) in_flight: AtomicUsize,
    pub(crate) steps: AtomicU64,
    pub(crate) flights: Arc<Flights>,
}

/// Every exchange under way in a store, and a way to wait for them to end.
#[derive(Debug, Default)]
pub struct Flights {
    pub(crate) waiting: AtomicUsize,
    pub(crate) lock: Mutex<()>,
    pub(crate) ended: std::sync::Condvar,
}

impl Flights {
    /// Waits until `done` holds, checking it whenever an exchange ends, up to `timeout`;
    /// whether it held.
    pub(crate) fn wait(&self, timeout: Duration, done: impl Fn() -> bool) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let mut guard = self.lock.lock().expect("flights lock");
        let held = loop {
            if done() {
                break true;
            }
            let now = std::time::Instant::now();
            if now >= deadline {
                break false;
            }
            // Bounded: an end that slipped between the check and the wait is seen soon anyway.
            let pause = (deadline - now).min(Duration::from_millis(20));
            guard = self
                .ended
                .wait_timeout(guard, pause)
                .expect("flights lock")
                .0;
        };
        drop(guard);
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        held
    }
}

/// An exchange under way, from the moment its test is known until it is journalled and
/// [`Entry::end_exchange`] ends it: a test's end or the run's end waiting on it goes on.
#[derive(Debug)]
#[must_use = "an exchange under way ends with Entry::end_exchange"]
pub struct Flight {
    /// Its place among its test's exchanges, from 0.
    pub step: u64,
}

#[derive(Default)]
pub(crate) struct State {
    pub(crate) loaded: Option<Loaded>,
    pub(crate) cursors: HashMap<Key, usize>,
    /// The recordings this run replayed, recorded or served through a fault, by key and
    /// ordinal: unlike positions, these survive a trim and another process's appends.
    pub(crate) used: Used,
    pub(crate) run: RunAccount,
}

/// Recordings by key and which recording of the key: a set of [`RecordingId`] that takes a
/// borrowed key, so replay's hot path allocates only for a key's first use.
#[derive(Default)]
pub(crate) struct Used(pub(crate) HashMap<Key, Vec<usize>>);

impl Used {
    pub(crate) fn insert(&mut self, key: &Key, ordinal: usize) {
        match self.0.get_mut(key) {
            Some(ordinals) if ordinals.contains(&ordinal) => {}
            Some(ordinals) => ordinals.push(ordinal),
            None => {
                self.0.insert(key.clone(), vec![ordinal]);
            }
        }
    }

    pub(crate) fn contains(&self, key: &Key, ordinal: usize) -> bool {
        self.0.get(key).is_some_and(|o| o.contains(&ordinal))
    }
}

/// A recording not yet in its cassette file: which recording of its key, and the interaction.
pub(crate) type Pending = (usize, Interaction);

/// Past this many bytes of recordings not yet in the file, an entry writes them (see
/// [`Entry::record`]).
pub(crate) const MAX_PENDING_BYTES: usize = 64 << 20;

/// Recordings an attempt may name for its trim; past this, the test keeps everything (a
/// long-lived daemon recording one test without end must not grow without bound).
pub(crate) const MAX_ACCOUNTED: usize = 100_000;

/// What this run did to one cassette, for the report and for a re-recorded test's trim.
#[derive(Default)]
pub(crate) struct RunAccount {
    /// Each recording this attempt wrote or found unchanged, in the order they were saved.
    pub(crate) recorded: Vec<RecordingId>,
    /// Requests of this attempt that went upstream and were not saved (an upstream error, a
    /// refused key, a broken stream): the test's old recordings may be all it has for them.
    pub(crate) unsaved: usize,
    /// More recordings than `MAX_ACCOUNTED`: the attempt's list is incomplete.
    pub(crate) overflowed: bool,
    /// Recordings this attempt was served through a fault (a cut or broken answer): used,
    /// so a trim keeps them though nothing recorded them again.
    pub(crate) served: Vec<RecordingId>,
    /// Recordings made and not yet in the cassette file, in the order made, across attempts:
    /// they reach the file when the test ends.
    pub(crate) pending: Vec<Pending>,
    /// What the pending recordings took in the spool.
    pub(crate) pending_bytes: usize,
    /// What each recording of the file answered when this run first recorded for it, as
    /// compared on a re-record: whether a new recording replaces an answer or repeats it.
    pub(crate) baseline: Option<HashMap<RecordingId, serde_json::Value>>,
}

impl RunAccount {
    /// Whether the attempt made any call through this entry.
    pub(crate) fn called(&self) -> bool {
        !self.recorded.is_empty() || self.unsaved > 0 || !self.served.is_empty()
    }
}

/// What a loaded interaction holds besides its answer's bytes: its parsed request, key,
/// summary and index entries.
const PER_INTERACTION: usize = 2048;

pub(crate) struct Loaded {
    pub(crate) cassette: Cassette,
    pub(crate) index: HashMap<Key, Vec<usize>>,
    /// Each position's ordinal among the recordings of its key.
    pub(crate) ordinals: Vec<usize>,
    pub(crate) prepared: Vec<Arc<Prepared>>,
    /// About what it holds in memory, for the store's budget.
    pub(crate) bytes: usize,
}

impl Loaded {
    /// Every recording, by key and ordinal.
    pub(crate) fn catalog(&self) -> Arc<[RecordingId]> {
        self.cassette
            .interactions
            .iter()
            .zip(&self.ordinals)
            .map(|(i, &ordinal)| RecordingId {
                key: i.key.clone(),
                ordinal,
            })
            .collect()
    }

    /// Keeps each answer once, as prepared bytes: the cassette kept beside them holds the
    /// requests (their large bodies by hash only) and summaries, which is all a miss or the
    /// report reads of it.
    pub(crate) fn new(mut cassette: Cassette) -> Self {
        let mut index: HashMap<Key, Vec<usize>> = HashMap::new();
        for (i, interaction) in cassette.interactions.iter().enumerate() {
            index.entry(interaction.key.clone()).or_default().push(i);
        }
        let ordinals = ordinals(&cassette.interactions);
        let prepared: Vec<Arc<Prepared>> = cassette
            .interactions
            .iter_mut()
            .map(|i| {
                for blob in i.request.body.blobs_mut() {
                    blob.bytes = None;
                }
                Arc::new(Prepared::take(i))
            })
            .collect();
        // The answers' bytes, and for each interaction its parsed request and summary: about
        // what a recording of a short request costs beside its answer.
        let bytes = prepared
            .iter()
            .map(|p| p.body.len() + PER_INTERACTION)
            .sum();
        Loaded {
            cassette,
            index,
            ordinals,
            prepared,
            bytes,
        }
    }
}

impl Loaded {
    /// Takes a recording made in this run, as the file will once the test ends: in place of
    /// the key's `ordinal`-th, else after the others. Returns the bytes it now holds and
    /// those it let go.
    pub(crate) fn put(&mut self, ordinal: usize, interaction: &Interaction) -> (usize, usize) {
        let mut copy = interaction.clone();
        for blob in copy.request.body.blobs_mut() {
            blob.bytes = None;
        }
        let prepared = Arc::new(Prepared::take(&mut copy));
        let size = prepared.body.len() + PER_INTERACTION;
        let positions = self.index.entry(copy.key.clone()).or_default();
        match positions.get(ordinal) {
            Some(&i) => {
                let old = self.prepared[i].body.len() + PER_INTERACTION;
                self.prepared[i] = prepared;
                self.cassette.interactions[i] = copy;
                self.bytes = (self.bytes + size).saturating_sub(old);
                (size, old)
            }
            None => {
                self.ordinals.push(positions.len());
                positions.push(self.cassette.interactions.len());
                self.cassette.interactions.push(copy);
                self.prepared.push(prepared);
                self.bytes += size;
                (size, 0)
            }
        }
    }
}

/// The answer to "what does the n-th request with this key get?".
pub struct Lookup {
    /// 0 for the first request with this key in this test, 1 for the second, ...
    pub ordinal: usize,
    /// The recording it gets, if there is one.
    pub hit: Option<Arc<Prepared>>,
}

/// The closest recording to a request that found none.
#[derive(Clone, Debug)]
pub struct Closest {
    /// Its position in the cassette, from 0.
    pub index: usize,
    /// The JSON pointers of the fields that differ.
    pub differing: Vec<String>,
    /// For each differing field, the recorded value and the new one (`None`: absent).
    pub values: Vec<(Option<serde_json::Value>, Option<serde_json::Value>)>,
    /// Its key.
    pub key: Key,
    /// Its request, as [`RecordedRequest::to_value`] gives it.
    pub recorded: serde_json::Value,
}

impl Closest {
    /// The same call (method and path) with other parameters: a drifted prompt or model,
    /// which re-recording the test replaces.
    pub fn same_call(&self) -> bool {
        !self
            .differing
            .iter()
            .any(|p| p == "/method" || p == "/path")
    }
}

impl Entry {
    /// Takes the next ordinal for `key` and returns the recording it maps to, if any. With
    /// `repeat_last`, a request beyond the recordings gets the last one (vcrpy's playback repeats).
    pub fn next(&self, key: &Key, repeat_last: bool) -> Result<Lookup, Error> {
        self.lookup(key, repeat_last, true)
    }

    /// The recording the next request with `key` would get, for a fault to serve in part,
    /// without taking it: a faulted request must not move the sequence. The recording counts
    /// as used, and a trim keeps it.
    pub fn serve_fault(
        &self,
        key: &Key,
        repeat_last: bool,
    ) -> Result<Option<Arc<Prepared>>, Error> {
        self.touch();
        let mut state = self.state.lock().expect("entry lock");
        let state = &mut *state;
        let loaded = self.ensure_loaded(&mut state.loaded, &state.run.pending)?;
        self.count_used();
        let ordinal = state.cursors.get(key).copied().unwrap_or(0);
        let Some(positions) = loaded.index.get(key) else {
            return Ok(None);
        };
        let n = if repeat_last {
            ordinal.min(positions.len() - 1)
        } else {
            ordinal
        };
        let Some(&i) = positions.get(n) else {
            return Ok(None);
        };
        let prepared = loaded.prepared[i].clone();
        state.used.insert(key, n);
        let id = RecordingId {
            key: key.clone(),
            ordinal: n,
        };
        if !state.run.served.contains(&id) && state.run.served.len() < MAX_ACCOUNTED {
            state.run.served.push(id);
        }
        Ok(Some(prepared))
    }

    /// As [`Entry::next`], for replay: a key with no recording gets ordinal 0 and no cursor, so
    /// a stream of requests that miss (every one a new key) takes no memory.
    pub fn next_recorded(&self, key: &Key, repeat_last: bool) -> Result<Lookup, Error> {
        self.lookup(key, repeat_last, false)
    }

    pub(crate) fn lookup(
        &self,
        key: &Key,
        repeat_last: bool,
        count_unrecorded: bool,
    ) -> Result<Lookup, Error> {
        self.touch();
        let mut state = self.state.lock().expect("entry lock");
        let state = &mut *state;
        let loaded = self.ensure_loaded(&mut state.loaded, &state.run.pending)?;
        self.count_used();
        // The hot path: no allocation once a key has been seen.
        let ordinal = match state.cursors.get_mut(key) {
            Some(cursor) => {
                *cursor += 1;
                *cursor - 1
            }
            None if count_unrecorded || loaded.index.contains_key(key) => {
                state.cursors.insert(key.clone(), 1);
                0
            }
            None => 0,
        };
        let position = loaded.index.get(key).and_then(|positions| {
            let n = if repeat_last {
                ordinal.min(positions.len() - 1)
            } else {
                ordinal
            };
            positions.get(n).copied()
        });
        if let Some(i) = position {
            state.used.insert(key, loaded.ordinals[i]);
        }
        Ok(Lookup {
            ordinal,
            hit: position.map(|i| loaded.prepared[i].clone()),
        })
    }

    /// Calls `f` with the recording of `key`'s `ordinal`-th request (its last, past them), as
    /// loaded: its request and summary, its answer's bytes aside. None when there is none, or
    /// the cassette cannot be read. For what a recording cost: the pricing of replays at the
    /// run's end, and of a re-record before it is sent.
    pub fn with_recorded<T>(
        &self,
        key: &Key,
        ordinal: usize,
        f: impl FnOnce(&Interaction) -> T,
    ) -> Option<T> {
        let mut state = self.state.lock().expect("entry lock");
        let state = &mut *state;
        let loaded = self
            .ensure_loaded(&mut state.loaded, &state.run.pending)
            .ok()?;
        let positions = loaded.index.get(key)?;
        let i = *positions.get(ordinal.min(positions.len().checked_sub(1)?))?;
        Some(f(&loaded.cassette.interactions[i]))
    }

    /// Counts a request of this attempt that went upstream and was not saved: the test then
    /// keeps its old recordings when the run ends (see [`Store::finish_test`]).
    pub fn note_unsaved(&self) {
        self.state.lock().expect("entry lock").run.unsaved += 1;
    }

    /// The recording of this test closest to `request`: fewest differing fields.
    pub fn closest(&self, request: &RecordedRequest) -> Option<Closest> {
        let mut guard = self.state.lock().expect("entry lock");
        let state = &mut *guard;
        self.ensure_loaded(&mut state.loaded, &state.run.pending)
            .ok()?;
        let state = &*state;
        let loaded = state.loaded.as_ref()?;
        let wanted = request.to_value();
        let (index, recorded, differing) = loaded
            .cassette
            .interactions
            .iter()
            .enumerate()
            .map(|(index, i)| {
                let recorded = i.request.to_value();
                let differing = differing_fields(&recorded, &wanted);
                (index, recorded, differing)
            })
            // On a tie, a recording this run has not replayed yet: the n-th call of a test
            // that drifted is closest to its own old recording, not to one already used.
            .min_by_key(|(index, _, d)| {
                let i = &loaded.cassette.interactions[*index];
                (
                    d.len(),
                    state.used.contains(&i.key, loaded.ordinals[*index]),
                )
            })?;
        let values = differing
            .iter()
            .map(|p| {
                let shown =
                    |v: Option<&serde_json::Value>| v.cloned().map(|v| self.guard.shown(p, v));
                (shown(recorded.pointer(p)), shown(wanted.pointer(p)))
            })
            .collect();
        Some(Closest {
            index,
            differing,
            values,
            key: loaded.cassette.interactions[index].key.clone(),
            recorded,
        })
    }

    /// True for the first exchange of this entry's test in the run (any provider), once.
    pub fn first_exchange(&self) -> bool {
        let began = &self.shared.began;
        !began.load(Ordering::Relaxed) && !began.swap(true, Ordering::Relaxed)
    }

    /// Begins an exchange of this entry's test: the test's end, and the run's, wait for it
    /// to end (the returned flight dropped).
    pub fn begin_exchange(&self) -> Flight {
        let shared = &self.shared;
        shared.in_flight.fetch_add(1, Ordering::SeqCst);
        Flight {
            step: shared.steps.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// Ends an exchange [`Entry::begin_exchange`] began: whoever waits for its test goes on.
    pub fn end_exchange(&self, flight: Flight) {
        let _ = flight;
        let shared = &self.shared;
        shared.in_flight.fetch_sub(1, Ordering::SeqCst);
        let flights = &shared.flights;
        if flights.waiting.load(Ordering::SeqCst) > 0 {
            let _guard = flights.lock.lock().expect("flights lock");
            flights.ended.notify_all();
        }
    }

    /// Keeps `interaction` as the `ordinal`-th recording of its key: in the run's spool at
    /// once, so it is durable before its client has the answer, and in the cassette file when
    /// the test ends ([`crate::Store::finish_test`]). What it will do there is said now: a new
    /// recording, a changed answer, or the same answer as the file's.
    /// Blocks on the spool's file: call it off the async workers.
    pub fn record(&self, ordinal: usize, interaction: Interaction) -> Result<RecordOutcome, Error> {
        self.record_then(ordinal, interaction, |_| ())
            .map(|(outcome, ())| outcome)
    }

    /// [`Entry::record`], and `facts` of the interaction as it is kept (redacted, sealed): what
    /// a log may say of it holds no secret the cassette does not.
    pub fn record_then<T>(
        &self,
        ordinal: usize,
        mut interaction: Interaction,
        facts: impl FnOnce(&Interaction) -> T,
    ) -> Result<(RecordOutcome, T), Error> {
        if self.guard.redact_answer(&mut interaction) {
            interaction.summary = Summary::of(&interaction.response);
        }
        if let Some(found) = self.guard.check(&interaction) {
            return Err(Error::Secret {
                path: self.path.clone(),
                pointer: found.pointer,
                what: found.what,
            });
        }
        interaction.seal = Some(crate::format::seal_of(&interaction.response));
        if interaction.recorded_at.is_none() {
            interaction.recorded_at = Some(crate::clock::utc_now());
        }
        let key = interaction.key.clone();
        let id = RecordingId {
            key: key.clone(),
            ordinal,
        };
        // The file as it stood before this run recorded for it, read once.
        let unread = self
            .state
            .lock()
            .expect("entry lock")
            .run
            .baseline
            .is_none();
        let baseline = if unread {
            let _writing = self.writing.lock().expect("entry write lock");
            Some(self.baseline()?)
        } else {
            None
        };
        let comparable = interaction.response.comparable();
        let mut size = 0;
        if let Some(spool) = &self.spool {
            (interaction, size) =
                spool.recorded(&self.test, &self.provider, ordinal, interaction)?;
        }
        let mut guard = self.state.lock().expect("entry lock");
        let state = &mut *guard;
        if state.run.baseline.is_none() {
            state.run.baseline = Some(baseline.unwrap_or_default());
        }
        let baseline = state.run.baseline.as_mut().expect("set above");
        let outcome = match baseline.get(&id) {
            None => RecordOutcome::Appended,
            Some(old) if *old == comparable => RecordOutcome::Unchanged,
            Some(_) => RecordOutcome::Replaced,
        };
        if outcome != RecordOutcome::Unchanged {
            baseline.insert(id.clone(), comparable);
        }
        let account = &mut state.run;
        if account.recorded.len() < MAX_ACCOUNTED {
            account.recorded.push(id);
        } else {
            account.overflowed = true;
        }
        // What was just recorded was used by this run, wherever it lands.
        state.used.insert(&key, ordinal);
        if let Some(loaded) = state.loaded.as_mut() {
            let (added, removed) = loaded.put(ordinal, &interaction);
            self.resident.total.fetch_add(added, Ordering::Relaxed);
            self.resident.total.fetch_sub(removed, Ordering::Relaxed);
            self.held.store(loaded.bytes, Ordering::Relaxed);
        }
        let facts = facts(&interaction);
        state.run.pending.push((ordinal, interaction));
        state.run.pending_bytes += size;
        // A test that records without end (a long `serve`) writes what it holds past a bound,
        // adding and removing nothing: its memory stays bounded, its spool already has it all.
        let full = state.run.pending_bytes > MAX_PENDING_BYTES;
        drop(guard);
        if full {
            self.flush()?;
        }
        Ok((outcome, facts))
    }

    /// The answers of the file's recordings as a re-record compares them.
    fn baseline(&self) -> Result<HashMap<RecordingId, serde_json::Value>, Error> {
        let cassette = self.read()?;
        Ok(crate::format::recording_ids(&cassette.interactions)
            .into_iter()
            .zip(
                cassette
                    .interactions
                    .iter()
                    .map(|i| i.response.comparable()),
            )
            .collect())
    }

    /// Writes this run's recordings not yet in the file to it, adding and replacing, removing
    /// nothing: for a command that records outside a test run (`rerun --save`).
    pub fn flush(&self) -> Result<(), Error> {
        let pending = self.pending();
        if pending.is_empty() {
            return Ok(());
        }
        crate::settle::settle_file(
            &self.path,
            &self.root,
            &self.test,
            self.lock_timeout,
            &pending,
            None,
            crate::settle::Put::Replace,
        )?;
        let mut state = self.state.lock().expect("entry lock");
        let done = pending.len().min(state.run.pending.len());
        state.run.pending.drain(..done);
        state.run.pending_bytes = 0;
        Ok(())
    }

    /// This run's recordings not yet in the file, taken to be written.
    pub(crate) fn pending(&self) -> Vec<(usize, Interaction)> {
        self.state.lock().expect("entry lock").run.pending.clone()
    }

    /// The loaded cassette, read if need be, with this run's recordings not yet in the file.
    pub(crate) fn ensure_loaded<'s>(
        &self,
        loaded: &'s mut Option<Loaded>,
        pending: &[(usize, Interaction)],
    ) -> Result<&'s Loaded, Error> {
        if loaded.is_none() {
            let mut read = Loaded::new(self.read()?);
            for (ordinal, x) in pending {
                read.put(*ordinal, x);
            }
            self.hold(loaded, read);
        }
        Ok(loaded.as_ref().expect("just loaded"))
    }

    /// Puts `new` in `slot` (this entry's `state.loaded`), counting it against the budget.
    pub(crate) fn hold(&self, slot: &mut Option<Loaded>, new: Loaded) {
        let bytes = new.bytes;
        *self.catalog.lock().expect("catalog lock") = Some(new.catalog());
        if let Some(old) = slot.replace(new) {
            self.resident.total.fetch_sub(old.bytes, Ordering::Relaxed);
            if self.counted.swap(false, Ordering::Relaxed) {
                self.resident.used.fetch_sub(old.bytes, Ordering::Relaxed);
            }
        }
        self.resident.total.fetch_add(bytes, Ordering::Relaxed);
        self.held.store(bytes, Ordering::Relaxed);
        self.resident.clock.fetch_add(1, Ordering::Relaxed);
    }

    /// Empties `slot` (this entry's `state.loaded`): read again if anything asks for it.
    pub(crate) fn release(&self, slot: &mut Option<Loaded>) {
        if let Some(old) = slot.take() {
            self.resident.total.fetch_sub(old.bytes, Ordering::Relaxed);
            if self.counted.swap(false, Ordering::Relaxed) {
                self.resident.used.fetch_sub(old.bytes, Ordering::Relaxed);
            }
        }
        self.held.store(0, Ordering::Relaxed);
        let _gate = self.resident.gate.lock().expect("gate lock");
        self.resident.room.notify_all();
    }

    /// Notes a use, for the least recently used to go first; its loaded cassette (now or once
    /// loaded) counts as used.
    fn touch(&self) {
        // Only read here, and written only when it moved: replay on both cores then shares
        // the clock's cache line instead of passing it back and forth at every request.
        let now = self.resident.clock.load(Ordering::Relaxed);
        if self.last.load(Ordering::Relaxed) != now {
            self.last.store(now, Ordering::Relaxed);
        }
    }

    /// Counts the loaded cassette as used, once.
    fn count_used(&self) {
        if self.counted.load(Ordering::Relaxed) {
            return;
        }
        let held = self.held.load(Ordering::Relaxed);
        if held > 0 && !self.counted.swap(true, Ordering::Relaxed) {
            self.resident.used.fetch_add(held, Ordering::Relaxed);
        }
    }

    pub(crate) fn read(&self) -> Result<Cassette, Error> {
        // Read only inside the cassette dir, as writes are: a folder that links elsewhere is
        // refused, not followed.
        if self.folder().exists() {
            confined(&self.root, self.folder())?;
        }
        let text = match std::fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Cassette::new(&self.test, &self.provider));
            }
            Err(e) => return Err(Error::io(&self.path, e)),
        };
        self.check(Cassette::parse(&self.path, &text)?)
    }

    /// The cassette read from this entry's file, once it is known to be this test's and
    /// whole, with its blobs.
    pub(crate) fn check(&self, mut cassette: Cassette) -> Result<Cassette, Error> {
        let recorded_for = TestId::new(cassette.test.as_str());
        if cassette.test != self.test.as_str()
            && Slug::legacy_from_test_id(&recorded_for) == self.slug
        {
            return Err(Error::OldRuleFolder {
                path: self.path.clone(),
                recorded_for: cassette.test.to_string(),
                test: self.test.to_string(),
            });
        }
        if cassette.test != self.test.as_str() && Slug::from_test_id(&recorded_for) != self.slug {
            return Err(Error::MovedByHand {
                path: self.path.clone(),
                command: mv_command(&recorded_for, &self.test),
                recorded_for: cassette.test.to_string(),
                test: self.test.to_string(),
            });
        }
        if cassette.test != self.test.as_str() {
            return Err(Error::SlugCollision {
                slug: self.slug.to_string(),
                first: cassette.test.to_string(),
                second: self.test.to_string(),
            });
        }
        if let Some(&index) = cassette.key_mismatches().first() {
            return Err(Error::KeyMismatch {
                path: self.path.clone(),
                index,
            });
        }
        if let Some(&index) = cassette.seal_mismatches().first() {
            return Err(Error::SealMismatch {
                path: self.path.clone(),
                index,
            });
        }
        cassette.load_blobs(self.folder())?;
        Ok(cassette)
    }

    pub(crate) fn folder(&self) -> &Path {
        self.path.parent().expect("cassette paths have a folder")
    }
}
