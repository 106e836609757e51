//! The run log on disk: the journal's events written, in order, to the run's
//! `events.ndjson` through one buffer (README, "The run log"). An exchange's event is
//! serialised from what the exchange already holds, borrowed, into the buffer: no copies, no
//! thread to wake; the buffer reaches the file when it fills, when a test ends and when the
//! run ends. Its schema is the `llmreplay-runlog` crate's.

use runlog::Event;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

/// The run's event log.
pub struct RunLog {
    out: Mutex<BufWriter<std::fs::File>>,
    started: Instant,
    dir: PathBuf,
}

impl RunLog {
    /// Opens `dir/events.ndjson`, the folder made if need be.
    pub fn create(dir: &Path) -> std::io::Result<RunLog> {
        std::fs::create_dir_all(dir)?;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(runlog::EVENTS_FILE))?;
        // Held while the run lives: a later run that tidies old runs' folders leaves it alone.
        file.lock_shared()?;
        Ok(RunLog {
            out: Mutex::new(BufWriter::with_capacity(64 << 10, file)),
            started: Instant::now(),
            dir: dir.to_path_buf(),
        })
    }

    /// The run's folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Milliseconds since the run began.
    pub fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// Milliseconds from the run's start to `at`.
    pub fn ms_at(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.started).as_millis() as u64
    }

    /// Writes an event (into the buffer).
    pub fn emit(&self, event: Event) {
        let mut line = runlog::to_line(&event);
        line.push(b'\n');
        let _ = self.out.lock().expect("run log lock").write_all(&line);
    }

    /// Writes an exchange's event from borrowed parts (into the buffer): formatted in this
    /// thread's own line, so the shared buffer is held only to copy it.
    pub fn exchange(&self, exchange: &runlog::Exchange<'_>) {
        thread_local! {
            static LINE: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        LINE.with_borrow_mut(|line| {
            line.clear();
            runlog::write_exchange(line, exchange);
            line.push(b'\n');
            let _ = self.out.lock().expect("run log lock").write_all(line);
        });
    }

    /// Puts what the buffer holds in the file.
    pub fn flush(&self) {
        let _ = self.out.lock().expect("run log lock").flush();
    }
}
