//! The cassette store: loads a test's cassette on its first request and keeps it, with every
//! response prepared as bytes, so replay does no disk I/O after that. Writes merge with what is
//! on disk under an exclusive lock and land by rename, so two recording runs never lose or tear
//! each other's interactions.

use crate::entry::{Entry, Flights, Loaded, Resident, TestShared, Used, MAX_ACCOUNTED};
use crate::format::RecordingId;
use crate::format::{ordinals, Cassette};
use crate::fs::{confined, lock_folder, remove_if_empty, DEFAULT_LOCK_TIMEOUT};
use crate::id::{ProviderName, Slug, TestId};
use crate::key::Key;
use crate::maintenance::{
    count_changes, is_dir, json_files, read_cassette, remove_unreferenced_blobs, Sealed,
    TestChanges,
};
use crate::secrets::Guard;
use crate::settle::{settle_file, still_holds, Keep, Put};
use crate::spool::Spool;
use crate::Error;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

/// All cassettes of one cassette directory, loaded lazily.
pub struct Store {
    dir: PathBuf,
    lock_timeout: Duration,
    /// A test's entries, one per provider it called: a handful, so a short list.
    entries: RwLock<HashMap<TestId, Vec<Arc<Entry>>>>,
    slugs: Mutex<HashMap<Slug, TestId>>,
    /// Test ids refused their folder, as (folder, its test, the refused one): bounded.
    collisions: Mutex<Vec<(String, TestId, TestId)>>,
    /// Each folder's cassette files as [`Store::preload`] listed them: the end of a replay
    /// run reports unused recordings from these rather than listing every folder again.
    listed: Mutex<HashMap<String, Vec<PathBuf>>>,
    /// Every exchange under way, which a test's end and the run's end wait for.
    flights: Arc<Flights>,
    /// Where recordings go first; none for a store that only replays.
    spool: Option<Arc<Spool>>,
    /// What each test's end wrote of this run's recordings, file by file: the run's end checks
    /// that another run has not settled its own over them since.
    written: Mutex<Vec<(TestId, PathBuf, Sealed)>>,
    /// What no recording may hold, and the answers' secret fields to redact.
    guard: Arc<Guard>,
    /// The loaded cassettes' bytes against the budget.
    resident: Arc<Resident>,
    /// Set when the run no longer needs cassettes read ahead.
    preload_stopped: std::sync::atomic::AtomicBool,
}

/// How many slug collisions a run keeps to report.
const MAX_COLLISIONS: usize = 1_000;

/// How many bytes of loaded cassettes a store keeps by default: a suite of any size replays
/// in about this much (README, "Performance").
pub const DEFAULT_BUDGET: usize = 64 << 20;

/// A recording that no request of this run replayed.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Unused {
    /// The test.
    pub test: TestId,
    /// The provider.
    pub provider: ProviderName,
    #[serde(with = "crate::lossy_path")]
    /// The cassette file.
    pub cassette: PathBuf,
    /// The request's key.
    pub key: Key,
    /// Which recording of its key: 0 for the first.
    pub ordinal: usize,
    /// The start of the recorded answer, to recognise it by.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
}

impl Store {
    /// A store of the cassettes under `dir`; nothing is read until asked for.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Store {
            dir: dir.into(),
            lock_timeout: DEFAULT_LOCK_TIMEOUT,
            entries: RwLock::default(),
            slugs: Mutex::default(),
            collisions: Mutex::default(),
            listed: Mutex::default(),
            flights: Arc::default(),
            spool: None,
            written: Mutex::default(),
            guard: Arc::default(),
            resident: Arc::new(Resident::new(DEFAULT_BUDGET)),
            preload_stopped: Default::default(),
        }
    }

    /// Keeps loaded cassettes within `bytes` (their answers and parsed requests): past it,
    /// those used least recently are unloaded, and read again if asked for.
    pub fn with_budget(mut self, bytes: usize) -> Self {
        self.resident = Arc::new(Resident::new(bytes));
        self
    }

    /// Bytes the loaded cassettes hold now.
    pub fn resident_bytes(&self) -> usize {
        self.resident
            .total
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Redacts the answers of what it records and refuses to write secrets as `guard` says.
    pub fn with_guard(mut self, guard: Guard) -> Self {
        self.guard = Arc::new(guard);
        self
    }

    /// Keeps every recording in `spool` the moment it is made; cassettes are written when
    /// each test ends.
    pub fn with_spool(mut self, spool: Spool) -> Self {
        self.spool = Some(Arc::new(spool));
        self
    }

    /// The spool recordings go to first, if any.
    pub fn spool(&self) -> Option<&Spool> {
        self.spool.as_deref()
    }

    /// How long a write waits for a folder another process holds, before it fails naming it.
    pub fn with_lock_timeout(mut self, timeout: Duration) -> Self {
        self.lock_timeout = timeout;
        self
    }

    /// The entry of a test and provider. Two test ids that meet at one slug are an error.
    pub fn entry(&self, test: &TestId, provider: &ProviderName) -> Result<Arc<Entry>, Error> {
        if self.resident.pressed() {
            self.unload_least_used();
        }
        // The hot path: a lookup by borrowed id, no allocation.
        if let Some(e) = self.find(test.as_str(), provider) {
            return Ok(e);
        }
        let slug = Slug::from_test_id(test);
        {
            let mut slugs = self.slugs.lock().expect("store lock");
            let owner = slugs.entry(slug.clone()).or_insert_with(|| test.clone());
            if owner != test {
                let met = (slug.to_string(), owner.clone(), test.clone());
                let mut collisions = self.collisions.lock().expect("store lock");
                if collisions.len() < MAX_COLLISIONS && !collisions.contains(&met) {
                    collisions.push(met);
                }
                return Err(Error::SlugCollision {
                    slug: slug.to_string(),
                    first: owner.to_string(),
                    second: test.to_string(),
                });
            }
        }
        let path = self
            .dir
            .join(slug.as_str())
            .join(format!("{}.json", provider.as_str()));
        let mut entries = self.entries.write().expect("store lock");
        let list = entries.entry(test.clone()).or_default();
        // Another request of the same test may have added it since the read above.
        if let Some(e) = list.iter().find(|e| &e.provider == provider) {
            return Ok(e.clone());
        }
        // One count of exchanges per test, whichever provider they go to.
        let shared = match list.first() {
            Some(e) => e.shared.clone(),
            None => Arc::new(TestShared {
                flights: self.flights.clone(),
                ..TestShared::default()
            }),
        };
        let entry = Arc::new(Entry {
            shared,
            spool: self.spool.clone(),
            test: test.clone(),
            slug,
            provider: provider.clone(),
            path,
            root: self.dir.clone(),
            lock_timeout: self.lock_timeout,
            guard: self.guard.clone(),
            writing: Mutex::default(),
            state: Mutex::default(),
            resident: self.resident.clone(),
            held: Default::default(),
            last: Default::default(),
            counted: Default::default(),
            catalog: Mutex::default(),
        });
        list.push(entry.clone());
        Ok(entry)
    }

    /// Unloads used cassettes, least recently used first, until those loaded hold half the
    /// budget; past the budget still, the cassettes preloaded for tests yet to run, those of
    /// the furthest first. An entry busy with a request is passed over (its answer, shared,
    /// outlives the unloading anyway).
    fn unload_least_used(&self) {
        use std::sync::atomic::Ordering;
        let mut loaded: Vec<(bool, u64, Arc<Entry>)> = {
            let entries = self.entries.read().expect("store lock");
            entries
                .values()
                .flatten()
                .filter(|e| e.held.load(Ordering::Relaxed) > 0)
                .map(|e| {
                    let used = e.counted.load(Ordering::Relaxed);
                    let last = e.last.load(Ordering::Relaxed);
                    (!used, if used { last } else { u64::MAX - last }, e.clone())
                })
                .collect()
        };
        loaded.sort_unstable_by_key(|(unused, last, _)| (*unused, *last));
        let budget = self.resident.budget;
        for (unused, _, entry) in loaded {
            let total = self.resident.total.load(Ordering::Relaxed);
            if total <= budget / 2 || (unused && total <= budget / 4 * 3) {
                break;
            }
            if let Ok(mut state) = entry.state.try_lock() {
                entry.release(&mut state.loaded);
            }
        }
    }

    /// Lets go of a test's loaded cassettes: it said it is over. What the report needs (which
    /// recordings it used) stays, and a later call (a retry) reads them again.
    pub fn release_test(&self, test: &TestId) {
        let entries = self.entries.read().expect("store lock");
        for entry in entries.get(test.as_str()).into_iter().flatten() {
            // An entry busy with a request keeps its cassette; the budget lets it go later.
            if let Ok(mut state) = entry.state.try_lock() {
                entry.release(&mut state.loaded);
            }
        }
    }

    /// Ends a [`Store::preload`] that waits for room: the run is over.
    pub fn stop_preload(&self) {
        self.preload_stopped
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let _gate = self.resident.gate.lock().expect("gate lock");
        self.resident.room.notify_all();
    }

    fn find(&self, test: &str, provider: &ProviderName) -> Option<Arc<Entry>> {
        let entries = self.entries.read().expect("store lock");
        entries
            .get(test)?
            .iter()
            .find(|e| &e.provider == provider)
            .cloned()
    }

    /// Starts every cursor of a test afresh, e.g. for a retried attempt, whose recordings are
    /// then the ones a trim keeps.
    pub fn reset_test(&self, test: &TestId) {
        let entries = self.entries.read().expect("store lock");
        for entry in entries.get(test.as_str()).into_iter().flatten() {
            let mut state = entry.state.lock().expect("entry lock");
            state.cursors.clear();
            state.run.recorded.clear();
            state.run.unsaved = 0;
            state.run.overflowed = false;
            state.run.served.clear();
        }
        if let Some(e) = entries.get(test.as_str()).and_then(|l| l.first()) {
            e.shared
                .steps
                .store(0, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Waits up to `timeout` for every exchange of `test` under way to end; whether they did.
    pub fn wait_for_test(&self, test: &TestId, timeout: Duration) -> bool {
        let shared = {
            let entries = self.entries.read().expect("store lock");
            match entries.get(test.as_str()).and_then(|l| l.first()) {
                Some(e) => e.shared.clone(),
                None => return true,
            }
        };
        self.flights.wait(timeout, || {
            shared.in_flight.load(std::sync::atomic::Ordering::SeqCst) == 0
        })
    }

    /// Waits up to `timeout` for every exchange under way to end; whether they did.
    pub fn wait_for_all(&self, timeout: Duration) -> bool {
        self.flights.wait(timeout, || {
            // Summed here, not counted at each exchange: both cores would share that count.
            self.entries()
                .iter()
                .all(|e| e.shared.in_flight.load(std::sync::atomic::Ordering::SeqCst) == 0)
        })
    }

    /// Ends a test's part in this run: its recordings reach its cassettes, one write per
    /// file, and what changed is said. With `trim` (a test that passed under `--record`), each
    /// of its cassettes ends holding exactly what its last attempt recorded and what it was
    /// served through a fault; a provider it no longer called loses its file. Without, its
    /// recordings are added and nothing is removed. A test that made no call at all keeps
    /// everything (a test that returned early, say, for want of a key); so does one with a
    /// request that went upstream and was not saved: its old recordings may be all it has for
    /// that call. Call it once the test's exchanges ended ([`Store::wait_for_test`]).
    pub fn finish_test(&self, test: &TestId, trim: bool) -> Result<TestChanges, Error> {
        let folder = self.dir.join(Slug::from_test_id(test).as_str());
        let mut changes = TestChanges {
            test: test.clone(),
            added: 0,
            replaced: 0,
            removed: 0,
            kept: None,
            superseded: None,
        };
        let entries: Vec<Arc<Entry>> = {
            let all = self.entries.read().expect("store lock");
            all.get(test.as_str()).cloned().unwrap_or_default()
        };
        let (asked, mut trim) = (trim, trim);
        let called = entries
            .iter()
            .any(|e| e.state.lock().expect("entry lock").run.called());
        if asked && !called {
            trim = false;
        }
        for entry in entries.iter().filter(|_| asked) {
            let state = entry.state.lock().expect("entry lock");
            if state.run.unsaved > 0 {
                changes.kept = Some(format!(
                    "{} to {} went upstream and {} not saved",
                    if state.run.unsaved == 1 {
                        "a request"
                    } else {
                        "requests"
                    },
                    entry.provider,
                    if state.run.unsaved == 1 {
                        "was"
                    } else {
                        "were"
                    },
                ));
                trim = false;
            } else if state.run.overflowed {
                changes.kept = Some(format!(
                    "it recorded more than {MAX_ACCOUNTED} calls to {}",
                    entry.provider
                ));
                trim = false;
            }
        }
        // In the order the test made its calls (a stream's recording may be saved after the
        // call that followed it), which is the order its cassettes keep.
        let pending: Vec<(Arc<Entry>, Vec<crate::entry::Pending>)> = entries
            .iter()
            .map(|e| {
                let mut pending = e.pending();
                pending.sort_by_key(|(_, x)| x.step.unwrap_or(u64::MAX));
                (e.clone(), pending)
            })
            .collect();
        // Nothing recorded and nothing to trim: nothing changed, and no file need be read.
        if !trim && pending.iter().all(|(_, p)| p.is_empty()) {
            return Ok(changes);
        }
        if let Some(spool) = &self.spool {
            spool.sync()?;
        }
        let mut files = json_files(&folder)?;
        for entry in &entries {
            if !files.contains(&entry.path) {
                files.push(entry.path.clone());
            }
        }
        for path in files {
            let stem = path.file_stem().unwrap_or_default().to_string_lossy();
            let Some(provider) = ProviderName::new(&stem) else {
                continue;
            };
            let found = pending.iter().find(|(e, _)| e.provider == provider);
            let (kept, served): (Vec<RecordingId>, Vec<RecordingId>) = match found {
                Some((e, _)) if trim => {
                    let state = e.state.lock().expect("entry lock");
                    (state.run.recorded.clone(), state.run.served.clone())
                }
                _ => Default::default(),
            };
            let keep = trim.then_some(Keep {
                recorded: &kept,
                served: &served,
            });
            let recorded: &[(usize, crate::Interaction)] =
                found.map(|(_, p)| p.as_slice()).unwrap_or_default();
            if recorded.is_empty() && keep.is_none() {
                continue;
            }
            let settled = settle_file(
                &path,
                &self.dir,
                test,
                self.lock_timeout,
                recorded,
                keep,
                Put::Replace,
            )?;
            if let Some((e, taken)) = found {
                let mut state = e.state.lock().expect("entry lock");
                // Recordings made since they were taken wait for the next end.
                let done = taken.len().min(state.run.pending.len());
                state.run.pending.drain(..done);
                state.run.pending_bytes = 0;
                // Read afresh if anything asks for it again.
                e.release(&mut state.loaded);
            }
            count_changes(&settled.before, &settled.after, &mut changes);
            self.note_written(test, &path, settled);
        }
        if trim && folder.is_dir() {
            confined(&self.dir, &folder)?;
            // Under the folder's lock: another run writes a blob before the cassette that
            // refers to it, and must not find its folder gone between the two.
            let lock = lock_folder(&folder, self.lock_timeout)?;
            remove_unreferenced_blobs(&folder)?;
            // A test that made no calls any more leaves no empty folder behind.
            remove_if_empty(&folder, lock);
        }
        if let Some(spool) = &self.spool {
            spool.settled(test)?;
        }
        Ok(changes)
    }

    /// Notes what this end of `test` left of the run's recordings in the file at `path`: a
    /// later end of the same test in this run (a retry) may have replaced an earlier one's,
    /// which is no other run superseding them.
    fn note_written(&self, test: &TestId, path: &Path, settled: crate::settle::Settled) {
        let mut written = self.written.lock().expect("store lock");
        let after: std::collections::HashSet<&(RecordingId, Option<String>)> =
            settled.after.iter().collect();
        match written
            .iter_mut()
            .find(|(t, p, _)| t == test && p.as_path() == path)
        {
            Some((_, _, ours)) => {
                ours.retain(|x| after.contains(x));
                for x in settled.ours {
                    if !ours.contains(&x) {
                        ours.push(x);
                    }
                }
            }
            None if !settled.ours.is_empty() => {
                written.push((test.clone(), path.to_path_buf(), settled.ours))
            }
            None => {}
        }
    }

    /// Tests whose recordings of this run another run has since settled its own over, with
    /// the file: the recordings this run made are no longer what the file holds.
    pub fn superseded(&self) -> Result<Vec<(TestId, PathBuf)>, Error> {
        let written = self.written.lock().expect("store lock");
        let mut out = Vec::new();
        for (test, path, ours) in written.iter() {
            if !still_holds(path, ours)?
                && !out
                    .iter()
                    .any(|(t, p): &(TestId, PathBuf)| t == test && p == path)
            {
                out.push((test.clone(), path.clone()));
            }
        }
        Ok(out)
    }

    /// Whether every recording of this run reached its cassettes.
    pub fn all_settled(&self) -> bool {
        self.entries()
            .iter()
            .all(|e| e.state.lock().expect("entry lock").run.pending.is_empty())
    }

    /// Test ids refused their folder this run: (folder, the test that had it, the refused one).
    pub fn collisions(&self) -> Vec<(String, TestId, TestId)> {
        self.collisions.lock().expect("store lock").clone()
    }

    /// Every recording in `test`'s folder, for every provider, that this run did not replay:
    /// also those of providers the test no longer calls.
    pub fn unused_in(&self, test: &TestId) -> Result<Vec<Unused>, Error> {
        let slug = Slug::from_test_id(test);
        // A folder another test of this run holds is that test's: what it used is not this
        // one's to judge (the collision is reported as such).
        let owner = self.slugs.lock().expect("store lock").get(&slug).cloned();
        if owner.is_some_and(|owner| &owner != test) {
            return Ok(Vec::new());
        }
        let preloaded = self
            .listed
            .lock()
            .expect("store lock")
            .get(slug.as_str())
            .cloned();
        let files = match preloaded {
            Some(files) => files,
            None => json_files(&self.dir.join(slug.as_str()))?,
        };
        let mut out = Vec::new();
        for path in files {
            let stem = path.file_stem().unwrap_or_default().to_string_lossy();
            // A file no provider is named for is no cassette of ours: never reported, so
            // never pruned.
            let Some(provider) = ProviderName::new(&stem) else {
                continue;
            };
            let entry = self.find(test.as_str(), &provider);
            let mut note = |cassette: &Cassette, used: &Used| {
                let ords = ordinals(&cassette.interactions);
                for (position, i) in cassette.interactions.iter().enumerate() {
                    if !used.contains(&i.key, ords[position]) {
                        out.push(Unused {
                            test: test.clone(),
                            provider: provider.clone(),
                            cassette: path.clone(),
                            key: i.key.clone(),
                            ordinal: ords[position],
                            // A tool call's answer has no text: it reads as the call.
                            answer: i
                                .summary
                                .as_ref()
                                .map(|s| s.answer_text().chars().take(80).collect::<String>())
                                .filter(|a| !a.is_empty()),
                        });
                    }
                }
            };
            match &entry {
                Some(e) => {
                    let mut state = e.state.lock().expect("entry lock");
                    let state = &mut *state;
                    // Unloaded since, and every recording used: nothing to read again.
                    let catalog = e.catalog.lock().expect("catalog lock").clone();
                    let all_used = catalog.is_some_and(|ids| {
                        ids.iter()
                            .all(|id| state.used.contains(&id.key, id.ordinal))
                    });
                    if state.loaded.is_none() && all_used {
                        continue;
                    }
                    note(
                        &e.ensure_loaded(&mut state.loaded, &state.run.pending)?
                            .cassette,
                        &state.used,
                    );
                }
                None => note(&read_cassette(&path)?, &Used::default()),
            }
        }
        Ok(out)
    }

    /// Loads every cassette under the directory whose folder is its test's, as a whole-suite
    /// replay's first requests would, but before them: run beside the build, it takes the
    /// parsing off the tests' way. A file that fails here is left to the request that needs
    /// it, which says what is wrong. For a run that writes no cassette: each folder's files
    /// are kept as listed here, and [`Store::unused_in`] reports from them.
    pub fn preload(&self) {
        for folder in self.folders().unwrap_or_default() {
            // Ahead of the tests, within the budget: it waits while the cassettes loaded fill
            // three quarters of it, until the tests that ran let theirs go.
            if !self.room_to_preload() {
                return;
            }
            let dir = self.dir.join(&folder);
            if confined(&self.dir, &dir).is_err() {
                continue;
            }
            let Ok(files) = json_files(&dir) else {
                continue;
            };
            for path in &files {
                let stem = path.file_stem().unwrap_or_default().to_string_lossy();
                let Some(provider) = ProviderName::new(&stem) else {
                    continue;
                };
                let Ok(text) = std::fs::read_to_string(path) else {
                    continue;
                };
                let Ok(cassette) = Cassette::parse(path, &text) else {
                    continue;
                };
                let test = TestId::new(cassette.test.as_str());
                if Slug::from_test_id(&test).as_str() != folder {
                    continue;
                }
                let Ok(entry) = self.entry(&test, &provider) else {
                    continue;
                };
                // Checked before the lock is taken: a request for this entry never waits on
                // this thread, which runs at a low priority.
                let Ok(cassette) = entry.check(cassette) else {
                    continue;
                };
                let loaded = Loaded::new(cassette);
                let mut state = entry.state.lock().expect("entry lock");
                if state.loaded.is_none() {
                    entry.hold(&mut state.loaded, loaded);
                }
            }
            self.listed
                .lock()
                .expect("store lock")
                .insert(folder, files);
        }
    }

    /// Waits until the loaded cassettes leave room for more; false once the run stopped it.
    fn room_to_preload(&self) -> bool {
        use std::sync::atomic::Ordering;
        let mut gate = self.resident.gate.lock().expect("gate lock");
        loop {
            if self.preload_stopped.load(Ordering::Relaxed) {
                return false;
            }
            if self.resident.total.load(Ordering::Relaxed) < self.resident.budget / 4 * 3 {
                return true;
            }
            gate = self
                .resident
                .room
                .wait_timeout(gate, Duration::from_millis(50))
                .expect("gate lock")
                .0;
        }
    }

    /// How many interactions the cassette file at `path` (`<dir>/<folder>/<provider>.json`)
    /// held when this store read it whole and found it sound; `None` when it has not.
    pub fn interactions_read(&self, path: &Path) -> Option<usize> {
        let provider = ProviderName::new(path.file_stem()?.to_str()?)?;
        let folder = path.parent()?.file_name()?.to_str()?;
        let test = self.slugs.lock().expect("store lock").get(folder)?.clone();
        let entry = self.find(test.as_str(), &provider)?;
        let state = entry.state.lock().expect("entry lock");
        Some(state.loaded.as_ref()?.cassette.interactions.len())
    }

    /// The cassette folders present on disk (slugs), sorted.
    pub fn folders(&self) -> Result<Vec<String>, Error> {
        let read = match std::fs::read_dir(&self.dir) {
            Ok(read) => read,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::io(&self.dir, e)),
        };
        let mut out: Vec<String> = read
            .filter_map(Result::ok)
            .filter(is_dir)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        out.sort();
        Ok(out)
    }

    /// Every entry touched in this run.
    pub fn entries(&self) -> Vec<Arc<Entry>> {
        self.entries
            .read()
            .expect("store lock")
            .values()
            .flatten()
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests;
