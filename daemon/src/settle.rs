//! A test's end, the one moment its recordings reach its cassettes: once every exchange of
//! the test has ended, each of its cassette files is written once, under its folder's lock
//! (README, "Record semantics"). The runner says a test ended when its process exits, a
//! plugin when its test's teardown is done; what is left at the run's end is settled then.

use crate::config::Mode;
use crate::journal::Journal;
use crate::run_log::RunLog;
use crate::state::State;
use cassettes::{Store, TestId};
use runlog::TestOutcome;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// How long a test's end waits for its exchanges still under way (a stream the client stopped
/// reading, a recording being saved): past it, what they record is settled at the run's end.
const TEST_END_WAIT: Duration = Duration::from_secs(10);

/// Notes how a test ended and, when the mode records, writes its recordings to its
/// cassettes: under `--record`, a test that passed (in a run not interrupted) keeps exactly
/// what it recorded; any other adds what it recorded and removes nothing.
pub(crate) async fn test_ended(state: &Arc<State>, test: TestId, outcome: TestOutcome) {
    state.journal.ended(&test, outcome);
    let mode = state.settings.mode;
    if !mode.writes() {
        return;
    }
    let interrupted = state.interrupted.load(std::sync::atomic::Ordering::SeqCst);
    let (store, journal) = (state.store.clone(), state.journal.clone());
    let settled = tokio::task::spawn_blocking(move || {
        write_ended(
            &store,
            &journal,
            &test,
            outcome,
            mode,
            interrupted,
            TEST_END_WAIT,
        )
    })
    .await;
    match settled {
        Ok(Ok(())) => {}
        // Kept in the run's spool and the test's entry: the run's end tries again.
        Ok(Err(e)) => tracing::error!("cargo-llmreplay: {e}"),
        Err(e) => tracing::error!("cargo-llmreplay: settling a test failed: {e}"),
    }
}

/// Writes the recordings of `test`, which ended with `outcome` (the journal told already), as
/// [`test_ended`] does: noted in the run's spool, then settled, trimmed under `--record` when
/// it passed in a run not `interrupted`. Blocks up to `wait` for its exchanges under way.
pub fn write_ended(
    store: &Store,
    journal: &Journal,
    test: &TestId,
    outcome: TestOutcome,
    mode: Mode,
    interrupted: bool,
    wait: Duration,
) -> Result<(), cassettes::Error> {
    if let Some(spool) = store.spool() {
        if let Err(e) = spool.ended(test, outcome.as_str()) {
            tracing::error!("cargo-llmreplay: the run's spool: {e}");
        }
    }
    let trim = mode == Mode::Record && outcome == TestOutcome::Passed && !interrupted;
    settle(store, journal, test, trim, wait)
}

/// Waits up to `wait` for `test`'s exchanges, then writes its recordings (see [`test_ended`]).
pub fn settle(
    store: &Store,
    journal: &Journal,
    test: &TestId,
    trim: bool,
    wait: Duration,
) -> Result<(), cassettes::Error> {
    if !store.wait_for_test(test, wait) {
        tracing::warn!(
            "cargo-llmreplay: {test}: an exchange was still under way {}s after the test ended; what it records is kept at the run's end",
            wait.as_secs()
        );
    }
    let changes = store.finish_test(test, trim)?;
    journal.settled(changes);
    // A test's end is a quiet moment: what the run log holds so far reaches its file.
    if let Some(run_log) = journal.run_log() {
        run_log.flush();
    }
    Ok(())
}

/// At the run's end, once every exchange ended: the tests whose end was never said (no
/// runner, a process killed, an interrupted run) get their recordings added, nothing removed.
/// A test whose cassettes cannot be written (a folder another process holds, a file where the
/// folder should be) does not stop the others: each such test is returned with what went
/// wrong, its recordings kept in the run's spool.
pub fn settle_rest(store: &Store, journal: &Journal) -> Vec<(TestId, cassettes::Error)> {
    settle_all(store, journal, Duration::ZERO)
}

/// Writes every test's recordings so far (added, nothing removed), waiting up to `wait` for
/// each test's exchanges under way: `serve`'s flush, and the run's end. Returns the tests that
/// could not be written.
pub(crate) fn settle_all(
    store: &Store,
    journal: &Journal,
    wait: Duration,
) -> Vec<(TestId, cassettes::Error)> {
    let mut tests = journal.tests();
    tests.extend(store.entries().iter().map(|e| e.test.clone()));
    let mut failed = Vec::new();
    for test in tests {
        if let Err(e) = settle(store, journal, &test, false, wait) {
            failed.push((test, e));
        }
    }
    failed
}

/// Ends the run's log, and removes its spool once every recording reached its cassettes:
/// a spool left behind is one a later run or `cargo llmreplay recover` applies.
pub fn finish_run(store: &Store, journal: &Journal, interrupted: bool) {
    if let Some(spool) = store.spool() {
        if store.all_settled() {
            if let Err(e) = spool.remove() {
                tracing::warn!("cargo-llmreplay: {e}");
            }
        }
    }
    if let Some(run_log) = journal.run_log() {
        run_log.emit(runlog::Event::RunEnded {
            at_ms: run_log.now_ms(),
            interrupted,
        });
        run_log.flush();
    }
}

/// How many runs' folders `runs/` keeps: the newest, and any with a spool not yet applied.
const KEPT_RUNS: usize = 10;

/// A new folder for this run under `target_dir/llmreplay/runs/`, named for the time and the
/// process (`20261127T063302Z-4242`); older runs' folders past the newest few go, unless they
/// hold a spool not yet applied.
pub fn new_run_dir(target_dir: &Path) -> PathBuf {
    let runs = runs_dir(target_dir);
    if let Ok(read) = std::fs::read_dir(&runs) {
        let mut old: Vec<PathBuf> = read.filter_map(Result::ok).map(|e| e.path()).collect();
        old.sort();
        let excess = old.len().saturating_sub(KEPT_RUNS - 1);
        for dir in old.into_iter().take(excess) {
            if !dir.join(cassettes::spool::SPOOL_FILE).exists()
                && !dir.join(cassettes::spool::DAMAGED_SPOOL_FILE).exists()
                && !alive(&dir)
            {
                let _ = std::fs::remove_dir_all(&dir);
            }
        }
    }
    let stamp = cassettes::clock::utc_now().replace(['-', ':'], "");
    runs.join(format!("{stamp}-{}", std::process::id()))
}

/// Whether a run still writes its event log in `dir` (it holds the file's lock).
fn alive(dir: &Path) -> bool {
    let Ok(file) = std::fs::File::open(dir.join(runlog::EVENTS_FILE)) else {
        return false;
    };
    matches!(file.try_lock(), Err(std::fs::TryLockError::WouldBlock))
}

/// Where a project's runs keep their folders.
pub fn runs_dir(target_dir: &Path) -> PathBuf {
    target_dir.join("llmreplay").join("runs")
}

/// Opens the run's event log in `dir` and says the run began.
pub(crate) fn begin_run(dir: &Path, mode: Mode, cassette_dir: &Path) -> Option<Arc<RunLog>> {
    let run_log = match RunLog::create(dir) {
        Ok(run_log) => run_log,
        Err(e) => {
            tracing::warn!("cargo-llmreplay: no run log in {}: {e}", dir.display());
            return None;
        }
    };
    run_log.emit(runlog::Event::RunBegan {
        version: runlog::VERSION,
        run: dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        mode: mode.as_str().into(),
        started_at: cassettes::clock::utc_now(),
        cassette_dir: cassette_dir.display().to_string(),
        tool_version: env!("CARGO_PKG_VERSION").into(),
    });
    Some(Arc::new(run_log))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Old runs' folders go past the newest few, but not one whose run still writes its log,
    /// nor one with a spool to apply.
    #[test]
    fn old_run_folders_go_but_not_a_live_run_or_a_spool() {
        let target = tempfile::tempdir().unwrap();
        let runs = runs_dir(target.path());
        let mut made = Vec::new();
        for i in 0..KEPT_RUNS + 3 {
            let dir = runs.join(format!("2026{i:02}"));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(runlog::EVENTS_FILE), "").unwrap();
            made.push(dir);
        }
        let live = RunLog::create(&made[0]).unwrap();
        std::fs::write(made[1].join(cassettes::spool::SPOOL_FILE), "").unwrap();
        let new = new_run_dir(target.path());
        assert!(made[0].exists(), "a live run's folder stays");
        assert!(made[1].exists(), "a folder with a spool stays");
        assert!(!made[2].exists() && !made[3].exists());
        assert!(made[4].exists());
        assert!(new.starts_with(&runs));
        drop(live);
    }
}
