//! What changed in the cassettes, read against git: each changed cassette's recordings side
//! by side (`git`), what a reviewer reads of them (`review`), the answers accepted but not yet
//! committed (`pending`), what a committed cassette must not hold (`audit`) and each test's
//! calls in order (`trajectory`). The daemon, which only serves cassettes, needs none of it.
#![warn(missing_docs)]

pub mod audit;
pub mod git;
pub mod pending;
pub mod review;
#[cfg(test)]
mod testing;
pub mod trajectory;

use std::path::PathBuf;

/// What can go wrong reading cassettes against git; each message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    /// A cassette that could not be read or written.
    Cassettes(#[from] cassettes::Error),
    #[error("git: {source}")]
    /// git could not read the repository.
    Git {
        #[from]
        /// git's error.
        source: git2::Error,
    },
    #[error("git: cannot find the base revision {name:?} ({source}); fetch it first (git fetch origin {name}) or name another with --base")]
    /// A base commit that git does not know.
    NoBase {
        /// The name given.
        name: String,
        #[source]
        /// git's error.
        source: git2::Error,
    },
    #[error("{0} is not inside a git repository, so there is nothing to compare with; commit your cassettes first")]
    /// The cassettes are in no git repository.
    NotInRepository(PathBuf),
}

impl Error {
    /// A file that could not be read or written.
    pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> Error {
        Error::Cassettes(cassettes::Error::io(path, source))
    }
}
