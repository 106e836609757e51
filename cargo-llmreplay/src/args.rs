//! Flags shared by several commands, declared once and flattened into each (as cargo-insta's
//! `TargetArgs` and nextest's `CargoOptions` are), and the one step that resolves them with
//! the environment and `llmreplay.toml` into the settings a command works with.

use crate::error::{Error, Result};
use clap::Args;
use daemon::{Mode, Overrides, Settings};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Where the cassettes are.
#[derive(Args, Clone, Debug, Default)]
pub struct CassetteDirArg {
    /// Where cassettes live [default: cassette_dir in llmreplay.toml, else tests/cassettes].
    #[arg(long, value_name = "DIR")]
    pub cassette_dir: Option<PathBuf>,
}

/// Which tests' recordings a command reads: `rerun` and `trajectory`.
#[derive(Args, Clone, Debug, Default)]
pub struct TestSelection {
    /// Only tests whose id contains this.
    pub filter: Option<String>,
    /// Only tests matching this filter expression, e.g. 'test(=name) | package(my-crate)'.
    /// Repeatable (any of them).
    #[arg(short = 'E', long = "filterset", value_name = "EXPR")]
    pub exprs: Vec<String>,
}

impl TestSelection {
    /// Whether a test is selected: its id contains FILTER, and it matches any -E.
    pub fn matcher(&self) -> Result<impl Fn(&cassettes::TestId) -> bool + '_> {
        let filters = self
            .exprs
            .iter()
            .map(|e| {
                cassettes::filter::Filter::parse(e).map_err(|e| Error::Usage(format!("-E: {e}")))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(move |test: &cassettes::TestId| {
            self.filter.as_deref().is_none_or(|f| test.contains(f))
                && (filters.is_empty() || filters.iter().any(|f| f.matches(test)))
        })
    }

    /// ` "FILTER"` when one was given, for messages that say nothing matched.
    pub fn described(&self) -> String {
        self.filter
            .as_deref()
            .map(|f| format!(" {f:?}"))
            .unwrap_or_default()
    }
}

/// Where requests go in the modes that call providers.
#[derive(Args, Clone, Debug, Default)]
pub struct UpstreamArg {
    /// Send a provider's requests to another upstream, e.g. openai=http://127.0.0.1:8080, or a
    /// captured host's, e.g. api.anthropic.com=http://127.0.0.1:8081. Repeatable.
    #[arg(long, value_name = "NAME|HOST=URL")]
    pub upstream: Vec<String>,
    /// Let the credentials the daemon signs with (Bedrock's AWS keys) go to HOST, which is not
    /// one of the provider's own https hosts. Repeatable.
    #[arg(long, value_name = "HOST")]
    pub allow_credentials_to: Vec<String>,
}

/// How a daemon answers: `serve` and `test` take the same flags.
#[derive(Args, Clone, Debug, Default)]
pub struct DaemonArgs {
    /// replay (answer from cassettes only), record-missing, record (re-record everything) or
    /// passthrough [default: replay].
    #[arg(long, env = "LLMREPLAY_MODE", value_parser = parse_mode, value_name = "MODE")]
    pub mode: Option<Mode>,
    /// Re-record every request: --mode record.
    #[arg(long, conflicts_with_all = ["record_missing", "passthrough"])]
    pub record: bool,
    /// Replay what is recorded, record what is not: --mode record-missing.
    #[arg(long, conflicts_with = "passthrough")]
    pub record_missing: bool,
    /// Proxy everything upstream and write nothing: --mode passthrough.
    #[arg(long)]
    pub passthrough: bool,
    /// Replay streams at their recorded pace instead of all at once.
    #[arg(long)]
    pub realtime: bool,
    /// Replay the last recording of a request to calls beyond those recorded (polling loops,
    /// load tests), instead of answering them as missing.
    #[arg(long)]
    pub allow_repeats: bool,
    /// Allow a mode that calls real providers when the CI environment variable is set.
    #[arg(long)]
    pub allow_record_in_ci: bool,
    /// Replay everything else, but run MCP server NAME live (its stdio command started by
    /// `cargo llmreplay mcp`, its HTTP url reached) and report each answer that differs from
    /// the recording; nothing is written. Repeatable.
    #[arg(long, value_name = "mcp:NAME", value_parser = parse_live)]
    pub live: Vec<String>,
    /// While recording, stop sending requests upstream once the answers recorded cost this
    /// much (US dollars: 2USD, 0.50USD), priced from their model and usage by the vendored
    /// price table and [prices] of llmreplay.toml. A request that would replace a recording
    /// whose own cost would pass the cap is not sent either. Each refused request is answered
    /// 402 with the cap and the spend; what was recorded is kept; the run fails.
    #[arg(long, value_name = "AMOUNT", value_parser = parse_money)]
    pub max_spend: Option<ledger::Money>,
    #[command(flatten)]
    pub cassettes: CassetteDirArg,
    #[command(flatten)]
    pub upstream: UpstreamArg,
}

pub(crate) fn parse_money(s: &str) -> std::result::Result<ledger::Money, String> {
    ledger::Money::parse_usd(s)
}

fn parse_live(s: &str) -> std::result::Result<String, String> {
    match s.strip_prefix("mcp:") {
        Some(name) if !name.is_empty() => Ok(name.to_string()),
        _ => Err(format!(
            "{s:?}: what runs live is an MCP server, named as mcp:NAME (the --name given to `cargo llmreplay mcp`, or [mcp.NAME] of llmreplay.toml)"
        )),
    }
}

fn parse_mode(s: &str) -> std::result::Result<Mode, runlog::report::UnknownMode> {
    s.parse()
}

impl DaemonArgs {
    /// The mode: a shorthand flag, else `--mode` (or `LLMREPLAY_MODE`), else replay.
    pub fn mode(&self) -> Mode {
        if self.record {
            Mode::Record
        } else if self.record_missing {
            Mode::RecordMissing
        } else if self.passthrough {
            Mode::Passthrough
        } else {
            self.mode.unwrap_or(Mode::Replay)
        }
    }

    /// Modes that call real providers are refused under `CI`, unless forced: CI replays only,
    /// so that a missing cassette fails instead of spending money.
    pub fn check_ci(&self) -> Result<()> {
        let mode = self.mode();
        if mode.goes_upstream() && std::env::var_os("CI").is_some() && !self.allow_record_in_ci {
            return Err(Error::Usage(format!(
                "mode {mode} calls real providers, and CI is set: CI replays only, so that a missing cassette fails \
                 instead of spending money. Record on a developer machine, or pass --allow-record-in-ci."
            )));
        }
        Ok(())
    }

    fn overrides(&self) -> Overrides {
        Overrides {
            mode: Some(self.mode()),
            cassette_dir: self.cassettes.cassette_dir.clone(),
            upstreams: self.upstream.upstream.clone(),
            realtime: self.realtime,
            allow_repeats: self.allow_repeats,
            allow_credentials_to: self.upstream.allow_credentials_to.clone(),
            live_mcp: self.live.clone(),
            max_spend: self.max_spend,
        }
    }

    /// `--max-spend` holds a run that records to a cap: in a mode that saves nothing from
    /// upstream it would hold nothing, and is refused rather than ignored.
    pub fn check_max_spend(&self) -> Result<()> {
        let mode = self.mode();
        if self.max_spend.is_some() && !matches!(mode, Mode::Record | Mode::RecordMissing) {
            return Err(Error::Usage(format!(
                "--max-spend caps what recording spends, and mode {mode} records nothing; record with --record or --record-missing"
            )));
        }
        Ok(())
    }
}

/// A command's settings, resolved once: the workspace, its target folder, and the daemon's
/// settings from flags over `llmreplay.toml` over the environment over defaults.
pub struct Resolved {
    pub root: PathBuf,
    pub settings: Settings,
}

impl Resolved {
    /// For a command that reads cassettes in the workspace the current folder is in.
    pub fn workspace(cassettes: &CassetteDirArg) -> Result<Self> {
        Self::workspace_with_upstreams(cassettes, &UpstreamArg::default())
    }

    /// For a command that sends requests upstream from the workspace (rerun).
    pub fn workspace_with_upstreams(
        cassettes: &CassetteDirArg,
        upstream: &UpstreamArg,
    ) -> Result<Self> {
        // The nearest project's: a cargo workspace, or a Python or Node project (inside a Rust
        // workspace too), whose cassettes are its own.
        let root = crate::locate::project_root()?;
        Self::at(
            root,
            None,
            &Overrides {
                cassette_dir: cassettes.cassette_dir.clone(),
                upstreams: upstream.upstream.clone(),
                allow_credentials_to: upstream.allow_credentials_to.clone(),
                ..Overrides::default()
            },
        )
    }

    /// For a daemon rooted at `root`, with `config` instead of `root/llmreplay.toml` if given.
    pub fn daemon(root: PathBuf, config: Option<&Path>, args: &DaemonArgs) -> Result<Self> {
        args.check_ci()?;
        args.check_max_spend()?;
        Self::at(root, config, &args.overrides())
    }

    fn at(root: PathBuf, config: Option<&Path>, overrides: &Overrides) -> Result<Self> {
        let mut settings = Settings::load(&root, config, overrides)?;
        settings.program = crate::program().clone();
        Ok(Resolved { root, settings })
    }

    pub fn cassette_dir(&self) -> &Path {
        &self.settings.cassette_dir
    }

    /// `CARGO_TARGET_DIR`, else the workspace's `target`.
    pub fn target_dir(&self) -> PathBuf {
        target_dir(&self.root)
    }

    /// Where `test` writes its report, and `prune` and `report merge` look for it.
    pub fn default_report(&self) -> PathBuf {
        self.target_dir().join("llmreplay/report.json")
    }

    /// `path` relative to the workspace, for messages.
    pub fn rel(&self, path: &Path) -> String {
        path.strip_prefix(&self.root)
            .unwrap_or(path)
            .display()
            .to_string()
    }
}

/// `CARGO_TARGET_DIR`, else `root/target`.
pub fn target_dir(root: &Path) -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => std::env::current_dir().unwrap_or_default().join(dir),
        None => root.join("target"),
    }
}

/// Whether a command's FILTER matches any of `names` (an interaction's ID, a test's id): as a
/// glob when it has one of `*?[`, else as a part of one.
pub fn filter_matches(filter: &str, names: &[&str]) -> bool {
    if filter.contains(['*', '?', '[']) {
        return cassettes::glob::glob(filter, cassettes::glob::Separator::Any)
            .is_ok_and(|m| names.iter().any(|n| m.is_match(n)));
    }
    names.iter().any(|n| n.contains(filter))
}

impl DaemonArgs {
    /// The flags of this run that a recording run started from it needs too.
    pub(crate) fn forwarded(&self) -> Vec<OsString> {
        let mut out: Vec<OsString> = Vec::new();
        for u in &self.upstream.upstream {
            out.extend(["--upstream".into(), u.into()]);
        }
        for h in &self.upstream.allow_credentials_to {
            out.extend(["--allow-credentials-to".into(), h.into()]);
        }
        if let Some(dir) = &self.cassettes.cassette_dir {
            out.extend(["--cassette-dir".into(), dir.into()]);
        }
        out
    }
}
