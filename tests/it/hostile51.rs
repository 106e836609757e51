//! `cargo llmreplay run --record -- COMMAND` with no test runner under the command: a command
//! that exits 0 is one test that passed, and its cassettes are trimmed to this run's set. What
//! it must not trim: a request an MCP server never answered, a pytest test that crashed under a
//! script (pytest's plugin says how its tests end; one it did not say did not finish), and the
//! recordings of a process the command left running (it may still call).

use crate::support::{binary, commit_all, sdk_python, without_provider_env, FakeProvider, Output};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// What most of these tests record with: the stand-in model, a project, the `--upstream` word
/// naming it, and the Python that runs `ask.py`.
struct Scene {
    model: FakeProvider,
    project: Project,
    openai: String,
    py: String,
    ask: String,
}

impl Scene {
    async fn new() -> Option<Scene> {
        let python = sdk_python("json")?;
        let model = FakeProvider::start().await;
        let openai = format!("openai={}", model.url());
        Some(Scene {
            model,
            project: Project::new(),
            openai,
            py: python.display().to_string(),
            ask: fixture("ask.py"),
        })
    }
}

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/sdk/hostile51")
        .join(name)
        .display()
        .to_string()
}

/// A git repository to record in, and a target dir outside it.
struct Project {
    _dir: tempfile::TempDir,
    root: PathBuf,
    target: PathBuf,
}

impl Project {
    fn new() -> Project {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("project");
        let target = dir.path().join("target");
        std::fs::create_dir_all(&root).unwrap();
        git2::Repository::init(&root).unwrap();
        Project {
            _dir: dir,
            root,
            target,
        }
    }

    /// `cargo llmreplay run FLAGS -- COMMAND` in the project, with `env`.
    fn run(&self, flags: &[&str], command: &[&str], env: &[(&str, &str)]) -> Output {
        let mut cmd = Command::new(binary());
        cmd.current_dir(&self.root)
            .args(["llmreplay", "run"])
            .args(flags)
            .arg("--")
            .args(command)
            .env("CARGO_TARGET_DIR", &self.target);
        for (k, _) in std::env::vars() {
            if k.starts_with("NEXTEST") || k.starts_with("LLMREPLAY") || k == "CI" {
                cmd.env_remove(k);
            }
        }
        without_provider_env(&mut cmd);
        cmd.env("OPENAI_API_KEY", "sk-not-a-real-key")
            .envs(env.iter().copied());
        Output::of(&mut cmd)
    }

    /// The `openai.json` of the one cassette folder whose name ends with `suffix`.
    fn cassette_of(&self, suffix: &str) -> (String, Value) {
        let dir = self.root.join("tests/cassettes");
        let folder = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .find(|f| f.ends_with(suffix))
            .unwrap_or_else(|| panic!("a folder ending {suffix} in {}", dir.display()));
        let text = std::fs::read_to_string(dir.join(&folder).join("openai.json")).unwrap();
        (folder, serde_json::from_str(&text).unwrap())
    }

    /// The one cassette file named `file` under `tests/cassettes`, and its folder's name.
    fn cassette(&self, file: &str) -> (String, Value) {
        let dir = self.root.join("tests/cassettes");
        let found: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path().join(file))
            .filter(|p| p.exists())
            .collect();
        assert_eq!(found.len(), 1, "{file} in {}", dir.display());
        let folder = found[0].parent().unwrap().file_name().unwrap();
        let text = std::fs::read_to_string(&found[0]).unwrap();
        (
            folder.to_string_lossy().into_owned(),
            serde_json::from_str(&text).unwrap(),
        )
    }
}

/// What the run printed, both streams.
fn said(out: &Output) -> String {
    format!("{}{}", out.stdout, out.stderr)
}

fn ok(out: &Output) {
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
}

/// The prompts (model) or tool arguments (MCP) a cassette's interactions were recorded for.
fn asked(cassette: &Value) -> Vec<String> {
    cassette["interactions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            let body = &i["request"]["body"];
            match body["messages"][0]["content"].as_str() {
                Some(prompt) => prompt.to_string(),
                None => format!("{} {}", body["method"], body["params"]["arguments"]),
            }
        })
        .collect()
}

/// The client gives up on a tool call the server never answered and exits 0: the call ends
/// broken, not unasked like a notification, so the re-recorded test keeps its recording. The
/// notification the server says nothing after breaks nothing.
#[test]
fn an_mcp_request_the_server_never_answered_keeps_its_recording() {
    let Some(python) = sdk_python("json") else {
        return;
    };
    let project = Project::new();
    let (shim, py) = (binary().display().to_string(), python.display().to_string());
    let command = [
        py.as_str(),
        &fixture("mcp_client.py"),
        &shim,
        &py,
        &fixture("mcp_server.py"),
    ];
    let first = project.run(&["--record"], &command, &[]);
    ok(&first);
    assert!(!said(&first).contains("broken"), "{}", said(&first));
    let (_, before) = project.cassette("mcp-quiet.json");
    let calls = asked(&before);
    assert!(calls.iter().any(|c| c.contains(r#"{"x":2}"#)), "{calls:?}");
    commit_all(&project.root);

    let again = project.run(&["--record"], &command, &[("SILENT_ON", "2")]);
    ok(&again);
    assert!(again.stdout.contains("shim exited 0"), "{}", again.stdout);
    let (_, after) = project.cassette("mcp-quiet.json");
    assert_eq!(asked(&after), calls, "{}\n{}", again.stdout, again.stderr);
    let text = said(&again);
    assert!(
        text.contains("1 broken") && text.contains("kept its other recordings"),
        "{text}"
    );
}

/// `bash -c 'pytest; exit 0'` is no runner `run` knows, and exits 0 though a test of it was
/// killed mid-way: pytest's plugin said that test began and never how it ended, so it keeps
/// the call it did not make this time. The test that passed is trimmed as pytest's always are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_pytest_test_under_a_script_keeps_its_recordings() {
    let Some(python) = sdk_python("pytest_llmreplay") else {
        return;
    };
    let model = FakeProvider::start().await;
    let project = Project::new();
    std::fs::create_dir_all(project.root.join("tests")).unwrap();
    std::fs::copy(
        fixture("test_crash.py"),
        project.root.join("tests/test_crash.py"),
    )
    .unwrap();
    let openai = format!("openai={}", model.url());
    let flags = ["--record", "--upstream", &openai];
    let script = format!(
        "{} -m pytest -q -p no:cacheprovider tests; exit 0",
        python.display()
    );
    let first = project.run(&flags, &["bash", "-c", &script], &[]);
    ok(&first);
    let (folder, before) = project.cassette_of("test_b");
    assert!(folder.ends_with("test_b"), "{folder}");
    assert_eq!(asked(&before), ["beta one", "beta two"]);
    commit_all(&project.root);

    let again = project.run(&flags, &["bash", "-c", &script], &[("CRASH", "1")]);
    ok(&again);
    let b = project
        .root
        .join("tests/cassettes")
        .join(&folder)
        .join("openai.json");
    let after: Value = serde_json::from_str(&std::fs::read_to_string(b).unwrap()).unwrap();
    assert_eq!(
        asked(&after),
        ["beta one", "beta two"],
        "{}\n{}",
        again.stdout,
        again.stderr
    );
    assert!(!said(&again).contains("removed"), "{}", said(&again));
}

/// The command exits 0 while a process it started in the background still runs (it calls
/// once the test lets it, after the run): the command's test keeps the recording that process
/// would have made again, and the summary says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_the_command_left_running_keeps_its_recordings() {
    let Some(Scene {
        model: _model,
        project,
        openai,
        py,
        ask,
    }) = Scene::new().await
    else {
        return;
    };
    let flags = ["--record", "--upstream", &openai];
    let first = project.run(
        &flags,
        &["bash", "-c", &format!("{py} {ask} one && {py} {ask} two")],
        &[],
    );
    ok(&first);
    let (_, before) = project.cassette("openai.json");
    assert_eq!(asked(&before), ["one", "two"]);
    commit_all(&project.root);

    // The background process waits on a fifo nobody opens for writing until the run ended.
    let fifo = project.target.join("go");
    std::fs::create_dir_all(&project.target).unwrap();
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let script = format!(
        "{py} {ask} one; (cat {fifo} >/dev/null; {py} {ask} two) >/dev/null 2>&1 & exit 0",
        fifo = fifo.display()
    );
    let again = project.run(&flags, &["bash", "-c", &script], &[]);
    // Lets the background process go on (its call finds no daemon) and end.
    std::fs::write(&fifo, "").unwrap();
    ok(&again);
    let (_, after) = project.cassette("openai.json");
    assert_eq!(asked(&after), ["one", "two"], "{}", again.stderr);
    assert!(
        said(&again).contains("still ran when the command exited"),
        "{}",
        said(&again)
    );

    // Without it, the command's test passed whole: trimmed to what it asked.
    let trimmed = project.run(&flags, &["bash", "-c", &format!("{py} {ask} one")], &[]);
    ok(&trimmed);
    let (_, last) = project.cassette("openai.json");
    assert_eq!(asked(&last), ["one"], "{}", trimmed.stderr);
}

/// A test the user names with `LLMREPLAY_TEST_ID` for a plain command is the command's: nothing
/// but the command's exit says how it ended, so a passing re-record leaves exactly its calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_test_the_user_names_is_trimmed_when_the_command_passed() {
    let Some(Scene {
        model: _model,
        project,
        openai,
        py,
        ask,
    }) = Scene::new().await
    else {
        return;
    };
    let flags = ["--record", "--upstream", &openai];
    let named = [("LLMREPLAY_TEST_ID", "named")];
    ok(&project.run(&flags, &[&py, &ask, "one", "two"], &named));
    commit_all(&project.root);
    let again = project.run(&flags, &[&py, &ask, "one"], &named);
    ok(&again);
    let (folder, after) = project.cassette("openai.json");
    assert_eq!(folder, "named");
    assert_eq!(asked(&after), ["one"], "{}", said(&again));
}

/// `trajectory --base`: a test new against the base is said to be new, and one whose
/// recordings changed though its run's steps and tool calls did not is not called unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trajectory_base_calls_no_changed_test_unchanged() {
    let Some(Scene {
        model: _model,
        project,
        openai,
        py,
        ask,
    }) = Scene::new().await
    else {
        return;
    };
    let flags = ["--record", "--upstream", &openai];
    let steady = [("LLMREPLAY_TEST_ID", "steady")];
    ok(&project.run(&flags, &[&py, &ask, "same"], &steady));
    ok(&project.run(
        &flags,
        &[&py, &ask, "before"],
        &[("LLMREPLAY_TEST_ID", "one_answer")],
    ));
    commit_all(&project.root);
    ok(&project.run(
        &flags,
        &[&py, &ask, "after"],
        &[("LLMREPLAY_TEST_ID", "one_answer")],
    ));
    ok(&project.run(
        &flags,
        &[&py, &ask, "hello"],
        &[("LLMREPLAY_TEST_ID", "fresh")],
    ));

    let mut cmd = Command::new(binary());
    cmd.current_dir(&project.root)
        .args(["llmreplay", "trajectory", "--base", "HEAD"])
        .env("CARGO_TARGET_DIR", &project.target);
    let out = Output::of(&mut cmd);
    ok(&out);
    // A test's block: its line at the margin, then its indented lines.
    let section = |test: &str| -> String {
        let mut lines = out
            .stdout
            .lines()
            .skip_while(|l| !l.starts_with(&format!("{test} (")));
        let head = lines
            .next()
            .unwrap_or_else(|| panic!("{test} in\n{}", out.stdout));
        let body: Vec<&str> = lines.take_while(|l| l.starts_with(' ')).collect();
        format!("{head}\n{}", body.join("\n"))
    };
    let fresh = section("fresh");
    assert!(fresh.contains("(new against HEAD"), "{}", out.stdout);
    let changed = section("one_answer");
    assert!(
        changed.contains("(changed against HEAD") && !changed.contains("unchanged"),
        "{}",
        out.stdout
    );
    assert!(
        section("steady").contains("(unchanged against HEAD"),
        "{}",
        out.stdout
    );
}

/// `x` in review rejects every interaction of the shown test, and nothing later in the walk
/// undoes it: here a copied folder (`c`, whose cassette still names test `a`) comes after
/// another test's, and `A` (accept all the rest) must leave it rejected with `a`'s own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_x_holds_for_a_tests_interactions_that_come_later() {
    let Some(Scene {
        model: _model,
        project,
        openai,
        py,
        ask,
    }) = Scene::new().await
    else {
        return;
    };
    let flags = ["--record", "--upstream", &openai];
    let record = |test: &str, prompt: &str| {
        ok(&project.run(&flags, &[&py, &ask, prompt], &[("LLMREPLAY_TEST_ID", test)]));
    };
    record("a", "a one");
    record("b", "b one");
    let cassettes = project.root.join("tests/cassettes");
    std::fs::create_dir_all(cassettes.join("c")).unwrap();
    let a = std::fs::read_to_string(cassettes.join("a/openai.json")).unwrap();
    std::fs::write(cassettes.join("c/openai.json"), &a).unwrap();
    commit_all(&project.root);
    record("a", "a two");
    record("b", "b two");
    std::fs::write(
        cassettes.join("c/openai.json"),
        a.replace("You said: a one", "You said: a ONE"),
    )
    .unwrap();

    let target = project.target.display().to_string();
    let command = format!(
        "{}; echo \"review exited $?\"; read done",
        crate::workflow::shell_llmreplay(&project.root, &[("CARGO_TARGET_DIR", &target)], "review")
    );
    let Some(tmux) = crate::workflow::Tmux::start(&command) else {
        return;
    };
    let first = tmux.wait_for("review: 1 of 3");
    assert!(first.contains("test:     a"), "{first}");
    tmux.keys("x");
    let second = tmux.wait_for("review: 2 of 3");
    assert!(second.contains("test:     b"), "{second}");
    tmux.keys("A");
    let end = tmux.wait_for("review exited 0");
    assert!(end.contains("1 accepted, 2 rejected, 0 skipped"), "{end}");
    let (staged, unstaged) = crate::workflow::staged_and_unstaged(&project.root);
    assert_eq!(staged, ["tests/cassettes/b/openai.json"], "{end}");
    assert!(
        !unstaged.iter().any(|f| f.starts_with("tests/cassettes")),
        "{unstaged:?}"
    );
    assert_eq!(
        std::fs::read_to_string(cassettes.join("c/openai.json")).unwrap(),
        a,
        "rejected: the base's bytes"
    );
}
