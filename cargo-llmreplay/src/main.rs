//! `cargo llmreplay`: the command line. It parses arguments, starts the daemon and prints what
//! happened; the logic lives in the `daemon` and `cassettes` crates.

mod args;
mod capture;
mod diff_cmd;
mod diff_html;
mod diff_view;
mod error;
mod files;
mod init_cmd;
mod locate;
mod log;
mod match_cmd;
mod mcp_cmd;
mod mv_cmd;
mod program;
mod prune;
mod python_hook;
mod recover;
mod rekey_cmd;
mod render;
mod report;
mod rerun;
mod review_cmd;
mod run_cmd;
mod run_core;
mod serve;
mod source;
mod stale;
mod status;
mod test_cmd;
mod trajectory_cmd;

#[cfg(test)]
mod reference_check;
#[cfg(test)]
mod snapshots;

use clap::{CommandFactory, FromArgMatches, Subcommand};
use std::process::ExitCode;

pub use program::program;

/// The command's long help; the providers come from the family list, so it never drifts.
fn long_about() -> String {
    format!(
        "Record LLM API calls once, replay them in every test run: offline, free, byte for byte.\n\n\
        A local daemon stands between your tests and the providers ({}, and OpenAI-compatible \
        gateways). In record mode it forwards each request and writes the answer to \
        tests/cassettes/<test>/<provider>.json; in replay mode (the default) it answers from those \
        files with no network and no keys.",
        providers::family_names()
    )
}

/// The end of the top-level help: where the rest is said.
fn after_help() -> String {
    format!(
        "The book (getting started, every command and flag, troubleshooting): {}",
        daemon::book::url(daemon::book::INTRODUCTION)
    )
}

#[derive(clap::Parser)]
#[command(
    name = "cargo llmreplay",
    bin_name = "cargo llmreplay",
    version,
    about = "Record LLM API calls once, replay them in every test run: offline, free, byte for byte.",
    long_about = long_about(),
    after_help = after_help()
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
    Init(init_cmd::InitArgs),
    Run(run_cmd::RunArgs),
    Serve(serve::ServeArgs),
    Status(status::StatusArgs),
    Diff(diff_cmd::DiffArgs),
    Prune(prune::PruneArgs),
    Recover(recover::RecoverArgs),
    Mv(mv_cmd::MvArgs),
    Review(review_cmd::ReviewArgs),
    Rerun(rerun::RerunArgs),
    Trajectory(trajectory_cmd::TrajectoryArgs),
    /// Rules for values that change every run (times, UUIDs, minted ids), from the last run's misses
    #[command(subcommand, name = "match")]
    Match(match_cmd::MatchCommand),
    Rekey(rekey_cmd::RekeyArgs),
    Mcp(mcp_cmd::McpArgs),
    /// Work with run reports (merge the reports of a sharded suite)
    #[command(subcommand)]
    Report(report::ReportCommand),
}

fn main() -> ExitCode {
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    // Cargo runs `cargo-llmreplay llmreplay <args>` for `cargo llmreplay <args>`.
    let via_cargo = args.get(1).is_some_and(|a| a == "llmreplay");
    if via_cargo {
        args.remove(1);
    }
    program::set(daemon::Program::from_args(
        args.first()
            .map_or(std::ffi::OsStr::new(""), |a| a.as_os_str()),
        via_cargo,
    ));
    // The target runner, once per test process: before anything else, so it starts fast.
    if args.get(1).is_some_and(|a| a == "__runner") {
        let error = runner_plugin::run(args.split_off(2));
        render::stderr(&format!("cargo-llmreplay __runner: {error}\n"));
        return ExitCode::from(runner_plugin::RUNNER_FAILED);
    }
    // `test` takes every argument after it as its own (its flags and nextest's), as the
    // parser below would give them: building that parser, every command's flags and help,
    // would be a few hundred microseconds of every test run.
    let command = match args.get(1).is_some_and(|a| a == "test") {
        true => Command::Test {
            args: args.split_off(2),
        },
        false => {
            let matches = program::help(Cli::command()).get_matches_from(args);
            Cli::from_arg_matches(&matches)
                .unwrap_or_else(|e| e.exit())
                .command
        }
    };
    // `test` and `serve` set up their own log: a file beside the report, `-v`.
    if !matches!(
        command,
        Command::Test { .. } | Command::Serve(_) | Command::Run(_)
    ) {
        let _ = log::init(0, None);
    }
    let result = match command {
        Command::Test { args } => test_cmd::run(args),
        Command::Init(args) => init_cmd::run(args),
        Command::Run(args) => run_cmd::run(args),
        Command::Mcp(args) => mcp_cmd::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Status(args) => status::run(args),
        Command::Diff(args) => diff_cmd::run(args),
        Command::Prune(args) => prune::run(args),
        Command::Recover(args) => recover::run(args),
        Command::Mv(args) => mv_cmd::run(args),
        Command::Review(args) => review_cmd::run(args),
        Command::Rerun(args) => rerun::run(args),
        Command::Trajectory(args) => trajectory_cmd::run(args),
        Command::Match(cmd) => match_cmd::run(cmd),
        Command::Rekey(args) => rekey_cmd::run(args),
        Command::Report(cmd) => report::run(cmd),
    };
    log::finish();
    match result {
        Ok(outcome) => outcome.into(),
        Err(e) => {
            render::stderr(&format!(
                "error: {}\n",
                render::term_lines(&error_chain(&e))
            ));
            ExitCode::from(e.exit_code())
        }
    }
}

/// The error and its causes, as `error: what: why: deeper why`, each said once.
fn error_chain(e: &error::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        let said = cause.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = cause.source();
    }
    text
}
