//! What can go wrong in a command, each with its cause kept, and the one place that turns an
//! outcome into an exit status (README, "Exit codes").

use std::path::PathBuf;
use std::process::ExitCode;

/// Exit statuses of every command. nextest's own status passes through when tests failed.
pub mod exit {
    /// All well.
    pub const SUCCESS: u8 = 0;
    /// A gate failed: something missing, unused or changed under `--deny`, `status --check`,
    /// `diff --exit-code`, `rerun --fail-on-change`, a failed rerun request, a `serve` that
    /// answered a request as missing.
    pub const GATE: u8 = 1;
    /// Usage, configuration or input error: a bad flag, a bad `llmreplay.toml`, an unreadable
    /// report, a missing tool.
    pub const USAGE: u8 = 2;
    /// nextest ended by a signal, which has no status of its own: 128 plus the signal, as a
    /// shell reports it.
    pub const SIGNALLED_BASE: u8 = 128;
}

/// How a command ended, when it ran to its end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Success,
    GateFailed,
    /// nextest's own status, when tests failed.
    Nextest(u8),
    /// A usage error clap has already explained.
    Usage,
}

impl Outcome {
    /// `GateFailed` when `failed`, else `Success`.
    pub fn gate(failed: bool) -> Self {
        if failed {
            Outcome::GateFailed
        } else {
            Outcome::Success
        }
    }

    pub fn code(self) -> u8 {
        match self {
            Outcome::Success => exit::SUCCESS,
            Outcome::GateFailed => exit::GATE,
            Outcome::Nextest(code) => code,
            Outcome::Usage => exit::USAGE,
        }
    }
}

impl From<Outcome> for ExitCode {
    fn from(o: Outcome) -> Self {
        ExitCode::from(o.code())
    }
}

/// Why a command could not do its work.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Flags, or flags and environment, that cannot work together.
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Config(#[from] daemon::ConfigError),
    #[error(transparent)]
    Cassettes(#[from] cassettes::Error),
    #[error(transparent)]
    /// Cassettes read against git.
    Review(#[from] review::Error),
    #[error(transparent)]
    Daemon(#[from] daemon::DaemonError),
    /// The workspace, cargo or cargo-nextest is not as this command needs.
    #[error("{0}")]
    Precondition(String),
    #[error("cannot read the report {}: {source}. Run cargo llmreplay test first (it writes one)", path.display())]
    ReportUnreadable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: not a cargo-llmreplay report ({source}); was it written by another version?", path.display())]
    ReportInvalid {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// Reports that cannot be merged, or a report `prune` cannot trust.
    #[error("{0}")]
    Report(String),
    /// A rerun that cannot start: a bad `--param`, a cassette it cannot read.
    #[error("{0}")]
    Rerun(String),
    /// `match suggest --apply` found a cassette it would re-key that it cannot read, before it
    /// changed anything.
    #[error("{source}\nnothing was changed: no rule added, no cassette re-keyed. Mend or remove that cassette, then run cargo llmreplay match suggest --apply again")]
    ApplyRefused {
        #[source]
        source: Box<cassettes::Error>,
    },
    /// `match suggest --apply` wrote its rules, then failed to re-key a cassette.
    #[error("{written}, but re-keying stopped: {source}\nnot re-keyed: {left}. The rules stay; mend that cassette, then run cargo llmreplay match suggest --apply again")]
    ApplyUnfinished {
        /// Which rules went where.
        written: String,
        /// The cassettes left with their old keys.
        left: String,
        #[source]
        source: Box<cassettes::Error>,
    },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    pub fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            what: what.into(),
            source,
        }
    }

    /// Every error is a usage, configuration or input error to the user: README gives them one
    /// status. Listed one by one so that a new kind is mapped on purpose.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Usage(_)
            | Error::Config(_)
            | Error::Cassettes(_)
            | Error::Review(_)
            | Error::Daemon(_)
            | Error::Precondition(_)
            | Error::ReportUnreadable { .. }
            | Error::ReportInvalid { .. }
            | Error::Report(_)
            | Error::Rerun(_)
            | Error::ApplyRefused { .. }
            | Error::ApplyUnfinished { .. }
            | Error::Io { .. } => exit::USAGE,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
