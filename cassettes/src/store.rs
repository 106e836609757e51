//! The cassette store: loads a test's cassette on its first request and keeps it, with every
//! response prepared as bytes, so replay does no disk I/O after that. Writes merge with what is
//! on disk under an exclusive lock and land by rename, so two recording runs never lose or tear
//! each other's interactions.

use crate::body::BLOB_DIR;
use crate::format::{
    ordinals, recording_ids, Cassette, Interaction, Prepared, RecordingId, Summary,
};
use crate::id::{ProviderName, Slug, TestId};
use crate::key::{differing_fields, Key, RecordedRequest};
use crate::secrets::Guard;
use crate::Error;
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

/// How long a write waits for another process to release a cassette folder's lock by default.
pub const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(30);

/// All cassettes of one cassette directory, loaded lazily.
pub struct Store {
    dir: PathBuf,
    lock_timeout: Duration,
    /// A test's entries, one per provider it called: a handful, so a short list.
    entries: RwLock<HashMap<TestId, Vec<Arc<Entry>>>>,
    slugs: Mutex<HashMap<Slug, TestId>>,
    /// Each folder's cassette files as [`Store::preload`] listed them: the end of a replay
    /// run reports unused recordings from these rather than listing every folder again.
    listed: Mutex<HashMap<String, Vec<PathBuf>>>,
    /// When this store was made: a trim leaves alone a file another process wrote since.
    opened: SystemTime,
    /// What no recording may hold, and the answers' secret fields to redact.
    guard: Arc<Guard>,
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
    root: PathBuf,
    lock_timeout: Duration,
    guard: Arc<Guard>,
    /// Held (on a blocking thread) for the whole of a write, so this process writes the file
    /// one recording at a time; `state` is only ever held briefly, never across a file lock, so
    /// a lock another process holds delays this test's recordings alone.
    writing: Mutex<()>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    loaded: Option<Loaded>,
    cursors: HashMap<Key, usize>,
    /// The recordings this run replayed, recorded or served through a fault, by key and
    /// ordinal: unlike positions, these survive a trim and another process's appends.
    used: Used,
    run: RunAccount,
}

/// Recordings by key and which recording of the key: a set of [`RecordingId`] that takes a
/// borrowed key, so replay's hot path allocates only for a key's first use.
#[derive(Default)]
struct Used(HashMap<Key, Vec<usize>>);

impl Used {
    fn insert(&mut self, key: &Key, ordinal: usize) {
        match self.0.get_mut(key) {
            Some(ordinals) if ordinals.contains(&ordinal) => {}
            Some(ordinals) => ordinals.push(ordinal),
            None => {
                self.0.insert(key.clone(), vec![ordinal]);
            }
        }
    }

    fn contains(&self, key: &Key, ordinal: usize) -> bool {
        self.0.get(key).is_some_and(|o| o.contains(&ordinal))
    }
}

/// Recordings an attempt may name for its trim; past this, the test keeps everything (a
/// long-lived daemon recording one test without end must not grow without bound).
const MAX_ACCOUNTED: usize = 100_000;

/// What this run did to one cassette, for the report and for a re-recorded test's trim.
#[derive(Default)]
struct RunAccount {
    /// Each recording this attempt wrote or found unchanged, in the order they were saved.
    recorded: Vec<RecordingId>,
    /// Requests of this attempt that went upstream and were not saved (an upstream error, a
    /// refused key, a broken stream): the test's old recordings may be all it has for them.
    unsaved: usize,
    /// More recordings than `MAX_ACCOUNTED`: the attempt's list is incomplete.
    overflowed: bool,
    /// Recordings this attempt was served through a fault (a cut or broken answer): used,
    /// so a trim keeps them though nothing recorded them again.
    served: Vec<RecordingId>,
    /// The recordings the file held, read under its lock, when this run first wrote to it,
    /// and their seals: a trim may remove only these, never what another process added since.
    before: Option<Vec<(RecordingId, Option<String>)>>,
}

impl RunAccount {
    /// Whether the attempt made any call through this entry.
    fn called(&self) -> bool {
        !self.recorded.is_empty() || self.unsaved > 0 || !self.served.is_empty()
    }
}

/// What a run changed in one test's cassettes, against what they held before it.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TestChanges {
    /// The test.
    pub test: TestId,
    /// Recordings that are new.
    pub added: usize,
    /// Recordings whose answer changed.
    pub replaced: usize,
    /// Recordings gone: the test no longer made those calls.
    pub removed: usize,
    /// Why a re-recorded test that passed kept recordings it did not make in this run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept: Option<String>,
}

impl TestChanges {
    /// True when the run changed nothing and has nothing to say.
    pub fn is_empty(&self) -> bool {
        self.added == 0 && self.replaced == 0 && self.removed == 0 && self.kept.is_none()
    }
}

/// The id and seal of each interaction.
fn sealed_ids(interactions: &[Interaction]) -> Vec<(RecordingId, Option<String>)> {
    recording_ids(interactions)
        .into_iter()
        .zip(interactions.iter().map(|i| i.seal.clone()))
        .collect()
}

struct Loaded {
    cassette: Cassette,
    index: HashMap<Key, Vec<usize>>,
    /// Each position's ordinal among the recordings of its key.
    ordinals: Vec<usize>,
    prepared: Vec<Arc<Prepared>>,
}

impl Loaded {
    /// Keeps each answer once, as prepared bytes: the cassette kept beside them holds the
    /// requests (their large bodies by hash only) and summaries, which is all a miss or the
    /// report reads of it.
    fn new(mut cassette: Cassette) -> Self {
        let mut index: HashMap<Key, Vec<usize>> = HashMap::new();
        for (i, interaction) in cassette.interactions.iter().enumerate() {
            index.entry(interaction.key.clone()).or_default().push(i);
        }
        let ordinals = ordinals(&cassette.interactions);
        let prepared = cassette
            .interactions
            .iter_mut()
            .map(|i| {
                for blob in i.request.body.blobs_mut() {
                    blob.bytes = None;
                }
                Arc::new(Prepared::take(i))
            })
            .collect();
        Loaded {
            cassette,
            index,
            ordinals,
            prepared,
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

/// What a recording did to the cassette file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordOutcome {
    /// A new recording, at the end.
    Appended,
    /// A changed answer, in place.
    Replaced,
    /// The stored entry differs only in volatile fields, or not at all: the file is untouched.
    Unchanged,
}

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

/// The closest recording to a request that found none.
#[derive(Clone, Debug)]
pub struct Closest {
    /// Its position in the cassette, from 0.
    pub index: usize,
    /// The JSON pointers of the fields that differ.
    pub differing: Vec<String>,
    /// For each differing field, the recorded value and the new one (`None`: absent).
    pub values: Vec<(Option<serde_json::Value>, Option<serde_json::Value>)>,
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

impl Store {
    /// A store of the cassettes under `dir`; nothing is read until asked for.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Store {
            dir: dir.into(),
            lock_timeout: DEFAULT_LOCK_TIMEOUT,
            entries: RwLock::default(),
            slugs: Mutex::default(),
            listed: Mutex::default(),
            opened: SystemTime::now(),
            guard: Arc::default(),
        }
    }

    /// Redacts the answers of what it records and refuses to write secrets as `guard` says.
    pub fn with_guard(mut self, guard: Guard) -> Self {
        self.guard = Arc::new(guard);
        self
    }

    /// How long a write waits for a folder another process holds, before it fails naming it.
    pub fn with_lock_timeout(mut self, timeout: Duration) -> Self {
        self.lock_timeout = timeout;
        self
    }

    /// The entry of a test and provider. Two test ids that meet at one slug are an error.
    pub fn entry(&self, test: &TestId, provider: &ProviderName) -> Result<Arc<Entry>, Error> {
        // The hot path: a lookup by borrowed id, no allocation.
        if let Some(e) = self.find(test.as_str(), provider) {
            return Ok(e);
        }
        let slug = Slug::from_test_id(test);
        {
            let mut slugs = self.slugs.lock().expect("store lock");
            let owner = slugs.entry(slug.clone()).or_insert_with(|| test.clone());
            if owner != test {
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
        let entry = Arc::new(Entry {
            test: test.clone(),
            slug,
            provider: provider.clone(),
            path,
            root: self.dir.clone(),
            lock_timeout: self.lock_timeout,
            guard: self.guard.clone(),
            writing: Mutex::default(),
            state: Mutex::default(),
        });
        list.push(entry.clone());
        Ok(entry)
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
    }

    /// Ends a test's part in this run and says what changed in its cassettes. With `trim` (a
    /// test that passed under `--record`), each of its cassettes ends holding what its last
    /// attempt recorded, in that order, and what it was served through a fault; a provider it
    /// no longer called loses its file. A trim removes only what a file held before this run
    /// first wrote to it: whatever another process added since stays. A test that made no
    /// call at all keeps everything (a test that returned early, say, for want of a key);
    /// so does one with a request that went upstream and was not saved: its old recordings
    /// may be all it has for that call.
    pub fn finish_test(&self, test: &TestId, trim: bool) -> Result<TestChanges, Error> {
        let folder = self.dir.join(Slug::from_test_id(test).as_str());
        let mut changes = TestChanges {
            test: test.clone(),
            added: 0,
            replaced: 0,
            removed: 0,
            kept: None,
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
        // Nothing written and nothing to trim: nothing changed, and no file need be read.
        let wrote = entries
            .iter()
            .any(|e| e.state.lock().expect("entry lock").run.before.is_some());
        if !trim && !wrote {
            return Ok(changes);
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
            let entry = entries.iter().find(|e| e.provider == provider);
            let (before, keep) = match entry {
                Some(e) => {
                    let state = e.state.lock().expect("entry lock");
                    let keep = Keep {
                        recorded: state.run.recorded.clone(),
                        served: state.run.served.clone(),
                        before: state.run.before.clone(),
                        since: self.opened,
                    };
                    (state.run.before.clone(), keep)
                }
                None => (None, Keep::nothing_since(self.opened)),
            };
            let (now, after) = if trim {
                keep_exactly(&path, &self.dir, test, &keep)?
            } else {
                let now = read_if_exists(&path)?
                    .map(|c| sealed_ids(&c.interactions))
                    .unwrap_or_default();
                (now.clone(), now)
            };
            if let Some(e) = entry {
                // Read afresh if anything asks for it again.
                e.state.lock().expect("entry lock").loaded = None;
            }
            let before = before.unwrap_or(now);
            count_changes(&before, &after, &mut changes);
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
        Ok(changes)
    }

    /// Every recording in `test`'s folder, for every provider, that this run did not replay:
    /// also those of providers the test no longer calls.
    pub fn unused_in(&self, test: &TestId) -> Result<Vec<Unused>, Error> {
        let slug = Slug::from_test_id(test);
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
                            answer: i
                                .summary
                                .as_ref()
                                .map(|s| s.text.chars().take(80).collect()),
                        });
                    }
                }
            };
            match &entry {
                Some(e) => {
                    let mut state = e.state.lock().expect("entry lock");
                    let state = &mut *state;
                    note(&e.ensure_loaded(&mut state.loaded)?.cassette, &state.used);
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
                    state.loaded = Some(loaded);
                }
            }
            self.listed
                .lock()
                .expect("store lock")
                .insert(folder, files);
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
        let mut state = self.state.lock().expect("entry lock");
        let state = &mut *state;
        let loaded = self.ensure_loaded(&mut state.loaded)?;
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

    fn lookup(
        &self,
        key: &Key,
        repeat_last: bool,
        count_unrecorded: bool,
    ) -> Result<Lookup, Error> {
        let mut state = self.state.lock().expect("entry lock");
        let state = &mut *state;
        let loaded = self.ensure_loaded(&mut state.loaded)?;
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

    /// Counts a request of this attempt that went upstream and was not saved: the test then
    /// keeps its old recordings when the run ends (see [`Store::finish_test`]).
    pub fn note_unsaved(&self) {
        self.state.lock().expect("entry lock").run.unsaved += 1;
    }

    /// The recording of this test closest to `request`: fewest differing fields.
    pub fn closest(&self, request: &RecordedRequest) -> Option<Closest> {
        let state = self.state.lock().expect("entry lock");
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
            .map(|p| (recorded.pointer(p).cloned(), wanted.pointer(p).cloned()))
            .collect();
        Some(Closest {
            index,
            differing,
            values,
        })
    }

    /// Stores `interaction` as the `ordinal`-th recording of its key: replaces that entry in place
    /// when there is one, appends otherwise. Merges with the file on disk under its lock, so
    /// another run's interactions written meanwhile are kept.
    /// Blocks on the folder's file lock: call it off the async workers.
    pub fn record(
        &self,
        ordinal: usize,
        mut interaction: Interaction,
    ) -> Result<RecordOutcome, Error> {
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
        let _writing = self.writing.lock().expect("entry write lock");
        let first = self.state.lock().expect("entry lock").run.before.is_none();
        let key = interaction.key.clone();
        let mut outcome = RecordOutcome::Unchanged;
        let mut before = None;
        let merged = self.write_locked(|cassette| {
            // What the file holds now, under its lock, is what this run's trim may remove:
            // another run's recordings written after this point are not.
            if first {
                before = Some(sealed_ids(&cassette.interactions));
            }
            outcome = put(cassette, ordinal, interaction);
            outcome != RecordOutcome::Unchanged
        })?;
        let mut state = self.state.lock().expect("entry lock");
        if state.run.before.is_none() {
            state.run.before = before;
        }
        let account = &mut state.run;
        if account.recorded.len() < MAX_ACCOUNTED {
            account.recorded.push(RecordingId {
                key: key.clone(),
                ordinal,
            });
        } else {
            account.overflowed = true;
        }
        // What was just recorded was used by this run, wherever the merge put it.
        state.used.insert(&key, ordinal);
        state.loaded = Some(Loaded::new(merged));
        Ok(outcome)
    }

    fn ensure_loaded<'s>(&self, loaded: &'s mut Option<Loaded>) -> Result<&'s Loaded, Error> {
        if loaded.is_none() {
            *loaded = Some(Loaded::new(self.read()?));
        }
        Ok(loaded.as_ref().expect("just loaded"))
    }

    fn read(&self) -> Result<Cassette, Error> {
        // Read only inside the cassette dir, as writes are: a folder that links elsewhere is
        // refused, not followed.
        if self.folder().exists() {
            confined(&self.root, self.folder())?;
        }
        let text = match std::fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Cassette::new(self.test.as_str(), self.provider.as_str()));
            }
            Err(e) => return Err(Error::io(&self.path, e)),
        };
        self.check(Cassette::parse(&self.path, &text)?)
    }

    /// The cassette read from this entry's file, once it is known to be this test's and
    /// whole, with its blobs.
    fn check(&self, mut cassette: Cassette) -> Result<Cassette, Error> {
        let recorded_for = TestId::new(cassette.test.as_str());
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

    fn folder(&self) -> &Path {
        self.path.parent().expect("cassette paths have a folder")
    }

    fn write_locked(&self, change: impl FnOnce(&mut Cassette) -> bool) -> Result<Cassette, Error> {
        let dir = self.path.parent().expect("cassette paths have a folder");
        let _lock = lock_creating(dir, &self.root, self.lock_timeout)?;
        // Read under the lock: another run may have written since this one loaded the file.
        let mut cassette = self.read()?;
        if change(&mut cassette) {
            // Blobs first: a crash between the two leaves an unreferenced blob, never a
            // cassette that refers to a missing one.
            write_blobs(dir, &cassette, &self.root)?;
            write_atomic(&self.path, &cassette.to_bytes())?;
            remove_unreferenced_blobs(dir)?;
        }
        Ok(cassette)
    }
}

/// Writes a temporary file beside `path` and renames it over: a crash leaves the old file or
/// the new one, never half of either.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    let dir = path.parent().expect("cassette paths have a folder");
    let mut builder = tempfile::Builder::new();
    builder.prefix(".llmreplay-").suffix(".tmp");
    // A new file is readable as any file the user makes (0644 less the umask, README "Limits and hostile input"), not 0600; a
    // re-recorded one keeps the mode it had.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        builder.permissions(std::fs::Permissions::from_mode(0o644));
    }
    let mut tmp = builder.tempfile_in(dir).map_err(|e| Error::io(dir, e))?;
    if let Ok(existing) = std::fs::metadata(path) {
        tmp.as_file()
            .set_permissions(existing.permissions())
            .map_err(|e| Error::io(tmp.path(), e))?;
    }
    tmp.write_all(bytes)
        .and_then(|_| tmp.as_file().sync_all())
        .map_err(|e| Error::io(tmp.path(), e))?;
    tmp.persist(path).map_err(|e| Error::io(path, e.error))?;
    Ok(())
}

/// Reads a cassette, or `None` when there is no file.
fn read_if_exists(path: &Path) -> Result<Option<Cassette>, Error> {
    match read_cassette(path) {
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => Ok(None),
        other => other.map(Some),
    }
}

/// What a trim keeps of one cassette file.
struct Keep {
    /// What the test's last attempt recorded, in that order.
    recorded: Vec<RecordingId>,
    /// What it was served through a fault.
    served: Vec<RecordingId>,
    /// What the file held when this run first wrote to it; `None` when it never did.
    before: Option<Sealed>,
    /// When this run began: a file this run never wrote and that changed since is another
    /// process's to keep.
    since: SystemTime,
}

impl Keep {
    /// For a file the test no longer calls: it is removed, unless another process wrote it
    /// since `since`.
    fn nothing_since(since: SystemTime) -> Keep {
        Keep {
            recorded: Vec::new(),
            served: Vec::new(),
            before: None,
            since,
        }
    }
}

/// Keeps of the cassette at `path` what `keep` names: the recordings its test recorded, in
/// that order (the n-th recording of a key stays the n-th, so replay maps each request as
/// before), then those it was served through a fault, then whatever another process put there
/// after this run first wrote to it; under its folder's lock. Deletes the file when none is
/// left. A file of another test is left alone. Returns the recordings it held before and
/// after, with their seals.
type Sealed = Vec<(RecordingId, Option<String>)>;
fn keep_exactly(
    path: &Path,
    root: &Path,
    test: &TestId,
    keep: &Keep,
) -> Result<(Sealed, Sealed), Error> {
    let dir = path.parent().expect("cassette paths have a folder");
    if !dir.exists() {
        return Ok((Vec::new(), Vec::new()));
    }
    confined(root, dir)?;
    let _lock = lock_folder(dir, DEFAULT_LOCK_TIMEOUT)?;
    let Some(mut cassette) = read_if_exists(path)? else {
        return Ok((Vec::new(), Vec::new()));
    };
    let before = sealed_ids(&cassette.interactions);
    if cassette.test != test.as_str() {
        return Ok((before.clone(), before));
    }
    // A file this run never wrote, changed since it began: another run's work.
    if keep.before.is_none() && modified_since(path, keep.since) {
        return Ok((before.clone(), before));
    }
    let at: HashMap<&RecordingId, usize> = before
        .iter()
        .enumerate()
        .map(|(i, (id, _))| (id, i))
        .collect();
    let wanted: HashSet<&RecordingId> = keep.recorded.iter().collect();
    // Slots in the order saved; a key's k-th slot takes its k-th recording, so two calls with
    // one key that finished out of order keep their ordinals.
    let mut next: HashMap<&Key, usize> = HashMap::new();
    let mut positions = Vec::new();
    for id in &keep.recorded {
        let k = next.entry(&id.key).or_default();
        let slot = RecordingId {
            key: id.key.clone(),
            ordinal: *k,
        };
        *k += 1;
        if let Some(&p) = wanted.contains(&slot).then(|| at.get(&slot)).flatten() {
            positions.push(p);
        }
    }
    let mut taken: HashSet<usize> = positions.iter().copied().collect();
    for id in &keep.served {
        if let Some(&p) = at.get(id) {
            if taken.insert(p) {
                positions.push(p);
            }
        }
    }
    if let Some(held) = &keep.before {
        let held: HashSet<&(RecordingId, Option<String>)> = held.iter().collect();
        for (p, id) in before.iter().enumerate() {
            if !held.contains(id) && taken.insert(p) {
                positions.push(p);
            }
        }
    }
    let unchanged =
        positions.len() == before.len() && positions.iter().enumerate().all(|(i, p)| i == *p);
    if unchanged {
        return Ok((before.clone(), before));
    }
    let mut old: Vec<Option<Interaction>> = std::mem::take(&mut cassette.interactions)
        .into_iter()
        .map(Some)
        .collect();
    cassette.interactions = positions.iter().filter_map(|&p| old[p].take()).collect();
    let after = sealed_ids(&cassette.interactions);
    if cassette.interactions.is_empty() {
        std::fs::remove_file(path).map_err(|e| Error::io(path, e))?;
    } else {
        // Blobs stay where they are: the kept recordings refer to blobs already written.
        write_atomic(path, &cassette.to_bytes())?;
    }
    Ok((before, after))
}

/// Whether the file at `path` was written after `since`.
fn modified_since(path: &Path, since: SystemTime) -> bool {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .is_ok_and(|m| m > since)
}

/// Adds what changed between two lists of recordings to `changes`.
fn count_changes(before: &Sealed, after: &Sealed, changes: &mut TestChanges) {
    let was: HashMap<&RecordingId, &Option<String>> = before.iter().map(|(i, s)| (i, s)).collect();
    let now: HashSet<&RecordingId> = after.iter().map(|(i, _)| i).collect();
    for (id, seal) in after {
        match was.get(id) {
            None => changes.added += 1,
            Some(old) if *old != seal => changes.replaced += 1,
            Some(_) => {}
        }
    }
    changes.removed += before.iter().filter(|(id, _)| !now.contains(id)).count();
}

/// Rewrites one cassette under its folder's lock: `edit` changes its interactions (none when
/// there is no file yet, which is then made for `test` and `provider`); blobs the new ones
/// carry are written first, and blobs nothing refers to any more are removed. Fails with
/// [`Error::Stale`], changing nothing, when the file no longer holds what `expected` says
/// (ids and seals), e.g. a recording run wrote to it since it was read. A cassette left
/// empty is deleted, and its folder with it when nothing else is there.
pub fn rewrite_cassette(
    path: &Path,
    root: &Path,
    test: &str,
    provider: &str,
    expected: &[(RecordingId, Option<String>)],
    edit: impl FnOnce(&mut Vec<Interaction>),
) -> Result<(), Error> {
    let dir = path.parent().expect("cassette paths have a folder");
    let lock = lock_creating(dir, root, DEFAULT_LOCK_TIMEOUT)?;
    let mut cassette = read_if_exists(path)?.unwrap_or_else(|| Cassette::new(test, provider));
    if sealed_ids(&cassette.interactions) != expected {
        return Err(Error::Stale {
            path: path.to_path_buf(),
            what: "what was reviewed".into(),
        });
    }
    edit(&mut cassette.interactions);
    write_blobs(dir, &cassette, root)?;
    if cassette.interactions.is_empty() {
        if path.exists() {
            std::fs::remove_file(path).map_err(|e| Error::io(path, e))?;
        }
    } else {
        write_atomic(path, &cassette.to_bytes())?;
    }
    remove_unreferenced_blobs(dir)?;
    remove_if_empty(dir, lock);
    Ok(())
}

/// The ids and seals of a cassette's interactions, to tell later whether it changed.
pub fn sealed(cassette: Option<&Cassette>) -> Vec<(RecordingId, Option<String>)> {
    cassette.map_or_else(Vec::new, |c| sealed_ids(&c.interactions))
}

/// The command that moves a test's cassettes to another test, quoted for a shell.
pub fn mv_command(from: &TestId, to: &TestId) -> String {
    format!(
        "cargo llmreplay mv {} {}",
        crate::shell_quote(from.as_str()),
        crate::shell_quote(to.as_str())
    )
}

/// What `move_test` moved.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Moved {
    /// The folder it came from.
    pub from: PathBuf,
    /// The folder it is in now.
    pub to: PathBuf,
    /// Cassette files whose test it now names.
    pub files: usize,
    /// Recordings in them.
    pub recordings: usize,
}

/// Moves a test's cassettes to another test: its folder (blobs and all) renamed, and the test
/// named inside each cassette, under the folder's lock. Nothing is overwritten: a target
/// folder that already holds cassettes is refused. A folder already moved by hand (git mv),
/// whose cassettes still name `from`, is finished in place.
pub fn move_test(dir: &Path, from: &TestId, to: &TestId) -> Result<Moved, Error> {
    let refuse = |why: String| Error::CannotMove {
        from: from.to_string(),
        to: to.to_string(),
        why,
    };
    let old = dir.join(Slug::from_test_id(from).as_str());
    let new = dir.join(Slug::from_test_id(to).as_str());
    let names = |folder: &Path, test: &TestId| -> Result<bool, Error> {
        for file in json_files(folder)? {
            if read_cassette(&file).is_ok_and(|c| c.test == test.as_str()) {
                return Ok(true);
            }
        }
        Ok(false)
    };
    let in_place = old == new || (!old.exists() && names(&new, from)?);
    if !in_place {
        if !old.is_dir() || !names(&old, from)? {
            return Err(refuse(format!(
                "{} holds no cassette of {from:?}",
                old.display()
            )));
        }
        confined(dir, &old)?;
        if new.exists() {
            let left = std::fs::read_dir(&new)
                .map_err(|e| Error::io(&new, e))?
                .count();
            if left > 0 {
                return Err(refuse(format!(
                    "{} already exists and is not empty; move or delete what is there first (nothing was changed)",
                    new.display()
                )));
            }
            std::fs::remove_dir(&new).map_err(|e| Error::io(&new, e))?;
        }
        let _lock = lock_folder(&old, DEFAULT_LOCK_TIMEOUT)?;
        // One rename moves cassettes and blobs together; the lock's handle moves with them.
        std::fs::rename(&old, &new).map_err(|e| Error::io(&old, e))?;
    }
    confined(dir, &new)?;
    let _lock = lock_folder(&new, DEFAULT_LOCK_TIMEOUT)?;
    let (mut files, mut recordings) = (0, 0);
    for file in json_files(&new)? {
        let Ok(mut cassette) = read_cassette(&file) else {
            continue;
        };
        if cassette.test != from.as_str() {
            continue;
        }
        cassette.test = to.as_str().into();
        write_atomic(&file, &cassette.to_bytes())?;
        files += 1;
        recordings += cassette.interactions.len();
    }
    Ok(Moved {
        from: old,
        to: new,
        files,
        recordings,
    })
}

/// What `fix_cassette` changed in one interaction.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Fixed {
    /// Position in the file, from 0.
    pub index: usize,
    /// The stored key and the key of the stored request, when they differed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<(Key, Key)>,
    /// True when the summary was derived anew.
    pub summary: bool,
    /// True when the answer was sealed anew (edited on purpose, or written before seals).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub seal: bool,
}

/// Recomputes the keys and summaries of a cassette edited by hand, under its folder's lock, and
/// writes it when anything changed. A file that does not parse is an error and stays as it is.
pub fn fix_cassette(path: &Path) -> Result<Vec<Fixed>, Error> {
    let dir = path.parent().expect("cassette paths have a folder");
    let _lock = lock_folder(dir, DEFAULT_LOCK_TIMEOUT)?;
    let mut cassette = read_cassette_with_blobs(path)?;
    let mut fixed = Vec::new();
    for (index, x) in cassette.interactions.iter_mut().enumerate() {
        let key = Key::of(&x.request);
        let summary = Summary::of(&x.response);
        let seal = Some(crate::format::seal_of(&x.response));
        let key_changed = key != x.key;
        if key_changed || summary != x.summary || seal != x.seal {
            fixed.push(Fixed {
                index,
                key: key_changed.then(|| (x.key.clone(), key.clone())),
                summary: summary != x.summary,
                seal: seal != x.seal,
            });
            x.key = key;
            x.summary = summary;
            x.seal = seal;
        }
    }
    if !fixed.is_empty() {
        write_atomic(path, &cassette.to_bytes())?;
    }
    Ok(fixed)
}

/// Removes a temporary file a killed write left in a cassette folder (or its blobs), under
/// the folder's lock so that no write in progress loses its file.
pub fn remove_leftover_temp(path: &Path) -> Result<(), Error> {
    let parent = path.parent().expect("temp files have a folder");
    let folder = if parent.file_name().is_some_and(|n| n == BLOB_DIR) {
        parent.parent().expect("blob folders have a folder")
    } else {
        parent
    };
    let _lock = lock_folder(folder, DEFAULT_LOCK_TIMEOUT)?;
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io(path, e)),
        _ => Ok(()),
    }
}

/// Writes the blobs of `cassette` that are not yet in `folder/blobs/`.
fn write_blobs(folder: &Path, cassette: &Cassette, root: &Path) -> Result<(), Error> {
    for blob in cassette.blobs() {
        let Some(bytes) = &blob.bytes else { continue };
        let path = folder.join(BLOB_DIR).join(&blob.sha256);
        if path.exists() {
            continue;
        }
        let dir = path.parent().expect("blob paths have a folder");
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        confined(root, dir)?;
        write_atomic(&path, bytes)?;
    }
    Ok(())
}

/// Removes the blobs of a cassette folder that none of its cassettes refers to, and the blob
/// folder once empty; removes nothing when a cassette there does not parse. The caller holds the
/// folder's lock. Returns what it removed.
pub fn remove_unreferenced_blobs(folder: &Path) -> Result<Vec<PathBuf>, Error> {
    // A blob folder that is a link leads elsewhere: nothing there is ours to remove.
    let Ok(blob_dir) = crate::body::blob_dir(folder) else {
        return Ok(Vec::new());
    };
    let read = match std::fs::read_dir(&blob_dir) {
        Ok(read) => read,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(&blob_dir, e)),
    };
    let mut referenced = HashSet::new();
    for file in json_files(folder)? {
        let Ok(cassette) = read_cassette(&file) else {
            return Ok(Vec::new());
        };
        referenced.extend(cassette.blobs().into_iter().map(|b| b.sha256.clone()));
    }
    let mut removed = Vec::new();
    let mut left = 0;
    for entry in read.filter_map(Result::ok) {
        let name = entry.file_name().to_string_lossy().into_owned();
        // Only content-addressed regular files are ours to remove; anything else (a link
        // included) stays.
        let regular = entry.file_type().is_ok_and(|t| t.is_file());
        if crate::body::is_sha256(&name) && !referenced.contains(&name) && regular {
            std::fs::remove_file(entry.path()).map_err(|e| Error::io(&entry.path(), e))?;
            removed.push(entry.path());
        } else {
            left += 1;
        }
    }
    if left == 0 {
        let _ = std::fs::remove_dir(&blob_dir);
    }
    Ok(removed)
}

/// Removes recordings, each named by its key and which recording of that key it is, from one
/// cassette under its folder's lock; deletes the file when none is left. Changes nothing and
/// fails when one of them is no longer there (the file changed since it was judged unused).
pub fn remove_recordings(path: &Path, which: &[RecordingId]) -> Result<usize, Error> {
    let dir = path.parent().expect("cassette paths have a folder");
    let _lock = lock_folder(dir, DEFAULT_LOCK_TIMEOUT)?;
    let mut cassette = read_cassette(path)?;
    let positions = recording_ids(&cassette.interactions);
    for id in which {
        if !positions.contains(id) {
            return Err(Error::Stale {
                path: path.to_path_buf(),
                what: format!("recording {} of key {}", id.ordinal + 1, id.key.as_str()),
            });
        }
    }
    let before = cassette.interactions.len();
    let mut i = 0;
    cassette.interactions.retain(|_| {
        i += 1;
        !which.contains(&positions[i - 1])
    });
    if cassette.interactions.is_empty() {
        std::fs::remove_file(path).map_err(|e| Error::io(path, e))?;
    } else {
        write_atomic(path, &cassette.to_bytes())?;
    }
    remove_unreferenced_blobs(dir)?;
    Ok(before - cassette.interactions.len())
}

/// Removes a cassette folder's cassettes, under its lock, and the folder once empty. Files
/// that are not cassettes are left where they are, and returned.
pub fn remove_folder(folder: &Path) -> Result<Vec<PathBuf>, Error> {
    let lock = lock_folder(folder, DEFAULT_LOCK_TIMEOUT)?;
    for file in json_files(folder)? {
        if read_cassette(&file).is_ok() {
            std::fs::remove_file(&file).map_err(|e| Error::io(&file, e))?;
        }
    }
    remove_unreferenced_blobs(folder)?;
    // Removed while locked: a run waiting for the lock then finds the folder gone and makes
    // it again, rather than writing into a removed one.
    let left: Vec<PathBuf> = std::fs::read_dir(folder)
        .map_err(|e| Error::io(folder, e))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.file_name().is_none_or(|n| n != ".llmreplay.lock"))
        .collect();
    if left.is_empty() {
        std::fs::remove_dir_all(folder).map_err(|e| Error::io(folder, e))?;
    }
    drop(lock);
    Ok(left)
}

/// Whether a directory entry is a folder, or a link to one: from the listing itself (no
/// stat per entry) unless it is a link.
fn is_dir(entry: &std::fs::DirEntry) -> bool {
    match entry.file_type() {
        Ok(t) if t.is_symlink() => entry.path().is_dir(),
        Ok(t) => t.is_dir(),
        Err(_) => entry.path().is_dir(),
    }
}

fn json_files(folder: &Path) -> Result<Vec<PathBuf>, Error> {
    let read = match std::fs::read_dir(folder) {
        Ok(read) => read,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(folder, e)),
    };
    let mut files: Vec<PathBuf> = read
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    Ok(files)
}

/// Every cassette file under `dir` (`<dir>/<folder>/<provider>.json`), sorted.
pub fn cassette_files(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let read = match std::fs::read_dir(dir) {
        Ok(read) => read,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(dir, e)),
    };
    let mut files = Vec::new();
    for folder in read.filter_map(Result::ok).filter(is_dir).map(|e| e.path()) {
        files.extend(json_files(&folder)?);
    }
    files.sort();
    Ok(files)
}

/// Reads and parses one cassette file; its blobs stay unread.
pub fn read_cassette(path: &Path) -> Result<Cassette, Error> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    Cassette::parse(path, &text)
}

/// Reads one cassette file and the blobs it refers to, for what needs every byte.
pub fn read_cassette_with_blobs(path: &Path) -> Result<Cassette, Error> {
    let mut cassette = read_cassette(path)?;
    cassette.load_blobs(path.parent().expect("cassette paths have a folder"))?;
    Ok(cassette)
}

/// Takes a folder's exclusive lock, waiting up to `timeout` for another process to release it,
/// then failing with an error that names the folder. Blocks: call it off the async workers.
fn lock_folder(dir: &Path, timeout: Duration) -> Result<File, Error> {
    let file = lock_file(dir)?;
    let started = Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        match file.try_lock() {
            Ok(()) => break,
            Err(std::fs::TryLockError::WouldBlock) if started.elapsed() < timeout => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(Error::Locked {
                    folder: dir.to_path_buf(),
                    waited: timeout,
                })
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(Error::io(dir, e)),
        }
    }
    // The holder before may have removed the folder (its test's last recording trimmed):
    // a lock on a folder no longer there guards nothing.
    if !still_there(dir, &file) {
        return Err(Error::io(
            dir,
            std::io::Error::from(std::io::ErrorKind::NotFound),
        ));
    }
    Ok(file)
}

/// Makes the folder if need be and takes its lock; a folder another run removed meanwhile is
/// made again.
fn lock_creating(dir: &Path, root: &Path, timeout: Duration) -> Result<File, Error> {
    let mut tries = 0;
    loop {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        // A folder that is a link to elsewhere would carry the write out of the cassette dir.
        confined(root, dir)?;
        match lock_folder(dir, timeout) {
            Err(Error::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound && tries < 8 =>
            {
                tries += 1;
            }
            other => return other,
        }
    }
}

/// Removes a cassette folder left empty, while holding its lock (which goes with it).
fn remove_if_empty(folder: &Path, lock: File) {
    if std::fs::read_dir(folder).is_ok_and(|mut d| d.next().is_none()) {
        let _ = std::fs::remove_dir(folder);
    }
    drop(lock);
}

/// Whether `dir` still names the folder `locked` was opened on.
#[cfg(unix)]
fn still_there(dir: &Path, locked: &File) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(dir), locked.metadata()) {
        (Ok(now), Ok(held)) => now.dev() == held.dev() && now.ino() == held.ino(),
        _ => false,
    }
}

// Elsewhere the lock is a file inside the folder, which is then never empty nor removed.
#[cfg(not(unix))]
fn still_there(_dir: &Path, _locked: &File) -> bool {
    true
}

/// Fails unless `path`, with every link resolved, lies inside `root`.
pub fn confined(root: &Path, path: &Path) -> Result<(), Error> {
    let root = root.canonicalize().map_err(|e| Error::io(root, e))?;
    let real = path.canonicalize().map_err(|e| Error::io(path, e))?;
    if real.starts_with(&root) {
        Ok(())
    } else {
        Err(Error::Outside {
            path: path.to_path_buf(),
            resolved: real,
            root,
        })
    }
}

// The folder itself is the lock on Unix, so no lock file is left beside the cassettes.
#[cfg(unix)]
fn lock_file(dir: &Path) -> Result<File, Error> {
    File::open(dir).map_err(|e| Error::io(dir, e))
}

#[cfg(not(unix))]
fn lock_file(dir: &Path) -> Result<File, Error> {
    let path = dir.join(".llmreplay.lock");
    File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| Error::io(&path, e))
}

fn put(cassette: &mut Cassette, ordinal: usize, new: Interaction) -> RecordOutcome {
    let existing = cassette
        .interactions
        .iter()
        .enumerate()
        .filter(|(_, i)| i.key == new.key)
        .nth(ordinal)
        .map(|(i, _)| i);
    match existing {
        Some(i) if cassette.interactions[i].response.comparable() == new.response.comparable() => {
            RecordOutcome::Unchanged
        }
        Some(i) => {
            cassette.interactions[i] = new;
            RecordOutcome::Replaced
        }
        None => {
            cassette.interactions.push(new);
            RecordOutcome::Appended
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::interaction;

    fn file_key(e: &Entry, i: usize) -> Key {
        let c: Cassette = serde_json::from_slice(&std::fs::read(&e.path).unwrap()).unwrap();
        c.interactions[i].key.clone()
    }

    fn id(key: &Key, ordinal: usize) -> RecordingId {
        RecordingId {
            key: key.clone(),
            ordinal,
        }
    }

    fn ids() -> (TestId, ProviderName) {
        (TestId::new("crate$t"), ProviderName::new("openai").unwrap())
    }

    /// The test of [`ids`] with one recording, in a cassette under `dir`; and its key.
    fn one_recording(dir: &Path) -> (Arc<Entry>, Key) {
        let (t, p) = ids();
        let a = interaction("a", r#"{"id":"1"}"#);
        let key = a.key.clone();
        let entry = Store::new(dir).entry(&t, &p).unwrap();
        entry.record(0, a).unwrap();
        (entry, key)
    }

    /// Preloading parses each test's own cassettes ahead of its requests, which then replay
    /// from them; a folder moved by hand is left to the request, which names it.
    #[test]
    fn preloaded_cassettes_replay_and_a_moved_folder_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let (t, p) = ids();
        let (recorded, key) = one_recording(dir.path());
        let moved = dir.path().join("crate--moved");
        std::fs::create_dir(&moved).unwrap();
        std::fs::copy(&recorded.path, moved.join("openai.json")).unwrap();

        let store = Store::new(dir.path());
        assert_eq!(store.interactions_read(&recorded.path), None);
        store.preload();
        let entry = store.find(t.as_str(), &p).expect("preloaded");
        assert!(entry.state.lock().unwrap().loaded.is_some());
        assert!(store.find("crate$moved", &p).is_none());
        // What was read is told by path, and only what was read whole and sound.
        assert_eq!(store.interactions_read(&recorded.path), Some(1));
        assert_eq!(store.interactions_read(&moved.join("openai.json")), None);
        assert!(entry.next_recorded(&key, false).unwrap().hit.is_some());
        let elsewhere = store.entry(&TestId::new("crate$moved"), &p).unwrap();
        assert!(matches!(
            elsewhere.next_recorded(&key, false),
            Err(Error::MovedByHand { .. })
        ));
    }

    /// A replay's unused recordings come from the files preloading listed: those of a
    /// provider the test no longer calls too, and not a file that appeared after.
    #[test]
    fn unused_after_preload_are_the_files_it_listed() {
        let dir = tempfile::tempdir().unwrap();
        let (t, p) = ids();
        let (_, key) = one_recording(dir.path());
        let other = ProviderName::new("anthropic").unwrap();
        let dropped = Store::new(dir.path()).entry(&t, &other).unwrap();
        dropped
            .record(0, interaction("b", r#"{"id":"2"}"#))
            .unwrap();

        let store = Store::new(dir.path());
        store.preload();
        std::fs::copy(&dropped.path, dropped.path.with_file_name("gemini.json")).unwrap();
        let entry = store.find(t.as_str(), &p).unwrap();
        assert!(entry.next_recorded(&key, false).unwrap().hit.is_some());
        let unused = store.unused_in(&t).unwrap();
        let providers: Vec<&str> = unused.iter().map(|u| u.provider.as_str()).collect();
        assert_eq!(providers, ["anthropic"]);
        // Without preloading, the folder is read when asked.
        let fresh = Store::new(dir.path());
        let providers: Vec<String> = fresh
            .unused_in(&t)
            .unwrap()
            .iter()
            .map(|u| u.provider.as_str().to_string())
            .collect();
        assert_eq!(providers, ["anthropic", "gemini", "openai"]);
    }

    #[test]
    fn sequence_replace_in_place_and_append() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path());
        let (t, p) = ids();
        let e = store.entry(&t, &p).unwrap();
        let a = interaction("a", r#"{"id":"1","n":1}"#);
        let key = a.key.clone();
        assert_eq!(e.next(&key, false).unwrap().ordinal, 0);
        assert_eq!(e.record(0, a).unwrap(), RecordOutcome::Appended);
        assert_eq!(
            e.record(1, interaction("a", r#"{"n":2}"#)).unwrap(),
            RecordOutcome::Appended
        );
        assert_eq!(
            e.record(0, interaction("b", r#"{"n":3}"#)).unwrap(),
            RecordOutcome::Appended
        );
        let before = std::fs::read(&e.path).unwrap();
        // Only a volatile field differs: nothing is written.
        assert_eq!(
            e.record(0, interaction("a", r#"{"id":"9","n":1}"#))
                .unwrap(),
            RecordOutcome::Unchanged
        );
        assert_eq!(std::fs::read(&e.path).unwrap(), before);
        assert_eq!(
            e.record(1, interaction("a", r#"{"n":22}"#)).unwrap(),
            RecordOutcome::Replaced
        );

        let fresh = Store::new(dir.path());
        let e = fresh.entry(&t, &p).unwrap();
        assert_eq!(
            &e.next(&key, false).unwrap().hit.unwrap().body[..],
            br#"{"id":"1","n":1}"#
        );
        assert_eq!(
            &e.next(&key, false).unwrap().hit.unwrap().body[..],
            br#"{"n":22}"#
        );
        assert!(
            e.next(&key, false).unwrap().hit.is_none(),
            "a third request has no recording"
        );
        let other = file_key(&e, 2);
        let unused: Vec<_> = fresh
            .unused_in(&t)
            .unwrap()
            .into_iter()
            .map(|u| (u.key, u.ordinal))
            .collect();
        assert_eq!(
            unused,
            vec![(other, 0)],
            "only the recording of prompt b was not replayed"
        );
        assert!(
            e.next(&key, true).unwrap().hit.is_some(),
            "unless repeats are allowed"
        );
        fresh.reset_test(&t);
        assert_eq!(
            e.next(&key, false).unwrap().ordinal,
            0,
            "a retry starts afresh"
        );
        let file: Cassette = serde_json::from_slice(&std::fs::read(&e.path).unwrap()).unwrap();
        assert_eq!(file.interactions.len(), 3);
        assert_eq!(
            file.interactions[2].response.payloads(),
            [serde_json::json!({"n": 3})],
            "order kept"
        );
    }

    /// A re-recorded test that passed keeps exactly what it recorded, in order; a provider it
    /// no longer calls loses its file; a test with an unsaved call keeps everything.
    #[test]
    fn finishing_a_rerecorded_test_keeps_exactly_its_run() {
        let dir = tempfile::tempdir().unwrap();
        let (t, p) = ids();
        let anthropic = ProviderName::new("anthropic").unwrap();
        let before = Store::new(dir.path());
        let e = before.entry(&t, &p).unwrap();
        for (prompt, answer) in [("a", "1"), ("b", "2"), ("c", "3")] {
            e.record(0, interaction(prompt, answer)).unwrap();
        }
        before
            .entry(&t, &anthropic)
            .unwrap()
            .record(0, interaction("old", "9"))
            .unwrap();

        // Each run records afresh, in a new store; an unsaved call keeps the old recordings.
        let rerecord = |unsaved: bool| {
            let run = Store::new(dir.path());
            let e = run.entry(&t, &p).unwrap();
            for (prompt, answer) in [("d", "4"), ("a", "11")] {
                let x = interaction(prompt, answer);
                let ordinal = e.next(&x.key, false).unwrap().ordinal;
                e.record(ordinal, x).unwrap();
            }
            if unsaved {
                e.note_unsaved();
            }
            run.finish_test(&t, true).unwrap()
        };
        let kept = rerecord(true);
        assert!(
            kept.kept.as_deref().unwrap().contains("not saved"),
            "{kept:?}"
        );
        assert_eq!((kept.added, kept.replaced, kept.removed), (1, 1, 0));
        assert_eq!(read_cassette(&e.path).unwrap().interactions.len(), 4);

        let done = rerecord(false);
        assert_eq!(done.kept, None);
        let file = read_cassette(&e.path).unwrap();
        let prompts: Vec<_> = file
            .interactions
            .iter()
            .map(|x| x.request.last_user_text().unwrap())
            .collect();
        assert_eq!(prompts, ["d", "a"], "this run's calls, in its order");
        assert_eq!(
            (done.added, done.replaced, done.removed),
            (0, 0, 3),
            "against the file as this run found it: b, c and anthropic's gone"
        );
        assert!(!e.path.with_file_name("anthropic.json").exists());
    }

    /// A re-record that shifts positions (an old recording trimmed before the new one): what
    /// the run recorded is never reported unused after the trim.
    #[test]
    fn a_trimmed_rerecord_reports_none_of_its_recordings_unused() {
        let dir = tempfile::tempdir().unwrap();
        let (t, p) = ids();
        let old = Store::new(dir.path());
        let e = old.entry(&t, &p).unwrap();
        e.record(0, interaction("stale", "1")).unwrap();
        e.record(0, interaction("kept", "2")).unwrap();
        let run = Store::new(dir.path());
        let e = run.entry(&t, &p).unwrap();
        for prompt in ["kept", "fresh"] {
            let x = interaction(prompt, "3");
            let ordinal = e.next(&x.key, false).unwrap().ordinal;
            e.record(ordinal, x).unwrap();
        }
        let changes = run.finish_test(&t, true).unwrap();
        assert_eq!(changes.removed, 1, "{changes:?}");
        assert_eq!(read_cassette(&e.path).unwrap().interactions.len(), 2);
        assert_eq!(run.unused_in(&t).unwrap(), Vec::new());
    }

    /// Two runs re-record one test with other prompts, their writes interleaved: each trim
    /// removes only what the file held before its own first write, so the file always ends
    /// holding one run's recording, never none.
    #[test]
    fn two_interleaved_rerecords_never_empty_a_cassette() {
        for a_trims_first in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let (t, p) = ids();
            Store::new(dir.path())
                .entry(&t, &p)
                .unwrap()
                .record(0, interaction("old", "0"))
                .unwrap();
            let (a, b) = (Store::new(dir.path()), Store::new(dir.path()));
            a.entry(&t, &p)
                .unwrap()
                .record(0, interaction("A", "1"))
                .unwrap();
            b.entry(&t, &p)
                .unwrap()
                .record(0, interaction("B", "2"))
                .unwrap();
            let order = if a_trims_first { [&a, &b] } else { [&b, &a] };
            for run in order {
                run.finish_test(&t, true).unwrap();
            }
            let file = read_cassette(&a.entry(&t, &p).unwrap().path).unwrap();
            let prompts: Vec<_> = file
                .interactions
                .iter()
                .map(|x| x.request.last_user_text().unwrap())
                .collect();
            assert_eq!(prompts, ["B"], "a_trims_first: {a_trims_first}");
        }
    }

    /// A recording served only through a fault (a cut answer) is used: a trim keeps it, and it
    /// is not unused. A passing test that made no call keeps what it had.
    #[test]
    fn a_fault_served_recording_and_a_silent_test_keep_their_recordings() {
        let dir = tempfile::tempdir().unwrap();
        let (t, p) = ids();
        let x = interaction("cut me", "1");
        Store::new(dir.path())
            .entry(&t, &p)
            .unwrap()
            .record(0, x.clone())
            .unwrap();
        let run = Store::new(dir.path());
        let e = run.entry(&t, &p).unwrap();
        assert!(e.serve_fault(&x.key, false).unwrap().is_some());
        let changes = run.finish_test(&t, true).unwrap();
        assert_eq!(changes.removed, 0, "{changes:?}");
        assert_eq!(read_cassette(&e.path).unwrap().interactions.len(), 1);
        assert_eq!(run.unused_in(&t).unwrap(), Vec::new());

        let silent = Store::new(dir.path());
        let changes = silent.finish_test(&t, true).unwrap();
        assert_eq!(changes.removed, 0, "{changes:?}");
        assert_eq!(read_cassette(&e.path).unwrap().interactions.len(), 1);
        assert_eq!(
            silent.unused_in(&t).unwrap().len(),
            1,
            "unused, for prune to take"
        );
    }

    /// A provider's file the test no longer calls is removed by a trim, unless another
    /// process wrote it while this run went on.
    #[test]
    fn a_trim_leaves_a_file_another_run_wrote_meanwhile() {
        let dir = tempfile::tempdir().unwrap();
        let (t, p) = ids();
        let anthropic = ProviderName::new("anthropic").unwrap();
        let run = Store::new(dir.path());
        let other = Store::new(dir.path());
        let theirs = other.entry(&t, &anthropic).unwrap();
        theirs.record(0, interaction("theirs", "1")).unwrap();
        // Written after this run began, whatever the clock's grain.
        let later = run.opened + Duration::from_secs(1);
        File::options()
            .write(true)
            .open(&theirs.path)
            .and_then(|f| f.set_modified(later))
            .unwrap();
        run.entry(&t, &p)
            .unwrap()
            .record(0, interaction("mine", "2"))
            .unwrap();
        run.finish_test(&t, true).unwrap();
        assert_eq!(read_cassette(&theirs.path).unwrap().interactions.len(), 1);
    }

    #[test]
    fn corrupt_files_are_reported_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path());
        let (t, p) = ids();
        let e = store.entry(&t, &p).unwrap();
        std::fs::create_dir_all(e.path.parent().unwrap()).unwrap();
        std::fs::write(&e.path, "{\n  \"llmreplay\": 1,\n  oops\n").unwrap();
        let err = e
            .next(&interaction("a", "{}").key, false)
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("openai.json") && err.contains("line 3"),
            "{err}"
        );
        assert!(e.record(0, interaction("a", "{}")).is_err());
        assert_eq!(
            std::fs::read_to_string(&e.path).unwrap(),
            "{\n  \"llmreplay\": 1,\n  oops\n"
        );
    }

    #[test]
    fn removing_recordings_takes_exactly_those_or_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t/openai.json");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let mut c = Cassette::new("t", "openai");
        c.interactions = vec![
            interaction("a", "1"),
            interaction("a", "2"),
            interaction("b", "3"),
        ];
        std::fs::write(&path, c.to_bytes()).unwrap();
        let a = c.interactions[0].key.clone();
        let stale = remove_recordings(&path, &[id(&a, 0), id(&a, 5)]);
        assert!(matches!(stale, Err(Error::Stale { .. })), "{stale:?}");
        assert_eq!(
            read_cassette(&path).unwrap(),
            c,
            "a stale removal changes nothing"
        );
        assert_eq!(remove_recordings(&path, &[id(&a, 1)]).unwrap(), 1);
        let left = read_cassette(&path).unwrap().interactions;
        assert_eq!(left, [c.interactions[0].clone(), c.interactions[2].clone()]);
        let b = c.interactions[2].key.clone();
        remove_recordings(&path, &[id(&a, 0), id(&b, 0)]).unwrap();
        assert!(!path.exists(), "an empty cassette is deleted");
    }

    /// Blobs are written with their cassette, replaced with it, and removed with the last
    /// recording that refers to them, by a re-record or by `prune`.
    #[test]
    fn blobs_live_and_go_with_their_recordings() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path());
        let entry = store
            .entry(
                &TestId::new("t$speech"),
                &ProviderName::new("openai").unwrap(),
            )
            .unwrap();
        let audio = |byte: u8| {
            let mut x = interaction("speak", "{}");
            let bytes = vec![0x80 | byte; crate::INLINE_LIMIT + 10];
            x.response = crate::RecordedResponse::with_body(200, Default::default(), &bytes);
            (x, crate::body::sha256_hex(&bytes), bytes)
        };
        let blobs = entry.path.parent().unwrap().join(BLOB_DIR);
        let (first, first_sha, _) = audio(1);
        entry.record(0, first).unwrap();
        assert!(blobs.join(&first_sha).is_file());
        let (second, second_sha, second_bytes) = audio(2);
        let key = second.key.clone();
        assert_eq!(entry.record(0, second).unwrap(), RecordOutcome::Replaced);
        assert!(
            !blobs.join(&first_sha).exists(),
            "the replaced answer's blob"
        );
        assert!(blobs.join(&second_sha).is_file());

        // A fresh run reads the blob back and replays its bytes.
        let fresh = Store::new(dir.path());
        let e = fresh
            .entry(
                &TestId::new("t$speech"),
                &ProviderName::new("openai").unwrap(),
            )
            .unwrap();
        assert_eq!(e.next(&key, false).unwrap().hit.unwrap().body, second_bytes);

        std::fs::write(blobs.join(&second_sha), b"damaged").unwrap();
        let damaged = Store::new(dir.path())
            .entry(
                &TestId::new("t$speech"),
                &ProviderName::new("openai").unwrap(),
            )
            .unwrap()
            .next(&key, false)
            .err()
            .unwrap()
            .to_string();
        assert!(damaged.contains("missing or damaged"), "{damaged}");

        remove_recordings(&entry.path, &[id(&key, 0)]).unwrap();
        assert!(!blobs.exists(), "pruned with the last recording");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]
        /// Any bytes as request and answer, recorded through the store and read back by a fresh
        /// one, replay identical: JSON, text, base64 and blob forms alike.
        #[test]
        fn any_bytes_record_and_replay_identical(
            request in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256),
            answer in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256),
            big in proptest::prelude::any::<bool>(),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let (test, provider) = (TestId::new("t$bytes"), ProviderName::new("openai").unwrap());
            let mut answer = answer;
            if big {
                answer = answer.repeat(crate::INLINE_LIMIT / answer.len().max(1) + 1);
            }
            let req = crate::Normalizer::default().request("POST", "/p", None, None, &request, &[]);
            let x = Interaction {
                key: Key::of(&req),
                seal: None,
                request: req,
                response: crate::RecordedResponse::with_body(200, Default::default(), &answer),
                timing: None,
                summary: None,
            };
            let key = x.key.clone();
            Store::new(dir.path()).entry(&test, &provider).unwrap().record(0, x).unwrap();
            let hit = Store::new(dir.path()).entry(&test, &provider).unwrap().next(&key, false).unwrap().hit;
            proptest::prop_assert_eq!(&hit.unwrap().body[..], &answer[..]);
        }
    }

    /// A folder another process holds delays that folder's recordings alone, then fails
    /// naming it; the entry stays usable meanwhile and after.
    #[test]
    fn a_held_folder_lock_times_out_naming_the_folder() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path()).with_lock_timeout(Duration::from_millis(200));
        let (test, provider) = (
            TestId::new("t$locked"),
            ProviderName::new("openai").unwrap(),
        );
        let entry = store.entry(&test, &provider).unwrap();
        let folder = entry.path.parent().unwrap().to_path_buf();
        std::fs::create_dir_all(&folder).unwrap();
        let held = lock_file(&folder).unwrap();
        held.lock().unwrap();
        let x = interaction("held", "{}");
        let key = x.key.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let writer = entry.clone();
        let handle = std::thread::spawn(move || tx.send(writer.record(0, x)).unwrap());
        // While the write waits for the lock, the same entry still answers lookups.
        assert_eq!(entry.next(&key, false).unwrap().ordinal, 0);
        let err = rx.recv().unwrap().unwrap_err().to_string();
        handle.join().unwrap();
        assert!(
            err.contains(&folder.display().to_string()) && err.contains("lock"),
            "{err}"
        );
        held.unlock().unwrap();
        entry.record(0, interaction("held", "{}")).unwrap();
    }

    /// A cassette folder that is a link out of the cassette dir is refused, and nothing is
    /// written where it points.
    #[cfg(unix)]
    #[test]
    fn writes_never_leave_the_cassette_dir() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path().join("c"));
        let (test, provider) = (
            TestId::new("t$linked"),
            ProviderName::new("openai").unwrap(),
        );
        let entry = store.entry(&test, &provider).unwrap();
        std::fs::create_dir_all(dir.path().join("c")).unwrap();
        std::os::unix::fs::symlink(outside.path(), entry.path.parent().unwrap()).unwrap();
        let err = entry.record(0, interaction("x", "{}")).unwrap_err();
        assert!(matches!(err, Error::Outside { .. }), "{err}");
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    }

    /// New cassettes are 0666 less the umask, not 0600; a re-record keeps the file's mode.
    #[cfg(unix)]
    #[test]
    fn file_modes_are_ordinary_and_kept() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path());
        let (test, provider) = (TestId::new("t$modes"), ProviderName::new("openai").unwrap());
        let entry = store.entry(&test, &provider).unwrap();
        entry.record(0, interaction("a", "{}")).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        // The umask of this process, read without changing it: a file made with 0666.
        let probe = dir.path().join("probe");
        std::fs::write(&probe, b"").unwrap();
        assert_eq!(mode(&entry.path), mode(&probe));
        assert_ne!(mode(&entry.path), 0o600);
        std::fs::set_permissions(&entry.path, std::fs::Permissions::from_mode(0o640)).unwrap();
        entry.record(1, interaction("b", "{}")).unwrap();
        assert_eq!(mode(&entry.path), 0o640, "a re-record keeps the mode");
    }

    /// Replay keeps no cursor for a key that has no recording: misses take no memory.
    #[test]
    fn misses_in_replay_take_no_memory() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path());
        let entry = store
            .entry(
                &TestId::new("t$miss"),
                &ProviderName::new("openai").unwrap(),
            )
            .unwrap();
        for i in 0..1000 {
            let x = interaction(&format!("never {i}"), "{}");
            assert!(entry.next_recorded(&x.key, false).unwrap().hit.is_none());
        }
        assert!(entry.state.lock().unwrap().cursors.is_empty());
        let x = interaction("never 1", "{}");
        assert_eq!(entry.next(&x.key, false).unwrap().ordinal, 0);
        assert_eq!(
            entry.next(&x.key, false).unwrap().ordinal,
            1,
            "record modes count"
        );
    }

    #[test]
    fn slug_collisions_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path());
        let p = ProviderName::new("openai").unwrap();
        store.entry(&TestId::new("a$b c"), &p).unwrap();
        let err = store
            .entry(&TestId::new("a$b.c"), &p)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("a$b c") && err.contains("a$b.c"), "{err}");
    }

    #[test]
    fn closest_names_differences() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path());
        let (t, p) = ids();
        let e = store.entry(&t, &p).unwrap();
        e.record(0, interaction("hello", "{}")).unwrap();
        let c = e.closest(&interaction("hullo", "{}").request).unwrap();
        assert_eq!(c.differing, vec!["/body/messages/0/content"]);
    }
}
