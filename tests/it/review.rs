//! End-to-end tests of the review workflow: `status`, `diff`, `prune` and `report merge`, run
//! as the real binary on a sample workspace in a temp git repository, after real
//! `cargo llmreplay test` runs against the loopback fake provider.

use crate::support::{
    all_files, edit_sample_tests, prompts, read_json, refs, FakeProvider, Sample,
};
use serde_json::Value;
use std::path::Path;

/// Records every test of the sample and commits the cassettes.
fn record_and_commit(sample: &Sample, fake: &FakeProvider) {
    let args = upstreams(fake, &["--record", "--retries", "1"]);
    let run = sample.run(&refs(&args), &[]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    sample.commit_all();
}

/// `args` and the flags that send OpenAI and Anthropic requests to the fake provider.
fn upstreams(fake: &FakeProvider, args: &[&str]) -> Vec<String> {
    let mut out: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    for provider in ["openai", "anthropic"] {
        out.push("--upstream".into());
        out.push(format!("{provider}={}", fake.url()));
    }
    out
}

/// An orphan: a copy of a real cassette in a folder no test has.
fn add_orphan(sample: &Sample) {
    let orphan = sample
        .root
        .join("tests/cassettes/sample--chat--renamed_away");
    std::fs::create_dir_all(&orphan).unwrap();
    std::fs::copy(
        sample.cassette("sample--chat--answers_hello", "openai"),
        orphan.join("openai.json"),
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn diff_shows_a_changed_answer_a_drifted_prompt_and_added_and_deleted_cassettes_and_prune_removes_exactly_the_unused(
) {
    let fake = FakeProvider::start().await;
    let sample = Sample::new();
    sample.own_build("0.1.1-review");
    record_and_commit(&sample, &fake);

    // A prompt drifts and a test is added.
    edit_sample_tests(&sample, |t| {
        t.replace("\"Plain\"", "\"Plainly\"") + "\n#[test]\nfn new_question() {\n    assert!(ask_openai(&openai_base(), \"Brand new\").starts_with(\"You said\"));\n}\n"
    });
    // The provider changes its mind about one answer, which is re-recorded.
    *fake.state.suffix.lock().unwrap() = " (v2)".into();
    let args = upstreams(&fake, &["--record", "-E", "test(=answers_hello)"]);
    let run = sample.run(&refs(&args), &[]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    fake.state.suffix.lock().unwrap().clear();
    let args = upstreams(&fake, &["--record-missing", "--retries", "1"]);
    let run = sample.run(&refs(&args), &[]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    add_orphan(&sample);

    // A filtered run cannot say what is unused.
    let filtered = sample.run(&["-E", "test(=answers_hello)"], &[("CI", "true")]);
    assert_eq!(filtered.code, Some(0), "{}", filtered.stderr);
    let refused = sample.llmreplay(&["prune", "--report", filtered.report_path.to_str().unwrap()]);
    assert_eq!(refused.code, Some(2), "{}", refused.stderr);
    assert!(
        refused.stderr.contains("filtered run"),
        "{}",
        refused.stderr
    );

    let full = sample.run(&["--retries", "1"], &[("CI", "true")]);
    assert_eq!(full.code, Some(0), "{}", full.stderr);
    let unused = full.report["unused"].as_array().unwrap();
    assert_eq!(
        unused.len(),
        2,
        "the old Plain recording and the orphan: {unused:#?}"
    );
    let report = full.report_path.to_str().unwrap();

    let files = || {
        let mut f = all_files(&sample.root.join("tests/cassettes"));
        f.sort();
        f
    };
    let before = files();
    let dry = sample.llmreplay(&["prune", "--dry-run", "--report", report]);
    assert_eq!(dry.code, Some(0), "{}", dry.stderr);
    assert!(dry.stderr.contains("would remove 1 recording from tests/cassettes/sample--chat--plain_cargo_test/openai.json"), "{}", dry.stderr);
    assert!(
        dry.stderr
            .contains("would remove tests/cassettes/sample--chat--renamed_away/"),
        "{}",
        dry.stderr
    );
    assert_eq!(files(), before, "a dry run removes nothing");

    let pruned = sample.llmreplay(&["prune", "--report", report]);
    assert_eq!(pruned.code, Some(0), "{}", pruned.stderr);
    let after = files();
    let plain = sample.cassette("sample--chat--plain_cargo_test", "openai");
    assert_eq!(
        prompts(&read_json(&plain)),
        ["Plainly"],
        "only the unused recording went"
    );
    let untouched = |files: &[(std::path::PathBuf, String)]| -> Vec<(std::path::PathBuf, String)> {
        files
            .iter()
            .filter(|(p, _)| {
                let p = p.to_string_lossy();
                !p.contains("sample--chat--plain_cargo_test")
                    && !p.contains("sample--chat--renamed_away")
            })
            .cloned()
            .collect()
    };
    assert_eq!(
        untouched(&after),
        untouched(&before),
        "every other file is byte for byte the same"
    );
    assert!(!sample
        .root
        .join("tests/cassettes/sample--chat--renamed_away")
        .exists());
    // The report is now older than the cassettes.
    let stale = sample.llmreplay(&["prune", "--report", report]);
    assert_eq!(stale.code, Some(2));
    assert!(stale.stderr.contains("changed after"), "{}", stale.stderr);

    // A deleted test's cassette.
    std::fs::remove_dir_all(
        sample
            .root
            .join("tests/cassettes/sample--chat--asks_claude"),
    )
    .unwrap();

    let json = sample.llmreplay(&["diff", "--format", "json", "--base", "HEAD"]);
    assert_eq!(json.code, Some(0), "{}", json.stderr);
    let diff: Value = serde_json::from_str(&json.stdout).unwrap();
    let files: Vec<(&str, &str)> = diff["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["test"].as_str().unwrap(), f["kind"].as_str().unwrap()))
        .collect();
    assert_eq!(
        files,
        [
            ("sample::chat$answers_hello", "modified"),
            ("sample::chat$asks_claude", "deleted"),
            ("sample::chat$new_question", "new"),
            ("sample::chat$plain_cargo_test", "modified"),
        ]
    );
    let one = |i: usize| &diff["files"][i]["interactions"];
    assert_eq!(one(0).as_array().unwrap().len(), 1);
    assert_eq!(one(0)[0]["change"], "changed");
    assert_eq!(
        one(0)[0]["answer_diff"],
        "-You said: Hello\n+You said: Hello (v2)\n"
    );
    assert_eq!(one(0)[0]["tokens_before"]["output"], 3);
    assert_eq!(one(0)[0]["tokens_after"]["output"], 4);
    assert!(
        one(0)[0].get("request_fields").is_none(),
        "the same request"
    );
    assert_eq!(one(1)[0]["change"], "removed");
    assert_eq!(one(2)[0]["change"], "added");
    assert_eq!(one(2)[0]["answer_after"], "You said: Brand new");
    assert_eq!(one(3)[0]["change"], "changed");
    assert_eq!(
        one(3)[0]["request_fields"],
        serde_json::json!(["/body/messages/0/content"])
    );
    assert_eq!(one(3)[0]["prompt_before"], "Plain");
    assert_eq!(one(3)[0]["prompt"], "Plainly");
    assert_eq!(
        diff["counts"],
        serde_json::json!({"tests": 4, "files": 4, "added": 1, "removed": 1, "changed": 2, "answers_changed": 2, "drift": {"wording": 2}})
    );

    let text = sample.llmreplay(&["diff", "--base", "HEAD"]);
    assert_eq!(text.code, Some(0), "{}", text.stderr);
    // Where each test is written, found in the sample's sources.
    assert!(
        text.stdout
            .contains("sample::chat$answers_hello\n  source: tests/chat.rs:14\n"),
        "{}",
        text.stdout
    );
    for line in [
        "4 tests: 2 wording, 1 added, 1 removed",
        "  changed POST /v1/chat/completions, model gpt-4o-mini [wording]\n    prompt: \"Hello\"\n    answer, word by word ([-removed-] {+added+}):\n      You said: Hello{+ (v2)+}\n",
        "    prompt: \"Plain\" -> \"Plainly\"\n    request fields changed: /body/messages/0/content\n",
        "tests/cassettes/sample--chat--asks_claude/anthropic.json (deleted): 1 removed",
    ] {
        assert!(text.stdout.contains(line), "{line:?} in:\n{}", text.stdout);
    }
    // Only one test's folder.
    let only = sample.llmreplay(&[
        "diff",
        "--base",
        "HEAD",
        "--format",
        "json",
        "tests/cassettes/sample--chat--new_question",
    ]);
    let only: Value = serde_json::from_str(&only.stdout).unwrap();
    assert_eq!(only["files"].as_array().unwrap().len(), 1);

    let markdown = sample.llmreplay(&["diff", "--base", "HEAD", "--format", "markdown"]);
    assert_eq!(markdown.code, Some(0), "{}", markdown.stderr);
    let commit = regex::Regex::new(r"HEAD \([0-9a-f]{8}\)").unwrap();
    insta::assert_snapshot!(commit.replace_all(&markdown.stdout, "HEAD (<commit>)"));

    // Once committed, nothing differs.
    sample.commit_all();
    let clean = sample.llmreplay(&["diff", "--exit-code"]);
    assert_eq!(clean.code, Some(0), "{}", clean.stdout);
    assert!(
        clean
            .stdout
            .starts_with("No cassette changed against merge base of HEAD and "),
        "{}",
        clean.stdout
    );
}

/// A provider that points a model alias at a new snapshot changes only what describes the
/// answer: `diff` calls that metadata, never wording.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_model_snapshot_is_metadata_not_wording() {
    let fake = FakeProvider::start().await;
    let sample = Sample::new();
    record_and_commit(&sample, &fake);
    *fake.state.answer_model.lock().unwrap() = Some("gpt-4o-mini-2025-01-01".into());
    let args = upstreams(&fake, &["--record", "-E", "test(=answers_hello)"]);
    let run = sample.run(&refs(&args), &[]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let json = sample.llmreplay(&["diff", "--format", "json", "--base", "HEAD"]);
    assert_eq!(json.code, Some(0), "{}", json.stderr);
    let diff: Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(diff["counts"]["drift"], serde_json::json!({"metadata": 1}));
    let text = sample.llmreplay(&["diff", "--base", "HEAD"]);
    assert!(text.stdout.contains("1 metadata only"), "{}", text.stdout);
    assert!(text.stdout.contains("[metadata]"), "{}", text.stdout);
    assert!(!text.stdout.contains("wording"), "{}", text.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_check_fails_on_an_orphan_and_on_a_corrupt_file() {
    let fake = FakeProvider::start().await;
    let sample = Sample::new();
    record_and_commit(&sample, &fake);
    let clean = sample.llmreplay(&["status", "--check"]);
    assert_eq!(clean.code, Some(0), "{}", clean.stderr);
    assert!(clean.stderr.contains("are clean"), "{}", clean.stderr);

    add_orphan(&sample);
    sample.commit_all();
    let orphan = sample.llmreplay(&["status", "--check"]);
    assert_eq!(orphan.code, Some(1), "{}", orphan.stderr);
    assert!(
        orphan
            .stderr
            .contains("tests/cassettes/sample--chat--renamed_away/  no test"),
        "{}",
        orphan.stderr
    );
    assert!(
        orphan.stderr.contains(
            "`cargo llmreplay mv OLD NEW`; a deleted test's go with `cargo llmreplay prune`"
        ),
        "the fixes named: {}",
        orphan.stderr
    );
    let json = sample.llmreplay(&["status", "--json"]);
    assert_eq!(json.code, Some(0), "without --check it only reports");
    let status: Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(
        status["orphans"],
        serde_json::json!(["sample--chat--renamed_away"])
    );
    std::fs::remove_dir_all(
        sample
            .root
            .join("tests/cassettes/sample--chat--renamed_away"),
    )
    .unwrap();
    sample.commit_all();

    let cassette = sample.cassette("sample--chat--answers_twice", "openai");
    let text = std::fs::read_to_string(&cassette).unwrap();
    std::fs::write(
        &cassette,
        text.replacen("\"interactions\": [", "\"interactions\": [,", 1),
    )
    .unwrap();
    let corrupt = sample.llmreplay(&["status", "--check", "--no-list"]);
    assert_eq!(corrupt.code, Some(1), "{}", corrupt.stderr);
    assert!(
        corrupt
            .stderr
            .contains("sample--chat--answers_twice/openai.json:5:"),
        "names file and line: {}",
        corrupt.stderr
    );
    assert!(
        corrupt
            .stderr
            .contains("modified  tests/cassettes/sample--chat--answers_twice/openai.json"),
        "{}",
        corrupt.stderr
    );

    // A hand edit of an answer (its summary left behind too): one finding, one remedy.
    std::fs::write(&cassette, &text).unwrap();
    let edited = text.replacen("You said: First", "You said: Fist", 1);
    assert_ne!(edited, text);
    std::fs::write(&cassette, &edited).unwrap();
    let mismatch = sample.llmreplay(&["status", "--check", "--no-list"]);
    assert_eq!(mismatch.code, Some(1), "{}", mismatch.stderr);
    assert!(
        mismatch
            .stderr
            .contains("its answer no longer matches its seal"),
        "{}",
        mismatch.stderr
    );
    assert_eq!(
        mismatch
            .stderr
            .matches("cargo llmreplay status --fix")
            .count(),
        1,
        "one remedy: {}",
        mismatch.stderr
    );
    // Only the summary edited: derived anew by the same command.
    let summary_only = {
        let at = text.rfind("You said: First").unwrap();
        format!(
            "{}You said: Fist{}",
            &text[..at],
            &text[at + "You said: First".len()..]
        )
    };
    std::fs::write(&cassette, summary_only).unwrap();
    let stale = sample.llmreplay(&["status", "--check", "--no-list"]);
    assert_eq!(stale.code, Some(1), "{}", stale.stderr);
    assert!(
        stale
            .stderr
            .contains("its summary does not match its answer (edited by hand?); run `cargo llmreplay status --fix`"),
        "{}",
        stale.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merged_partition_reports_find_an_orphan_neither_partition_could() {
    let fake = FakeProvider::start().await;
    let sample = Sample::new();
    record_and_commit(&sample, &fake);
    add_orphan(&sample);
    let summary = sample.scratch().join("step-summary.md");
    let shard = |m: &str| {
        let env = [
            ("CI", "true"),
            ("GITHUB_STEP_SUMMARY", summary.to_str().unwrap()),
        ];
        let run = sample.run(&["--retries", "1", "--partition", m], &env);
        assert_eq!(run.code, Some(0), "{}", run.stderr);
        assert!(
            run.report["unused"].as_array().unwrap().is_empty(),
            "a partition alone judges no folder: {}",
            run.report
        );
        run
    };
    let (a, b) = (shard("slice:1/2"), shard("slice:2/2"));
    let written = std::fs::read_to_string(&summary).unwrap();
    assert_eq!(
        written.matches("### cargo-llmreplay").count(),
        2,
        "each shard appends its summary for GitHub: {written}"
    );
    let merged_path = sample.scratch().join("merged.json");
    let merge = |reports: &[&Path]| {
        let mut args = vec!["report", "merge", "-o", merged_path.to_str().unwrap()];
        args.extend(reports.iter().map(|p| p.to_str().unwrap()));
        sample.llmreplay(&args)
    };
    let out = merge(&[&a.report_path, &b.report_path]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let merged = read_json(&merged_path);
    let folders: Vec<&str> = merged["unused"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|u| u["kind"] == "folder")
        .map(|u| u["folder"].as_str().unwrap())
        .collect();
    assert_eq!(folders.len(), 1, "{merged}");
    assert!(
        folders[0].ends_with("sample--chat--renamed_away"),
        "{folders:?}"
    );
    assert_eq!(
        merged["counts"]["hits"],
        a.report["counts"]["hits"].as_u64().unwrap() + b.report["counts"]["hits"].as_u64().unwrap()
    );
    assert_eq!(merged["counts"]["hits"], 7);
    assert_eq!(
        merged["merged"],
        serde_json::json!(["slice:1/2", "slice:2/2"])
    );
    assert!(merged["scope"]["partition"].is_null());
    // The merged report is one prune trusts, even written on other machines (as CI shards
    // are): its paths are rebased on this checkout's cassette folder.
    let root = sample.root.display().to_string();
    let elsewhere = std::fs::read_to_string(&merged_path)
        .unwrap()
        .replace(&root, "/home/runner/work/sample");
    assert!(
        elsewhere.contains("/home/runner/work/sample/tests/cassettes/sample--chat--renamed_away")
    );
    let elsewhere_path = sample.scratch().join("merged-elsewhere.json");
    std::fs::write(&elsewhere_path, elsewhere).unwrap();
    let pruned = sample.llmreplay(&["prune", "--report", elsewhere_path.to_str().unwrap()]);
    assert_eq!(pruned.code, Some(0), "{}", pruned.stderr);
    assert!(!sample
        .root
        .join("tests/cassettes/sample--chat--renamed_away")
        .exists());

    // One partition's report alone is not.
    let out = merge(&[&a.report_path]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let refused = sample.llmreplay(&["prune", "--report", merged_path.to_str().unwrap()]);
    assert_eq!(refused.code, Some(2));
    assert!(
        refused.stderr.contains("partitioned run (slice:1/2)"),
        "{}",
        refused.stderr
    );
}
