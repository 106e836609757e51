//! End-to-end tests of the snapshot workflow: a test recorded again owns exactly what it did,
//! a renamed test keeps its recordings, `review` walks the changes in a real terminal (tmux)
//! and its twins do the same for scripts, and our flags are checked before nextest sees them.
//! Real `cargo llmreplay test` runs with real nextest on sample workspaces, in real git.

use crate::support::{
    binary, edit_sample_tests, prompts, read_json, refs, upstream_args, FakeProvider, Output,
    Sample,
};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// `args` and the flags that send OpenAI and Anthropic requests to the fake provider.
fn with_upstreams(fake: &FakeProvider, args: &[&str]) -> Vec<String> {
    let mut out: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    out.extend(upstream_args(fake));
    out
}

/// The file at `path` in HEAD, as bytes.
fn at_head(root: &Path, path: &Path) -> Option<Vec<u8>> {
    let repo = git2::Repository::open(root).unwrap();
    let tree = repo.head().ok()?.peel_to_tree().ok()?;
    let rel = path.strip_prefix(root).unwrap();
    let blob = tree
        .get_path(rel)
        .ok()?
        .to_object(&repo)
        .ok()?
        .peel_to_blob()
        .ok()?;
    Some(blob.content().to_vec())
}

/// Two prompts changed on purpose: the summary leads each miss with the command that replaces
/// its old recording, and ends with one command for both, which, pasted, records them and
/// leaves nothing stale.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_misses_end_with_one_command_that_records_them_all() {
    let fake = FakeProvider::start().await;
    let sample = Sample::new();
    sample.own_build("0.1.1-record-all");
    sample.record_all(&fake);
    sample.commit_all();
    edit_sample_tests(&sample, |t| {
        t.replace("\"Hello\")", "\"Hello again\")")
            .replace("\"Bonjour\")", "\"Bonjour encore\")")
    });
    let miss = sample.run(&["--retries", "1", "--review"], &[("CI", "true")]);
    assert_ne!(miss.code, Some(0), "{}", miss.stderr);
    assert!(
        miss.stderr
            .contains("--review records no missed test under CI"),
        "{}",
        miss.stderr
    );
    // Without a terminal, the walk is left to the command the summary printed.
    let no_terminal = sample.run(&["--retries", "1", "-i"], &[]);
    assert!(
        no_terminal.stderr.contains(
            "--review walks missed tests in a terminal; record them with the command above"
        ),
        "{}",
        no_terminal.stderr
    );
    let all = "cargo llmreplay test --record -E 'test(=answers_hello) | test(=asks_claude)'";
    let line = format!("  record them all: {all}\n");
    assert!(miss.stderr.contains(&line), "{}", miss.stderr);
    let summary = &miss.stderr[miss.stderr.find("missing (2):").unwrap()..];
    assert!(
        summary.find("replacing its old recording") < summary.find("or keep both"),
        "the replacing command first: {summary}"
    );
    // Pasted as printed: the filterset is one argument.
    let filter = all
        .strip_prefix("cargo llmreplay test --record -E '")
        .and_then(|f| f.strip_suffix('\''))
        .unwrap();
    let args = with_upstreams(&fake, &["--record", "-E", filter]);
    let run = sample.run(&refs(&args), &[]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(
        run.stderr.contains(
            "review what changed (2 cassette files) before committing: cargo llmreplay review\n"
        ),
        "a recording run ends with what to review: {}",
        run.stderr
    );
    let hello = sample.cassette("sample--chat--answers_hello", "openai");
    assert_eq!(prompts(&read_json(&hello)), ["Hello again"]);
    let replay = sample.run(&["--deny", "unused", "--retries", "1"], &[("CI", "true")]);
    assert_eq!(replay.code, Some(0), "{}", replay.stderr);
}

/// The old workflow took four commands (record, run the whole suite, prune, check); now the
/// re-record alone leaves the test holding exactly what it calls, and a replay of the whole
/// suite finds nothing stale. A miss shows the recorded value beside the new one first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recording_a_test_again_leaves_exactly_what_it_calls_in_one_command() {
    let fake = FakeProvider::start().await;
    let sample = Sample::new();
    sample.own_build("0.1.1-rerecord");
    sample.record_all(&fake);
    sample.commit_all();
    let twice = sample.cassette("sample--chat--answers_twice", "openai");
    assert_eq!(prompts(&read_json(&twice)), ["First", "Second"]);

    edit_sample_tests(&sample, |t| t.replace("\"Second\"", "\"Second again\""));
    let miss = sample.run(&["-E", "test(=answers_twice)"], &[("CI", "true")]);
    assert_ne!(miss.code, Some(0), "{}", miss.stderr);
    assert!(
        miss.stderr
            .contains(r#"/body/messages/0/content (semantic): "Second" -> "Second again""#),
        "the recorded value beside the new one: {}",
        miss.stderr
    );
    assert!(
        miss.stderr.contains(
            "changed on purpose? record the test again, replacing its old recording: cargo llmreplay test --record -E 'test(=answers_twice)'\n    or keep both (--record-missing): cargo llmreplay test --record-missing -E 'test(=answers_twice)'"
        ),
        "{}",
        miss.stderr
    );

    let args = with_upstreams(&fake, &["--record", "-E", "test(=answers_twice)"]);
    let run = sample.run(&refs(&args), &[]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(
        prompts(&read_json(&twice)),
        ["First", "Second again"],
        "the old answer is gone"
    );
    let recorded = &run.report["recorded"];
    assert_eq!(
        recorded,
        &serde_json::json!([{"test": "sample::chat$answers_twice", "added": 1, "replaced": 0, "removed": 1}]),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("recorded (1 test):\n  sample::chat$answers_twice  1 added, 1 removed"),
        "{}",
        run.stderr
    );
    let full = sample.run(&["--deny", "unused", "--retries", "1"], &[("CI", "true")]);
    assert_eq!(full.code, Some(0), "nothing stale: {}", full.stderr);
    assert_eq!(full.report["unused"], serde_json::json!([]));

    // --record-missing keeps appending.
    edit_sample_tests(&sample, |t| {
        t.replace("\"Second again\"", "\"Second once more\"")
    });
    let args = with_upstreams(&fake, &["--record-missing", "-E", "test(=answers_twice)"]);
    let run = sample.run(&refs(&args), &[]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(
        prompts(&read_json(&twice)),
        ["First", "Second again", "Second once more"]
    );
    assert_eq!(run.report["recorded"][0]["added"], 1);
    assert!(run.report["recorded"][0].get("removed").unwrap() == 0);
}

/// A renamed test: the replay says which test recorded the very request and prints `mv`;
/// `mv` keeps every byte but the test's name and the test replays; `diff` shows a move. A
/// folder moved by hand (git mv) is named as such, and `mv` finishes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renamed_test_keeps_its_recordings() {
    let fake = FakeProvider::start().await;
    let sample = Sample::new();
    sample.own_build("0.1.1-rename");
    sample.record_all(&fake);
    sample.commit_all();
    let hello = sample.cassette("sample--chat--answers_hello", "openai");
    let claude = sample.cassette("sample--chat--asks_claude", "anthropic");
    let (hello_bytes, claude_bytes) = (
        std::fs::read(&hello).unwrap(),
        std::fs::read(&claude).unwrap(),
    );

    edit_sample_tests(&sample, |t| {
        t.replace("fn answers_hello()", "fn says_hello()")
            .replace("fn asks_claude()", "fn asks_anthropic()")
    });
    let run = sample.run(&["-E", "test(=says_hello)"], &[("CI", "true")]);
    assert_ne!(run.code, Some(0), "{}", run.stderr);
    let mv = "cargo llmreplay mv 'sample::chat$answers_hello' 'sample::chat$says_hello'";
    assert!(
        run.stderr.contains(&format!(
            "renamed? sample::chat$answers_hello (no longer in the suite) recorded this very request; keep its recordings: {mv}"
        )),
        "{}",
        run.stderr
    );
    assert_eq!(
        run.report["missing"][0]["renamed_from"]["test"],
        "sample::chat$answers_hello"
    );

    let moved = sample.llmreplay(&["mv", "answers_hello", "says_hello"]);
    assert_eq!(moved.code, Some(0), "{}", moved.stderr);
    assert!(
        moved.stderr.contains(
            "moved tests/cassettes/sample--chat--answers_hello to tests/cassettes/sample--chat--says_hello: 1 cassette (1 recording) now names sample::chat$says_hello"
        ),
        "{}",
        moved.stderr
    );
    assert!(!hello.exists());
    let new_hello = sample.cassette("sample--chat--says_hello", "openai");
    assert_eq!(
        std::fs::read_to_string(&new_hello).unwrap(),
        String::from_utf8(hello_bytes)
            .unwrap()
            .replace("sample::chat$answers_hello", "sample::chat$says_hello"),
        "every byte kept but the test's name"
    );

    // The other test's folder is moved by hand, as `git mv` would.
    let by_hand = sample
        .root
        .join("tests/cassettes/sample--chat--asks_anthropic");
    std::fs::rename(claude.parent().unwrap(), &by_hand).unwrap();
    let run = sample.run(&["-E", "test(=asks_anthropic)"], &[("CI", "true")]);
    assert_ne!(run.code, Some(0), "{}", run.stderr);
    let finish = "cargo llmreplay mv 'sample::chat$asks_claude' 'sample::chat$asks_anthropic'";
    assert!(
        run.stderr
            .contains(&format!("Finish the rename with: {finish}")),
        "{}",
        run.stderr
    );
    let finished = sample.llmreplay(&[
        "mv",
        "sample::chat$asks_claude",
        "sample::chat$asks_anthropic",
    ]);
    assert_eq!(finished.code, Some(0), "{}", finished.stderr);
    assert_eq!(
        std::fs::read_to_string(by_hand.join("anthropic.json")).unwrap(),
        String::from_utf8(claude_bytes)
            .unwrap()
            .replace("sample::chat$asks_claude", "sample::chat$asks_anthropic")
    );

    let replay = sample.run(&["--deny", "unused", "--retries", "1"], &[("CI", "true")]);
    assert_eq!(replay.code, Some(0), "{}", replay.stderr);
    // The run's changed list says moved, as `diff` does, not deleted and new.
    let kinds: Vec<(&str, &str)> = replay.report["changed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["kind"].as_str().unwrap(),
                c["moved_from"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            (
                "moved",
                "tests/cassettes/sample--chat--asks_claude/anthropic.json"
            ),
            (
                "moved",
                "tests/cassettes/sample--chat--answers_hello/openai.json"
            ),
        ],
        "{}",
        replay.report
    );
    assert!(
        replay.stderr.contains(
            "tests/cassettes/sample--chat--says_hello/openai.json (from tests/cassettes/sample--chat--answers_hello/openai.json): 1 unchanged"
        ),
        "{}",
        replay.stderr
    );

    let diff = sample.llmreplay(&["diff", "--base", "HEAD"]);
    assert_eq!(diff.code, Some(0), "{}", diff.stderr);
    assert!(
        diff.stdout.starts_with("2 tests: 2 cassettes moved"),
        "{}",
        diff.stdout
    );
    assert!(
        diff.stdout.contains(
            "tests/cassettes/sample--chat--says_hello/openai.json (moved from tests/cassettes/sample--chat--answers_hello/openai.json): 1 recording, unchanged"
        ),
        "{}",
        diff.stdout
    );

    // Nothing is overwritten: a test that has cassettes is no target.
    let refused = sample.llmreplay(&["mv", "says_hello", "answers_twice"]);
    assert_eq!(refused.code, Some(2), "{}", refused.stderr);
    assert!(
        refused.stderr.contains("already exists and is not empty"),
        "{}",
        refused.stderr
    );
}

/// Records everything, commits, then has the provider change its mind about two answers
/// (one per provider) and records those two tests again: two changes to review.
async fn two_changed_answers(version: &str) -> (FakeProvider, Sample) {
    let fake = FakeProvider::start().await;
    let sample = Sample::new();
    sample.own_build(version);
    sample.record_all(&fake);
    sample.commit_all();
    *fake.state.suffix_for.lock().unwrap() = vec![
        ("Hello".into(), " and welcome".into()),
        ("Bonjour".into(), " et bienvenue".into()),
    ];
    let args = with_upstreams(
        &fake,
        &[
            "--record",
            "--review",
            "-E",
            "test(=answers_hello) | test(=asks_claude)",
        ],
    );
    let run = sample.run(&refs(&args), &[]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    // Without a terminal, `test --review` says what waits instead of walking it.
    assert!(
        run.stderr.contains(
            "review: 2 changed interactions to review against the index (what is staged)"
        ),
        "{}",
        run.stderr
    );
    (fake, sample)
}

const HELLO: &str = "sample--chat--answers_hello/openai#1";
const CLAUDE: &str = "sample--chat--asks_claude/anthropic#1";

/// The commit hash in a base's label varies from run to run.
fn without_hash(text: &str) -> String {
    regex::Regex::new(r"HEAD \([0-9a-f]{8}\)")
        .unwrap()
        .replace_all(text, "HEAD (<commit>)")
        .into_owned()
}

/// The non-interactive twins: `--list` (text and JSON) and `--show` change nothing;
/// `--reject FILTER` restores HEAD's bytes; `--accept` leaves nothing pending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_for_scripts_lists_shows_accepts_and_rejects() {
    let (_fake, sample) = two_changed_answers("0.1.1-review-twins").await;
    let hello = sample.cassette("sample--chat--answers_hello", "openai");
    let claude = sample.cassette("sample--chat--asks_claude", "anthropic");

    let json = sample.llmreplay(&["review", "--list", "--format", "json"]);
    assert_eq!(json.code, Some(0), "{}", json.stderr);
    let list: Value = serde_json::from_str(&json.stdout).unwrap();
    let ids: Vec<&str> = list["pending"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [HELLO, CLAUDE]);
    assert_eq!(list["pending"][0]["drift"], serde_json::json!(["wording"]));
    assert_eq!(list["pending"][0]["test"], "sample::chat$answers_hello");
    assert_eq!(
        list["pending"][1]["answer_after"],
        "You said: Bonjour et bienvenue"
    );

    let text = sample.llmreplay(&["review", "--list"]);
    let show = sample.llmreplay(&["review", "--show", CLAUDE]);
    assert_eq!(show.code, Some(0), "{}", show.stderr);
    insta::assert_snapshot!(
        "review_list_and_show",
        without_hash(&format!(
            "$ review --list\n{}\n$ review --show {CLAUDE}\n{}",
            text.stdout, show.stdout
        ))
    );
    let unknown = sample.llmreplay(&["review", "--show", "nope/openai#9"]);
    assert_eq!(unknown.code, Some(2));
    assert!(
        unknown.stderr.contains("review --list"),
        "{}",
        unknown.stderr
    );

    let rejected = sample.llmreplay(&["review", "--reject", "asks_claude"]);
    assert_eq!(rejected.code, Some(0), "{}", rejected.stderr);
    assert!(
        rejected
            .stderr
            .contains("rejected (restored from the base) 1 interaction"),
        "{}",
        rejected.stderr
    );
    assert_eq!(
        std::fs::read(&claude).unwrap(),
        at_head(&sample.root, &claude).unwrap(),
        "HEAD's bytes"
    );
    assert_ne!(
        std::fs::read(&hello).unwrap(),
        at_head(&sample.root, &hello).unwrap(),
        "the other change stays"
    );

    // A filter that matches nothing is a mistake, not a success.
    let nothing = sample.llmreplay(&["review", "--accept", "no_such_test"]);
    assert_eq!(nothing.code, Some(2), "{}", nothing.stderr);
    assert!(
        nothing
            .stderr
            .contains("no pending interaction matches no_such_test"),
        "{}",
        nothing.stderr
    );
    let accepted = sample.llmreplay(&["review", "--accept"]);
    assert_eq!(accepted.code, Some(0), "{}", accepted.stderr);
    assert!(
        accepted
            .stderr
            .contains("accepted (staged) 1 interaction\n1 cassette file staged"),
        "{}",
        accepted.stderr
    );
    let (cached, unstaged) = staged_and_unstaged(&sample.root);
    assert_eq!(
        cached,
        ["tests/cassettes/sample--chat--answers_hello/openai.json"]
    );
    assert_eq!(unstaged, Vec::<String>::new());
    let after = sample.llmreplay(&["review", "--list"]);
    assert!(
        after.stdout.starts_with("Nothing to review"),
        "{}",
        after.stdout
    );
    let replay = sample.run(&["--deny", "unused", "--retries", "1"], &[("CI", "true")]);
    assert_eq!(replay.code, Some(0), "{}", replay.stderr);
}

/// `cargo llmreplay SUBCOMMAND` in `dir` as a shell (in tmux, say) starts it: this environment
/// and nothing else, with `env` on top.
pub(crate) fn shell_llmreplay(dir: &Path, env: &[(&str, &str)], subcommand: &str) -> String {
    let quote = |s: &str| format!("'{}'", s.replace('\'', "'\\''"));
    let mut vars: Vec<String> = vec!["NO_COLOR=1".into(), "TERM=xterm-256color".into()];
    for var in ["PATH", "HOME"] {
        if let Some(v) = std::env::var_os(var) {
            vars.push(format!("{var}={}", quote(&v.to_string_lossy())));
        }
    }
    for (k, v) in env {
        vars.push(format!("{k}={}", quote(v)));
    }
    format!(
        "cd {} && env -i {} {} llmreplay {subcommand}",
        quote(&dir.display().to_string()),
        vars.join(" "),
        quote(&binary().display().to_string())
    )
}

/// A tmux session on its own socket, killed on drop.
pub(crate) struct Tmux {
    socket: String,
}

impl Tmux {
    /// Starts `command` in a detached 160x50 session; `None` when tmux is not installed
    /// (a failure under CI, where .ci/run installs it).
    pub(crate) fn start(command: &str) -> Option<Tmux> {
        let found = Command::new("tmux")
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            assert!(
                std::env::var_os("CI").is_none(),
                "tmux is missing, and CI is set: .ci/run installs it (apt-get install tmux)"
            );
            eprintln!("SKIPPED: tmux is not installed");
            return None;
        }
        let socket = format!(
            "llmreplay-test-{}-{}",
            std::process::id(),
            crate::support::rand_suffix()
        );
        let tmux = Tmux { socket };
        let status = tmux
            .cmd()
            .args([
                "-f",
                "/dev/null",
                "new-session",
                "-d",
                "-s",
                "t",
                "-x",
                "160",
                "-y",
                "50",
            ])
            .arg(command)
            .status()
            .unwrap();
        assert!(status.success());
        Some(tmux)
    }

    fn cmd(&self) -> Command {
        let mut c = Command::new("tmux");
        c.args(["-L", &self.socket]);
        c
    }

    fn screen(&self) -> String {
        let out = self
            .cmd()
            .args(["capture-pane", "-p", "-t", "t"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Waits until the screen shows `text`: the program is ready for the next key.
    pub(crate) fn wait_for(&self, text: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let screen = self.screen();
            if screen.contains(text) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "never showed {text:?}:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub(crate) fn keys(&self, keys: &str) {
        let status = self
            .cmd()
            .args(["send-keys", "-t", "t", keys])
            .status()
            .unwrap();
        assert!(status.success());
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd().arg("kill-server").status();
    }
}

/// `cargo llmreplay review` in a real terminal: the first change accepted with `a`, the second
/// rejected with `r`; git then shows exactly that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_in_a_terminal_accepts_one_change_and_rejects_another() {
    let (_fake, sample) = two_changed_answers("0.1.1-review-tui").await;
    let hello = sample.cassette("sample--chat--answers_hello", "openai");
    let claude = sample.cassette("sample--chat--asks_claude", "anthropic");
    let command = format!(
        "{} llmreplay review; echo \"review exited $?\"; read done",
        in_tmux(&sample)
    );
    let Some(tmux) = Tmux::start(&command) else {
        return;
    };
    let first = tmux.wait_for("review: 1 of 2");
    assert!(first.contains(HELLO), "{first}");
    assert!(first.contains("[wording]"), "{first}");
    assert!(
        first.contains("You said: Hello{+ and welcome+}"),
        "a word diff: {first}"
    );
    assert!(first.contains("a accept   r reject"), "{first}");
    tmux.keys("d");
    tmux.wait_for("d changed lines only");
    tmux.keys("a");
    let second = tmux.wait_for("review: 2 of 2");
    assert!(second.contains(CLAUDE), "{second}");
    tmux.keys("r");
    let end = tmux.wait_for("review exited");
    assert!(end.contains("1 accepted, 1 rejected, 0 skipped"), "{end}");
    assert!(end.contains("review exited 0"), "{end}");
    drop(tmux);

    assert_eq!(
        std::fs::read(&claude).unwrap(),
        at_head(&sample.root, &claude).unwrap(),
        "the rejected change is gone: HEAD's bytes"
    );
    let now = std::fs::read_to_string(&hello).unwrap();
    assert!(
        now.contains("Hello and welcome"),
        "the accepted change stays"
    );
    let repo = git2::Repository::open(&sample.root).unwrap();
    let mut opts = git2::StatusOptions::new();
    opts.include_untracked(true);
    let changed: Vec<String> = repo
        .statuses(Some(&mut opts))
        .unwrap()
        .iter()
        .map(|s| s.path().unwrap().to_string())
        .collect();
    assert_eq!(
        changed,
        ["tests/cassettes/sample--chat--answers_hello/openai.json"],
        "git shows exactly the accepted change"
    );
    // Accepting staged it: `git diff --cached` holds exactly the accepted interaction's
    // cassette, as the work tree has it, and `git diff` nothing more to review.
    let (cached, unstaged) = staged_and_unstaged(&sample.root);
    assert_eq!(
        cached,
        ["tests/cassettes/sample--chat--answers_hello/openai.json"]
    );
    assert_eq!(unstaged, Vec::<String>::new());
    let after = sample.llmreplay(&["review", "--list"]);
    assert!(
        after.stdout.starts_with("Nothing to review"),
        "{}",
        after.stdout
    );
    assert!(
        after.stdout.contains(
            "1 cassette file staged (git diff --cached shows them; git commit commits them)"
        ),
        "{}",
        after.stdout
    );
}

/// The changed-prompt loop in one command: `cargo llmreplay test --review` after a prompt
/// changed walks the missed test, `r` records it again now (from the local fake upstream), and
/// the review of the new answer that follows stages it with `a`. No test is named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_review_records_a_missed_test_and_stages_it_in_two_keys() {
    let fake = FakeProvider::start().await;
    let sample = Sample::new();
    sample.own_build("0.1.1-test-review");
    sample.record_all(&fake);
    sample.commit_all();
    edit_sample_tests(&sample, |t| t.replace("\"Hello\")", "\"Hello again\")"));
    let hello = sample.cassette("sample--chat--answers_hello", "openai");
    let upstreams: Vec<String> = upstream_args(&fake)
        .iter()
        .map(|a| format!("'{a}'"))
        .collect();
    let command = format!(
        "{} llmreplay test -i {}; echo \"test exited $?\"; read done",
        in_tmux(&sample),
        upstreams.join(" ")
    );
    let Some(tmux) = Tmux::start(&command) else {
        return;
    };
    let walk = tmux.wait_for("missed test 1 of 1");
    assert!(walk.contains("sample::chat$answers_hello"), "{walk}");
    assert!(
        walk.contains("/body/messages/0/content (semantic): \"Hello\" -> \"Hello again\""),
        "{walk}"
    );
    assert!(walk.contains("source:   tests/chat.rs:14"), "{walk}");
    assert!(
        walk.contains("r record it again now (about 1 request to the real upstream;"),
        "the spend, said before: {walk}"
    );
    tmux.keys("r");
    let review = tmux.wait_for("review: 1 of 1");
    assert!(review.contains("Hello again"), "the new answer: {review}");
    tmux.keys("a");
    let end = tmux.wait_for("test exited");
    assert!(end.contains("1 accepted, 0 rejected, 0 skipped"), "{end}");
    drop(tmux);

    let (cached, unstaged) = staged_and_unstaged(&sample.root);
    assert_eq!(
        cached,
        ["tests/cassettes/sample--chat--answers_hello/openai.json"],
        "the new recording is staged"
    );
    assert!(
        !unstaged.iter().any(|p| p.contains("cassettes")),
        "nothing left to review: {unstaged:?}"
    );
    assert_eq!(prompts(&read_json(&hello)), ["Hello again"]);
    let replay = sample.run(&["--retries", "1"], &[("CI", "true")]);
    assert_eq!(replay.code, Some(0), "{}", replay.stderr);
}

/// Accepting one of two changes stages that one: `git diff --cached` holds it and `git diff`
/// the other, which `review --list` still lists; rejecting it restores the index's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepting_one_of_two_stages_it_and_leaves_the_other_in_git_diff() {
    let (_fake, sample) = two_changed_answers("0.1.1-review-stage").await;
    let accepted = sample.llmreplay(&["review", "--accept", "answers_hello"]);
    assert_eq!(accepted.code, Some(0), "{}", accepted.stderr);
    let (cached, unstaged) = staged_and_unstaged(&sample.root);
    assert_eq!(
        cached,
        ["tests/cassettes/sample--chat--answers_hello/openai.json"]
    );
    assert_eq!(
        unstaged,
        ["tests/cassettes/sample--chat--asks_claude/anthropic.json"]
    );
    let list = sample.llmreplay(&["review", "--list"]);
    assert!(
        list.stdout
            .starts_with("1 interaction to review against the index"),
        "{}",
        list.stdout
    );
    assert!(list.stdout.contains(CLAUDE), "{}", list.stdout);
    assert!(
        list.stdout.contains("1 cassette file staged"),
        "{}",
        list.stdout
    );
    let rejected = sample.llmreplay(&["review", "--reject"]);
    assert_eq!(rejected.code, Some(0), "{}", rejected.stderr);
    let (cached, unstaged) = staged_and_unstaged(&sample.root);
    assert_eq!(cached.len(), 1, "{cached:?}");
    assert_eq!(unstaged, Vec::<String>::new());
}

/// A shell command's start that runs this program in the sample, with the sample's environment
/// as `Sample::command` gives it and nothing else, for a shell in tmux.
fn in_tmux(sample: &Sample) -> String {
    let quote = |p: &Path| format!("'{}'", p.display());
    let mut env = vec![
        format!("CARGO_TARGET_DIR={}", quote(&Sample::target_dir())),
        "CARGO_NET_OFFLINE=true".into(),
        "NO_COLOR=1".into(),
        "TERM=xterm-256color".into(),
    ];
    for var in ["PATH", "HOME", "CARGO_HOME", "RUSTUP_HOME"] {
        if let Some(v) = std::env::var_os(var) {
            env.push(format!("{var}={}", quote(&PathBuf::from(v))));
        }
    }
    format!(
        "cd {} && env -i {} {}",
        quote(&sample.root),
        env.join(" "),
        quote(&binary())
    )
}

/// The cassette files `git diff --cached` and `git diff` name.
pub(crate) fn staged_and_unstaged(root: &Path) -> (Vec<String>, Vec<String>) {
    let repo = git2::Repository::open(root).unwrap();
    let head = repo.head().unwrap().peel_to_tree().unwrap();
    let names = |diff: git2::Diff| -> Vec<String> {
        diff.deltas()
            .filter_map(|d| d.new_file().path().map(|p| p.display().to_string()))
            .collect()
    };
    let cached = names(repo.diff_tree_to_index(Some(&head), None, None).unwrap());
    let unstaged = names(repo.diff_index_to_workdir(None, None).unwrap());
    (cached, unstaged)
}

/// A mistyped flag of ours is refused with clap's suggestion and never reaches nextest; a
/// replay runs every test (--no-fail-fast) unless the user asks for fail-fast, and then the
/// report says that nextest stopped early.
#[test]
fn our_flags_are_checked_before_nextest_and_replay_runs_every_test() {
    let sample = Sample::new();
    let typo: Output = Output::of(
        sample
            .command(binary())
            .args(["llmreplay", "test", "--recrod"]),
    );
    assert_eq!(typo.code, Some(2), "{}", typo.stderr);
    assert!(
        typo.stderr.contains("unexpected argument '--recrod'")
            && typo
                .stderr
                .contains("a similar argument exists: '--record'"),
        "{}",
        typo.stderr
    );
    assert!(
        !typo.stderr.contains("nextest"),
        "never forwarded: {}",
        typo.stderr
    );

    // No cassettes at all: every test that calls a provider misses, and all of them run.
    let all = sample.run(&["--retries", "0"], &[("CI", "true")]);
    assert_ne!(all.code, Some(0), "{}", all.stderr);
    let missed: std::collections::BTreeSet<&str> = all.report["missing"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["test"].as_str().unwrap())
        .collect();
    assert!(missed.len() >= 3, "every test ran: {missed:?}");
    assert!(all.report.get("stopped_early").is_none());

    let fast = sample.run(&["--fail-fast", "-j", "1"], &[("CI", "true")]);
    assert_ne!(fast.code, Some(0), "{}", fast.stderr);
    assert_eq!(fast.report["stopped_early"], true);
    assert!(
        fast.stderr.contains("nextest stopped at the first failure"),
        "{}",
        fast.stderr
    );
}
