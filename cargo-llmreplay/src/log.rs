//! The daemon's log: a line per request and per WebSocket session (README, "The daemon's
//! log"), on stderr as `-v` asks, and for `test` always in a file beside the report.

use crate::error::{Error, Result};
use std::io::{BufWriter, IsTerminal, Write};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// What the log file keeps through tracing: warnings, and this tool's messages to `-vv`'s
/// level. Not the request heads (`-vv` shows them): formatting them was a tenth of the daemon's
/// work on a replay. Nor the requests: the daemon writes their lines itself (`request_log`).
const FILE_FILTER: &str =
    "warn,cargo_llmreplay=debug,cargo_llmreplay::head=off,cargo_llmreplay::request=off";

/// How often the log file's buffer is written out while the command runs.
const FLUSH_EVERY: std::time::Duration = std::time::Duration::from_millis(500);

/// The log file, buffered: a line per request would be hundreds of small writes a run, each
/// on the request's way. It is written out every [`FLUSH_EVERY`] and by [`flush`].
#[derive(Clone)]
struct Buffered(Arc<Mutex<BufWriter<std::fs::File>>>);

static FILE: OnceLock<Buffered> = OnceLock::new();

/// The log being written, under a temporary name beside where it goes: [`finish`] renames it
/// into place whole, so a second run in the same place replaces the file, never mixes with it.
static PENDING: Mutex<Option<(tempfile::TempPath, std::path::PathBuf)>> = Mutex::new(None);

impl Buffered {
    fn lock(&self) -> MutexGuard<'_, BufWriter<std::fs::File>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// One line, written into the buffer under its lock.
struct Line<'a>(MutexGuard<'a, BufWriter<std::fs::File>>);

impl Write for Line<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Buffered {
    type Writer = Line<'a>;

    fn make_writer(&'a self) -> Line<'a> {
        Line(self.lock())
    }
}

/// Writes out the log file and puts it in its place; the command calls it before it exits.
pub fn finish() {
    flush();
    if let Some((pending, path)) = PENDING.lock().unwrap_or_else(|p| p.into_inner()).take() {
        if let Err(e) = pending.persist(&path) {
            crate::render::stderr(&format!(
                "cargo-llmreplay: warning: cannot write {}: {}\n",
                path.display(),
                e.error
            ));
        }
    }
}

/// Writes out what the log file holds.
pub fn flush() {
    if let Some(file) = FILE.get() {
        let _ = file.lock().flush();
    }
}

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

/// Removes the temporary logs in `dir` that no live run holds: a run killed before its end
/// leaves one.
fn sweep_dead_logs(dir: &Path, own: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if path == own || !(name.starts_with(".llmreplay-") && name.ends_with(".log.tmp")) {
            continue;
        }
        let unheld = std::fs::File::open(&path).is_ok_and(|f| f.try_lock().is_ok());
        if unheld {
            let _ = std::fs::remove_file(&path);
        }
    }
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
            let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
            let (f, pending) = tempfile::Builder::new()
                .prefix(".llmreplay-")
                .suffix(".log.tmp")
                .tempfile_in(dir.unwrap_or(Path::new(".")))
                .map_err(|e| Error::io(format!("cannot write {}", path.display()), e))?
                .into_parts();
            // Held while this run lives: a later run removes only the temporary logs of runs
            // that are gone (killed before they could replace their log), never a live one's.
            let _ = f.lock();
            sweep_dead_logs(dir.unwrap_or(Path::new(".")), &pending);
            *PENDING.lock().unwrap_or_else(|p| p.into_inner()) = Some((pending, path.into()));
            let file = Buffered(Arc::new(Mutex::new(BufWriter::new(f))));
            let lines = file.clone();
            daemon::request_log::write_to(move |line| {
                let _ = lines.lock().write_all(line.as_bytes());
            });
            if FILE.set(file.clone()).is_ok() {
                std::thread::spawn(|| loop {
                    std::thread::sleep(FLUSH_EVERY);
                    flush();
                });
            }
            Some(
                tracing_subscriber::fmt::layer()
                    .with_writer(file)
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
