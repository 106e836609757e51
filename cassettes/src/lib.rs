//! The data of cargo-llmreplay and its rules: test ids and their slugs, request keys, the
//! cassette file format and the locked, atomic store. Plain types and functions: no HTTP, no
//! async runtime, so every rule here is tested alone.

pub mod audit;
mod body;
pub mod eventstream;
pub mod filter;
mod format;
pub mod git;
pub mod glob;
mod id;
mod key;
pub mod lossy_path;
pub mod pointer;
pub mod review;
pub mod session;
mod store;
mod summary;
#[cfg(test)]
mod testing;

pub use body::{Blob, Body, Layout, Part, BLOB_DIR, INLINE_LIMIT, MAX_JSON_DEPTH};
pub use format::{
    recording_ids, seal_of, Cassette, Chunk, ChunkContent, Interaction, Prepared, RecordedResponse,
    RecordingId, ResponseBody, StreamFormat, Summary, Timing, ToolCall, FORMAT_VERSION,
};
pub use id::{ProviderName, Slug, TestId, MAX_SLUG_LEN};
pub use key::{differing_fields, write_canonical, Key, Normalizer, RecordedRequest, ReplaceRule};
pub use store::{
    cassette_files, confined, fix_cassette, read_cassette, read_cassette_with_blobs, remove_folder,
    remove_leftover_temp, remove_recordings, remove_unreferenced_blobs, Closest, Entry, Fixed,
    Lookup, RecordOutcome, Store, Unused, DEFAULT_LOCK_TIMEOUT,
};
pub use summary::Tokens;

use std::path::{Path, PathBuf};

/// Everything that can go wrong with cassettes; each message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}:{line}:{column}: this cassette does not parse ({message}). It was left untouched: fix it by hand, or delete it and record again with --record-missing")]
    Corrupt {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("test ids {first:?} and {second:?} both map to the cassette folder {slug:?}; rename one of the tests so their cassettes stay apart")]
    SlugCollision {
        slug: String,
        first: String,
        second: String,
    },
    #[error("bad rule in llmreplay.toml, {rule}: {reason}")]
    BadRule { rule: String, reason: String },
    #[error("{path}: {what} is no longer there; the cassette changed since the report was written. Run the suite again first")]
    Stale { path: PathBuf, what: String },
    #[error("{path}: this blob is missing or damaged ({reason}). Restore it from git (git checkout -- {}), or record the test again", shell_quote(&path.to_string_lossy()))]
    Blob { path: PathBuf, reason: String },
    #[error("{path}: interaction {} was edited by hand: its key is not the key of its request, so it is not replayed as it stands. Run `cargo llmreplay status --fix` to recompute its key and summary, or record it again", index + 1)]
    KeyMismatch { path: PathBuf, index: usize },
    #[error("{path}: the answer of interaction {} was edited by hand: it no longer matches its seal, so it is not replayed as it stands. If the edit is meant, run `cargo llmreplay status --fix` to seal it again; else restore it from git or record it again", index + 1)]
    SealMismatch { path: PathBuf, index: usize },
    #[error("{folder}: another process has held this cassette folder's lock for {}s (a second recording run, or prune?), so this recording was not saved. Let the other finish and run again", waited.as_secs())]
    Locked {
        folder: PathBuf,
        waited: std::time::Duration,
    },
    #[error("{path} resolves to {resolved}, outside the cassette directory {root} (a link?); nothing is written there. Remove the link, or point --cassette-dir at the real folder")]
    Outside {
        path: PathBuf,
        resolved: PathBuf,
        root: PathBuf,
    },
    #[error("{}: not UTF-8 text (invalid byte at offset {offset}), so not a cassette; restore it from git or record the test again", path.display())]
    NotText { path: PathBuf, offset: usize },
    #[error("git: {source}")]
    Git {
        #[from]
        source: git2::Error,
    },
    #[error("git: cannot find the base revision {name:?} ({source}); fetch it first (git fetch origin {name}) or name another with --base")]
    NoBase {
        name: String,
        #[source]
        source: git2::Error,
    },
    #[error("{0} is not inside a git repository, so there is nothing to compare with; commit your cassettes first")]
    NotInRepository(PathBuf),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// A cassette file's text; a file that is not UTF-8 is `NotText`, naming where it stops being
/// text, so that callers list it as broken.
pub(crate) fn read_text(path: &Path) -> Result<String, Error> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    String::from_utf8(bytes).map_err(|e| Error::NotText {
        path: path.to_path_buf(),
        offset: e.utf8_error().valid_up_to(),
    })
}

impl Error {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        Error::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// `s` as one shell word, in single quotes where it needs any: commands printed for people to
/// paste hold names a stranger may have written (`quote'; touch pwned; echo '`).
pub fn shell_quote(s: &str) -> std::borrow::Cow<'_, str> {
    // Only a NUL cannot be quoted; no name that reaches a printed command holds one.
    shlex::try_quote(s)
        .unwrap_or_else(|_| std::borrow::Cow::Owned(format!("'{}'", s.replace(['\0', '\''], ""))))
}
