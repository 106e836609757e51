//! The daemon's log: a line per request and per WebSocket session (README, "The daemon's
//! log"), on stderr as `-v` asks, and for `test` always in a file beside the report.

use crate::error::{Error, Result};
use std::io::IsTerminal;
use std::path::Path;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// What the log file keeps: every request, with the message of each miss and error.
const FILE_FILTER: &str = "warn,cargo_llmreplay=debug";

/// The filter for stderr: `LLMREPLAY_LOG`, else `RUST_LOG`, else warnings, with a line per
/// request from `-v` and their heads (secrets masked) from `-vv`.
fn stderr_filter(verbose: u8) -> EnvFilter {
    for var in ["LLMREPLAY_LOG", "RUST_LOG"] {
        if let Ok(filter) = EnvFilter::try_from_env(var) {
            return filter;
        }
    }
    EnvFilter::new(match verbose {
        0 => "warn",
        1 => "warn,cargo_llmreplay=info",
        _ => "warn,cargo_llmreplay=debug",
    })
}

/// Sends the log to stderr, and to `file` (made anew) when given. Called once, by the
/// command that runs.
pub fn init(verbose: u8, file: Option<&Path>) -> Result<()> {
    let stderr = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none())
        .with_target(false)
        .with_filter(stderr_filter(verbose));
    let file = match file {
        Some(path) => {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)
                    .map_err(|e| Error::io(format!("cannot make {}", dir.display()), e))?;
            }
            let f = std::fs::File::create(path)
                .map_err(|e| Error::io(format!("cannot write {}", path.display()), e))?;
            Some(
                tracing_subscriber::fmt::layer()
                    .with_writer(std::sync::Mutex::new(f))
                    .with_ansi(false)
                    .with_target(false)
                    .with_filter(EnvFilter::new(FILE_FILTER)),
            )
        }
        None => None,
    };
    // A second call (a test of this crate, say) keeps the first subscriber.
    let _ = tracing_subscriber::registry()
        .with(stderr)
        .with(file)
        .try_init();
    Ok(())
}
