//! The data of cargo-llmreplay and its rules: test ids and their slugs, request keys, the
//! cassette file format and the locked, atomic store. Plain types and functions: no HTTP, no
//! async runtime, so every rule here is tested alone.
#![warn(missing_docs)]

mod body;
mod canonical;
pub mod classify;
pub mod clock;
mod entry;
pub mod eventstream;
pub mod filter;
mod format;
mod fs;
pub mod glob;
mod guard;
mod id;
mod key;
pub mod lossy_path;
mod maintenance;
pub mod mcp;
pub mod pointer;
pub mod secrets;
pub mod sequence;
pub mod session;
mod settle;
pub mod spool;
mod store;
mod summary;
#[doc(hidden)]
pub mod testing;

pub use body::{
    blob_dir, sha256_hex, Blob, Body, Layout, Part, BLOB_DIR, INLINE_LIMIT, MAX_JSON_DEPTH,
};
pub use canonical::write_canonical;
pub use entry::{Closest, Entry, Flight, Lookup};
pub use format::{
    recording_ids, seal_of, Cassette, Chunk, ChunkContent, Interaction, Prepared, RecordOutcome,
    RecordedResponse, RecordingId, ResponseBody, StreamFormat, Summary, Timing, ToolCall,
    FORMAT_VERSION, OLDEST_FORMAT_VERSION,
};
pub use fs::{confined, DEFAULT_LOCK_TIMEOUT};
pub use id::{ProviderName, Slug, TestId, MAX_SLUG_LEN};
pub use key::{differing_fields, IgnoreRule, Key, Normalizer, RecordedRequest, ReplaceRule, Rules};
pub use maintenance::{
    cassette_files, fix_cassette, json_files, legacy_folder, legacy_folders, mark_verified,
    move_legacy_folders, move_test, mv_command, read_cassette, read_cassette_with_blobs,
    rekey_cassette, remove_folder, remove_leftover_temp, remove_recordings,
    remove_unreferenced_blobs, rewrite_cassette, sealed, Fixed, LegacyFolder, Moved, TestChanges,
};
pub use store::{Store, Unused, DEFAULT_BUDGET};
pub use summary::Tokens;

use std::path::{Path, PathBuf};

/// Everything that can go wrong with cassettes; each message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}:{line}:{column}: this cassette does not parse ({message}). It was left untouched: fix it by hand, or delete it and record again with --record-missing")]
    /// A cassette that does not parse.
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Where the parser stopped: its line.
        line: usize,
        /// And its column.
        column: usize,
        /// What the parser said.
        message: String,
    },
    #[error("test ids {first:?} and {second:?} both map to the cassette folder {slug:?}; rename one of the tests so their cassettes stay apart")]
    /// Two test ids that meet at one folder.
    SlugCollision {
        /// The folder.
        slug: String,
        /// The test that has it.
        first: String,
        /// The test that asked for it too.
        second: String,
    },
    #[error("{path} holds the cassettes of test {recorded_for:?}, but its folder is that of {test:?}: a folder moved by hand (git mv) keeps the old test's name inside. Finish the rename with: {command}")]
    /// A cassette folder renamed by hand, its cassettes still naming the old test.
    MovedByHand {
        /// The cassette.
        path: PathBuf,
        /// The test its cassette names.
        recorded_for: String,
        /// The test whose folder it is now.
        test: String,
        /// The `cargo llmreplay mv` that finishes the rename.
        command: String,
    },
    #[error("{path} holds the cassettes of test {recorded_for:?} in the folder the slug rule of 0.1.0 named for it, which is now the folder of {test:?}: run `cargo llmreplay status --fix` to move them to their test's folder (they are replayed for neither test until then)")]
    /// A folder the old slug rule named for one test, now another test's folder.
    OldRuleFolder {
        /// The cassette.
        path: PathBuf,
        /// The test its cassette names.
        recorded_for: String,
        /// The test whose folder it is now.
        test: String,
    },
    #[error("cannot move the cassettes of {from:?} to {to:?}: {why}")]
    /// `mv` refused: what is in the way.
    CannotMove {
        /// The test moved from.
        from: String,
        /// The test moved to.
        to: String,
        /// What is in the way, and what to do.
        why: String,
    },
    #[error("bad rule in llmreplay.toml, {rule}: {reason}")]
    /// A `[match]` rule that does not compile.
    BadRule {
        /// The rule, as written.
        rule: String,
        /// Why it does not compile.
        reason: String,
    },
    #[error("{path}: {what} is no longer there; the cassette changed since the report was written. Run the suite again first")]
    /// A recording a report named is no longer there.
    Stale {
        /// The cassette.
        path: PathBuf,
        /// Which recording.
        what: String,
    },
    #[error("{path}: this blob is missing or damaged ({reason}). Restore it from git (git checkout -- {}), or record the test again", shell_quote(&path.to_string_lossy()))]
    /// A blob that is missing or damaged.
    Blob {
        /// The blob's file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    #[error("{path}: interaction {} was edited by hand: its key is not the key of its request, so it is not replayed as it stands. Run `cargo llmreplay status --fix` to recompute its key and summary, or record it again", index + 1)]
    /// A request edited by hand: its key is not its request's.
    KeyMismatch {
        /// The cassette.
        path: PathBuf,
        /// The interaction, from 0.
        index: usize,
    },
    #[error("{path}: the answer of interaction {} was edited by hand: it no longer matches its seal, so it is not replayed as it stands. If the edit is meant, run `cargo llmreplay status --fix` to seal it again; else restore it from git or record it again", index + 1)]
    /// An answer edited by hand: it no longer matches its seal.
    SealMismatch {
        /// The cassette.
        path: PathBuf,
        /// The interaction, from 0.
        index: usize,
    },
    #[error("{path}: not saved: {pointer} holds {what}, and no secret may reach a cassette. Redaction replaces known values and shapes wherever it can read them, so this one stands where it could not. If a field of its own holds it, name that field in llmreplay.toml, `[redact] body_fields = [\"NAME\"]` (or the header under `[redact] headers`), so that it becomes a placeholder, then record again; never name a field every message has (`text`, `content`), which would blank them all")]
    /// A recording that would write a secret.
    Secret {
        /// The cassette.
        path: PathBuf,
        /// The JSON pointer of the field, in the interaction as it would be stored.
        pointer: String,
        /// What the secret is.
        what: String,
    },
    #[error("{folder}: another process has held this cassette folder's lock for {}s (a second recording run, or prune?), so this recording was not saved. Let the other finish and run again", waited.as_secs())]
    /// A folder another process holds locked too long.
    Locked {
        /// The folder.
        folder: PathBuf,
        /// How long this one waited.
        waited: std::time::Duration,
    },
    #[error("{path} resolves to {resolved}, outside the cassette directory {root} (a link?); nothing is written there. Remove the link, or point --cassette-dir at the real folder")]
    /// A path that resolves outside the cassette directory.
    Outside {
        /// The path as given.
        path: PathBuf,
        /// Where it resolves.
        resolved: PathBuf,
        /// The cassette directory.
        root: PathBuf,
    },
    #[error("{}: not UTF-8 text (invalid byte at offset {offset}), so not a cassette; restore it from git or record the test again", path.display())]
    /// A file that is not UTF-8 text.
    NotText {
        /// The file.
        path: PathBuf,
        /// The first byte that is not.
        offset: usize,
    },
    #[error("{path}: {source}")]
    /// A file that could not be read or written.
    Io {
        /// The file.
        path: PathBuf,
        /// The system's error.
        source: std::io::Error,
    },
}

/// A cassette file's text; a file that is not UTF-8 is `NotText`, naming where it stops being
/// text, so that callers list it as broken.
pub fn read_text(path: &Path) -> Result<String, Error> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    String::from_utf8(bytes).map_err(|e| Error::NotText {
        path: path.to_path_buf(),
        offset: e.utf8_error().valid_up_to(),
    })
}

impl Error {
    /// A file that could not be read or written, named.
    pub fn io(path: &Path, source: std::io::Error) -> Self {
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
