//! The command line against hostile cassettes and broken files, its exit codes, and a reader
//! that goes away: markdown for PR comments that a cassette cannot break out of, terminal
//! output that control characters cannot drive, JSON whatever the file names hold.

use crate::support::{binary, FakeProvider, Output, Sample, Serve};
use serde_json::{json, Value};
use std::path::Path;

const INJECTION: &str = "`\n\n</details>\n\n## INJECTED [click](https://evil.example)";

/// A cassette as a pull request could bring it: every field a reviewer sees is hostile.
fn hostile_cassette(test: &str, path: &str, prompt: &str, answer: &str) -> String {
    serde_json::to_string_pretty(&json!({
        "llmreplay": 1,
        "test": test,
        "provider": "openai",
        "interactions": [{
            "key": "0".repeat(64),
            "request": {
                "method": "POST",
                "path": path,
                "body": {"model": "gpt-4o-mini\u{1b}[31m", "messages": [{"role": "user", "content": prompt}]}
            },
            "response": {
                "status": 200,
                "headers": {"content-type": "application/json"},
                "body": {"choices": [{"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}]}
            }
        }]
    }))
    .unwrap()
}

fn write(path: &Path, text: impl AsRef<[u8]>) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// What a markdown renderer makes of `text`: its headings, links and raw HTML.
fn rendered(text: &str) -> (Vec<String>, usize, Vec<String>) {
    use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};
    let (mut headings, mut links, mut html) = (Vec::new(), 0, Vec::new());
    let mut in_heading = None::<String>;
    for event in Parser::new_ext(text, Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH) {
        match event {
            Event::Start(Tag::Heading { .. }) => in_heading = Some(String::new()),
            Event::End(TagEnd::Heading(_)) => headings.extend(in_heading.take()),
            Event::Text(t) | Event::Code(t) => {
                if let Some(h) = in_heading.as_mut() {
                    h.push_str(&t);
                }
            }
            Event::Start(Tag::Link { .. }) | Event::Start(Tag::Image { .. }) => links += 1,
            Event::Html(h) | Event::InlineHtml(h) => html.push(h.to_string()),
            _ => {}
        }
    }
    (headings, links, html)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_cassettes_cannot_break_out_of_markdown_or_drive_the_terminal() {
    let sample = Sample::new();
    write(&sample.root.join("README"), "base\n");
    sample.commit_all();
    let test = "evil::t$x\u{1b}[2J</code></summary>\n\n# TAKEOVER";
    let prompt = "`` ``` </details>\n\n## PROMPT [p](https://evil.example)\u{1b}]0;title\u{7}";
    let answer = "line\n```\n</details>\n\n## ANSWER [a](https://evil.example)\n\u{1b}[2J";
    write(
        &sample.cassette("evil", "openai"),
        hostile_cassette(test, INJECTION, prompt, answer),
    );

    let md = sample.llmreplay(&["diff", "--base", "HEAD", "--format", "markdown"]);
    assert_eq!(md.code, Some(0), "{}", md.stderr);
    let (headings, links, html) = rendered(&md.stdout);
    assert_eq!(
        headings,
        ["cargo-llmreplay: recorded answers"],
        "{}",
        md.stdout
    );
    assert_eq!(links, 0, "{}", md.stdout);
    for h in &html {
        for tag in h.split('<').skip(1) {
            let name = tag.split(['>', ' ']).next().unwrap();
            assert!(
                ["details", "/details", "summary", "/summary", "code", "/code"].contains(&name),
                "a tag of the cassette's own is live: <{tag} in\n{}",
                md.stdout
            );
        }
    }
    assert!(!md.stdout.contains('\u{1b}'), "{}", md.stdout);
    // What was escaped is still there for the reviewer to read.
    assert!(md
        .stdout
        .contains("## INJECTED [click](https://evil.example)"));

    let text = sample.llmreplay(&["diff", "--base", "HEAD"]);
    assert_eq!(text.code, Some(0), "{}", text.stderr);
    assert!(!text.stdout.contains('\u{1b}'), "{:?}", text.stdout);
    assert!(!text.stdout.contains('\u{7}'), "{:?}", text.stdout);
    assert!(text.stdout.contains("\\u{1b}[2J"), "{}", text.stdout);

    let status = sample.llmreplay(&["status", "--no-list"]);
    assert!(!status.stderr.contains('\u{1b}'), "{:?}", status.stderr);
    assert!(
        status.stderr.contains("evil/openai.json"),
        "{}",
        status.stderr
    );

    // A test id with control characters, through the daemon's summary.
    let dir = tempfile::tempdir().unwrap();
    let serve = Serve::replaying(dir.path());
    let url = format!(
        "{}/t/a%1B%5B2Jb/openai/v1/chat/completions",
        serve.for_test("x").split("/t/").next().unwrap()
    );
    let r = crate::support::http()
        .post(&url)
        .json(&json!({"model": "m", "messages": [{"role": "user", "content": "hi\u{1b}[2J"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let stopped = serve.stop();
    assert!(
        stopped.stderr.contains("missing: a\\u{1b}[2Jb"),
        "{}",
        stopped.stderr
    );
    assert!(!stopped.stderr.contains('\u{1b}'), "{:?}", stopped.stderr);
}

#[cfg(unix)]
#[test]
fn non_utf8_names_and_files_are_listed_as_broken_not_panicked_on() {
    use std::os::unix::ffi::OsStrExt;
    let sample = Sample::new();
    write(&sample.root.join("README"), "base\n");
    sample.commit_all();
    let cassettes = sample.root.join("tests/cassettes");
    let odd = cassettes.join(std::ffi::OsStr::from_bytes(b"bad\xffname"));
    write(
        &odd.join("openai.json"),
        hostile_cassette("x::y$z", "/v1/chat/completions", "hi", "hello"),
    );
    let mut not_text = br#"{"llmreplay": 1, "test": ""#.to_vec();
    not_text.extend_from_slice(b"\xff\xfe");
    not_text.extend_from_slice(br#"", "provider": "openai", "interactions": []}"#);
    write(&cassettes.join("latin/openai.json"), &not_text);

    let status = sample.llmreplay(&["status", "--no-list", "--json"]);
    assert_eq!(status.code, Some(0), "{}", status.stderr);
    let parsed: Value = serde_json::from_str(&status.stdout).unwrap();
    let problems = parsed["problems"].as_array().unwrap();
    let latin = problems
        .iter()
        .find(|p| p["path"].as_str().unwrap().ends_with("latin/openai.json"))
        .unwrap_or_else(|| panic!("{}", status.stdout));
    assert_eq!(latin["problem"], "corrupt");
    assert!(latin["message"].as_str().unwrap().contains("not UTF-8"));
    assert!(
        status.stdout.contains("bad\u{fffd}name"),
        "the odd folder is named, its bad byte shown as U+FFFD: {}",
        status.stdout
    );
    let check = sample.llmreplay(&["status", "--no-list", "--check"]);
    assert_eq!(check.code, Some(1), "{}", check.stderr);
    assert!(check.stderr.contains("not UTF-8"), "{}", check.stderr);

    let diff = sample.llmreplay(&["diff", "--base", "HEAD", "--format", "json"]);
    assert_eq!(diff.code, Some(0), "{}", diff.stderr);
    let parsed: Value = serde_json::from_str(&diff.stdout).unwrap();
    let files = parsed["files"].as_array().unwrap();
    assert_eq!(files.len(), 2, "{}", diff.stdout);
    let broken = files
        .iter()
        .find(|f| f["path"].as_str().unwrap().contains("latin"))
        .unwrap();
    assert!(broken["error"].as_str().unwrap().contains("not UTF-8"));
    let text = sample.llmreplay(&["diff", "--base", "HEAD"]);
    assert_eq!(text.code, Some(0), "{}", text.stderr);
    assert!(text.stdout.contains("not UTF-8"), "{}", text.stdout);
}

/// A reader that is gone before anything is written: the output is dropped, not a panic.
#[test]
fn a_closed_stdout_is_not_an_error() {
    let sample = Sample::new();
    write(&sample.root.join("README"), "base\n");
    sample.commit_all();
    write(
        &sample.cassette("t", "openai"),
        hostile_cassette(
            "a::b$c",
            "/v1/chat/completions",
            "hi",
            &"long answer\n".repeat(20_000),
        ),
    );
    for args in [
        &["diff", "--base", "HEAD"][..],
        &["status", "--no-list", "--json"],
    ] {
        let mut child = sample
            .command(crate::support::binary())
            .arg("llmreplay")
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

/// Every status of README's table, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_exit_code_of_the_table() {
    let fake = FakeProvider::start().await;
    let sample = Sample::new();
    sample.record_all(&fake);
    sample.commit_all();

    // 0: all well, and `cargo llmreplay test | head -1` ends cleanly.
    let piped = sample
        .command("bash")
        .args([
            "-c",
            &format!(
                "set -o pipefail; {} llmreplay test -E 'test(=answers_hello)' | head -1",
                crate::support::binary().display()
            ),
        ])
        .env("CI", "true")
        .output()
        .unwrap();
    assert_eq!(
        piped.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&piped.stderr)
    );

    // 1: a gate failed.
    std::fs::remove_file(sample.cassette("sample--chat--answers_hello", "openai")).unwrap();
    let changed = sample.llmreplay(&["diff", "--base", "HEAD", "--exit-code"]);
    assert_eq!(changed.code, Some(1), "{}", changed.stderr);

    // nextest's own: a test failed (its recording is gone, and CI replays only).
    let failed = sample.run(&["-E", "test(=answers_hello)"], &[("CI", "true")]);
    assert_eq!(
        failed.code,
        Some(nextest_metadata::NextestExitCode::TEST_RUN_FAILED),
        "{}",
        failed.stderr
    );

    // 2: usage, configuration and input errors.
    let bad_flag = sample.llmreplay(&["status", "--no-such-flag"]);
    assert_eq!(bad_flag.code, Some(2), "{}", bad_flag.stderr);
    let bad_mode = sample.llmreplay(&["serve", "--mode", "sometimes"]);
    assert_eq!(bad_mode.code, Some(2), "{}", bad_mode.stderr);
    assert!(
        bad_mode.stderr.contains("unknown mode"),
        "{}",
        bad_mode.stderr
    );
    let no_report = sample.llmreplay(&["prune", "--report", "nowhere.json"]);
    assert_eq!(no_report.code, Some(2), "{}", no_report.stderr);
    assert!(
        no_report
            .stderr
            .contains("cannot read the report nowhere.json"),
        "{}",
        no_report.stderr
    );
    write(&sample.root.join("llmreplay.toml"), "cassette_dir = [\n");
    let bad_toml = sample.llmreplay(&["status", "--no-list"]);
    assert_eq!(bad_toml.code, Some(2), "{}", bad_toml.stderr);
    assert!(
        bad_toml.stderr.contains("llmreplay.toml"),
        "{}",
        bad_toml.stderr
    );
}

/// `test`'s own flags come from its clap definition; nothing of ours reaches nextest, and
/// `--mode` works there as in `serve`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_takes_mode_like_serve_and_passes_the_rest_to_nextest() {
    let fake = FakeProvider::start().await;
    let sample = Sample::new();
    let mut args: Vec<String> = ["--mode", "record-missing", "-E", "test(=answers_hello)"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.extend(crate::support::upstream_args(&fake));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = sample.run(&args, &[]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(run.report["mode"], "record-missing");
    assert_eq!(run.report["counts"]["recorded"], 1, "{}", run.stderr);
    let replay = sample.run(
        &["-E", "test(=answers_hello)"],
        &[("LLMREPLAY_MODE", "replay")],
    );
    assert_eq!(replay.code, Some(0), "{}", replay.stderr);
    assert_eq!(replay.report["counts"]["hits"], 1);
}

/// Started as `cargo-llmreplay` (as the pip and npm packages start it), every command it
/// prints, in its messages and its help, begins with `cargo-llmreplay`, which works where
/// there is no cargo; started by cargo, with `cargo llmreplay`.
#[test]
fn messages_and_help_name_the_program_as_it_was_started() {
    let sample = Sample::new();
    let direct = |args: &[&str]| Output::of(sample.command(binary()).args(args));
    // A message of the command line's own (a report that is not there), and one clap prints.
    let none = sample.scratch().join("no-report.json");
    let none = none.to_str().unwrap();
    let prune = direct(&["prune", "--report", none]);
    assert_eq!(prune.code, Some(2), "{}", prune.stderr);
    assert!(
        prune.stderr.contains("Run cargo-llmreplay test first"),
        "{}",
        prune.stderr
    );
    let unknown = direct(&["status", "--no-such-flag"]);
    assert!(
        unknown.stderr.contains("Usage: cargo-llmreplay status"),
        "{}",
        unknown.stderr
    );
    for args in [
        &["--help"][..],
        &["test", "--help"],
        &["rerun", "--help"],
        &["prune", "--help"],
    ] {
        let help = direct(args);
        assert_eq!(help.code, Some(0), "{args:?}: {}", help.stderr);
        assert!(
            help.stdout.contains("cargo-llmreplay"),
            "{args:?}: {}",
            help.stdout
        );
        assert!(
            !help.stdout.contains("cargo llmreplay"),
            "{args:?} names a command cargo would run: {}",
            help.stdout
        );
    }
    let test_help = direct(&["test", "--help"]).stdout;
    assert!(
        test_help.contains("Usage: cargo-llmreplay test [OPTIONS]"),
        "{test_help}"
    );
    assert!(
        test_help.contains("  cargo-llmreplay test --record-missing"),
        "{test_help}"
    );

    // Through cargo, as `cargo llmreplay`.
    let via_cargo = sample.llmreplay(&["prune", "--report", none]);
    assert!(
        via_cargo.stderr.contains("Run cargo llmreplay test first"),
        "{}",
        via_cargo.stderr
    );
    let help = sample.llmreplay(&["test", "--help"]).stdout;
    assert!(
        help.contains("Usage: cargo llmreplay test [OPTIONS]"),
        "{help}"
    );
}
