//! Recording where users are: an HTTPS provider whose certificate only a private CA vouches
//! for, trusted through `SSL_CERT_FILE` or `[upstream] ca_file`, reached directly or through a
//! real proxy (tinyproxy) with `CONNECT`, `NO_PROXY` honoured, the proxy's credentials never
//! written or printed; then replayed offline, byte for byte.

use crate::support::{all_files, http, FakeProvider, Serve, TestCa, Tinyproxy};
use serde_json::{json, Value};
use std::path::Path;

fn chat(prompt: &str) -> Value {
    json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": prompt}]})
}

/// Sends one chat through `serve` for test `test`, returning status and body bytes.
async fn ask(serve: &Serve, test: &str, prompt: &str) -> (u16, bytes::Bytes) {
    let url = format!("{}/openai/v1/chat/completions", serve.for_test(test));
    let r = http().post(&url).json(&chat(prompt)).send().await.unwrap();
    (r.status().as_u16(), r.bytes().await.unwrap())
}

fn recording(dir: &Path, fake: &FakeProvider, env: &[(&str, &str)]) -> Serve {
    let up = format!("openai={}", fake.url());
    Serve::start_with_env(
        dir,
        &[
            "--cassette-dir",
            "c",
            "--mode",
            "record-missing",
            "--upstream",
            &up,
        ],
        env,
    )
}

/// Replays what `dir/c` holds with the provider gone, and checks the bytes.
async fn replays_offline(dir: &Path, answers: &[(&str, &str, bytes::Bytes)]) {
    let serve = Serve::replaying(dir);
    for (test, prompt, recorded) in answers {
        let (status, body) = ask(&serve, test, prompt).await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        assert_eq!(&body, recorded, "replayed byte for byte");
    }
    serve.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_provider_signed_by_a_private_ca_is_recorded_once_its_ca_is_trusted() {
    let ca = TestCa::new("company");
    let mut fake = FakeProvider::start_tls(&ca).await;
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("company-ca.pem");
    ca.write_pem(&ca_file);
    // Some other CA only: whatever this machine's own store holds does not matter.
    let other = dir.path().join("other-ca.pem");
    TestCa::new("unrelated").write_pem(&other);

    // Not trusted: a 502 that names the host, the roots tried and how to add a CA.
    let untrusted = recording(
        dir.path(),
        &fake,
        &[("SSL_CERT_FILE", other.to_str().unwrap())],
    );
    let (status, body) = ask(&untrusted, "net$untrusted", "hi").await;
    assert_eq!(status, 502);
    let message: Value = serde_json::from_slice(&body).unwrap();
    let message = message["error"]["message"].as_str().unwrap();
    for part in [
        "the certificate of localhost is not trusted",
        "Roots tried: SSL_CERT_FILE=",
        "[upstream] ca_file",
    ] {
        assert!(message.contains(part), "{part:?} in {message}");
    }
    untrusted.stop();
    assert!(
        !dir.path().join("c/net--untrusted").exists(),
        "nothing saved"
    );

    // Trusted through SSL_CERT_FILE, as curl and the SDKs are.
    let serve = recording(
        dir.path(),
        &fake,
        &[("SSL_CERT_FILE", ca_file.to_str().unwrap())],
    );
    let (status, by_env) = ask(&serve, "net$by_env", "over TLS").await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&by_env));
    assert!(String::from_utf8_lossy(&by_env).contains("You said: over TLS"));
    serve.stop();

    // Trusted through [upstream] ca_file, the system store left as it is.
    std::fs::write(
        dir.path().join("llmreplay.toml"),
        "[upstream]\nca_file = \"company-ca.pem\"\n",
    )
    .unwrap();
    let serve = recording(dir.path(), &fake, &[]);
    let (status, by_file) = ask(&serve, "net$by_file", "through ca_file").await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&by_file));
    serve.stop();
    assert_eq!(
        fake.received().len(),
        2,
        "the untrusted call never got through"
    );

    fake.stop();
    replays_offline(
        dir.path(),
        &[
            ("net$by_env", "over TLS", by_env),
            ("net$by_file", "through ca_file", by_file),
        ],
    )
    .await;

    // A ca_file that is not a certificate fails at start, naming it.
    std::fs::write(dir.path().join("company-ca.pem"), "not a certificate\n").unwrap();
    let bad = Serve::try_start(dir.path(), &["--cassette-dir", "c"], &[])
        .err()
        .unwrap();
    assert!(bad.contains("[upstream] ca_file"), "{bad}");
    assert!(bad.contains("company-ca.pem"), "{bad}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_through_a_real_proxy_with_connect_and_no_proxy_bypasses_it() {
    let credentials = Some(("team", "proxy-secret-7f3a"));
    let Some(proxy) = Tinyproxy::start(credentials) else {
        return;
    };
    let ca = TestCa::new("gateway");
    let mut tls_fake = FakeProvider::start_tls(&ca).await;
    let mut plain_fake = FakeProvider::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    ca.write_pem(&ca_file);
    let proxy_url = proxy.url(credentials);

    // HTTPS through the proxy: a CONNECT tunnel, TLS inside it.
    let serve = recording(
        dir.path(),
        &tls_fake,
        &[
            ("HTTPS_PROXY", &proxy_url),
            ("SSL_CERT_FILE", ca_file.to_str().unwrap()),
        ],
    );
    let (status, tunnelled) = ask(&serve, "net$tunnelled", "through the proxy").await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&tunnelled));
    let stopped = serve.stop();
    let connect = format!("CONNECT localhost:{}", tls_fake.addr.port());
    assert!(
        proxy.log().contains(&connect),
        "{connect:?} in\n{}",
        proxy.log()
    );
    let proxy_plain = format!("http://127.0.0.1:{}/", proxy.port);
    assert!(
        stopped
            .stderr
            .contains(&format!("through proxy {proxy_plain} (HTTPS_PROXY)")),
        "record modes say which proxy: {}",
        stopped.stderr
    );

    // Plain HTTP through the proxy (lowercase variable), in absolute form.
    let serve = recording(dir.path(), &plain_fake, &[("http_proxy", &proxy_url)]);
    let (status, forwarded) = ask(&serve, "net$forwarded", "plain through the proxy").await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&forwarded));
    serve.stop();
    let absolute = format!(
        "POST http://127.0.0.1:{}/v1/chat/completions",
        plain_fake.addr.port()
    );
    assert!(
        proxy.log().contains(&absolute),
        "{absolute:?} in\n{}",
        proxy.log()
    );

    // NO_PROXY: straight to the provider, the proxy sees nothing of it.
    let before = proxy.log();
    let serve = recording(
        dir.path(),
        &tls_fake,
        &[
            ("HTTPS_PROXY", &proxy_url),
            ("NO_PROXY", "localhost,127.0.0.1"),
            ("SSL_CERT_FILE", ca_file.to_str().unwrap()),
        ],
    );
    let (status, direct) = ask(&serve, "net$direct", "around the proxy").await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&direct));
    let stopped = serve.stop();
    assert_eq!(proxy.log(), before, "the proxy saw the NO_PROXY request");
    assert!(stopped.stderr.contains("), direct"), "{}", stopped.stderr);

    // Wrong credentials: the proxy's refusal, naming the proxy without them.
    let wrong = proxy.url(Some(("team", "wrong-secret-91c2")));
    let serve = recording(
        dir.path(),
        &tls_fake,
        &[
            ("HTTPS_PROXY", &wrong),
            ("SSL_CERT_FILE", ca_file.to_str().unwrap()),
        ],
    );
    let (status, refused) = ask(&serve, "net$refused", "no entry").await;
    assert_eq!(status, 502);
    let refused = String::from_utf8_lossy(&refused).into_owned();
    assert!(
        refused.contains(&format!("could not go through the proxy {proxy_plain}")),
        "{refused}"
    );
    let stopped = serve.stop();

    // The credentials are nowhere: not in the cassettes, not in what was printed.
    for (path, text) in all_files(&dir.path().join("c")) {
        for secret in [
            "proxy-secret-7f3a",
            "wrong-secret-91c2",
            "dGVhbTpwcm94eS1zZWNyZXQtN2YzYQ",
        ] {
            assert!(!text.contains(secret), "{secret} in {}", path.display());
        }
    }
    assert!(!refused.contains("wrong-secret"), "{refused}");
    assert!(!stopped.stderr.contains("secret"), "{}", stopped.stderr);

    tls_fake.stop();
    plain_fake.stop();
    replays_offline(
        dir.path(),
        &[
            ("net$tunnelled", "through the proxy", tunnelled),
            ("net$forwarded", "plain through the proxy", forwarded),
            ("net$direct", "around the proxy", direct),
        ],
    )
    .await;
}

#[test]
fn a_proxy_the_client_cannot_use_fails_at_start() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("llmreplay.toml"),
        "[upstream]\nproxy = \"socks5://u:hidden@127.0.0.1:1080\"\n",
    )
    .unwrap();
    let err = Serve::try_start(dir.path(), &[], &[]).err().unwrap();
    assert!(err.contains("socks5 proxies are not supported"), "{err}");
    assert!(!err.contains("hidden"), "{err}");
    // From the environment, with no llmreplay.toml: the variable is named, no file.
    let bare = tempfile::tempdir().unwrap();
    let err = Serve::try_start(
        bare.path(),
        &["--mode", "record"],
        &[("HTTPS_PROXY", "socks5://127.0.0.1:1080")],
    )
    .err()
    .unwrap();
    assert!(err.contains("HTTPS_PROXY socks5://127.0.0.1:1080"), "{err}");
    assert!(!err.contains("llmreplay.toml"), "{err}");
}

/// Under `cargo llmreplay test` behind a proxy, each test process gets loopback added to
/// `NO_PROXY`, keeping the hosts the developer listed: its clients reach the daemon directly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_processes_behind_a_proxy_reach_the_daemon_directly() {
    let sample = crate::support::Sample::new();
    let run = sample.run(
        &["-E", "test(=sees_its_own_base_url)"],
        &[
            ("HTTPS_PROXY", "http://127.0.0.1:9"),
            ("NO_PROXY", "internal.example"),
        ],
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
}
