//! The changed-prompt loop outside Rust: `cargo llmreplay run -i -- pytest` walks a missed
//! test in a terminal, records that one test alone in pytest, and reviews what it recorded.

use crate::support::{sdk_python, upstream_args, FakeProvider};
use crate::workflow::{shell_llmreplay, staged_and_unstaged, Tmux};
use std::path::Path;
use std::process::Command;

/// What a developer records with; replay needs none.
const KEYS: &[(&str, &str)] = &[
    ("OPENAI_API_KEY", "sk-test-not-real"),
    ("ANTHROPIC_API_KEY", "sk-ant-test-not-real"),
];

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .current_dir(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_i_records_a_missed_pytest_test_alone_and_stages_it() {
    let Some(python) = sdk_python("pytest_llmreplay") else {
        return;
    };
    let fake = FakeProvider::start().await;
    let dir = tempfile::tempdir().unwrap();
    let suite = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/sdk/pytest_suite");
    std::fs::copy(suite.join("test_chat.py"), dir.path().join("test_chat.py")).unwrap();
    let upstreams: Vec<String> = upstream_args(&fake)
        .iter()
        .map(|a| format!("'{a}'"))
        .collect();
    let pytest = format!("'{}' -m pytest -q -p no:cacheprovider", python.display());
    let mut env: Vec<(&str, &str)> = KEYS.to_vec();
    let record = format!(
        "{} --record {} -- {pytest}",
        shell_llmreplay(dir.path(), &env, "run"),
        upstreams.join(" ")
    );
    let recorded = Command::new("sh").args(["-c", &record]).output().unwrap();
    assert!(recorded.status.success(), "{recorded:?}");
    git(dir.path(), &["init", "-q"]);
    git(dir.path(), &["add", "."]);
    git(dir.path(), &["commit", "-q", "-m", "recorded"]);
    let sent = fake.received().len();

    // The prompt of one test changes: `run -i` walks its miss, records it alone, reviews it.
    env.push(("SAMPLE_CHANGED", "1"));
    let command = format!(
        "{} -i {} -- {pytest}; echo \"run exited $?\"; read done",
        shell_llmreplay(dir.path(), &env, "run"),
        upstreams.join(" ")
    );
    let Some(tmux) = Tmux::start(&command) else {
        return;
    };
    let walk = tmux.wait_for("missed test 1 of 1");
    assert!(walk.contains("test_chat.py::test_hello"), "{walk}");
    assert!(walk.contains("\"Hello\" -> \"Hello again\""), "{walk}");
    tmux.keys("r");
    let review = tmux.wait_for("review: 1 of 1");
    assert!(review.contains("Hello again"), "the new answer: {review}");
    tmux.keys("a");
    let end = tmux.wait_for("run exited");
    assert!(end.contains("1 accepted, 0 rejected, 0 skipped"), "{end}");
    drop(tmux);

    // That test alone went upstream, once.
    let again = &fake.received()[sent..];
    assert_eq!(again.len(), 1, "{again:?}");
    assert_eq!(again[0].body["messages"][0]["content"], "Hello again");
    let (cached, unstaged) = staged_and_unstaged(dir.path());
    assert_eq!(
        cached,
        ["tests/cassettes/test_chat-py--test_hello/openai.json"],
        "the new recording is staged"
    );
    assert!(
        !unstaged.iter().any(|p| p.contains("cassettes")),
        "nothing left to review: {unstaged:?}"
    );
}
