//! The hostile suite's secrets in bodies: what the official SDKs send and receive as secrets
//! (a hosted MCP tool's `authorization`, an MCP server's `authorization_token`, google-auth's
//! `client_secret` and `refresh_token`, a token endpoint's tokens) never reach a cassette, a
//! log or an output, and replay matches whatever the live value. Real SDKs in the venv, real
//! HTTP and the daemon's real HTTPS proxy on 127.0.0.1, a fake provider and token endpoint.

use crate::support::{all_files, run_sdk_script_with, sdk_python, FakeProvider, Serve, TestCa};
use serde_json::Value;
use std::path::Path;

const PLACEHOLDER: &str = "llmreplay-redacted";

/// Every file under `dir` and every output, none holding any of `secrets`.
fn nowhere(dir: &Path, outputs: &[&str], secrets: &[&str]) {
    for (path, text) in all_files(dir) {
        for secret in secrets {
            assert!(
                !text.contains(secret),
                "{secret} in {}:\n{text}",
                path.display()
            );
        }
    }
    for out in outputs {
        for secret in secrets {
            assert!(!out.contains(secret), "{secret} in an output:\n{out}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_authorization_of_openai_and_anthropic_is_never_stored_and_any_token_replays() {
    let Some(python) = sdk_python("anthropic") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start().await;
    let run = |serve: &Serve, token: &str| {
        let base = serve.for_test("secrets::t$mcp");
        let (openai, anthropic) = (format!("{base}/openai/v1"), format!("{base}/anthropic"));
        run_sdk_script_with(
            &python,
            "body_secrets.py",
            &["mcp", token],
            &[
                ("OPENAI_BASE_URL", &openai),
                ("ANTHROPIC_BASE_URL", &anthropic),
                ("OPENAI_API_KEY", "sk-test"),
                ("ANTHROPIC_API_KEY", "sk-test"),
            ],
        )
    };
    let rec = Serve::recording_from(
        dir.path(),
        &[("openai", fake.url()), ("anthropic", fake.url())],
    );
    let live = "mcp-live-token-Q7XW2";
    let recorded: Value = serde_json::from_str(&run(&rec, live)).unwrap();
    assert_eq!(recorded["openai"], "You said: Use the wiki tool");
    let rec_out = rec.stop();
    // The provider got the token as sent; only the recording lost it.
    let sent = fake.received();
    assert_eq!(sent[0].body["tools"][0]["authorization"], live);
    assert_eq!(sent[1].body["mcp_servers"][0]["authorization_token"], live);
    let folder = dir.path().join("c/secrets--t--mcp");
    let openai = std::fs::read_to_string(folder.join("openai.json")).unwrap();
    assert!(openai.contains(PLACEHOLDER), "{openai}");
    let anthropic = std::fs::read_to_string(folder.join("anthropic.json")).unwrap();
    assert!(anthropic.contains(PLACEHOLDER), "{anthropic}");

    // Replay with another token: the same recordings, nothing sent.
    let other = "mcp-rotated-token-9KD3";
    let replay = Serve::replaying(dir.path());
    let replayed: Value = serde_json::from_str(&run(&replay, other)).unwrap();
    assert_eq!(replayed, recorded);
    let replay_out = replay.stop();
    assert_eq!(fake.received().len(), 2);
    nowhere(
        dir.path(),
        &[&rec_out.stderr, &replay_out.stderr],
        &[live, other],
    );
}

/// A chat history as the official OpenAI SDK sends it, with a password inside an assistant
/// tool call's `arguments` (JSON in a JSON string) and a token in a tool result's JSON text:
/// neither reaches a cassette, a log or an output, the provider gets both as sent, and a
/// replay with another password and token matches the same recording.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_calls_password_and_a_tool_results_token_are_never_stored_and_any_replays() {
    let Some(python) = sdk_python("openai") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start().await;
    let run = |serve: &Serve, password: &str, token: &str| {
        let base = serve.for_test("secrets::t$toolcall");
        run_sdk_script_with(
            &python,
            "body_secrets.py",
            &["toolcall", password, token],
            &[
                ("OPENAI_BASE_URL", &format!("{base}/openai/v1")),
                ("OPENAI_API_KEY", "sk-test"),
            ],
        )
    };
    let rec = Serve::recording_from(dir.path(), &[("openai", fake.url())]);
    let (password, token) = ("hunter2-Zq81xPw", "tok-live-5TRv8");
    let recorded: Value = serde_json::from_str(&run(&rec, password, token)).unwrap();
    let rec_out = rec.stop();
    let sent = fake.received();
    let arguments = sent[0].body["messages"][1]["tool_calls"][0]["function"]["arguments"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(arguments.contains(password), "{arguments}");
    let cassette =
        std::fs::read_to_string(dir.path().join("c/secrets--t--toolcall/openai.json")).unwrap();
    assert!(cassette.contains(PLACEHOLDER), "{cassette}");

    let (other_password, other_token) = ("correct-horse-77Bq", "tok-rotated-2MZk");
    let replay = Serve::replaying(dir.path());
    let replayed: Value = serde_json::from_str(&run(&replay, other_password, other_token)).unwrap();
    assert_eq!(replayed, recorded);
    let replay_out = replay.stop();
    assert_eq!(fake.received().len(), 1, "the replay sent nothing");
    nowhere(
        dir.path(),
        &[&rec_out.stderr, &replay_out.stderr],
        &[password, token, other_password, other_token],
    );
}

/// A token endpoint behind the daemon's proxy, as a script that sourced `serve --env` meets it:
/// a fake on TLS stands in for `host`, and each call runs one of `body_secrets.py`'s modes.
struct TokenEndpoint {
    fake: FakeProvider,
    dir: tempfile::TempDir,
    scratch: tempfile::TempDir,
    python: std::path::PathBuf,
    upstream: String,
}

impl TokenEndpoint {
    async fn start(python: std::path::PathBuf, host: &str) -> TokenEndpoint {
        let ca = TestCa::new("secrets");
        let fake = FakeProvider::start_tls(&ca).await;
        let (dir, scratch) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        ca.trusted_by(dir.path(), scratch.path(), "");
        let upstream = format!("{host}=https://127.0.0.1:{}", fake.addr.port());
        TokenEndpoint {
            fake,
            dir,
            scratch,
            python,
            upstream,
        }
    }

    /// Runs the script under `serve --env` in `mode` for `test`; what it printed, parsed, and
    /// the lines `serve --env` printed.
    fn run(&self, mode: &str, test: &str, args: &[&str]) -> (Value, String) {
        let target = self.scratch.path().join("target");
        let mut serve_args = vec!["--test-id", test, "--cassette-dir", "c", "--mode", mode];
        if mode == "record" {
            serve_args.extend(["--upstream", &self.upstream]);
        }
        let (mut serve, lines) = crate::clients::serve_env(
            self.dir.path(),
            &serve_args,
            &[("CARGO_TARGET_DIR", target.to_str().unwrap())],
        );
        let env: Vec<(String, String)> = lines
            .lines()
            .filter_map(|l| l.strip_prefix("export "))
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.trim_matches('\'').to_string()))
            .collect();
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let out = run_sdk_script_with(&self.python, "body_secrets.py", args, &env);
        crate::support::terminate(&mut serve);
        (serde_json::from_str(&out).unwrap(), lines)
    }
}

/// google-auth refreshes user credentials at Google's token endpoint through the daemon's
/// proxy (`serve --env` sourced): the form's `client_secret` and `refresh_token` and the
/// answer's tokens are stored as the placeholder, and a replay with other secrets gets the
/// placeholder token, which google-auth takes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn google_auth_refresh_through_capture_stores_no_secret_and_replays_a_placeholder_token() {
    let Some(python) = sdk_python("google.auth") else {
        return;
    };
    let endpoint = TokenEndpoint::start(python, "oauth2.googleapis.com").await;
    let test = "secrets::t$google";
    let live = ["google", "GOCSPX-live-secret-51", "1//live-refresh-77"];
    let (recorded, rec_env) = endpoint.run("record", test, &live);
    assert_eq!(
        recorded["token"], "ya29.fake-access-1",
        "the live token reached the client"
    );
    let form = String::from_utf8(endpoint.fake.received()[0].raw.to_vec()).unwrap();
    assert!(
        form.contains("client_secret=GOCSPX-live-secret-51"),
        "{form}"
    );
    let cassette = endpoint
        .dir
        .path()
        .join("c/secrets--t--google/oauth2.googleapis.com.json");
    let text = std::fs::read_to_string(&cassette).unwrap();
    assert!(text.contains(PLACEHOLDER), "{text}");

    let other = ["google", "GOCSPX-other-secret-2", "1//other-refresh-3"];
    let (replayed, replay_env) = endpoint.run("replay", test, &other);
    assert_eq!(replayed["token"], PLACEHOLDER);
    assert_eq!(endpoint.fake.received().len(), 1, "replay sent nothing");
    nowhere(
        endpoint.dir.path(),
        &[&rec_env, &replay_env],
        &[
            "GOCSPX-live-secret-51",
            "1//live-refresh-77",
            "ya29.fake-access",
            "1//fake-refresh",
            "fake-1.",
            "GOCSPX-other-secret-2",
        ],
    );
}

/// azure-identity's ClientSecretCredential gets a token from Microsoft Entra ID through the
/// daemon's proxy (the tenant's OpenID configuration, then its token endpoint): the form's
/// `client_secret` and the answer's `access_token` are stored as the placeholder, and a replay
/// with another secret gets the placeholder token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn azure_identity_client_secret_through_capture_stores_no_secret_and_replays() {
    let Some(python) = sdk_python("azure.identity") else {
        return;
    };
    let endpoint = TokenEndpoint::start(python, "login.microsoftonline.com").await;
    let test = "secrets::t$azure";
    let (recorded, rec_env) = endpoint.run("record", test, &["azure", "Qx8Q~live-client-secret"]);
    assert_eq!(recorded["token"], "eyJ0eXAiOiJKV1QifQ.fake-entra-2");
    let sent: Vec<String> = endpoint
        .fake
        .received()
        .iter()
        .map(|r| String::from_utf8_lossy(&r.raw).into_owned())
        .collect();
    assert!(
        sent.iter()
            .any(|b| b.contains("client_secret=Qx8Q~live-client-secret")
                || b.contains("client_secret=Qx8Q%7Elive-client-secret")),
        "{sent:?}"
    );
    let cassette = endpoint
        .dir
        .path()
        .join("c/secrets--t--azure/login.microsoftonline.com.json");
    let text = std::fs::read_to_string(&cassette).unwrap();
    assert!(text.contains(PLACEHOLDER), "{text}");

    let seen = endpoint.fake.received().len();
    let (replayed, replay_env) = endpoint.run("replay", test, &["azure", "Qx8Q~rotated-secret"]);
    assert_eq!(replayed["token"], PLACEHOLDER);
    assert_eq!(endpoint.fake.received().len(), seen, "replay sent nothing");
    nowhere(
        endpoint.dir.path(),
        &[&rec_env, &replay_env],
        &["live-client-secret", "rotated-secret", "fake-entra"],
    );
}

/// An OpenAI Realtime client secret (`POST /v1/realtime/client_secrets`, whose answer is a
/// bare `value`) and a beta Realtime session (its `client_secret.value`), asked for with the
/// official SDK: the ephemeral keys reach the client live, no file or output holds one, and a
/// replay answers the placeholder with the expiry as recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn realtime_ephemeral_keys_are_never_stored_and_replay() {
    let Some(python) = sdk_python("openai") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start().await;
    let run = |serve: &Serve, key: &str| {
        let base = serve.for_test("secrets::t$realtime");
        let out = run_sdk_script_with(
            &python,
            "body_secrets.py",
            &["realtime"],
            &[
                ("OPENAI_BASE_URL", &format!("{base}/openai/v1")),
                ("OPENAI_API_KEY", key),
            ],
        );
        serde_json::from_str::<Value>(&out).unwrap()
    };
    let rec = Serve::recording_from(dir.path(), &[("openai", fake.url())]);
    let recorded = run(&rec, "sk-test");
    let rec_out = rec.stop();
    let keys: Vec<String> = ["value", "session"]
        .iter()
        .map(|k| recorded[k].as_str().unwrap().to_string())
        .collect();
    assert!(keys.iter().all(|k| k.starts_with("ek_")), "{recorded}");
    let cassette =
        std::fs::read_to_string(dir.path().join("c/secrets--t--realtime/openai.json")).unwrap();
    assert!(cassette.contains(PLACEHOLDER), "{cassette}");

    let replay = Serve::replaying(dir.path());
    let replayed = run(&replay, "sk-other");
    let replay_out = replay.stop();
    assert_eq!(fake.received().len(), 2, "the replay sent nothing");
    assert_eq!(replayed["value"], PLACEHOLDER, "{replayed}");
    assert_eq!(replayed["session"], PLACEHOLDER, "{replayed}");
    assert_eq!(replayed["expires_at"], recorded["expires_at"]);
    assert_eq!(
        replayed["session_expires_at"],
        recorded["session_expires_at"]
    );
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    nowhere(dir.path(), &[&rec_out.stderr, &replay_out.stderr], &keys);
}

/// boto3 assumes a role through AWS STS behind the daemon's proxy (`serve --env` sourced, the
/// run's CA trusted by `AWS_CA_BUNDLE`), then signs a call with the role's temporary
/// credentials: the XML answer's `SecretAccessKey`, `SessionToken` and `AccessKeyId` reach
/// the client live, the signed call carries them, and no file or output holds any; a replay
/// with other long-term keys gives the placeholder credentials, which boto3 signs with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boto3_assume_role_through_capture_stores_no_credential_and_replays() {
    let Some(python) = sdk_python("boto3") else {
        return;
    };
    let endpoint = TokenEndpoint::start(python, "sts.us-east-1.amazonaws.com").await;
    let test = "secrets::t$sts";
    let live = [
        "sts",
        "AKIAI44QH8DHBLIVE001",
        "je7MtGbClwBF/2Zp9Utk/h3yCo8nvbLIVEKEY",
    ];
    let (recorded, rec_env) = endpoint.run("record", test, &live);
    let (key_id, secret, session) = (
        recorded["key_id"].as_str().unwrap().to_string(),
        recorded["secret"].as_str().unwrap().to_string(),
        recorded["session"].as_str().unwrap().to_string(),
    );
    assert!(secret.starts_with("fake/sts+secret"), "{recorded}");
    assert_eq!(
        recorded["arn"],
        "arn:aws:sts::123456789012:assumed-role/ci-role/ci"
    );
    // The signed call went out with the role's credentials.
    let sent = endpoint.fake.received();
    assert_eq!(sent.len(), 2, "{sent:?}");
    let header = |name: &str| {
        sent[1]
            .headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    assert_eq!(header("x-amz-security-token"), session);
    assert!(
        header("authorization").contains(&format!("Credential={key_id}/")),
        "{}",
        header("authorization")
    );
    let cassette = endpoint
        .dir
        .path()
        .join("c/secrets--t--sts/sts.us-east-1.amazonaws.com.json");
    let text = std::fs::read_to_string(&cassette).unwrap();
    assert!(text.contains(PLACEHOLDER), "{text}");
    assert!(
        text.contains("2099-01-01T00:00:00Z"),
        "the expiry is kept: {text}"
    );

    let other = [
        "sts",
        "AKIAI44QH8DHBOTHER02",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYOTHERKEY",
    ];
    let (replayed, replay_env) = endpoint.run("replay", test, &other);
    assert_eq!(endpoint.fake.received().len(), 2, "replay sent nothing");
    assert_eq!(replayed["secret"], PLACEHOLDER, "{replayed}");
    assert_eq!(replayed["session"], PLACEHOLDER, "{replayed}");
    assert_eq!(replayed["arn"], recorded["arn"]);
    let secrets = [
        live[1], live[2], other[1], other[2], &key_id, &secret, &session,
    ];
    nowhere(endpoint.dir.path(), &[&rec_env, &replay_env], &secrets);
    // The run's own files (its log, run log and report) are in the target dir beside.
    nowhere(endpoint.scratch.path(), &[], &secrets);
}

/// Realistic secret field names, as a generator: the words the name rule must catch, in the
/// spellings SDKs and people write them.
fn secret_names() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    let stem = prop::sample::select(vec![
        "api_token",
        "auth_token",
        "bearer_token",
        "secret_key",
        "client_token",
        "private_token",
        "accessKey",
        "openai_api_key",
        "credential",
        "x-goog-api-key",
        "password",
        "db_passwd",
        "client_secret",
        "GITHUB_TOKEN",
        "SessionToken",
    ]);
    let case = prop::sample::select(vec![0u8, 1, 2]);
    (stem, case).prop_map(|(s, c)| match c {
        0 => s.to_string(),
        1 => s.to_uppercase(),
        _ => s.replace('_', "-"),
    })
}

/// One chat request carrying `secret` under `name` in every JSON carrier: a tool call's
/// arguments, a tool result, JSON in a string in a string, an env map, a secret-named object,
/// and a user message that the fake provider echoes back in its answer.
fn carrier_request(name: &str, secret: &str) -> Value {
    let inner = serde_json::json!({ name: secret }).to_string();
    let deeper = serde_json::json!({"text": inner.clone()}).to_string();
    serde_json::json!({
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "login", "arguments": inner}}]},
            {"role": "tool", "tool_call_id": "c1", "content": deeper},
            {"role": "user", "content": format!("{{\"env\": {{\"{}\": \"{secret}\"}}}}", name.to_uppercase())},
        ],
        "metadata": {"client_secret": {"value": secret}},
    })
}

/// Secrets drawn under generated names into every JSON carrier, a secret query and a secret
/// header are recorded through the real daemon: no file it wrote (cassettes, blobs, spool,
/// journal) and no output holds one, and the recording replays with other secrets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_in_every_json_carrier_are_never_stored_and_replay_with_other_values() {
    use proptest::strategy::{Strategy, ValueTree};
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let names: Vec<String> = (0..6)
        .map(|_| secret_names().new_tree(&mut runner).unwrap().current())
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start().await;
    let send = |serve: &Serve, round: &str| {
        let base = serve.for_test("secrets::t$carriers");
        let names = names.clone();
        let round = round.to_string();
        async move {
            let client = crate::support::http();
            let mut answers = Vec::new();
            for (i, name) in names.iter().enumerate() {
                let secret = format!("{round}-secret-{i}-Zq81x");
                let resp = client
                    .post(format!(
                        "{base}/openai/v1/chat/completions?api_token={round}-query-{i}-Zq81x"
                    ))
                    .header("authorization", format!("Bearer {round}-header-{i}-Zq81x"))
                    .json(&carrier_request(name, &secret))
                    .send()
                    .await
                    .unwrap();
                let status = resp.status();
                let text = resp.text().await.unwrap();
                assert_eq!(status, 200, "{name}: {text}");
                answers.push(text);
            }
            answers
        }
    };
    let rec = Serve::recording(dir.path(), &format!("openai={}", fake.url()));
    let recorded = send(&rec, "live").await;
    let rec_out = rec.stop();
    assert!(fake.received().len() == names.len());
    let replay = Serve::replaying(dir.path());
    let replayed = send(&replay, "rotated").await;
    let replay_out = replay.stop();
    assert_eq!(fake.received().len(), names.len(), "replay went upstream");
    // The client got the provider's echo live; replay gives the recording, placeholder and all.
    assert!(recorded.iter().any(|a| a.contains("live-secret")));
    assert!(
        replayed.iter().all(|a| a.contains(PLACEHOLDER)),
        "{replayed:?}"
    );
    nowhere(
        dir.path(),
        &[&rec_out.stderr, &replay_out.stderr],
        &[
            "live-secret",
            "live-query",
            "live-header",
            "rotated-secret",
            "rotated-query",
            "rotated-header",
        ],
    );
}

/// A body in one carrier that is not plain JSON, holding `secret` under `name`: its content
/// type, content encoding and bytes.
fn non_json_carrier(
    kind: u8,
    name: &str,
    secret: &str,
) -> (&'static str, Option<&'static str>, Vec<u8>) {
    use std::io::Write;
    match kind {
        // A form with every oddity: empty pairs, a pair without `=`, a `{` in another value,
        // a trailing `&` and newline.
        0 => (
            "application/x-www-form-urlencoded",
            None,
            format!("grant_type=password&&flag&{name}={secret}&state={{x}}&\n").into_bytes(),
        ),
        // XML, the secret an element's text.
        1 => (
            "text/xml",
            None,
            format!("<Response><Result><Credentials><{name}>{secret}</{name}><Expiration>2099-01-01T00:00:00Z</Expiration></Credentials></Result></Response>\n").into_bytes(),
        ),
        // SSE events whose JSON is spaced, with a CR.
        2 => (
            "text/event-stream",
            None,
            format!("event: session.created\ndata:  {{ \"{name}\" :  \"{secret}\" , \"n\": 1 }}\r\n\ndata: [DONE]\n\n").into_bytes(),
        ),
        // JSON, gzipped.
        3 => {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            gz.write_all(format!("{{\"note\": \"x\", \"{name}\": \"{secret}\"}}").as_bytes())
                .unwrap();
            ("application/json", Some("gzip"), gz.finish().unwrap())
        }
        // JSON past the size kept inline and parsed (a blob), the secret near its end.
        _ => {
            let filler = "{\"n\": 1},".repeat((4 << 20) / 9 + 16);
            (
                "application/json",
                None,
                format!("[{filler}{{\"{name}\": \"{secret}\"}}]").into_bytes(),
            )
        }
    }
}

/// Every file under `dir`, read as text after undoing gzip (a cassette or blob kept
/// compressed), none holding any of `secrets`; the same for `outputs`.
fn nowhere_decoded(dir: &Path, outputs: &[&str], secrets: &[String]) {
    use std::io::Read;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            let mut bytes = std::fs::read(&p).unwrap();
            if bytes.starts_with(&[0x1f, 0x8b]) {
                let mut plain = Vec::new();
                if flate2::read::MultiGzDecoder::new(&bytes[..])
                    .read_to_end(&mut plain)
                    .is_ok()
                {
                    bytes = plain;
                }
            }
            let text = String::from_utf8_lossy(&bytes);
            for secret in secrets {
                assert!(
                    !text.contains(secret.as_str()),
                    "{secret} in {}",
                    p.display()
                );
            }
        }
    }
    for out in outputs {
        for secret in secrets {
            assert!(
                !out.contains(secret.as_str()),
                "{secret} in an output:\n{out}"
            );
        }
    }
}

/// Secrets drawn under generated names into every carrier that is not plain JSON (a form with
/// oddities, XML, spaced SSE, gzip, a body past the blob size), sent through the real daemon to
/// a fake that answers each body back as it came: no file the daemon wrote (cassettes, blobs,
/// run log, journal) and no output holds a secret of the request or the answer, and each
/// recording replays with other secrets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_in_every_other_carrier_are_never_stored_and_replay_with_other_values() {
    use proptest::strategy::{Strategy, ValueTree};
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    // A case: a name, a secret's tail (the alphabet of keys and tokens), a carrier.
    let case = (secret_names(), "[A-Za-z0-9_.~-]{10,24}");
    let cases: Vec<(String, String, u8)> = (0..10u8)
        .map(|i| {
            let (name, tail) = case.new_tree(&mut runner).unwrap().current();
            (name, tail, i % 5)
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start().await;
    let send = |serve: &Serve, round: &'static str| {
        let base = serve.for_test("secrets::t$other_carriers");
        let cases = cases.clone();
        async move {
            let client = crate::support::http();
            let mut answers = Vec::new();
            for (i, (name, tail, kind)) in cases.iter().enumerate() {
                let secret = format!("{round}{i}x{tail}");
                let (content_type, encoding, body) = non_json_carrier(*kind, name, &secret);
                let mut req = client
                    .post(format!("{base}/openai/v1/case{i}/echo"))
                    .header("content-type", content_type)
                    .header("accept-encoding", "identity")
                    .body(body);
                if let Some(e) = encoding {
                    req = req.header("content-encoding", e);
                }
                let resp = req.send().await.unwrap();
                let status = resp.status();
                let bytes = resp.bytes().await.unwrap();
                assert_eq!(
                    status,
                    200,
                    "{name} in carrier {kind}: {}",
                    String::from_utf8_lossy(&bytes[..bytes.len().min(500)])
                );
                answers.push(bytes);
            }
            answers
        }
    };
    let rec = Serve::recording(dir.path(), &format!("openai={}", fake.url()));
    let recorded = send(&rec, "livesecret").await;
    let rec_out = rec.stop();
    assert_eq!(fake.received().len(), cases.len());
    // The client got each body back live, secret and all.
    assert!(recorded.iter().enumerate().all(|(i, a)| {
        let (_, _, kind) = &cases[i];
        *kind == 3 || String::from_utf8_lossy(a).contains(&format!("livesecret{i}x"))
    }));
    let replay = Serve::replaying(dir.path());
    let _ = send(&replay, "rotatedsecret").await;
    let replay_out = replay.stop();
    assert_eq!(fake.received().len(), cases.len(), "replay went upstream");
    let secrets: Vec<String> = cases
        .iter()
        .enumerate()
        .flat_map(|(i, (_, tail, _))| {
            [
                format!("livesecret{i}x{tail}"),
                format!("rotatedsecret{i}x{tail}"),
            ]
        })
        .collect();
    nowhere_decoded(dir.path(), &[&rec_out.stderr, &replay_out.stderr], &secrets);
}

/// `{"grant_type": "client_credentials", "client_secret": "br-<round>-secret-5Tq9Wz", "scope":
/// "api"}` as Node's zlib writes it in brotli (no compressor is among the test's crates).
const BROTLI_BODIES: [(&str, &str); 2] = [
    ("live", "1b58000004c26d94fae52d1ab464c1286f100c5f53d4c901f3b7d377bb0652180420790e8fcf85645a1e2fa0b840e1b8a363d9ade2f4340e22b0f4c291b7665ac9478d5f365c84d5e099343b1f"),
    ("rotated", "1b5b00008cc43826f183914ab2b951ea97211aa41586427033bc492728e3c887bcbae06b4e39606e8bd234903e3f805cef31766c8f81f8e102d20502a147b516ced5ac6f90c0d00f8412af1f3be18c839333ef82180eb6b1d1f001"),
];

/// A brotli request body (`content-encoding: br`) with a client secret, echoed back in brotli:
/// the request is stored decoded without its secret, as the answer is, and a replay with
/// another secret matches it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_brotli_request_loses_its_secret_and_replays_with_another() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start().await;
    let send = |serve: &Serve, hex_body: &str| {
        let url = format!(
            "{}/openai/v1/oauth2/echo",
            serve.for_test("secrets::t$brotli")
        );
        let body = hex::decode(hex_body).unwrap();
        async move {
            let resp = crate::support::http()
                .post(url)
                .header("content-type", "application/json")
                .header("content-encoding", "br")
                .header("accept-encoding", "identity")
                .body(body)
                .send()
                .await
                .unwrap();
            let status = resp.status();
            let text = String::from_utf8_lossy(&resp.bytes().await.unwrap()).into_owned();
            (status, text)
        }
    };
    let rec = Serve::recording(dir.path(), &format!("openai={}", fake.url()));
    let (status, _) = send(&rec, BROTLI_BODIES[0].1).await;
    assert_eq!(status, 200);
    let rec_out = rec.stop();
    let cassette =
        std::fs::read_to_string(dir.path().join("c/secrets--t--brotli/openai.json")).unwrap();
    let stored: Value = serde_json::from_str(&cassette).unwrap();
    let request = &stored["interactions"][0]["request"];
    assert!(
        request.to_string().contains(PLACEHOLDER),
        "the request is kept decoded, its secret replaced: {request}"
    );

    let replay = Serve::replaying(dir.path());
    let (status, text) = send(&replay, BROTLI_BODIES[1].1).await;
    let replay_out = replay.stop();
    assert_eq!(status, 200, "{text}");
    assert_eq!(fake.received().len(), 1, "the replay sent nothing");
    nowhere(
        dir.path(),
        &[&rec_out.stderr, &replay_out.stderr, &text],
        &["br-live-secret", "br-rotated-secret"],
    );
}

/// `begin`'s body, a test process's secret-looking variables: learned as the daemon's own
/// (a prompt holding one is stored without it); a body that is not that JSON is refused
/// without quoting it, and one over the limit is refused naming the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn begin_learns_the_test_processs_secret_variables_and_never_quotes_them() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start().await;
    let rec = Serve::recording(dir.path(), &format!("openai={}", fake.url()));
    let client = crate::support::http();
    let begin = |body: String| {
        let url = format!("{}/__llmreplay/begin?test=secrets::t$begin", rec.base);
        let client = client.clone();
        async move {
            let r = client.post(url).body(body).send().await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };
    let (status, said) = begin(r#"{"env": {"VAULT_TOKEN": 123456789012}}"#.into()).await;
    assert_eq!(status, 400, "{said}");
    assert!(!said.contains("123456789012"), "{said}");
    let (status, said) = begin(format!(
        "{{\"env\": {{\"A_TOKEN\": \"{}\"}}}}",
        "x".repeat(300 << 10)
    ))
    .await;
    assert_eq!(status, 413, "{said}");
    assert!(said.contains("256 KiB"), "{said}");
    let (status, said) = begin(
        r#"{"env": {"VAULT_TOKEN": "vault-begin-5Tq9Wz", "PATH_KEY": "short", "HOME": "/home/ana-long-path"}}"#.into(),
    )
    .await;
    assert_eq!(status, 200, "{said}");
    let resp = client
        .post(format!("{}/openai/v1/chat/completions", rec.for_test("secrets::t$begin")))
        .json(&serde_json::json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Use vault-begin-5Tq9Wz from /home/ana-long-path"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let out = rec.stop();
    let cassette =
        std::fs::read_to_string(dir.path().join("c/secrets--t--begin/openai.json")).unwrap();
    assert!(
        cassette.contains("/home/ana-long-path"),
        "not a secret: {cassette}"
    );
    nowhere(dir.path(), &[&out.stderr], &["vault-begin-5Tq9Wz"]);
}

/// A streamed answer that writes a key a few characters an event (the fake echoes the prompt
/// five characters a chunk), as a model's tokens cut one: AWS' example key, by its shape, and a
/// key variable's value. The recording is kept (not refused), every delta losing its piece,
/// and replays with the placeholder where the key stood.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_a_stream_writes_across_its_events_is_cut_from_each_and_replays() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start().await;
    let value = "vault-live-0123456789";
    let prompt = format!("CHARS5 Keys: AKIAIOSFODNN7EXAMPLE and {value}.");
    let send = |serve: &Serve| {
        let url = format!(
            "{}/openai/v1/chat/completions",
            serve.for_test("secrets::t$deltas")
        );
        let body = serde_json::json!({"model": "gpt-4o-mini", "stream": true,
            "messages": [{"role": "user", "content": prompt}]});
        async move {
            let resp = crate::support::http()
                .post(url)
                .json(&body)
                .send()
                .await
                .unwrap();
            let status = resp.status();
            (status.as_u16(), resp.text().await.unwrap())
        }
    };
    let rec = Serve::in_mode(
        dir.path(),
        "record",
        &format!("openai={}", fake.url()),
        &[("VAULT_TOKEN", value)],
    );
    let (status, live) = send(&rec).await;
    assert_eq!(status, 200, "{live}");
    assert!(
        live.contains("FODNN"),
        "the client gets the live stream: {live}"
    );
    let rec_out = rec.stop();
    let cassette =
        std::fs::read_to_string(dir.path().join("c/secrets--t--deltas/openai.json")).unwrap();
    let stored: Value = serde_json::from_str(&cassette).unwrap();
    assert_eq!(
        stored["interactions"][0]["summary"]["text"],
        format!("You said: CHARS5 Keys: {PLACEHOLDER} and {PLACEHOLDER}."),
        "{cassette}"
    );
    let replay = Serve::start_with_env(
        dir.path(),
        &["--cassette-dir", "c"],
        &[("VAULT_TOKEN", value)],
    );
    let (status, replayed) = send(&replay).await;
    let replay_out = replay.stop();
    assert_eq!(status, 200, "{replayed}");
    assert_eq!(fake.received().len(), 1, "the replay sent nothing");
    nowhere(
        dir.path(),
        &[&rec_out.stderr, &replay_out.stderr, &replayed],
        &["FODNN", "7EXAM", "IAIOS", "ult-l", "ive-0", value],
    );
}

/// A tool's or gateway's own key header (`X-Vault-Token`), named by its words rather than a
/// list: masked in `-vv`'s request heads, and its value, once seen, replaced where a body
/// holds it (here under a field no name rule knows, sent and echoed back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_header_named_by_its_words_is_masked_and_its_value_never_stored() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start().await;
    let rec = Serve::in_mode_with(
        dir.path(),
        "record",
        &format!("openai={}", fake.url()),
        &[],
        &["-vv"],
    );
    let value = "hvault-hdr-live-7Hq2Xz";
    let resp = crate::support::http()
        .post(format!(
            "{}/openai/v1/vault/echo",
            rec.for_test("secrets::t$header")
        ))
        .header("x-vault-token", value)
        .json(&serde_json::json!({"note": format!("renew {value}")}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let out = rec.stop();
    assert!(out.stderr.contains("x-vault-token: ***"), "{}", out.stderr);
    let sent = &fake.received()[0];
    assert!(sent
        .headers
        .iter()
        .any(|(k, v)| k == "x-vault-token" && v == value));
    nowhere(dir.path(), &[&out.stderr], &[value]);
}

/// A key variable's value in a request's path (an id a test took from a secret) is never
/// shown: a replay's miss names the path with the placeholder, in the client's 404, the log
/// and the report alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_in_a_missed_requests_path_is_never_shown() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("c")).unwrap();
    let value = "vaultpathlive7Hq2Xz9";
    let replay = Serve::start_with_env(
        dir.path(),
        &["--cassette-dir", "c"],
        &[("VAULT_TOKEN", value)],
    );
    let resp = crate::support::http()
        .get(format!(
            "{}/openai/v1/vaults/{value}/items?limit=2",
            replay.for_test("secrets::t$path")
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    let said = resp.text().await.unwrap();
    assert!(said.contains("/v1/vaults/"), "{said}");
    let out = replay.stop();
    nowhere(dir.path(), &[&said, &out.stderr], &[value]);
}

/// A key's value where the run log and the daemon's log take their words from what a test and
/// its upstream said: the model an answer names (echoed from the request) and a segment of
/// the request's path. The cassette holds the placeholder in both places; the run log's
/// `exchange` events, the daemon's `-v` lines and every other file and output hold no secret.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_or_a_path_holding_a_key_reaches_no_log() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start().await;
    let secret = "sk-live-runlog-Z8Q4M2X9";
    let serve = Serve::start_with_env(
        dir.path(),
        &[
            "--cassette-dir",
            "c",
            "--mode",
            "record",
            "--upstream",
            &format!("openai={}", fake.url()),
            "--upstream",
            &format!("gemini={}", fake.url()),
            "-v",
        ],
        &[("OPENAI_API_KEY", secret)],
    );
    let base = serve.for_test("secrets::t$logs");
    let chat =
        serde_json::json!({"model": secret, "messages": [{"role": "user", "content": "hi"}]});
    let gemini = serde_json::json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]});
    for (path, body) in [
        ("/openai/v1/chat/completions".to_string(), chat),
        (
            format!("/gemini/v1beta/models/{secret}:generateContent"),
            gemini,
        ),
    ] {
        let answer = crate::support::http()
            .post(format!("{base}{path}"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert!(answer.status().is_success(), "{path}: {}", answer.status());
        // Read whole: the body ends once its recording is kept.
        answer.text().await.unwrap();
    }
    let stopped = serve.stop();
    assert!(stopped.status.success(), "{}", stopped.stderr);
    for provider in ["openai", "gemini"] {
        let file = dir
            .path()
            .join(format!("c/secrets--t--logs/{provider}.json"));
        let cassette = std::fs::read_to_string(&file).unwrap();
        assert!(cassette.contains(PLACEHOLDER), "{cassette}");
    }
    let runs = dir.path().join("target/llmreplay/runs");
    let events: String = all_files(&runs)
        .into_iter()
        .filter(|(p, _)| p.ends_with("events.ndjson"))
        .map(|(_, t)| t)
        .collect();
    assert_eq!(
        events.matches("\"event\":\"exchange\"").count(),
        2,
        "{events}"
    );
    assert!(
        events.contains(&format!("\"model\":\"{PLACEHOLDER}\"")),
        "the model is still said, masked: {events}"
    );
    assert!(
        events.contains(&format!("models/{PLACEHOLDER}:generateContent")),
        "{events}"
    );
    assert!(
        stopped.stderr.contains(&format!(
            "path=/v1beta/models/{PLACEHOLDER}:generateContent"
        )),
        "{}",
        stopped.stderr
    );
    nowhere(dir.path(), &[&stopped.stderr], &[secret]);
}

/// A client's bearer token for an MCP server over Streamable HTTP is a secret of the run, as a
/// provider's key is: a tool's arguments that carry it, and the server's answer that echoes it,
/// are stored with the placeholder, and the call replays with another token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_servers_bearer_token_is_learned_and_never_stored() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start().await;
    std::fs::write(
        dir.path().join("llmreplay.toml"),
        format!("[mcp.web]\nurl = \"{}/mcp/echo\"\n", fake.url()),
    )
    .unwrap();
    let call = |serve: &Serve, token: &str| {
        let url = format!("{}/mcp/web", serve.for_test("secrets::t$mcp_http"));
        let token = token.to_string();
        let body = serde_json::json!({
            "jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "lookup", "arguments": {"note": format!("use {token} for the wiki")}}
        });
        async move {
            let answer = crate::support::http()
                .post(url)
                .bearer_auth(&token)
                .header("accept", "application/json, text/event-stream")
                .json(&body)
                .send()
                .await
                .unwrap();
            (answer.status().as_u16(), answer.text().await.unwrap())
        }
    };
    let live = "mcp-http-bearer-K2V8Q4";
    let args = [
        "--cassette-dir",
        "c",
        "--mode",
        "record",
        "--allow-credentials-to",
        "127.0.0.1",
    ];
    let rec = Serve::start(dir.path(), &args);
    let (status, said) = call(&rec, live).await;
    assert_eq!(status, 200, "{said}");
    assert!(
        said.contains(live),
        "the client gets the server's answer as it was: {said}"
    );
    let rec_out = rec.stop();
    let cassette = std::fs::read_to_string(dir.path().join("c/secrets--t--mcp_http/mcp-web.json"))
        .unwrap_or_else(|e| panic!("{e}: {}", rec_out.stderr));
    assert!(cassette.contains(PLACEHOLDER), "{cassette}");
    nowhere(dir.path(), &[&rec_out.stderr, &said], &[]);
    nowhere(dir.path(), &[&rec_out.stderr], &[live]);

    let rep = Serve::replaying(dir.path());
    let other = "mcp-http-rotated-7HJ3";
    let (status, replayed) = call(&rep, other).await;
    assert_eq!(status, 200, "{replayed}");
    let rep_out = rep.stop();
    nowhere(dir.path(), &[&rep_out.stderr], &[live, other]);
}
