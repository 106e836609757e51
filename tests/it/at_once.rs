//! Several tests at once in one process (vitest's threads, `describe.concurrent`, concurrent
//! async tests): the process announced them all, so each request names its own test in an
//! `X-Test-Id` header, on every way into the daemon; one that names none is refused rather
//! than filed under a guess, and one test's end leaves the others running.

use crate::support::{http, FakeProvider, TestCa};
use serde_json::{json, Value};

fn chat(prompt: &str) -> Value {
    json!({"model": "m", "messages": [{"role": "user", "content": prompt}]})
}

/// The value `serve --env` exports for `name`, unquoted.
fn exported(lines: &str, name: &str) -> String {
    lines
        .lines()
        .find_map(|l| l.strip_prefix(&format!("export {name}=")))
        .unwrap_or_else(|| panic!("{name} in {lines}"))
        .trim_matches('\'')
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tests_at_once_in_one_process_are_told_apart_by_their_header_on_every_route() {
    let ca = TestCa::new("tools");
    let tls = FakeProvider::start_tls(&ca).await;
    let plain = FakeProvider::start().await;
    let (dir, scratch) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    ca.trusted_by(dir.path(), scratch.path(), "");
    let upstreams = [
        format!("tools.example=https://127.0.0.1:{}", tls.addr.port()),
        format!("plain.example=http://{}", plain.addr),
        format!("openai={}", plain.url()),
    ];
    let mut args = vec!["--mode", "record", "--cassette-dir", "c"];
    for u in &upstreams {
        args.extend(["--upstream", u.as_str()]);
    }
    let (mut daemon, lines) = crate::clients::serve_env(dir.path(), &args, &[]);
    let base = exported(&lines, "LLMREPLAY_BASE_URL");
    let proxy = exported(&lines, "HTTPS_PROXY");
    let ca_pem = std::fs::read(exported(&lines, "SSL_CERT_FILE")).unwrap();

    // This process runs two tests at once.
    let me = std::process::id();
    let control = http();
    let announce = |route: &str, test: &str| {
        let url = format!("{base}/__llmreplay/{route}?test={test}&pid={me}&outcome=passed");
        let control = control.clone();
        async move {
            let answer = control.post(url).send().await.unwrap();
            assert_eq!(answer.status(), 200, "{}", answer.text().await.unwrap());
        }
    };
    announce("begin", "a.test.js%20%3E%20one").await;
    announce("begin", "b.test.js%20%3E%20two").await;

    // The base URL's route: the header names the test; none is a conflict naming both.
    let direct = http();
    let ask = |client: &reqwest::Client, url: String, test: Option<&str>| {
        let mut request = client.post(url).json(&chat("hi"));
        if let Some(test) = test {
            request = request.header("x-test-id", test);
        }
        async move {
            let answer = request.send().await.unwrap();
            (answer.status().as_u16(), answer.text().await.unwrap())
        }
    };
    let chat_url = format!("{base}/openai/v1/chat/completions");
    let (status, _) = ask(&direct, chat_url.clone(), Some("b.test.js%20%3E%20two")).await;
    assert_eq!(status, 200);
    let (status, said) = ask(&direct, chat_url.clone(), None).await;
    assert_eq!(status, 409, "{said}");
    assert!(
        said.contains("runs 2 tests at once")
            && said.contains("a.test.js > one")
            && said.contains("b.test.js > two")
            && said.contains("X-Test-Id"),
        "{said}"
    );

    // A capture tunnel the process keeps: each request inside names its own test.
    let captured = reqwest::Client::builder()
        .proxy(reqwest::Proxy::https(&proxy).unwrap())
        .add_root_certificate(reqwest::Certificate::from_pem(&ca_pem).unwrap())
        .build()
        .unwrap();
    let tool = "https://tools.example/v1/chat/completions".to_string();
    for test in ["a.test.js%20%3E%20one", "b.test.js%20%3E%20two"] {
        let (status, said) = ask(&captured, tool.clone(), Some(test)).await;
        assert_eq!(status, 200, "{said}");
    }
    let (status, said) = ask(&captured, tool.clone(), None).await;
    assert_eq!(status, 409, "{said}");

    // A plain-HTTP request to a proxy, in absolute form.
    let proxied = reqwest::Client::builder()
        .proxy(reqwest::Proxy::http(&proxy).unwrap())
        .build()
        .unwrap();
    let (status, said) = ask(
        &proxied,
        "http://plain.example/v1/chat/completions".into(),
        Some("a.test.js%20%3E%20one"),
    )
    .await;
    assert_eq!(status, 200, "{said}");

    // One test's end: the other runs on, and a request naming none is its.
    announce("end", "a.test.js%20%3E%20one").await;
    let (status, said) = ask(&direct, chat_url, None).await;
    assert_eq!(status, 200, "{said}");

    let journal: Value = crate::support::get_json(&format!("{base}/__llmreplay/journal")).await;
    let tests: Vec<&str> = journal
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["status"] == 200)
        .map(|r| r["test"].as_str().unwrap())
        .collect();
    assert_eq!(
        tests,
        [
            "b.test.js > two",
            "a.test.js > one",
            "b.test.js > two",
            "a.test.js > one",
            "b.test.js > two"
        ],
        "{journal}"
    );
    // The header was the daemon's alone: no upstream saw it.
    for r in tls.received().iter().chain(plain.received().iter()) {
        assert!(
            !r.headers
                .iter()
                .any(|(k, _)| k.eq_ignore_ascii_case("x-test-id")),
            "{:?}",
            r.headers
        );
    }
    let _ = daemon.kill();
    let _ = daemon.wait();
}

/// A plugin's list of the suite it collected: two tests that would meet at one cassette
/// folder are named, with the folder, before either runs; a bad `filtered` is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collected_suite_names_tests_that_would_share_a_folder_before_they_run() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start().await;
    let upstream = format!("openai={}", fake.url());
    let serve = crate::support::Serve::in_mode(dir.path(), "replay", &upstream, &[]);
    let list = |query: &str, body: &str| {
        let url = format!("{}/__llmreplay/listed?{query}", serve.base);
        let body = body.to_string();
        async move {
            let answer = http().post(url).body(body).send().await.unwrap();
            (answer.status().as_u16(), answer.text().await.unwrap())
        }
    };
    let (status, said) = list(
        "runner=pytest&filtered=false",
        "t.py::test a\nt.py::test_b\n",
    )
    .await;
    assert_eq!(status, 200, "{said}");
    // Another worker's list, with one that meets `test a`'s folder.
    let (status, said) = list(
        "runner=pytest&filtered=false",
        "t.py::test a\nt.py::test-a\n",
    )
    .await;
    assert_eq!(status, 409, "{said}");
    assert!(
        said.contains("\"t.py::test a\" and \"t.py::test-a\" (folder t-py--test-a)"),
        "{said}"
    );
    let (status, said) = list("runner=pytest&filtered=maybe", "t.py::x\n").await;
    assert_eq!(status, 400, "{said}");
    assert!(said.contains("filtered is true or false"), "{said}");
    serve.stop();
}
