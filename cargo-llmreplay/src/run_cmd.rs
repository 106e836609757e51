//! `cargo llmreplay run [FLAGS] -- COMMAND...`: what `test` does around nextest, around any test
//! command: a daemon of its own, the environment that points every process at it, then the
//! summary, the report, the gates and the exit status. Tests are told apart by what names them:
//! the pytest plugin and the vitest and jest setup files announce each test from the process
//! that runs it (and `python -m unittest` through the sitecustomize of [`crate::python_hook`]);
//! a process whose environment has `LLMREPLAY_TEST_ID`, or a request with
//! `X-Test-Id`, names its own; else each process tree under the command is its own test, named
//! for its program (one folder per `go test` package binary).

use crate::args::{DaemonArgs, Resolved};
use crate::error::{Error, Outcome, Result};
use crate::report::{self, RunScope};
use crate::run_core::{Known, Naming, Paths, Prepared};
use clap::Args;
use std::ffi::OsString;

#[derive(Args)]
#[command(
    about = "Run any test command (pytest, vitest, go test...) against a per-run daemon, then report",
    long_about = "Run any test command against a per-run record/replay daemon, then report as `test` does.\n\n\
        Every process the command starts gets the base URL every client reads, LLMREPLAY_BASE_URL, \
        a placeholder key and Google credentials file in replay, (with capture on) the daemon as \
        its HTTPS proxy, and TOX_OVERRIDE, which lets all of these into tox 4's environments. Each \
        request is filed under the test that made it: the one its process announced (the \
        pytest-llmreplay plugin and the vitest and jest setup files do, before each test, and \
        `python -m unittest` through a sitecustomize this command puts first on PYTHONPATH), else \
        the one LLMREPLAY_TEST_ID in its environment or an X-Test-Id header names, else the name of \
        the program at the top of its process tree under the command (a `go test` package's \
        binary, a tool a script runs). \
        Under --record, a test that announced it passed keeps exactly what it recorded.\n\n\
        After the command: the summary, target/llmreplay/report.json, the --deny gates, and the \
        command's own status when it failed. Unused recordings are judged for the tests that ran; \
        cassette folders of tests that did not are not judged.",
    after_help = "Examples:\n  \
        cargo llmreplay run -- pytest                    # replay; fails on a missing cassette\n  \
        cargo llmreplay run --record-missing -- pytest -n 2\n  \
        cargo llmreplay run -- npx vitest run\n  \
        cargo llmreplay run --deny unused -- pytest      # strict CI gate"
)]
pub struct RunArgs {
    #[command(flatten)]
    daemon: DaemonArgs,
    #[command(flatten)]
    gates: report::GateArgs,
    /// After a recording run, walk through every recorded answer that changed (cargo llmreplay
    /// review): accept (stage), reject or skip each. After a replay that missed, walk each
    /// missed test first, with a key that records it again now (that one test, where pytest,
    /// vitest or jest runs it). Not under CI.
    #[arg(long, short = 'i')]
    review: bool,
    /// The test command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

pub fn run(args: RunArgs) -> Result<Outcome> {
    args.daemon.check_ci()?;
    let root = crate::locate::project_root()?;
    let mut resolved = Resolved::daemon(root, None, &args.daemon)?;
    let report = args
        .gates
        .report
        .clone()
        .unwrap_or_else(|| resolved.default_report());
    let log = report.with_extension("log");
    // A miss tells the test's own output how to record it: with this very command.
    resolved.settings.record_hint = Some(rerun_command(&args.command, "--record-missing"));
    // Kept until the command ends: its Python processes load it as they start.
    let python = crate::python_hook::PythonHook::write(&resolved.target_dir())?;
    let mut prepared = Prepared::new(resolved, None, Paths { report, log })?;
    let mode = prepared.run.mode;
    let mut env = prepared.env(true);
    env.push(("LLMREPLAY_MODE".into(), mode.as_str().into()));
    // Recording under tox needs the user's own keys in its environments too.
    let routed = providers::env::routed_from(Some(&prepared.gateways));
    let credentials = providers::env::credentials_files();
    let mut passed: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
    let keys = providers::env::key_vars(&routed);
    passed.extend(keys.iter().map(String::as_str));
    passed.extend(credentials.iter().map(|c| c.var));
    let tox = through_tox(&passed, std::env::var("TOX_OVERRIDE").ok());
    env.push(tox);
    prepared.ca_files_written()?;
    // Unlike `test`, the daemon is made before the command starts: a daemon that cannot start
    // leaves no command half run.
    let ready = prepared.start_daemon()?;
    let (program, rest) = args.command.split_first().expect("clap requires a command");
    let child = std::process::Command::new(program)
        .args(rest)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("PYTHONPATH", python.pythonpath())
        .spawn()
        .map_err(|e| {
            Error::Precondition(format!("cannot run {}: {e}", program.to_string_lossy()))
        })?;
    // Processes of the command's tree name their test in their environment, or announce it.
    let mut serving = ready.serve(
        child,
        Naming::Tree(daemon::peer::IdVars::Named("LLMREPLAY_TEST_ID".into())),
    );
    let status = serving.wait(&format!("waiting for {}", program.to_string_lossy()))?;
    drop(python);
    let runner = Runner::of(&args.command);
    if runner.is_none() {
        let base = env
            .iter()
            .find(|(k, _)| k == "LLMREPLAY_BASE_URL")
            .map_or("", |(_, v)| v.as_str());
        serving.command_passed(status, ("LLMREPLAY_BASE_URL", base));
    }
    let stopped = serving.stop(status)?;
    // The suite is known when the test plugins listed what they collected, and whole when
    // neither they nor the command line selected: only then are folders of tests that did
    // not run judged.
    let listings = stopped.journal().listings();
    let selected = runner.is_some_and(|(r, at)| r.selects(at, &args.command));
    let scope = RunScope {
        filtered: listings.runners.is_empty() || listings.filtered || selected,
        ..RunScope::default()
    };
    // What ran is the suite's too: a script the command also ran made its own folder. So are
    // the folders of tests no runner that listed could have: another runner's in the same
    // project (vitest's beside pytest's), a program's named for it.
    let listed = (!listings.runners.is_empty()).then(|| {
        let mut suite = stopped.journal().suite();
        suite.extend(stopped.journal().tests());
        suite.extend(others_tests(
            &stopped.run.cassette_dir,
            &suite,
            &listings.runners,
        ));
        suite
    });
    let mut reported = stopped.report(Known {
        scope: &scope,
        listed: listed.as_ref(),
        stopped_early: false,
        changes: None,
    })?;
    // The commands that record, for this command; pytest, vitest and jest can run one test.
    for m in &mut reported.report.missing {
        m.command = rerun_command(&args.command, "--record-missing");
        m.rerecord = runner
            .filter(|_| m.miss.detail.same_call)
            .and_then(|(r, at)| r.one_test(at, &args.command, m.miss.test.as_str()))
            .map(|words| rerun_words(&words, "--record"));
    }
    let outcome = reported.conclude(&args.gates.deny)?;
    let (report, run) = (&reported.report, &reported.run);
    if args.review && mode.goes_upstream() {
        crate::review_cmd::after_test_run(&run.cassette_dir, run.trajectory_mode)?;
    } else if args.review && !report.missing.is_empty() && status.code().is_some() {
        let forward = args.daemon.forwarded();
        let record =
            |chosen: &[&cassettes::TestId]| record_tests(&args.command, runner, chosen, &forward);
        crate::test_cmd::misses::walk(&report.missing, run, &record)?;
    }
    reported.end();
    Ok(outcome)
}

/// The test ids of the cassette folders not among `suite`'s whose ids no runner of `runners`
/// could have made: each is judged by its runner's own run, not this one.
fn others_tests(
    cassette_dir: &std::path::Path,
    suite: &std::collections::BTreeSet<cassettes::TestId>,
    runners: &std::collections::BTreeSet<String>,
) -> Vec<cassettes::TestId> {
    let known: std::collections::BTreeSet<String> = suite
        .iter()
        .map(|t| cassettes::Slug::from_test_id(t).to_string())
        .collect();
    let folders = cassettes::Store::new(cassette_dir)
        .folders()
        .unwrap_or_default();
    folders
        .into_iter()
        .filter(|f| !known.contains(f))
        .filter_map(|f| {
            let file = cassettes::json_files(&cassette_dir.join(&f))
                .ok()?
                .into_iter()
                .next()?;
            let text = std::fs::read_to_string(file).ok()?;
            let test = serde_json::from_str::<serde_json::Value>(&text).ok()?["test"]
                .as_str()?
                .to_string();
            (!runners.iter().any(|r| could_name(r, &test))).then(|| cassettes::TestId::new(test))
        })
        .collect()
}

/// Whether `runner`'s plugin could have named a test `id`: pytest's node ids hold `::`,
/// vitest's, jest's and node:test's ` > `, unittest's are dotted names; nextest's hold `$`.
fn could_name(runner: &str, id: &str) -> bool {
    let (nodes, suites) = (id.contains("::"), id.contains(" > "));
    match runner {
        "pytest" => nodes && !id.contains('$'),
        "vitest" | "jest" | "node-test" => suites && !nodes,
        "unittest" => !nodes && !suites && !id.contains('$') && id.contains('.'),
        // A runner of some other kind: its folders are judged, as it asked.
        _ => true,
    }
}

/// Records the chosen tests again: each alone where the runner can run one test, else the
/// whole command, recording what is missing.
fn record_tests(
    command: &[OsString],
    runner: Option<(Runner, usize)>,
    chosen: &[&cassettes::TestId],
    forward: &[OsString],
) -> Result<bool> {
    let run = |flag: &str, words: Vec<OsString>| {
        let mut args: Vec<OsString> = vec!["run".into(), flag.into()];
        args.extend(forward.iter().cloned());
        args.push("--".into());
        args.extend(words);
        crate::test_cmd::misses::record_with(&args)
    };
    let alone: Option<Vec<Vec<String>>> = chosen
        .iter()
        .map(|t| runner.and_then(|(r, at)| r.one_test(at, command, t.as_str())))
        .collect();
    match alone {
        Some(each) => {
            for words in each {
                if !run("--record", words.into_iter().map(OsString::from).collect())? {
                    return Ok(false);
                }
            }
            Ok(true)
        }
        None => run("--record-missing", command.to_vec()),
    }
}

/// `TOX_OVERRIDE` that lets the variables `names` into tox 4's test environments, which see
/// only the variables their `pass_env` names: appended to the user's own overrides, which tox
/// separates with `;`.
fn through_tox(names: &[&str], user: Option<String>) -> (String, String) {
    let mut unique: Vec<&str> = Vec::with_capacity(names.len());
    for name in names {
        if !unique.contains(name) {
            unique.push(name);
        }
    }
    let ours = format!("testenv.pass_env+={}", unique.join(","));
    let value = match user.filter(|u| !u.trim().is_empty()) {
        Some(user) => format!("{};{ours}", user.trim_end_matches(';')),
        None => ours,
    };
    ("TOX_OVERRIDE".into(), value)
}

/// A test runner whose command line can select one test by its id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Runner {
    /// Selects by node id.
    Pytest,
    /// Select by file and full name (`-t`, a regular expression).
    Vitest,
    Jest,
    /// `python -m unittest`: selects by the test's dotted id.
    Unittest,
}

/// pytest's options whose value is a path: the word after one is no test to drop.
const PYTEST_PATH_OPTIONS: &[&str] = &[
    "--ignore",
    "--ignore-glob",
    "--deselect",
    "--rootdir",
    "-c",
    "--config-file",
    "--confcutdir",
    "--basetemp",
    "--junitxml",
    "--junit-xml",
    "--log-file",
];

impl Runner {
    /// The runner the command starts, and where its name is among the words.
    fn of(command: &[OsString]) -> Option<(Runner, usize)> {
        let words: Vec<String> = command
            .iter()
            .map(|w| w.to_string_lossy().into_owned())
            .collect();
        for (i, w) in words.iter().enumerate() {
            let name = std::path::Path::new(w)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let runner = match name.as_str() {
                "pytest" | "py.test" => Runner::Pytest,
                "vitest" | "vitest.mjs" => Runner::Vitest,
                "jest" | "jest.js" => Runner::Jest,
                _ if w == "pytest" && i > 0 && words[i - 1] == "-m" => Runner::Pytest,
                _ if w == "unittest" && i > 0 && words[i - 1] == "-m" => Runner::Unittest,
                _ => continue,
            };
            return Some((runner, i));
        }
        None
    }

    /// Whether the command's words after the runner's name select some of its tests (files,
    /// a name pattern, changed files only). pytest's plugin says so itself. A word that may be
    /// a filter is taken for one: a suite wrongly called whole would call the recordings of the
    /// tests it left out unused.
    fn selects(self, at: usize, command: &[OsString]) -> bool {
        if matches!(self, Runner::Pytest | Runner::Unittest) {
            return false;
        }
        let words: Vec<String> = command
            .iter()
            .skip(at + 1)
            .map(|w| w.to_string_lossy().into_owned())
            .collect();
        let mut it = words.iter().enumerate();
        while let Some((i, w)) = it.next() {
            if i == 0 && self == Runner::Vitest && w == "run" {
                continue;
            }
            let Some(flag) = w.strip_prefix('-') else {
                return true;
            };
            let (name, inline) = match flag.split_once('=') {
                Some((name, _)) => (name, true),
                None => (flag, false),
            };
            let name = name.trim_start_matches('-');
            if RUNNER_SELECTING.contains(&name) {
                return true;
            }
            if !inline && RUNNER_VALUE_FLAGS.contains(&name) {
                it.next();
            }
        }
        false
    }

    /// The command's words that run `test` alone: the command's own selection of files (words
    /// after the runner's name that are paths, or node ids) gives way to the test's, since the
    /// runners run the union of what they are given.
    fn one_test(self, at: usize, command: &[OsString], test: &str) -> Option<Vec<String>> {
        let runner = self;
        let words: Vec<String> = command
            .iter()
            .map(|w| w.to_string_lossy().into_owned())
            .collect();
        if runner == Runner::Unittest {
            // `python -m unittest <id>`: its options kept, the tests it named given way. A
            // discovery names tests relative to where it starts, which the id may not be.
            let after = &words[at + 1..];
            if after.iter().any(|w| w == "discover") {
                return None;
            }
            let mut kept = words[..=at].to_vec();
            kept.extend(after.iter().filter(|w| w.starts_with('-')).cloned());
            kept.push(test.to_string());
            return Some(kept);
        }
        let (file, name) = match runner {
            // A shared fixture's calls are recorded by whichever test sets it up first.
            Runner::Pytest if test.contains("::fixture:") => return None,
            Runner::Pytest => (None, test),
            Runner::Vitest | Runner::Jest => {
                let (file, name) = test.split_once(" > ")?;
                (Some(file), name)
            }
            Runner::Unittest => unreachable!("answered above"),
        };
        let mut kept: Vec<String> = Vec::with_capacity(words.len() + 3);
        for (i, w) in words.iter().enumerate() {
            let selects = i > at
                && !w.starts_with('-')
                && !(runner == Runner::Pytest
                    && PYTEST_PATH_OPTIONS.contains(&words[i - 1].as_str()))
                && (w.contains("::")
                    || std::path::Path::new(w.split("::").next().unwrap_or(w)).exists());
            if !selects {
                kept.push(w.clone());
            }
        }
        match file {
            None => kept.push(name.to_string()),
            // Both match `-t` against the full name as the id holds it: vitest's suites joined
            // with ` > `, jest's with spaces.
            Some(file) => kept.extend([
                file.to_string(),
                "-t".into(),
                format!("^{}$", regex_escape(name)),
            ]),
        }
        Some(kept)
    }
}

/// vitest's and jest's options that select tests (their dashes dropped).
const RUNNER_SELECTING: &[&str] = &[
    "t",
    "testNamePattern",
    "testPathPattern",
    "testPathPatterns",
    "testMatch",
    "testRegex",
    "shard",
    "project",
    "selectProjects",
    "changed",
    "onlyChanged",
    "o",
    "lastCommit",
    "onlyFailures",
    "f",
    "findRelatedTests",
    "related",
    "dir",
    "exclude",
    "testPathIgnorePatterns",
];

/// vitest's and jest's options that take a value and select nothing: the word after one is
/// that value, no file.
const RUNNER_VALUE_FLAGS: &[&str] = &[
    "pool",
    "maxWorkers",
    "minWorkers",
    "w",
    "reporter",
    "reporters",
    "config",
    "c",
    "root",
    "r",
    "environment",
    "env",
    "outputFile",
    "testTimeout",
    "hookTimeout",
    "retry",
    "bail",
    "maxConcurrency",
    "color",
    "mode",
    "logHeapUsage",
    "seed",
    "cacheDirectory",
    "rootDir",
    "workerIdleMemoryLimit",
];

/// `text` as a JavaScript regular expression that matches it alone.
fn regex_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if "\\^$.*+?()[]{}|/-".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// `<program> run FLAG -- COMMAND`, quoted for the shell.
fn rerun_command(command: &[OsString], flag: &str) -> String {
    let words: Vec<String> = command
        .iter()
        .map(|w| w.to_string_lossy().into_owned())
        .collect();
    rerun_words(&words, flag)
}

/// `<program> run FLAG -- WORDS`, quoted for the shell.
fn rerun_words(words: &[String], flag: &str) -> String {
    let quoted: Vec<String> = words
        .iter()
        .map(|w| cassettes::shell_quote(w).into_owned())
        .collect();
    format!("{} run {flag} -- {}", crate::program(), quoted.join(" "))
}

#[cfg(test)]
mod tests {
    use super::{rerun_command, rerun_words, through_tox, Runner};
    use std::ffi::OsString;

    fn words(line: &str) -> Vec<OsString> {
        line.split(' ').map(OsString::from).collect()
    }

    fn again(line: &str, test: &str) -> String {
        let command = words(line);
        let (runner, at) = Runner::of(&command).expect("a runner");
        rerun_words(&runner.one_test(at, &command, test).unwrap(), "--record")
    }

    /// One test again, alone: the command's files and node ids give way to the test's node id,
    /// and a path that is an option's value stays.
    #[test]
    fn a_pytest_test_is_recorded_again_alone() {
        let here = env!("CARGO_MANIFEST_DIR");
        let file = format!("{here}/Cargo.toml");
        let line = format!("python -m pytest -q {file} {file}::x --ignore {here} -k chat");
        assert_eq!(
            again(&line, "tests/a.py::test_b"),
            format!("cargo llmreplay run --record -- python -m pytest -q --ignore {here} -k chat tests/a.py::test_b")
        );
        // Without a test, the command as it was.
        assert_eq!(
            rerun_command(&words(&line), "--record-missing"),
            format!("cargo llmreplay run --record-missing -- {line}")
        );
    }

    /// vitest and jest: the test's file, and its full name as an anchored pattern, escaped.
    #[test]
    fn a_vitest_or_jest_test_is_recorded_again_alone() {
        let file = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
        // What a shell makes of the printed command.
        let said = again(
            &format!("npx vitest run {file}"),
            "chat.test.js > chat > says (hi)?",
        );
        let out = std::process::Command::new("sh")
            .args([
                "-c",
                &format!("printf '%s\\n' {}", said.split_once(" -- ").unwrap().1),
            ])
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8(out.stdout).unwrap(),
            "npx\nvitest\nrun\nchat.test.js\n-t\n^chat > says \\(hi\\)\\?$\n"
        );
        assert_eq!(
            again("node node_modules/jest/bin/jest.js --ci", "a.test.cjs > chat hello"),
            "cargo llmreplay run --record -- node node_modules/jest/bin/jest.js --ci a.test.cjs -t '^chat hello$'"
        );
        assert!(Runner::of(&words("go test ./...")).is_none());
    }

    /// A vitest or jest command selects when any word after the runner may name files or
    /// tests; flags that say how to run, with their values, do not.
    #[test]
    fn a_runners_own_selection_is_read_from_its_words() {
        let selects = |line: &str| {
            let command = words(line);
            let (runner, at) = Runner::of(&command).expect("a runner");
            runner.selects(at, &command)
        };
        assert!(!selects("npx vitest run"));
        assert!(!selects(
            "npx vitest run --pool threads --maxWorkers 3 --reporter=dot"
        ));
        assert!(!selects("npx jest --ci -w 2"));
        assert!(selects("npx vitest run chat"));
        assert!(selects("npx vitest run --pool threads chat.test.js"));
        assert!(selects("npx vitest run -t hello"));
        assert!(selects("npx vitest run --testNamePattern=hello"));
        assert!(selects("npx jest --onlyChanged"));
        assert!(
            selects("npx jest --unknown-flag value"),
            "an unknown flag's word may be a file"
        );
        assert!(
            !selects("python -m pytest tests/a.py"),
            "pytest's plugin says so itself"
        );
    }

    /// `python -m unittest`: the test's dotted id in place of the tests the command named;
    /// a discovery, whose ids are relative to where it starts, gets no such command.
    #[test]
    fn a_unittest_test_is_recorded_again_alone() {
        assert_eq!(
            again(
                "python3 -m unittest -v test_mod",
                "test_mod.TestChat.test_hello"
            ),
            "cargo llmreplay run --record -- python3 -m unittest -v test_mod.TestChat.test_hello"
        );
        let command = words("python3 -m unittest discover -s tests");
        let (runner, at) = Runner::of(&command).unwrap();
        assert_eq!(runner.one_test(at, &command, "test_a.T.test_b"), None);
    }

    /// A listing judges only folders its runner's plugin could have named.
    #[test]
    fn each_runner_judges_only_ids_of_its_own_shape() {
        use super::could_name;
        assert!(could_name("pytest", "tests/test_a.py::test_x[a > b]"));
        assert!(!could_name("pytest", "a.test.js > chat > hello"));
        assert!(!could_name("pytest", "crate::tests$chat"));
        assert!(could_name("vitest", "a.test.js > chat > hello"));
        assert!(!could_name("jest", "tests/test_a.py::test_x"));
        assert!(could_name("unittest", "test_mod.TestChat.test_hello"));
        assert!(!could_name("unittest", "python3"), "a program's folder");
        assert!(!could_name("vitest", "curl"));
    }

    /// tox 4 is told every variable, after the user's own overrides.
    #[test]
    fn tox_passes_every_variable_on_after_the_users_overrides() {
        let env = ["OPENAI_BASE_URL", "LLMREPLAY_MODE", "OPENAI_BASE_URL"];
        assert_eq!(
            through_tox(&env, None).1,
            "testenv.pass_env+=OPENAI_BASE_URL,LLMREPLAY_MODE"
        );
        assert_eq!(
            through_tox(&env, Some("testenv.deps=x;".into())).1,
            "testenv.deps=x;testenv.pass_env+=OPENAI_BASE_URL,LLMREPLAY_MODE"
        );
    }
}
