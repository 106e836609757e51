//! Node tests that run at once in one process: vitest's worker threads, jest's
//! `workerThreads`, and vitest's `describe.concurrent`. The fake provider holds each call until
//! the others are in flight, so every call is made while other tests run in the same process;
//! only the `X-Test-Id` header the setup files add (to fetch and node:http alike) can file it
//! under its own test. And the suite vitest collected is listed, so that a deleted test's folder
//! is an orphan while a filtered run's are not.

use crate::runners::{answers, record_flags, run_keeping, succeeded, vitest_project, KEYS};
use crate::support::{prompts, read_json, FakeProvider};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

/// A project in its own temp dir: `files` of tests/node/`suite`, the packages of tests/node.
fn project(suite: &str, files: &[&str]) -> Option<tempfile::TempDir> {
    let node = crate::clients::node_clients()?;
    let dir = tempfile::tempdir().unwrap();
    for file in files {
        std::fs::copy(node.join(suite).join(file), dir.path().join(file)).unwrap();
    }
    std::os::unix::fs::symlink(node.join("node_modules"), dir.path().join("node_modules")).unwrap();
    Some(dir)
}

fn folder(dir: &Path, test: &str) -> PathBuf {
    let slug = cassettes::Slug::from_test_id(&cassettes::TestId::new(test));
    dir.join("tests/cassettes").join(slug.as_str())
}

fn folder_count(dir: &Path) -> usize {
    std::fs::read_dir(dir.join("tests/cassettes"))
        .unwrap()
        .count()
}

fn node_command<'a>(program: &'a Path, args: &[&'a str]) -> Vec<&'a OsStr> {
    let mut command = vec![OsStr::new("node"), program.as_os_str()];
    command.extend(args.iter().map(|a| OsStr::new(*a)));
    command
}

/// Records `tests` (test id, its prompt) with the first calls held until `at_once` are in
/// flight, so that every test has begun before any makes its second call; checks each folder
/// holds its own test's two calls alone, then replays offline three times with the same answers.
async fn record_at_once_and_replay(
    dir: &Path,
    command: &[&OsStr],
    tests: &[(&str, &str)],
    at_once: usize,
) {
    let mut fake = FakeProvider::start().await;
    *fake.state.gate.lock().unwrap() = Some(at_once);
    let flags = record_flags(&fake);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let (recorded, recorded_out) = run_keeping(dir, &flags, command, KEYS);
    succeeded(&recorded);
    assert_eq!(
        fake.state.peak.load(Ordering::SeqCst),
        at_once,
        "the calls were not in flight at once"
    );
    for (test, prompt) in tests {
        let cassette = folder(dir, test).join("openai.json");
        assert!(cassette.is_file(), "{test}: {}", recorded.stderr);
        assert_eq!(
            prompts(&read_json(&cassette)),
            [prompt.to_string(), format!("{prompt}, again")],
            "{test}"
        );
    }
    assert_eq!(folder_count(dir), tests.len());
    assert_eq!(answers(&recorded_out).len(), tests.len());
    fake.stop();
    for _ in 0..3 {
        let (replayed, replayed_out) = run_keeping(dir, &[], command, &[("CI", "true")]);
        succeeded(&replayed);
        assert_eq!(answers(&replayed_out), answers(&recorded_out));
    }
}

/// vitest `--pool threads --maxWorkers 3`: three files' tests in three threads of one process,
/// called at once (fetch in two, node:http in one); each folder holds its own test's call,
/// replayed identically three times; a changed prompt misses under its own test's name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vitest_worker_threads_keep_each_tests_calls_apart() {
    let files = [
        "ask.js",
        "one.test.js",
        "two.test.js",
        "three.test.js",
        "vitest.config.mjs",
    ];
    let Some(dir) = project("vitest_threads", &files) else {
        return;
    };
    let vitest = dir.path().join("node_modules/vitest/vitest.mjs");
    let args = [
        "run",
        "--reporter=dot",
        "--pool",
        "threads",
        "--maxWorkers",
        "3",
    ];
    let command = node_command(&vitest, &args);
    let tests = [
        ("one.test.js > first", "First"),
        ("two.test.js > second > asks", "Second"),
        ("three.test.js > third over node:http", "Third"),
    ];
    record_at_once_and_replay(dir.path(), &command, &tests, 3).await;
    let (missed, _) = run_keeping(
        dir.path(),
        &[],
        &command,
        &[("CI", "true"), ("SAMPLE_CHANGED", "1")],
    );
    assert_ne!(missed.code, Some(0), "{}", missed.stderr);
    let report = read_json(&dir.path().join("target/llmreplay/report.json"));
    let missing = report["missing"].as_array().unwrap();
    assert_eq!(missing.len(), 1, "{report}");
    assert_eq!(missing[0]["test"], tests[1].0, "{report}");
}

/// jest with `workerThreads: true`: three files in three threads of one process, called at
/// once; each folder holds its own test's call, replayed identically three times; a changed
/// prompt misses under its own test's name. A renamed test's folder is then an orphan
/// `--deny unused` names, and a `.skip` test's is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jest_worker_threads_keep_each_tests_calls_apart() {
    let files = [
        "ask.cjs",
        "one.test.cjs",
        "two.test.cjs",
        "three.test.cjs",
        "jest.config.cjs",
    ];
    let Some(dir) = project("jest_threads", &files) else {
        return;
    };
    let jest = dir.path().join("node_modules/jest/bin/jest.js");
    // The project's own cache: a run jest remembers as fast runs in band, in one thread.
    let cache = dir.path().join("jest-cache");
    let cache = format!("--cacheDirectory={}", cache.display());
    let command = node_command(&jest, &["--ci", "--silent", &cache]);
    let tests = [
        ("one.test.cjs > first", "First"),
        ("two.test.cjs > second asks", "Second"),
        ("three.test.cjs > third over node:http", "Third"),
    ];
    record_at_once_and_replay(dir.path(), &command, &tests, 3).await;
    let (missed, _) = run_keeping(
        dir.path(),
        &[],
        &command,
        &[("CI", "true"), ("SAMPLE_CHANGED", "1")],
    );
    assert_ne!(missed.code, Some(0), "{}", missed.stderr);
    let report = read_json(&dir.path().join("target/llmreplay/report.json"));
    let missing = report["missing"].as_array().unwrap();
    assert_eq!(missing.len(), 1, "{report}");
    assert_eq!(missing[0]["test"], tests[1].0, "{report}");

    // jest lists each file's tests: a deleted test's folder is an orphan, a skipped one's not.
    let one = dir.path().join("one.test.cjs");
    let skipped =
        std::fs::read_to_string(&one)
            .unwrap()
            .replacen("test(\"first\"", "test.skip(\"first\"", 1);
    assert!(skipped.contains("test.skip("));
    std::fs::write(&one, skipped).unwrap();
    let two = dir.path().join("two.test.cjs");
    let without =
        std::fs::read_to_string(&two)
            .unwrap()
            .replacen("test(\"asks\"", "test(\"asks anew\"", 1);
    std::fs::write(&two, without).unwrap();
    let (denied, _) = run_keeping(
        dir.path(),
        &["--deny", "unused"],
        &command,
        &[("CI", "true")],
    );
    assert_ne!(denied.code, Some(0), "{}", denied.stderr);
    let report = read_json(&dir.path().join("target/llmreplay/report.json"));
    let unused = report["unused"].to_string();
    let slug = |test: &str| {
        let folder = folder(dir.path(), test);
        folder.file_name().unwrap().to_string_lossy().into_owned()
    };
    assert!(unused.contains(&slug(tests[1].0)), "{report}");
    assert!(!unused.contains(&slug(tests[0].0)), "{report}");
    assert!(!unused.contains(&slug(tests[2].0)), "{report}");
}

/// `describe.concurrent`: two tests of one file call at once, one with fetch (the `openai` SDK),
/// the other over node:http; each call lands in its own test's folder, and replays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vitest_concurrent_tests_keep_their_fetch_and_http_calls_apart() {
    let files = ["ask.js", "concurrent.test.js", "vitest.config.mjs"];
    let Some(dir) = project("vitest_threads", &files) else {
        return;
    };
    let vitest = dir.path().join("node_modules/vitest/vitest.mjs");
    let command = node_command(&vitest, &["run", "--reporter=dot"]);
    let tests = [
        ("concurrent.test.js > at once > fetch", "Over fetch"),
        ("concurrent.test.js > at once > http", "Over node:http"),
    ];
    record_at_once_and_replay(dir.path(), &command, &tests, 2).await;
}

/// vitest lists each file's whole suite: a test deleted after recording leaves an orphaned
/// folder that `--deny unused` names, while the tests `-t` leaves out and a `.skip` test are
/// neither orphans nor unused, nor are the tests of a file whose tests are all skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_vitest_tests_folder_is_an_orphan_and_a_filtered_ones_is_not() {
    let Some((dir, vitest)) = vitest_project() else {
        return;
    };
    let twin = dir.path().join("twin.test.js");
    let node = crate::clients::node_clients().unwrap();
    std::fs::copy(node.join("vitest_suite/twin.test.js"), &twin).unwrap();
    let mut fake = FakeProvider::start().await;
    let flags = record_flags(&fake);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let run = |flags: &[&str], extra: &[&str]| {
        let mut args = vec!["run", "--reporter=dot"];
        args.extend(extra);
        let command = node_command(&vitest, &args);
        run_keeping(dir.path(), flags, &command, &[("CI", "true")])
    };
    let (recorded, _) = run_keeping(
        dir.path(),
        &flags,
        &node_command(&vitest, &["run", "--reporter=dot"]),
        KEYS,
    );
    succeeded(&recorded);
    fake.stop();
    let bye = folder(dir.path(), "chat.test.js > chat > bye");
    let top = folder(dir.path(), "chat.test.js > top level");
    assert!(bye.is_dir() && top.is_dir(), "{}", recorded.stderr);

    let (filtered, _) = run(&["--deny", "unused"], &["-t", "^chat > hello$"]);
    succeeded(&filtered);

    let file = dir.path().join("chat.test.js");
    let source = std::fs::read_to_string(&file).unwrap();
    let without_bye = source.replace(
        "  test(\"bye\", async () => {\n    keep(\"bye\", await ask(\"Bye\"));\n  });\n",
        "",
    );
    assert_ne!(without_bye, source, "the sample's bye test moved");
    // A skipped test is still the suite's: its folder is no orphan.
    let without_bye = without_bye.replacen("\ntest(\"top level\"", "\ntest.skip(\"top level\"", 1);
    assert!(without_bye.contains("test.skip(\"top level\""));
    std::fs::write(&file, without_bye).unwrap();
    // A file whose tests are all skipped runs no hook: it is listed all the same.
    let all_skipped = std::fs::read_to_string(&twin)
        .unwrap()
        .replace("\ntest(\"", "\ntest.skip(\"")
        .replace("  test(\"", "  test.skip(\"");
    assert_eq!(all_skipped.matches("test.skip(").count(), 3);
    std::fs::write(&twin, all_skipped).unwrap();
    let (denied, _) = run(&["--deny", "unused"], &[]);
    assert_ne!(denied.code, Some(0), "{}", denied.stderr);
    let slug = |folder: &Path| folder.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        denied.stderr.contains("orphaned folder"),
        "{}",
        denied.stderr
    );
    let report = read_json(&dir.path().join("target/llmreplay/report.json"));
    let unused = report["unused"].to_string();
    assert!(unused.contains(&slug(&bye)), "{report}");
    assert!(!unused.contains(&slug(&top)), "{report}");
    for test in [
        "twin.test.js > chat > hello",
        "twin.test.js > 挨拶する",
        "twin.test.js > Приветствие",
    ] {
        let twin = folder(dir.path(), test);
        assert!(twin.is_dir(), "{test}");
        assert!(!unused.contains(&slug(&twin)), "{test}: {report}");
    }
}

/// Two vitest tests whose ids would share a cassette folder: the daemon refuses the file's
/// listing, and the file fails with its message before either test calls anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vitest_tests_that_would_share_a_folder_fail_before_they_call() {
    let files = ["ask.js", "collide.test.js", "vitest.config.mjs"];
    let Some(dir) = project("vitest_threads", &files) else {
        return;
    };
    let same = |test: &str| folder(dir.path(), test);
    assert_eq!(
        same("collide.test.js > say hi"),
        same("collide.test.js > say-hi")
    );
    let vitest = dir.path().join("node_modules/vitest/vitest.mjs");
    let command = node_command(&vitest, &["run", "--reporter=dot"]);
    let fake = FakeProvider::start().await;
    let flags = record_flags(&fake);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let (refused, out) = run_keeping(dir.path(), &flags, &command, KEYS);
    assert_ne!(refused.code, Some(0), "{}", refused.stderr);
    let said = format!("{}{}", refused.stdout, refused.stderr);
    assert!(
        said.contains("tests whose ids share a cassette folder"),
        "{said}"
    );
    assert!(fake.received().is_empty());
    assert!(answers(&out).is_empty());
}

/// A host that is not the daemon (here 127.0.0.2, outside `NO_PROXY`'s loopback names, which
/// Node 20 reaches directly although `run` sets `NODE_USE_ENV_PROXY`) never sees a test's id:
/// not from fetch, not from node:http with an agent of its own or with the global one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_is_not_the_daemon_never_sees_a_tests_id() {
    let files = ["elsewhere.test.js", "vitest.config.mjs"];
    let Some(dir) = project("vitest_threads", &files) else {
        return;
    };
    // A plain HTTP server on 127.0.0.2 that answers 200 and keeps each request's head.
    let listener = tokio::net::TcpListener::bind("127.0.0.2:0").await.unwrap();
    let at = listener.local_addr().unwrap();
    let heads = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let kept = heads.clone();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let kept = kept.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                kept.lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&head).into_owned());
                let _ = socket
                    .write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                    )
                    .await;
            });
        }
    });
    let vitest = dir.path().join("node_modules/vitest/vitest.mjs");
    let command = node_command(&vitest, &["run", "--reporter=dot"]);
    let url = format!("http://{at}");
    let fake = FakeProvider::start().await;
    let flags = record_flags(&fake);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut env = KEYS.to_vec();
    env.push(("ELSEWHERE_URL", &url));
    let (out, _) = run_keeping(dir.path(), &flags, &command, &env);
    succeeded(&out);
    let heads = heads.lock().unwrap().clone();
    assert_eq!(heads.len(), 3, "{heads:?}");
    for head in &heads {
        assert!(
            !head.to_ascii_lowercase().contains("x-test-id"),
            "a test's id reached another host: {head}"
        );
    }
}
