//! End-to-end tests of capture: the daemon as each test's HTTPS proxy. The capture sample's
//! tests call hard-coded hosts with real clients (Mistral's Python SDK, requests, curl, a Rust
//! reqwest client, an OpenAI Realtime session through the official SDK); fake upstreams on
//! 127.0.0.1 behind a private CA stand in for the real hosts, mapped with `--upstream HOST=URL`.

use crate::support::{read_json, sdk_python, FakeProvider, FakeRealtime, Sample, TestCa};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What each test printed, by name.
fn outputs(dir: &Path) -> BTreeMap<String, String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read_to_string(&p).unwrap(),
            )
        })
        .collect()
}

fn folder(sample: &Sample, test: &str) -> PathBuf {
    sample
        .root
        .join("tests/cassettes")
        .join(format!("capture--capture--{test}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hard_coded_hosts_are_recorded_through_the_proxy_and_replayed_offline() {
    let Some(python) = sdk_python("mistralai") else {
        return;
    };
    let ca = TestCa::new("capture");
    let fake = FakeProvider::start_tls(&ca).await;
    let registry = FakeProvider::start_tls(&ca).await;
    let mut realtime = FakeRealtime::start().await;
    let sample = Sample::capture();
    ca.trusted_by(
        &sample.root,
        sample.scratch(),
        "\n[capture]\npass = [\"registry.example\"]\n",
    );
    let tls_fake = format!("https://127.0.0.1:{}", fake.addr.port());
    let mut record: Vec<String> = vec!["--record".into()];
    for host in ["api.mistral.ai", "tools.example", "api.anthropic.com"] {
        record.push("--upstream".into());
        record.push(format!("{host}={tls_fake}"));
    }
    record.push("--upstream".into());
    record.push(format!(
        "registry.example=https://127.0.0.1:{}",
        registry.addr.port()
    ));
    record.push("--upstream".into());
    record.push(format!("api.openai.com={}", realtime.url()));
    let scripts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/sdk");
    let env = |out: &Path| -> Vec<(String, String)> {
        vec![
            ("SAMPLE_PYTHON".into(), python.display().to_string()),
            ("SAMPLE_SCRIPTS".into(), scripts.display().to_string()),
            ("SAMPLE_OUT".into(), out.display().to_string()),
        ]
    };
    let recorded_out = sample.scratch().join("recorded");
    std::fs::create_dir_all(&recorded_out).unwrap();
    let mut env_record = env(&recorded_out);
    // Recording goes out through the developer's own proxy, read before the tests' variables
    // name the daemon instead.
    let company_proxy = crate::support::Tinyproxy::start(None);
    if let Some(p) = &company_proxy {
        env_record.push(("HTTPS_PROXY".into(), p.url(None)));
    }
    let env_refs: Vec<(&str, &str)> = env_record
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let args: Vec<&str> = record.iter().map(String::as_str).collect();
    let run = sample.run(&args, &env_refs);
    assert_eq!(run.code, Some(0), "{}", run.stderr);

    // Each host in its test's folder: a family's host under the family, any other by name.
    for (test, file) in [
        ("mistral_sdk_unchanged", "mistral"),
        ("requests_to_a_tool_api", "tools.example"),
        ("curl_to_a_tool_api", "tools.example"),
        ("reqwest_with_a_hard_coded_url", "anthropic"),
        ("realtime_session_through_the_proxy", "openai"),
    ] {
        let path = folder(&sample, test).join(format!("{file}.json"));
        assert!(
            path.is_file(),
            "{} missing:\n{}",
            path.display(),
            run.stderr
        );
    }
    let mistral = read_json(&folder(&sample, "mistral_sdk_unchanged").join("mistral.json"));
    assert_eq!(
        mistral["interactions"][0]["request"]["path"],
        "/v1/chat/completions"
    );
    let secrets = std::fs::read_to_string(
        folder(&sample, "reqwest_with_a_hard_coded_url").join("anthropic.json"),
    )
    .unwrap();
    assert!(
        !secrets.contains("sk-ant-not-a-real-key"),
        "no key in a cassette"
    );
    // Two tests calling one host at once keep their cassettes apart.
    for (test, who) in [("parallel_one", "one"), ("parallel_two", "two")] {
        let c = read_json(&folder(&sample, test).join("tools.example.json"));
        assert_eq!(c["interactions"].as_array().unwrap().len(), 1);
        assert_eq!(c["interactions"][0]["request"]["body"]["who"], who);
    }
    if let Some(p) = &company_proxy {
        let connect = format!("CONNECT 127.0.0.1:{}", fake.addr.port());
        assert!(p.log().contains(&connect), "{connect:?} in\n{}", p.log());
    }
    // A pass host: tunnelled to its (stand-in) server, nothing recorded.
    assert!(!folder(&sample, "a_pass_host_is_tunnelled").exists());
    assert_eq!(registry.received().len(), 1);
    // Nothing leaves unseen: the tunnel is in the report and the summary.
    assert_eq!(
        run.report["passed_through"],
        serde_json::json!([{"test": "capture::capture$a_pass_host_is_tunnelled", "host": "registry.example:443", "tunnels": 1}]),
        "{}",
        run.report
    );
    assert!(run.stderr.contains("passed through (1)"), "{}", run.stderr);
    // And in the run log, as an exchange that ended as it opened.
    let events = std::fs::read_to_string(run.report["run_log"].as_str().unwrap()).unwrap();
    let tunnels: Vec<&str> = events
        .lines()
        .filter(|l| l.contains(r#""transport":"tunnel""#))
        .collect();
    assert_eq!(tunnels.len(), 1, "{events}");
    assert!(
        tunnels[0].contains(r#""path":"registry.example:443""#)
            && tunnels[0].contains(r#""outcome":"passthrough""#),
        "{}",
        tunnels[0]
    );

    // Replay: offline, the stand-in hosts untouched, every answer byte for byte.
    let seen = fake.received().len();
    realtime.stop();
    let replayed_out = sample.scratch().join("replayed");
    std::fs::create_dir_all(&replayed_out).unwrap();
    let env_replay = env(&replayed_out);
    let mut env_refs: Vec<(&str, &str)> = env_replay
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    env_refs.push(("CI", "true"));
    // The pass host is really called in replay too: it still needs its stand-in.
    let registry_at = format!(
        "registry.example=https://127.0.0.1:{}",
        registry.addr.port()
    );
    let replay = sample.run(
        &["--deny", "escaped", "--upstream", &registry_at],
        &env_refs,
    );
    assert_eq!(replay.code, Some(0), "{}", replay.stderr);
    assert_eq!(fake.received().len(), seen, "replay never reaches a host");
    let (recorded, replayed) = (outputs(&recorded_out), outputs(&replayed_out));
    assert_eq!(recorded.len(), 8, "{recorded:#?}");
    for (name, text) in &recorded {
        if name == "pass" {
            continue; // a pass host is really called, each time
        }
        assert_eq!(
            replayed.get(name),
            Some(text),
            "{name} replays byte for byte"
        );
    }

    // A host nothing recorded: answered as missing, never sent, listed as escaped.
    env_refs.push(("SAMPLE_NEW_HOST", "1"));
    let escaped = sample.run(
        &["--deny", "escaped", "--upstream", &registry_at],
        &env_refs,
    );
    assert_eq!(escaped.code, Some(1), "{}", escaped.stderr);
    assert_eq!(
        escaped.report["escaped"][0]["host"], "new-host.example",
        "{}",
        escaped.report
    );
    assert_eq!(
        escaped.report["escaped"][0]["test"],
        "capture::capture$maybe_calls_a_new_host"
    );
    assert!(
        escaped
            .stderr
            .contains("escaped (1): calls captured on their way to a host with no recording"),
        "{}",
        escaped.stderr
    );
    assert_eq!(fake.received().len(), seen);
    // Answered as missing fails the run, though the test swallowed the error.
    let swallowed = sample.run(&["--upstream", &registry_at], &env_refs);
    assert_eq!(
        swallowed.code,
        Some(1),
        "without --deny escaped: {}",
        swallowed.stderr
    );
}

/// Sends `request` on `stream` and reads one answer's head (up to the blank line).
pub(crate) fn exchange(stream: &mut std::net::TcpStream, request: &str) -> String {
    use std::io::{BufRead, BufReader, Write};
    stream.write_all(request.as_bytes()).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut head = String::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        head.push_str(&line);
        if line == "\r\n" || line.is_empty() {
            break;
        }
    }
    // The challenge's body, so the next request starts clean.
    if let Some(len) = head.lines().find_map(|l| {
        l.to_ascii_lowercase()
            .strip_prefix("content-length: ")
            .map(|n| n.trim().parse::<usize>().unwrap())
    }) {
        let mut body = vec![0; len];
        std::io::Read::read_exact(&mut reader, &mut body).unwrap();
    }
    head
}

/// A proxy request with no credentials is challenged once per connection; one that still has
/// none is filed under `default`. `[capture] enabled = false` makes the daemon no proxy, and
/// `serve --env` names it as the proxy only when it is one.
#[test]
fn no_credentials_are_challenged_then_default_and_capture_can_be_off() {
    let dir = tempfile::tempdir().unwrap();
    let serve = crate::support::Serve::start(dir.path(), &["--cassette-dir", "c"]);
    let addr = serve.base.trim_start_matches("http://").to_string();
    let mut stream = std::net::TcpStream::connect(&addr).unwrap();
    let connect = "CONNECT tools.example:443 HTTP/1.1\r\nHost: tools.example:443\r\n\r\n";
    let first = exchange(&mut stream, connect);
    assert!(first.starts_with("HTTP/1.1 407"), "{first}");
    assert!(
        first
            .to_ascii_lowercase()
            .contains("proxy-authenticate: basic realm=\"cargo-llmreplay\""),
        "{first}"
    );
    let second = exchange(&mut stream, connect);
    assert!(second.starts_with("HTTP/1.1 200"), "{second}");
    // Credentials that name a test without the run's secret name none: challenged.
    let mut forged = std::net::TcpStream::connect(&addr).unwrap();
    let basic = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        "azo6dCR4:".as_bytes(),
    );
    let forged_connect = format!(
        "CONNECT tools.example:443 HTTP/1.1\r\nHost: tools.example:443\r\nProxy-Authorization: Basic {basic}\r\n\r\n"
    );
    let answer = exchange(&mut forged, &forged_connect);
    assert!(answer.starts_with("HTTP/1.1 407"), "{answer}");

    let off = tempfile::tempdir().unwrap();
    std::fs::write(
        off.path().join("llmreplay.toml"),
        "[capture]\nenabled = false\n",
    )
    .unwrap();
    let serve = crate::support::Serve::start(off.path(), &["--cassette-dir", "c"]);
    let mut stream =
        std::net::TcpStream::connect(serve.base.trim_start_matches("http://")).unwrap();
    let refused = exchange(&mut stream, connect);
    assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");

    let env = |dir: &Path| {
        let (mut child, lines) = crate::clients::serve_env(
            dir,
            &["--test-id", "k::t$x", "--cassette-dir", "c"],
            &[("CARGO_TARGET_DIR", dir.join("target").to_str().unwrap())],
        );
        let _ = child.kill();
        let _ = child.wait();
        lines
    };
    let on = env(dir.path());
    let token = "azo6dCR4"; // base64url of k::t$x
    let proxy = on
        .lines()
        .find_map(|l| l.strip_prefix("export HTTPS_PROXY="))
        .unwrap_or_else(|| panic!("HTTPS_PROXY in {on}"));
    let creds = proxy
        .trim_matches('\'')
        .strip_prefix(&format!("http://{token}:"))
        .unwrap_or_else(|| panic!("{proxy}"));
    let (secret, at) = creds.split_once('@').unwrap();
    assert!(
        secret.len() == 32 && secret.bytes().all(|b| b.is_ascii_hexdigit()),
        "a per-run secret beside the test: {proxy}"
    );
    assert!(at.starts_with("127.0.0.1:"), "{proxy}");
    for var in [
        "SSL_CERT_FILE",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "AWS_CA_BUNDLE",
        "NODE_EXTRA_CA_CERTS",
    ] {
        let line = on
            .lines()
            .find(|l| l.starts_with(&format!("export {var}=")))
            .unwrap_or_else(|| panic!("{var} in {on}"));
        let path = line.split_once('=').unwrap().1.trim_matches('\'');
        let pem = std::fs::read_to_string(path).unwrap();
        assert!(pem.contains("BEGIN CERTIFICATE"), "{var}: {path}");
    }
    assert!(on.contains("export NODE_USE_ENV_PROXY=1"), "{on}");
    assert!(
        !env(dir.path()).contains(secret),
        "each run has its own secret"
    );
    // The CA files of a serve that is gone are removed by the next: one run's are left.
    let runs = std::fs::read_dir(dir.path().join("target/llmreplay"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().starts_with("run-"))
        })
        .count();
    assert_eq!(runs, 1);
    assert!(
        !env(off.path()).contains("HTTPS_PROXY"),
        "capture off: no proxy"
    );
}

/// A captured call whose host cannot be reached names the fix that applies to it: its host's
/// `--upstream`, not its family's.
#[test]
fn an_unreachable_captured_host_names_its_own_upstream_flag() {
    use std::io::Read;
    let dir = tempfile::tempdir().unwrap();
    let serve = crate::support::Serve::recording_from(dir.path(), &[]);
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let mut stream =
        std::net::TcpStream::connect(serve.base.trim_start_matches("http://")).unwrap();
    let request = format!("GET http://{closed}/search?q=x HTTP/1.1\r\nHost: {closed}\r\n\r\n");
    let challenged = exchange(&mut stream, &request);
    assert!(challenged.starts_with("HTTP/1.1 407"), "{challenged}");
    use std::io::Write;
    let closing = format!(
        "GET http://{closed}/search?q=x HTTP/1.1\r\nHost: {closed}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(closing.as_bytes()).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 502"), "{answer}");
    assert!(
        answer.contains("Check --upstream 127.0.0.1=URL"),
        "the host's own flag: {answer}"
    );
    assert!(!answer.contains("[providers."), "{answer}");
}
