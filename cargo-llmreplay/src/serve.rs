//! `cargo llmreplay serve`: the daemon alone, for clients in any language and for plain
//! `cargo test`. Prints its base URL first, serves until SIGINT or SIGTERM, then reports.

use crate::args::{DaemonArgs, Resolved};
use crate::error::{Error, Outcome, Result};
use crate::render;
use clap::Args;
use daemon::Daemon;
use std::net::SocketAddr;
use std::path::PathBuf;

/// The long help; the well-known paths come from the families, so it never drifts.
fn long_about() -> String {
    format!(
        "Run the record/replay daemon alone, until Ctrl-C or SIGTERM.\n\n\
        The first line on stdout is LLMREPLAY_BASE_URL=http://127.0.0.1:<port>. Point clients at \
        <base>/<provider>/... (e.g. OPENAI_BASE_URL=<base>/openai/v1) and name the test in an \
        X-Test-Id header, or use <base>/t/<percent-encoded test id>/<provider>/... . Requests to \
        well-known paths ({}) need no provider prefix. On exit it prints what was replayed, missing \
        and recorded.",
        providers::example_paths()
    )
}

#[derive(Args)]
#[command(
    about = "Run the record/replay daemon alone, until Ctrl-C or SIGTERM",
    long_about = long_about(),
    after_help = "Examples:\n  cargo llmreplay serve                          # replay from tests/cassettes\n  \
        cargo llmreplay serve --mode record-missing    # record what is not recorded yet\n  \
        cargo llmreplay serve --upstream openai=http://127.0.0.1:8080 --mode record"
)]
pub struct ServeArgs {
    /// Address to listen on; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:0")]
    addr: SocketAddr,
    /// Configuration file [default: ./llmreplay.toml when present].
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    #[command(flatten)]
    daemon: DaemonArgs,
}

pub fn run(args: ServeArgs) -> Result<Outcome> {
    let root =
        std::env::current_dir().map_err(|e| Error::io("cannot read the current directory", e))?;
    let resolved = Resolved::daemon(root, args.config.as_deref(), &args.daemon)?;
    let settings = resolved.settings;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io("cannot start the async runtime", e))?;
    let upstreams = settings.upstream_report();
    runtime.block_on(async move {
        let mode = settings.mode;
        let dir = settings.cassette_dir.clone();
        let daemon = Daemon::bind(settings, args.addr).await?;
        let journal = daemon.journal();
        render::stdout(&format!(
            "LLMREPLAY_BASE_URL=http://{}\n",
            daemon.local_addr()
        ))
        .map_err(|e| Error::io("cannot write to stdout", e))?;
        render::stderr(&format!(
            "cargo-llmreplay: serving in {mode} mode from {}\n",
            dir.display()
        ));
        if mode.goes_upstream() {
            render::stderr(&format!("cargo-llmreplay: upstreams:\n{upstreams}"));
        }
        let stats = daemon.run(shutdown_signal()).await;
        let mut out = format!("cargo-llmreplay: {}\n", render::stats_sentence(&stats));
        for miss in journal.misses() {
            let prompt = miss
                .detail
                .prompt
                .map(|p| format!(" {p:?}"))
                .unwrap_or_default();
            out.push_str(&format!(
                "  missing: {}: {}{prompt}\n",
                render::term(&miss.test),
                render::term(&miss.path)
            ));
        }
        render::stderr(&out);
        Ok(Outcome::gate(stats.misses > 0 || stats.errors > 0))
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
