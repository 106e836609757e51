//! Any test command under `cargo llmreplay run`: pytest with the pytest-llmreplay plugin (the
//! official `openai` and `anthropic` SDKs called in the test process through module-level
//! clients, alone and under pytest-xdist), and a command with no plugin at all.

use crate::support::{binary, sdk_python, without_provider_env, FakeProvider, Output};
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `cargo llmreplay run FLAGS -- COMMAND...` in `dir` (its target dir inside), in an
/// environment clean of CI's and the providers' variables, with `env` on top.
pub(crate) fn run_in(
    dir: &Path,
    flags: &[&str],
    command: &[&OsStr],
    env: &[(&str, &str)],
) -> Output {
    let mut cmd = Command::new(binary());
    cmd.current_dir(dir)
        .args(["llmreplay", "run"])
        .args(flags)
        .arg("--")
        .args(command)
        .env("CARGO_TARGET_DIR", dir.join("target"));
    for k in ["CI", "LLMREPLAY_MODE", "PYTEST_ADDOPTS"] {
        cmd.env_remove(k);
    }
    without_provider_env(&mut cmd);
    for (k, v) in env {
        cmd.env(k, v);
    }
    Output::of(&mut cmd)
}

/// [`run_in`], with a fresh folder named in `SAMPLE_OUT` where the tests write their answers.
pub(crate) fn run_keeping(
    dir: &Path,
    flags: &[&str],
    command: &[&OsStr],
    env: &[(&str, &str)],
) -> (Output, PathBuf) {
    let out = tempfile::tempdir().unwrap().keep();
    let mut env = env.to_vec();
    let at = out.to_str().unwrap().to_string();
    env.push(("SAMPLE_OUT", &at));
    (run_in(dir, flags, command, &env), out)
}

/// A project of the pytest suite in its own temp dir, run with `cargo llmreplay run`.
struct Suite {
    dir: tempfile::TempDir,
    python: PathBuf,
}

const TESTS: [&str; 3] = [
    "test_chat.py::test_hello",
    "test_chat.py::test_claude",
    "test_chat.py::test_count[one]",
];

impl Suite {
    fn new() -> Option<Suite> {
        let python = sdk_python("pytest_llmreplay")?;
        let dir = tempfile::tempdir().unwrap();
        let suite = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/sdk/pytest_suite");
        std::fs::copy(suite.join("test_chat.py"), dir.path().join("test_chat.py")).unwrap();
        Some(Suite { dir, python })
    }

    /// `cargo llmreplay run FLAGS -- python -m pytest ARGS`, with `env`; what the tests were
    /// answered lands in a fresh folder, returned with the output.
    fn run(&self, flags: &[&str], pytest: &[&str], env: &[(&str, &str)]) -> (Output, PathBuf) {
        let mut command: Vec<&OsStr> = vec![self.python.as_os_str()];
        command.extend(
            ["-m", "pytest", "-q", "-p", "no:cacheprovider"]
                .iter()
                .chain(pytest)
                .map(OsStr::new),
        );
        run_keeping(self.dir.path(), flags, &command, env)
    }

    fn folder(&self, test: &str) -> PathBuf {
        let slug = cassettes::Slug::from_test_id(&cassettes::TestId::new(test));
        self.dir.path().join("tests/cassettes").join(slug.as_str())
    }

    fn folders(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.dir.path().join("tests/cassettes"))
            .map(|d| {
                d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    fn report(&self) -> serde_json::Value {
        crate::support::read_json(&self.dir.path().join("target/llmreplay/report.json"))
    }
}

/// Fails the test with what the run printed unless it succeeded.
pub(crate) fn succeeded(out: &Output) {
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
}

/// Every file under `folders`, with its bytes: to show a run left them as they were.
fn files_in(folders: &[PathBuf]) -> Vec<(PathBuf, Vec<u8>)> {
    folders
        .iter()
        .flat_map(|f| std::fs::read_dir(f).unwrap())
        .map(|e| {
            let p = e.unwrap().path();
            let bytes = std::fs::read(&p).unwrap();
            (p, bytes)
        })
        .collect()
}

pub(crate) fn answers(dir: &Path) -> BTreeMap<String, String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            let text = std::fs::read_to_string(&p).unwrap();
            (p.file_name().unwrap().to_string_lossy().into_owned(), text)
        })
        .collect()
}

/// What a developer records with; forwarded, written nowhere. Replay needs none.
pub(crate) const KEYS: &[(&str, &str)] = &[
    ("OPENAI_API_KEY", "sk-test-not-real"),
    ("ANTHROPIC_API_KEY", "sk-ant-test-not-real"),
];

pub(crate) fn record_flags(fake: &FakeProvider) -> Vec<String> {
    let mut flags = vec!["--record".to_string()];
    flags.extend(crate::support::upstream_args(fake));
    flags
}

/// Records, replays offline identically, names a missing request by its node id, and
/// re-records one test leaving the others as they were; `xdist` runs it all with `-n 2`.
async fn pytest_per_test(xdist: bool) {
    let Some(suite) = Suite::new() else {
        return;
    };
    let mut fake = FakeProvider::start().await;
    let workers: &[&str] = if xdist { &["-n", "2"] } else { &[] };
    let flags = record_flags(&fake);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let (recorded, recorded_out) = suite.run(&flags, workers, KEYS);
    succeeded(&recorded);
    let mut expected: Vec<String> = TESTS
        .iter()
        .map(|t| {
            let folder = suite.folder(t);
            folder.file_name().unwrap().to_string_lossy().into_owned()
        })
        .collect();
    expected.sort();
    assert_eq!(suite.folders(), expected, "{}", recorded.stderr);
    assert!(suite.folder(TESTS[1]).join("anthropic.json").is_file());
    assert!(suite.folder(TESTS[0]).join("openai.json").is_file());
    let calls = fake.received().len();
    assert_eq!(calls, 3);
    // The cassette commands find this project's cassettes though it is no cargo workspace.
    let mut status = Command::new(binary());
    status
        .current_dir(suite.dir.path())
        .args(["llmreplay", "status", "--check"]);
    let status = Output::of(&mut status);
    succeeded(&status);
    assert!(
        status.stderr.contains("are clean (orphans not checked)"),
        "{}",
        status.stderr
    );

    // Replay, offline, under CI: the same answers.
    fake.stop();
    let (replayed, replayed_out) = suite.run(&[], workers, &[("CI", "true")]);
    succeeded(&replayed);
    assert_eq!(answers(&replayed_out), answers(&recorded_out));
    assert_eq!(answers(&recorded_out).len(), 3);
    assert_eq!(suite.report()["counts"]["hits"], 3, "{}", suite.report());

    // A changed prompt: missing, named by its node id, with the command that records it.
    let (missed, _) = suite.run(&[], workers, &[("CI", "true"), ("SAMPLE_CHANGED", "1")]);
    assert_ne!(missed.code, Some(0), "{}", missed.stderr);
    let report = suite.report();
    assert_eq!(report["missing"][0]["test"], TESTS[0], "{report}");
    // pytest shows the miss in the test's own failure, with the command that records it.
    assert!(
        missed
            .stdout
            .contains("record it with: cargo llmreplay run --record-missing -- "),
        "{}",
        missed.stdout
    );
    assert!(
        missed.stderr.contains("test_chat.py::test_hello")
            && missed.stderr.contains("cargo llmreplay run --record -- "),
        "{}",
        missed.stderr
    );
    if xdist {
        return;
    }
    // Run with the file named, the command that records the test again selects that test
    // alone: the file argument gives way to its node id (pytest runs the union of both).
    let (missed, _) = suite.run(
        &[],
        &["test_chat.py"],
        &[("CI", "true"), ("SAMPLE_CHANGED", "1")],
    );
    assert_ne!(missed.code, Some(0), "{}", missed.stderr);
    let rerecord = suite.report()["missing"][0]["rerecord"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        rerecord.ends_with(" -p no:cacheprovider test_chat.py::test_hello"),
        "{rerecord}"
    );
    // `--record` of one test: its cassette holds the new request alone; the others' files
    // are byte for byte as they were.
    let fake = FakeProvider::start().await;
    let others = files_in(
        &TESTS[1..]
            .iter()
            .map(|t| suite.folder(t))
            .collect::<Vec<_>>(),
    );
    let flags = record_flags(&fake);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut changed = KEYS.to_vec();
    changed.push(("SAMPLE_CHANGED", "1"));
    let (one, _) = suite.run(&flags, &[TESTS[0]], &changed);
    succeeded(&one);
    assert_eq!(fake.received().len(), 1);
    for (path, bytes) in others {
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "{}", path.display());
    }
    let hello = crate::support::read_json(&suite.folder(TESTS[0]).join("openai.json"));
    assert_eq!(
        crate::support::prompts(&hello),
        ["Hello again"],
        "a passed test keeps exactly what it recorded"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pytest_tests_record_replay_and_miss_each_in_their_own_folder() {
    pytest_per_test(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pytest_xdist_workers_announce_their_own_tests() {
    if sdk_python("xdist").is_none() {
        return;
    }
    pytest_per_test(true).await;
}

/// A command with no plugin: each process tree under it is a test named for its program (here
/// curl's), recorded then replayed offline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_with_no_plugin_records_and_replays_under_its_programs_name() {
    let dir = tempfile::tempdir().unwrap();
    let mut fake = FakeProvider::start().await;
    let script = "curl -sS --fail -H 'content-type: application/json' \
        -d '{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"From curl\"}]}' \
        \"$OPENAI_BASE_URL/chat/completions\"";
    let command: Vec<&OsStr> = ["sh", "-c", script].map(OsStr::new).to_vec();
    let run = |flags: &[&str], env: &[(&str, &str)]| run_in(dir.path(), flags, &command, env);
    let upstream = format!("openai={}", fake.url());
    let recorded = run(&["--record", "--upstream", &upstream], &[]);
    assert_eq!(recorded.code, Some(0), "{}", recorded.stderr);
    assert!(
        recorded.stdout.contains("You said: From curl"),
        "{}",
        recorded.stdout
    );
    assert!(dir
        .path()
        .join("tests/cassettes/curl/openai.json")
        .is_file());
    fake.stop();
    let replayed = run(&[], &[("CI", "true")]);
    assert_eq!(replayed.code, Some(0), "{}", replayed.stderr);
    assert_eq!(replayed.stdout, recorded.stdout);
    assert!(
        replayed.stderr.contains("1 request: 1 replayed"),
        "{}",
        replayed.stderr
    );
    // A Python program is named without its interpreter's minor version (`python3.11` runs
    // it), so the same suite under another Python 3 replays what this one recorded.
    let mut fake = FakeProvider::start().await;
    let upstream = format!("openai={}", fake.url());
    let python = "import json, os, urllib.request; \
        body = json.dumps({'model': 'm', 'messages': [{'role': 'user', 'content': 'From Python'}]}).encode(); \
        req = urllib.request.Request(os.environ['OPENAI_BASE_URL'] + '/chat/completions', body, \
            {'content-type': 'application/json'}); \
        print(urllib.request.urlopen(req).read().decode())";
    let command: Vec<&OsStr> = ["python3", "-c", python].map(OsStr::new).to_vec();
    let recorded = run_in(
        dir.path(),
        &["--record", "--upstream", &upstream],
        &command,
        &[],
    );
    assert_eq!(recorded.code, Some(0), "{}", recorded.stderr);
    assert!(
        dir.path()
            .join("tests/cassettes/python3/openai.json")
            .is_file(),
        "{}",
        recorded.stderr
    );
    fake.stop();
    let replayed = run_in(dir.path(), &[], &command, &[("CI", "true")]);
    assert_eq!(replayed.code, Some(0), "{}", replayed.stderr);
    assert_eq!(replayed.stdout, recorded.stdout);
    // The command's own failure is the run's status.
    let failed = run_in(
        dir.path(),
        &[],
        &["sh", "-c", "exit 3"].map(OsStr::new),
        &[],
    );
    assert_eq!(failed.code, Some(3), "{}", failed.stderr);
}

/// `serve --env` with no `--test-id` (`--test-id-env` names tests by process) prints proxy
/// credentials that name no test: they would win over the process, and file every captured
/// call under `default`.
#[test]
fn serve_env_without_a_test_id_names_no_test_in_the_proxy() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, lines) = crate::clients::serve_env(
        dir.path(),
        &[
            "--test-id-env",
            "PYTEST_CURRENT_TEST",
            "--cassette-dir",
            "c",
        ],
        &[(
            "CARGO_TARGET_DIR",
            dir.path().join("target").to_str().unwrap(),
        )],
    );
    let _ = child.kill();
    let _ = child.wait();
    let proxy = lines
        .lines()
        .find_map(|l| l.strip_prefix("export HTTPS_PROXY="))
        .unwrap_or_else(|| panic!("HTTPS_PROXY in {lines}"));
    let creds = proxy
        .trim_matches('\'')
        .strip_prefix("http://:")
        .unwrap_or_else(|| panic!("no test in the user part: {proxy}"));
    let (secret, _) = creds.split_once('@').unwrap();
    assert_eq!(secret.len(), 32, "{proxy}");
}

/// The vitest suite (tests/node/vitest_suite) in its own temp dir, its packages those of
/// tests/node (vitest, the `openai` SDK, and this repository's setup file, from the lockfile).
pub(crate) fn vitest_project() -> Option<(tempfile::TempDir, PathBuf)> {
    let node = crate::clients::node_clients()?;
    let dir = tempfile::tempdir().unwrap();
    for file in ["chat.test.js", "vitest.config.mjs"] {
        std::fs::copy(node.join("vitest_suite").join(file), dir.path().join(file)).unwrap();
    }
    std::os::unix::fs::symlink(node.join("node_modules"), dir.path().join("node_modules")).unwrap();
    let vitest = node.join("node_modules/vitest/vitest.mjs");
    Some((dir, vitest))
}

/// vitest workers announce each test by its full name: three tests, three folders; replayed
/// offline with the same answers; a changed prompt missing under its test's name; `--record`
/// of one test leaves the others' files as they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vitest_tests_record_replay_and_miss_each_in_their_own_folder() {
    let Some((dir, vitest)) = vitest_project() else {
        return;
    };
    let mut fake = FakeProvider::start().await;
    let run = |flags: &[&str], extra: &[&str], env: &[(&str, &str)]| {
        let mut command: Vec<&OsStr> = vec![OsStr::new("node"), vitest.as_os_str()];
        command.extend(
            ["run", "--reporter=dot"]
                .iter()
                .chain(extra)
                .map(OsStr::new),
        );
        run_keeping(dir.path(), flags, &command, env)
    };
    let tests = [
        "chat.test.js > chat > hello",
        "chat.test.js > chat > bye",
        "chat.test.js > top level",
    ];
    let folder = |test: &str| {
        let slug = cassettes::Slug::from_test_id(&cassettes::TestId::new(test));
        dir.path().join("tests/cassettes").join(slug.as_str())
    };
    let flags = record_flags(&fake);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let (recorded, recorded_out) = run(&flags, &[], KEYS);
    succeeded(&recorded);
    for test in tests {
        assert!(
            folder(test).join("openai.json").is_file(),
            "{test}: {}",
            recorded.stderr
        );
    }
    assert_eq!(
        std::fs::read_dir(dir.path().join("tests/cassettes"))
            .unwrap()
            .count(),
        3
    );
    fake.stop();
    let (replayed, replayed_out) = run(&[], &[], &[("CI", "true")]);
    succeeded(&replayed);
    assert_eq!(answers(&replayed_out), answers(&recorded_out));
    assert_eq!(answers(&recorded_out).len(), 3);

    let (missed, _) = run(&[], &[], &[("CI", "true"), ("SAMPLE_CHANGED", "1")]);
    assert_ne!(missed.code, Some(0), "{}", missed.stderr);
    let report = crate::support::read_json(&dir.path().join("target/llmreplay/report.json"));
    assert_eq!(report["missing"][0]["test"], tests[0], "{report}");

    let fake = FakeProvider::start().await;
    let others = files_in(&tests[1..].iter().map(|t| folder(t)).collect::<Vec<_>>());
    let flags = record_flags(&fake);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut changed = KEYS.to_vec();
    changed.push(("SAMPLE_CHANGED", "1"));
    // The command the miss printed to record that test again, pasted into a shell (the
    // stand-in provider's address added): it runs that one test, by its file and full name.
    let rerecord = report["missing"][0]["rerecord"].as_str().unwrap();
    assert!(
        rerecord.ends_with("vitest.mjs run '--reporter=dot' chat.test.js -t '^chat > hello$'"),
        "{rerecord}"
    );
    let pasted = rerecord.replacen(
        " run --record -- ",
        &format!(" run --record {} -- ", flags[1..].join(" ")),
        1,
    );
    let bin = binary().parent().unwrap().to_path_buf();
    let path = std::env::join_paths(
        std::iter::once(bin).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap())),
    )
    .unwrap();
    let mut sh = Command::new("sh");
    sh.current_dir(dir.path())
        .args(["-c", &pasted])
        .env("PATH", path)
        .env("CARGO_TARGET_DIR", dir.path().join("target"))
        .env_remove("CI");
    without_provider_env(&mut sh);
    sh.envs(changed.iter().copied());
    let one = Output::of(&mut sh);
    succeeded(&one);
    assert_eq!(fake.received().len(), 1);
    for (path, bytes) in others {
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "{}", path.display());
    }
    let hello = crate::support::read_json(&folder(tests[0]).join("openai.json"));
    assert_eq!(crate::support::prompts(&hello), ["Hello again"]);
}

/// Two files with one `describe`/`test` name and titles in Japanese and Cyrillic: five tests,
/// five folders, replayed offline. Folders an older version named (the file dropped, other
/// scripts' letters as `-`) make the replay miss with the fix named, are not called unused,
/// and `status --fix` moves them to today's names, after which the replay passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vitest_tests_of_one_name_in_two_files_and_any_script_keep_their_own_folders() {
    let Some((dir, vitest)) = vitest_project() else {
        return;
    };
    let node = crate::clients::node_clients().unwrap();
    std::fs::copy(
        node.join("vitest_suite/twin.test.js"),
        dir.path().join("twin.test.js"),
    )
    .unwrap();
    let mut fake = FakeProvider::start().await;
    let run = |flags: &[&str], env: &[(&str, &str)]| {
        let command: Vec<&OsStr> = vec![
            OsStr::new("node"),
            vitest.as_os_str(),
            OsStr::new("run"),
            OsStr::new("--reporter=dot"),
        ];
        run_keeping(dir.path(), flags, &command, env)
    };
    let tests = [
        "chat.test.js > chat > hello",
        "chat.test.js > chat > bye",
        "chat.test.js > top level",
        "twin.test.js > chat > hello",
        "twin.test.js > 挨拶する",
        "twin.test.js > Приветствие",
    ];
    let cassettes = dir.path().join("tests/cassettes");
    let folder = |test: &str| {
        let slug = cassettes::Slug::from_test_id(&cassettes::TestId::new(test));
        cassettes.join(slug.as_str())
    };
    let flags = record_flags(&fake);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let (recorded, recorded_out) = run(&flags, KEYS);
    succeeded(&recorded);
    for test in tests {
        assert!(
            folder(test).join("openai.json").is_file(),
            "{test}: {}",
            recorded.stderr
        );
    }
    assert_eq!(std::fs::read_dir(&cassettes).unwrap().count(), tests.len());
    assert!(folder(tests[4]).ends_with("twin-test-js--挨拶する"));
    fake.stop();
    let (replayed, replayed_out) = run(&[], &[("CI", "true")]);
    succeeded(&replayed);
    assert_eq!(answers(&replayed_out), answers(&recorded_out));

    // As an older version left them: the file dropped, so the twin's `chat > hello` could not
    // have had a folder of its own; the others moved to their old names.
    std::fs::remove_dir_all(folder(tests[3])).unwrap();
    for test in [tests[1], tests[2], tests[5]] {
        let old = cassettes::Slug::legacy_from_test_id(&cassettes::TestId::new(test));
        std::fs::rename(folder(test), cassettes.join(old.as_str())).unwrap();
    }
    let (missed, _) = run(&[], &[("CI", "true")]);
    assert_ne!(missed.code, Some(0), "{}", missed.stderr);
    assert!(
        missed.stderr.contains("an older version named for it")
            && missed.stderr.contains("cargo llmreplay status --fix"),
        "{}",
        missed.stderr
    );
    let report = crate::support::read_json(&dir.path().join("target/llmreplay/report.json"));
    assert_eq!(
        report["unused"].as_array().map_or(0, Vec::len),
        0,
        "{report}"
    );
    let status = Output::of(
        Command::new(binary())
            .current_dir(dir.path())
            .args(["llmreplay", "status"]),
    );
    assert!(
        status.stderr.contains("status --fix` moves it there"),
        "{}",
        status.stderr
    );
    let fixed = Output::of(Command::new(binary()).current_dir(dir.path()).args([
        "llmreplay",
        "status",
        "--fix",
    ]));
    assert_eq!(
        fixed
            .stderr
            .matches("the folder an older version named for its test")
            .count(),
        3,
        "{}",
        fixed.stderr
    );
    let mut fake = FakeProvider::start().await;
    let flags = record_flags(&fake);
    let mut flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    flags[0] = "--record-missing";
    let (again, _) = run(&flags, KEYS);
    succeeded(&again);
    assert_eq!(
        fake.received().len(),
        1,
        "only the twin's test, which had no folder"
    );
    fake.stop();
    let (replayed, _) = run(&[], &[("CI", "true")]);
    succeeded(&replayed);
}

/// jest workers announce each test by file and full name: two tests, two folders, replayed
/// offline with the same answers. (jest tells no hook a test's outcome: none is reported.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jest_tests_record_and_replay_each_in_their_own_folder() {
    let Some(node) = crate::clients::node_clients() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    for file in ["chat.test.cjs", "jest.config.cjs"] {
        std::fs::copy(node.join("jest_suite").join(file), dir.path().join(file)).unwrap();
    }
    std::os::unix::fs::symlink(node.join("node_modules"), dir.path().join("node_modules")).unwrap();
    let jest = node.join("node_modules/jest/bin/jest.js");
    let mut fake = FakeProvider::start().await;
    let command: Vec<&OsStr> = vec![
        OsStr::new("node"),
        jest.as_os_str(),
        OsStr::new("--ci"),
        OsStr::new("--silent"),
    ];
    let run = |flags: &[&str], env: &[(&str, &str)]| run_keeping(dir.path(), flags, &command, env);
    let flags = record_flags(&fake);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let (recorded, recorded_out) = run(&flags, KEYS);
    succeeded(&recorded);
    for test in ["chat.test.cjs > chat hello", "chat.test.cjs > chat bye"] {
        let slug = cassettes::Slug::from_test_id(&cassettes::TestId::new(test));
        let file = dir
            .path()
            .join("tests/cassettes")
            .join(slug.as_str())
            .join("openai.json");
        assert!(file.is_file(), "{test}: {}", recorded.stderr);
    }
    fake.stop();
    let (replayed, replayed_out) = run(&[], &[("CI", "true")]);
    succeeded(&replayed);
    assert_eq!(answers(&replayed_out), answers(&recorded_out));
    assert_eq!(answers(&recorded_out).len(), 2);
}

/// `node --test --import llmreplay-test-setup/node-test`: each test of the file's process is
/// announced by its file and full name; three tests, three folders, replayed offline with the
/// same answers, and a changed prompt missing under its test's name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_test_tests_record_replay_and_miss_each_in_their_own_folder() {
    let Some(node) = crate::clients::node_clients() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("test")).unwrap();
    std::fs::copy(
        node.join("node_test_suite/chat.test.mjs"),
        dir.path().join("test/chat.test.mjs"),
    )
    .unwrap();
    std::os::unix::fs::symlink(node.join("node_modules"), dir.path().join("node_modules")).unwrap();
    let command: Vec<&OsStr> = [
        "node",
        "--test",
        "--import",
        "llmreplay-test-setup/node-test",
    ]
    .into_iter()
    .map(OsStr::new)
    .collect();
    let run = |flags: &[&str], env: &[(&str, &str)]| run_keeping(dir.path(), flags, &command, env);
    let tests = [
        "test/chat.test.mjs > chat > hello",
        "test/chat.test.mjs > chat > bye",
        "test/chat.test.mjs > top level",
    ];
    let mut fake = FakeProvider::start().await;
    let flags = record_flags(&fake);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let (recorded, recorded_out) = run(&flags, KEYS);
    succeeded(&recorded);
    for test in tests {
        let slug = cassettes::Slug::from_test_id(&cassettes::TestId::new(test));
        let file = dir
            .path()
            .join("tests/cassettes")
            .join(slug.as_str())
            .join("openai.json");
        assert!(file.is_file(), "{test}: {}", recorded.stderr);
    }
    assert_eq!(
        std::fs::read_dir(dir.path().join("tests/cassettes"))
            .unwrap()
            .count(),
        3
    );
    fake.stop();
    let (replayed, replayed_out) = run(&[], &[("CI", "true")]);
    succeeded(&replayed);
    assert_eq!(answers(&replayed_out), answers(&recorded_out));
    assert_eq!(answers(&recorded_out).len(), 3);
    let (missed, _) = run(&[], &[("CI", "true"), ("SAMPLE_CHANGED", "1")]);
    assert_ne!(missed.code, Some(0), "{}", missed.stderr);
    let report = crate::support::read_json(&dir.path().join("target/llmreplay/report.json"));
    assert_eq!(report["missing"][0]["test"], tests[0], "{report}");
}

/// With no daemon in the environment, the plugin sets nothing and says nothing: pytest runs as
/// without it.
#[test]
fn the_pytest_plugin_does_nothing_without_a_daemon() {
    let Some(python) = sdk_python("pytest_llmreplay") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("test_plain.py"),
        "import os\n\ndef test_untouched():\n    assert 'LLMREPLAY_BASE_URL' not in os.environ\n    assert 'HTTPS_PROXY' not in os.environ\n",
    )
    .unwrap();
    let mut cmd = Command::new(&python);
    cmd.current_dir(dir.path())
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"]);
    without_provider_env(&mut cmd);
    for k in ["LLMREPLAY_BASE_URL", "HTTPS_PROXY", "https_proxy"] {
        cmd.env_remove(k);
    }
    let out = Output::of(&mut cmd);
    assert_eq!(out.code, Some(0), "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("1 passed"), "{}", out.stdout);
    // The plugin is loaded, and silent.
    assert!(!out.stderr.contains("pytest-llmreplay"), "{}", out.stderr);
    let plugins = Output::of(Command::new(&python).current_dir(dir.path()).args([
        "-m",
        "pytest",
        "--co",
        "-q",
        "-p",
        "no:cacheprovider",
        "--trace-config",
    ]));
    assert!(
        plugins.stdout.contains("pytest_llmreplay"),
        "{}",
        plugins.stdout
    );
}

/// Calls captured on their way to a hard-coded host, through one kept-alive tunnel that two
/// tests share (a module-level `requests.Session`): each is filed under the test that made it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn captured_calls_in_one_kept_tunnel_are_filed_per_test() {
    let Some(python) = sdk_python("pytest_llmreplay") else {
        return;
    };
    let ca = crate::support::TestCa::new("tools");
    let mut tls = FakeProvider::start_tls(&ca).await;
    let dir = tempfile::tempdir().unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let suite = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/sdk/pytest_tools");
    std::fs::copy(
        suite.join("test_tools.py"),
        dir.path().join("test_tools.py"),
    )
    .unwrap();
    ca.trusted_by(dir.path(), scratch.path(), "");
    let mut command: Vec<&OsStr> = vec![python.as_os_str()];
    command.extend(["-m", "pytest", "-q", "-p", "no:cacheprovider"].map(OsStr::new));
    let run = |flags: &[&str], env: &[(&str, &str)]| run_in(dir.path(), flags, &command, env);
    let upstream = format!("tools.example=https://127.0.0.1:{}", tls.addr.port());
    let recorded = run(&["--record", "--upstream", &upstream], &[]);
    succeeded(&recorded);
    assert_eq!(tls.received().len(), 2);
    for (test, who) in [
        ("test_tools.py::test_tool_one", "who=one"),
        ("test_tools.py::test_tool_two", "who=two"),
    ] {
        let slug = cassettes::Slug::from_test_id(&cassettes::TestId::new(test));
        let file = dir
            .path()
            .join("tests/cassettes")
            .join(slug.as_str())
            .join("tools.example.json");
        let cassette = crate::support::read_json(&file);
        let interactions = cassette["interactions"].as_array().unwrap();
        assert_eq!(interactions.len(), 1, "{test}: {cassette}");
        assert_eq!(interactions[0]["request"]["query"], who, "{test}");
    }
    tls.stop();
    let replayed = run(&[], &[("CI", "true")]);
    succeeded(&replayed);
}

/// A key a test process has that the daemon does not (a conftest loaded it from `.env`):
/// the plugin's `begin` names it, so its value is replaced wherever it turns up (here in a
/// prompt and in the answer that echoes it), and a replay with another value matches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_only_the_test_process_has_is_never_stored_and_replays_with_another() {
    let Some(python) = sdk_python("pytest_llmreplay") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("conftest.py"),
        "import os\n\n# As python-dotenv's load_dotenv() would, from a .env the daemon never read.\nos.environ['VAULT_SERVICE_TOKEN'] = os.environ['DOTENV_VALUE']\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("test_vault.py"),
        "import os\n\nimport openai\n\n\ndef test_vault():\n    token = os.environ['VAULT_SERVICE_TOKEN']\n    answer = openai.OpenAI(max_retries=0).chat.completions.create(\n        model='gpt-4o-mini', messages=[{'role': 'user', 'content': f'Check the vault with {token}'}]\n    )\n    with open(os.path.join(os.environ['SAMPLE_OUT'], 'vault.txt'), 'w') as f:\n        f.write(answer.choices[0].message.content)\n",
    )
    .unwrap();
    let fake = FakeProvider::start().await;
    let pytest: Vec<&OsStr> = [
        python.as_os_str(),
        OsStr::new("-m"),
        OsStr::new("pytest"),
        OsStr::new("-q"),
        OsStr::new("-p"),
        OsStr::new("no:cacheprovider"),
    ]
    .to_vec();
    vault_key_is_never_stored(
        dir.path(),
        &fake,
        &pytest,
        ("vault-live-7Hq2Xz9Lm", "vault-rotated-4Lm9Qp"),
        &[dir.path()],
    );
}

/// Records `command` with `DOTENV_VALUE` set to `live` (a key only the test process has, which
/// the test sends and the stand-in echoes), then replays it offline with `other`: the replay
/// matches, and no file under `dirs` and no output holds either value.
fn vault_key_is_never_stored(
    dir: &Path,
    fake: &FakeProvider,
    command: &[&OsStr],
    (live, other): (&str, &str),
    dirs: &[&Path],
) {
    let flags = record_flags(fake);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut env = KEYS.to_vec();
    env.push(("DOTENV_VALUE", live));
    let (recorded, recorded_out) = run_keeping(dir, &flags, command, &env);
    succeeded(&recorded);
    assert!(
        answers(&recorded_out)["vault.txt"].contains(live),
        "the live answer echoes it"
    );
    assert!(String::from_utf8_lossy(&fake.received()[0].raw).contains(live));

    let (replayed, replayed_out) = run_keeping(
        dir,
        &[],
        command,
        &[("CI", "true"), ("DOTENV_VALUE", other)],
    );
    succeeded(&replayed);
    assert_eq!(fake.received().len(), 1, "the replay sent nothing");
    assert_eq!(
        answers(&replayed_out)["vault.txt"],
        "You said: Check the vault with llmreplay-redacted"
    );
    for (path, text) in dirs.iter().flat_map(|d| crate::support::all_files(d)) {
        for secret in [live, other] {
            assert!(!text.contains(secret), "{secret} in {}", path.display());
        }
    }
    for out in [
        &recorded.stderr,
        &recorded.stdout,
        &replayed.stderr,
        &replayed.stdout,
    ] {
        for secret in [live, other] {
            assert!(!out.contains(secret), "{secret} in:\n{out}");
        }
    }
}

/// The Node setup's `begin` names the test process's secret-looking variables too: a key a
/// vitest setup file loads (as dotenv would) is replaced wherever it turns up, and a replay
/// with another value matches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_only_the_vitest_process_has_is_never_stored_and_replays_with_another() {
    let Some((dir, vitest)) = vitest_project() else {
        return;
    };
    std::fs::remove_file(dir.path().join("chat.test.js")).unwrap();
    std::fs::write(
        dir.path().join("vitest.config.mjs"),
        "export default { test: { include: [\"*.test.js\"], setupFiles: [\"./dotenv.js\", \"llmreplay-test-setup/vitest\"] } };\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("dotenv.js"),
        "// As dotenv's config() would, from a .env the daemon never read.\nprocess.env.VAULT_SERVICE_TOKEN = process.env.DOTENV_VALUE;\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("vault.test.js"),
        "import fs from \"node:fs\";\nimport path from \"node:path\";\nimport OpenAI from \"openai\";\nimport { test } from \"vitest\";\n\ntest(\"vault\", async () => {\n  const token = process.env.VAULT_SERVICE_TOKEN;\n  const answer = await new OpenAI({ maxRetries: 0 }).chat.completions.create({\n    model: \"gpt-4o-mini\",\n    messages: [{ role: \"user\", content: `Check the vault with ${token}` }],\n  });\n  fs.writeFileSync(path.join(process.env.SAMPLE_OUT, \"vault.txt\"), answer.choices[0].message.content);\n});\n",
    )
    .unwrap();
    let fake = FakeProvider::start().await;
    let command: Vec<&OsStr> = vec![
        OsStr::new("node"),
        vitest.as_os_str(),
        OsStr::new("run"),
        OsStr::new("--reporter=dot"),
    ];
    // The project's own files (node_modules links to the shared clients) and what the runs wrote.
    let (tests, target) = (dir.path().join("tests"), dir.path().join("target"));
    vault_key_is_never_stored(
        dir.path(),
        &fake,
        &command,
        ("vault-live-node-7Hq2Xz", "vault-rotated-node-4Lm9"),
        &[&tests, &target],
    );
}

/// Two Python projects inside one Rust workspace, each with `tests/test_chat.py`: each owns its
/// cassettes (its nearest project root), so recording one again leaves the other's as they
/// were, and `status` in each sees its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_projects_inside_a_rust_workspace_keep_their_own_cassettes() {
    let Some(python) = sdk_python("pytest_llmreplay") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("Cargo.toml"),
        "[workspace]\nmembers = []\nresolver = \"2\"\n",
    )
    .unwrap();
    let suite = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/sdk/pytest_suite");
    for project in ["pyA", "pyB"] {
        let at = dir.path().join(project);
        std::fs::create_dir_all(at.join("tests")).unwrap();
        std::fs::write(
            at.join("pyproject.toml"),
            "[project]\nname = \"p\"\nversion = \"0\"\n",
        )
        .unwrap();
        std::fs::copy(suite.join("test_chat.py"), at.join("tests/test_chat.py")).unwrap();
    }
    let mut fake = FakeProvider::start().await;
    let flags = record_flags(&fake);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let pytest: Vec<&OsStr> = [python.as_os_str()]
        .into_iter()
        .chain(["-m", "pytest", "-q", "-p", "no:cacheprovider"].map(OsStr::new))
        .collect();
    for project in ["pyA", "pyB"] {
        let (out, _) = run_keeping(&dir.path().join(project), &flags, &pytest, KEYS);
        succeeded(&out);
    }
    let hello = |project: &str| {
        let id = cassettes::TestId::new("tests/test_chat.py::test_hello");
        dir.path()
            .join(project)
            .join("tests/cassettes")
            .join(cassettes::Slug::from_test_id(&id).as_str())
            .join("openai.json")
    };
    assert!(hello("pyA").is_file() && hello("pyB").is_file());
    assert!(
        !dir.path().join("tests/cassettes").exists(),
        "nothing at the workspace's root"
    );
    let kept = std::fs::read(hello("pyB")).unwrap();
    let mut changed = KEYS.to_vec();
    changed.push(("SAMPLE_CHANGED", "1"));
    let (again, _) = run_keeping(&dir.path().join("pyA"), &flags, &pytest, &changed);
    succeeded(&again);
    assert_eq!(
        std::fs::read(hello("pyB")).unwrap(),
        kept,
        "pyB's recording is as it was"
    );
    let a = crate::support::read_json(&hello("pyA"));
    assert_eq!(crate::support::prompts(&a), ["Hello again"]);
    fake.stop();
    for project in ["pyA", "pyB"] {
        let mut status = Command::new(binary());
        status
            .current_dir(dir.path().join(project))
            .args(["llmreplay", "status", "--check"]);
        let status = Output::of(&mut status);
        succeeded(&status);
        assert!(
            status
                .stderr
                .contains("cassettes in tests/cassettes are clean"),
            "{}",
            status.stderr
        );
        // pyA replays its new recording, pyB its first one.
        let mut env = vec![("CI", "true")];
        if project == "pyA" {
            env.push(("SAMPLE_CHANGED", "1"));
        }
        let (replayed, _) = run_keeping(&dir.path().join(project), &[], &pytest, &env);
        succeeded(&replayed);
    }
}

/// pytest-rerunfailures: a test whose first attempt fails after its call, rerun once. The rerun
/// begins the test again, so it is answered from the first recording as the first attempt was:
/// recorded, then replayed offline (both attempts again) with nothing missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pytest_rerun_starts_its_tests_calls_afresh() {
    let Some(python) = sdk_python("pytest_rerunfailures") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let suite = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/sdk/pytest_flaky");
    std::fs::copy(
        suite.join("test_flaky.py"),
        dir.path().join("test_flaky.py"),
    )
    .unwrap();
    let pytest: Vec<&OsStr> = [python.as_os_str()]
        .into_iter()
        .chain(
            [
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "--reruns",
                "1",
            ]
            .map(OsStr::new),
        )
        .collect();
    let mut fake = FakeProvider::start().await;
    let flags = record_flags(&fake);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let state = tempfile::tempdir().unwrap();
    let mut env = KEYS.to_vec();
    env.push(("SAMPLE_STATE", state.path().to_str().unwrap()));
    let recorded = run_in(dir.path(), &flags, &pytest, &env);
    succeeded(&recorded);
    assert!(
        recorded.stdout.contains("1 passed, 1 rerun"),
        "{}",
        recorded.stdout
    );
    assert_eq!(fake.received().len(), 2, "both attempts called");
    let id = cassettes::TestId::new("test_flaky.py::test_flaky");
    let cassette = crate::support::read_json(
        &dir.path()
            .join("tests/cassettes")
            .join(cassettes::Slug::from_test_id(&id).as_str())
            .join("openai.json"),
    );
    assert_eq!(
        crate::support::prompts(&cassette),
        ["Retry me"],
        "the passing attempt's call"
    );
    fake.stop();
    let state = tempfile::tempdir().unwrap();
    let replayed = run_in(
        dir.path(),
        &[],
        &pytest,
        &[
            ("CI", "true"),
            ("SAMPLE_STATE", state.path().to_str().unwrap()),
        ],
    );
    succeeded(&replayed);
    assert!(
        replayed.stdout.contains("1 passed, 1 rerun"),
        "{}",
        replayed.stdout
    );
}

/// vitest's `retry`: a test whose first attempt fails after its call is run again; its
/// `beforeEach` begins it again, so the retry is answered from the first recording as the
/// first attempt was: recorded, then replayed offline (both attempts) with nothing missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vitest_retry_starts_its_tests_calls_afresh() {
    let Some((dir, vitest)) = vitest_project() else {
        return;
    };
    let node = crate::clients::node_clients().unwrap();
    std::fs::remove_file(dir.path().join("chat.test.js")).unwrap();
    std::fs::copy(
        node.join("vitest_suite/flaky.test.js"),
        dir.path().join("flaky.test.js"),
    )
    .unwrap();
    let command: Vec<&OsStr> = vec![
        OsStr::new("node"),
        vitest.as_os_str(),
        OsStr::new("run"),
        OsStr::new("--reporter=dot"),
    ];
    let mut fake = FakeProvider::start().await;
    let flags = record_flags(&fake);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let state = tempfile::tempdir().unwrap();
    let mut env = KEYS.to_vec();
    env.push(("SAMPLE_STATE", state.path().to_str().unwrap()));
    let recorded = run_in(dir.path(), &flags, &command, &env);
    succeeded(&recorded);
    assert_eq!(fake.received().len(), 2, "both attempts called");
    fake.stop();
    let state = tempfile::tempdir().unwrap();
    let replayed = run_in(
        dir.path(),
        &[],
        &command,
        &[
            ("CI", "true"),
            ("SAMPLE_STATE", state.path().to_str().unwrap()),
        ],
    );
    succeeded(&replayed);
    assert!(
        state.path().join("failed-once").exists(),
        "the first attempt ran and failed"
    );
}
