//! Environments a test command makes for its tests, under `cargo llmreplay run`: tox 4, which
//! gives its test environments only the variables it is told to pass, nox, which passes them
//! all, and google-genai on Vertex AI configured by the environment alone, which replays with
//! no Google credentials anywhere. Each drives the real tool against a loopback fake provider.

use crate::support::{
    all_files, binary, sdk_python, stdout_of, without_provider_env, FakeProvider, Output,
};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `cargo llmreplay run FLAGS -- COMMAND...` in `dir`, in an environment clean of CI's, the
/// providers' and Google's variables, with `env` on top.
fn run_in(dir: &Path, flags: &[&str], command: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(binary());
    cmd.current_dir(dir)
        .args(["llmreplay", "run"])
        .args(flags)
        .arg("--")
        .args(command)
        .env("CARGO_TARGET_DIR", dir.join("target"));
    for k in [
        "CI",
        "LLMREPLAY_MODE",
        "TOX_OVERRIDE",
        "GOOGLE_CLOUD_PROJECT",
        "GOOGLE_CLOUD_LOCATION",
        "GOOGLE_GENAI_USE_VERTEXAI",
        "CLOUDSDK_CONFIG",
    ] {
        cmd.env_remove(k);
    }
    without_provider_env(&mut cmd);
    cmd.envs(env.iter().copied());
    Output::of(&mut cmd)
}

/// The site-packages of `python`, where the pinned SDKs are.
fn site_packages(python: &Path) -> String {
    let mut cmd = Command::new(python);
    cmd.args([
        "-c",
        "import sysconfig; print(sysconfig.get_paths()['purelib'])",
    ]);
    stdout_of(&mut cmd).trim().to_string()
}

/// A copy of `tests/sdk/env_runners` (a tox and a nox project around one script) in a temp dir.
fn runners_project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/sdk/env_runners");
    for file in ["tox.ini", "noxfile.py", "chat.py"] {
        std::fs::copy(from.join(file), dir.path().join(file)).unwrap();
    }
    dir
}

/// The `ANSWER:` lines the script printed, in order.
fn answers(out: &Output) -> Vec<String> {
    out.stdout
        .lines()
        .filter(|l| l.starts_with("ANSWER: "))
        .map(str::to_string)
        .collect()
}

/// Every cassette file under the project's cassette folder.
fn cassettes(dir: &Path) -> Vec<(PathBuf, String)> {
    all_files(&dir.join("tests/cassettes"))
}

/// Records with `runner`, replays offline with the same answers, and reports a changed prompt
/// as missing: the run's variables reach the script inside the runner's environments, or its
/// SDK would have no key and no base URL (and, in replay, call the real API).
async fn records_replays_and_misses_through(runner: &[&str], sessions: usize) {
    let Some(python) = sdk_python("openai") else {
        return;
    };
    let dir = runners_project();
    let site = site_packages(&python);
    let python = python.to_str().unwrap();
    let mut command = vec![python, "-m"];
    command.extend(runner);
    // Whatever would reach a package index fails: the environments install nothing.
    let env = [
        ("SDK_SITE", site.as_str()),
        ("PIP_NO_INDEX", "1"),
        ("PIP_INDEX_URL", "http://127.0.0.1:9/"),
    ];
    let mut fake = FakeProvider::start().await;
    let upstream = format!("openai={}", fake.url());
    let mut recording = env.to_vec();
    recording.push(("OPENAI_API_KEY", "sk-test-not-real"));
    let recorded = run_in(
        dir.path(),
        &["--record", "--upstream", &upstream],
        &command,
        &recording,
    );
    assert_eq!(
        recorded.code,
        Some(0),
        "{}\n{}",
        recorded.stdout,
        recorded.stderr
    );
    let said = answers(&recorded);
    assert_eq!(
        said,
        vec!["ANSWER: You said: Hello from a runner".to_string(); sessions],
        "{}",
        recorded.stdout
    );
    assert_eq!(fake.received().len(), sessions);
    let files = cassettes(dir.path());
    assert!(!files.is_empty(), "{}", recorded.stderr);
    for (path, text) in &files {
        assert!(!text.contains("sk-test-not-real"), "{}", path.display());
    }

    fake.stop();
    let mut replaying = env.to_vec();
    replaying.push(("CI", "true"));
    let replayed = run_in(dir.path(), &[], &command, &replaying);
    assert_eq!(
        replayed.code,
        Some(0),
        "{}\n{}",
        replayed.stdout,
        replayed.stderr
    );
    assert_eq!(answers(&replayed), said);
    assert!(
        replayed.stderr.contains(&format!(
            "{sessions} request{}: {sessions} replayed",
            if sessions == 1 { "" } else { "s" }
        )),
        "{}",
        replayed.stderr
    );

    // A prompt never recorded is a miss the run reports, not a call that left the machine.
    let mut changed = command.clone();
    changed.extend(["--", "Something new"]);
    let missed = run_in(dir.path(), &[], &changed, &replaying);
    assert_ne!(missed.code, Some(0), "{}", missed.stderr);
    assert!(
        missed.stderr.contains(&format!("{sessions} missing")),
        "{}",
        missed.stderr
    );
    assert!(
        missed.stderr.contains("\"Something new\""),
        "{}",
        missed.stderr
    );
    assert_eq!(
        cassettes(dir.path()),
        files,
        "a miss in replay writes nothing"
    );
}

/// tox 4 gives a test environment only the variables its `pass_env` names: `run` names its own
/// in `TOX_OVERRIDE`, so `tox -e py` records, replays and misses like the script alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tox_4_environments_get_the_runs_variables() {
    records_replays_and_misses_through(&["tox", "-e", "py", "-q"], 1).await;
}

/// A `TOX_OVERRIDE` of the user's own still applies, beside the run's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_users_own_tox_override_is_kept() {
    let Some(python) = sdk_python("tox") else {
        return;
    };
    let dir = runners_project();
    let site = site_packages(&python);
    let fake = FakeProvider::start().await;
    let upstream = format!("openai={}", fake.url());
    // The user's override sends the script a prompt of its own; the run's passes the key and
    // the base URL, without which the call would fail.
    let out = run_in(
        dir.path(),
        &["--record", "--upstream", &upstream],
        &[python.to_str().unwrap(), "-m", "tox", "-e", "py", "-q"],
        &[
            ("SDK_SITE", site.as_str()),
            ("OPENAI_API_KEY", "sk-test-not-real"),
            (
                "TOX_OVERRIDE",
                "testenv.commands=python chat.py 'From the user'",
            ),
        ],
    );
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    assert_eq!(answers(&out), ["ANSWER: You said: From the user"]);
}

/// nox passes its whole environment to its sessions, its own virtualenvs' as the running
/// Python's: nothing to tell it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nox_sessions_get_the_runs_variables() {
    if sdk_python("nox").is_none() {
        return;
    }
    records_replays_and_misses_through(&["nox", "-s", "here", "venv"], 2).await;
}

/// google-genai told to use Vertex AI by `GOOGLE_GENAI_USE_VERTEXAI` alone, with its project and
/// location from the environment and its credentials from google-auth: recorded with a service
/// account whose token endpoint is the fake, so the token is one google-auth fetched; replayed
/// with no credentials file anywhere (a fresh HOME, no GOOGLE_APPLICATION_CREDENTIALS).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn google_genai_on_vertex_by_the_environment_alone_replays_without_credentials() {
    let Some(python) = sdk_python("google.genai") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let mut fake = FakeProvider::start().await;
    let sdk = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/sdk");
    let key = dir.path().join("service-account.json");
    let mut make_key = Command::new(&python);
    make_key
        .arg(sdk.join("google_service_account.py"))
        .arg(&key)
        .arg(format!("{}/token", fake.url()));
    stdout_of(&mut make_key);
    let script = sdk.join("vertex_env.py");
    let command = [python.to_str().unwrap(), script.to_str().unwrap()];
    let vertex = [
        ("GOOGLE_GENAI_USE_VERTEXAI", "true"),
        ("GOOGLE_CLOUD_PROJECT", "llmreplay-test"),
        ("GOOGLE_CLOUD_LOCATION", "us-central1"),
        ("HOME", home.path().to_str().unwrap()),
    ];
    let upstream = format!("vertex={}", fake.url());
    let mut recording = vertex.to_vec();
    recording.push(("GOOGLE_APPLICATION_CREDENTIALS", key.to_str().unwrap()));
    let recorded = run_in(
        dir.path(),
        &["--record", "--upstream", &upstream],
        &command,
        &recording,
    );
    assert_eq!(
        recorded.code,
        Some(0),
        "{}\n{}",
        recorded.stdout,
        recorded.stderr
    );
    let answers: Value = serde_json::from_str(&recorded.stdout).unwrap();
    assert_eq!(answers["text"], "You said: Hello Vertex", "{answers}");
    let got = fake.received();
    let token_requests = got.iter().filter(|r| r.path == "/token").count();
    assert_eq!(
        token_requests, 1,
        "google-auth fetched its token from the fake"
    );
    let calls: Vec<_> = got.iter().filter(|r| r.path != "/token").collect();
    assert_eq!(calls.len(), 2);
    for call in &calls {
        assert!(
            call.path.starts_with("/v1beta1/projects/llmreplay-test/locations/us-central1/publishers/google/models/gemini-2.5-flash:"),
            "routed as Vertex, its project and location kept: {}",
            call.path
        );
        assert!(
            call.headers
                .iter()
                .any(|(k, v)| k == "authorization" && v.starts_with("Bearer ya29.fake-access-")),
            "{:?}",
            call.headers
        );
    }
    let files = cassettes(dir.path());
    assert!(
        files.iter().any(|(p, _)| p.ends_with("vertex.json")),
        "{files:?}"
    );
    // Nor in anything else the run wrote: its report, its log, its run log.
    for (path, text) in all_files(dir.path()) {
        assert!(!text.contains("ya29."), "a token in {}", path.display());
        assert!(
            !text.contains("fake-refresh"),
            "a token in {}",
            path.display()
        );
    }

    fake.stop();
    let mut replaying = vertex.to_vec();
    replaying.push(("CI", "true"));
    let replayed = run_in(dir.path(), &[], &command, &replaying);
    assert_eq!(
        replayed.code,
        Some(0),
        "{}\n{}",
        replayed.stdout,
        replayed.stderr
    );
    assert_eq!(replayed.stdout, recorded.stdout);
    assert!(
        replayed.stderr.contains("2 requests: 2 replayed"),
        "{}",
        replayed.stderr
    );
}
