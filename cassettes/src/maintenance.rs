//! Offline work on cassette files: reading them, trimming a re-recorded test to what it
//! called, rewriting one recording, moving a test's folder, fixing hand edits and removing
//! recordings, blobs and folders. Every change lands whole, under the folder's lock.

use crate::body::BLOB_DIR;
use crate::format::{recording_ids, Cassette, Interaction, RecordingId, Summary};
use crate::fs::{
    confined, lock_creating, lock_folder, remove_if_empty, write_atomic, DEFAULT_LOCK_TIMEOUT,
};
use crate::id::{ProviderName, Slug, TestId};
use crate::key::{Key, RecordedRequest};
use crate::Error;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
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
    /// A cassette file whose recordings of this run another run replaced with its own since
    /// (both recorded the test at once, and the other ended it last).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::lossy_path::option"
    )]
    pub superseded: Option<PathBuf>,
}

impl TestChanges {
    /// True when the run changed nothing and has nothing to say.
    pub fn is_empty(&self) -> bool {
        self.added == 0 && self.replaced == 0 && self.removed == 0 && self.kept.is_none()
    }
}

/// The id and seal of each interaction.
pub(crate) fn sealed_ids(interactions: &[Interaction]) -> Vec<(RecordingId, Option<String>)> {
    recording_ids(interactions)
        .into_iter()
        .zip(interactions.iter().map(|i| i.seal.clone()))
        .collect()
}

/// Reads a cassette, or `None` when there is no file.
pub(crate) fn read_if_exists(path: &Path) -> Result<Option<Cassette>, Error> {
    match read_cassette(path) {
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => Ok(None),
        other => other.map(Some),
    }
}

/// Recordings by id, with the seal of the answer each holds.
pub(crate) type Sealed = Vec<(RecordingId, Option<String>)>;

/// Adds what changed between two lists of recordings to `changes`.
pub(crate) fn count_changes(before: &Sealed, after: &Sealed, changes: &mut TestChanges) {
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

/// Stamps `at` as the verified date of the interactions at `positions` (from 0) whose seal is
/// still the one given, and still matches their answer (and their key their request): the
/// live provider gave an answer no code could tell from theirs. Their answers, keys and seals
/// stay as they are; one that changed since it was read (a recording run replaced it, or a
/// hand edited it) is left alone. Under the folder's lock. Says how many were stamped.
pub fn mark_verified(
    path: &Path,
    root: &Path,
    positions: &[(usize, Option<String>)],
    at: &str,
) -> Result<usize, Error> {
    let dir = path.parent().expect("cassette paths have a folder");
    let _lock = lock_creating(dir, root, DEFAULT_LOCK_TIMEOUT)?;
    let Some(mut cassette) = read_if_exists(path)? else {
        return Ok(0);
    };
    // One edited by hand since it was sealed or keyed is never replayed: no live answer makes
    // it fresh.
    let mut damaged = cassette.seal_mismatches();
    damaged.extend(cassette.key_mismatches());
    let mut stamped = 0;
    for (position, seal) in positions {
        if damaged.contains(position) {
            continue;
        }
        if let Some(i) = cassette.interactions.get_mut(*position) {
            if &i.seal == seal {
                i.verified_at = Some(at.to_string());
                stamped += 1;
            }
        }
    }
    if stamped > 0 {
        write_atomic(path, &cassette.to_bytes())?;
    }
    Ok(stamped)
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
    test: &TestId,
    provider: &ProviderName,
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

/// A folder the slug rule of 0.1.0 named for a test, which today's rule names otherwise.
#[derive(Clone, Debug)]
pub struct LegacyFolder {
    /// The folder.
    pub folder: PathBuf,
    /// The tests its cassettes name (one, unless the old rule gave several one folder).
    pub tests: Vec<TestId>,
    /// Where its cassettes belong now, for each test.
    pub to: Vec<PathBuf>,
    /// Why `move_legacy_folders` cannot move it, when it cannot.
    pub stuck: Option<String>,
}

/// The folders of `dir` the old slug rule named for the tests their cassettes name.
pub fn legacy_folders(dir: &Path) -> Result<Vec<LegacyFolder>, Error> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(dir, e)),
    };
    let mut names: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    names.sort();
    Ok(names
        .into_iter()
        .filter_map(|folder| inspect_legacy(dir, folder))
        .collect())
}

/// The folder the old slug rule gave `test`, when it is not today's and still holds a cassette
/// of that test: its recordings, to be moved, never missed in silence. Reads that folder alone.
pub fn legacy_folder(dir: &Path, test: &TestId) -> Option<LegacyFolder> {
    let legacy = Slug::legacy_from_test_id(test);
    if legacy == Slug::from_test_id(test) {
        return None;
    }
    inspect_legacy(dir, dir.join(legacy.as_str())).filter(|l| l.tests.contains(test))
}

/// `folder` of `dir`, when the old slug rule named it for a test its cassettes name: where
/// they belong now, and why it cannot be moved, if it cannot.
fn inspect_legacy(dir: &Path, folder: PathBuf) -> Option<LegacyFolder> {
    let name = folder.file_name().and_then(|n| n.to_str())?.to_string();
    let link = std::fs::symlink_metadata(&folder).is_ok_and(|m| m.file_type().is_symlink());
    if !folder.is_dir() {
        return None;
    }
    let mut tests: Vec<TestId> = Vec::new();
    let mut unreadable = false;
    for file in json_files(&folder).unwrap_or_default() {
        match read_cassette(&file) {
            Ok(c) => {
                let test = TestId::new(c.test.as_str());
                if !tests.contains(&test) {
                    tests.push(test);
                }
            }
            Err(_) => unreadable = true,
        }
    }
    let legacy = tests.iter().any(|t| {
        Slug::legacy_from_test_id(t).as_str() == name && Slug::from_test_id(t).as_str() != name
    });
    if !legacy {
        return None;
    }
    let to: Vec<PathBuf> = tests
        .iter()
        .map(|t| dir.join(Slug::from_test_id(t).as_str()))
        .collect();
    let stuck = if link {
        Some("it is a symbolic link: move what it points to by hand".to_string())
    } else if tests.len() > 1 {
        Some(format!(
            "the rule of 0.1.0 gave {} tests this one folder; move each test's cassettes (and the blobs they name) to its own folder by hand",
            tests.len()
        ))
    } else if unreadable {
        Some("a file in it cannot be read as a cassette".to_string())
    } else if to[0].exists() && std::fs::read_dir(&to[0]).map_or(true, |mut d| d.next().is_some()) {
        Some(format!(
            "{} is there already and not empty; move this folder's cassettes into it by hand",
            to[0].display()
        ))
    } else {
        None
    };
    Some(LegacyFolder {
        folder,
        tests,
        to,
        stuck,
    })
}

/// Moves each folder the old slug rule named (see [`legacy_folders`]) that can be moved to
/// today's name for its test: one rename under the folder's lock, as `move_test` does, until
/// none is left that can (a move may free the name another waits for). The others are
/// returned with why they stay.
pub fn move_legacy_folders(dir: &Path) -> Result<(Vec<Moved>, Vec<LegacyFolder>), Error> {
    let mut moved = Vec::new();
    loop {
        let found = legacy_folders(dir)?;
        let mut progressed = false;
        for legacy in &found {
            if legacy.stuck.is_some() {
                continue;
            }
            let (old, new) = (&legacy.folder, &legacy.to[0]);
            if new.exists() {
                std::fs::remove_dir(new).map_err(|e| Error::io(new, e))?;
            }
            confined(dir, old)?;
            let _lock = lock_folder(old, DEFAULT_LOCK_TIMEOUT)?;
            std::fs::rename(old, new).map_err(|e| Error::io(old, e))?;
            let (mut files, mut recordings) = (0, 0);
            for file in json_files(new)? {
                if let Ok(c) = read_cassette(&file) {
                    files += 1;
                    recordings += c.interactions.len();
                }
            }
            moved.push(Moved {
                from: old.clone(),
                to: new.clone(),
                files,
                recordings,
            });
            progressed = true;
        }
        if !progressed {
            return Ok((moved, found));
        }
    }
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

/// Gives each interaction of a cassette the request (and key) `renormalize` makes of its own
/// (given the test the cassette is for, whose rules apply),
/// under the folder's lock, keeping every answer byte for byte; writes the file when a key
/// changed. For `[match]` rules added after the recordings were made. Returns each changed
/// position with its old and new key.
pub fn rekey_cassette(
    path: &Path,
    renormalize: impl Fn(&TestId, &RecordedRequest) -> RecordedRequest,
) -> Result<Vec<(usize, Key, Key)>, Error> {
    let dir = path.parent().expect("cassette paths have a folder");
    let _lock = lock_folder(dir, DEFAULT_LOCK_TIMEOUT)?;
    let mut cassette = read_cassette_with_blobs(path)?;
    let mut changed = Vec::new();
    for (index, x) in cassette.interactions.iter_mut().enumerate() {
        let request = renormalize(&cassette.test, &x.request);
        let key = Key::of(&request);
        if key != x.key {
            changed.push((index, x.key.clone(), key.clone()));
            x.request = request;
            x.key = key;
        }
    }
    if !changed.is_empty() {
        write_atomic(path, &cassette.to_bytes())?;
    }
    Ok(changed)
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
pub(crate) fn write_blobs(folder: &Path, cassette: &Cassette, root: &Path) -> Result<(), Error> {
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
pub(crate) fn is_dir(entry: &std::fs::DirEntry) -> bool {
    match entry.file_type() {
        Ok(t) if t.is_symlink() => entry.path().is_dir(),
        Ok(t) => t.is_dir(),
        Err(_) => entry.path().is_dir(),
    }
}

/// The `.json` files of one cassette folder, sorted; none when there is no such folder.
pub fn json_files(folder: &Path) -> Result<Vec<PathBuf>, Error> {
    let read = match std::fs::read_dir(folder) {
        Ok(read) => read,
        // No folder, or a file in its place: no cassette files there.
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            ) =>
        {
            return Ok(Vec::new())
        }
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

#[cfg(test)]
mod legacy_tests {
    use super::*;

    fn put(dir: &Path, folder: &str, test: &str, provider: &str) {
        let c = Cassette::new(&TestId::new(test), &ProviderName::new(provider).unwrap());
        std::fs::create_dir_all(dir.join(folder)).unwrap();
        std::fs::write(
            dir.join(folder).join(format!("{provider}.json")),
            c.to_bytes(),
        )
        .unwrap();
    }

    /// A folder the old rule named moves to its test's name; one that holds two tests, one
    /// whose new folder is taken, and a link stay, each with why; a move that frees a name lets
    /// the folder waiting for it move in the same call; nothing is lost.
    #[test]
    fn old_rule_folders_move_or_say_why_not() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        put(d, "chat--hello", "a.test.js > chat > hello", "openai");
        put(d, "shared", "a.test.js > 挨拶 > shared", "openai");
        put(d, "shared", "a.test.js > こんにちは > shared", "anthropic");
        put(d, "ping", "b.test.js > 挨拶 > ping", "openai");
        put(d, "b-test-js--挨拶--ping", "someone else", "openai");
        // A chain: `foo` waits for `c-test-js-foo`, whose own cassette moves on.
        put(d, "foo", "c.test.js foo", "openai");
        put(d, "c-test-js-foo", "c-test-js-foo 日", "openai");
        let outside = tempfile::tempdir().unwrap();
        put(outside.path(), "x", "l.test.js > x", "openai");
        std::os::unix::fs::symlink(outside.path().join("x"), d.join("x")).unwrap();

        let (moved, left) = move_legacy_folders(d).unwrap();
        let moved: Vec<String> = moved
            .iter()
            .map(|m| m.to.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert!(
            moved.contains(&"a-test-js--chat--hello".to_string()),
            "{moved:?}"
        );
        assert!(moved.contains(&"c-test-js-foo-日".to_string()), "{moved:?}");
        assert!(moved.contains(&"c-test-js-foo".to_string()), "{moved:?}");
        let stuck: Vec<(String, String)> = left
            .iter()
            .map(|l| {
                (
                    l.folder.file_name().unwrap().to_string_lossy().into_owned(),
                    l.stuck.clone().unwrap_or_default(),
                )
            })
            .collect();
        assert!(
            stuck
                .iter()
                .any(|(f, why)| f == "shared" && why.contains("2 tests")),
            "{stuck:?}"
        );
        assert!(
            stuck
                .iter()
                .any(|(f, why)| f == "ping" && why.contains("not empty")),
            "{stuck:?}"
        );
        assert!(
            stuck
                .iter()
                .any(|(f, why)| f == "x" && why.contains("symbolic link")),
            "{stuck:?}"
        );
        assert!(d.join("shared/anthropic.json").is_file() && d.join("ping/openai.json").is_file());
        assert!(outside.path().join("x/openai.json").is_file());
        // Found again, never moved twice.
        assert!(move_legacy_folders(d).unwrap().0.is_empty());
    }
}
