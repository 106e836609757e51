//! How fresh recordings are: each carries its recorded date; `--deny stale=AGE` fails a run (and
//! `report merge`) on the tests whose recordings are older, naming each with its age, and
//! `status --stale AGE` lists their folders.

use crate::runners::{record_flags, run_keeping, succeeded, KEYS};
use crate::support::{binary, read_json, sdk_python, FakeProvider, Output};
use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;

/// Sets every recording's date in `file` to `date`, as if recorded then.
fn back_date(file: &Path, date: &str) {
    let mut cassette = read_json(file);
    for i in cassette["interactions"].as_array_mut().unwrap() {
        assert!(i["recorded_at"].is_string(), "a date was recorded: {i}");
        i["recorded_at"] = date.into();
    }
    std::fs::write(file, serde_json::to_string_pretty(&cassette).unwrap()).unwrap();
}

fn llmreplay(dir: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(binary());
    cmd.current_dir(dir)
        .arg("llmreplay")
        .args(args)
        .env_remove("CI");
    Output::of(&mut cmd)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recordings_older_than_the_gate_fail_it_by_name_and_age() {
    let Some(python) = sdk_python("pytest_llmreplay") else {
        return;
    };
    let fake = FakeProvider::start().await;
    let dir = tempfile::tempdir().unwrap();
    let suite = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/sdk/pytest_suite");
    std::fs::copy(suite.join("test_chat.py"), dir.path().join("test_chat.py")).unwrap();
    let mut command: Vec<&OsStr> = vec![python.as_os_str()];
    command.extend(["-m", "pytest", "-q", "-p", "no:cacheprovider"].map(OsStr::new));
    let flags = record_flags(&fake);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let (recorded, _) = run_keeping(dir.path(), &flags, &command, KEYS);
    succeeded(&recorded);

    // One test's recordings are 60 days old; the others were made just now.
    let sixty_days_ago = humantime::format_rfc3339_seconds(
        std::time::SystemTime::now() - std::time::Duration::from_secs(60 * 86_400 + 3600),
    )
    .to_string();
    let cassettes = dir.path().join("tests/cassettes");
    back_date(
        &cassettes.join("test_chat-py--test_hello/openai.json"),
        &sixty_days_ago,
    );

    let gate = ["--deny", "stale=30d"];
    let (replayed, _) = run_keeping(dir.path(), &gate, &command, &[("CI", "true")]);
    assert_eq!(replayed.code, Some(1), "{}", replayed.stderr);
    assert!(
        replayed.stderr.contains(
            "--deny stale=30days: 1 test with recordings neither recorded nor verified since: test_chat.py::test_hello (60 days old)"
        ),
        "{}",
        replayed.stderr
    );
    let report_path = dir.path().join("target/llmreplay/report.json");
    let report = read_json(&report_path);
    assert_eq!(
        report["fresh"]["test_chat.py::test_hello"],
        sixty_days_ago.as_str()
    );
    assert_eq!(
        report["fresh"].as_object().unwrap().len(),
        3,
        "{}",
        report["fresh"]
    );
    let (within, _) = run_keeping(
        dir.path(),
        &["--deny", "stale=90d"],
        &command,
        &[("CI", "true")],
    );
    succeeded(&within);

    // The gate judges a merged report the same way.
    let merged = dir.path().join("merged.json");
    let merge = llmreplay(
        dir.path(),
        &[
            "report",
            "merge",
            "--deny",
            "stale=30d",
            "-o",
            merged.to_str().unwrap(),
            report_path.to_str().unwrap(),
        ],
    );
    assert_eq!(merge.code, Some(1), "{}", merge.stderr);
    assert!(
        merge
            .stderr
            .contains("test_chat.py::test_hello (60 days old)"),
        "{}",
        merge.stderr
    );

    // `status --stale` lists the folder without running anything; --check fails on it.
    let status = llmreplay(dir.path(), &["status", "--stale", "30d", "--check"]);
    assert_eq!(status.code, Some(1), "{}", status.stderr);
    assert!(
        status
            .stderr
            .contains("stale (1): neither recorded nor verified since")
            && status
                .stderr
                .contains("tests/cassettes/test_chat-py--test_hello/  60 days old"),
        "{}",
        status.stderr
    );
    let bad = llmreplay(dir.path(), &["status", "--stale", "soon"]);
    assert_eq!(bad.code, Some(2), "{}", bad.stderr);
    assert!(bad.stderr.contains("write it as 30d"), "{}", bad.stderr);
}
