//! `cargo llmreplay test`: starts the daemon in this process, runs `cargo nextest run` with the
//! target runner that points every test at it, then reports what is missing, unused and changed.

use crate::report::{self, Deny, RunScope};
use clap::Parser;
use daemon::{Daemon, Mode, Overrides, Settings};
use runner_plugin::{CHAIN_RUNNER_ENV, DAEMON_URL_ENV, RAN_FILE_ENV};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

#[derive(Parser, Debug)]
#[command(
    name = "cargo llmreplay test",
    about = "Run the crate's tests under cargo-nextest, each pointed at a per-run record/replay daemon",
    long_about = "Run the crate's tests under cargo-nextest, each pointed at a per-run record/replay daemon.\n\n\
        Every test process gets OPENAI_BASE_URL, ANTHROPIC_BASE_URL, OLLAMA_HOST, GOOGLE_GEMINI_BASE_URL \
        and LLMREPLAY_BASE_URL for its own cassettes in tests/cassettes/<test>/. In replay mode (the \
        default) nothing reaches the network; a request with no recording fails. After the run it \
        reports missing, unused and changed cassettes and writes target/llmreplay/report.json.\n\n\
        Every argument not listed below goes to `cargo nextest run` (-E, -p, --workspace, --partition, \
        --retries, -- ...).",
    after_help = "Examples:\n  cargo llmreplay test                               # replay; fails on a missing cassette\n  \
        cargo llmreplay test --record-missing              # record what is not recorded yet\n  \
        cargo llmreplay test --record -E 'test(=chat)'     # re-record one test\n  \
        cargo llmreplay test --deny unused --deny changed  # strict CI gate"
)]
pub struct TestArgs {
    /// Re-record every request (proxied upstream; replaces entries in place).
    #[arg(long, conflicts_with_all = ["record_missing", "passthrough"])]
    record: bool,
    /// Replay what is recorded, record what is not.
    #[arg(long, conflicts_with = "passthrough")]
    record_missing: bool,
    /// Proxy everything upstream and write nothing.
    #[arg(long)]
    passthrough: bool,
    /// Where cassettes live [default: cassette_dir in llmreplay.toml, else tests/cassettes].
    #[arg(long, value_name = "DIR")]
    cassette_dir: Option<PathBuf>,
    /// Send a provider's requests to another upstream, e.g. openai=http://127.0.0.1:8080. Repeatable.
    #[arg(long, value_name = "NAME=URL")]
    upstream: Vec<String>,
    /// Write the JSON report here [default: <target dir>/llmreplay/report.json].
    #[arg(long, value_name = "PATH")]
    report: Option<PathBuf>,
    /// Fail the run on unused recordings or on cassettes changed against git HEAD. Repeatable.
    #[arg(long, value_enum)]
    deny: Vec<Deny>,
    /// Replay streams at their recorded pace.
    #[arg(long)]
    realtime: bool,
    /// Replay the last recording of a request to calls beyond those recorded.
    #[arg(long)]
    allow_repeats: bool,
    /// Allow a mode that calls real providers when the CI environment variable is set.
    #[arg(long)]
    allow_record_in_ci: bool,
}

const SWITCHES: &[&str] = &[
    "--record",
    "--record-missing",
    "--passthrough",
    "--realtime",
    "--allow-repeats",
    "--allow-record-in-ci",
    "-h",
    "--help",
];
const WITH_VALUE: &[&str] = &["--cassette-dir", "--upstream", "--report", "--deny"];

/// Splits the command line into this command's own flags and nextest's.
fn split_args(args: Vec<OsString>) -> (Vec<OsString>, Vec<OsString>) {
    let (mut own, mut nextest) = (Vec::new(), Vec::new());
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        let s = arg.to_string_lossy();
        if s == "--" {
            nextest.push(arg);
            nextest.extend(it.by_ref());
            break;
        }
        if SWITCHES.contains(&s.as_ref())
            || WITH_VALUE.iter().any(|f| s.starts_with(&format!("{f}=")))
        {
            own.push(arg);
        } else if WITH_VALUE.contains(&s.as_ref()) {
            own.push(arg);
            own.extend(it.next());
        } else {
            nextest.push(arg);
        }
    }
    (own, nextest)
}

pub fn run(args: Vec<OsString>) -> Result<ExitCode, String> {
    let (own, nextest_args) = split_args(args);
    let args = match TestArgs::try_parse_from(
        std::iter::once(OsString::from("cargo llmreplay test")).chain(own),
    ) {
        Ok(args) => args,
        Err(e) => {
            let _ = e.print();
            return Ok(ExitCode::from(if e.use_stderr() { 2 } else { 0 }));
        }
    };
    let mode = if args.record {
        Mode::Record
    } else if args.record_missing {
        Mode::RecordMissing
    } else if args.passthrough {
        Mode::Passthrough
    } else {
        match std::env::var("LLMREPLAY_MODE") {
            Ok(m) => m
                .parse()
                .map_err(|e: daemon::ConfigError| format!("LLMREPLAY_MODE: {e}"))?,
            Err(_) => Mode::Replay,
        }
    };
    crate::refuse_upstream_in_ci(mode, args.allow_record_in_ci)?;
    let root = preconditions()?;
    let overrides = Overrides {
        mode: Some(mode),
        cassette_dir: args.cassette_dir.clone(),
        upstreams: args.upstream.clone(),
        realtime: args.realtime,
        allow_repeats: args.allow_repeats,
    };
    let settings = Settings::load(&root, None, &overrides).map_err(|e| e.to_string())?;
    let cassette_dir = settings.cassette_dir.clone();
    let gateways = settings.gateways();
    if mode.goes_upstream() {
        eprint!(
            "cargo-llmreplay: {mode} mode; upstreams:\n{}",
            settings.upstream_report()
        );
    }
    let (runner_key, chain) = user_runner(&root)?;
    let runner = toml::Value::Array(
        runner_command()?
            .into_iter()
            .map(toml::Value::String)
            .collect(),
    );
    let scope = RunScope::of(&nextest_args);

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    let daemon = runtime
        .block_on(Daemon::bind(
            settings,
            "127.0.0.1:0".parse().expect("a literal address"),
        ))
        .map_err(|e| e.to_string())?;
    let url = format!("http://{}", daemon.local_addr());
    let (journal, store) = (daemon.journal(), daemon.store());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = runtime.spawn(daemon.run(async {
        let _ = stopped.await;
    }));
    // Ctrl-C reaches nextest too (same process group); this process waits for it to finish,
    // then stops the daemon and reports, instead of dying with its child still running.
    runtime.spawn(async { while tokio::signal::ctrl_c().await.is_ok() {} });

    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let ran = tempfile::Builder::new()
        .prefix("llmreplay-ran-")
        .tempfile()
        .map_err(|e| format!("cannot make a temporary file: {e}"))?;
    let mut nextest = Command::new(&cargo);
    nextest
        .args(["nextest", "run", "--config"])
        .arg(format!("{runner_key}={runner}"))
        .args(&nextest_args)
        .env(DAEMON_URL_ENV, &url)
        .env(RAN_FILE_ENV, ran.path())
        .env(providers::env::GATEWAYS_ENV, &gateways)
        .env("LLMREPLAY_MODE", mode.as_str());
    if !chain.is_empty() {
        nextest.env(CHAIN_RUNNER_ENV, chain.join("\u{1f}"));
    }
    let status = nextest
        .status()
        .map_err(|e| format!("cannot run cargo nextest: {e}"))?;
    for test in std::fs::read_to_string(ran.path())
        .unwrap_or_default()
        .lines()
    {
        journal.begin(test);
    }
    drop(ran);
    let _ = stop.send(());
    let stats = runtime
        .block_on(served)
        .map_err(|e| format!("the daemon failed: {e}"))?;

    // The runner saw nextest list the suite; asking `cargo nextest list` again is the fallback
    // (a chained runner that swallowed the list, say).
    let suite = journal.suite();
    let listed = if scope.filtered {
        None
    } else if !suite.is_empty() {
        Some(suite)
    } else {
        match report::list_tests(&cargo, &scope) {
            Ok(tests) => Some(tests),
            Err(e) => {
                eprintln!(
                    "cargo-llmreplay: warning: no orphan check, cargo nextest list failed: {e}"
                );
                None
            }
        }
    };
    let report = report::Report::build(report::Inputs {
        mode,
        stats,
        journal: &journal,
        store: &store,
        cassette_dir: &cassette_dir,
        scope: &scope,
        listed: listed.as_ref(),
        tests_passed: status.success(),
    })
    .map_err(|e| e.to_string())?;
    let path = args
        .report
        .clone()
        .unwrap_or_else(|| crate::target_dir(&root).join("llmreplay/report.json"));
    report.write(&path)?;
    report.print(&root, &path);
    report.to_step_summary();
    Ok(report.exit_code(Some(status), &args.deny))
}

/// The nextest target runner: the small `cargo-llmreplay-runner` installed beside this program
/// (it starts in about half the time), else this program's own `__runner`.
fn runner_command() -> Result<Vec<String>, String> {
    let exe =
        std::env::current_exe().map_err(|e| format!("cannot find this program's path: {e}"))?;
    let small = exe.with_file_name(format!(
        "cargo-llmreplay-runner{}",
        std::env::consts::EXE_SUFFIX
    ));
    Ok(if small.is_file() {
        vec![small.to_string_lossy().into_owned()]
    } else {
        vec![exe.to_string_lossy().into_owned(), "__runner".into()]
    })
}

/// Finds the workspace root and checks nextest: usually without a cargo call (see `locate`).
fn preconditions() -> Result<PathBuf, String> {
    let root = crate::locate::workspace_root()?;
    crate::locate::check_nextest(&crate::target_dir(&root))?;
    Ok(root)
}

/// Which runner key to set, and the user's own runner to chain. A runner for the host triple
/// (`CARGO_TARGET_<TRIPLE>_RUNNER`, or `target.<triple>.runner` in `.cargo/config.toml`) wins
/// over a `cfg(...)` one in cargo, so when there is one this sets that key instead.
fn user_runner(root: &Path) -> Result<(String, Vec<String>), String> {
    let cfg_key = "target.'cfg(all())'.runner".to_string();
    let env_runner =
        std::env::vars().any(|(k, _)| k.starts_with("CARGO_TARGET_") && k.ends_with("_RUNNER"));
    let config_files: Vec<PathBuf> = [".cargo/config.toml", ".cargo/config"]
        .iter()
        .map(|f| root.join(f))
        .filter(|p| p.exists())
        .collect();
    if !env_runner && config_files.is_empty() {
        return Ok((cfg_key, Vec::new()));
    }
    let host = host_triple()?;
    let key = format!("target.{host}.runner");
    let var = format!(
        "CARGO_TARGET_{}_RUNNER",
        host.to_uppercase().replace(['-', '.'], "_")
    );
    if let Ok(r) = std::env::var(&var) {
        return Ok((key, r.split_whitespace().map(str::to_string).collect()));
    }
    for file in config_files {
        let text =
            std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        let value: toml::Table =
            toml::from_str(&text).map_err(|e| format!("{}: {e}", file.display()))?;
        let runner = value
            .get("target")
            .and_then(|t| t.get(&host))
            .and_then(|t| t.get("runner"));
        match runner {
            Some(toml::Value::String(s)) => {
                return Ok((key, s.split_whitespace().map(str::to_string).collect()))
            }
            Some(toml::Value::Array(a)) => {
                return Ok((
                    key,
                    a.iter()
                        .filter_map(|v| v.as_str().map(str::to_string))
                        .collect(),
                ))
            }
            _ => {}
        }
    }
    Ok((cfg_key, Vec::new()))
}

fn host_triple() -> Result<String, String> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let out = Command::new(rustc)
        .arg("-vV")
        .output()
        .map_err(|e| format!("cannot run rustc: {e}"))?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_string))
        .ok_or_else(|| "rustc -vV printed no host triple".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(args: &[&str]) -> (Vec<String>, Vec<String>) {
        let (a, b) = split_args(args.iter().map(OsString::from).collect());
        let s = |v: Vec<OsString>| v.into_iter().map(|x| x.into_string().unwrap()).collect();
        (s(a), s(b))
    }

    #[test]
    fn own_flags_anywhere_the_rest_to_nextest() {
        let (own, rest) = split(&[
            "-E",
            "test(=a)",
            "--record-missing",
            "--upstream",
            "openai=http://x",
            "--retries=2",
            "--deny=unused",
            "--",
            "--record",
        ]);
        assert_eq!(
            own,
            [
                "--record-missing",
                "--upstream",
                "openai=http://x",
                "--deny=unused"
            ]
        );
        assert_eq!(rest, ["-E", "test(=a)", "--retries=2", "--", "--record"]);
    }
}
