//! `cargo llmreplay diff --format html`, read by a real browser: cassettes recorded through the
//! real daemon from the loopback fake provider (a committed agent that calls `get_weather`, its
//! work-tree recording that calls `get_forecast`, a new test whose id and answer hold markup and
//! a bidi override), a replay run whose report fails, then the page opened by Debian's headless
//! Chromium. Its DOM shows every test, both timelines in order and the hostile text as text, and
//! the browser asks for nothing: a proxy listening on loopback sees no connection.

use crate::support::{binary, commit_all, FakeProvider, Output, Serve};
use serde_json::{json, Value};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

const WEATHER: &str = "html::agent$weather";
const HOSTILE: &str = "html::agent$<script>alert(1)</script>\u{202e}evil";

fn chat(prompt: &str, tool: Option<&str>) -> Value {
    let mut body =
        json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": prompt}]});
    if let Some(tool) = tool {
        body["tools"] = json!([{"type": "function", "function": {"name": tool, "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]);
    }
    body
}

/// Records `calls` (test, body) in order through `serve --mode record` into `dir/c`.
async fn record(dir: &Path, fake: &FakeProvider, calls: &[(&str, Value)]) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let up = format!("openai={}", fake.url());
    let serve = Serve::recording(dir, &up);
    let http = reqwest::Client::new();
    for (test, body) in calls {
        let answer = http
            .post(format!(
                "{}/openai/v1/chat/completions",
                serve.for_test(test)
            ))
            .header("authorization", "Bearer sk-html-report")
            .json(body)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
        answer.text().await.unwrap();
    }
    let stopped = serve.stop();
    assert!(stopped.status.success(), "{}", stopped.stderr);
}

fn llmreplay(dir: &Path, args: &[&str]) -> Output {
    Output::of(
        Command::new(binary())
            .current_dir(dir)
            .arg("llmreplay")
            .args(args)
            .env("CARGO_TARGET_DIR", dir.join("target"))
            .env_remove("CI"),
    )
}

/// Debian's Chromium, else None outside CI (a failure under CI=true).
fn chromium() -> Option<PathBuf> {
    let found = ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists());
    if found.is_none() {
        let why = "chromium is not installed: apt-get install -y chromium";
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("{why}");
        }
        eprintln!("SKIPPED (not under CI): {why}");
    }
    found
}

/// Headless Chromium on `page` with `what` (`--dump-dom`, `--screenshot=...`), every request
/// it might make sent to `proxy`; its stdout.
fn browse(chromium: &Path, page: &Path, proxy: &TcpListener, what: &[&str]) -> String {
    let profile = tempfile::tempdir().unwrap();
    let out = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            // Fewer of the browser's own requests, which the proxy would see beside the page's.
            "--disable-features=NetworkTimeServiceQuerying,OptimizationHints,Translate,MediaRouter,AutofillServerCommunication,CertificateTransparencyComponentUpdater",
            "--disable-client-side-phishing-detection",
            "--disable-domain-reliability",
            "--disable-extensions",
            "--disable-default-apps",
            "--no-pings",
            "--disable-field-trial-config",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!(
            "--proxy-server=http://127.0.0.1:{}",
            proxy.local_addr().unwrap().port()
        ))
        // Chromium bypasses the proxy for loopback unless told not to.
        .arg("--proxy-bypass-list=<-loopback>")
        .args(what)
        .arg(format!("file://{}", page.display()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The first line of each request that reached `proxy`, once the browser is gone: they wait
/// in its backlog, each with its request written.
fn asked(proxy: &TcpListener) -> Vec<String> {
    use std::io::{BufRead, BufReader};
    proxy.set_nonblocking(true).unwrap();
    let mut lines = Vec::new();
    loop {
        match proxy.accept() {
            Ok((stream, _)) => {
                stream.set_nonblocking(false).unwrap();
                stream
                    .set_read_timeout(Some(std::time::Duration::from_secs(5)))
                    .unwrap();
                let mut line = String::new();
                let _ = BufReader::new(stream).read_line(&mut line);
                lines.push(line.trim_end().to_string());
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return lines,
            Err(e) => panic!("{e}"),
        }
    }
}

/// A request Chromium makes for itself (`CONNECT accounts.google.com:443 HTTP/1.1`): to a
/// host of Google's.
fn chromiums_own(request: &str) -> bool {
    let target = request.split(' ').nth(1).unwrap_or_default();
    let target = target.strip_prefix("http://").unwrap_or(target);
    let host = target.split([':', '/']).next().unwrap_or_default();
    ["google.com", "googleapis.com", "gstatic.com", "gvt1.com"]
        .iter()
        .any(|own| host == *own || host.ends_with(&format!(".{own}")))
}

/// The kind and `did` line of each step of the weather test's timeline of `side`.
fn timeline(dom: &str, side: &str) -> Vec<String> {
    let test = dom
        .find("<h2><code>html::agent$weather</code></h2>")
        .expect("the weather test's section");
    let dom = &dom[test..];
    let start = dom
        .find(&format!("<div class=\"side {side}\">"))
        .unwrap_or_else(|| panic!("no {side} timeline in {dom}"));
    let list = &dom[start..];
    let list = &list[..list.find("</ol>").unwrap()];
    list.split("<li class=\"step ")
        .skip(1)
        .map(|step| {
            let kind = &step[..step.find('"').unwrap()];
            let did = step.split("<span class=\"did\">").nth(1).unwrap();
            format!("{kind}: {}", &did[..did.find("</span>").unwrap()])
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_html_report_shows_each_test_and_its_timelines_runs_nothing_and_fetches_nothing() {
    let Some(chromium) = chromium() else {
        return;
    };
    let fake = FakeProvider::start().await;
    let dir = crate::support::crate_in_repo("agent", true);
    let root = dir.path();

    // The base: the agent asks for the weather, then answers.
    record(
        root,
        &fake,
        &[
            (WEATHER, chat("Weather in Paris?", Some("get_weather"))),
            (WEATHER, chat("Sum it up", None)),
        ],
    )
    .await;
    commit_all(root);

    // The work tree: it asks for the forecast instead and answers otherwise, and a new test
    // whose id and answer hold markup and a bidi override.
    std::fs::remove_dir_all(root.join("c")).unwrap();
    *fake.state.suffix.lock().unwrap() = " and warm".into();
    record(
        root,
        &fake,
        &[
            (WEATHER, chat("Weather in Paris?", Some("get_forecast"))),
            (WEATHER, chat("Sum it up", None)),
            (
                HOSTILE,
                chat(
                    "<script>alert(2)</script><img src=http://evil.example/x.png> \u{202e}gnp.exe",
                    None,
                ),
            ),
        ],
    )
    .await;

    // A replay of one recorded call and one that has none: the run's report fails, which the
    // page says first, and its ledger counts the replay.
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/html_report/replay.py");
    let replay = Output::of(
        Command::new(binary())
            .current_dir(root)
            .args(["llmreplay", "run", "--cassette-dir", "c", "--", "python3"])
            .arg(&script)
            .arg(WEATHER)
            .arg(chat("Sum it up", None).to_string())
            .arg(chat("Never recorded", None).to_string())
            .env("CARGO_TARGET_DIR", root.join("target"))
            .env_remove("CI"),
    );
    assert_eq!(replay.stdout, "200\n404\n", "{}", replay.stderr);
    assert_ne!(replay.code, Some(0), "{}", replay.stderr);

    let out = llmreplay(
        root,
        &[
            "diff",
            "--base",
            "HEAD",
            "--cassette-dir",
            "c",
            "--format",
            "html",
        ],
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let page = root.join("report.html");
    std::fs::write(&page, &out.stdout).unwrap();
    assert!(!out.stdout.contains("<script"), "{}", out.stdout);

    let proxy = TcpListener::bind("127.0.0.1:0").unwrap();
    let dom = browse(&chromium, &page, &proxy, &["--dump-dom"]);

    // Every test, in a section of its own; the agent's drift class and its tool calls.
    assert_eq!(dom.matches("<section class=\"test\"").count(), 2, "{dom}");
    assert!(
        dom.contains("<h2><code>html::agent$weather</code></h2>"),
        "{dom}"
    );
    assert!(
        dom.contains("<span class=\"badge drift-trajectory breaks\">trajectory</span>"),
        "{dom}"
    );
    assert!(
        dom.contains("call 1: get_forecast instead of get_weather"),
        "{dom}"
    );
    assert_eq!(
        timeline(&dom, "base"),
        ["kind-model: calls get_weather", "kind-model: answers"],
        "{dom}"
    );
    assert_eq!(
        timeline(&dom, "now"),
        ["kind-model: calls get_forecast", "kind-model: answers"],
        "{dom}"
    );
    // The final answer, word by word.
    assert!(dom.contains("<ins> and warm</ins>"), "{dom}");
    // The run's cost before and after, priced from its model calls' tokens.
    let cost = dom
        .split("<p class=\"cost\">")
        .nth(1)
        .and_then(|rest| rest.split("</p>").next())
        .unwrap_or_else(|| panic!("no cost line in {dom}"));
    assert!(
        cost.starts_with("cost: $0.0000")
            && cost.contains(" → $0.0000")
            && cost.contains("(prices of 20"),
        "{cost}"
    );

    // The hostile id and answer are text: escaped markup, the override as a visible mark.
    assert!(
        dom.contains("html::agent$&lt;script&gt;alert(1)&lt;/script&gt;\\u{202e}evil"),
        "{dom}"
    );
    assert!(
        dom.contains("&lt;script&gt;alert(2)&lt;/script&gt;&lt;img src=http://evil.example/x.png&gt; \\u{202e}gnp.exe"),
        "{dom}"
    );
    assert!(!dom.contains("<script") && !dom.contains("<img"), "{dom}");
    assert!(!dom.contains('\u{202e}'), "{dom}");

    // The run's report: why it fails comes first, before the tests.
    let gate = dom.find("Why the run fails").expect("the gate's reasons");
    let missing = dom.find("missing (1)").expect("the missing call");
    let first_test = dom.find("<section class=\"test\"").unwrap();
    let ledger = dom.find("<p class=\"ledger\">").expect("the ledger's line");
    assert!(
        gate < missing && missing < ledger && ledger < first_test,
        "{dom}"
    );
    assert!(dom[ledger..].contains("not spent by 1 replay"), "{dom}");
    assert!(dom.contains("Never recorded"), "{dom}");

    // A screenshot for people to look at.
    let shot = root.join("report.png");
    browse(
        &chromium,
        &page,
        &proxy,
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=1200,1600",
        ],
    );
    let size = std::fs::metadata(&shot).map(|m| m.len()).unwrap_or(0);
    assert!(size > 20_000, "a screenshot of {size} bytes");
    let kept = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/llmreplay-html-report.png");
    std::fs::copy(&shot, &kept).unwrap();

    // Neither visit asked for anything the page names. Headless Chromium still asks Google's
    // sign-in and search hosts for itself whatever page it opens (a blank one too), so those
    // are told apart by host; the hostile answer's image, were it markup, would be here.
    let asked = asked(&proxy);
    let page_asked: Vec<&String> = asked.iter().filter(|r| !chromiums_own(r)).collect();
    assert!(
        page_asked.is_empty(),
        "the page made requests: {page_asked:?}"
    );
}
