//! `cargo llmreplay serve`: the daemon alone, for clients in any language and for plain
//! `cargo test`. Prints its base URL first, serves until SIGINT or SIGTERM, then reports.

use clap::Args;
use daemon::{Daemon, Mode, Overrides, Settings};
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args)]
#[command(
    about = "Run the record/replay daemon alone, until Ctrl-C or SIGTERM",
    long_about = "Run the record/replay daemon alone, until Ctrl-C or SIGTERM.\n\n\
        The first line on stdout is LLMREPLAY_BASE_URL=http://127.0.0.1:<port>. Point clients at \
        <base>/<provider>/... (e.g. OPENAI_BASE_URL=<base>/openai/v1) and name the test in an \
        X-Test-Id header, or use <base>/t/<percent-encoded test id>/<provider>/... . Requests to \
        well-known paths (/v1/chat/completions, /v1/messages, /api/chat, ...:generateContent) need no \
        provider prefix. On exit it prints what was replayed, missing and recorded.",
    after_help = "Examples:\n  cargo llmreplay serve                          # replay from tests/cassettes\n  \
        cargo llmreplay serve --mode record-missing    # record what is not recorded yet\n  \
        cargo llmreplay serve --upstream openai=http://127.0.0.1:8080 --mode record"
)]
pub struct ServeArgs {
    /// Address to listen on; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:0")]
    addr: SocketAddr,
    /// replay (answer from cassettes only), record-missing, record (re-record everything) or passthrough.
    #[arg(long, env = "LLMREPLAY_MODE", value_parser = parse_mode, default_value = "replay")]
    mode: Mode,
    /// Where cassettes live [default: cassette_dir in llmreplay.toml, else tests/cassettes].
    #[arg(long, value_name = "DIR")]
    cassette_dir: Option<PathBuf>,
    /// Send a provider's requests to another upstream, e.g. openai=http://127.0.0.1:8080. Repeatable.
    #[arg(long, value_name = "NAME=URL")]
    upstream: Vec<String>,
    /// Replay streams at their recorded pace instead of all at once.
    #[arg(long)]
    realtime: bool,
    /// Replay the last recording of a request to calls beyond those recorded (polling loops, load
    /// tests), instead of answering them as missing.
    #[arg(long)]
    allow_repeats: bool,
    /// Configuration file [default: ./llmreplay.toml when present].
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    /// Allow a mode that calls real providers when the CI environment variable is set.
    #[arg(long)]
    allow_record_in_ci: bool,
}

fn parse_mode(s: &str) -> Result<Mode, String> {
    s.parse().map_err(|e: daemon::ConfigError| e.to_string())
}

pub fn run(args: ServeArgs) -> Result<ExitCode, String> {
    crate::refuse_upstream_in_ci(args.mode, args.allow_record_in_ci)?;
    let overrides = Overrides {
        mode: Some(args.mode),
        cassette_dir: args.cassette_dir,
        upstreams: args.upstream,
        realtime: args.realtime,
        allow_repeats: args.allow_repeats,
    };
    let root =
        std::env::current_dir().map_err(|e| format!("cannot read the current directory: {e}"))?;
    let settings =
        Settings::load(&root, args.config.as_deref(), &overrides).map_err(|e| e.to_string())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    let upstreams = settings.upstream_report();
    runtime.block_on(async move {
        let mode = settings.mode;
        let dir = settings.cassette_dir.clone();
        let daemon = Daemon::bind(settings, args.addr).await.map_err(|e| e.to_string())?;
        let journal = daemon.journal();
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "LLMREPLAY_BASE_URL=http://{}", daemon.local_addr())
            .and_then(|_| stdout.flush())
            .map_err(|e| format!("cannot write to stdout: {e}"))?;
        drop(stdout);
        eprintln!("cargo-llmreplay: serving in {mode} mode from {}", dir.display());
        if mode.goes_upstream() {
            eprint!("cargo-llmreplay: upstreams:\n{upstreams}");
        }
        let stats = daemon.run(shutdown_signal()).await;
        eprintln!(
            "cargo-llmreplay: {} requests: {} replayed, {} missing, {} recorded, {} re-recorded, {} unchanged, {} passed through{}{}{}",
            stats.requests,
            stats.hits,
            stats.misses,
            stats.recorded,
            stats.replaced,
            stats.unchanged,
            stats.passthrough,
            if stats.broken > 0 { format!(", {} broken streams", stats.broken) } else { String::new() },
            if stats.errors > 0 { format!(", {} errors", stats.errors) } else { String::new() },
            if stats.faults > 0 { format!(", {} answered by faults", stats.faults) } else { String::new() },
        );
        for miss in journal.misses() {
            let prompt = miss.detail.prompt.map(|p| format!(" {p:?}")).unwrap_or_default();
            eprintln!("  missing: {}: {}{prompt}", miss.test, miss.path);
        }
        Ok(if stats.misses > 0 || stats.errors > 0 { ExitCode::from(1) } else { ExitCode::SUCCESS })
    })
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("installing a SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}
