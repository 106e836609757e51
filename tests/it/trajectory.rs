//! `cargo llmreplay trajectory` on an agent recorded through the real daemon: the official
//! OpenAI SDK asks the model (the fake provider answers with a tool call), requests calls a
//! tool's API at a hard-coded https host (captured), the official `mcp` SDK calls the demo
//! server's tool over stdio through the shim, and the model answers. The trajectory read back
//! as text, JSON and a Chrome trace holds those four calls in that order.

use crate::support::{binary, sdk_python, without_provider_env, FakeProvider, Output, TestCa};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn llmreplay(root: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(binary());
    cmd.current_dir(root).arg("llmreplay").args(args);
    for (k, _) in std::env::vars() {
        if k.starts_with("NEXTEST") || k.starts_with("LLMREPLAY") || k == "CI" {
            cmd.env_remove(k);
        }
    }
    without_provider_env(&mut cmd);
    Output::of(&mut cmd)
}

fn ok(out: &Output) {
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_model_http_and_mcp_calls_come_back_in_order() {
    let Some(python) = sdk_python("mcp") else {
        return;
    };
    let ca = TestCa::new("trajectory");
    let model = FakeProvider::start().await;
    let tool_api = FakeProvider::start_tls(&ca).await;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("project");
    let scratch = dir.path().join("scratch");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&scratch).unwrap();
    git2::Repository::init(&root).unwrap();
    ca.trusted_by(&root, &scratch, "");

    let (shim, py) = (binary().display().to_string(), python.display().to_string());
    let server = repo().join("tests/sdk/mcp_server.py").display().to_string();
    let script = repo()
        .join("tests/sdk/trajectory_agent.py")
        .display()
        .to_string();
    let openai = format!("openai={}", model.url());
    let tools = format!("tools.example=https://127.0.0.1:{}", tool_api.addr.port());
    let record = |tool: &str| {
        let mut cmd = Command::new(binary());
        cmd.current_dir(&root)
            .args(["llmreplay", "run", "--record", "--upstream", &openai])
            .args([
                "--upstream",
                &tools,
                "--",
                &py,
                &script,
                &shim,
                &py,
                &server,
            ])
            .env("CARGO_TARGET_DIR", root.join("target"));
        for (k, _) in std::env::vars() {
            if k.starts_with("NEXTEST") || k.starts_with("LLMREPLAY") || k == "CI" {
                cmd.env_remove(k);
            }
        }
        without_provider_env(&mut cmd);
        cmd.env("OPENAI_API_KEY", "sk-not-a-real-key")
            .env("AGENT_TOOL", tool);
        Output::of(&mut cmd)
    };
    let recorded = record("get_weather");
    ok(&recorded);
    assert!(
        recorded.stdout.contains("You said: Say it"),
        "{}",
        recorded.stdout
    );

    // Text: the four calls in the order the agent made them, the tool's name and arguments.
    let text = llmreplay(&root, &["trajectory"]);
    ok(&text);
    let lines: Vec<&str> = text.stdout.lines().collect();
    let at = |needle: &str| {
        lines
            .iter()
            .position(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("{needle:?} in\n{}", text.stdout))
    };
    let first_model = at("#0   model openai gpt-4o-mini");
    let tool_call = at(r#"tool call: get_weather({"city": "Paris"})"#);
    let http = at("#1   http  GET tools.example/tools/weather?city=Paris  200");
    let mcp_call = at("mcp   demo tools/call add");
    let arguments = at(r#"arguments: {"a":2,"b":3}"#);
    let result = at("result: 5");
    let last_model = at("answer: You said: Say it");
    assert!(
        first_model < tool_call
            && tool_call < http
            && http < mcp_call
            && mcp_call < arguments
            && arguments < result
            && result < last_model,
        "{}",
        text.stdout
    );
    assert!(!text.stdout.contains("order guessed"), "{}", text.stdout);

    // JSON: field by field.
    let json = llmreplay(&root, &["trajectory", "--format", "json"]);
    ok(&json);
    let v: Value = serde_json::from_str(&json.stdout).unwrap();
    let trajectories = v["trajectories"].as_array().unwrap();
    assert_eq!(trajectories.len(), 1, "{v:#}");
    let t = &trajectories[0];
    assert_eq!(t["order_guessed"], false);
    let steps: Vec<&Value> = t["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["kind"] != "mcp" || s["method"] == "tools/call")
        .collect();
    let kinds: Vec<&str> = steps.iter().map(|s| s["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["model", "http", "mcp", "model"], "{v:#}");
    let all = t["steps"].as_array().unwrap();
    let numbers: Vec<u64> = all.iter().map(|s| s["step"].as_u64().unwrap()).collect();
    assert!(numbers.windows(2).all(|w| w[0] < w[1]), "{numbers:?}");
    assert_eq!(steps[0]["provider"], "openai");
    assert_eq!(steps[0]["model"], "gpt-4o-mini");
    assert_eq!(steps[0]["cassette"], "openai.json");
    assert_eq!(steps[0]["tool_calls"][0]["name"], "get_weather");
    assert_eq!(
        steps[0]["tool_calls"][0]["arguments"],
        r#"{"city": "Paris"}"#
    );
    assert_eq!(steps[0]["tokens"]["input"], 9);
    assert_eq!(steps[0]["tokens"]["output"], 7);
    assert!(steps[0]["timing"]["total_ms"].is_u64(), "{v:#}");
    assert_eq!(steps[1]["host"], "tools.example");
    assert_eq!(steps[1]["method"], "GET");
    assert_eq!(steps[1]["path"], "/tools/weather?city=Paris");
    assert_eq!(steps[1]["status"], 200);
    assert_eq!(steps[2]["server"], "demo");
    assert_eq!(steps[2]["tool"], "add");
    assert_eq!(steps[2]["arguments"], serde_json::json!({"a": 2, "b": 3}));
    assert_eq!(steps[2]["text"], "5");
    assert_eq!(steps[2]["cassette"], "mcp-demo.json");
    assert_eq!(steps[3]["text"], "You said: Say it");
    assert_eq!(steps[3]["tool_calls"], serde_json::json!([]));
    let starts: Vec<u64> = all
        .iter()
        .map(|s| s["start_ms"].as_u64().unwrap())
        .collect();
    assert!(starts.windows(2).all(|w| w[0] <= w[1]), "{starts:?}");

    // Chrome: complete events in the trajectory's order, one track per kind.
    let chrome = llmreplay(&root, &["trajectory", "--format", "chrome"]);
    ok(&chrome);
    let c: Value = serde_json::from_str(&chrome.stdout).unwrap();
    let events: Vec<&Value> = c["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] != "M")
        .collect();
    assert_eq!(events.len(), all.len(), "{c:#}");
    for e in &events {
        assert_eq!(e["ph"], "X", "{e}");
        assert!(e["ts"].is_u64() && e["dur"].is_u64(), "{e}");
    }
    let ts: Vec<u64> = events.iter().map(|e| e["ts"].as_u64().unwrap()).collect();
    assert!(ts.windows(2).all(|w| w[0] <= w[1]), "{ts:?}");
    let tracks = |cat: &str| -> Vec<u64> {
        let mut t: Vec<u64> = events
            .iter()
            .filter(|e| e["cat"] == cat)
            .map(|e| e["tid"].as_u64().unwrap())
            .collect();
        t.dedup();
        t
    };
    let (m, h, p) = (tracks("model"), tracks("http"), tracks("mcp"));
    assert!(m.len() == 1 && h.len() == 1 && p.len() == 1, "{c:#}");
    assert!(m[0] != h[0] && h[0] != p[0] && m[0] != p[0], "{c:#}");
    assert_eq!(events[0]["name"], "openai gpt-4o-mini");
    assert_eq!(events[0]["args"]["tool_calls"][0]["name"], "get_weather");

    // Re-recorded, the model chooses another tool: the run against the commit's. The command
    // is its one test, and it passed: it holds exactly this run's recordings.
    crate::support::commit_all(&root);
    let again = record("get_forecast");
    ok(&again);
    assert!(
        !again.stderr.contains("kept its other recordings") && !again.stderr.contains("broken"),
        "{}",
        again.stderr
    );
    let both = llmreplay(&root, &["trajectory", "--base", "HEAD"]);
    ok(&both);
    let lines: Vec<&str> = both.stdout.lines().collect();
    let at = |needle: &str| {
        lines
            .iter()
            .position(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("{needle:?} in\n{}", both.stdout))
    };
    let (base_run, now_run) = (at("recorded it (6 steps):"), at(" now (6 steps):"));
    let (was, is) = (
        at("tool call: get_weather("),
        at("tool call: get_forecast("),
    );
    let judged = at("trajectory changed (strict): tools get_weather, GET tools.example/tools/weather, mcp demo: add -> get_forecast, GET tools.example/tools/forecast, mcp demo: add");
    assert!(
        base_run < was && was < now_run && now_run < is && is < judged,
        "{}",
        both.stdout
    );
    at("call 1: get_forecast instead of get_weather");
    at("call 2: GET tools.example/tools/forecast instead of GET tools.example/tools/weather");

    // diff: the class, first in the headline and in what can break code.
    let diff = llmreplay(&root, &["diff", "--base", "HEAD"]);
    ok(&diff);
    assert!(
        diff.stdout
            .starts_with("1 test: 1 test's tool calls changed")
            && diff
                .stdout
                .contains("  trajectory changed (strict): tools get_weather"),
        "{}",
        diff.stdout
    );
    let markdown = llmreplay(&root, &["diff", "--base", "HEAD", "--format", "markdown"]);
    ok(&markdown);
    for needle in [
        "⚠️ **Can break code: 1 test's tool calls changed",
        "<details open>",
        "**Trajectory changed** (`strict`): `tools get_weather,",
        "- `call 1: get_forecast instead of get_weather`",
    ] {
        assert!(
            markdown.stdout.contains(needle),
            "{needle:?} in\n{}",
            markdown.stdout
        );
    }
    let json = llmreplay(&root, &["diff", "--base", "HEAD", "--format", "json"]);
    ok(&json);
    let v: Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(v["counts"]["drift"]["trajectory"], 1, "{v:#}");
    assert_eq!(
        v["trajectories"][0]["changes"][0],
        serde_json::json!({"change": "chosen", "position": 1, "before": "get_weather", "after": "get_forecast"}),
        "{v:#}"
    );
    assert_eq!(v["trajectories"][0]["mode"], "strict");

    // review in a terminal: the run's drift on the screen, `t` accepts the whole trajectory.
    let command = format!(
        "{}; echo \"review exited $?\"; read done",
        crate::workflow::shell_llmreplay(&root, &[], "review")
    );
    if let Some(tmux) = crate::workflow::Tmux::start(&command) {
        let first = tmux.wait_for("review: 1 of");
        assert!(
            first.contains("trajectory changed (strict)")
                && first.contains("t/x accept/reject the test's whole trajectory"),
            "{first}"
        );
        tmux.keys("t");
        let end = tmux.wait_for("review exited 0");
        assert!(end.contains(" accepted, 0 rejected, 0 skipped"), "{end}");
        let (staged, unstaged) = crate::workflow::staged_and_unstaged(&root);
        assert!(
            staged.iter().any(|f| f.ends_with("openai.json"))
                && staged.iter().any(|f| f.ends_with("tools.example.json")),
            "{staged:?}"
        );
        let cassettes: Vec<&String> = unstaged
            .iter()
            .filter(|f| f.starts_with("tests/cassettes"))
            .collect();
        assert_eq!(cassettes, Vec::<&String>::new());
    }

    // A mode that is none of the four is refused, naming them.
    let config = root.join("llmreplay.toml");
    let kept = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        format!("{kept}\n[drift]\ntrajectory = \"loose\"\n"),
    )
    .unwrap();
    let refused = llmreplay(&root, &["diff", "--base", "HEAD"]);
    assert_eq!(refused.code, Some(2), "{}", refused.stderr);
    assert!(
        refused.stderr.contains("unknown variant `loose`")
            && refused
                .stderr
                .contains("`strict`, `unordered`, `subset`, `superset`"),
        "{}",
        refused.stderr
    );
    std::fs::write(&config, kept).unwrap();

    // A filter that matches nothing is said, with the folder looked in.
    let none = llmreplay(&root, &["trajectory", "no-such-test"]);
    assert_eq!(none.code, Some(2), "{}", none.stderr);
    assert!(
        none.stderr
            .contains("no recorded test matches \"no-such-test\""),
        "{}",
        none.stderr
    );
}
