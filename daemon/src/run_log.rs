//! The run log on disk: the journal's events written, in order, to the run's
//! `events.ndjson` by a thread of their own with a buffered writer, so an exchange only hands
//! its event over (README, "The run log"). Its schema is the `llmreplay-runlog` crate's.

use runlog::Event;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, Receiver, Sender, SyncSender};
use std::time::{Duration, Instant};

enum Message {
    Event(Event),
    /// Everything sent before is on disk once this is answered.
    Flush(SyncSender<()>),
}

/// The run's event log, written in the background.
pub struct RunLog {
    tx: Sender<Message>,
    started: Instant,
    dir: PathBuf,
}

impl RunLog {
    /// Opens `dir/events.ndjson` (the folder made if need be) and starts its writer.
    pub fn create(dir: &Path) -> std::io::Result<RunLog> {
        std::fs::create_dir_all(dir)?;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(runlog::EVENTS_FILE))?;
        let (tx, rx) = channel();
        std::thread::Builder::new()
            .name("llmreplay-run-log".into())
            .spawn(move || write_events(file, rx))?;
        Ok(RunLog {
            tx,
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

    /// Hands an event to the writer.
    pub fn emit(&self, event: Event) {
        let _ = self.tx.send(Message::Event(event));
    }

    /// Waits (a little at most) until every event emitted so far is written.
    pub fn flush(&self) {
        let (done, wait) = std::sync::mpsc::sync_channel(1);
        if self.tx.send(Message::Flush(done)).is_ok() {
            let _ = wait.recv_timeout(Duration::from_secs(10));
        }
    }
}

fn write_events(file: std::fs::File, rx: Receiver<Message>) {
    let mut out = std::io::BufWriter::with_capacity(64 << 10, file);
    let write = |out: &mut std::io::BufWriter<std::fs::File>, message| match message {
        Message::Event(event) => {
            let mut line = runlog::to_line(&event);
            line.push(b'\n');
            let _ = out.write_all(&line);
        }
        Message::Flush(done) => {
            let _ = out.flush();
            let _ = done.send(());
        }
    };
    // Lines gather in the buffer and reach the file when it fills, at a flush, or after a
    // quiet tenth of a second: no write per exchange on the replay path.
    loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(message) => write(&mut out, message),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                let _ = out.flush();
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                let _ = out.flush();
                return;
            }
        }
    }
}
