//! What a run will do, decided from its arguments and settings alone: the mode, how tests are
//! pointed at the daemon, fail-fast, what is read beside the tests, and where the report and
//! log go. Pure, so it is tested without nextest.

use super::flags::fail_fast_option;
use super::{RunnerChoice, TestArgs};
use crate::report::{self, RunScope};
use std::ffi::OsString;
use std::path::PathBuf;

/// How each test is pointed at the daemon.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Wiring {
    /// A target runner sets each test's environment, and says which tests ran and passed.
    Runner,
    /// One environment for the whole run; the daemon reads each connection's test from the
    /// process that opened it (no exec per test).
    Environment,
}

/// What a run will do, decided from its arguments and settings alone, before anything runs.
#[derive(Debug)]
pub(super) struct RunPlan {
    pub(super) mode: daemon::Mode,
    pub(super) wiring: Wiring,
    /// What nextest is given: the user's arguments, and `--no-fail-fast` for a run that names
    /// no fail-fast of its own.
    pub(super) nextest_args: Vec<OsString>,
    /// Whether nextest stops at the first failure: then not every selected test ran.
    pub(super) fail_fast: bool,
    pub(super) scope: RunScope,
    /// Every cassette a whole-suite replay will read, parsed while nextest builds and lists.
    pub(super) preload: bool,
    /// What git says of the cassettes, read while the tests run, in a run that writes none.
    pub(super) git: bool,
    /// Whether the runner tells the daemon when each test ends, which then writes its
    /// recordings (the modes that record).
    pub(super) settle: bool,
    pub(super) report: PathBuf,
    /// Beside the report: runs that keep their reports apart keep their logs apart too.
    pub(super) log: PathBuf,
    /// `--review`: after a run that went upstream, the review of what it changed; after a
    /// replay that missed, the walk of the missed tests.
    pub(super) review: bool,
    /// The flags a recording started from the review passes on: where requests go.
    pub(super) forward: Vec<OsString>,
}

/// What a plan is made from besides the arguments.
pub(super) struct Facts {
    pub(super) mode: daemon::Mode,
    /// The user's own target runner, chained after ours.
    pub(super) chained_runner: bool,
    /// Whether this system tells a connection's process (Linux).
    pub(super) peers_supported: bool,
    pub(super) default_report: PathBuf,
    pub(super) target_dir: PathBuf,
}

impl RunPlan {
    pub(super) fn new(args: &TestArgs, mut nextest_args: Vec<OsString>, facts: Facts) -> RunPlan {
        let mode = facts.mode;
        // Record modes keep the runner: it notes which tests passed, which a re-record needs.
        let wiring = match args.runner == RunnerChoice::Auto
            && mode == daemon::Mode::Replay
            && !facts.chained_runner
            && facts.peers_supported
        {
            true => Wiring::Environment,
            false => Wiring::Runner,
        };
        let scope = report::scope_of(&nextest_args);
        let user_fail_fast = fail_fast_option(&nextest_args);
        // A replay reports every missing recording, not only those before the first failure;
        // a recording run records what it can.
        if user_fail_fast.is_none() {
            nextest_args.insert(0, "--no-fail-fast".into());
        }
        let fail_fast = match user_fail_fast.as_deref() {
            Some("--no-fail-fast") | Some("--max-fail=all") => false,
            Some(_) => true,
            None => false,
        };
        let report = args.gates.report.clone().unwrap_or(facts.default_report);
        let log = match &args.gates.report {
            Some(report) => report.with_extension("log"),
            None => facts.target_dir.join("llmreplay/daemon.log"),
        };
        RunPlan {
            mode,
            wiring,
            nextest_args,
            fail_fast,
            preload: mode == daemon::Mode::Replay && scope.whole_suite(),
            git: !mode.writes(),
            scope,
            settle: mode.writes(),
            report,
            log,
            review: args.review,
            forward: args.daemon.forwarded(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn plan_of(args: &[&str], nextest: &[&str], mode: daemon::Mode) -> RunPlan {
        let args = TestArgs::try_parse_from(
            std::iter::once("cargo llmreplay test").chain(args.iter().copied()),
        )
        .unwrap();
        let facts = Facts {
            mode,
            chained_runner: false,
            peers_supported: true,
            default_report: PathBuf::from("target/llmreplay/report.json"),
            target_dir: PathBuf::from("target"),
        };
        RunPlan::new(&args, nextest.iter().map(OsString::from).collect(), facts)
    }

    #[test]
    fn a_replay_runs_every_test_without_a_runner() {
        let plan = plan_of(&[], &[], daemon::Mode::Replay);
        assert_eq!(plan.wiring, Wiring::Environment);
        assert_eq!(plan.nextest_args, vec![OsString::from("--no-fail-fast")]);
        assert!(!plan.fail_fast);
        assert!(plan.preload && plan.git && !plan.settle && !plan.review);
        assert_eq!(plan.log, PathBuf::from("target/llmreplay/daemon.log"));
        assert_eq!(plan.report, PathBuf::from("target/llmreplay/report.json"));
    }

    #[test]
    fn the_users_fail_fast_and_filters_are_kept() {
        let plan = plan_of(
            &[],
            &["--max-fail=2", "-E", "test(=a)"],
            daemon::Mode::Replay,
        );
        assert!(plan.fail_fast, "the user's own fail-fast stands");
        assert_eq!(plan.nextest_args.len(), 3, "nothing added");
        assert!(!plan.preload, "a filtered run reads only what it asks for");
        let plan = plan_of(&[], &["--max-fail=all"], daemon::Mode::Record);
        assert!(!plan.fail_fast);
        let plan = plan_of(&[], &[], daemon::Mode::RecordMissing);
        assert!(!plan.fail_fast, "a recording run records what it can");
        assert_eq!(plan.nextest_args, vec![OsString::from("--no-fail-fast")]);
    }

    #[test]
    fn record_modes_keep_the_runner_and_write() {
        let plan = plan_of(
            &["--review", "--report", "out/r.json"],
            &[],
            daemon::Mode::Record,
        );
        assert_eq!(plan.wiring, Wiring::Runner);
        assert!(plan.settle && plan.review && !plan.git && !plan.preload);
        assert_eq!(plan.log, PathBuf::from("out/r.log"));
        assert_eq!(plan.report, PathBuf::from("out/r.json"));
        let plan = plan_of(&["--runner", "exec"], &[], daemon::Mode::Replay);
        assert_eq!(plan.wiring, Wiring::Runner);
        let chained = {
            let args = TestArgs::try_parse_from(["cargo llmreplay test"]).unwrap();
            let facts = Facts {
                mode: daemon::Mode::Replay,
                chained_runner: true,
                peers_supported: true,
                default_report: PathBuf::from("r.json"),
                target_dir: PathBuf::from("t"),
            };
            RunPlan::new(&args, Vec::new(), facts)
        };
        assert_eq!(
            chained.wiring,
            Wiring::Runner,
            "a runner of the user's own is chained"
        );
    }
}
