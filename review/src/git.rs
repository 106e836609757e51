//! Cassette files new, modified or deleted against git HEAD, and for modified ones how many
//! interactions were added, replaced, removed or left alone: what a pull request's reviewer
//! will see, told before it is pushed.

use crate::review::{paired_diffs, InteractionDiff};
use crate::Error;
use cassettes::BLOB_DIR;
use cassettes::{recording_ids, Cassette, Interaction, RecordingId};
pub use runlog::report::{Change, ChangeKind};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// The repository holding `cassette_dir`, its work tree, and the cassette folder relative to
/// it; `None` outside a repository.
fn open(cassette_dir: &Path) -> Result<Option<(git2::Repository, PathBuf, PathBuf)>, Error> {
    let start = cassette_dir
        .ancestors()
        .find(|p| p.exists())
        .unwrap_or(cassette_dir);
    let repo = match git2::Repository::discover(start) {
        Ok(repo) => repo,
        Err(_) => return Ok(None),
    };
    let Some(workdir) = repo.workdir() else {
        return Ok(None);
    };
    let workdir = workdir.canonicalize().map_err(|e| Error::io(workdir, e))?;
    let dir = match cassette_dir.canonicalize() {
        Ok(dir) => dir,
        // No cassette folder yet: nothing new, but committed cassettes may have been deleted.
        Err(_) => start
            .canonicalize()
            .map_err(|e| Error::io(start, e))?
            .join(cassette_dir.strip_prefix(start).unwrap_or(Path::new(""))),
    };
    let Ok(rel) = dir.strip_prefix(&workdir).map(Path::to_path_buf) else {
        return Ok(None);
    };
    Ok(Some((repo, workdir, rel)))
}

/// What the work tree's sources are now, outside `cassette_dir`: the commit checked out and,
/// for every file changed against it, its path, size and modification time, as one hash;
/// `None` outside a repository. Two runs with the same fingerprint ran the same code. Read
/// from what the file system says of each file, never from its bytes: a large untracked file
/// costs a `stat`, not a hash.
pub fn sources_fingerprint(cassette_dir: &Path) -> Option<String> {
    let (repo, workdir, rel) = open(cassette_dir).ok()??;
    let mut hasher = sha2::Sha256::new();
    use sha2::Digest as _;
    if let Ok(head) = repo.head().and_then(|h| h.peel_to_commit()) {
        hasher.update(head.id().as_bytes());
    }
    let mut options = git2::StatusOptions::new();
    options.include_untracked(true).recurse_untracked_dirs(true);
    let statuses = repo.statuses(Some(&mut options)).ok()?;
    let mut changed: Vec<(String, Option<String>)> = statuses
        .iter()
        .filter_map(|e| e.path().ok().map(str::to_string))
        .filter(|p| !Path::new(p).starts_with(&rel))
        .map(|p| {
            let stat = std::fs::metadata(workdir.join(&p)).ok().map(|m| {
                let modified = m
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map(|d| d.as_nanos())
                    .unwrap_or_default();
                format!("{}:{modified}", m.len())
            });
            (p, stat)
        })
        .collect();
    changed.sort();
    for (path, stat) in changed {
        hasher.update(path.as_bytes());
        hasher.update(stat.unwrap_or_default().as_bytes());
    }
    Some(hex::encode(hasher.finalize()))
}

/// The changed cassette files under `cassette_dir`, or `None` when it is not inside a git
/// repository.
pub fn changes_against_head(cassette_dir: &Path) -> Result<Option<Vec<Change>>, Error> {
    changes_against_head_after(cassette_dir, |_| None)
}

/// [`changes_against_head`], where `read` gives the number of interactions of a cassette file
/// (by its path in the work tree) that the caller already read whole and found sound: a new
/// file's count is then taken from it rather than the file being read and parsed again.
pub fn changes_against_head_after(
    cassette_dir: &Path,
    read: impl Fn(&Path) -> Option<usize>,
) -> Result<Option<Vec<Change>>, Error> {
    let Some((repo, workdir, rel)) = open(cassette_dir)? else {
        return Ok(None);
    };
    let mut opts = git2::StatusOptions::new();
    opts.include_untracked(true)
        .recurse_untracked_dirs(true)
        .include_ignored(false)
        .pathspec(&rel);
    let statuses = repo.statuses(Some(&mut opts))?;
    let head = repo.head().ok().and_then(|h| h.peel_to_tree().ok());
    let mut out = Vec::new();
    for entry in statuses.iter() {
        let Ok(path) = entry.path().map(PathBuf::from) else {
            continue;
        };
        if path.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let s = entry.status();
        let kind = if s.is_wt_deleted() || s.is_index_deleted() {
            ChangeKind::Deleted
        } else if s.is_wt_new() || s.is_index_new() {
            ChangeKind::New
        } else if s.is_wt_modified()
            || s.is_index_modified()
            || s.is_wt_renamed()
            || s.is_index_renamed()
        {
            ChangeKind::Modified
        } else {
            continue;
        };
        if let (ChangeKind::New, Some(added)) = (kind, read(&workdir.join(&path))) {
            out.push(Change {
                path,
                kind,
                added,
                replaced: 0,
                removed: 0,
                unchanged: 0,
                error: None,
                moved_from: None,
            });
            continue;
        }
        // HEAD's blob, by the id the status already holds: staged, the HEAD-to-index side;
        // else the index's, which is HEAD's. No tree is walked for it.
        let old = entry
            .head_to_index()
            .map(|d| d.old_file().id())
            .or_else(|| entry.index_to_workdir().map(|d| d.old_file().id()))
            .filter(|id| !id.is_zero())
            .and_then(|id| repo.find_blob(id).ok())
            .map(|b| String::from_utf8_lossy(b.content()).into_owned());
        let new = match cassettes::read_text(&workdir.join(&path)) {
            Ok(text) => Some(Ok(text)),
            Err(e @ cassettes::Error::NotText { .. }) => Some(Err(e)),
            Err(_) => None,
        };
        let parse = |text: Option<&String>| -> Result<Vec<Interaction>, Error> {
            match text {
                Some(t) => Ok(Cassette::parse(&path, t)?.interactions),
                None => Ok(Vec::new()),
            }
        };
        let mut change = Change {
            path: path.clone(),
            kind,
            added: 0,
            replaced: 0,
            removed: 0,
            unchanged: 0,
            error: None,
            moved_from: None,
        };
        let new = match new {
            Some(Err(e)) => {
                change.error = Some(e.to_string());
                out.push(change);
                continue;
            }
            Some(Ok(text)) => Some(text),
            None => None,
        };
        match (parse(old.as_ref()), parse(new.as_ref())) {
            (Ok(old), Ok(new)) => count(&old, &new, &mut change),
            (Err(e), _) | (_, Err(e)) => change.error = Some(e.to_string()),
        }
        out.push(change);
    }
    // The cassette folder's tree, found once: looking each file up from HEAD's root would
    // read this (large) tree again for every file.
    let cassettes_at_head = head
        .as_ref()
        .and_then(|t| t.get_path(&rel).ok())
        .and_then(|e| e.to_object(&repo).ok())
        .and_then(|o| o.into_tree().ok());
    find_moves(&repo, cassettes_at_head.as_ref(), &rel, &workdir, &mut out);
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(Some(out))
}

/// A deleted file and a new one of the same provider holding the same recordings are one file
/// moved (a renamed test): one `Moved` change, as `diff` shows it. Files are read only when a
/// deletion and an addition of one provider's name meet.
fn find_moves(
    repo: &git2::Repository,
    head: Option<&git2::Tree<'_>>,
    rel: &Path,
    workdir: &Path,
    changes: &mut Vec<Change>,
) {
    let ids_at_head = |path: &Path| -> Option<Vec<RecordingId>> {
        let blob = head?
            .get_path(path.strip_prefix(rel).ok()?)
            .ok()?
            .to_object(repo)
            .ok()?
            .peel_to_blob()
            .ok()?;
        let text = std::str::from_utf8(blob.content()).ok()?;
        Some(recording_ids(
            &Cassette::parse(path, text).ok()?.interactions,
        ))
    };
    let ids_in_tree = |path: &Path| -> Option<Vec<RecordingId>> {
        let text = cassettes::read_text(&workdir.join(path)).ok()?;
        Some(recording_ids(
            &Cassette::parse(path, &text).ok()?.interactions,
        ))
    };
    let entries: Vec<(ChangeKind, &Path)> =
        changes.iter().map(|c| (c.kind, c.path.as_path())).collect();
    let gone = moved_pairs(&entries, |n| match entries[n].0 {
        ChangeKind::Deleted => ids_at_head(entries[n].1),
        _ => ids_in_tree(entries[n].1),
    });
    for &(d, n) in &gone {
        let from = changes[d].path.clone();
        let moved = &mut changes[n];
        moved.kind = ChangeKind::Moved;
        moved.unchanged = moved.added;
        moved.added = 0;
        moved.moved_from = Some(from);
    }
    drop_moved(changes, &gone);
}

/// One cassette file that differs between the base and the work tree, told interaction by
/// interaction.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FileDiff {
    /// Relative to the repository's root.
    #[serde(with = "cassettes::lossy_path")]
    pub path: PathBuf,
    /// Whose cassette it is.
    pub test: cassettes::TestId,
    /// The provider's name.
    pub provider: String,
    /// How the file changed.
    pub kind: ChangeKind,
    /// Its interactions added, removed and changed.
    pub interactions: Vec<InteractionDiff>,
    /// Where a moved cassette was in the base.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "cassettes::lossy_path::option"
    )]
    pub moved_from: Option<PathBuf>,
    /// How many recordings a moved cassette holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recordings: Option<usize>,
    /// Set when one side does not parse.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Each interaction's position in the base's cassette and the work tree's, for review.
    #[serde(skip)]
    pub positions: Vec<(Option<usize>, Option<usize>)>,
    /// Both sides as parsed (blobs read), for review to restore the base's.
    #[serde(skip)]
    pub sides: Sides,
}

/// A cassette as the base has it and as the work tree has it.
#[derive(Clone, Debug, Default)]
pub struct Sides {
    /// In the base commit.
    pub base: Option<Cassette>,
    /// In the work tree.
    pub work: Option<Cassette>,
}

/// Every changed cassette between a base commit and the work tree.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Diff {
    /// What the work tree was compared with, e.g. `merge base of HEAD and main (1a2b3c4d)`.
    pub base: String,
    /// Every cassette file that changed.
    pub files: Vec<FileDiff>,
    /// The repository's work tree, which the files' paths are relative to.
    #[serde(skip)]
    pub workdir: PathBuf,
}

/// What the work tree's cassettes are compared with.
#[derive(Clone, Copy, Debug)]
pub enum Base<'a> {
    /// A revision such as `origin/main`; `None`: the merge base of HEAD with the default
    /// branch, else HEAD.
    Rev(Option<&'a str>),
    /// git's index: what is staged, as review accepts it.
    Index,
}

/// Compares the cassettes of the work tree with those of `base`. `only` keeps the files under
/// any of these paths (absolute, or relative to the work tree).
pub fn diff_against(cassette_dir: &Path, base: Base<'_>, only: &[PathBuf]) -> Result<Diff, Error> {
    diff_against_with(cassette_dir, base, only, None)
}

/// What [`diff_against_with`] shows each file to: the work tree's root, and the file.
pub type Visit<'a> = dyn FnMut(&Path, &mut FileDiff) + 'a;

/// [`diff_against`] for a listing: with `visit`, each file is shown to it whole (its parsed
/// cassettes in [`FileDiff::sides`]; it may take what it keeps), and then its sides are dropped: memory follows what
/// changed, not the cassettes. A modified file is visited as soon as it is read; a new or
/// deleted one once moves are paired.
pub fn diff_against_with(
    cassette_dir: &Path,
    base: Base<'_>,
    only: &[PathBuf],
    mut visit: Option<&mut Visit<'_>>,
) -> Result<Diff, Error> {
    let Some((repo, workdir, rel)) = open(cassette_dir)? else {
        return Err(Error::NotInRepository(cassette_dir.to_path_buf()));
    };
    let (commit, index, base) = match base {
        Base::Rev(name) => {
            let (commit, label) = resolve_base(&repo, name)?;
            (commit, None, label)
        }
        Base::Index => (
            None,
            Some(repo.index()?),
            "the index (what is staged)".to_string(),
        ),
    };
    // git's own view of what changed (the index's stat data, blob ids): an unchanged
    // cassette is never read, so memory follows what changed, not the tree.
    let mut opts = git2::DiffOptions::new();
    opts.pathspec(&rel)
        .include_untracked(true)
        .recurse_untracked_dirs(true)
        .include_ignored(true)
        .recurse_ignored_dirs(true)
        .include_typechange(true);
    let tree = commit.as_ref().map(|c| c.tree()).transpose()?;
    let changed = match (&index, &tree) {
        (Some(index), _) => repo.diff_index_to_workdir(Some(index), Some(&mut opts))?,
        (None, tree) => repo.diff_tree_to_workdir_with_index(tree.as_ref(), Some(&mut opts))?,
    };
    // `<folder>/<provider>.json` under the cassette folder: a cassette.
    let is_cassette = |path: &Path| {
        path.strip_prefix(&rel)
            .is_ok_and(|inside| inside.components().count() == 2)
            && path.extension().is_some_and(|x| x == "json")
    };
    let mut old: BTreeMap<PathBuf, Option<git2::Oid>> = BTreeMap::new();
    let mut new: BTreeSet<PathBuf> = BTreeSet::new();
    for delta in changed.deltas() {
        for (side, was) in [(delta.old_file(), true), (delta.new_file(), false)] {
            let Some(path) = side.path().filter(|p| is_cassette(p)) else {
                continue;
            };
            if !side.id().is_zero() && was {
                old.insert(path.to_path_buf(), Some(side.id()));
            }
            if !was && workdir.join(path).is_file() {
                new.insert(path.to_path_buf());
            }
        }
    }
    let read_old = |path: &Path| -> Option<String> {
        let id = (*old.get(path)?)?;
        let blob = repo.find_blob(id).ok()?;
        Some(String::from_utf8_lossy(blob.content()).into_owned())
    };
    // Files that are not text: listed as broken, their bytes compared as text with U+FFFD.
    let read_new = |path: &Path| -> Result<Option<(String, Option<cassettes::Error>)>, Error> {
        if !new.contains(path) {
            return Ok(None);
        }
        let file = workdir.join(path);
        match cassettes::read_text(&file) {
            Ok(text) => Ok(Some((text, None))),
            Err(e @ cassettes::Error::NotText { .. }) => {
                let bytes = std::fs::read(&file).map_err(|e| Error::io(&file, e))?;
                Ok(Some((
                    String::from_utf8_lossy(&bytes).into_owned(),
                    Some(e),
                )))
            }
            Err(e) => Err(e.into()),
        }
    };
    let only: Vec<PathBuf> = only
        .iter()
        .map(|p| {
            let abs = p.canonicalize().unwrap_or_else(|_| workdir.join(p));
            abs.strip_prefix(&workdir)
                .map(Path::to_path_buf)
                .unwrap_or(abs)
        })
        .collect();
    let mut paths: Vec<PathBuf> = old.keys().chain(new.iter()).cloned().collect();
    paths.sort();
    paths.dedup();
    let mut files = Vec::new();
    // Whole files added or deleted, parsed, to find the cassettes of a renamed test.
    let mut whole: BTreeMap<PathBuf, Cassette> = BTreeMap::new();
    for path in &paths {
        if !only.is_empty() && !only.iter().any(|o| path.starts_with(o)) {
            continue;
        }
        let was = read_old(path);
        let (now, not_text) = match read_new(path)? {
            Some((text, broken)) => (Some(text), broken),
            None => (None, None),
        };
        let (was, now) = (was.as_ref(), now.as_ref());
        if was == now {
            continue;
        }
        let kind = match (was, now) {
            (None, _) => ChangeKind::New,
            (_, None) => ChangeKind::Deleted,
            _ => ChangeKind::Modified,
        };
        let parse = |text: Option<&String>| -> Result<Option<Cassette>, Error> {
            text.map(|t| Cassette::parse(path, t))
                .transpose()
                .map_err(Error::from)
        };
        let folder = path.parent().unwrap_or(Path::new("")).join(BLOB_DIR);
        // Blob sizes for the review: from the base (a commit or the index) on one side, the
        // work tree on the other.
        let old_blob = |sha: &str| {
            let id = match &index {
                Some(index) => index.get_path(&folder.join(sha), 0)?.id,
                None => {
                    let tree = commit.as_ref()?.tree().ok()?;
                    tree.get_path(&folder.join(sha)).ok()?.id()
                }
            };
            let blob = repo.find_blob(id).ok()?;
            Some(bytes::Bytes::copy_from_slice(blob.content()))
        };
        let new_blob = |sha: &str| {
            std::fs::read(workdir.join(&folder).join(sha))
                .ok()
                .map(Into::into)
        };
        let parse_old = |text| {
            parse(text).map(|c| {
                c.map(|mut c: Cassette| {
                    c.fill_blobs(old_blob);
                    c
                })
            })
        };
        let parse_new = |text| {
            parse(text).map(|c| {
                c.map(|mut c: Cassette| {
                    c.fill_blobs(new_blob);
                    c
                })
            })
        };
        let mut file = FileDiff {
            path: path.clone(),
            test: cassettes::TestId::new(""),
            provider: String::new(),
            kind,
            interactions: Vec::new(),
            moved_from: None,
            recordings: None,
            error: None,
            positions: Vec::new(),
            sides: Sides::default(),
        };
        if let Some(e) = &not_text {
            file.error = Some(e.to_string());
            files.push(file);
            continue;
        }
        match (parse_old(was), parse_new(now)) {
            (Ok(a), Ok(b)) => {
                let named = b.as_ref().or(a.as_ref()).expect("one side exists");
                file.test = named.test.clone();
                file.provider = named.provider.to_string();
                let paired = paired_diffs(a.as_ref(), b.as_ref());
                file.positions = paired.iter().map(|p| (p.old, p.new)).collect();
                file.interactions = paired.into_iter().map(|p| p.diff).collect();
                if let (None, Some(c)) | (Some(c), None) = (&a, &b) {
                    whole.insert(path.clone(), c.clone());
                }
                file.sides = Sides { base: a, work: b };
                if file.interactions.is_empty() {
                    // Only ids, timestamps or layout moved: nothing for a reviewer.
                    continue;
                }
            }
            (Err(e), _) | (_, Err(e)) => file.error = Some(e.to_string()),
        }
        if let (Some(visit), ChangeKind::Modified) = (visit.as_mut(), file.kind) {
            visit(&workdir, &mut file);
            file.sides = Sides::default();
        }
        files.push(file);
    }
    pair_moves(&mut files, &whole);
    drop(whole);
    if let Some(visit) = visit.as_mut() {
        for file in files.iter_mut().filter(|f| f.kind != ChangeKind::Modified) {
            visit(&workdir, file);
            file.sides = Sides::default();
        }
    }
    Ok(Diff {
        base,
        files,
        workdir,
    })
}

/// A deleted cassette and a new one of the same provider that hold the same requests in the
/// same order are one cassette moved (its test renamed): one entry, with what changed in it.
fn pair_moves(files: &mut Vec<FileDiff>, whole: &BTreeMap<PathBuf, Cassette>) {
    let entries: Vec<(ChangeKind, &Path)> =
        files.iter().map(|f| (f.kind, f.path.as_path())).collect();
    let moved = moved_pairs(&entries, |n| {
        whole
            .get(entries[n].1)
            .map(|c| recording_ids(&c.interactions))
    });
    for &(d, n) in &moved {
        let (old, new) = (&whole[&files[d].path], &whole[&files[n].path]);
        let paired = paired_diffs(Some(old), Some(new));
        let from = files[d].path.clone();
        let file = &mut files[n];
        file.kind = ChangeKind::Moved;
        file.moved_from = Some(from);
        file.recordings = Some(new.interactions.len());
        file.positions = paired.iter().map(|p| (p.old, p.new)).collect();
        file.interactions = paired.into_iter().map(|p| p.diff).collect();
        file.sides = Sides {
            base: Some(old.clone()),
            work: Some(new.clone()),
        };
    }
    drop_moved(files, &moved);
}

/// Which deleted cassette moved to which new one (deleted, new): a new one of the same file
/// name (provider) that holds the same recordings; each new one is paired once. `ids` reads an
/// entry's recordings, the base's for a deleted one and the work tree's for a new one, and is
/// asked only where a deletion and an addition of one name meet.
fn moved_pairs(
    entries: &[(ChangeKind, &Path)],
    ids: impl Fn(usize) -> Option<Vec<RecordingId>>,
) -> Vec<(usize, usize)> {
    let mut moved: Vec<(usize, usize)> = Vec::new();
    for (d, (kind, path)) in entries.iter().enumerate() {
        if *kind != ChangeKind::Deleted {
            continue;
        }
        let Some(old) = ids(d) else {
            continue;
        };
        let to = entries.iter().enumerate().position(|(n, (kind, new))| {
            *kind == ChangeKind::New
                && new.file_name() == path.file_name()
                && !moved.iter().any(|(_, m)| *m == n)
                && ids(n).as_ref() == Some(&old)
        });
        if let Some(n) = to {
            moved.push((d, n));
        }
    }
    moved
}

/// `items` without the deleted side of each move: the new side stands for it.
fn drop_moved<T>(items: &mut Vec<T>, moved: &[(usize, usize)]) {
    let mut i = 0;
    items.retain(|_| {
        i += 1;
        !moved.iter().any(|(d, _)| *d == i - 1)
    });
}

/// The commit to compare with, and how to name it.
fn resolve_base<'r>(
    repo: &'r git2::Repository,
    base: Option<&str>,
) -> Result<(Option<git2::Commit<'r>>, String), Error> {
    let short = |c: &git2::Commit| c.id().to_string()[..8].to_string();
    if let Some(name) = base {
        let commit = repo
            .revparse_single(name)
            .and_then(|o| o.peel_to_commit())
            .map_err(|source| Error::NoBase {
                name: name.to_string(),
                source,
            })?;
        let label = format!("{name} ({})", short(&commit));
        return Ok((Some(commit), label));
    }
    let Some(head) = repo.head().ok().and_then(|h| h.peel_to_commit().ok()) else {
        return Ok((None, "an empty repository".into()));
    };
    for name in [
        "refs/remotes/origin/HEAD",
        "refs/remotes/origin/main",
        "refs/remotes/origin/master",
        "refs/heads/main",
        "refs/heads/master",
    ] {
        let Some(target) = repo
            .find_reference(name)
            .and_then(|r| r.resolve())
            .ok()
            .and_then(|r| r.target())
        else {
            continue;
        };
        if let Ok(base) = repo
            .merge_base(head.id(), target)
            .and_then(|id| repo.find_commit(id))
        {
            let branch = name.rsplit_once("refs/").map_or(name, |(_, b)| b);
            let branch = branch
                .trim_start_matches("heads/")
                .trim_start_matches("remotes/");
            let label = format!("merge base of HEAD and {branch} ({})", short(&base));
            return Ok((Some(base), label));
        }
    }
    let label = format!("HEAD ({})", short(&head));
    Ok((Some(head), label))
}

/// Interactions are matched by key and ordinal, as replay matches them.
fn count(old: &[Interaction], new: &[Interaction], change: &mut Change) {
    let index = |list: &[Interaction]| -> HashMap<RecordingId, usize> {
        recording_ids(list)
            .into_iter()
            .enumerate()
            .map(|(i, id)| (id, i))
            .collect()
    };
    let (old_index, new_index) = (index(old), index(new));
    for (id, &i) in &new_index {
        match old_index.get(id) {
            None => change.added += 1,
            Some(&j) if old[j] == new[i] => change.unchanged += 1,
            Some(_) => change.replaced += 1,
        }
    }
    change.removed = old_index
        .keys()
        .filter(|id| !new_index.contains_key(*id))
        .count();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{commit_all, interaction};
    fn write(path: &Path, interactions: Vec<Interaction>) {
        let mut c = Cassette::new(
            &cassettes::TestId::new("t"),
            &cassettes::ProviderName::new("openai").unwrap(),
        );
        c.interactions = interactions;
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, c.to_bytes()).unwrap();
    }

    #[test]
    fn new_modified_and_deleted_against_head() {
        let dir = tempfile::tempdir().unwrap();
        let repo = git2::Repository::init(dir.path()).unwrap();
        let cas = dir.path().join("tests/cassettes");
        write(
            &cas.join("a/openai.json"),
            vec![
                interaction("x", "1"),
                interaction("y", "2"),
                interaction("z", "3"),
            ],
        );
        write(&cas.join("gone/openai.json"), vec![interaction("g", "1")]);
        commit_all(&repo);
        assert!(changes_against_head(&cas).unwrap().unwrap().is_empty());

        write(
            &cas.join("a/openai.json"),
            vec![
                interaction("x", "1"),
                interaction("y", "22"),
                interaction("w", "4"),
            ],
        );
        write(&cas.join("b/anthropic.json"), vec![interaction("n", "1")]);
        std::fs::remove_dir_all(cas.join("gone")).unwrap();
        let changes = changes_against_head(&cas).unwrap().unwrap();
        let by = |p: &str| changes.iter().find(|c| c.path == Path::new(p)).unwrap();
        let a = by("tests/cassettes/a/openai.json");
        assert_eq!(
            (a.kind, a.added, a.replaced, a.removed, a.unchanged),
            (ChangeKind::Modified, 1, 1, 1, 1)
        );
        assert_eq!(by("tests/cassettes/b/anthropic.json").kind, ChangeKind::New);
        assert_eq!(
            by("tests/cassettes/gone/openai.json").kind,
            ChangeKind::Deleted
        );
        assert_eq!(changes.len(), 3);
    }

    /// A new file whose interactions the caller already counted is not parsed again: here a
    /// corrupt one, which unread is reported as such. A modified one is always compared.
    #[test]
    fn a_new_file_already_read_is_counted_from_it() {
        let dir = tempfile::tempdir().unwrap();
        let repo = git2::Repository::init(dir.path()).unwrap();
        let cas = dir.path().join("tests/cassettes");
        write(&cas.join("a/openai.json"), vec![interaction("x", "1")]);
        commit_all(&repo);
        write(
            &cas.join("a/openai.json"),
            vec![interaction("x", "1"), interaction("y", "2")],
        );
        std::fs::create_dir_all(cas.join("b")).unwrap();
        std::fs::write(cas.join("b/openai.json"), "{ not json").unwrap();
        let new = dir.path().join("tests/cassettes/b/openai.json");

        let unread = changes_against_head(&cas).unwrap().unwrap();
        assert!(unread[1].error.is_some(), "{:?}", unread[1]);
        let read = changes_against_head_after(&cas, |path| (path == new).then_some(7))
            .unwrap()
            .unwrap();
        let by = |p: &str| read.iter().find(|c| c.path == Path::new(p)).unwrap();
        let b = by("tests/cassettes/b/openai.json");
        assert_eq!(
            (b.kind, b.added, b.error.is_none()),
            (ChangeKind::New, 7, true)
        );
        let a = by("tests/cassettes/a/openai.json");
        assert_eq!((a.kind, a.added, a.unchanged), (ChangeKind::Modified, 1, 1));
    }

    /// An audio answer in a blob, re-recorded longer: the review names both sizes and hashes,
    /// the old one read from the base commit.
    #[test]
    fn a_changed_blob_shows_its_size_and_hash() {
        let dir = tempfile::tempdir().unwrap();
        let repo = git2::Repository::init(dir.path()).unwrap();
        let folder = dir.path().join("tests/cassettes/a");
        let record = |len: usize| {
            let audio = bytes::Bytes::from(vec![0xffu8; len]);
            let mut x = interaction("speak", "{}");
            x.response = cassettes::RecordedResponse::with_body(200, Default::default(), &audio);
            let sha = cassettes::sha256_hex(&audio);
            std::fs::create_dir_all(folder.join(BLOB_DIR)).unwrap();
            std::fs::write(folder.join(BLOB_DIR).join(&sha), &audio).unwrap();
            write(&folder.join("openai.json"), vec![x]);
            sha
        };
        let before = record(70_000);
        commit_all(&repo);
        let after = record(80_000);
        std::fs::remove_file(folder.join(BLOB_DIR).join(&before)).unwrap();
        let diff = diff_against(
            &dir.path().join("tests/cassettes"),
            Base::Rev(Some("HEAD")),
            &[],
        )
        .unwrap();
        let answer = diff.files[0].interactions[0].answer_diff.clone().unwrap();
        assert!(
            answer.contains(&format!("-binary: 70000 bytes, sha256 {before}"))
                && answer.contains(&format!("+binary: 80000 bytes, sha256 {after}")),
            "{answer}"
        );
    }

    /// A pull request's branch: by default the diff is against where it left the default
    /// branch, so the branch's own commits count.
    #[test]
    fn diff_defaults_to_the_merge_base_with_the_default_branch() {
        let dir = tempfile::tempdir().unwrap();
        let repo = git2::Repository::init(dir.path()).unwrap();
        let cas = dir.path().join("tests/cassettes");
        let cassette = |answer: &str| {
            let mut c = Cassette::new(
                &cassettes::TestId::new("c::t$a"),
                &cassettes::ProviderName::new("openai").unwrap(),
            );
            c.interactions = vec![interaction("q", answer)];
            c
        };
        let write = |c: &Cassette| {
            std::fs::create_dir_all(cas.join("c--t--a")).unwrap();
            std::fs::write(cas.join("c--t--a/openai.json"), c.to_bytes()).unwrap();
        };
        write(&cassette(r#"{"v":1}"#));
        commit_all(&repo);
        let main = repo.head().unwrap().name().unwrap().to_string();
        let base = repo.head().unwrap().peel_to_commit().unwrap();
        repo.branch("feature", &base, false).unwrap();
        repo.set_head("refs/heads/feature").unwrap();
        write(&cassette(r#"{"v":2}"#));
        commit_all(&repo);
        let diff = diff_against(&cas, Base::Rev(None), &[]).unwrap();
        assert!(
            diff.base.starts_with("merge base of HEAD and"),
            "{}",
            diff.base
        );
        assert_eq!(diff.files.len(), 1, "the branch's own commit counts");
        assert_eq!(diff.files[0].kind, ChangeKind::Modified);
        // Against HEAD, the committed change is gone.
        assert!(diff_against(&cas, Base::Rev(Some("HEAD")), &[])
            .unwrap()
            .files
            .is_empty());
        assert!(
            diff_against(&cas, Base::Rev(Some(&main)), &[])
                .unwrap()
                .files
                .len()
                == 1
        );
        let missing = diff_against(&cas, Base::Rev(Some("origin/nope")), &[]).unwrap_err();
        assert!(missing.to_string().contains("git fetch"), "{missing}");
    }

    #[test]
    fn outside_git_there_is_no_report() {
        let dir = tempfile::tempdir().unwrap();
        let cas = dir.path().join("cas");
        std::fs::create_dir_all(&cas).unwrap();
        if git2::Repository::discover(&cas).is_ok() {
            // A developer's temp dir inside some repository: nothing this test can say.
            eprintln!("SKIPPED: {} is inside a git repository", cas.display());
            return;
        }
        assert_eq!(changes_against_head(&cas).unwrap(), None);
    }
}
