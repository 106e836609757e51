//! The run ended: nextest waited for, the daemon stopped, what each test recorded settled,
//! then the report written and summarised and, under `--review`, the changed answers walked.

use super::launch::Launched;
use super::plan::{RunPlan, Wiring};
use crate::error::{Error, Outcome, Result};
use crate::render;
use crate::report::{self, Deny, ReportExt};

/// The status cargo-nextest (through clap) exits with when its arguments are wrong.
const USAGE_REFUSED: i32 = 2;

/// Waits for nextest, stops the daemon, settles what each test recorded, then writes the
/// report, prints its summary and, under `--review`, walks the changed answers.
pub(super) fn finish(plan: &RunPlan, deny: &[Deny], launched: Launched) -> Result<Outcome> {
    let Launched {
        root,
        cassette_dir,
        mut child,
        runtime,
        journal,
        store,
        stop,
        served,
        background,
        run_env,
        ran,
        run_dir,
        interrupted,
    } = launched;
    let (mode, scope) = (plan.mode, &plan.scope);
    let status = child
        .wait()
        .map_err(|e| Error::io("cannot run cargo nextest", e))?;
    // No test asks for a cassette any more: nothing to read ahead.
    store.stop_preload();
    // nextest refused its arguments (clap's status): it said why, and no test ran, so there is
    // no run to list or report on.
    if status.code() == Some(USAGE_REFUSED) {
        let _ = stop.send(());
        let _ = runtime.block_on(served);
        drop(run_dir);
        render::stderr(
            "cargo-llmreplay: cargo nextest refused its arguments (above), so no test ran and no report was written\n",
        );
        return Ok(Outcome::Nextest(USAGE_REFUSED as u8));
    }
    let stopped_early = plan.fail_fast && !status.success();
    // Without a runner, nothing says which tests ran but those that called. A cassette folder
    // of a test that did not call is the only thing that needs more (it is unused, or an
    // orphan, or its test was filtered out), and only then is the suite listed, for the run's
    // filter: most runs list nothing.
    let runner_less = plan.wiring == Wiring::Environment;
    let mut judged = !runner_less;
    if runner_less && (scope.partition.is_some() || silent_folders(&store, &journal)?) {
        let mut env = run_env;
        env.push(("LLMREPLAY_MODE".into(), mode.as_str().into()));
        let listed = report::spawn_list(&plan.nextest_args, &env)
            .map_err(|e| Error::io("cannot run cargo nextest list", e))
            .and_then(report::read_list);
        match listed {
            Ok((suite, selected)) => {
                journal.listed_all(suite);
                // A run that stopped early did not run every selected test.
                for test in selected.iter().filter(|_| !stopped_early) {
                    journal.begin(test);
                }
                judged = true;
            }
            Err(e) => render::stderr(&format!(
                "cargo-llmreplay: warning: no unused check: {}\n",
                render::term_lines(&e.to_string())
            )),
        }
    }
    if let Some(ran) = ran {
        for test in std::fs::read_to_string(ran.path())
            .unwrap_or_default()
            .lines()
        {
            journal.begin(&cassettes::TestId::new(test));
        }
    }
    let _ = stop.send(());
    let stats = runtime
        .block_on(served)
        .map_err(|e| Error::io("the daemon failed", std::io::Error::other(e)))?;
    let recorded = finish_tests(&journal, &store)?;

    // The runner saw nextest list the suite; asking `cargo nextest list` again is the fallback
    // (a chained runner that swallowed the list, say).
    let suite = journal.suite();
    let listed = if scope.filtered || !judged {
        // Unlisted without a runner: every cassette folder's test called, so none is an orphan.
        None
    } else if !suite.is_empty() {
        Some(suite)
    } else {
        match report::list_tests(scope) {
            Ok(tests) => Some(tests),
            Err(e) => {
                render::stderr(&format!(
                    "cargo-llmreplay: warning: no orphan check: {}\n",
                    render::term_lines(&e.to_string())
                ));
                None
            }
        }
    };
    let mut report = report::Report::build(report::Inputs {
        mode,
        stats,
        journal: &journal,
        store: &store,
        cassette_dir: &cassette_dir,
        scope,
        listed: listed.as_ref(),
        tests_passed: status.success(),
        stopped_early,
        recorded,
        log: Some(&plan.log),
        changes: background
            .and_then(|read| read.join().unwrap_or_else(|p| std::panic::resume_unwind(p))),
    })?;
    let outcome = report.conclude(&plan.report, &root, status, deny)?;
    if plan.review && mode.goes_upstream() {
        crate::review_cmd::after_test_run(&cassette_dir)?;
    } else if plan.review && !report.missing.is_empty() && status.code().is_some() {
        super::misses::walk(&report.missing, &root, &cassette_dir, &plan.forward)?;
    } else if mode.writes() && !report.changed.is_empty() {
        // What this run wrote is for a reviewer to read before it is committed.
        render::stderr(&format!(
            "review what changed ({}) before committing: cargo llmreplay review\n",
            crate::render::plural(report.changed.len(), "cassette file")
        ));
    }
    daemon::settle::finish_run(
        &store,
        &journal,
        interrupted.load(std::sync::atomic::Ordering::SeqCst),
    );
    // The command ends here: the runtime's threads and the cassettes read go with the
    // process, rather than each being joined or freed first.
    runtime.shutdown_background();
    std::mem::forget(store);
    drop(run_dir);
    Ok(outcome)
}

/// Whether a cassette folder belongs to no test that called the daemon in this run.
pub(super) fn silent_folders(store: &cassettes::Store, journal: &daemon::Journal) -> Result<bool> {
    let called: std::collections::BTreeSet<String> = journal
        .tests()
        .iter()
        .map(|t| cassettes::Slug::from_test_id(t).to_string())
        .collect();
    Ok(store.folders()?.iter().any(|f| !called.contains(f)))
}

/// Once every exchange ended: the recordings of tests whose end was never said reach their
/// cassettes (added, nothing removed), and what every test's end changed is said, test by
/// test, with the files another run has since replaced with its own recordings.
pub(crate) fn finish_tests(
    journal: &daemon::Journal,
    store: &cassettes::Store,
) -> Result<Vec<cassettes::TestChanges>> {
    daemon::settle::settle_rest(store, journal)?;
    // A test settles at each attempt's end: one line a test, its counts added up.
    let mut out: Vec<cassettes::TestChanges> = Vec::new();
    for changes in journal.changes() {
        match out.iter_mut().find(|c| c.test == changes.test) {
            Some(c) => {
                c.added += changes.added;
                c.replaced += changes.replaced;
                c.removed += changes.removed;
                c.kept = changes.kept.or(c.kept.take());
            }
            None => out.push(changes),
        }
    }
    for (test, file) in store.superseded()? {
        match out.iter_mut().find(|c| c.test == test) {
            Some(c) => c.superseded = Some(file),
            None => out.push(cassettes::TestChanges {
                test,
                added: 0,
                replaced: 0,
                removed: 0,
                kept: None,
                superseded: Some(file),
            }),
        }
    }
    Ok(out)
}
