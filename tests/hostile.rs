//! The daemon against hostile input and a flaky world, through the real `cargo-llmreplay serve`
//! and raw sockets on 127.0.0.1: a cassette folder another process locks, an upstream that hangs
//! or refuses the key, bodies over the limit, clients that connect and say nothing, dot segments,
//! a foreign `Host` (DNS rebinding), malformed requests, many connections at once, running out of
//! file descriptors, and a report that names a path outside the cassette directory. Each was a
//! defect once; each test fails without its fix.

mod support;

use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;
use support::{http, FakeProvider, Sample, Serve};

/// `serve` in `dir` with an `llmreplay.toml` of `config`, recording from `upstream`.
fn serve_with(dir: &Path, config: &str, mode: &str, upstream: &str) -> Serve {
    std::fs::write(dir.join("llmreplay.toml"), config).unwrap();
    Serve::in_mode(dir, mode, upstream, &[])
}

fn chat(prompt: &str) -> Value {
    json!({"model": "m", "messages": [{"role": "user", "content": prompt}]})
}

/// The daemon's `host:port`, for raw sockets.
fn addr(serve: &Serve) -> String {
    serve.base.trim_start_matches("http://").to_string()
}

/// Sends raw bytes and reads until the daemon closes or `limit` passes; the status code of the
/// first answer, if there was one.
fn raw(addr: &str, request: &[u8]) -> (Option<u16>, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(request).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|t| t.get(..3))
        .and_then(|c| c.parse().ok());
    (status, text)
}

/// A chat request of `prompt` from the test `test`, through the daemon.
async fn ask(serve: &Serve, test: &str, prompt: &str) -> reqwest::Response {
    http()
        .post(format!(
            "{}/openai/v1/chat/completions",
            serve.for_test(test)
        ))
        .json(&chat(prompt))
        .send()
        .await
        .unwrap()
}

async fn health(serve: &Serve) -> u16 {
    http()
        .get(format!("{}/__llmreplay/health", serve.base))
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .map(|r| r.status().as_u16())
        .unwrap_or(0)
}

/// While another process holds one test's cassette folder, that test's recordings wait (and
/// then fail naming the folder); health and other tests answer meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_folder_lock_delays_that_test_alone() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start().await;
    let up = format!("openai={}", fake.url());
    let serve = serve_with(dir.path(), "[limits]\nlock_timeout_s = 1\n", "record", &up);
    let locked = serve.for_test("h$locked");
    let url = |base: &str| format!("{base}/openai/v1/chat/completions");
    let first = http()
        .post(url(&locked))
        .json(&chat("one"))
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 200);
    first.bytes().await.unwrap();
    let folder = dir.path().join("c/h--locked");
    let held = std::fs::File::open(&folder).unwrap();
    held.lock().unwrap();
    // More recordings of the held test than the daemon has worker threads.
    let waiting: Vec<_> = (0..4)
        .map(|i| {
            let u = url(&locked);
            tokio::spawn(async move {
                let r = http()
                    .post(u)
                    .json(&chat(&format!("wait {i}")))
                    .send()
                    .await;
                match r {
                    Ok(r) => r.bytes().await.is_ok(),
                    Err(_) => false,
                }
            })
        })
        .collect();
    assert_eq!(health(&serve).await, 200, "health answers meanwhile");
    let other = http()
        .post(url(&serve.for_test("h$free")))
        .timeout(Duration::from_secs(10))
        .json(&chat("free"))
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 200, "another test records meanwhile");
    other.bytes().await.unwrap();
    for w in waiting {
        assert!(
            !w.await.unwrap(),
            "an answer that could not be saved fails the read"
        );
    }
    let journal = serve.journal().await;
    let errors: Vec<&Value> = journal
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["outcome"] == "error")
        .collect();
    assert_eq!(errors.len(), 4, "{journal}");
    let message = errors[0]["message"].as_str().unwrap();
    assert!(
        message.contains("h--locked") && message.contains("lock"),
        "{message}"
    );
    held.unlock().unwrap();
    let again = http()
        .post(url(&locked))
        .json(&chat("after"))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 200);
    again.bytes().await.unwrap();
    serve.stop();
}

/// An upstream that accepts and never answers gets a 504 in the provider's shape after
/// `[upstream] idle_timeout_s`, and nothing is saved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_hangs_gets_a_504_and_nothing_is_saved() {
    let dir = tempfile::tempdir().unwrap();
    let hang = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let up = format!("openai=http://{}", hang.local_addr().unwrap());
    let held = std::thread::spawn(move || {
        let (socket, _) = hang.accept().unwrap();
        let mut buf = [0u8; 1024];
        let mut s = socket;
        // Reads the request, says nothing, keeps the connection until the daemon drops it.
        while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
    });
    let serve = serve_with(
        dir.path(),
        "[upstream]\nidle_timeout_s = 0.5\n",
        "record",
        &up,
    );
    let resp = ask(&serve, "h$hang", "anyone?").await;
    assert_eq!(resp.status(), 504);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(
        body["error"]["code"], "llmreplay_upstream_timeout",
        "{body}"
    );
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("idle_timeout_s"));
    serve.stop();
    held.join().unwrap();
    assert!(!dir.path().join("c/h--hang").exists(), "nothing saved");
}

/// A wrong key is passed on and never saved, with a hint to check the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_key_is_passed_on_not_saved_and_explained() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start().await;
    let up = format!("openai={}", fake.url());
    let serve = serve_with(dir.path(), "", "record", &up);
    let resp = ask(&serve, "h$key", "AUTH401 please").await;
    assert_eq!(resp.status(), 401);
    let stopped = serve.stop();
    assert!(!dir.path().join("c/h--key").exists(), "a 401 is not saved");
    assert!(
        stopped.stderr.contains("answered 401") && stopped.stderr.contains("OPENAI_API_KEY"),
        "{}",
        stopped.stderr
    );
}

/// Bodies over `[limits] body_mib` get a 413 in the provider's shape, whether they say their
/// length or stream it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_the_limit_gets_413() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start().await;
    let up = format!("openai={}", fake.url());
    let serve = serve_with(dir.path(), "[limits]\nbody_mib = 0.001\n", "record", &up);
    let url = format!("{}/openai/v1/chat/completions", serve.for_test("h$big"));
    let big = chat(&"x".repeat(2048));
    let resp = http().post(&url).json(&big).send().await.unwrap();
    assert_eq!(resp.status(), 413);
    let body: Value = resp.json().await.unwrap();
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("body_mib"));
    let chunks = futures_util::stream::iter(
        (0..4).map(|_| Ok::<_, std::io::Error>(bytes::Bytes::from(vec![b' '; 600]))),
    );
    let streamed = http()
        .post(&url)
        .body(reqwest::Body::wrap_stream(chunks))
        .send()
        .await
        .unwrap();
    assert_eq!(
        streamed.status(),
        413,
        "no content-length: counted as it comes"
    );
    assert!(fake.received().is_empty());
    serve.stop();
}

/// A client that connects and sends no whole request head is dropped after
/// `[limits] header_read_timeout_s`; so is an idle kept-alive connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_and_idle_connections_are_closed() {
    let dir = tempfile::tempdir().unwrap();
    let serve = serve_with(
        dir.path(),
        "[limits]\nheader_read_timeout_s = 0.5\n",
        "replay",
        "openai=http://127.0.0.1:9",
    );
    for opening in [
        &b""[..],
        b"GET /__llmreplay/health HTTP/1.1\r\nHost: 127.0.0.1\r\n",
    ] {
        let mut s = TcpStream::connect(addr(&serve)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s.write_all(opening).unwrap();
        let mut out = Vec::new();
        // The daemon closes the connection (end of file), rather than the read timing out.
        s.read_to_end(&mut out).expect("closed by the daemon");
        assert!(!String::from_utf8_lossy(&out).contains(" 200 "));
    }
    // Kept alive after an answer, then silent: closed as well.
    let mut s = TcpStream::connect(addr(&serve)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(
        format!(
            "GET /__llmreplay/health HTTP/1.1\r\nHost: {}\r\n\r\n",
            addr(&serve)
        )
        .as_bytes(),
    )
    .unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out)
        .expect("closed by the daemon once idle");
    assert!(String::from_utf8_lossy(&out).starts_with("HTTP/1.1 200"));
    serve.stop();
}

/// `..` in a path would climb out of the upstream's prefix: refused, and nothing goes upstream.
/// A `Host` that is not this daemon's loopback name is refused: a web page reaching the daemon
/// through DNS rebinding names its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dot_segments_and_foreign_hosts_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start().await;
    let up = format!("openai={}", fake.url());
    let serve = serve_with(dir.path(), "", "record", &up);
    let a = addr(&serve);
    for path in [
        "/t/h%24dots/openai/v1/../../admin",
        "/openai/v1/%2e%2e/secrets",
    ] {
        let req = format!("POST {path} HTTP/1.1\r\nHost: {a}\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}");
        let (status, text) = raw(&a, req.as_bytes());
        assert_eq!(status, Some(400), "{text}");
    }
    assert!(fake.received().is_empty(), "nothing went upstream");
    for host in ["evil.example", "evil.example:80", "127.0.0.1:1"] {
        for path in ["/__llmreplay/journal", "/openai/v1/models"] {
            let req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
            let (status, text) = raw(&a, req.as_bytes());
            assert_eq!(status, Some(403), "{host}{path}: {text}");
        }
    }
    let port = a.rsplit(':').next().unwrap();
    let req = format!(
        "GET /__llmreplay/health HTTP/1.1\r\nHost: localhost:{port}\r\nConnection: close\r\n\r\n"
    );
    assert_eq!(raw(&a, req.as_bytes()).0, Some(200));
    serve.stop();
}

/// Malformed requests get clear answers, HTTP/1.0 and pipelined requests are served, a thousand
/// connections at once are all answered, and the daemon keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_and_crowded_requests_are_answered() {
    let dir = tempfile::tempdir().unwrap();
    let serve = serve_with(dir.path(), "", "replay", "openai=http://127.0.0.1:9");
    let a = addr(&serve);
    let post = |body: &[u8], ct: &str| {
        let mut r = format!(
            "POST /t/h%24bad/openai/v1/chat/completions HTTP/1.1\r\nHost: {a}\r\nContent-Type: {ct}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .into_bytes();
        r.extend_from_slice(body);
        r
    };
    let deep = format!("{}{}", "[".repeat(5000), "]".repeat(5000));
    for (body, ct) in [
        (&b"{not json"[..], "application/json"),
        (b"\xff\xfe\x00{", "application/json"),
        (b"", "application/json"),
        (deep.as_bytes(), "application/json"),
        (b"{}", "text/plain"),
        (b"--x\r\nnot multipart", "multipart/form-data; boundary=x"),
    ] {
        let (status, text) = raw(&a, &post(body, ct));
        // Replay with nothing recorded: a miss in OpenAI's shape, whatever the body.
        assert_eq!(status, Some(404), "{text}");
        assert!(text.contains("llmreplay_missing_recording"), "{text}");
    }
    let (status, text) = raw(&a, b"GET /__llmreplay/health HTTP/1.0\r\n\r\n");
    assert_eq!(
        status.or_else(|| text.get(9..12).and_then(|c| c.parse().ok())),
        Some(200),
        "{text}"
    );
    let (_, text) = raw(&a, b"NOT HTTP AT ALL\r\n\r\n");
    assert!(!text.contains(" 200 "), "{text}");
    let two = format!("GET /__llmreplay/health HTTP/1.1\r\nHost: {a}\r\n\r\nGET /__llmreplay/stats HTTP/1.1\r\nHost: {a}\r\nConnection: close\r\n\r\n");
    let (_, text) = raw(&a, two.as_bytes());
    assert_eq!(text.matches("HTTP/1.1 200").count(), 2, "pipelined: {text}");

    let crowd: Vec<_> = (0..1000)
        .map(|_| {
            let a = a.clone();
            tokio::task::spawn_blocking(move || {
                let req = format!(
                    "GET /__llmreplay/health HTTP/1.1\r\nHost: {a}\r\nConnection: close\r\n\r\n"
                );
                raw(&a, req.as_bytes()).0
            })
        })
        .collect();
    for c in crowd {
        assert_eq!(c.await.unwrap(), Some(200));
    }
    assert_eq!(health(&serve).await, 200);
    serve.stop();
}

/// CPU seconds the process has used, from /proc.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = stat.rsplit(')').next().unwrap();
    let fields: Vec<&str> = after.split_whitespace().collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// Out of file descriptors, the accept loop backs off instead of spinning, and health answers
/// again once descriptors free up.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_out_of_file_descriptors_does_not_spin() {
    let dir = tempfile::tempdir().unwrap();
    let binary = support::binary();
    let mut child = std::process::Command::new("sh")
        .args([
            "-c",
            "ulimit -n 48 && exec \"$0\" llmreplay serve --cassette-dir c",
        ])
        .arg(&binary)
        .current_dir(dir.path())
        .env_remove("CI")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let a = line
        .trim()
        .trim_start_matches("LLMREPLAY_BASE_URL=http://")
        .to_string();
    // More idle connections than the daemon has descriptors.
    let held: Vec<TcpStream> = (0..80)
        .filter_map(|_| TcpStream::connect(&a).ok())
        .collect();
    assert!(held.len() >= 48);
    let before = cpu_ticks(child.id());
    std::thread::sleep(Duration::from_secs(1));
    let spent = cpu_ticks(child.id()) - before;
    assert!(
        spent < 40,
        "{spent} ticks of CPU in one second: the accept loop spins"
    );
    drop(held);
    let req = format!("GET /__llmreplay/health HTTP/1.1\r\nHost: {a}\r\nConnection: close\r\n\r\n");
    let mut answered = None;
    // Freed descriptors are seen at the next accept after the back-off (at most a second).
    for _ in 0..50 {
        if let (Some(s), _) = raw(&a, req.as_bytes()) {
            answered = Some(s);
            break;
        }
    }
    assert_eq!(answered, Some(200));
    child.kill().unwrap();
    child.wait().unwrap();
}

/// A report that names a folder outside the cassette directory makes prune remove nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_never_removes_outside_the_cassette_dir() {
    let fake = FakeProvider::start().await;
    let sample = Sample::new();
    let rec = sample.record_all(&fake);
    let victim = sample.root.join("victim");
    std::fs::create_dir_all(&victim).unwrap();
    std::fs::write(victim.join("openai.json"), b"{}").unwrap();
    let mut report: Value =
        serde_json::from_str(&std::fs::read_to_string(&rec.report_path).unwrap()).unwrap();
    let cassettes = report["cassette_dir"].as_str().unwrap().to_string();
    report["unused"]
        .as_array_mut()
        .unwrap()
        .push(json!({"kind": "folder", "folder": format!("{cassettes}/../../victim")}));
    std::fs::write(&rec.report_path, report.to_string()).unwrap();
    let out = sample.llmreplay(&["prune", "--report", rec.report_path.to_str().unwrap()]);
    assert_ne!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr.contains("outside") || out.stderr.contains("not a cassette folder"),
        "{}",
        out.stderr
    );
    assert!(
        victim.join("openai.json").exists(),
        "the victim is untouched"
    );
}

/// Every cassette file below `dir` parses; returns how many there are.
fn all_parse(dir: &Path) -> usize {
    let files = cassettes::cassette_files(dir).unwrap();
    for f in &files {
        cassettes::read_cassette(f).unwrap_or_else(|e| panic!("{e}"));
    }
    files.len()
}

/// `kill -9` of a recording daemon in the middle of a stream: what was saved before still
/// parses, nothing half-written is left, and recording again saves what was lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recording_daemon_killed_mid_stream_loses_only_that_answer() {
    use futures_util::StreamExt;
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start().await;
    let up = format!("openai={}", fake.url());
    let serve = Serve::recording(dir.path(), &up);
    let url = format!("{}/openai/v1/chat/completions", serve.for_test("h$killed"));
    let saved = http().post(&url).json(&chat("kept")).send().await.unwrap();
    saved.bytes().await.unwrap();
    let release = std::sync::Arc::new(tokio::sync::Notify::new());
    *fake.state.hold.lock().unwrap() = Some(release.clone());
    let streamed = json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "cut short"}]});
    let mut stream = http()
        .post(&url)
        .json(&streamed)
        .send()
        .await
        .unwrap()
        .bytes_stream();
    stream.next().await.unwrap().unwrap();
    // SIGKILL, with the stream half-way.
    drop(serve);
    // Taken out of the fake so the next run's re-recording is not held as well; notify_one
    // leaves a permit if the held stream is already gone.
    fake.state.hold.lock().unwrap().take();
    release.notify_one();
    assert_eq!(all_parse(&dir.path().join("c")), 1);
    let leftovers: Vec<_> = std::fs::read_dir(dir.path().join("c/h--killed"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    let again = Serve::start(
        dir.path(),
        &[
            "--cassette-dir",
            "c",
            "--mode",
            "record-missing",
            "--upstream",
            &up,
        ],
    );
    let url = format!("{}/openai/v1/chat/completions", again.for_test("h$killed"));
    for body in [chat("kept"), streamed] {
        let r = http().post(&url).json(&body).send().await.unwrap();
        assert_eq!(r.status(), 200);
        r.bytes().await.unwrap();
    }
    let stopped = again.stop();
    assert!(
        stopped.stderr.contains("1 replayed, 0 missing, 1 recorded"),
        "{}",
        stopped.stderr
    );
    let file = support::read_json(&dir.path().join("c/h--killed/openai.json"));
    assert_eq!(file["interactions"].as_array().unwrap().len(), 2);
}

/// `kill -9` of `cargo llmreplay test` (and its whole process group) in the middle of a
/// recording run: every cassette parses, and the next run records what was lost.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recording_run_killed_mid_way_leaves_files_that_parse() {
    use std::os::unix::process::CommandExt;
    let fake = FakeProvider::start().await;
    let sample = Sample::new();
    let state = tempfile::tempdir().unwrap();
    let mut args: Vec<String> = ["llmreplay", "test", "--record-missing", "--retries", "1"]
        .iter()
        .map(|a| a.to_string())
        .collect();
    args.extend(support::upstream_args(&fake));
    let mut child = sample
        .command(support::binary())
        .args(&args)
        .env("SAMPLE_BLOCK", state.path())
        .env("SAMPLE_STATE_DIR", state.path())
        .process_group(0)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = state.path().join("started");
    let deadline = std::time::Instant::now() + Duration::from_secs(300);
    while !started.exists() {
        assert!(child.try_wait().unwrap().is_none(), "the run ended first");
        assert!(
            std::time::Instant::now() < deadline,
            "the test never started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let killed = std::process::Command::new("kill")
        .args(["-KILL", "--", &format!("-{}", child.id())])
        .status()
        .unwrap();
    assert!(killed.success());
    child.wait().unwrap();
    let cassettes = sample.root.join("tests/cassettes");
    all_parse(&cassettes);

    let rest: Vec<&str> = args[2..].iter().map(String::as_str).collect();
    let run = sample.run(&rest, &[]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(
        all_parse(&cassettes),
        5,
        "every test that calls a provider has its cassette"
    );
}

/// An upstream that answers with something that is not HTTP: a 502 in the provider's shape,
/// nothing saved, and the daemon keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_answers_garbage_gets_a_502() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let up = format!("openai=http://{}", garbage.local_addr().unwrap());
    std::thread::spawn(move || {
        for socket in garbage.incoming() {
            let mut s = socket.unwrap();
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = s.write_all(b"\x00\xffNOT HTTP\r\n\r\ngarbage");
        }
    });
    let serve = serve_with(dir.path(), "", "record", &up);
    let resp = ask(&serve, "h$garbage", "hello?").await;
    assert_eq!(resp.status(), 502);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(
        body["error"]["code"], "llmreplay_upstream_unreachable",
        "{body}"
    );
    assert_eq!(health(&serve).await, 200);
    serve.stop();
    assert!(!dir.path().join("c/h--garbage").exists());
}

/// Two `--record` runs of one suite at once: the folder locks serialise their writes, and every
/// cassette holds exactly the interactions one run gives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_concurrent_recording_runs_lose_nothing() {
    let fake = FakeProvider::start().await;
    let sample = Sample::new();
    let mut args = vec!["--record".to_string(), "--retries".into(), "1".into()];
    args.extend(support::upstream_args(&fake));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| sample.run(&args, &[]));
        let b = s.spawn(|| sample.run(&args, &[]));
        (a.join().unwrap(), b.join().unwrap())
    });
    assert_eq!(a.code, Some(0), "{}", a.stderr);
    assert_eq!(b.code, Some(0), "{}", b.stderr);
    let count = |slug: &str, provider: &str| {
        let c = cassettes::read_cassette(&sample.cassette(slug, provider)).unwrap();
        c.interactions.len()
    };
    assert_eq!(count("sample--chat--answers_hello", "openai"), 1);
    assert_eq!(count("sample--chat--answers_twice", "openai"), 2);
    assert_eq!(count("sample--chat--asks_claude", "anthropic"), 1);
    assert_eq!(count("sample--chat--retries_once", "openai"), 1);
    assert_eq!(count("sample--chat--plain_cargo_test", "openai"), 1);
}

/// A provider that never accepts the connection (its backlog full) gets a 504 after
/// `[upstream] connect_timeout_s`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_does_not_accept_gets_a_504() {
    let dir = tempfile::tempdir().unwrap();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = socket.local_addr().unwrap();
    let listener = socket.listen(1).unwrap();
    // Never accepted: these fill the backlog, and the kernel drops later connection attempts.
    let fill: Vec<_> = (0..8)
        .filter_map(|_| {
            let s = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200));
            s.ok()
        })
        .collect();
    assert!(!fill.is_empty());
    let up = format!("openai=http://{addr}");
    let serve = serve_with(
        dir.path(),
        "[upstream]\nconnect_timeout_s = 0.5\n",
        "record",
        &up,
    );
    let resp = ask(&serve, "h$backlog", "knock knock").await;
    assert_eq!(resp.status(), 504);
    let body: Value = resp.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("connect_timeout_s"),
        "{body}"
    );
    serve.stop();
    drop(listener);
}
