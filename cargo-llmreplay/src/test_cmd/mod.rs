//! `cargo llmreplay test`: starts the daemon in this process, runs `cargo nextest run` with the
//! target runner that points every test at it, then reports what is missing, unused and changed.
//! In three steps around `run_core`, which it shares with `run`: `plan` (what the run will do,
//! from its arguments and settings alone), `launch` (nextest spawned and wired to the daemon,
//! the cassettes read beside them) and `finish` (the suite listed, the report and review);
//! `flags` splits the command line between this command and nextest.

mod finish;
mod flags;
mod launch;
pub(crate) mod misses;
mod outcomes;
mod plan;

use flags::{check_typos, split_args};
use launch::launch;
use plan::{Facts, RunPlan};

use crate::args::{DaemonArgs, Resolved};
use crate::error::{Error, Outcome, Result};
use crate::run_core::CaThread;
use clap::{CommandFactory, FromArgMatches, Parser};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The long help; the variables come from the families' tables, so it never drifts.
fn long_about() -> String {
    format!(
        "Run the crate's tests under cargo-nextest, each pointed at a per-run record/replay daemon.\n\n\
        Every test process gets LLMREPLAY_BASE_URL and the base URL every client reads ({}, and \
        <NAME>_BASE_URL for a gateway of llmreplay.toml) for its own cassettes in \
        tests/cassettes/<test>/. In replay mode (the default) nothing reaches the network; a request \
        with no recording fails. After the run it reports missing, unused and changed cassettes and \
        writes target/llmreplay/report.json.\n\n\
        Every argument not listed below goes to `cargo nextest run` (-E, -p, --workspace, \
        --partition, --retries, -- ...).",
        providers::env::injected_names()
    )
}

#[derive(Parser, Debug)]
#[command(
    name = "cargo llmreplay test",
    override_usage = "cargo llmreplay test [OPTIONS] [NEXTEST ARGS...] [-- TEST BINARY ARGS...]",
    about = "Run the crate's tests under cargo-nextest, each pointed at a per-run record/replay daemon",
    long_about = long_about(),
    after_help = "Examples:\n  cargo llmreplay test                               # replay; fails on a missing cassette\n  \
        cargo llmreplay test --record-missing              # record what is not recorded yet\n  \
        cargo llmreplay test --record -E 'test(=chat)'     # re-record one test\n  \
        cargo llmreplay test --deny unused --deny changed  # strict CI gate"
)]
pub struct TestArgs {
    #[command(flatten)]
    daemon: DaemonArgs,
    #[command(flatten)]
    gates: crate::report::GateArgs,
    /// After a recording run, walk through every recorded answer that changed (cargo llmreplay
    /// review): accept (stage), reject or skip each. After a replay that missed, walk each
    /// missed test first, with a key that records it again now. Not under CI.
    #[arg(long, short = 'i')]
    review: bool,
    /// How tests are pointed at the daemon. auto: on Linux, in replay, with no target runner
    /// of your own, one environment for the whole run and each connection's test read from its
    /// process (no exec per test); else exec: a target runner sets each test's environment.
    #[arg(long, value_enum, default_value = "auto")]
    runner: RunnerChoice,
}

/// How each test is pointed at the daemon.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum RunnerChoice {
    /// Without a runner where that works, else exec.
    Auto,
    /// A target runner for every test process.
    Exec,
}

pub fn run(args: Vec<OsString>) -> Result<Outcome> {
    // The run's CA, begun before anything else on its own thread: its key, then its files
    // once their place is known, are what nextest's start waits for.
    let ca = CaThread::start();
    let (own, nextest_args) = split_args(args);
    if let Err(e) = check_typos(&nextest_args) {
        let _ = e.print();
        return Ok(Outcome::Usage);
    }
    let parsed = crate::program::help(
        TestArgs::command()
            .bin_name(format!("{} test", crate::program()))
            .override_usage(format!(
                "{} test [OPTIONS] [NEXTEST ARGS...] [-- TEST BINARY ARGS...]",
                crate::program()
            )),
    )
    .try_get_matches_from(std::iter::once(OsString::from("cargo llmreplay test")).chain(own))
    .and_then(|m| TestArgs::from_arg_matches(&m));
    let args = match parsed {
        Ok(args) => args,
        Err(e) => {
            // Help and version are printed on stdout and are no error.
            let _ = e.print();
            return Ok(if e.use_stderr() {
                Outcome::Usage
            } else {
                Outcome::Success
            });
        }
    };
    args.daemon.check_ci()?;
    let root = preconditions()?;
    let resolved = Resolved::daemon(root, None, &args.daemon)?;
    let (runner_key, chain) = user_runner(&resolved.root)?;
    let facts = Facts {
        mode: resolved.settings.mode,
        chained_runner: !chain.is_empty(),
        peers_supported: daemon::peer::Peers::supported(),
        default_report: resolved.default_report(),
        target_dir: resolved.target_dir(),
    };
    let plan = RunPlan::new(&args, nextest_args, facts);
    let launched = launch(&plan, resolved, ca, runner_key, chain)?;
    finish::finish(&plan, &args.gates.deny, launched)
}

/// The nextest target runner: the small `cargo-llmreplay-runner` installed beside this program
/// (it starts in about half the time), else this program's own `__runner`.
fn runner_command() -> Result<Vec<String>> {
    let exe =
        std::env::current_exe().map_err(|e| Error::io("cannot find this program's path", e))?;
    let small = exe.with_file_name(format!(
        "cargo-llmreplay-runner{}",
        std::env::consts::EXE_SUFFIX
    ));
    Ok(if small.is_file() {
        vec![small.to_string_lossy().into_owned()]
    } else {
        vec![exe.to_string_lossy().into_owned(), "__runner".into()]
    })
}

/// Finds the workspace root and checks nextest: usually without a cargo call (see `locate`).
fn preconditions() -> Result<PathBuf> {
    let root = crate::locate::workspace_root()?;
    crate::locate::check_nextest(&crate::args::target_dir(&root))?;
    Ok(root)
}

/// Which runner key to set, and the user's own runner to chain. A runner for the host triple
/// (`CARGO_TARGET_<TRIPLE>_RUNNER`, or `target.<triple>.runner` in `.cargo/config.toml`) wins
/// over a `cfg(...)` one in cargo, so when there is one this sets that key instead.
fn user_runner(root: &Path) -> Result<(String, Vec<String>)> {
    let cfg_key = "target.'cfg(all())'.runner".to_string();
    let env_runner =
        std::env::vars().any(|(k, _)| k.starts_with("CARGO_TARGET_") && k.ends_with("_RUNNER"));
    let config_files: Vec<PathBuf> = [".cargo/config.toml", ".cargo/config"]
        .iter()
        .map(|f| root.join(f))
        .filter(|p| p.exists())
        .collect();
    if !env_runner && config_files.is_empty() {
        return Ok((cfg_key, Vec::new()));
    }
    let host = host_triple()?;
    let key = format!("target.{host}.runner");
    let var = format!(
        "CARGO_TARGET_{}_RUNNER",
        host.to_uppercase().replace(['-', '.'], "_")
    );
    if let Ok(r) = std::env::var(&var) {
        return Ok((key, r.split_whitespace().map(str::to_string).collect()));
    }
    for file in config_files {
        let text = std::fs::read_to_string(&file)
            .map_err(|e| Error::io(format!("cannot read {}", file.display()), e))?;
        let value: toml::Table = toml::from_str(&text)
            .map_err(|e| Error::Precondition(format!("{}: {e}", file.display())))?;
        let runner = value
            .get("target")
            .and_then(|t| t.get(&host))
            .and_then(|t| t.get("runner"));
        match runner {
            Some(toml::Value::String(s)) => {
                return Ok((key, s.split_whitespace().map(str::to_string).collect()))
            }
            Some(toml::Value::Array(a)) => {
                return Ok((
                    key,
                    a.iter()
                        .filter_map(|v| v.as_str().map(str::to_string))
                        .collect(),
                ))
            }
            _ => {}
        }
    }
    Ok((cfg_key, Vec::new()))
}

fn host_triple() -> Result<String> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let out = Command::new(rustc)
        .arg("-vV")
        .output()
        .map_err(|e| Error::io("cannot run rustc", e))?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_string))
        .ok_or_else(|| Error::Precondition("rustc -vV printed no host triple".into()))
}

#[cfg(test)]
mod tests {
    use super::TestArgs;
    use clap::CommandFactory;

    /// The usage says where nextest's arguments go; the help names every `--deny` value and
    /// both forms of `--upstream`.
    #[test]
    fn the_help_says_what_goes_where() {
        let mut cmd = TestArgs::command();
        let usage = cmd.render_usage().to_string();
        assert!(usage.contains("[NEXTEST ARGS...]"), "{usage}");
        let help = cmd.render_long_help().to_string();
        for part in ["escaped", "NAME|HOST=URL", "api.anthropic.com="] {
            assert!(help.contains(part), "{part} in:\n{help}");
        }
    }
}
