//! `cargo llmreplay`: the command line. It parses arguments, starts the daemon and prints what
//! happened; the logic lives in the `daemon` and `cassettes` crates.

mod serve;

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
    Serve(serve::ServeArgs),
}

fn main() -> ExitCode {
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    // Cargo runs `cargo-llmreplay llmreplay <args>` for `cargo llmreplay <args>`.
    if args.get(1).is_some_and(|a| a == "llmreplay") {
        args.remove(1);
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
        Command::Serve(args) => serve::run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
