//! The run ended: nextest waited for, the suite listed when nothing else says which tests ran,
//! the daemon stopped and the report concluded (`run_core`), then, under `--review`, the
//! changed answers or the missed tests walked.

use super::launch::Launched;
use super::plan::{RunPlan, Wiring};
use crate::error::{Error, Outcome, Result};
use crate::render;
use crate::report::{self, Deny};
use crate::run_core::Known;

/// The status cargo-nextest (through clap) exits with when its arguments are wrong.
const USAGE_REFUSED: i32 = 2;

/// Waits, briefly, for the last of nextest's stdout: a process a `--no-capture` test left
/// behind may hold it open, and its lines are not outcomes.
fn end_of_output(read: std::sync::mpsc::Receiver<()>) {
    let _ = read.recv_timeout(std::time::Duration::from_secs(2));
}

/// Waits for nextest, stops the daemon, settles what each test recorded, then writes the
/// report, prints its summary and, under `--review`, walks the changed answers.
pub(super) fn finish(plan: &RunPlan, deny: &[Deny], launched: Launched) -> Result<Outcome> {
    let Launched {
        mut serving,
        background,
        run_env,
        ran,
        outcomes,
    } = launched;
    let (mode, scope) = (plan.mode, &plan.scope);
    let status = serving.wait("cannot run cargo nextest")?;
    if let Some(outcomes) = outcomes {
        end_of_output(outcomes);
    }
    // No test asks for a cassette any more: nothing to read ahead.
    serving.store().stop_preload();
    // nextest refused its arguments (clap's status): it said why, and no test ran, so there is
    // no run to list or report on.
    if status.code() == Some(USAGE_REFUSED) {
        serving.abandon();
        render::stderr(
            "cargo-llmreplay: cargo nextest refused its arguments (above), so no test ran and no report was written\n",
        );
        return Ok(Outcome::Nextest(USAGE_REFUSED as u8));
    }
    let stopped_early = plan.fail_fast && !status.success();
    let journal = serving.journal().clone();
    // Without a runner, nothing says which tests ran but those that called. A cassette folder
    // of a test that did not call is the only thing that needs more (it is unused, or an
    // orphan, or its test was filtered out), and only then is the suite listed, for the run's
    // filter: most runs list nothing.
    let runner_less = plan.wiring == Wiring::Environment;
    let mut judged = !runner_less;
    if runner_less && (scope.partition.is_some() || silent_folders(serving.store(), &journal)?) {
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
                    journal.ran(test);
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
            journal.ran(&cassettes::TestId::new(test));
        }
    }
    let stopped = serving.stop(status)?;

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
    let mut reported = stopped.report(Known {
        scope,
        listed: listed.as_ref(),
        stopped_early,
        changes: background
            .and_then(|read| read.join().unwrap_or_else(|p| std::panic::resume_unwind(p))),
    })?;
    let outcome = reported.conclude(deny)?;
    let (report, run) = (&reported.report, &reported.run);
    if plan.review && mode.goes_upstream() {
        crate::review_cmd::after_test_run(&run.cassette_dir, run.trajectory_mode)?;
    } else if plan.review && !report.missing.is_empty() && status.code().is_some() {
        let record =
            |chosen: &[&cassettes::TestId]| super::misses::record_tests(chosen, &plan.forward);
        super::misses::walk(&report.missing, run, &record)?;
    } else if mode.writes() && !report.changed.is_empty() {
        // What this run wrote is for a reviewer to read before it is committed.
        render::stderr(&format!(
            "review what changed ({}) before committing: {} review\n",
            crate::render::plural(report.changed.len(), "cassette file"),
            crate::program()
        ));
    }
    reported.end();
    Ok(outcome)
}

/// Whether a cassette folder belongs to no test that called the daemon in this run.
fn silent_folders(store: &cassettes::Store, journal: &daemon::Journal) -> Result<bool> {
    let called: std::collections::BTreeSet<String> = journal
        .tests()
        .iter()
        .map(|t| cassettes::Slug::from_test_id(t).to_string())
        .collect();
    Ok(store.folders()?.iter().any(|f| !called.contains(f)))
}
