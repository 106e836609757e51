//! Review's unit: one interaction that differs from the base, named so that a person or a
//! script can point at it (`<slug>/<provider>#<n>`, its position in the cassette; `#-<n>` for
//! one only the base has, at its position there), and rejecting it: the base's interaction
//! restored under the folder's lock.

use crate::git::{Diff, FileDiff};
use crate::review::{Change, InteractionDiff};
use crate::Error;
use cassettes::Interaction;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One interaction that differs from the base.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Pending {
    /// `<slug>/<provider>#<n>`.
    pub id: String,
    /// Whose cassette it is.
    pub test: cassettes::TestId,
    /// The provider.
    pub provider: String,
    /// The cassette, relative to the repository's root.
    #[serde(with = "cassettes::lossy_path")]
    pub cassette: PathBuf,
    /// What differs.
    #[serde(flatten)]
    pub diff: InteractionDiff,
    /// Names this difference exactly: it changes when either side does, so an accepted change
    /// that is recorded again is pending again.
    pub fingerprint: String,
    #[serde(skip)]
    at: At,
}

/// Where a pending interaction is, and what restoring the base puts there.
#[derive(Clone, Debug)]
struct At {
    /// The cassette, absolute.
    path: PathBuf,
    base: Option<Interaction>,
    base_position: Option<usize>,
    work_position: Option<usize>,
}

/// Every interaction of `diff` that differs, in file order.
pub fn pending(diff: &Diff) -> Vec<Pending> {
    diff.files
        .iter()
        .flat_map(|file| pending_in(&diff.workdir, file, true))
        .collect()
}

/// The pending interactions of one file of a diff of the work tree at `workdir`, while the
/// file still has its sides (see [`crate::git::diff_against_with`]). Without `restorable`
/// (a listing), they cannot be rejected: the base's interaction is not kept.
pub fn pending_in(workdir: &Path, file: &FileDiff, restorable: bool) -> Vec<Pending> {
    if file.error.is_some() {
        return Vec::new();
    }
    file.interactions
        .iter()
        .zip(&file.positions)
        .map(|(d, &(old, new))| {
            let mut p = one(workdir, file, d, old, new);
            if !restorable {
                p.at.base = None;
            }
            p
        })
        .collect()
}

fn one(
    workdir: &Path,
    file: &FileDiff,
    d: &InteractionDiff,
    old: Option<usize>,
    new: Option<usize>,
) -> Pending {
    let base = old.and_then(|i| file.sides.base.as_ref()?.interactions.get(i).cloned());
    let work = new.and_then(|i| file.sides.work.as_ref()?.interactions.get(i));
    let folder = file
        .path
        .parent()
        .and_then(Path::file_name)
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let position = match (new, old) {
        (Some(n), _) => format!("{}", n + 1),
        (None, Some(o)) => format!("-{}", o + 1),
        (None, None) => "0".into(),
    };
    let id = format!("{folder}/{}#{position}", file.provider);
    let mut hash = Sha256::new();
    hash.update(id.as_bytes());
    for side in [base.as_ref(), work] {
        hash.update(b"\0");
        if let Some(x) = side {
            hash.update(serde_json::to_vec(x).unwrap_or_default());
        }
    }
    Pending {
        id,
        test: file.test.clone(),
        provider: file.provider.clone(),
        cassette: file.path.clone(),
        diff: d.clone(),
        fingerprint: hex::encode(hash.finalize()),
        at: At {
            path: workdir.join(&file.path),
            base,
            base_position: old,
            work_position: new,
        },
    }
}

impl Pending {
    /// True when the interaction is only in the base: rejecting it brings it back.
    pub fn is_removed(&self) -> bool {
        self.diff.change == Change::Removed
    }
}

/// Restores the base's interaction of each of `rejected` in the work tree, one locked write
/// per cassette: a changed one gets its old answer back, an added one goes, a removed one
/// returns where it was. `diff` is what they were found in; a cassette written since fails as
/// stale and is left as it is. Returns how many were restored.
pub fn reject(diff: &Diff, cassette_dir: &Path, rejected: &[&Pending]) -> Result<usize, Error> {
    let mut by_file: BTreeMap<&Path, Vec<&Pending>> = BTreeMap::new();
    for p in rejected {
        by_file.entry(&p.at.path).or_default().push(p);
    }
    let mut done = 0;
    for (path, list) in by_file {
        let file = diff
            .files
            .iter()
            .find(|f| diff.workdir.join(&f.path) == path)
            .expect("a pending interaction comes from a file of its diff");
        let expected = cassettes::sealed(file.sides.work.as_ref());
        // A file of the diff has its cassette on one side at least.
        let Some(named) = file.sides.work.as_ref().or(file.sides.base.as_ref()) else {
            continue;
        };
        cassettes::rewrite_cassette(
            path,
            cassette_dir,
            &named.test,
            &named.provider,
            &expected,
            |list_now| {
                let mut slots: Vec<Option<Interaction>> =
                    std::mem::take(list_now).into_iter().map(Some).collect();
                for p in list.iter().filter(|p| p.at.work_position.is_some()) {
                    let at = p.at.work_position.expect("filtered");
                    if let Some(slot) = slots.get_mut(at) {
                        *slot = p.at.base.clone();
                    }
                }
                let mut kept: Vec<Interaction> = slots.into_iter().flatten().collect();
                let mut removed: Vec<&&Pending> = list
                    .iter()
                    .filter(|p| p.at.work_position.is_none())
                    .collect();
                removed.sort_by_key(|p| p.at.base_position);
                for p in removed {
                    if let Some(x) = p.at.base.clone() {
                        let at = p.at.base_position.unwrap_or(kept.len()).min(kept.len());
                        kept.insert(at, x);
                    }
                }
                *list_now = kept;
            },
        )?;
        done += list.len();
    }
    Ok(done)
}

/// Stages each of `accepted` in git's index, as `git add -p` would stage that interaction
/// alone: the cassette as the index holds it (`diff`'s base, which is the index) with the
/// interaction taken from the work tree (sealed as recorded), and the blobs it refers to.
/// `git commit` then commits exactly what was accepted. Returns how many were staged.
pub fn stage(diff: &Diff, accepted: &[&Pending]) -> Result<usize, Error> {
    let repo = git2::Repository::open(&diff.workdir)?;
    let mut index = repo.index()?;
    let mut by_file: BTreeMap<&Path, Vec<&Pending>> = BTreeMap::new();
    for p in accepted {
        by_file.entry(&p.cassette).or_default().push(p);
    }
    let mut done = 0;
    for (rel, list) in by_file {
        let file = diff
            .files
            .iter()
            .find(|f| f.path == rel)
            .expect("a pending interaction comes from a file of its diff");
        let (base, work) = (file.sides.base.as_ref(), file.sides.work.as_ref());
        let Some(named) = work.or(base) else {
            continue;
        };
        let mut slots: Vec<Option<Interaction>> = base
            .map(|c| c.interactions.iter().cloned().map(Some).collect())
            .unwrap_or_default();
        let mut added: Vec<(usize, Interaction)> = Vec::new();
        for p in &list {
            let now =
                p.at.work_position
                    .and_then(|w| work?.interactions.get(w).cloned());
            match (p.at.base_position, p.at.work_position) {
                (Some(b), _) => {
                    if let Some(slot) = slots.get_mut(b) {
                        *slot = now;
                    }
                }
                (None, Some(w)) => added.extend(now.map(|x| (w, x))),
                (None, None) => {}
            }
        }
        added.sort_by_key(|(w, _)| *w);
        let mut staged = cassettes::Cassette::new(&named.test, &named.provider);
        staged.interactions = slots.into_iter().flatten().collect();
        staged
            .interactions
            .extend(added.into_iter().map(|(_, x)| x));
        if staged.interactions.is_empty() && work.is_none() {
            // The last interaction of a deleted cassette: the deletion is staged.
            index.remove_path(rel)?;
        } else {
            let bytes = staged.to_bytes();
            let entry = git2::IndexEntry {
                ctime: git2::IndexTime::new(0, 0),
                mtime: git2::IndexTime::new(0, 0),
                dev: 0,
                ino: 0,
                mode: 0o100644,
                uid: 0,
                gid: 0,
                file_size: bytes.len() as u32,
                id: git2::Oid::ZERO_SHA1,
                flags: 0,
                flags_extended: 0,
                path: rel.to_string_lossy().as_bytes().to_vec(),
            };
            index.add_frombuffer(&entry, &bytes)?;
            // The blobs the staged interactions refer to, from the work tree.
            let folder = rel
                .parent()
                .unwrap_or(Path::new(""))
                .join(cassettes::BLOB_DIR);
            for blob in staged.blobs() {
                let path = folder.join(&blob.sha256);
                if diff.workdir.join(&path).is_file() {
                    index.add_path(&path)?;
                }
            }
        }
        done += list.len();
    }
    index.write()?;
    Ok(done)
}

/// How many cassette files differ between HEAD and the index: what accepting staged.
pub fn staged_files(diff: &Diff, cassette_dir: &Path) -> Result<usize, Error> {
    let repo = git2::Repository::open(&diff.workdir)?;
    let dir = cassette_dir
        .canonicalize()
        .map_err(|e| Error::io(cassette_dir, e))?;
    let rel = dir
        .strip_prefix(&diff.workdir)
        .unwrap_or(&dir)
        .to_path_buf();
    let mut opts = git2::StatusOptions::new();
    opts.pathspec(&rel).include_untracked(false);
    let statuses = repo.statuses(Some(&mut opts))?;
    Ok(statuses
        .iter()
        .filter(|s| s.path().is_ok_and(|p| p.ends_with(".json")))
        .filter(|s| {
            s.status().intersects(
                git2::Status::INDEX_NEW
                    | git2::Status::INDEX_MODIFIED
                    | git2::Status::INDEX_DELETED,
            )
        })
        .count())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{commit_all, interaction};
    use cassettes::{Cassette, RecordedResponse};

    /// Records `xs` as test `c$t`'s OpenAI cassette under `cassettes`, in order.
    fn record(cassettes: &Path, xs: impl IntoIterator<Item = Interaction>) {
        let entry = cassettes::Store::new(cassettes)
            .entry(
                &cassettes::TestId::new("c$t"),
                &cassettes::ProviderName::new("openai").unwrap(),
            )
            .unwrap();
        for x in xs {
            let ordinal = entry.next(&x.key, false).unwrap().ordinal;
            entry.record(ordinal, x).unwrap();
        }
        entry.flush().unwrap();
    }

    /// Two answers changed in one cassette: accepting one stages the index's cassette with
    /// that interaction alone from the work tree, as `git add -p` would; the other is what is
    /// left to review, and rejecting it restores the index's.
    #[test]
    fn accepting_stages_that_interaction_alone() {
        let dir = tempfile::tempdir().unwrap();
        let repo = git2::Repository::init(dir.path()).unwrap();
        let cassettes = dir.path().join("tests/cassettes");
        let path = cassettes.join("c--t/openai.json");
        record(
            &cassettes,
            [
                interaction("a", r#"{"v":1}"#),
                interaction("b", r#"{"v":1}"#),
            ],
        );
        commit_all(&repo);
        let mut work: Cassette = cassettes::read_cassette(&path).unwrap();
        work.interactions[0].response =
            RecordedResponse::with_body(200, Default::default(), br#"{"v":2}"#);
        work.interactions[1].response =
            RecordedResponse::with_body(200, Default::default(), br#"{"v":3}"#);
        std::fs::write(&path, work.to_bytes()).unwrap();

        let index_diff = || crate::git::diff_against(&cassettes, crate::git::Base::Index, &[]);
        let diff = index_diff().unwrap();
        let all = pending(&diff);
        assert_eq!(all.len(), 2);
        assert_eq!(stage(&diff, &[&all[0]]).unwrap(), 1);

        let mut staged = repo.index().unwrap();
        // What `stage` wrote to disk, not this handle's copy from before.
        staged.read(true).unwrap();
        let id = staged
            .get_path(Path::new("tests/cassettes/c--t/openai.json"), 0)
            .unwrap()
            .id;
        let blob = repo.find_blob(id).unwrap();
        let in_index =
            Cassette::parse(&path, std::str::from_utf8(blob.content()).unwrap()).unwrap();
        let answers: Vec<_> = in_index
            .interactions
            .iter()
            .map(|x| x.response.whole().unwrap().to_value().to_string())
            .collect();
        assert_eq!(answers, [r#"{"v":2}"#, r#"{"v":1}"#], "the first alone");
        assert_eq!(staged_files(&diff, &cassettes).unwrap(), 1);

        let diff = index_diff().unwrap();
        let left = pending(&diff);
        assert_eq!(left.len(), 1, "the other is left to review");
        assert_eq!(left[0].id, all[1].id);
        reject(&diff, &cassettes, &[&left[0]]).unwrap();
        assert_eq!(
            std::fs::read(&path).unwrap(),
            blob.content(),
            "rejecting restores the index's bytes"
        );
        assert!(pending(&index_diff().unwrap()).is_empty());
    }

    /// A changed, a removed (its answer in a blob) and an added interaction: their ids, and
    /// rejecting all three gives back HEAD's file and blob, byte for byte.
    #[test]
    fn rejecting_every_change_restores_the_base_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let repo = git2::Repository::init(dir.path()).unwrap();
        let cassettes = dir.path().join("tests/cassettes");
        let folder = cassettes.join("c--t");
        let path = folder.join("openai.json");
        let mut audio = interaction("speak", "{}");
        // Another path: a call of its own, never paired with another as a drifted prompt.
        audio.request = cassettes::Normalizer::plain().request(
            "POST",
            "/v1/audio/speech",
            None,
            None,
            br#"{"input":"speak"}"#,
            &[],
        );
        audio.key = cassettes::Key::of(&audio.request);
        let bytes = vec![0xfe; cassettes::INLINE_LIMIT + 1];
        audio.response = RecordedResponse::with_body(200, Default::default(), &bytes);
        record(
            &cassettes,
            [
                interaction("a", r#"{"v":1}"#),
                audio,
                interaction("c", "{}"),
            ],
        );
        commit_all(&repo);
        let head = std::fs::read(&path).unwrap();
        let blob = folder
            .join(cassettes::BLOB_DIR)
            .join(cassettes::sha256_hex(&bytes));
        assert!(blob.is_file());

        let mut work: Cassette = cassettes::read_cassette(&path).unwrap();
        work.interactions = vec![
            interaction("a", r#"{"v":2}"#),
            work.interactions[2].clone(),
            interaction("d", "{}"),
        ];
        std::fs::write(&path, work.to_bytes()).unwrap();
        std::fs::remove_dir_all(blob.parent().unwrap()).unwrap();

        let diff =
            crate::git::diff_against(&cassettes, crate::git::Base::Rev(Some("HEAD")), &[]).unwrap();
        let all = pending(&diff);
        let ids: Vec<(&str, Change)> = all.iter().map(|p| (p.id.as_str(), p.diff.change)).collect();
        assert_eq!(
            ids,
            [
                ("c--t/openai#1", Change::Changed),
                ("c--t/openai#3", Change::Added),
                ("c--t/openai#-2", Change::Removed),
            ]
        );
        let refs: Vec<&Pending> = all.iter().collect();

        // A write since the review read the file: stale, nothing changes.
        let edited = std::fs::read(&path).unwrap();
        let mut newer = cassettes::read_cassette(&path).unwrap();
        newer.interactions.push(interaction("e", "{}"));
        std::fs::write(&path, newer.to_bytes()).unwrap();
        let stale = reject(&diff, &cassettes, &refs).unwrap_err();
        assert!(
            matches!(stale, Error::Cassettes(cassettes::Error::Stale { .. })),
            "{stale}"
        );
        std::fs::write(&path, &edited).unwrap();

        assert_eq!(reject(&diff, &cassettes, &refs).unwrap(), 3);
        assert_eq!(std::fs::read(&path).unwrap(), head, "HEAD's bytes");
        assert_eq!(std::fs::read(&blob).unwrap(), bytes, "and its blob");
    }
}
