//! MCP servers recorded per test (README, "MCP servers"): the official Python `mcp` SDK's client
//! against its own server over stdio (through `cargo llmreplay mcp`) and over Streamable HTTP
//! (`[mcp.NAME] url`), and against the reference `@modelcontextprotocol/server-everything`
//! from npm; each recorded, then replayed with the server gone. Misses name the tool and the
//! params; a changed tool schema is its own drift class; faults and `--live mcp:NAME`.

use crate::support::{
    binary, commit_all, sdk_python, upstream_args, without_provider_env, FakeProvider, Output,
    Sample,
};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A project folder (a git repository) where `cargo llmreplay run` runs the client script.
struct Project {
    dir: tempfile::TempDir,
    python: PathBuf,
}

impl Project {
    fn new() -> Option<Project> {
        let python = sdk_python("mcp")?;
        let dir = tempfile::tempdir().unwrap();
        git2::Repository::init(dir.path()).unwrap();
        std::fs::write(dir.path().join(".gitignore"), "/target\n").unwrap();
        Some(Project { dir, python })
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    /// `cargo llmreplay run FLAGS -- python tests/sdk/mcp_client.py ARGS`, with `env`.
    fn run(&self, flags: &[&str], args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut cmd = Command::new(binary());
        cmd.current_dir(self.root())
            .args(["llmreplay", "run"])
            .args(flags)
            .arg("--")
            .arg(&self.python)
            .arg(repo().join("tests/sdk/mcp_client.py"))
            .args(args)
            .env("CARGO_TARGET_DIR", self.root().join("target"));
        for (k, _) in std::env::vars() {
            if k.starts_with("NEXTEST") || k.starts_with("LLMREPLAY") || k == "CI" {
                cmd.env_remove(k);
            }
        }
        without_provider_env(&mut cmd);
        for (k, v) in env {
            cmd.env(k, v);
        }
        Output::of(&mut cmd)
    }

    /// The client's stdio server through the shim: `demo SHIM PYTHON SERVER`.
    fn demo_args(&self, server: &Path) -> Vec<String> {
        vec![
            "demo".into(),
            binary().display().to_string(),
            self.python.display().to_string(),
            server.display().to_string(),
        ]
    }

    /// The one cassette of MCP server `name` the run wrote (its test named for the script's
    /// process tree).
    fn cassette(&self, name: &str) -> PathBuf {
        let dir = self.root().join("tests/cassettes");
        let found: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path().join(format!("mcp-{name}.json")))
            .filter(|p| p.exists())
            .collect();
        assert_eq!(
            found.len(),
            1,
            "one cassette of {name} in {}",
            dir.display()
        );
        found[0].clone()
    }

    fn report(&self) -> Value {
        let text =
            std::fs::read_to_string(self.root().join("target/llmreplay/report.json")).unwrap();
        serde_json::from_str(&text).unwrap()
    }

    fn llmreplay(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new(binary());
        cmd.current_dir(self.root()).arg("llmreplay").args(args);
        cmd.env_remove("CI");
        Output::of(&mut cmd)
    }
}

/// Fails the test, with what the run said, unless it exited 0.
fn succeeded(out: &Output) {
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
}

fn lines(out: &Output) -> Vec<Value> {
    out.stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// A copy of the demo server the test can take away (or change) between runs.
fn server_copy(project: &Project) -> PathBuf {
    let server = project.root().join("server/mcp_server.py");
    std::fs::create_dir_all(server.parent().unwrap()).unwrap();
    std::fs::copy(repo().join("tests/sdk/mcp_server.py"), &server).unwrap();
    server
}

/// A project whose demo server was recorded once over stdio, and the client's arguments.
fn recorded_demo() -> Option<(Project, Vec<String>)> {
    let project = Project::new()?;
    let server = server_copy(&project);
    let args = project.demo_args(&server);
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let recorded = project.run(&["--record"], &argv, &[]);
    assert_eq!(recorded.code, Some(0), "{}", recorded.stderr);
    Some((project, args))
}

const TOKEN: &str = "sk-proj-Zq7uXw3Jt9Lm2Nb5Vc8Rd1Fg4Hk6Ps0T";

#[test]
fn stdio_server_recorded_then_replayed_without_it() {
    let Some(project) = Project::new() else {
        return;
    };
    let server = server_copy(&project);
    let args = project.demo_args(&server);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let recorded = project.run(&["--record"], &args, &[("MCP_TOKEN", TOKEN)]);
    succeeded(&recorded);
    let answers = lines(&recorded);
    assert_eq!(
        answers,
        lines(&Output {
            code: None,
            stdout: [
                r#"{"tools": ["add", "summarize", "whoami"]}"#,
                r#"{"add": "5", "error": false}"#,
                r#"{"add": "5", "error": false}"#,
                r#"{"whoami": "ok"}"#,
                r#"{"logs": ["summarizing"], "summarize": "summary: short(a long text)"}"#,
            ]
            .join("\n"),
            stderr: String::new(),
        })
    );
    let cassette = project.cassette("demo");
    let text = std::fs::read_to_string(&cassette).unwrap();
    assert!(
        !text.contains(TOKEN),
        "the tool's secret argument is redacted"
    );
    let stored: Value = serde_json::from_str(&text).unwrap();
    let interactions = stored["interactions"].as_array().unwrap();
    let paths: Vec<&str> = interactions
        .iter()
        .map(|i| i["request"]["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        paths,
        [
            "initialize",
            "tools/list",
            "tools/call",
            "tools/call",
            "tools/call",
            "tools/call"
        ]
    );
    // Keys leave out the JSON-RPC id and the client's version.
    let init = &interactions[0]["request"]["body"];
    assert!(
        init.get("id").is_none() && init["params"]["clientInfo"].get("version").is_none(),
        "{init}"
    );
    // The sampling exchange keeps the server's request and the client's answer in order.
    let summarize = interactions[5]["response"]["body"].as_array().unwrap();
    let sides: Vec<String> = summarize
        .iter()
        .map(|s| {
            let (side, m) = s.as_object().unwrap().iter().next().unwrap();
            format!(
                "{side}:{}",
                m.get("method")
                    .and_then(Value::as_str)
                    .unwrap_or("response")
            )
        })
        .collect();
    assert_eq!(
        sides,
        [
            "server:notifications/message",
            "server:sampling/createMessage",
            "client:response",
            "server:response"
        ]
    );
    commit_all(project.root());

    // Replay: the server is gone; another token matches the redacted one.
    std::fs::remove_dir_all(server.parent().unwrap()).unwrap();
    let replayed = project.run(&[], &args, &[("MCP_TOKEN", "another-token")]);
    succeeded(&replayed);
    assert_eq!(lines(&replayed), answers);
    let report = project.report();
    assert_eq!(report["counts"]["hits"], 6, "{report}");
    assert_eq!(
        report["unused"].as_array().map_or(0, Vec::len),
        0,
        "{report}"
    );

    // A changed argument misses: a JSON-RPC error naming the tool and the param, and the run fails.
    let missed = project.run(&[], &args, &[("MCP_B", "4")]);
    assert_eq!(missed.code, Some(1), "{}", missed.stderr);
    for said in [
        "MCP tools/call of tool \"add\"",
        "/body/params/arguments/b (semantic: its value changed): 3 -> 4",
    ] {
        assert!(
            missed.stderr.contains(said),
            "{said:?} in:\n{}",
            missed.stderr
        );
    }
    let report = project.report();
    let unused: Vec<&Value> = report["unused"].as_array().unwrap().iter().collect();
    // The two recorded calls with b = 3, and the two calls the client never made after the miss.
    assert_eq!(unused.len(), 4, "{report}");
    assert!(unused
        .iter()
        .all(|u| u["cassette"].as_str().unwrap().ends_with("mcp-demo.json")));
    let miss = &report["missing"][0];
    assert_eq!(miss["provider"], "mcp-demo");
    assert_eq!(miss["method"], "MCP");
    assert_eq!(miss["path"], "tools/call");
}

/// The demo server over Streamable HTTP (JSON answers or event streams): its child and port.
fn http_server(project: &Project, json_answers: bool) -> (std::process::Child, String) {
    http_server_with(project, if json_answers { &["--json"] } else { &[] })
}

/// The demo server over Streamable HTTP with `flags` (`--json`, `--resumable`), and its port
/// once it takes connections.
fn http_server_with(project: &Project, flags: &[&str]) -> (std::process::Child, String) {
    let port_file = project.root().join(format!("port{}", flags.concat()));
    let _ = std::fs::remove_file(&port_file);
    let mut server = Command::new(&project.python);
    server
        .arg(repo().join("tests/sdk/mcp_server.py"))
        .arg("http")
        .arg(&port_file)
        .args(flags)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut server = server.spawn().unwrap();
    let port = wait_for_file(&port_file, &mut server).trim().to_string();
    // The port is written before the server listens: wait for it to take connections.
    wait_for_port(port.parse().unwrap(), &mut server);
    (server, port)
}

#[test]
fn http_server_recorded_then_replayed_without_it() {
    let Some(project) = Project::new() else {
        return;
    };
    for json_answers in [false, true] {
        let (mut server, port) = http_server(&project, json_answers);
        std::fs::write(
            project.root().join("llmreplay.toml"),
            format!("[mcp.web]\nurl = \"http://127.0.0.1:{port}/mcp\"\n"),
        )
        .unwrap();
        let recorded = project.run(&["--record"], &["http"], &[]);
        server.kill().unwrap();
        server.wait().unwrap();
        succeeded(&recorded);
        let cassette = std::fs::read_to_string(project.cassette("web")).unwrap();
        let form = if json_answers {
            "application/json"
        } else {
            "text/event-stream"
        };
        assert!(cassette.contains(form), "{cassette}");

        let replayed = project.run(&[], &["http"], &[]);
        succeeded(&replayed);
        assert_eq!(lines(&replayed), lines(&recorded));
        assert_eq!(project.report()["counts"]["misses"], 0);
        std::fs::remove_dir_all(project.root().join("tests")).unwrap();
    }
}

/// The server's other streams over Streamable HTTP, with the SDK's client: a notification on
/// the GET listening stream, and an answer stream the server closes halfway and the client
/// resumes with Last-Event-ID. Recorded (the listening stream as one interaction, each message
/// with the requests before it; the resumed answer as one exchange), then replayed with the
/// server gone, the notification arriving as it did. A raw client then resumes a replayed
/// answer stream from the daemon's own event ids.
#[test]
fn listening_stream_and_resumed_answers_replay_without_the_server() {
    let (Some(project), Some(raw)) = (Project::new(), Project::new()) else {
        return;
    };
    let (mut server, port) = http_server_with(&project, &["--resumable"]);
    let config = format!("[mcp.web]\nurl = \"http://127.0.0.1:{port}/mcp\"\n");
    for p in [&project, &raw] {
        std::fs::write(p.root().join("llmreplay.toml"), &config).unwrap();
    }
    let recorded = project.run(&["--record"], &["streams"], &[]);
    let raw_recorded = raw.run(&["--record"], &["resume"], &[]);
    server.kill().unwrap();
    server.wait().unwrap();
    succeeded(&recorded);
    succeeded(&raw_recorded);
    let said = lines(&recorded);
    assert_eq!(said[1]["notices"][0], "notifications/tools/list_changed");
    assert_eq!(said[2]["logs"], serde_json::json!(["step 1", "step 2"]));
    let cassette: Value =
        serde_json::from_slice(&std::fs::read(project.cassette("web")).unwrap()).unwrap();
    let interactions = cassette["interactions"].as_array().unwrap();
    let listening = interactions
        .iter()
        .find(|i| i["request"]["method"] == "GET")
        .expect("the listening stream recorded");
    let step = &listening["response"]["body"][0];
    assert_eq!(step["server"]["method"], "notifications/tools/list_changed");
    // After initialize and the `announce` call.
    assert_eq!(step["after"], 2, "{listening}");
    let resumed = interactions
        .iter()
        .find(|i| i["request"]["body"]["params"]["name"] == "slow_steps")
        .expect("the resumed call recorded");
    let steps = resumed["response"]["body"].as_array().unwrap();
    assert_eq!(steps.len(), 3, "two logs and the response: {resumed}");
    assert_eq!(
        steps[2]["server"]["result"]["content"][0]["text"],
        "done in steps"
    );

    let replayed = project.run(&["--deny", "unused"], &["streams"], &[("CI", "true")]);
    succeeded(&replayed);
    assert_eq!(lines(&replayed), said);
    assert_eq!(project.report()["counts"]["misses"], 0);

    let raw_replayed = raw.run(&["--deny", "unused"], &["resume"], &[("CI", "true")]);
    succeeded(&raw_replayed);
    let (then, now) = (lines(&raw_recorded), lines(&raw_replayed));
    assert_eq!(
        now[0]["messages"],
        serde_json::json!(["step 1", "step 2", "done in steps"])
    );
    assert_eq!(
        now[0], then[0],
        "the same messages, the rest by Last-Event-ID"
    );
    assert_eq!(now[1]["unknown"], 404, "an id this daemon never sent");
}

/// A client with a hard-coded https URL, through capture: its JSON-RPC is taken as MCP.
#[test]
fn captured_host_speaking_json_rpc_is_an_mcp_server() {
    let Some(project) = Project::new() else {
        return;
    };
    let (mut server, port) = http_server(&project, false);
    let upstream = format!("tools.example=http://127.0.0.1:{port}");
    let recorded = project.run(&["--record", "--upstream", &upstream], &["captured"], &[]);
    server.kill().unwrap();
    server.wait().unwrap();
    succeeded(&recorded);
    let cassette: Value =
        serde_json::from_slice(&std::fs::read(project.cassette("tools.example")).unwrap()).unwrap();
    assert_eq!(cassette["interactions"][0]["request"]["path"], "initialize");

    let replayed = project.run(&[], &["captured"], &[("CI", "true")]);
    succeeded(&replayed);
    assert_eq!(lines(&replayed), lines(&recorded));
    assert_eq!(project.report()["counts"]["misses"], 0);
}

#[test]
fn server_everything_with_sampling_and_progress() {
    let Some(project) = Project::new() else {
        return;
    };
    let Some(node) = crate::clients::node_clients() else {
        return;
    };
    let index = node.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        index.exists(),
        "npm ci --prefix tests/node installs server-everything"
    );
    let args = |index: &Path| {
        vec![
            "everything".to_string(),
            binary().display().to_string(),
            "node".into(),
            index.display().to_string(),
        ]
    };
    let recording = args(&index);
    let recording: Vec<&str> = recording.iter().map(String::as_str).collect();
    let recorded = project.run(&["--record"], &recording, &[]);
    succeeded(&recorded);
    let answers = lines(&recorded);
    assert!(
        answers.contains(&serde_json::json!({"echo": "Echo: hello"})),
        "{answers:?}"
    );
    assert!(
        answers
            .iter()
            .any(|a| a["sampling"].as_str().is_some_and(|s| s.contains("short("))),
        "{answers:?}"
    );
    assert!(
        answers
            .iter()
            .any(|a| a["progress"] == serde_json::json!([1.0, 2.0])),
        "{answers:?}"
    );

    let gone = args(&project.root().join("no-server/index.js"));
    let gone: Vec<&str> = gone.iter().map(String::as_str).collect();
    let replayed = project.run(&[], &gone, &[]);
    succeeded(&replayed);
    assert_eq!(lines(&replayed), answers);
}

#[test]
fn changed_tool_schema_is_its_own_drift_class() {
    let Some((project, args)) = recorded_demo() else {
        return;
    };
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    commit_all(project.root());
    let again = project.run(&["--record"], &args, &[("MCP_SCHEMA", "v2")]);
    assert_eq!(again.code, Some(0), "{}", again.stderr);
    let listed = project.llmreplay(&["review", "--list"]);
    assert!(
        listed.stdout.contains("[tool schema"),
        "{}\n{}",
        listed.stdout,
        listed.stderr
    );
    let markdown = project.llmreplay(&["diff", "--base", "HEAD", "--format", "markdown"]);
    assert!(
        markdown
            .stdout
            .contains("1 MCP tool list changed its tool schemas"),
        "{}",
        markdown.stdout
    );
}

#[test]
fn faults_and_live_servers() {
    let Some((project, args)) = recorded_demo() else {
        return;
    };
    let args: Vec<&str> = args.iter().map(String::as_str).collect();

    // A fault for one tool: its calls get an MCP error, the other tools their recordings.
    let faults = "[[faults]]\ntest = \"all()\"\nprovider = \"mcp-demo\"\ntool = \"add\"\nerror = \"disk on fire\"\ntimes = \"always\"\n";
    std::fs::write(project.root().join("llmreplay.toml"), faults).unwrap();
    let faulted = project.run(&[], &args, &[]);
    succeeded(&faulted);
    let answers = lines(&faulted);
    assert_eq!(
        answers[1],
        serde_json::json!({"add": "disk on fire", "error": true}),
        "{answers:?}"
    );
    assert_eq!(answers[3], serde_json::json!({"whoami": "ok"}));

    // The server goes away: the client's next call fails.
    std::fs::write(
        project.root().join("llmreplay.toml"),
        "[[faults]]\ntest = \"all()\"\nprovider = \"mcp-demo\"\ntool = \"whoami\"\nexit = true\n",
    )
    .unwrap();
    let exited = project.run(&[], &args, &[]);
    assert_ne!(exited.code, Some(0));
    let answers = lines(&exited);
    assert_eq!(
        answers.len(),
        4,
        "nothing after the server went away: {}",
        exited.stdout
    );
    assert_eq!(
        answers[3],
        serde_json::json!({"whoami": "failed: MCPError"})
    );

    // A slow answer: the client gives up waiting, and the calls after it are answered.
    std::fs::write(
        project.root().join("llmreplay.toml"),
        "[[faults]]\ntest = \"all()\"\nprovider = \"mcp-demo\"\ntool = \"whoami\"\ndelay_ms = 2000\n",
    )
    .unwrap();
    let slow = project.run(&[], &args, &[("MCP_TIMEOUT", "0.5")]);
    let answers = lines(&slow);
    assert!(
        answers[3]["whoami"]
            .as_str()
            .is_some_and(|w| w.starts_with("failed")),
        "{answers:?}"
    );
    assert_eq!(
        answers[4]["summarize"], "summary: short(a long text)",
        "{answers:?}"
    );
    std::fs::remove_file(project.root().join("llmreplay.toml")).unwrap();

    // Live: the server runs and answers otherwise; the recording is kept and the report says so.
    let before = std::fs::read(project.cassette("demo")).unwrap();
    let live = project.run(&["--live", "mcp:demo"], &args, &[("MCP_ANSWER", "10")]);
    assert!(
        lines(&live).contains(&serde_json::json!({"add": "15", "error": false})),
        "{}",
        live.stdout
    );
    assert!(
        live.stderr.contains("live answer differs")
            || live.stderr.contains("otherwise than its recording"),
        "{}",
        live.stderr
    );
    let differs = project.report()["live_differs"].clone();
    assert_eq!(differs.as_array().map(Vec::len), Some(2), "{differs}");
    assert_eq!(
        std::fs::read(project.cassette("demo")).unwrap(),
        before,
        "live writes nothing"
    );
}

/// The contents of `path` once the server wrote it (it renames it into place whole).
fn wait_for_file(path: &Path, server: &mut std::process::Child) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            return text;
        }
        assert!(
            server.try_wait().unwrap().is_none(),
            "the MCP server exited"
        );
        assert!(
            std::time::Instant::now() < deadline,
            "the MCP server never wrote its port"
        );
        std::thread::yield_now();
    }
}

fn wait_for_port(port: u16, server: &mut std::process::Child) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            server.try_wait().unwrap().is_none(),
            "the MCP server exited"
        );
        assert!(
            std::time::Instant::now() < deadline,
            "the MCP server never listened on {port}"
        );
    }
}

/// The official Rust SDK (rmcp) as client and server in a crate under `cargo llmreplay test`:
/// one test asks the model (the fake provider) and calls a tool through a stdio server that
/// gets none of the test's variables; replayed under CI with the provider stopped and the
/// server's binary gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_agent_records_model_and_tool_then_replays_without_either() {
    let mut fake = FakeProvider::start().await;
    let sample = Sample::mcp_agent();
    let out = sample.scratch().join("answers");
    let (shim, out_s) = (binary().display().to_string(), out.display().to_string());
    let mut args = vec!["--record".to_string()];
    args.extend(upstream_args(&fake));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let env = [
        ("SAMPLE_SHIM", shim.as_str()),
        ("SAMPLE_OUT", out_s.as_str()),
    ];
    let recorded = sample.run(&args, &env);
    assert_eq!(recorded.code, Some(0), "{}", recorded.stderr);
    let answers = std::fs::read_to_string(&out).unwrap();
    assert_eq!(answers, "You said: Add 2 and 3\n5\n");
    let folder = sample
        .root
        .join("tests/cassettes/mcp_agent--agent--asks_the_model_then_calls_the_tool");
    assert!(
        folder.join("openai.json").exists() && folder.join("mcp-calc.json").exists(),
        "{}",
        recorded.stderr
    );
    assert_eq!(
        recorded.report["counts"]["recorded"], 4,
        "{}",
        recorded.report
    );
    fake.stop();
    std::fs::remove_file(&out).unwrap();

    let env = [
        ("SAMPLE_SHIM", shim.as_str()),
        ("SAMPLE_OUT", out_s.as_str()),
        ("SAMPLE_CALC", "/nonexistent/calc"),
        ("CI", "true"),
    ];
    let replayed = sample.run(&[], &env);
    assert_eq!(replayed.code, Some(0), "{}", replayed.stderr);
    assert_eq!(std::fs::read_to_string(&out).unwrap(), answers);
    assert_eq!(replayed.report["counts"]["hits"], 4, "{}", replayed.report);
    assert_eq!(
        replayed.report["unused"].as_array().unwrap().len(),
        0,
        "{}",
        replayed.report
    );

    // One test, one folder, one gate: the MCP cassette is checked, moved and pruned as any.
    commit_all(&sample.root);
    let status = sample.llmreplay(&["status", "--check"]);
    assert_eq!(status.code, Some(0), "{}{}", status.stdout, status.stderr);
    let moved = sample.llmreplay(&[
        "mv",
        "asks_the_model_then_calls_the_tool",
        "asks_then_calls",
    ]);
    assert_eq!(moved.code, Some(0), "{}", moved.stderr);
    let folder = sample
        .root
        .join("tests/cassettes/mcp_agent--agent--asks_then_calls");
    let moved_cassette = std::fs::read_to_string(folder.join("mcp-calc.json")).unwrap();
    assert!(
        moved_cassette.contains("asks_then_calls"),
        "{moved_cassette}"
    );
    sample.own_build("0.1.1");
    let source = sample.root.join("tests/agent.rs");
    let text = std::fs::read_to_string(&source).unwrap();
    std::fs::write(
        &source,
        text.replace(
            "fn asks_the_model_then_calls_the_tool",
            "fn asks_then_calls",
        ),
    )
    .unwrap();
    let renamed = sample.run(&["--deny", "unused"], &env);
    assert_eq!(renamed.code, Some(0), "{}", renamed.stderr);
    assert_eq!(renamed.report["counts"]["hits"], 4, "{}", renamed.report);

    // The agent no longer calls its tool: the tool's recordings are unused, the gate fails
    // on them, and prune removes them and nothing else.
    let mut env = env.to_vec();
    env.push(("SAMPLE_NO_TOOL", "1"));
    let denied = sample.run(&["--deny", "unused"], &env);
    assert_eq!(denied.code, Some(1), "{}", denied.stderr);
    let no_tool = sample.run(&[], &env);
    assert_eq!(no_tool.code, Some(0), "{}", no_tool.stderr);
    let unused = no_tool.report["unused"].as_array().unwrap();
    assert_eq!(
        unused.len(),
        3,
        "initialize, tools/list, tools/call: {}",
        no_tool.report
    );
    assert!(unused
        .iter()
        .all(|u| u["cassette"].as_str().unwrap().ends_with("mcp-calc.json")));
    let report = no_tool.report_path.display().to_string();
    let pruned = sample.llmreplay(&["prune", "--report", &report]);
    assert_eq!(pruned.code, Some(0), "{}", pruned.stderr);
    assert!(!folder.join("mcp-calc.json").exists(), "{}", pruned.stdout);
    assert!(folder.join("openai.json").exists());
    commit_all(&sample.root);
    let status = sample.llmreplay(&["status", "--check"]);
    assert_eq!(status.code, Some(0), "{}{}", status.stdout, status.stderr);

    // Recorded with its tool and committed, then recorded again without it: its trajectory
    // lost the tool's call, a `trajectory` drift that can break code.
    let fake = FakeProvider::start().await;
    let mut record = vec!["--record".to_string()];
    record.extend(upstream_args(&fake));
    let record: Vec<&str> = record.iter().map(String::as_str).collect();
    let with_tool = [
        ("SAMPLE_SHIM", shim.as_str()),
        ("SAMPLE_OUT", out_s.as_str()),
    ];
    let again = sample.run(&record, &with_tool);
    assert_eq!(again.code, Some(0), "{}", again.stderr);
    commit_all(&sample.root);
    let mut without_tool = with_tool.to_vec();
    without_tool.push(("SAMPLE_NO_TOOL", "1"));
    let dropped = sample.run(&record, &without_tool);
    assert_eq!(dropped.code, Some(0), "{}", dropped.stderr);
    let diff = sample.llmreplay(&["diff", "--base", "HEAD"]);
    assert_eq!(diff.code, Some(0), "{}", diff.stderr);
    assert!(
        diff.stdout
            .starts_with("1 test: 1 test's tool calls changed")
            && diff
                .stdout
                .contains("trajectory changed (strict): tools mcp calc: add -> none; steps 4 -> 1")
            && diff
                .stdout
                .contains("call 1 of the base removed: mcp calc: add"),
        "{}",
        diff.stdout
    );
    let both = sample.llmreplay(&["trajectory", "asks_then_calls", "--base", "HEAD"]);
    assert_eq!(both.code, Some(0), "{}", both.stderr);
    assert!(
        both.stdout.contains("recorded it (4 steps):")
            && both.stdout.contains(" now (1 step):")
            && both.stdout.contains("mcp   calc tools/call add"),
        "{}",
        both.stdout
    );
}

/// The shim run by hand as a client's stdio server, under `serve` recording as test `h$raw`:
/// its stdin, stdout and stderr piped to the test.
fn shim_under(serve: &crate::support::Serve, server: &str) -> std::process::Child {
    let mut cmd = Command::new(binary());
    cmd.args(["llmreplay", "mcp", "--name", "raw", "--", "python3"])
        .arg(repo().join("tests/sdk/mcp_broken").join(server))
        .env("LLMREPLAY_BASE_URL", &serve.base)
        .env("LLMREPLAY_TEST_ID", "h$raw")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    cmd.spawn().unwrap()
}

/// Waits for `child` at most `limit`; its exit code and stderr, or a failed test if it hangs.
fn ended_within(
    mut child: std::process::Child,
    limit: std::time::Duration,
) -> (Option<i32>, String) {
    let started = std::time::Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            use std::io::Read;
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            return (status.code(), err);
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            panic!("the shim did not end within {limit:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// One non-UTF-8 byte from the client used to end the shim silently with status 0: it now says
/// which side sent it and where, and fails.
#[test]
fn a_client_line_that_is_not_utf8_is_named_and_fails() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let serve =
        crate::support::Serve::in_mode(dir.path(), "record", "openai=http://127.0.0.1:9", &[]);
    let mut shim = shim_under(&serve, "latin1_answer.py");
    let mut stdin = shim.stdin.take().unwrap();
    stdin
        .write_all(b"\n{\"jsonrpc\":\"2.0\",\"method\":\"caf\xe9\"}\n")
        .unwrap();
    let (code, stderr) = ended_within(shim, std::time::Duration::from_secs(30));
    drop(stdin);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("the client (on the shim's stdin) sent a line that is not UTF-8 (line 2, byte offset 31)"),
        "{stderr}"
    );
}

/// A server's line that is not UTF-8 reaches the client byte for byte, as it would without
/// the shim; the shim names the line and offset, records nothing of it, and ends with status 1
/// (it used to drop the line, leaving the client waiting, and end 0).
#[test]
fn a_server_line_that_is_not_utf8_reaches_the_client_and_fails_the_shim() {
    use std::io::{BufRead, Write};
    let dir = tempfile::tempdir().unwrap();
    let serve =
        crate::support::Serve::in_mode(dir.path(), "record", "openai=http://127.0.0.1:9", &[]);
    let mut shim = shim_under(&serve, "latin1_answer.py");
    let mut stdin = shim.stdin.take().unwrap();
    stdin
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"params\":{}}\n")
        .unwrap();
    let stdout = shim.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = Vec::new();
        let _ = std::io::BufReader::new(stdout).read_until(b'\n', &mut line);
        let _ = tx.send(line);
    });
    let line = rx
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("the client got an answer");
    assert_eq!(
        line,
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"text\":\"caf\xe9\"}}\n"
    );
    drop(stdin);
    let (code, stderr) = ended_within(shim, std::time::Duration::from_secs(30));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "the MCP server (on its stdout) sent a line that is not UTF-8 (line 1, byte offset 45)"
        ),
        "{stderr}"
    );
    let stopped = serve.stop();
    assert!(
        !dir.path().join("c").exists()
            || crate::support::all_files(&dir.path().join("c"))
                .iter()
                .all(|(p, _)| !p.to_string_lossy().contains("mcp-raw")),
        "{}",
        stopped.stderr
    );
}

/// A server that exits at start used to leave the shim, and the official Python client behind
/// it, waiting for ever (the bare client fails in under two seconds). The shim now ends at once
/// with the server's status and the last lines of its stderr, and the run fails.
#[test]
fn a_server_that_exits_at_start_ends_the_shim_with_its_status_and_stderr() {
    let Some(project) = Project::new() else {
        return;
    };
    let args = project.demo_args(&repo().join("tests/sdk/mcp_broken/dies_at_start.py"));
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let started = std::time::Instant::now();
    let run = project.run(&["--record"], &argv, &[]);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
    assert_ne!(run.code, Some(0), "{}", run.stderr);
    assert!(
        run.stderr
            .contains("exited with status 3 while the client was still talking to it"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("| error: WEATHER_API_KEY is not set"),
        "{}",
        run.stderr
    );
}

/// A client that never sends a newline used to grow the shim's memory without bound: a line
/// is capped at `[limits] body_mib`, and past it the shim names the side and fails.
#[test]
fn a_client_line_over_the_body_limit_is_named_and_fails() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("llmreplay.toml"),
        "[limits]\nbody_mib = 0.001\n",
    )
    .unwrap();
    let serve =
        crate::support::Serve::in_mode(dir.path(), "record", "openai=http://127.0.0.1:9", &[]);
    let mut shim = shim_under(&serve, "latin1_answer.py");
    let mut stdin = shim.stdin.take().unwrap();
    stdin.write_all(b"{}\n").unwrap();
    let _ = stdin.write_all(&[b' '; 5000]);
    let (code, stderr) = ended_within(shim, std::time::Duration::from_secs(30));
    drop(stdin);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("the client (on the shim's stdin) sent a line longer than 1048 bytes (line 2, starting at byte offset 3)"),
        "{stderr}"
    );
}

/// The same for a server whose answer never ends: the shim says so and fails at once, not
/// when the server's line would end.
#[test]
fn a_server_line_over_the_body_limit_is_named_and_fails() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("llmreplay.toml"),
        "[limits]\nbody_mib = 0.001\n",
    )
    .unwrap();
    let serve =
        crate::support::Serve::in_mode(dir.path(), "record", "openai=http://127.0.0.1:9", &[]);
    let mut shim = shim_under(&serve, "endless_line.py");
    let mut stdin = shim.stdin.take().unwrap();
    stdin
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"params\":{}}\n")
        .unwrap();
    let (code, stderr) = ended_within(shim, std::time::Duration::from_secs(30));
    drop(stdin);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("the MCP server (on its stdout) sent a line longer than 1048 bytes (line 1, starting at byte offset 0)"),
        "{stderr}"
    );
    let stopped = serve.stop();
    assert!(
        !stopped.stderr.contains("the client left?"),
        "{}",
        stopped.stderr
    );
}

/// An MCP tool that answers a new access token as JSON in its result's text (a vault or an
/// auth tool), called by the official Python client through the shim with a password: the
/// password and the token reach the client live, but no file the run wrote (cassette, run
/// log, report, logs) and nothing it printed holds either; a replay with another password
/// matches and answers the placeholder token.
#[test]
fn a_tools_token_as_text_is_never_stored_and_replays_with_another_password() {
    let Some(project) = Project::new() else {
        return;
    };
    let server = server_copy(&project);
    let mut args = project.demo_args(&server);
    args[0] = "login".into();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let password = "vault-pw-live-7Hq2Xz";
    let recorded = project.run(&["--record"], &args, &[("MCP_PASSWORD", password)]);
    succeeded(&recorded);
    let answer = &lines(&recorded)[0];
    assert_eq!(answer["error"], false, "{answer}");
    let token = answer["login"]["access_token"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(token.starts_with("vault-at-"), "the live token: {answer}");
    let cassette = std::fs::read_to_string(project.cassette("vault")).unwrap();
    assert!(cassette.contains("llmreplay-redacted"), "{cassette}");
    // The token's neighbours are kept: a client still reads its kind and lifetime.
    assert!(cassette.contains("expires_in"), "{cassette}");
    commit_all(project.root());

    std::fs::remove_dir_all(server.parent().unwrap()).unwrap();
    let other = "vault-pw-rotated-4Lm9";
    let replayed = project.run(&[], &args, &[("MCP_PASSWORD", other)]);
    succeeded(&replayed);
    let again = &lines(&replayed)[0];
    assert_eq!(
        again["login"]["access_token"], "llmreplay-redacted",
        "{again}"
    );
    assert_eq!(again["login"]["expires_in"], 3600, "{again}");
    assert_eq!(project.report()["counts"]["misses"], 0);
    for (path, text) in crate::support::all_files(project.root()) {
        for secret in [password, other, token.as_str()] {
            assert!(!text.contains(secret), "{secret} in {}", path.display());
        }
    }
    for out in [&recorded.stderr, &replayed.stderr] {
        for secret in [password, other, token.as_str()] {
            assert!(!out.contains(secret), "{secret} in:\n{out}");
        }
    }
}
