//! `cargo llmreplay`: the command line. It parses arguments, starts the daemon and prints what
//! happened; the logic lives in the `daemon` and `cassettes` crates.

mod diff_cmd;
mod locate;
mod prune;
mod report;
mod rerun;
mod serve;
mod status;
mod test_cmd;

#[cfg(test)]
mod snapshots;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "cargo llmreplay",
    bin_name = "cargo llmreplay",
    version,
    about = "Record LLM API calls once, replay them in every test run: offline, free, byte for byte.",
    long_about = "Record LLM API calls once, replay them in every test run: offline, free, byte for byte.\n\n\
        A local daemon stands between your tests and the providers (OpenAI, Anthropic, Gemini, Ollama, \
        OpenAI-compatible gateways). In record mode it forwards each request and writes the answer to \
        tests/cassettes/<test>/<provider>.json; in replay mode (the default) it answers from those files \
        with no network and no keys."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the crate's tests under cargo-nextest against a per-run daemon, then report
    #[command(disable_help_flag = true)]
    Test {
        /// This command's flags and cargo nextest run's (see cargo llmreplay test --help)
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
    Serve(serve::ServeArgs),
    Status(status::StatusArgs),
    Diff(diff_cmd::DiffArgs),
    Prune(prune::PruneArgs),
    Rerun(rerun::RerunArgs),
    /// Work with run reports (merge the reports of a sharded suite)
    #[command(subcommand)]
    Report(report::ReportCommand),
}

/// The workspace root (`cargo locate-project`) and the cassette folder: the flag, else
/// `cassette_dir` of llmreplay.toml, else tests/cassettes.
pub(crate) fn workspace(
    cassette_dir: Option<std::path::PathBuf>,
) -> Result<(std::path::PathBuf, std::path::PathBuf), String> {
    let root = locate::workspace_root()?;
    let overrides = daemon::Overrides {
        cassette_dir,
        ..daemon::Overrides::default()
    };
    let settings = daemon::Settings::load(&root, None, &overrides).map_err(|e| e.to_string())?;
    Ok((root, settings.cassette_dir))
}

/// `CARGO_TARGET_DIR`, else the workspace's `target`.
pub(crate) fn target_dir(root: &std::path::Path) -> std::path::PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => std::env::current_dir().unwrap_or_default().join(dir),
        None => root.join("target"),
    }
}

/// Modes that call real providers are refused under `CI`, unless forced.
pub(crate) fn refuse_upstream_in_ci(mode: daemon::Mode, allowed: bool) -> Result<(), String> {
    if mode.goes_upstream() && std::env::var_os("CI").is_some() && !allowed {
        return Err(format!(
            "mode {mode} calls real providers, and CI is set: CI replays only, so that a missing cassette fails \
             instead of spending money. Record on a developer machine, or pass --allow-record-in-ci."
        ));
    }
    Ok(())
}

fn main() -> ExitCode {
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    // Cargo runs `cargo-llmreplay llmreplay <args>` for `cargo llmreplay <args>`.
    if args.get(1).is_some_and(|a| a == "llmreplay") {
        args.remove(1);
    }
    // The target runner, once per test process: before anything else, so it starts fast.
    if args.get(1).is_some_and(|a| a == "__runner") {
        let error = runner_plugin::run(args.split_off(2));
        eprintln!("cargo-llmreplay __runner: {error}");
        return ExitCode::from(101);
    }
    let cli = Cli::parse_from(args);
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("LLMREPLAY_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let result = match cli.command {
        Command::Test { args } => test_cmd::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Status(args) => status::run(args),
        Command::Diff(args) => diff_cmd::run(args),
        Command::Prune(args) => prune::run(args),
        Command::Rerun(args) => rerun::run(args),
        Command::Report(cmd) => report::run(cmd),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
