//! The nextest target runner. nextest calls `cargo-llmreplay __runner <test binary> <args>` for
//! every test process; in the run phase this sets the per-test environment README lists (test id, base
//! URLs, placeholder keys in replay) and execs the binary, or the user's own runner with it.
//! It prints nothing on stdout: nextest parses the list phase's output.

use crate::test_base_url;
use providers::env::GATEWAYS_ENV;
use std::ffi::OsString;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

/// The daemon's root URL, set by `cargo llmreplay test` for the runner.
pub const DAEMON_URL_ENV: &str = "LLMREPLAY_DAEMON_URL";
/// A file the runner appends each started test's id to, one a line, on a first attempt:
/// `cargo llmreplay test` reads it after the run. An append costs far less than a request to
/// the daemon, and this runs once per test.
pub const RAN_FILE_ENV: &str = "LLMREPLAY_RAN_FILE";
/// Set by `cargo llmreplay test` when the mode records: the runner then runs the test as a
/// child and, when it exits, tells the daemon how it ended and waits while the daemon writes
/// its recordings to its cassettes (README, "Record semantics"). Replay execs the test and
/// costs no extra process.
pub const SETTLE_ENV: &str = "LLMREPLAY_SETTLE";
/// The run's CA certificate and the bundle of the system's roots with it, set by
/// `cargo llmreplay test` when the daemon is the tests' proxy (README, "Capture").
pub const CAPTURE_CA_ENV: &str = "LLMREPLAY_CAPTURE_CA";
/// See [`CAPTURE_CA_ENV`].
pub const CAPTURE_BUNDLE_ENV: &str = "LLMREPLAY_CAPTURE_BUNDLE";
/// The folder of the run's placeholder credentials files, in replay (see [`daemon_env`]).
pub const PLACEHOLDERS_ENV: &str = "LLMREPLAY_PLACEHOLDERS";
/// The run's proxy secret, which each test's proxy credentials carry beside its id: only a
/// process the run gave it can name a test to the daemon as its proxy.
pub const PROXY_SECRET_ENV: &str = "LLMREPLAY_PROXY_SECRET";

/// What makes the daemon a test's proxy: the run's CA and bundle files, and its proxy secret.
#[derive(Clone, Copy, Debug)]
pub struct Capture<'a> {
    /// The CA's certificate file.
    pub ca: &'a str,
    /// The bundle of the roots trusted before and the CA.
    pub bundle: &'a str,
    /// The run's proxy secret.
    pub secret: &'a str,
}
/// A user's own target runner to chain, its words separated by U+001F.
pub const CHAIN_RUNNER_ENV: &str = "LLMREPLAY_CHAIN_RUNNER";
/// The runner's status when it cannot start the test, or the test had none (a signal): a
/// failed test to nextest, as a Rust test that panicked.
pub const RUNNER_FAILED: u8 = 101;
/// What a key that is unset becomes in replay mode: the SDKs refuse to start without one.
pub const PLACEHOLDER_KEY: &str = "llmreplay-replay-key";

/// Runs the test binary in `args` (what follows `__runner`). Returns only when it could not be
/// started; otherwise the process becomes the test (Unix) or exits with its status.
pub fn run(args: Vec<OsString>) -> std::io::Error {
    let Some((program, rest)) = args.split_first() else {
        return std::io::Error::other(
            "cargo-llmreplay __runner: no test binary given (nextest passes it)",
        );
    };
    let chain: Vec<String> = std::env::var(CHAIN_RUNNER_ENV)
        .map(|c| {
            c.split('\u{1f}')
                .filter(|w| !w.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let mut cmd = match chain.split_first() {
        Some((runner, runner_args)) => {
            let mut c = Command::new(runner);
            c.args(runner_args).arg(program);
            c
        }
        None => Command::new(program),
    };
    cmd.args(rest)
        .env_remove(CHAIN_RUNNER_ENV)
        .env_remove(SETTLE_ENV)
        .env_remove(CAPTURE_CA_ENV)
        .env_remove(CAPTURE_BUNDLE_ENV)
        .env_remove(PLACEHOLDERS_ENV)
        .env_remove(PROXY_SECRET_ENV);
    let phase = std::env::var("NEXTEST_TEST_PHASE").unwrap_or_default();
    match (phase.as_str(), std::env::var(DAEMON_URL_ENV)) {
        ("run", Ok(root)) => {
            let id = point_at_daemon(&mut cmd, &root);
            if std::env::var_os(SETTLE_ENV).is_some() {
                return run_and_end(cmd, &root, &id);
            }
        }
        ("list", Ok(root)) => return pass_list_on(cmd, &root),
        _ => {}
    }
    exec(cmd)
}

/// Runs the test as a child, tells the daemon how it ended (a structured outcome: the id is
/// percent-encoded, so no test name can forge another's) and waits until its recordings are in
/// its cassettes, then exits with its status (128 plus the signal that ended it, as a shell
/// says). nextest ends a test by its process group, which holds this process and the child
/// alike, so a test it kills says nothing: its recordings are added at the run's end.
fn run_and_end(mut cmd: Command, root: &str, id: &str) -> std::io::Error {
    let status = match cmd.status() {
        Ok(status) => status,
        Err(e) => return e,
    };
    #[cfg(unix)]
    let signalled = {
        use std::os::unix::process::ExitStatusExt;
        status.signal().map(|s| 128 + s)
    };
    #[cfg(not(unix))]
    let signalled = None;
    let outcome = match (status.success(), signalled) {
        (true, _) => "passed",
        (false, Some(_)) => "killed",
        (false, None) => "failed",
    };
    let query = format!(
        "test={}&outcome={outcome}",
        percent_encoding::utf8_percent_encode(id, percent_encoding::NON_ALPHANUMERIC)
    );
    // Nothing to do if the daemon cannot be told: the test then counts as not passed, and its
    // recordings are added at the run's end, never trimmed.
    let _ = control_waiting(root, "end", &query, "", Duration::from_secs(120));
    std::process::exit(status.code().or(signalled).unwrap_or(RUNNER_FAILED.into()))
}

/// The list phase: hands nextest the binary's list unchanged, and tells the daemon every test
/// it holds (ignored ones too: nextest lists those in a second call), so the report knows the
/// whole suite without running `cargo nextest list` again.
fn pass_list_on(mut cmd: Command, root: &str) -> std::io::Error {
    let output = match cmd.stderr(std::process::Stdio::inherit()).output() {
        Ok(output) => output,
        Err(e) => return e,
    };
    if let Err(e) = std::io::stdout().write_all(&output.stdout) {
        return e;
    }
    if output.status.success() {
        let names: String = String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter_map(|l| l.strip_suffix(": test"))
            .map(|name| format!("{name}\n"))
            .collect();
        let binary = std::env::var("NEXTEST_BINARY_ID").unwrap_or_default();
        let query = format!("binary={}", encode(&binary));
        if let Err(e) = control(root, "listed", &query, &names, true) {
            eprintln!("cargo-llmreplay: could not reach the daemon at {root}: {e}");
        }
    }
    std::process::exit(output.status.code().unwrap_or(RUNNER_FAILED.into()));
}

fn encode(s: &str) -> String {
    test_base_url("", s).trim_start_matches("/t/").to_string()
}

/// Sets the test's environment and tells the daemon it began; returns its id.
fn point_at_daemon(cmd: &mut Command, root: &str) -> String {
    let binary = std::env::var("NEXTEST_BINARY_ID").unwrap_or_default();
    let name = std::env::var("NEXTEST_TEST_NAME").unwrap_or_default();
    let id = format!("{binary}${name}");
    let capture = match (
        std::env::var(CAPTURE_CA_ENV),
        std::env::var(CAPTURE_BUNDLE_ENV),
        std::env::var(PROXY_SECRET_ENV),
    ) {
        (Ok(ca), Ok(bundle), Ok(secret)) => Some((ca, bundle, secret)),
        _ => None,
    };
    let replay = std::env::var("LLMREPLAY_MODE").map_or(true, |m| m == "replay");
    let gateways = std::env::var(GATEWAYS_ENV).ok();
    let placeholders = std::env::var(PLACEHOLDERS_ENV).ok();
    cmd.envs(daemon_env(
        root,
        Some(&id),
        gateways.as_deref(),
        replay.then_some(Replay {
            placeholders: placeholders.as_deref(),
        }),
        capture
            .as_ref()
            .map(|(ca, bundle, secret)| Capture { ca, bundle, secret }),
    ))
    .env_remove(GATEWAYS_ENV);
    // Tells the daemon this test runs (for the unused report) and, on a retry, that its
    // sequence starts afresh. A first attempt has no cursors to reset, so a line in the ran
    // file says enough; a retry waits for the daemon's answer, or its first request could
    // overtake the reset.
    let attempt = std::env::var("NEXTEST_ATTEMPT").unwrap_or_else(|_| "1".into());
    if attempt == "1" {
        if let Some(file) = std::env::var_os(RAN_FILE_ENV) {
            if append_line(&file, &id).is_ok() {
                return id;
            }
        }
    }
    let query = format!("test={}", encode(&id));
    if let Err(e) = control(root, "begin", &query, "", attempt != "1") {
        eprintln!("cargo-llmreplay: could not reach the daemon at {root} for {id}: {e}");
    }
    id
}

/// The environment that points a test at the daemon at `root` (README, "Per-test injection"):
/// every base-URL variable of every family and gateway, `LLMREPLAY_BASE_URL`, a placeholder for
/// each key and credentials file left unset in replay, the daemon as the proxy with the run's CA when `capture`
/// names its files, and loopback out of any proxy. With `id` (the runner's way), the URLs and
/// the proxy's credentials name the test; without one (one environment for the whole run),
/// they are the root's, and the daemon tells each connection's test from its process.
pub fn daemon_env(
    root: &str,
    id: Option<&str>,
    gateways: Option<&str>,
    replay: Option<Replay<'_>>,
    capture: Option<Capture<'_>>,
) -> Vec<(String, String)> {
    let base = match id {
        Some(id) => test_base_url(root, id),
        None => root.trim_end_matches('/').to_string(),
    };
    let routed = providers::env::routed_from(gateways);
    let mut env = providers::env::injected(&base, &routed);
    env.extend(providers::env::mcp_urls(&base, gateways));
    if let Some(id) = id {
        env.push(("LLMREPLAY_TEST_ID".into(), id.to_string()));
    }
    env.push(("LLMREPLAY_BASE_URL".into(), base));
    if let Some(capture) = capture {
        // Without a test, credentials with the run's secret alone (when there is one) name
        // none: each call's process says whose it is, and the proxy asks nothing more.
        let proxy = match (id, capture.secret) {
            (Some(id), secret) => providers::env::proxy_url(root, id, secret),
            (None, "") => root.trim_end_matches('/').to_string(),
            (None, secret) => providers::env::proxy_url(root, "", secret),
        };
        env.extend(
            providers::env::capture_vars(&proxy, capture.ca, capture.bundle)
                .into_iter()
                .map(|(k, v)| (k.to_string(), v)),
        );
    }
    // Test processes reach the daemon (and anything else) on loopback directly, whatever
    // proxy the developer's shell sets or capture injects: clients that honour HTTPS_PROXY
    // (httpx, reqwest, the SDKs) would otherwise send base-URL requests through a proxy.
    let proxied = capture.is_some()
        || providers::env::PROXY_VARS
            .iter()
            .any(|v| std::env::var_os(v).is_some_and(|p| !p.is_empty()));
    if proxied {
        let current = providers::env::NO_PROXY_VARS
            .iter()
            .find_map(|v| std::env::var(v).ok().filter(|h| !h.is_empty()))
            .unwrap_or_default();
        let mut hosts: Vec<&str> = current
            .split(',')
            .map(str::trim)
            .filter(|h| !h.is_empty())
            .collect();
        for loopback in ["127.0.0.1", "localhost", "::1"] {
            if !hosts.contains(&loopback) {
                hosts.push(loopback);
            }
        }
        let hosts = hosts.join(",");
        for var in providers::env::NO_PROXY_VARS {
            env.push((var.to_string(), hosts.clone()));
        }
    }
    if let Some(replay) = replay {
        for var in providers::env::key_vars(&routed) {
            if std::env::var_os(&var).is_none() {
                env.push((var, PLACEHOLDER_KEY.to_string()));
            }
        }
        // A placeholder file also wins over the credentials an SDK would find on its own
        // (gcloud's well-known file): replay never asks anyone for a token.
        for file in providers::env::credentials_files() {
            if let (None, Some(dir)) = (std::env::var_os(file.var), replay.placeholders) {
                let path = std::path::Path::new(dir).join(file.file_name);
                env.push((file.var.to_string(), path.to_string_lossy().into_owned()));
            }
        }
    }
    env
}

/// What a test gets in replay beyond placeholder keys.
#[derive(Clone, Copy, Debug, Default)]
pub struct Replay<'a> {
    /// The folder where the run wrote the placeholder credentials files
    /// (`providers::env::credentials_files`), when it did.
    pub placeholders: Option<&'a str>,
}

/// One write with O_APPEND: lines of parallel tests never interleave.
fn append_line(file: &std::ffi::OsStr, line: &str) -> std::io::Result<()> {
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(file)?
        .write_all(format!("{line}\n").as_bytes())
}

/// `POST /__llmreplay/<route>?<query>` over a plain socket: a runtime or HTTP client would cost
/// more to start than the request takes.
fn control(root: &str, route: &str, query: &str, body: &str, wait: bool) -> std::io::Result<()> {
    control_waiting(
        root,
        route,
        query,
        body,
        wait.then_some(Duration::from_secs(10)),
    )
}

/// [`control`], waiting up to `wait` for the answer (none: not waiting).
fn control_waiting(
    root: &str,
    route: &str,
    query: &str,
    body: &str,
    wait: impl Into<Option<Duration>>,
) -> std::io::Result<()> {
    let wait: Option<Duration> = wait.into();
    let addr = root
        .strip_prefix("http://")
        .ok_or_else(|| std::io::Error::other("the daemon URL is not http://"))?
        .trim_end_matches('/');
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(wait)?;
    write!(
        stream,
        "POST /__llmreplay/{route}?{query} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    if wait.is_none() {
        return Ok(());
    }
    let mut status = [0u8; 12];
    stream.read_exact(&mut status)?;
    if &status[9..12] != b"200" {
        return Err(std::io::Error::other(format!(
            "the daemon answered {}",
            String::from_utf8_lossy(&status)
        )));
    }
    Ok(())
}

#[cfg(unix)]
fn exec(mut cmd: Command) -> std::io::Error {
    use std::os::unix::process::CommandExt;
    cmd.exec()
}

#[cfg(not(unix))]
fn exec(mut cmd: Command) -> std::io::Error {
    match cmd.status() {
        Ok(status) => std::process::exit(status.code().unwrap_or(RUNNER_FAILED.into())),
        Err(e) => e,
    }
}
