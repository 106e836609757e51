//! A run's spool: every recording the run made, appended to one file under the run's folder
//! (`target/llmreplay/runs/<run id>/spool.ndjson`) before its client gets the answer, so a
//! recording is durable the moment it is made, while the cassettes are written once per test
//! when the test ends. A spool whose run settled every test is removed at the run's end; one
//! left by a killed daemon is applied by the next run or `cargo llmreplay recover`.

use crate::format::{Cassette, Interaction};
use crate::fs::DEFAULT_LOCK_TIMEOUT;
use crate::id::{ProviderName, Slug, TestId};
use crate::maintenance::write_blobs;
use crate::Error;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The spool's file name inside a run's folder.
pub const SPOOL_FILE: &str = "spool.ndjson";

/// The version of the spool's lines; a reader refuses a spool of another.
pub const SPOOL_VERSION: u32 = 1;

/// One line of a spool.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SpoolLine {
    /// The first line: what the spool is and where its recordings belong.
    Spool {
        /// [`SPOOL_VERSION`].
        version: u32,
        /// The cassette directory the run records into.
        cassette_dir: PathBuf,
    },
    /// A recording, as it will be stored (redacted, sealed); its blobs are in the run's
    /// folder, under `blobs/`.
    Recorded {
        /// The test.
        test: TestId,
        /// The provider (the cassette file's name).
        provider: ProviderName,
        /// Which recording of its key.
        ordinal: usize,
        /// The interaction.
        interaction: Box<Interaction>,
    },
    /// A test's process ended, with its outcome as the runner or plugin said it.
    Ended {
        /// The test.
        test: TestId,
        /// `passed`, `failed`, `interrupted`, ...
        outcome: String,
    },
    /// Every recording of the test so far reached its cassettes.
    Settled {
        /// The test.
        test: TestId,
    },
}

/// The spool a run appends to; it holds the file's lock while the run lives, so another run
/// never applies it under its feet.
pub struct Spool {
    dir: PathBuf,
    file: Mutex<File>,
}

impl Spool {
    /// Makes the spool in `run_dir` for recordings into `cassette_dir`.
    pub fn create(run_dir: &Path, cassette_dir: &Path) -> Result<Spool, Error> {
        std::fs::create_dir_all(run_dir).map_err(|e| Error::io(run_dir, e))?;
        let path = run_dir.join(SPOOL_FILE);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        file.lock().map_err(|e| Error::io(&path, e))?;
        let spool = Spool {
            dir: run_dir.to_path_buf(),
            file: Mutex::new(file),
        };
        // Absolute: `recover` may run from another folder than the run did.
        let cassette_dir =
            std::path::absolute(cassette_dir).unwrap_or_else(|_| cassette_dir.to_path_buf());
        spool.append(&SpoolLine::Spool {
            version: SPOOL_VERSION,
            cassette_dir,
        })?;
        Ok(spool)
    }

    /// The run's folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Appends a recording; its blobs first, so a line never names a blob not yet written.
    /// Returns it, and the bytes its line and blobs took.
    pub(crate) fn recorded(
        &self,
        test: &TestId,
        provider: &ProviderName,
        ordinal: usize,
        interaction: Interaction,
    ) -> Result<(Interaction, usize), Error> {
        let one = Cassette {
            interactions: vec![interaction],
            ..Cassette::new(test, provider)
        };
        write_blobs(&self.dir, &one, &self.dir)?;
        let blobs: usize = one
            .blobs()
            .iter()
            .filter_map(|b| b.bytes.as_ref().map(|b| b.len()))
            .sum();
        let interaction = one
            .interactions
            .into_iter()
            .next()
            .expect("one interaction");
        let line = SpoolLine::Recorded {
            test: test.clone(),
            provider: provider.clone(),
            ordinal,
            interaction: Box::new(interaction),
        };
        let size = self.append(&line)? + blobs;
        let SpoolLine::Recorded { interaction, .. } = line else {
            unreachable!("built above")
        };
        Ok((*interaction, size))
    }

    /// Notes how a test ended.
    pub fn ended(&self, test: &TestId, outcome: &str) -> Result<(), Error> {
        self.append(&SpoolLine::Ended {
            test: test.clone(),
            outcome: outcome.to_string(),
        })
        .map(drop)
    }

    /// Notes that a test's recordings so far are in its cassettes.
    pub(crate) fn settled(&self, test: &TestId) -> Result<(), Error> {
        self.append(&SpoolLine::Settled { test: test.clone() })
            .map(drop)
    }

    /// Flushes what was appended to the disk itself, not only to the system's cache.
    pub fn sync(&self) -> Result<(), Error> {
        let file = self.file.lock().expect("spool lock");
        file.sync_data()
            .map_err(|e| Error::io(&self.dir.join(SPOOL_FILE), e))
    }

    /// Removes the spool: every test it holds settled. The run's folder stays (its event log).
    pub fn remove(&self) -> Result<(), Error> {
        let path = self.dir.join(SPOOL_FILE);
        std::fs::remove_file(&path).map_err(|e| Error::io(&path, e))?;
        let blobs = self.dir.join(crate::BLOB_DIR);
        if blobs.exists() {
            std::fs::remove_dir_all(&blobs).map_err(|e| Error::io(&blobs, e))?;
        }
        Ok(())
    }

    /// Appends a line; returns its length.
    fn append(&self, line: &SpoolLine) -> Result<usize, Error> {
        let mut text = serde_json::to_vec(line).expect("spool lines serialise");
        text.push(b'\n');
        let mut file = self.file.lock().expect("spool lock");
        // One write of the whole line: a daemon killed mid-way leaves at most a torn last line,
        // which a reader passes over.
        file.write_all(&text)
            .map_err(|e| Error::io(&self.dir.join(SPOOL_FILE), e))?;
        Ok(text.len())
    }
}

/// A spool no live run holds: what it recorded, per test, and which tests ended and settled.
#[derive(Debug, Default)]
pub struct Unapplied {
    /// The run's folder.
    pub run_dir: PathBuf,
    /// Where its recordings belong.
    pub cassette_dir: PathBuf,
    /// Each test's recordings, in the order made: provider, ordinal, interaction.
    pub recorded: BTreeMap<TestId, Vec<(ProviderName, usize, Interaction)>>,
    /// How each test ended, where it did.
    pub ended: BTreeMap<TestId, String>,
    /// Tests whose recordings reached their cassettes (none recorded since).
    pub settled: BTreeSet<TestId>,
    /// Lines that did not parse, or recordings whose key or seal no longer matches (edited,
    /// damaged): never applied, and the spool is kept for a look. A last line cut short (a
    /// run killed mid-write) is not one of them.
    pub damaged: usize,
    /// Why this version cannot apply it at all (another version wrote it, it cannot be
    /// read): it is then listed, kept, and stops no other spool.
    pub unusable: Option<String>,
}

impl Unapplied {
    /// Tests with recordings not yet in their cassettes: what `recover` applies. Each is a
    /// whole exchange whose client got its answer, so each is kept, as `--record-missing`
    /// would keep it, whether or not its test ended.
    pub fn to_apply(&self) -> Vec<&TestId> {
        if self.unusable.is_some() {
            return Vec::new();
        }
        self.recorded
            .keys()
            .filter(|t| !self.settled.contains(*t))
            .collect()
    }

    /// Of those, the tests that never ended (killed with the daemon, or a `serve` that names
    /// no ends): their later calls may be missing.
    pub fn unfinished(&self) -> Vec<&TestId> {
        self.recorded
            .keys()
            .filter(|t| !self.settled.contains(*t) && !self.ended.contains_key(*t))
            .collect()
    }
}

/// Reads the spool in `run_dir` when no live run holds it; `None` when a run holds it or
/// there is none.
pub fn read_unapplied(run_dir: &Path) -> Result<Option<Unapplied>, Error> {
    let path = run_dir.join(SPOOL_FILE);
    let file = match File::open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(&path, e)),
    };
    match file.try_lock_shared() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => return Ok(None),
        Err(std::fs::TryLockError::Error(e)) => return Err(Error::io(&path, e)),
    }
    let mut out = Unapplied {
        run_dir: run_dir.to_path_buf(),
        ..Unapplied::default()
    };
    let mut versioned = false;
    let lines: Vec<Vec<u8>> = std::io::BufReader::new(&file)
        .split(b'\n')
        .collect::<Result<_, _>>()
        .map_err(|e| Error::io(&path, e))?;
    let last = lines.len();
    for (n, line) in lines.into_iter().enumerate() {
        if line.is_empty() {
            continue;
        }
        match serde_json::from_slice::<SpoolLine>(&line) {
            Ok(SpoolLine::Spool {
                version,
                cassette_dir,
            }) => {
                out.cassette_dir = cassette_dir;
                if version != SPOOL_VERSION {
                    // Its later lines may mean other things: none is read.
                    out.unusable = Some(format!(
                        "spool version {version} is not {SPOOL_VERSION}, this cargo-llmreplay's: apply it with the cargo-llmreplay that wrote it, or remove {}",
                        run_dir.display()
                    ));
                    return Ok(Some(out));
                }
                versioned = true;
            }
            Ok(SpoolLine::Recorded {
                test,
                provider,
                ordinal,
                interaction,
            }) => {
                // As loading a cassette does: an answer edited since no longer matches its
                // seal, a request no longer its key.
                let sealed = interaction
                    .seal
                    .as_ref()
                    .is_none_or(|s| *s == crate::seal_of(&interaction.response));
                if !sealed || crate::Key::of(&interaction.request) != interaction.key {
                    out.damaged += 1;
                    continue;
                }
                out.settled.remove(&test);
                out.recorded
                    .entry(test)
                    .or_default()
                    .push((provider, ordinal, *interaction));
            }
            Ok(SpoolLine::Ended { test, outcome }) => {
                out.ended.insert(test, outcome);
            }
            Ok(SpoolLine::Settled { test }) => {
                out.recorded.remove(&test);
                out.settled.insert(test);
            }
            // A run killed mid-write leaves its last line cut short: nothing was lost there.
            Err(e) if n + 1 == last && e.is_eof() => {}
            Err(_) => out.damaged += 1,
        }
    }
    if !versioned {
        return Ok(None);
    }
    Ok(Some(out))
}

/// Every run folder under `runs_dir` whose spool no live run holds and that has recordings
/// not yet in the cassettes under `cassette_dir`, oldest first. Projects that share a target
/// dir (`CARGO_TARGET_DIR`) each see their own. A spool this version cannot apply (another
/// version's, one that cannot be read) is among them with why ([`Unapplied::unusable`]): it
/// never hides the others.
pub fn unapplied_spools(runs_dir: &Path, cassette_dir: &Path) -> Result<Vec<Unapplied>, Error> {
    let absolute = |dir: &Path| std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    let ours = |dir: &Path| {
        absolute(dir) == absolute(cassette_dir)
            || matches!(
                (std::fs::canonicalize(dir), std::fs::canonicalize(cassette_dir)),
                (Ok(a), Ok(b)) if a == b
            )
    };
    let read = match std::fs::read_dir(runs_dir) {
        Ok(read) => read,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(runs_dir, e)),
    };
    let mut dirs: Vec<PathBuf> = read
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.join(SPOOL_FILE).is_file())
        .collect();
    dirs.sort();
    let mut out = Vec::new();
    for dir in dirs {
        match read_unapplied(&dir) {
            Ok(Some(spool)) => {
                let left =
                    !spool.recorded.is_empty() || spool.damaged > 0 || spool.unusable.is_some();
                if left && ours(&spool.cassette_dir) {
                    out.push(spool);
                }
            }
            Ok(None) => {}
            // Whose it is cannot be told: listed, so that it is looked at.
            Err(e) => out.push(Unapplied {
                unusable: Some(e.to_string()),
                run_dir: dir,
                ..Unapplied::default()
            }),
        }
    }
    Ok(out)
}

/// What applying a spool did.
#[derive(Debug, Default)]
pub struct Applied {
    /// Tests whose recordings were added to their cassettes, and how many.
    pub applied: Vec<(TestId, usize)>,
    /// Of those, the tests that never ended.
    pub unfinished: Vec<TestId>,
    /// Recordings not added: their cassette has one in their place, made since.
    pub newer: usize,
    /// Where the spool was kept because lines of it were damaged, and how many.
    pub damaged: Option<(PathBuf, usize)>,
}

/// The name a spool with damaged lines is kept under once applied: no run applies it again.
pub const DAMAGED_SPOOL_FILE: &str = "spool.damaged.ndjson";

/// Adds the recordings of every test of `spool` to its cassettes, as `--record-missing` would:
/// nothing removed, and nothing replaced (a recording whose place holds one made since, by a
/// run that ended the test, gives way). Then removes the spool, or keeps it aside when lines
/// of it were damaged. `None` when another process is applying it. A cassette another test
/// holds, or any other failure, stops it with the spool kept.
pub fn apply(spool: &Unapplied) -> Result<Option<Applied>, Error> {
    let mut out = Applied::default();
    let path = spool.run_dir.join(SPOOL_FILE);
    if let Some(why) = &spool.unusable {
        return Err(Error::io(&path, std::io::Error::other(why.clone())));
    }
    // Held while applying: two `recover`s at once apply it once.
    let file = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .map_err(|e| Error::io(&path, e))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => return Ok(None),
        Err(std::fs::TryLockError::Error(e)) => return Err(Error::io(&path, e)),
    }
    for test in spool.to_apply() {
        let slug = Slug::from_test_id(test);
        let mut by_provider: BTreeMap<&ProviderName, Vec<(usize, Interaction)>> = BTreeMap::new();
        for (provider, ordinal, interaction) in &spool.recorded[test] {
            let mut interaction = interaction.clone();
            for blob in interaction_blobs(&mut interaction) {
                blob.load(&spool.run_dir)?;
            }
            by_provider
                .entry(provider)
                .or_default()
                .push((*ordinal, interaction));
        }
        let mut count = 0;
        for (provider, pending) in by_provider {
            let file = spool
                .cassette_dir
                .join(slug.as_str())
                .join(format!("{}.json", provider.as_str()));
            let settled = crate::settle::settle_file(
                &file,
                &spool.cassette_dir,
                test,
                DEFAULT_LOCK_TIMEOUT,
                &pending,
                None,
                crate::settle::Put::Missing,
            )?;
            count += pending.len() - settled.skipped;
            out.newer += settled.skipped;
        }
        out.applied.push((test.clone(), count));
    }
    out.unfinished = spool.unfinished().into_iter().cloned().collect();
    drop(file);
    if spool.damaged > 0 {
        let kept = spool.run_dir.join(DAMAGED_SPOOL_FILE);
        std::fs::rename(&path, &kept).map_err(|e| Error::io(&path, e))?;
        out.damaged = Some((kept, spool.damaged));
        return Ok(Some(out));
    }
    std::fs::remove_file(&path).map_err(|e| Error::io(&path, e))?;
    let blobs = spool.run_dir.join(crate::BLOB_DIR);
    if blobs.exists() {
        std::fs::remove_dir_all(&blobs).map_err(|e| Error::io(&blobs, e))?;
    }
    Ok(Some(out))
}

fn interaction_blobs(x: &mut Interaction) -> Vec<&mut crate::Blob> {
    let mut out = x.request.body.blobs_mut();
    match &mut x.response.body {
        crate::ResponseBody::Whole(b) => out.extend(b.blobs_mut()),
        crate::ResponseBody::Session(frames) => {
            out.extend(frames.iter_mut().flat_map(|f| f.body.blobs_mut()))
        }
        crate::ResponseBody::Stream { .. } => {}
    }
    out
}
