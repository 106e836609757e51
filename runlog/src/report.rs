//! The report of a run, `target/llmreplay/report.json` as `cargo llmreplay test` and `run` write
//! it: the run's counts, the requests that found no recording and the commands that record them,
//! recordings and cassette folders nothing used, and cassette files changed against git HEAD.
//! Only the types and their small rules live here, so that any tool can read a report; building,
//! merging and printing one is cargo-llmreplay's. The test ids, keys and recordings it names are
//! `llmreplay-cassettes`' own types, re-exported.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

pub use cassettes::classify::{Class, Rule};
/// A recording that no request of a test that ran replayed: the cassettes' `Unused`, named
/// apart from the report's own [`Unused`], which holds it.
pub use cassettes::Unused as UnusedRecording;
pub use cassettes::{Key, ProviderName, TestChanges, TestId};

/// The report of a run.
#[derive(Serialize, Deserialize)]
pub struct Report {
    /// The version of the report's schema: 1.
    pub llmreplay_report: u32,
    /// The mode the run answered in.
    pub mode: Mode,
    /// Which tests it covered.
    pub scope: RunScope,
    /// When the report was written, in milliseconds since the Unix epoch: `prune` refuses a
    /// report older than the cassettes.
    pub generated_at_ms: u64,
    /// False when a test failed: it may have stopped before making the calls it recorded.
    pub tests_passed: bool,
    /// nextest stopped at a failure (fail-fast) with tests left unrun: `missing` may be
    /// incomplete.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stopped_early: bool,
    /// Some calls named no test (a client that sent no proxy credentials, or no `X-Test-Id`)
    /// and were filed under the test `default`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unattributed: bool,
    /// Per test, what a recording run added, replaced and removed in its cassettes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recorded: Vec<TestChanges>,
    /// The cassette directory.
    #[serde(with = "cassettes::lossy_path")]
    pub cassette_dir: PathBuf,
    /// Requests and sessions by outcome.
    pub counts: Stats,
    /// Requests that found no recording.
    pub missing: Vec<Missing>,
    /// Calls the proxy captured, in replay, to hosts with no recording: answered as missing,
    /// never sent. They fail the run as anything missing does.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub escaped: Vec<Missing>,
    /// Tunnels to `[capture] pass` hosts (package registries, and what the file adds): they
    /// Two tests of this run whose ids meet at one cassette folder: the second's requests
    /// were refused, and its folder is the first's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub collisions: Vec<Collision>,
    /// left the machine unrecorded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub passed_through: Vec<Passed>,
    /// Recordings (made or replayed in this run) whose answer is a 4xx.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub error_answers: Vec<ErrorAnswer>,
    /// Recordings and cassette folders nothing used.
    pub unused: Vec<Unused>,
    /// Messages to MCP servers run live (`--live mcp:NAME`) whose answers differ from their
    /// recordings.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub live_differs: Vec<Miss>,
    /// Requests a fault answered, per test that asked for faults.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub faults: BTreeMap<String, usize>,
    /// Each test that ran with recordings: when its least fresh recording was last recorded or
    /// verified (RFC 3339, UTC), or null when one has no date (recorded before dates were
    /// kept). What `--deny stale=AGE` judges, here and in `report merge`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub fresh: BTreeMap<String, Option<String>>,
    /// Cassette files changed against git HEAD.
    pub changed: Vec<Change>,
    /// False when the cassettes are not in a git repository (so `changed` says nothing).
    pub git: bool,
    /// The code the run ran, as a hash of the commit and the changed files outside the
    /// cassettes: two runs of the same code that missed on different values saw volatile ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sources: Option<String>,
    /// For a partition of the suite, what `report merge` needs to judge cassette folders once
    /// every partition is in: the suite's test ids and the cassette folders present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suite: Option<BTreeSet<TestId>>,
    /// The cassette folders present, with `suite`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub folders: Option<BTreeSet<String>>,
    /// The partitions a merged report was made of.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub merged: Vec<String>,
    /// The daemon's log of this run, a line per request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<String>,
    /// This run's event log (README, "The run log").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_log: Option<String>,
    /// The first request that failed on its way (upstream unreachable, say), and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_failure: Option<Failure>,
    /// What the run's replays saved and its recordings spent, by a dated price table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ledger: Option<Ledger>,
}

/// The ledger of a run: the replays priced by what their recordings cost, the recordings by
/// what their answers reported, in micro-dollars (US), rounded once from exact sums.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    /// The day the price table's prices were in force.
    pub prices_date: String,
    /// What the replays would have cost sent upstream.
    pub saved_micros: u64,
    /// Replays priced.
    pub replays_priced: usize,
    /// Replays not priced: their recording's model has no price, or it reported no usage.
    pub replays_unpriced: usize,
    /// What the answers recorded in this run cost.
    pub spent_micros: u64,
    /// Recordings priced.
    pub recordings_priced: usize,
    /// Recordings not priced.
    pub recordings_unpriced: usize,
    /// Every unpriced call (replay or recording) by its model, with how many.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub unpriced: BTreeMap<String, usize>,
    /// `--max-spend`, in micro-dollars, when the run had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_spend_micros: Option<u64>,
    /// Requests refused, not sent, because the cap was reached.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub refused_over_cap: usize,
}

impl Ledger {
    /// Adds another partition's ledger.
    pub fn merge(&mut self, other: &Ledger) {
        // Held at the largest sum: a partition's report is a file anyone can edit, and a
        // wrapped sum would show a huge spend as little.
        self.saved_micros = self.saved_micros.saturating_add(other.saved_micros);
        self.replays_priced = self.replays_priced.saturating_add(other.replays_priced);
        self.replays_unpriced = self.replays_unpriced.saturating_add(other.replays_unpriced);
        self.spent_micros = self.spent_micros.saturating_add(other.spent_micros);
        self.recordings_priced = self
            .recordings_priced
            .saturating_add(other.recordings_priced);
        self.recordings_unpriced = self
            .recordings_unpriced
            .saturating_add(other.recordings_unpriced);
        for (model, n) in &other.unpriced {
            let was = self.unpriced.entry(model.clone()).or_default();
            *was = was.saturating_add(*n);
        }
        self.refused_over_cap = self.refused_over_cap.saturating_add(other.refused_over_cap);
        self.max_spend_micros = self.max_spend_micros.or(other.max_spend_micros);
        if self.prices_date.is_empty() {
            self.prices_date = other.prices_date.clone();
        }
    }
}

/// Which tests a run covered, as far as its nextest arguments tell.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct RunScope {
    /// Any argument that may select fewer tests than the whole suite (`-E`, `-p`, a name, ...).
    pub filtered: bool,
    /// The partition of the suite it ran (`slice:1/2`), if any.
    pub partition: Option<String>,
    /// nextest ran with `--workspace`: the run's own, never written.
    #[serde(skip)]
    pub workspace: bool,
}

impl RunScope {
    /// Every package of the workspace, nothing filtered: what `status` lists.
    pub fn whole_workspace() -> Self {
        RunScope {
            workspace: true,
            ..RunScope::default()
        }
    }

    /// Nothing filtered and no partition: the run can tell what no test of the suite uses.
    pub fn whole_suite(&self) -> bool {
        !self.filtered && self.partition.is_none()
    }
}

/// A request that found no recording, with the commands that record it.
#[derive(Serialize, Deserialize)]
pub struct Missing {
    /// The request.
    #[serde(flatten)]
    pub miss: Miss,
    /// The command that records it.
    pub command: String,
    /// When the closest recording is the same call with other parameters: the command that
    /// records the test again, replacing it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rerecord: Option<String>,
    /// A test that no longer exists recorded this very request: the test was renamed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renamed_from: Option<RenamedFrom>,
}

/// The old name of a renamed test, and the command that keeps its recordings.
#[derive(Serialize, Deserialize)]
pub struct RenamedFrom {
    /// The old test id.
    pub test: String,
    /// The `cargo llmreplay mv` that moves its recordings to the new one.
    pub command: String,
}

/// Something in the cassettes that nothing used.
#[derive(Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Unused {
    /// A recording that no request of a test that ran replayed.
    Recording(UnusedRecording),
    /// A cassette folder whose slug matches no test of the suite.
    Folder {
        /// The folder.
        folder: String,
    },
}

/// How requests are answered (README, "Modes"); written in reports as `replay`,
/// `record-missing`, `record` or `passthrough`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Answers from cassettes only; a request with no recording is a miss.
    #[default]
    Replay,
    /// Replays what is recorded, records what is not.
    #[serde(alias = "record_missing")]
    RecordMissing,
    /// Records every request again.
    Record,
    /// Forwards everything, writes nothing.
    Passthrough,
}

impl Mode {
    /// The mode as flags and reports spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Replay => "replay",
            Mode::RecordMissing => "record-missing",
            Mode::Record => "record",
            Mode::Passthrough => "passthrough",
        }
    }

    /// Whether this mode reaches the network (and so is refused under `CI` unless forced).
    pub fn goes_upstream(self) -> bool {
        self != Mode::Replay
    }

    /// True for the modes that write cassettes.
    pub fn writes(self) -> bool {
        matches!(self, Mode::Record | Mode::RecordMissing)
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Mode {
    type Err = UnknownMode;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "replay" => Mode::Replay,
            "record-missing" | "record_missing" => Mode::RecordMissing,
            "record" => Mode::Record,
            "passthrough" => Mode::Passthrough,
            other => return Err(UnknownMode(other.to_string())),
        })
    }
}

/// A word that names no [`Mode`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownMode(pub String);

impl fmt::Display for UnknownMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown mode {:?}: use replay, record-missing, record or passthrough",
            self.0
        )
    }
}

impl std::error::Error for UnknownMode {}

/// Counts by outcome.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Stats {
    /// Every request and session.
    pub requests: usize,
    /// Replayed.
    pub hits: usize,
    /// With no recording.
    pub misses: usize,
    /// Recorded anew.
    pub recorded: usize,
    /// Recorded again, answer changed.
    pub replaced: usize,
    /// Recorded again, answer the same.
    pub unchanged: usize,
    /// Forwarded, not saved.
    pub passthrough: usize,
    /// Forwarded, not saved: the answer refused the request itself (a key, a wrong path).
    #[serde(default)]
    pub refused: usize,
    /// Broken off upstream, not saved.
    pub broken: usize,
    /// Failed (upstream, file or refusal).
    pub errors: usize,
    /// Requests answered by a fault the test asked for.
    #[serde(default)]
    pub faults: usize,
    /// Telemetry (traces) answered here in replay, whatever its body.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub telemetry: usize,
    /// Messages to an MCP server run live whose answers differ from their recordings.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub live_differs: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Adds the counts of another run: a sharded suite's reports are merged this way.
impl std::ops::AddAssign<&Stats> for Stats {
    fn add_assign(&mut self, o: &Stats) {
        self.requests += o.requests;
        self.hits += o.hits;
        self.misses += o.misses;
        self.recorded += o.recorded;
        self.replaced += o.replaced;
        self.unchanged += o.unchanged;
        self.passthrough += o.passthrough;
        self.refused += o.refused;
        self.broken += o.broken;
        self.errors += o.errors;
        self.faults += o.faults;
        self.telemetry += o.telemetry;
        self.live_differs += o.live_differs;
    }
}

/// A request that found no recording.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Miss {
    /// The test.
    pub test: TestId,
    /// The provider.
    pub provider: ProviderName,
    /// The method.
    pub method: String,
    /// The upstream path.
    pub path: String,
    /// The cassette file it was looked up in.
    pub cassette: String,
    /// The request's key.
    pub key: String,
    /// Which request with this key in its test: 0 for the first.
    pub ordinal: usize,
    #[serde(flatten)]
    /// Why it missed.
    pub detail: Detail,
}

/// Why a request missed or failed, for the report.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Detail {
    #[serde(skip_serializing_if = "Option::is_none")]
    /// The model it asked for.
    pub model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    /// The start of its last user message.
    pub prompt: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    /// The fields that differ from the closest recording.
    pub closest: Option<Vec<String>>,
    /// For each differing field (up to 8; every one, up to 64, for a miss of SDK shape, so that
    /// `rekey` can rebuild the request), what the closest recording holds and what this request
    /// sent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<FieldValues>,
    /// The class of the miss: the most meaningful of its fields' classes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<Class>,
    /// The `[match]` rules that would key its volatile fields the same.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<Rule>,
    /// The closest recording: its position in the cassette, from 0, and its key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closest_at: Option<(usize, String)>,
    /// The closest recording is the same call (method and path) with other parameters:
    /// re-recording the test replaces it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub same_call: bool,
    /// The host of a call captured as the test's proxy (a hard-coded URL, a tool's API):
    /// one that, missed in replay, would have left the machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    /// The message sent to the client.
    pub message: Option<String>,
}

impl Detail {
    /// A detail that is only a message.
    pub fn message(message: String) -> Self {
        Detail {
            message: Some(message),
            ..Detail::default()
        }
    }
}

/// A request field that differs from the closest recording.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FieldValues {
    /// Its JSON pointer.
    pub field: String,
    /// The recorded value; absent when the recording has no such field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded: Option<serde_json::Value>,
    /// This request's value; absent when it has no such field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub now: Option<serde_json::Value>,
    /// What kind of difference it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<Class>,
    /// The evidence for its class, in a few words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// The first request of a run that failed on its way (upstream unreachable, an answer broken
/// off or refused, a recording not saved), with what it said: the cause a summary names.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// The test.
    pub test: TestId,
    /// The status the client got.
    pub status: u16,
    /// What the daemon said.
    pub message: String,
}

/// Two test ids that meet at one cassette folder (`a$b c` and `a$b.c`, say).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Collision {
    /// The folder.
    pub slug: String,
    /// The test that had it first, in this run.
    pub first: TestId,
    /// The test refused it.
    pub second: TestId,
}

/// Tunnels a test opened to a `[capture] pass` host: nothing recorded, nothing replayed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Passed {
    /// The test.
    pub test: TestId,
    /// The host and port.
    pub host: String,
    /// How many tunnels.
    pub tunnels: usize,
}

/// A recording whose answer is an error (a 4xx): saved, since error-handling tests need
/// them, and listed, since a wrong request recorded by mistake looks the same.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ErrorAnswer {
    /// The test.
    pub test: TestId,
    /// The provider.
    pub provider: ProviderName,
    /// The method.
    pub method: String,
    /// The upstream path.
    pub path: String,
    /// The status recorded.
    pub status: u16,
    /// The cassette file.
    pub cassette: String,
    /// Which recording with its key: 0 for the first.
    pub ordinal: usize,
    /// Recorded in this run, or replayed.
    pub recorded: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
/// How a cassette file changed against the base.
pub enum ChangeKind {
    /// Not in the base.
    New,
    /// In both, different.
    Modified,
    /// In the base only.
    Deleted,
    /// In the base under another path (its test renamed), in the work tree here.
    Moved,
}

/// One cassette file that differs from HEAD.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Change {
    /// Relative to the repository's root.
    #[serde(with = "cassettes::lossy_path")]
    pub path: PathBuf,
    /// How the file changed.
    pub kind: ChangeKind,
    /// Recordings new in it.
    pub added: usize,
    /// Recordings whose answer changed.
    pub replaced: usize,
    /// Recordings gone from it.
    pub removed: usize,
    /// Recordings as they were.
    pub unchanged: usize,
    /// Set when one side does not parse.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Where a moved file was in HEAD (its test renamed, `cargo llmreplay mv`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "cassettes::lossy_path::option"
    )]
    pub moved_from: Option<PathBuf>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_from_their_names() {
        for mode in [
            Mode::Replay,
            Mode::RecordMissing,
            Mode::Record,
            Mode::Passthrough,
        ] {
            assert_eq!(mode.as_str().parse(), Ok(mode));
        }
        assert_eq!("record_missing".parse(), Ok(Mode::RecordMissing));
        let err = "sometimes".parse::<Mode>().unwrap_err();
        assert!(err.to_string().starts_with("unknown mode \"sometimes\""));
    }

    /// Partitions' ledgers whose sums pass the largest number hold at it, rather than
    /// panicking or wrapping round to little spent.
    #[test]
    fn ledgers_merged_past_the_largest_sum_hold_at_it() {
        let huge = Ledger {
            spent_micros: u64::MAX,
            saved_micros: u64::MAX,
            recordings_priced: usize::MAX,
            unpriced: [("m".to_string(), usize::MAX)].into(),
            ..Ledger::default()
        };
        let mut merged = huge.clone();
        merged.merge(&huge);
        assert_eq!(merged.spent_micros, u64::MAX);
        assert_eq!(merged.saved_micros, u64::MAX);
        assert_eq!(merged.recordings_priced, usize::MAX);
        assert_eq!(merged.unpriced["m"], usize::MAX);
    }
}
