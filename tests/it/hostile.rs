//! The daemon against hostile input and a flaky world, through the real `cargo-llmreplay serve`
//! and raw sockets on 127.0.0.1: a cassette folder another process locks, an upstream that hangs
//! or refuses the key, bodies over the limit, clients that connect and say nothing, dot segments,
//! a foreign `Host` (DNS rebinding), malformed requests, many connections at once, running out of
//! file descriptors, and a report that names a path outside the cassette directory. Each was a
//! defect once; each test fails without its fix.

use crate::support::{http, FakeProvider, Sample, Serve};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

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

/// While another process holds one test's cassette folder, that test's recordings go on
/// (they wait for nothing but their spool); writing them to the folder waits, then fails naming
/// the folder and keeps every recording, and a later write puts them all in.
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
    serve.flush().await;
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
                    .timeout(Duration::from_secs(10))
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
        assert!(w.await.unwrap(), "a held folder delays no recording");
    }
    let refused = http()
        .post(format!("{}/__llmreplay/flush", serve.base))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 500);
    let message = refused.text().await.unwrap();
    assert!(
        message.contains("h--locked") && message.contains("lock"),
        "{message}"
    );
    held.unlock().unwrap();
    serve.flush().await;
    let file = crate::support::read_json(&folder.join("openai.json"));
    assert_eq!(
        file["interactions"].as_array().unwrap().len(),
        5,
        "every recording kept while the folder was held: {file}"
    );
    let stopped = serve.stop();
    assert!(stopped.status.success(), "{}", stopped.stderr);
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
    let binary = crate::support::binary();
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
    // The whole answer is in the run's spool, not yet in a cassette; nothing half-written.
    assert_eq!(all_parse(&dir.path().join("c")), 0);
    let leftovers: Vec<_> = std::fs::read_dir(dir.path().join("c/h--killed"))
        .into_iter()
        .flatten()
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
        stopped.stderr.contains(": 1 replayed, 1 recorded"),
        "{}",
        stopped.stderr
    );
    // The next run began by applying what the killed one left.
    assert!(
        stopped
            .stderr
            .contains("left recordings: added 1 recording of 1 test to their cassettes"),
        "{}",
        stopped.stderr
    );
    let file = crate::support::read_json(&dir.path().join("c/h--killed/openai.json"));
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
    args.extend(crate::support::upstream_args(&fake));
    let mut child = sample
        .command(crate::support::binary())
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
    args.extend(crate::support::upstream_args(&fake));
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

// The third hostile round: secrets on the WebSocket and upstream paths, confinement of blob
// reads and removals, bounded memory, honest sessions, faults per attempt, sealed answers and
// commands that paste safely.

/// A port nothing listens on.
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// The daemon's `ws://` base for a test.
fn ws_base(serve: &Serve, test: &str) -> String {
    serve.for_test(test).replacen("http://", "ws://", 1)
}

/// Everything the daemon wrote that a stranger could read: the journal, and the files under
/// `dir`.
async fn written(serve: &Serve, dir: &Path) -> String {
    let mut all = serve.journal().await.to_string();
    for (path, text) in crate::support::all_files(dir) {
        all.push_str(&format!("\n{}\n{text}", path.display()));
    }
    all
}

/// A Gemini Live key in the upgrade URL, a replay miss and a recording whose upstream cannot
/// be reached: no secret in the error event, the 502, the journal, the report or stderr.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_misses_and_failures_leak_no_secret() {
    use futures_util::StreamExt;
    let dir = tempfile::tempdir().unwrap();
    let replay = Serve::replaying(dir.path());
    let url = format!(
        "{}/gemini/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent?key=LIVEKEY-77f1",
        ws_base(&replay, "h$live")
    );
    let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
    let mut seen = String::new();
    while let Some(Ok(m)) = ws.next().await {
        seen.push_str(&m.to_string());
    }
    assert!(seen.contains("no recording"), "{seen}");
    let journal = written(&replay, dir.path()).await;
    let stopped = replay.stop();
    for (what, text) in [
        ("event", &seen),
        ("journal", &journal),
        ("stderr", &stopped.stderr),
    ] {
        assert!(!text.contains("LIVEKEY"), "{what}: {text}");
    }
    assert!(seen.contains("key=***"), "{seen}");

    let rec = Serve::in_mode(
        dir.path(),
        "record",
        &format!("openai=http://127.0.0.1:{}", closed_port()),
        &[],
    );
    let url = format!(
        "{}/openai/v1/realtime?model=m&key=K1-aa&api_key=K2-bb&k%65y=K3-cc&access_token=K4-dd",
        ws_base(&rec, "h$rt")
    );
    let refused = match tokio_tungstenite::connect_async(url).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => {
            assert_eq!(r.status(), 502);
            String::from_utf8_lossy(r.body().as_deref().unwrap_or_default()).into_owned()
        }
        other => panic!("expected a 502, got {other:?}"),
    };
    assert!(refused.contains("could not open"), "{refused}");
    let journal = written(&rec, dir.path()).await;
    let stopped = rec.stop();
    for secret in ["K1-aa", "K2-bb", "K3-cc", "K4-dd"] {
        for (what, text) in [
            ("502", &refused),
            ("journal", &journal),
            ("stderr", &stopped.stderr),
        ] {
            assert!(!text.contains(secret), "{secret} in the {what}: {text}");
        }
    }
}

/// A base URL that ends in `/` gives `//openai/...`: the request still goes to the upstream's
/// own port and path, never to a host or port the path seems to name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_doubled_slash_keeps_the_upstream() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start().await;
    let serve = Serve::recording(dir.path(), &format!("openai={}", fake.url()));
    for path in [
        "//openai/v1/chat/completions",
        "/openai//v1/chat/completions",
    ] {
        let r = http()
            .post(format!("{}{path}", serve.base))
            .header("x-test-id", "h$slashes")
            .header("authorization", "Bearer sk-doubled")
            .json(&chat(path))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{path}: {}", r.text().await.unwrap());
    }
    let received = fake.received();
    assert_eq!(received.len(), 2);
    assert!(
        received.iter().all(|r| r.path == "/v1/chat/completions"),
        "{received:?}"
    );
}

/// `https://user:TOKEN@gateway` as an upstream: the token is used, never printed (start-up,
/// 502, journal).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_userinfo_is_never_printed() {
    let dir = tempfile::tempdir().unwrap();
    let up = format!(
        "openai=http://gwuser:GW-TOKEN-31@127.0.0.1:{}",
        closed_port()
    );
    let serve = Serve::in_mode(dir.path(), "record", &up, &[]);
    let r = ask(&serve, "h$userinfo", "hi").await;
    assert_eq!(r.status(), 502);
    let body = r.text().await.unwrap();
    assert!(body.contains("***@127.0.0.1"), "{body}");
    let journal = written(&serve, dir.path()).await;
    let stopped = serve.stop();
    assert!(
        stopped.stderr.contains("***@127.0.0.1"),
        "{}",
        stopped.stderr
    );
    for (what, text) in [
        ("502", &body),
        ("journal", &journal),
        ("stderr", &stopped.stderr),
    ] {
        assert!(!text.contains("GW-TOKEN-31"), "{what}: {text}");
    }
}

/// A `llmreplay.toml` (a pull request's, say) that points Bedrock at a plain-HTTP host does not
/// get the AWS credentials sent there; `--allow-credentials-to` lets the user say otherwise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bedrock_credentials_go_only_to_aws_hosts_unless_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start().await;
    std::fs::write(
        dir.path().join("llmreplay.toml"),
        format!("[providers.bedrock]\nupstream = \"{}\"\n", fake.url()),
    )
    .unwrap();
    let env = [
        ("AWS_ACCESS_KEY_ID", "AKIDLEAKCHECK1"),
        ("AWS_SECRET_ACCESS_KEY", "secret-leak-check"),
        ("AWS_SESSION_TOKEN", "SESSIONLEAKCHECK1"),
    ];
    let send = |serve: &Serve| {
        http()
            .post(format!(
                "{}/bedrock/model/m/converse",
                serve.for_test("h$bedrock")
            ))
            .body(r#"{"messages":[{"role":"user","content":[{"text":"hi"}]}]}"#)
            .send()
    };
    let args = ["--cassette-dir", "c", "--mode", "record"];
    let refused = Serve::start_with_env(dir.path(), &args, &env);
    let r = send(&refused).await.unwrap();
    assert_eq!(r.status(), 502);
    let body = r.text().await.unwrap();
    assert!(body.contains("--allow-credentials-to 127.0.0.1"), "{body}");
    assert!(fake.received().is_empty(), "nothing reached the host");
    drop(refused);

    let mut allowed_args = args.to_vec();
    allowed_args.extend(["--allow-credentials-to", "127.0.0.1"]);
    let allowed = Serve::start_with_env(dir.path(), &allowed_args, &env);
    let r = send(&allowed).await.unwrap();
    r.bytes().await.unwrap();
    let received = fake.received();
    assert_eq!(received.len(), 1, "allowed, it goes");
    assert!(received[0]
        .headers
        .iter()
        .any(|(k, v)| k == "authorization" && v.contains("AKIDLEAKCHECK1")));
}

/// A `llmreplay.toml` (a pull request's, say) that points a provider, an MCP server or a proxy
/// with its own CA elsewhere does not get the keys the tests send: a 502 names the setting, the
/// host and the flag, and nothing leaves. A request with no key, an upstream on the command
/// line, loopback, and a host passed to `--allow-credentials-to` go on (here to a host that
/// does not resolve: a connection error, not a refusal).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_go_to_an_upstream_only_llmreplay_toml_names_only_when_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start().await;
    let far = "llmreplay-committed.invalid";
    std::fs::write(
        dir.path().join("llmreplay.toml"),
        format!(
            "[providers.openai]\nupstream = \"http://{far}\"\n[providers.anthropic]\nupstream = \"https://{far}:8443\"\n[providers.local]\nkind = \"openai\"\nupstream = \"{}\"\n[mcp.web]\nurl = \"https://{far}/mcp\"\n",
            fake.url()
        ),
    )
    .unwrap();
    let post = |serve: &Serve, path: &str, header: Option<(&str, &str)>, body: Value| {
        let mut req = http()
            .post(format!("{}{path}", serve.for_test("h$keys")))
            .json(&body);
        if let Some((k, v)) = header {
            req = req.header(k, v);
        }
        async move {
            let r = req.send().await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };
    let bearer = Some((
        "authorization",
        "Bearer sk-proj-committed-upstream-0123456789",
    ));
    let args = ["--cassette-dir", "c", "--mode", "record"];
    let serve = Serve::start(dir.path(), &args);
    let refused = |(status, body): (u16, String), setting: &str| {
        assert_eq!(status, 502, "{body}");
        assert!(body.contains(setting), "{body}");
        assert!(
            body.contains("--allow-credentials-to llmreplay-committed.invalid"),
            "{body}"
        );
        assert!(!body.contains("sk-proj-committed"), "{body}");
    };
    refused(
        post(&serve, "/openai/v1/chat/completions", bearer, chat("a")).await,
        "[providers.openai] upstream",
    );
    refused(
        post(
            &serve,
            "/anthropic/v1/messages",
            Some(("x-api-key", "sk-ant-api03-committed")),
            json!({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "a"}]}),
        )
        .await,
        "[providers.anthropic] upstream",
    );
    refused(
        post(
            &serve,
            "/mcp/web",
            Some(("authorization", "Bearer ghp-committed")),
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        )
        .await,
        "[mcp.web] url",
    );
    // No key, nothing to keep from the host: it goes (and finds no such host).
    let (status, body) = post(&serve, "/openai/v1/chat/completions", None, chat("a")).await;
    assert_eq!(status, 502, "{body}");
    assert!(!body.contains("--allow-credentials-to"), "{body}");
    // Loopback, as the tests' fake providers are.
    let (status, body) = post(&serve, "/local/v1/chat/completions", bearer, chat("a")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(fake.received().len(), 1);
    drop(serve);

    // The command line's choices go on.
    let flag = format!("openai=http://{far}");
    let mut on_the_line = args.to_vec();
    on_the_line.extend(["--upstream", &flag]);
    let serve = Serve::start(dir.path(), &on_the_line);
    let (status, body) = post(&serve, "/openai/v1/chat/completions", bearer, chat("a")).await;
    assert_eq!(status, 502, "{body}");
    assert!(!body.contains("--allow-credentials-to"), "{body}");
    drop(serve);
    let mut allowed = args.to_vec();
    allowed.extend(["--allow-credentials-to", far]);
    let serve = Serve::start(dir.path(), &allowed);
    for (path, header) in [
        ("/openai/v1/chat/completions", bearer),
        ("/mcp/web", Some(("authorization", "Bearer ghp-committed"))),
    ] {
        let (status, body) = post(&serve, path, header, chat("a")).await;
        assert!(
            !body.contains("--allow-credentials-to"),
            "{path}: {status} {body}"
        );
    }
    drop(serve);

    // A committed proxy with a committed CA could read every key on its way.
    crate::support::TestCa::new("proxy").write_pem(&dir.path().join("ca.pem"));
    std::fs::write(
        dir.path().join("llmreplay.toml"),
        format!("[upstream]\nproxy = \"http://{far}:3128\"\nno_proxy = \"none.invalid\"\nca_file = \"ca.pem\"\n"),
    )
    .unwrap();
    let flag = "openai=https://api.openai.com".to_string();
    let mut through = args.to_vec();
    through.extend(["--upstream", &flag]);
    let serve = Serve::start(dir.path(), &through);
    refused(
        post(&serve, "/openai/v1/chat/completions", bearer, chat("a")).await,
        "[upstream] proxy",
    );
}

/// An answer that holds a key variable's value (here as a JSON object's key too: the fake's
/// `finish_reason`) reaches its client whole, with the live value, so the test passes on it;
/// the recording keeps the placeholder where the value stood, and the run passes. (What the
/// last guard would still refuse is what redaction cannot reach; the daemon then answers the
/// client whole as here and fails the run at its end.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_holding_a_key_value_reaches_its_client_whole_and_is_kept_redacted() {
    let fake = FakeProvider::start().await;
    let secret = [("GUARD_CHECK_API_KEY", "finish_reason")];
    let dir = tempfile::tempdir().unwrap();
    let serve = Serve::in_mode(
        dir.path(),
        "record",
        &format!("openai={}", fake.url()),
        &secret,
    );
    let r = http()
        .post(format!(
            "{}/openai/v1/chat/completions",
            serve.for_test("h$guard")
        ))
        .json(&chat("Hello"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body = r.text().await.expect("the whole answer, not a broken read");
    assert!(
        body.contains("You said: Hello") && body.contains("finish_reason"),
        "{body}"
    );
    let stopped = serve.stop();
    assert!(stopped.status.success(), "{}", stopped.stderr);
    let kept = std::fs::read_to_string(dir.path().join("c/h--guard/openai.json")).unwrap();
    assert!(!kept.contains("finish_reason"), "{kept}");
    assert!(kept.contains("llmreplay-redacted"), "{kept}");
}

/// A cassette folder whose `blobs` links elsewhere: a recording there removes nothing in the
/// other folder. A session frame whose blob names a path is refused, never opened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blobs_are_read_and_removed_only_inside_the_cassette_folder() {
    let fake = FakeProvider::start().await;
    let sample = Sample::new();
    let elsewhere = sample.scratch().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let victim = elsewhere.join("a".repeat(64));
    std::fs::write(&victim, b"not ours").unwrap();
    let folder = sample.root.join("c/h--linked");
    std::fs::create_dir_all(&folder).unwrap();
    std::os::unix::fs::symlink(&elsewhere, folder.join("blobs")).unwrap();
    let serve = Serve::in_mode(
        &sample.root,
        "record",
        &format!("openai={}", fake.url()),
        &[],
    );
    let r = ask(&serve, "h$linked", "hello").await;
    assert_eq!(r.status(), 200);
    r.bytes().await.unwrap();
    serve.stop();
    assert!(folder.join("openai.json").is_file(), "recorded");
    assert!(victim.is_file(), "the file elsewhere is untouched");

    let session = sample.root.join("c/h--session");
    std::fs::create_dir_all(&session).unwrap();
    let cassette = json!({"llmreplay": 1, "test": "h$session", "provider": "openai", "interactions": [{
        "key": "0".repeat(64),
        "request": {"method": "GET", "path": "/v1/realtime", "websocket": true},
        "frames": [{"from": "server", "blob": "../../../../../../etc/passwd", "at_ms": 0}]
    }]});
    std::fs::write(session.join("openai.json"), cassette.to_string()).unwrap();
    let out = sample.llmreplay(&["status", "--no-list", "--check", "--cassette-dir", "c"]);
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(out.stderr.contains("not a SHA-256"), "{}", out.stderr);
    assert!(!out.stderr.contains("git checkout"), "{}", out.stderr);
}

/// Peak memory of a process, from the kernel's high-water mark.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// A 40 MB JSON array (under the body limit) records and replays byte for byte, kept as a blob,
/// with memory a small multiple of it (it took 4.7 GB once; `bench/memory.sh` measures it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_json_body_records_in_bounded_memory() {
    let zeros = |mib: usize| {
        let mut body = String::with_capacity((mib + 1) << 20);
        body.push_str("[0");
        while body.len() < mib << 20 {
            body.push_str(",0");
        }
        body.push(']');
        body
    };
    let dir = tempfile::tempdir().unwrap();
    // Keyed on its way to an upstream that is not there: the request is all that is held.
    let unreachable = format!("openai=http://127.0.0.1:{}", closed_port());
    let serve = Serve::recording(dir.path(), &unreachable);
    let r = http()
        .post(format!("{}/openai/v1/embeddings", serve.for_test("h$huge")))
        .header("content-type", "application/json")
        .body(zeros(40))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 502);
    let peak = peak_rss_kib(serve.pid());
    assert!(peak < 400 << 10, "peak RSS {peak} KiB for a 40 MB body");
    serve.stop();

    // Past the size where it would be parsed, a body is recorded as its bytes and replays.
    let fake = FakeProvider::start().await;
    let serve = Serve::recording(dir.path(), &format!("openai={}", fake.url()));
    let body = zeros(5);
    let r = http()
        .post(format!("{}/openai/v1/embeddings", serve.for_test("h$big")))
        .header("content-type", "application/json")
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.bytes().await.unwrap();
    serve.stop();
    let cassette = crate::support::read_json(&dir.path().join("c/h--big/openai.json"));
    let blob = cassette["interactions"][0]["request"]["body_blob"]
        .as_str()
        .unwrap_or_else(|| panic!("{cassette}"));
    assert_eq!(
        std::fs::read(dir.path().join("c/h--big/blobs").join(blob)).unwrap(),
        body.as_bytes()
    );
    let replay = Serve::replaying(dir.path());
    let r = http()
        .post(format!("{}/openai/v1/embeddings", replay.for_test("h$big")))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "the same bytes replay");
}

/// The faults route shares the body limit, a test has at most 1,000 faults waiting, and a
/// `[match]` pattern too large to run on every request is refused at start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_and_match_rules_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let serve = serve_with(
        dir.path(),
        "[limits]\nbody_mib = 1\n",
        "replay",
        "openai=http://127.0.0.1:9",
    );
    let faults = format!("{}/__llmreplay/faults", serve.for_test("h$faults"));
    let huge = json!({"status": 500, "body": "x".repeat(2 << 20)});
    let r = http().post(&faults).json(&huge).send().await.unwrap();
    assert_eq!(r.status(), 413);
    let client = http();
    for i in 0..1000 {
        let r = client
            .post(&faults)
            .json(&json!({"status": 500}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201, "fault {i}");
    }
    let r = http()
        .post(&faults)
        .json(&json!({"status": 500}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("1000 faults waiting"));
    let other = format!("{}/__llmreplay/faults", serve.for_test("h$other"));
    let r = http()
        .post(&other)
        .json(&json!({"status": 500}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "another test is not limited by this one");
    serve.stop();

    std::fs::write(
        dir.path().join("llmreplay.toml"),
        "[match]\nreplace = [{ pattern = \"(a{1,1000}){1,1000}\", with = \"x\" }]\n",
    )
    .unwrap();
    let e = Serve::try_start(dir.path(), &["--cassette-dir", "c"], &[])
        .err()
        .unwrap();
    assert!(
        e.contains("size limit") || e.contains("exceeds") || e.contains("states"),
        "{e}"
    );
    // Under the size limit, but a cost per byte that took 18 s for a 256 KB prompt.
    std::fs::write(
        dir.path().join("llmreplay.toml"),
        "[match]\nreplace = [{ pattern = \"(?:(?:(?:a{20}){20}){20})b\", with = \"x\" }]\n",
    )
    .unwrap();
    let e = Serve::try_start(dir.path(), &["--cassette-dir", "c"], &[])
        .err()
        .unwrap();
    assert!(
        e.contains("8006 states") && e.contains("counted repetitions"),
        "{e}"
    );
    for bad in [
        "[upstream]\nidle_timeout_s = 1e30\n",
        "[limits]\nbody_mib = 1e30\n",
    ] {
        std::fs::write(dir.path().join("llmreplay.toml"), bad).unwrap();
        let e = Serve::try_start(dir.path(), &["--cassette-dir", "c"], &[])
            .err()
            .unwrap();
        assert!(
            e.contains("at most") && !e.contains("panicked"),
            "{bad}: {e}"
        );
    }
}

/// A fault spec is checked whole when it is posted: transfer headers, 1xx statuses and bad
/// header names are refused naming the field, and nothing corrupts the next answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_specs_are_checked_when_posted() {
    let dir = tempfile::tempdir().unwrap();
    let serve = Serve::replaying(dir.path());
    let faults = format!("{}/__llmreplay/faults", serve.for_test("h$spec"));
    for (spec, says) in [
        (
            json!({"status": 500, "headers": {"content-length": "5"}}),
            "content-length",
        ),
        (json!({"status": 101}), "\"status\": 101"),
        (
            json!({"status": 500, "headers": {"bad name": "x"}}),
            "\"bad name\"",
        ),
    ] {
        let r = http().post(&faults).json(&spec).send().await.unwrap();
        assert_eq!(r.status(), 400, "{spec}");
        let text = r.text().await.unwrap();
        assert!(text.contains(says), "{spec}: {text}");
    }
}

/// `begin` starts a test's attempt afresh: posted faults are gone and `[[faults]]` fire again,
/// so a retried test meets what its first attempt met.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn begin_resets_and_rearms_a_tests_faults() {
    let dir = tempfile::tempdir().unwrap();
    let serve = serve_with(
        dir.path(),
        "[[faults]]\ntest = \"test(=retried)\"\nstatus = 503\n",
        "replay",
        "openai=http://127.0.0.1:9",
    );
    let begin = format!("{}/__llmreplay/begin?test=h%24retried", serve.base);
    let faults = format!("{}/__llmreplay/faults", serve.for_test("h$retried"));
    for attempt in 0..2 {
        http().post(&begin).send().await.unwrap();
        let first = ask(&serve, "h$retried", "hi").await.status();
        assert_eq!(first, 503, "attempt {attempt}: the declared fault fires");
        let second = ask(&serve, "h$retried", "hi").await.status();
        assert_eq!(second, 404, "attempt {attempt}: once, then a miss");
        let r = http()
            .post(&faults)
            .json(&json!({"status": 429, "times": "always"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
    }
    http().post(&begin).send().await.unwrap();
    assert_eq!(
        ask(&serve, "h$retried", "hi").await.status(),
        503,
        "not 429: posted faults are gone"
    );
}

/// A session the server closes with 1008 is recorded with its close and replayed with it;
/// a client's close is answered, so it sees a normal closure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_record_the_servers_close_and_answer_the_clients() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
    use tokio_tungstenite::tungstenite::Message;
    let dir = tempfile::tempdir().unwrap();
    let mut fake = crate::support::FakeRealtime::start().await;
    let item = |text: &str| {
        Message::text(json!({"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}}).to_string())
    };
    // The first server frame (session.created), then the client's item, then the close.
    let turn = |base: String, text: &'static str| async move {
        let url = format!("{base}/openai/v1/realtime?model=gpt-realtime");
        let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
        let first = ws.next().await.unwrap().unwrap();
        assert!(first.to_string().contains("session.created"), "{first}");
        ws.send(item(text)).await.unwrap();
        loop {
            match ws.next().await {
                Some(Ok(Message::Close(c))) => break c,
                Some(Ok(_)) => continue,
                other => panic!("no close frame: {other:?}"),
            }
        }
    };
    let rec = Serve::recording_from(dir.path(), &[("openai", fake.url())]);
    let close = turn(ws_base(&rec, "h$quota"), "QUOTA please")
        .await
        .unwrap();
    assert_eq!(
        (close.code, close.reason.as_str()),
        (CloseCode::Policy, "quota exceeded")
    );
    let stopped = rec.stop();
    assert!(stopped.stderr.contains("1 recorded"), "{}", stopped.stderr);
    fake.stop();
    let replay = Serve::replaying(dir.path());
    let close = turn(ws_base(&replay, "h$quota"), "QUOTA please")
        .await
        .unwrap();
    assert_eq!(
        (close.code, close.reason.as_str()),
        (CloseCode::Policy, "quota exceeded"),
        "replayed"
    );

    // A client that closes first gets the close answered, not a dropped connection.
    let url = format!(
        "{}/openai/v1/realtime?model=gpt-realtime",
        ws_base(&replay, "h$quota")
    );
    for _ in 0..5 {
        let (mut ws, _) = tokio_tungstenite::connect_async(&url).await.unwrap();
        ws.next().await.unwrap().unwrap();
        ws.close(None).await.unwrap();
        let answered = loop {
            match ws.next().await {
                Some(Ok(Message::Close(_))) => break true,
                Some(Ok(_)) => continue,
                None => break true,
                Some(Err(e)) => panic!("abnormal closure: {e}"),
            }
        };
        assert!(answered);
    }
}

/// An answer or a session frame edited by hand is refused at replay (the seal covers what
/// replay sends) and listed by `status --check`; `status --fix` seals a deliberate edit, and
/// removes the temporary files a killed run left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edited_answers_and_frames_are_refused_until_sealed_again() {
    let sample = Sample::new();
    let fake = FakeProvider::start().await;
    let rec = Serve::in_mode(
        &sample.root,
        "record",
        &format!("openai={}", fake.url()),
        &[],
    );
    let r = ask(&rec, "h$edited", "hello").await;
    let answer = r.text().await.unwrap();
    rec.stop();
    let path = sample.root.join("c/h--edited/openai.json");
    let original = std::fs::read_to_string(&path).unwrap();
    let mut cassette: Value = serde_json::from_str(&original).unwrap();
    assert!(
        cassette["interactions"][0]["seal"].is_string(),
        "{cassette}"
    );
    let text = cassette["interactions"][0]["response"]["body"]["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(answer.contains(&text));
    cassette["interactions"][0]["response"]["body"]["choices"][0]["message"]["content"] =
        json!("I was edited");
    std::fs::write(&path, serde_json::to_string_pretty(&cassette).unwrap()).unwrap();
    std::fs::write(path.with_file_name(".llmreplay-killed.tmp"), b"{\"half").unwrap();

    let replay = Serve::replaying(&sample.root);
    let r = ask(&replay, "h$edited", "hello").await;
    assert_eq!(r.status(), 400);
    let body = r.text().await.unwrap();
    assert!(
        body.contains("edited by hand") && body.contains("status --fix"),
        "{body}"
    );
    drop(replay);

    let check = sample.llmreplay(&["status", "--no-list", "--check", "--cassette-dir", "c"]);
    assert_eq!(check.code, Some(1), "{}", check.stderr);
    assert!(
        check.stderr.contains("no longer matches its seal"),
        "{}",
        check.stderr
    );
    assert!(
        check.stderr.contains(".llmreplay-killed.tmp"),
        "{}",
        check.stderr
    );
    let fix = sample.llmreplay(&["status", "--no-list", "--fix", "--cassette-dir", "c"]);
    assert!(fix.stderr.contains("answer sealed"), "{}", fix.stderr);
    assert!(!path.with_file_name(".llmreplay-killed.tmp").exists());
    let replay = Serve::replaying(&sample.root);
    let r = ask(&replay, "h$edited", "hello").await;
    assert_eq!(r.status(), 200);
    assert!(
        r.text().await.unwrap().contains("I was edited"),
        "the deliberate edit replays"
    );
}

/// A recorded session whose frame is edited by hand is refused too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_session_frame_is_refused() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let dir = tempfile::tempdir().unwrap();
    let fake = crate::support::FakeRealtime::start().await;
    let rec = Serve::recording_from(dir.path(), &[("openai", fake.url())]);
    let url = format!(
        "{}/openai/v1/realtime?model=gpt-realtime",
        ws_base(&rec, "h$frames")
    );
    let (mut ws, _) = tokio_tungstenite::connect_async(&url).await.unwrap();
    ws.next().await.unwrap().unwrap();
    ws.send(Message::text(
        json!({"type": "session.update", "session": {"instructions": "x"}}).to_string(),
    ))
    .await
    .unwrap();
    ws.next().await.unwrap().unwrap();
    ws.close(None).await.unwrap();
    while let Some(Ok(_)) = ws.next().await {}
    let stopped = rec.stop();
    assert!(stopped.stderr.contains("1 recorded"), "{}", stopped.stderr);
    let path = dir.path().join("c/h--frames/openai.json");
    let mut cassette: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let frames = cassette["interactions"][0]["frames"]
        .as_array_mut()
        .unwrap();
    let server = frames.iter_mut().find(|f| f["from"] == "server").unwrap();
    server["json"]["type"] = json!("session.hacked");
    std::fs::write(&path, serde_json::to_string_pretty(&cassette).unwrap()).unwrap();
    let replay = Serve::replaying(dir.path());
    let url = format!(
        "{}/openai/v1/realtime?model=gpt-realtime",
        ws_base(&replay, "h$frames")
    );
    match tokio_tungstenite::connect_async(&url).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => {
            assert_eq!(r.status(), 400);
            let body =
                String::from_utf8_lossy(r.body().as_deref().unwrap_or_default()).into_owned();
            assert!(body.contains("edited by hand"), "{body}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// The "record it with" command of a miss, pasted into a shell, runs that command alone,
/// whatever the test is called.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn printed_commands_paste_safely() {
    let dir = tempfile::tempdir().unwrap();
    let serve = Serve::replaying(dir.path());
    let test = "h$quote'; touch pwned; echo '";
    let r = ask(&serve, test, "hi").await;
    assert_eq!(r.status(), 404);
    let body: Value = r.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap().to_string();
    let command = message
        .lines()
        .find_map(|l| l.trim().strip_prefix("record it with: "))
        .unwrap()
        .split(" (with a daemon")
        .next()
        .unwrap()
        .to_string();
    let stopped = serve.stop();
    let scratch = tempfile::tempdir().unwrap();
    // `cargo` stands in as a function that prints its arguments, one per line.
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!("cargo() {{ printf '%s\\n' \"$@\"; }}; {command}"))
        .current_dir(scratch.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{command}");
    assert!(
        !scratch.path().join("pwned").exists(),
        "{command} ran touch"
    );
    let args = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        args.lines().last().unwrap(),
        "test(=quote'; touch pwned; echo ')",
        "{command}"
    );
    assert!(
        stopped.stderr.contains("no recording") || stopped.stderr.contains("missing"),
        "{}",
        stopped.stderr
    );
}

/// Sends `secret` in one of its forms down every path that writes something (a recording, a
/// 502 from an upstream that is not there, a replay miss, HTTP and WebSocket alike) and
/// returns all the daemons wrote and answered.
async fn everything_written_for(secret: &str, param: &str, header: &str, field: &str) -> String {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start().await;
    let realtime = crate::support::FakeRealtime::start().await;
    let query = format!("{param}={secret}&alt=sse");
    let mut seen = String::new();
    // The body's form: a field of that name in a hosted tool, as an MCP tool's token is.
    let with_secret = |mut body: Value| {
        body["tools"] = json!([{"type": "mcp", "server_label": "s", field: secret}]);
        body
    };
    let frame = tokio_tungstenite::tungstenite::Message::text(
        json!({"type": "session.update", "session": {"instructions": "hi", field: secret}})
            .to_string(),
    );
    let chat_to = |serve: &Serve, test: &str| {
        http()
            .post(format!(
                "{}/openai/v1/chat/completions?{query}",
                serve.for_test(test)
            ))
            .header(header, format!("Bearer {secret}"))
            .json(&with_secret(chat("hi")))
            .send()
    };
    let session = |serve: &Serve, test: &str| {
        let mut req = format!(
            "{}/openai/v1/realtime?model=gpt-realtime&{query}",
            ws_base(serve, test)
        )
        .into_client_request()
        .unwrap();
        req.headers_mut().insert(
            tokio_tungstenite::tungstenite::http::HeaderName::from_bytes(header.as_bytes())
                .unwrap(),
            format!("Bearer {secret}").parse().unwrap(),
        );
        tokio_tungstenite::connect_async(req)
    };
    let mut stderr = String::new();

    // Recorded, HTTP and WebSocket.
    let rec = Serve::recording_from(
        dir.path(),
        &[("openai", fake.url()), ("gemini", realtime.url())],
    );
    let r = chat_to(&rec, "p$http").await.unwrap();
    seen.push_str(&r.text().await.unwrap());
    let rec_ws = Serve::recording_from(dir.path(), &[("openai", realtime.url())]);
    let (mut ws, _) = session(&rec_ws, "p$ws").await.unwrap();
    seen.push_str(&ws.next().await.unwrap().unwrap().to_string());
    ws.send(frame.clone()).await.unwrap();
    seen.push_str(&ws.next().await.unwrap().unwrap().to_string());
    ws.close(None).await.unwrap();
    while let Some(Ok(m)) = ws.next().await {
        seen.push_str(&m.to_string());
    }
    seen.push_str(&written(&rec, dir.path()).await);
    seen.push_str(&written(&rec_ws, dir.path()).await);
    stderr.push_str(&rec.stop().stderr);
    stderr.push_str(&rec_ws.stop().stderr);

    // An upstream with the secret as its userinfo, not there.
    let gone = format!("openai=http://user:{secret}@127.0.0.1:{}", closed_port());
    let failing = Serve::in_mode(dir.path(), "record", &gone, &[]);
    let r = chat_to(&failing, "p$gone").await.unwrap();
    seen.push_str(&r.text().await.unwrap());
    match session(&failing, "p$gone").await {
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => seen.push_str(
            &String::from_utf8_lossy(r.body().as_deref().unwrap_or_default()),
        ),
        other => panic!("expected a 502, got {other:?}"),
    }
    seen.push_str(&written(&failing, dir.path()).await);
    stderr.push_str(&failing.stop().stderr);

    // Replayed, and missed.
    let replay = Serve::replaying(dir.path());
    for test in ["p$http", "p$missing"] {
        let r = chat_to(&replay, test).await.unwrap();
        seen.push_str(&r.text().await.unwrap());
    }
    for test in ["p$ws", "p$missing"] {
        let (mut ws, _) = session(&replay, test).await.unwrap();
        let _ = ws.send(frame.clone()).await;
        // Then a frame nothing recorded, which ends the session.
        let _ = ws
            .send(tokio_tungstenite::tungstenite::Message::text(
                "{\"type\":\"x\"}",
            ))
            .await;
        while let Some(Ok(m)) = ws.next().await {
            seen.push_str(&m.to_string());
        }
    }
    seen.push_str(&written(&replay, dir.path()).await);
    stderr.push_str(&replay.stop().stderr);
    seen.push_str(&stderr);
    seen
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 4, ..Default::default() })]

    /// No secret, in any form (a header, a query parameter under any casing or percent-encoded
    /// name, a URL's userinfo, a secret-named field of a body or a session frame), appears in
    /// anything the daemon writes or answers, whichever path the request takes.
    #[test]
    fn no_secret_form_reaches_any_output(
        secret in "[A-Za-z0-9]{16,24}",
        param in proptest::sample::select(vec!["key", "KEY", "api_key", "Api_Key", "access_token", "k%65y", "api%5Fkey", "token", "appid", "X-Amz-Signature"]),
        header in proptest::sample::select(vec!["authorization", "x-api-key", "api-key", "x-goog-api-key", "x-subscription-token", "x-rapidapi-key"]),
        field in proptest::sample::select(vec!["authorization", "authorization_token", "api_key", "apiKey", "clientSecret", "access_token", "refresh_token", "Password", "token"]),
    ) {
        let secret = format!("SECRET{secret}");
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let all = runtime.block_on(everything_written_for(&secret, param, header, field));
        proptest::prop_assert!(all.contains("You said") || all.contains("choices"), "the calls went through");
        proptest::prop_assert!(!all.contains(&secret), "{secret} ({param}, {header}, {field}) leaked:\n{all}");
    }
}

/// Another local user's connections are refused, in every mode: no recording planted, no
/// request forwarded (with this user's keys), no proxying; the daemon logs each refusal. The
/// other user is a uid of its own, entered with `setpriv` (util-linux).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_users_connections_are_refused() {
    let other = match Command::new("setpriv")
        .args(["--reuid=54321", "--regid=54321", "--clear-groups", "true"])
        .status()
    {
        Ok(s) if s.success() => 54321,
        _ => {
            let why = "this test needs to run a process as another user (setpriv --reuid, as root)";
            assert!(std::env::var("CI").is_err(), "{why}");
            eprintln!("SKIPPED (not under CI): {why}");
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start().await;
    let serve = Serve::recording(dir.path(), &format!("openai={}", fake.url()));
    let as_other = |args: &[&str]| {
        let out = Command::new("setpriv")
            .args([
                &format!("--reuid={other}"),
                &format!("--regid={other}"),
                "--clear-groups",
                "curl",
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
            ])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let health_url = format!("{}/__llmreplay/health", serve.base);
    assert_eq!(as_other(&[&health_url]), "403");
    let planted = format!("{}/openai/v1/chat/completions", serve.base);
    let body = chat("planted").to_string();
    let code = as_other(&[
        "-H",
        "x-test-id: victim$named_test",
        "-H",
        "content-type: application/json",
        "-d",
        &body,
        &planted,
    ]);
    assert_eq!(code, "403");
    let proxied = as_other(&["-x", &serve.base, "http://127.0.0.1:9/admin"]);
    assert_eq!(proxied, "403");
    // This user is served as before.
    assert_eq!(health(&serve).await, 200);
    let stopped = serve.stop();
    assert!(fake.received().is_empty(), "nothing went upstream");
    assert!(!dir.path().join("c/victim--named_test").exists());
    assert!(
        stopped
            .stderr
            .contains("refused a connection of another user"),
        "{}",
        stopped.stderr
    );
}

/// Secrets by value and shape: a recording that holds the value of a key variable of the
/// daemon's environment, or a string of a secret's shape, is written with the placeholder in
/// their place (the request before it is keyed, and the answer); no file and no log line
/// holds either, and the client still gets the provider's answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_value_or_shape_in_a_recording_becomes_the_placeholder() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start().await;
    let key = "sk-live-0123456789abcdef";
    let shape = "sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123";
    let serve = Serve::in_mode(
        dir.path(),
        "record",
        &format!("openai={}", fake.url()),
        &[("OPENAI_API_KEY", key)],
    );
    let leaked = ask(&serve, "h$leak", &format!("repeat {key}")).await;
    assert_eq!(leaked.status(), 200);
    assert!(
        leaked.text().await.unwrap().contains(key),
        "the client gets the live answer"
    );
    let shaped = ask(&serve, "h$shape", shape).await;
    assert_eq!(shaped.status(), 200);
    let fine = ask(&serve, "h$fine", "nothing secret").await;
    assert_eq!(fine.status(), 200);
    let stopped = serve.stop();
    for slug in ["h--leak", "h--shape", "h--fine"] {
        let cassette = std::fs::read_to_string(dir.path().join("c").join(slug).join("openai.json"))
            .unwrap_or_else(|e| panic!("{slug}: {e}"));
        if slug != "h--fine" {
            assert!(cassette.contains("llmreplay-redacted"), "{cassette}");
        }
    }
    for (path, text) in crate::support::all_files(dir.path()) {
        for secret in [key, shape] {
            assert!(!text.contains(secret), "{secret} in {}", path.display());
        }
    }
    assert!(
        !stopped.stderr.contains(key) && !stopped.stderr.contains(shape),
        "{}",
        stopped.stderr
    );
}

/// `serve -vv` shows request heads with every secret masked: tools' key headers, what
/// `[redact] headers` lists, and secret query values.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_heads_mask_tool_keys_redacted_headers_and_secret_queries() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start().await;
    std::fs::write(
        dir.path().join("llmreplay.toml"),
        "[redact]\nheaders = [\"x-my-gateway-token\"]\n",
    )
    .unwrap();
    let upstream = format!("openai={}", fake.url());
    let serve = Serve::in_mode_with(dir.path(), "record", &upstream, &[], &["-vv"]);
    let r = http()
        .post(format!(
            "{}/openai/v1/chat/completions?appid=HEADSECRET1&token=HEADSECRET2&alt=sse",
            serve.for_test("h$heads")
        ))
        .header("x-subscription-token", "HEADSECRET3")
        .header("x-rapidapi-key", "HEADSECRET4")
        .header("x-my-gateway-token", "HEADSECRET5")
        .json(&chat("heads"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let stopped = serve.stop();
    let head = stopped
        .stderr
        .lines()
        .find(|l| l.contains("}: head"))
        .unwrap_or_else(|| panic!("-vv shows no head: {}", stopped.stderr));
    assert!(head.contains("x-my-gateway-token: ***"), "{head}");
    assert!(head.contains("appid=***"), "{head}");
    assert!(!stopped.stderr.contains("HEADSECRET"), "{}", stopped.stderr);
    for (path, text) in crate::support::all_files(dir.path()) {
        assert!(!text.contains("HEADSECRET"), "{}", path.display());
    }
}

/// A CONNECT whose TLS handshake never comes, and a `[capture] pass` tunnel nobody uses, are
/// closed: the first after `[limits] header_read_timeout_s`, the second after `[upstream]
/// idle_timeout_s`.
#[test]
fn unfinished_handshakes_and_idle_pass_tunnels_are_closed() {
    let dir = tempfile::tempdir().unwrap();
    // A pass host that accepts and never says a word.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_port = silent.local_addr().unwrap().port();
    std::fs::write(
        dir.path().join("llmreplay.toml"),
        "[limits]\nheader_read_timeout_s = 0.5\n\n[upstream]\nidle_timeout_s = 0.5\n\n[capture]\npass = [\"silent.example\"]\n",
    )
    .unwrap();
    let upstream = format!("silent.example=http://127.0.0.1:{silent_port}");
    let serve = Serve::start(
        dir.path(),
        &["--cassette-dir", "c", "--upstream", &upstream],
    );
    for host in ["tools.example:443", "silent.example:443"] {
        let mut stream = TcpStream::connect(addr(&serve)).unwrap();
        let connect = format!("CONNECT {host} HTTP/1.1\r\nHost: {host}\r\n\r\n");
        // A first CONNECT without credentials is challenged; the second is `default`'s.
        let mut head = crate::capture::exchange(&mut stream, &connect);
        if head.starts_with("HTTP/1.1 407") {
            head = crate::capture::exchange(&mut stream, &connect);
        }
        assert!(head.starts_with("HTTP/1.1 200"), "{host}: {head}");
        // Then nothing: the daemon, not this test, must end it.
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut buf = [0u8; 64];
        match stream.read(&mut buf) {
            Ok(0) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            other => panic!("{host}: the tunnel was not closed: {other:?}"),
        }
    }
    drop(silent);
}

/// A request body that stops arriving is let go after `[limits] header_read_timeout_s`, on the
/// faults route as on a provider's: 408, and the connection closes.
#[test]
fn bodies_that_stop_arriving_get_a_408() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("llmreplay.toml"),
        "[limits]\nheader_read_timeout_s = 0.5\n",
    )
    .unwrap();
    let serve = Serve::start(dir.path(), &["--cassette-dir", "c"]);
    let host = addr(&serve);
    for path in [
        "/t/h%24idle/__llmreplay/faults",
        "/t/h%24idle/openai/v1/chat/completions",
    ] {
        let mut stream = TcpStream::connect(&host).unwrap();
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"status\""
        );
        stream.write_all(head.as_bytes()).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        assert!(answer.starts_with("HTTP/1.1 408"), "{path}: {answer:?}");
    }
}

/// A CONNECT to a port that is no port is refused, not taken as 443.
#[test]
fn a_connect_to_a_port_out_of_range_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let serve = Serve::start(dir.path(), &["--cassette-dir", "c"]);
    let mut stream = TcpStream::connect(addr(&serve)).unwrap();
    let connect = "CONNECT tools.example:99999 HTTP/1.1\r\nHost: tools.example:99999\r\n\r\n";
    let mut head = crate::capture::exchange(&mut stream, connect);
    if head.starts_with("HTTP/1.1 407") {
        head = crate::capture::exchange(&mut stream, connect);
    }
    assert!(head.starts_with("HTTP/1.1 400"), "{head}");
}

/// A test id with a percent-encoded newline and terminal escapes (an OSC 52 clipboard write)
/// forges no line of `serve -v`'s log and puts no raw ESC or BEL on the terminal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_test_ids_forge_no_log_line_and_send_no_escape() {
    let dir = tempfile::tempdir().unwrap();
    let serve = Serve::in_mode_with(
        dir.path(),
        "replay",
        "openai=http://127.0.0.1:9",
        &[],
        &["-v"],
    );
    let forged = "h$x\n2026-11-25T10:00:00.000000Z  INFO request{test=\"h$y\"}: replayed\u{1b}]52;c;cHduZWQ=\u{7}";
    let encoded: String = forged.bytes().map(|b| format!("%{b:02X}")).collect();
    let r = http()
        .post(format!("{}/openai/v1/chat/completions", serve.base))
        .header("x-test-id", encoded)
        .json(&chat("hello"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404, "a miss, in replay");
    let stopped = serve.stop();
    let log = &stopped.stderr;
    assert!(!log.contains(['\u{1b}', '\u{7}']), "{log:?}");
    assert!(
        !log.lines()
            .any(|l| l.contains("INFO request{test=\"h$y\"}")
                && l.starts_with("2026-11-25T10:00:00")),
        "a forged line: {log}"
    );
}

/// A web page on the developer's machine reaches loopback too (MockServer's CVE-2021-32827):
/// every control route, under a test's prefix too, refuses a request with an `Origin` header,
/// and what it would have done is not done. Provider routes still answer a browser's request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_routes_refuse_web_pages() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start().await;
    let up = format!("openai={}", fake.url());
    let serve = serve_with(dir.path(), "", "record", &up);
    let test = serve.for_test("h$page");
    let page = "http://evil.example";
    let routes = [
        (
            reqwest::Method::GET,
            format!("{}/__llmreplay/health", serve.base),
        ),
        (
            reqwest::Method::GET,
            format!("{}/__llmreplay/stats", serve.base),
        ),
        (
            reqwest::Method::GET,
            format!("{}/__llmreplay/journal", serve.base),
        ),
        (
            reqwest::Method::POST,
            format!("{}/__llmreplay/begin?test=h%24page", serve.base),
        ),
        (
            reqwest::Method::POST,
            format!(
                "{}/__llmreplay/end?test=h%24page&outcome=passed",
                serve.base
            ),
        ),
        (
            reqwest::Method::POST,
            format!("{}/__llmreplay/flush", serve.base),
        ),
        (
            reqwest::Method::POST,
            format!("{}/__llmreplay/listed?binary=h", serve.base),
        ),
        (
            reqwest::Method::POST,
            format!("{}/__llmreplay/faults", serve.base),
        ),
        (reqwest::Method::POST, format!("{test}/__llmreplay/faults")),
        (
            reqwest::Method::DELETE,
            format!("{test}/__llmreplay/faults"),
        ),
        (
            reqwest::Method::POST,
            format!("{test}/__llmreplay/mcp?name=x&op=open"),
        ),
        (
            reqwest::Method::OPTIONS,
            format!("{}/__llmreplay/begin", serve.base),
        ),
        (
            reqwest::Method::GET,
            format!("{}/__llmreplay/no-such-route", serve.base),
        ),
    ];
    for origin in [page, "null"] {
        for (method, url) in &routes {
            let r = http()
                .request(method.clone(), url)
                .header("origin", origin)
                .body(r#"{"status": 429, "times": "always"}"#)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 403, "{method} {url}");
            let said = r.text().await.unwrap();
            assert!(
                said.contains("Origin") && said.contains("web pages"),
                "{said}"
            );
        }
    }
    // Nothing the page asked for was done: no fault waits, no test began or was listed.
    let journal = serve.journal().await.to_string();
    assert!(!journal.contains("h$page"), "{journal}");
    let from_page = http()
        .post(format!("{test}/openai/v1/chat/completions"))
        .header("origin", page)
        .json(&chat("hello from a browser SDK"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        from_page.status(),
        200,
        "provider routes serve browsers as before"
    );
    assert_eq!(fake.received().len(), 1);
    assert_eq!(
        health(&serve).await,
        200,
        "without an Origin, control routes answer"
    );
    serve.stop();
}

/// `POST /__llmreplay/listed` reads its body under `[limits] body_mib` (a 600 MB list once
/// peaked at 2 GB), test ids on begin, end and listed are at most 4 KiB, and the ids kept as
/// begun and listed stop at 64 MiB with a refusal that says so (20,000 ids of 30 KB once took
/// 872 MB).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_control_routes_keep_bounded_lists_of_ids() {
    let dir = tempfile::tempdir().unwrap();
    let small = serve_with(
        dir.path(),
        "[limits]\nbody_mib = 0.01\n",
        "replay",
        "openai=http://127.0.0.1:9",
    );
    let listed = format!("{}/__llmreplay/listed?binary=h", small.base);
    let r = http()
        .post(&listed)
        .body("t\n".repeat(10_000))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    assert!(r
        .text()
        .await
        .unwrap()
        .contains("body limit of 10485 bytes ([limits] body_mib"));
    let chunks = futures_util::stream::iter(
        (0..20).map(|_| Ok::<_, std::io::Error>(bytes::Bytes::from("t\n".repeat(500)))),
    );
    let r = http()
        .post(&listed)
        .body(reqwest::Body::wrap_stream(chunks))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413, "no content-length: counted as it comes");
    small.stop();

    let dir = tempfile::tempdir().unwrap();
    let serve = serve_with(dir.path(), "", "replay", "openai=http://127.0.0.1:9");
    let long = "x".repeat(5000);
    for route in [
        format!("begin?test={long}"),
        format!("end?test={long}&outcome=passed"),
    ] {
        let r = http()
            .post(format!("{}/__llmreplay/{route}", serve.base))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{route}");
        assert!(r.text().await.unwrap().contains("at most 4096 bytes"));
    }
    let r = http()
        .post(format!("{}/__llmreplay/listed?binary=h", serve.base))
        .body(format!("ok\n{long}\n"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("at most 4096 bytes"));

    // 16,773 ids of 4,001 bytes fit in 64 MiB, with 91 bytes to spare; a hundred more do not.
    let names =
        |tag: char, n: usize| -> String { (0..n).map(|i| format!("{tag}{i:0>3998}\n")).collect() };
    let listed = format!("{}/__llmreplay/listed?binary=b", serve.base);
    let r = http()
        .post(&listed)
        .body(names('a', 16_773))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let r = http()
        .post(&listed)
        .body(names('z', 100))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 507);
    let said = r.text().await.unwrap();
    assert!(said.contains("at most 64 MiB of the ids"), "{said}");
    let r = http()
        .post(&listed)
        .body(names('a', 100))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "ids kept already take no more room");
    let begin = |id: String| {
        http()
            .post(format!("{}/__llmreplay/begin?test={id}", serve.base))
            .send()
    };
    assert_eq!(
        begin("h%24short".into()).await.unwrap().status(),
        200,
        "room for a short one"
    );
    let r = begin("y".repeat(4000)).await.unwrap();
    assert_eq!(r.status(), 507);
    assert!(r.text().await.unwrap().contains("at most 64 MiB"));
    assert_eq!(
        begin("h%24short".into()).await.unwrap().status(),
        200,
        "a test begun again"
    );
    assert_eq!(health(&serve).await, 200);
    serve.stop();
}

/// After 4,096 processes announced a test and were killed before saying `end`, a new process's
/// `begin` is honoured: those that are gone make room, and its requests are its test's (they
/// used to be filed under `default`, the begin answered ok and ignored).
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_that_are_gone_make_room_for_new_announcements() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start().await;
    let up = format!("openai={}", fake.url());
    let serve = serve_with(dir.path(), "", "record", &up);
    let client = http();
    let pid_max: u32 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // Ids above pid_max belong to no process, as a killed worker's no longer does.
    for pid in pid_max + 1..=pid_max + 4096 {
        let r = client
            .post(format!(
                "{}/__llmreplay/begin?test=h%24killed&pid={pid}",
                serve.base
            ))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    let me = std::process::id();
    let r = client
        .post(format!(
            "{}/__llmreplay/begin?test=h%24alive&pid={me}",
            serve.base
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let answer = http()
        .post(format!("{}/openai/v1/chat/completions", serve.base))
        .json(&chat("from the announced process"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let journal = serve.journal().await;
    assert_eq!(journal[0]["test"], "h$alive", "{journal}");
    serve.stop();
}

/// Two test ids that meet at one cassette folder (`a$b c` and `a$b.c`) in one run: the second
/// is refused, the summary and the report name both and the folder, and in a replay the
/// first's recording, which it used, is not called unused on the second's account.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tests_that_share_a_folder_are_named_and_the_used_recording_is_not_unused() {
    let fake = FakeProvider::start().await;
    let dir = tempfile::tempdir().unwrap();
    let upstream = format!("openai={}", fake.url());
    let ask = |serve: &Serve, test: &str| {
        let url = format!("{}/openai/v1/chat/completions", serve.for_test(test));
        async move {
            http()
                .post(url)
                .json(&chat("Hello"))
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    let record = Serve::in_mode(dir.path(), "record", &upstream, &[]);
    assert_eq!(ask(&record, "a$b c").await, 200);
    assert_eq!(ask(&record, "a$b.c").await, 400);
    let stopped = record.stop();
    assert!(!stopped.status.success(), "{}", stopped.stderr);
    assert!(
        stopped
            .stderr
            .contains("tests whose ids share a cassette folder: a$b c and a$b.c (folder a--b-c)"),
        "{}",
        stopped.stderr
    );

    // A replay under `run`, which reports unused recordings: the two ids name themselves by
    // header, as a client without a runner's help does.
    let script = r#"
import json, os, urllib.request, urllib.error, urllib.parse
base = os.environ["OPENAI_BASE_URL"]
body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "Hello"}]}).encode()
for test in ["a$b c", "a$b.c"]:
    req = urllib.request.Request(base + "/chat/completions", data=body, method="POST", headers={
        "content-type": "application/json", "x-test-id": urllib.parse.quote(test, safe="")})
    try:
        print(test, urllib.request.urlopen(req).status)
    except urllib.error.HTTPError as e:
        print(test, e.code)
"#;
    let out = crate::support::Output::of(
        std::process::Command::new(crate::support::binary())
            .current_dir(dir.path())
            .args([
                "llmreplay",
                "run",
                "--cassette-dir",
                "c",
                "--",
                "python3",
                "-c",
                script,
            ])
            .env("CARGO_TARGET_DIR", dir.path().join("target"))
            .env_remove("CI"),
    );
    assert!(
        out.stdout.contains("a$b c 200") && out.stdout.contains("a$b.c 400"),
        "{}\n{}",
        out.stdout,
        out.stderr
    );
    let report: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("target/llmreplay/report.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(report["unused"], serde_json::json!([]), "{report}");
    assert_eq!(
        report["collisions"],
        serde_json::json!([{"slug": "a--b-c", "first": "a$b c", "second": "a$b.c"}]),
        "{report}"
    );
    assert!(
        out.stderr
            .contains("tests whose ids share a cassette folder (1)"),
        "{}",
        out.stderr
    );
}

/// A per-test base URL built from an empty test id (`<root>/t/${TEST_ID}/openai/v1` with the
/// variable unset) gives `/t//openai/...`: refused with a 400 that says the id is empty, never
/// read as the test `openai` with a well-known path (runs of `/` are one elsewhere).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_test_id_in_the_path_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start().await;
    let up = format!("openai={}", fake.url());
    let serve = serve_with(dir.path(), "", "record", &up);
    let a = addr(&serve);
    let body = chat("hi").to_string();
    let req = format!(
        "POST /t//openai/v1/chat/completions HTTP/1.1\r\nHost: {a}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let (status, text) = raw(&a, req.as_bytes());
    assert_eq!(status, Some(400), "{text}");
    assert!(text.contains("test id in /t/<id>/ is empty"), "{text}");
    assert!(fake.received().is_empty(), "nothing went upstream");
    serve.stop();
    assert!(!dir.path().join("c/openai").exists());
}
