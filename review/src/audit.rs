//! Checks every cassette file on disk without running a test: files that do not parse, stored
//! keys and summaries that no longer match the request and answer they stand for (a hand edit),
//! missing or damaged blobs, and cassettes in a folder or file their test and provider would not
//! be looked up in.

use crate::Error;
use cassettes::cassette_files;
use cassettes::{Cassette, Summary};
use cassettes::{Slug, TestId};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "problem", rename_all = "snake_case")]
/// What is wrong with one cassette file.
pub enum Problem {
    /// The file does not parse; the message names line and column.
    Corrupt {
        /// The parser's message.
        message: String,
    },
    /// Interaction `index` (from 0) has a summary that its response would not give.
    SummaryMismatch {
        /// Position in the file, from 0.
        index: usize,
    },
    /// Interaction `index` (from 0) has a key that is not its request's: edited by hand.
    KeyMismatch {
        /// Position in the file, from 0.
        index: usize,
    },
    /// Interaction `index` (from 0) has an answer that no longer matches its seal: edited by
    /// hand.
    SealMismatch {
        /// Position in the file, from 0.
        index: usize,
    },
    /// Interaction `index` (from 0) has no seal: its answer could have been edited by hand
    /// with nothing to tell.
    Unsealed {
        /// Position in the file, from 0.
        index: usize,
    },
    /// Interaction `index` (from 0) holds a string of a well-known secret's shape (an API key,
    /// a private key).
    Secret {
        /// Position in the file, from 0.
        index: usize,
        /// The JSON pointer of the field, in the interaction.
        pointer: String,
        /// What it looks like.
        what: String,
    },
    /// A temporary file a write left when its process was killed before the rename.
    LeftoverTemp,
    /// A blob the file refers to is missing or does not hash to its name.
    Blob {
        /// Which blob, and what is wrong with it.
        message: String,
    },
    /// Replay looks this test and provider up at `expected`, not here.
    Misplaced {
        #[serde(with = "cassettes::lossy_path")]
        /// Where replay looks for it.
        expected: PathBuf,
    },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
/// A problem, and the file it is in.
pub struct Finding {
    #[serde(with = "cassettes::lossy_path")]
    /// The file (or leftover temporary file).
    pub path: PathBuf,
    #[serde(flatten)]
    /// What is wrong.
    pub problem: Problem,
}

/// The temporary files writes left under `dir` (`.llmreplay-*.tmp`, in a cassette folder or
/// its blobs), when their process died before the rename; sorted.
pub fn leftover_temps(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let list = |folder: &Path| -> Vec<PathBuf> {
        std::fs::read_dir(folder)
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(".llmreplay-") && n.ends_with(".tmp"))
            })
            .collect()
    };
    let read = match std::fs::read_dir(dir) {
        Ok(read) => read,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(dir, e)),
    };
    let mut out = Vec::new();
    for folder in read.filter_map(Result::ok) {
        if !folder.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let folder = folder.path();
        out.extend(list(&folder));
        if let Ok(blobs) = cassettes::blob_dir(&folder) {
            out.extend(list(&blobs));
        }
    }
    out.sort();
    Ok(out)
}

/// A recording whose answer is a 4xx: not a problem (tests of error handling need them), but
/// listed, since a wrong request recorded by mistake looks the same.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorAnswer {
    #[serde(with = "cassettes::lossy_path")]
    /// The cassette file.
    pub cassette: PathBuf,
    /// Its interaction, from 1.
    pub interaction: usize,
    /// The request's method.
    pub method: String,
    /// The request's path.
    pub path: String,
    /// The status recorded.
    pub status: u16,
}

/// What reading every cassette under `dir` found, each file read once.
#[derive(Debug, Default)]
pub struct Audit {
    /// Every problem, in path order.
    pub problems: Vec<Finding>,
    /// Every recorded 4xx answer of the files that parse, in path order.
    pub error_answers: Vec<ErrorAnswer>,
}

/// Every problem of the cassettes under `dir`, in path order.
pub fn audit(dir: &Path) -> Result<Vec<Finding>, Error> {
    Ok(audit_all(dir)?.problems)
}

/// The problems and the error answers of the cassettes under `dir`.
pub fn audit_all(dir: &Path) -> Result<Audit, Error> {
    let mut out: Vec<Finding> = leftover_temps(dir)?
        .into_iter()
        .map(|path| Finding {
            path,
            problem: Problem::LeftoverTemp,
        })
        .collect();
    let mut error_answers = Vec::new();
    for path in cassette_files(dir)? {
        let text = match cassettes::read_text(&path) {
            Ok(text) => text,
            Err(e @ cassettes::Error::NotText { .. }) => {
                out.push(Finding {
                    path: path.clone(),
                    problem: Problem::Corrupt {
                        message: e.to_string(),
                    },
                });
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        match Cassette::parse(&path, &text) {
            Ok(mut cassette) => {
                let folder = path.parent().expect("cassette paths have a folder");
                if let Err(e) = cassette.load_blobs(folder) {
                    out.push(Finding {
                        path: path.clone(),
                        problem: Problem::Blob {
                            message: e.to_string(),
                        },
                    });
                }
                out.extend(check(&path, dir, &cassette));
                for (i, x) in cassette.interactions.iter().enumerate() {
                    if (400..500).contains(&x.response.status) {
                        error_answers.push(ErrorAnswer {
                            cassette: path.clone(),
                            interaction: i + 1,
                            method: x.request.method.clone(),
                            path: x.request.path.clone(),
                            status: x.response.status,
                        });
                    }
                }
            }
            Err(e) => out.push(Finding {
                problem: Problem::Corrupt {
                    message: e.to_string(),
                },
                path,
            }),
        }
    }
    Ok(Audit {
        problems: out,
        error_answers,
    })
}

fn check(path: &Path, dir: &Path, cassette: &Cassette) -> Vec<Finding> {
    let mut out = Vec::new();
    let expected = dir
        .join(Slug::from_test_id(&TestId::new(cassette.test.as_str())).as_str())
        .join(format!("{}.json", cassette.provider));
    if path != expected {
        out.push(Finding {
            path: path.to_path_buf(),
            problem: Problem::Misplaced { expected },
        });
    }
    for index in cassette.key_mismatches() {
        out.push(Finding {
            path: path.to_path_buf(),
            problem: Problem::KeyMismatch { index },
        });
    }
    let resealed = cassette.seal_mismatches();
    for &index in &resealed {
        out.push(Finding {
            path: path.to_path_buf(),
            problem: Problem::SealMismatch { index },
        });
    }
    for (index, x) in cassette.interactions.iter().enumerate() {
        let found = serde_json::to_value(x)
            .ok()
            .and_then(|v| cassettes::secrets::find(&v, &[]));
        if let Some(found) = found {
            out.push(Finding {
                path: path.to_path_buf(),
                problem: Problem::Secret {
                    index,
                    pointer: found.pointer,
                    what: found.what,
                },
            });
        }
    }
    for (index, _) in cassette
        .interactions
        .iter()
        .enumerate()
        .filter(|(_, x)| x.seal.is_none())
    {
        out.push(Finding {
            path: path.to_path_buf(),
            problem: Problem::Unsealed { index },
        });
    }
    for (index, x) in cassette.interactions.iter().enumerate() {
        // An answer whose blob is missing is reported as such, not as a wrong summary.
        let unread = x
            .response
            .whole()
            .is_some_and(|b| b.blobs().iter().any(|b| b.bytes.is_none()));
        // An answer edited by hand has one remedy: the seal's (`status --fix` derives its
        // summary anew as it seals it), so it is listed once.
        if !unread && !resealed.contains(&index) && x.summary != Summary::of(&x.response) {
            out.push(Finding {
                path: path.to_path_buf(),
                problem: Problem::SummaryMismatch { index },
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::interaction;

    #[test]
    fn finds_corrupt_mismatched_rekeyed_blobless_and_misplaced_files() {
        let dir = tempfile::tempdir().unwrap();
        let write = |rel: &str, bytes: &[u8]| {
            let p = dir.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, bytes).unwrap();
        };
        let answer = r#"{"choices":[{"message":{"content":"Hi"}}]}"#;
        let mut good = Cassette::new(
            &cassettes::TestId::new("c::t$ok"),
            &cassettes::ProviderName::new("openai").unwrap(),
        );
        let mut x = interaction("q", answer);
        x.summary = Summary::of(&x.response);
        x.seal = Some(cassettes::seal_of(&x.response));
        good.interactions.push(x.clone());
        write("c--t--ok/openai.json", &good.to_bytes());
        assert_eq!(audit(dir.path()).unwrap(), []);

        let mut edited = good.clone();
        edited.test = "c::t$edited".into();
        edited.interactions[0].summary.as_mut().unwrap().text = "Hello".into();
        write("c--t--edited/openai.json", &edited.to_bytes());
        write("c--t--bad/openai.json", b"{\n  \"llmreplay\": 1,\n  oops");
        let mut rekeyed = good.clone();
        rekeyed.test = "c::t$rekeyed".into();
        rekeyed.interactions[0].request.path = "/v1/edited".into();
        write("c--t--rekeyed/openai.json", &rekeyed.to_bytes());
        let mut blobbed = good.clone();
        blobbed.test = "c::t$blob".into();
        blobbed.interactions[0].response = cassettes::RecordedResponse::with_body(
            200,
            Default::default(),
            &vec![0xffu8; cassettes::INLINE_LIMIT + 1],
        );
        blobbed.interactions[0].summary = None;
        blobbed.interactions[0].seal = Some(cassettes::seal_of(&blobbed.interactions[0].response));
        write("c--t--blob/openai.json", &blobbed.to_bytes());
        let mut leaked = good.clone();
        leaked.test = "c::t$leaked".into();
        leaked.interactions[0].request.path = "/v1/sk-proj-ABCDEFGHIJKLMNOPQRSTUVWXYZ".into();
        leaked.interactions[0].key = cassettes::Key::of(&leaked.interactions[0].request);
        write("c--t--leaked/openai.json", &leaked.to_bytes());
        let mut unsealed = good.clone();
        unsealed.test = "c::t$unsealed".into();
        unsealed.interactions[0].seal = None;
        write("c--t--unsealed/openai.json", &unsealed.to_bytes());
        write("elsewhere/openai.json", &good.to_bytes());
        let mut resealed = good.clone();
        resealed.test = "c::t$sealed".into();
        resealed.interactions[0].seal =
            Some(cassettes::seal_of(&resealed.interactions[0].response));
        resealed.interactions[0].response.status = 201;
        write("c--t--sealed/openai.json", &resealed.to_bytes());
        write("c--t--ok/.llmreplay-x1.tmp", b"{");
        // An answer edited after it was sealed: its summary is stale too, but one remedy.
        let mut answer_edited = good.clone();
        answer_edited.test = "c::t$answer".into();
        answer_edited.interactions[0].response = cassettes::RecordedResponse::with_body(
            200,
            Default::default(),
            br#"{"choices":[{"message":{"content":"Edited"}}]}"#,
        );
        write("c--t--answer/openai.json", &answer_edited.to_bytes());
        let found = audit(dir.path()).unwrap();
        let names: Vec<(String, &str)> = found
            .iter()
            .map(|f| {
                let rel = f
                    .path
                    .strip_prefix(dir.path())
                    .unwrap()
                    .display()
                    .to_string();
                let what = match &f.problem {
                    Problem::Corrupt { message } => {
                        assert!(message.contains(":3:"), "{message}");
                        "corrupt"
                    }
                    Problem::SummaryMismatch { index } => {
                        assert_eq!(*index, 0);
                        "summary"
                    }
                    Problem::Misplaced { expected } => {
                        assert!(expected.ends_with("c--t--ok/openai.json"));
                        "misplaced"
                    }
                    Problem::KeyMismatch { index } => {
                        assert_eq!(*index, 0);
                        "key"
                    }
                    Problem::Blob { message } => {
                        assert!(message.contains("c--t--blob/blobs/"), "{message}");
                        "blob"
                    }
                    Problem::SealMismatch { index } => {
                        assert_eq!(*index, 0);
                        "seal"
                    }
                    Problem::Secret {
                        index,
                        pointer,
                        what,
                    } => {
                        assert_eq!((*index, pointer.as_str()), (0, "/request/path"));
                        assert_eq!(what, "a secret of shape openai-key");
                        "secret"
                    }
                    Problem::Unsealed { index } => {
                        assert_eq!(*index, 0);
                        "unsealed"
                    }
                    Problem::LeftoverTemp => "temp",
                };
                (rel, what)
            })
            .collect();
        assert_eq!(
            names,
            [
                ("c--t--ok/.llmreplay-x1.tmp".to_string(), "temp"),
                ("c--t--answer/openai.json".to_string(), "seal"),
                ("c--t--bad/openai.json".to_string(), "corrupt"),
                ("c--t--blob/openai.json".to_string(), "blob"),
                ("c--t--edited/openai.json".to_string(), "summary"),
                ("c--t--leaked/openai.json".to_string(), "secret"),
                ("c--t--rekeyed/openai.json".to_string(), "key"),
                ("c--t--sealed/openai.json".to_string(), "seal"),
                ("c--t--unsealed/openai.json".to_string(), "unsealed"),
                ("elsewhere/openai.json".to_string(), "misplaced"),
            ]
        );
    }
}
