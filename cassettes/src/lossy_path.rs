//! Paths in JSON output: written as text whatever bytes a file name holds (invalid UTF-8
//! becomes U+FFFD), so a folder with a non-UTF-8 name never makes `--json` fail. For
//! `#[serde(with = "cassettes::lossy_path")]`.

use serde::{Deserialize, Deserializer, Serializer};
use std::path::{Path, PathBuf};

/// Writes a path as text, U+FFFD where it is not UTF-8.
pub fn serialize<S: Serializer>(path: &Path, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&path.to_string_lossy())
}

/// Reads a path written as text.
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<PathBuf, D::Error> {
    PathBuf::deserialize(d)
}

/// The same for an optional path: `#[serde(with = "cassettes::lossy_path::option")]`.
pub mod option {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::path::PathBuf;

    /// Writes a path as text, U+FFFD where it is not UTF-8; `None` as null.
    pub fn serialize<S: Serializer>(path: &Option<PathBuf>, s: S) -> Result<S::Ok, S::Error> {
        match path {
            Some(p) => s.serialize_some(&p.to_string_lossy()),
            None => s.serialize_none(),
        }
    }

    /// Reads an optional path written as text.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<PathBuf>, D::Error> {
        Option::<PathBuf>::deserialize(d)
    }
}
