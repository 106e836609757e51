//! A test's recordings reaching one cassette file: read under the folder's lock, this run's
//! recordings put in their places, and (for a re-recorded test that passed) everything else
//! removed, then written once. The only place a recording run writes a cassette.

use crate::format::{recording_ids, Cassette, Interaction, RecordingId, FORMAT_VERSION};
use crate::fs::{confined, lock_creating, lock_folder, write_atomic};
use crate::id::{ProviderName, TestId};
use crate::maintenance::{
    read_if_exists, remove_unreferenced_blobs, sealed_ids, write_blobs, Sealed,
};
use crate::Error;
use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

/// What a trim keeps of a file: this run's recordings, and the recordings faults served it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Keep<'a> {
    pub recorded: &'a [RecordingId],
    pub served: &'a [RecordingId],
}

/// What settling one file did.
#[derive(Debug, Default)]
pub(crate) struct Settled {
    /// The file's recordings before.
    pub before: Sealed,
    /// And after.
    pub after: Sealed,
    /// Where this run's recordings ended up, with the seal each place holds now: a recording
    /// whose answer was the same as before keeps the old one, byte for byte.
    pub ours: Sealed,
    /// Recordings not put, under [`Put::Missing`]: the file had one in their place.
    pub skipped: usize,
}

/// How a recording meets one the file already has in its place (its key's n-th).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Put {
    /// It replaces it (kept byte for byte when its answer is the same): a test's end.
    Replace,
    /// It gives way, as `--record-missing` would replay the file's: a dead run's spool.
    Missing,
}

/// Puts `pending` (ordinal, interaction) into the cassette at `path` and, with `keep`
/// (what the test recorded in this run, and what a fault served it), removes every recording
/// not named there; the recordings of this run then come first, in the order the test made its
/// calls (their steps), then those faults served. One write, under the folder's lock. A file
/// that ends empty is removed.
pub(crate) fn settle_file(
    path: &Path,
    root: &Path,
    test: &TestId,
    lock_timeout: Duration,
    pending: &[(usize, Interaction)],
    keep: Option<Keep<'_>>,
    put: Put,
) -> Result<Settled, Error> {
    let dir = path.parent().expect("cassette paths have a folder");
    let _lock = if pending.is_empty() {
        if !dir.exists() {
            return Ok(Settled::default());
        }
        confined(root, dir)?;
        lock_folder(dir, lock_timeout)?
    } else {
        lock_creating(dir, root, lock_timeout)?
    };
    let provider_name = path
        .file_stem()
        .and_then(|s| s.to_str())
        .and_then(ProviderName::new);
    let mut cassette = match read_if_exists(path)? {
        Some(cassette) => cassette,
        None if pending.is_empty() => return Ok(Settled::default()),
        None => Cassette::new(test, provider_name.as_ref().expect("a provider's file")),
    };
    if cassette.test != test.as_str() {
        return Err(Error::SlugCollision {
            slug: dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            first: cassette.test.to_string(),
            second: test.to_string(),
        });
    }
    // Answers compare with their blobs read: a large answer re-recorded the same stays.
    cassette.load_blobs(dir)?;
    let before = sealed_ids(&cassette.interactions);
    let mut placed = Vec::with_capacity(pending.len());
    let mut skipped = 0;
    // What the file holds, for recordings that give way: listed once, not at each one.
    let mut held: HashSet<RecordingId> = match put {
        Put::Missing => recording_ids(&cassette.interactions).into_iter().collect(),
        Put::Replace => HashSet::new(),
    };
    for (ordinal, interaction) in pending {
        let id = RecordingId {
            key: interaction.key.clone(),
            ordinal: *ordinal,
        };
        if put == Put::Missing && !held.insert(id.clone()) {
            // The file has a recording there, made since: the newer one stays.
            skipped += 1;
            continue;
        }
        cassette.put(*ordinal, interaction.clone());
        placed.push(id);
    }
    if let Some(keep) = keep {
        // A recording's step: as this end puts it, else as an earlier end of the run wrote it.
        let mut step: std::collections::HashMap<&RecordingId, u64> = Default::default();
        let ids: Vec<RecordingId> = pending
            .iter()
            .map(|(ordinal, x)| RecordingId {
                key: x.key.clone(),
                ordinal: *ordinal,
            })
            .collect();
        for (id, (_, x)) in ids.iter().zip(pending) {
            if let Some(s) = x.step {
                step.insert(id, s);
            }
        }
        let ids = recording_ids(&cassette.interactions);
        let recorded: std::collections::HashMap<&RecordingId, usize> = keep
            .recorded
            .iter()
            .enumerate()
            .map(|(i, id)| (id, i))
            .collect();
        let served: std::collections::HashMap<&RecordingId, usize> = keep
            .served
            .iter()
            .enumerate()
            .map(|(i, id)| (id, i))
            .collect();
        let mut ranked: Vec<((u8, u64, usize), Interaction)> =
            std::mem::take(&mut cassette.interactions)
                .into_iter()
                .zip(&ids)
                .filter_map(|(x, id)| {
                    // Made in this run: by step, else in the order saved.
                    let rank = if let Some(&saved) = recorded.get(id) {
                        let s = step.get(id).copied().or(x.step).unwrap_or(u64::MAX);
                        (0, s, saved)
                    } else {
                        (1, 0, *served.get(id)?)
                    };
                    Some((rank, x))
                })
                .collect();
        ranked.sort_by_key(|(rank, _)| *rank);
        cassette.interactions = ranked.into_iter().map(|(_, x)| x).collect();
    }
    let after = sealed_ids(&cassette.interactions);
    let ours = {
        let now: std::collections::HashMap<&RecordingId, &Option<String>> =
            after.iter().map(|(id, seal)| (id, seal)).collect();
        placed
            .into_iter()
            .filter_map(|id| {
                let seal = now.get(&id).map(|s| (*s).clone())?;
                Some((id, seal))
            })
            .collect()
    };
    if after != before {
        if cassette.interactions.is_empty() {
            match std::fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(path, e)),
            }
        } else {
            cassette.llmreplay = FORMAT_VERSION;
            // Blobs first: a crash between the two leaves an unreferenced blob, never a
            // cassette that refers to a missing one.
            write_blobs(dir, &cassette, root)?;
            write_atomic(path, &cassette.to_bytes())?;
        }
        remove_unreferenced_blobs(dir)?;
    }
    Ok(Settled {
        before,
        after,
        ours,
        skipped,
    })
}

/// Whether the cassette at `path` still holds each of `ours` with the same answer: false once
/// another run settled its own recordings of the test over them.
pub(crate) fn still_holds(path: &Path, ours: &Sealed) -> Result<bool, Error> {
    let now = read_if_exists(path)?
        .map(|c| sealed_ids(&c.interactions))
        .unwrap_or_default();
    let now: HashSet<&(RecordingId, Option<String>)> = now.iter().collect();
    Ok(ours.iter().all(|x| now.contains(x)))
}
