//! `cargo llmreplay serve`: the daemon alone, for clients in any language and for plain
//! `cargo test`. Prints its base URL first, serves until SIGINT or SIGTERM, then reports.

use crate::args::{DaemonArgs, Resolved};
use crate::error::{Error, Outcome, Result};
use crate::render;
use clap::Args;
use daemon::Daemon;
use std::net::SocketAddr;
use std::path::PathBuf;

/// The long help; the well-known paths come from the families, so it never drifts.
fn long_about() -> String {
    format!(
        "Run the record/replay daemon alone, until Ctrl-C or SIGTERM.\n\n\
        The first line on stdout is LLMREPLAY_BASE_URL=http://127.0.0.1:<port>. Point clients at \
        <base>/<provider>/... (e.g. OPENAI_BASE_URL=<base>/openai/v1) and name the test in an \
        X-Test-Id header, or use <base>/t/<percent-encoded test id>/<provider>/... . Requests to \
        well-known paths ({}) need no provider prefix. On exit it prints what was replayed, missing \
        and recorded.",
        providers::example_paths()
    )
}

#[derive(Args)]
#[command(
    about = "Run the record/replay daemon alone, until Ctrl-C or SIGTERM",
    long_about = long_about(),
    after_help = "Examples:\n  cargo llmreplay serve                          # replay from tests/cassettes\n  \
        cargo llmreplay serve --mode record-missing    # record what is not recorded yet\n  \
        cargo llmreplay serve --upstream openai=http://127.0.0.1:8080 --mode record"
)]
pub struct ServeArgs {
    /// Address to listen on; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:0")]
    addr: SocketAddr,
    /// Configuration file [default: ./llmreplay.toml when present].
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    /// A line per request on stderr (test, provider, method, path, outcome, status, bytes,
    /// ms); -vv adds each request's query and headers, secrets masked. RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count)]
    verbose: u8,
    /// Print the environment for clients on stdout, as sh lines to source (`export NAME=value`:
    /// every base URL a client reads, placeholder keys in replay, loopback kept out of any
    /// proxy), then serve. The last line sets LLMREPLAY_BASE_URL.
    #[arg(long)]
    env: bool,
    /// With --env: the test the printed base URLs name (`<root>/t/<ID>/<provider>`), instead of
    /// an X-Test-Id header or the test `default`.
    #[arg(long, value_name = "ID", requires = "env")]
    test_id: Option<String>,
    /// On Linux, file each connection that names no test (no /t/<id>/, no X-Test-Id, no proxy
    /// credentials) under the test this variable names in the connecting process's environment
    /// (a test runner's, e.g. PYTEST_CURRENT_TEST; its ` (call)` suffix is left out), read from
    /// the process. Same user only; when it cannot be read, the test `default`.
    #[arg(long, value_name = "NAME")]
    test_id_env: Option<String>,
    #[command(flatten)]
    daemon: DaemonArgs,
}

pub fn run(args: ServeArgs) -> Result<Outcome> {
    crate::log::init(args.verbose, None)?;
    let root =
        std::env::current_dir().map_err(|e| Error::io("cannot read the current directory", e))?;
    let resolved = Resolved::daemon(root, args.config.as_deref(), &args.daemon)?;
    let target_dir = resolved.target_dir();
    let mut settings = resolved.settings;
    crate::recover::apply_left(&target_dir, &settings.cassette_dir)?;
    settings.run_dir = Some(daemon::settle::new_run_dir(&target_dir));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io("cannot start the async runtime", e))?;
    let upstreams = settings.upstream_report();
    let gateways = settings.gateways();
    runtime.block_on(async move {
        let mode = settings.mode;
        let dir = settings.cassette_dir.clone();
        let daemon = Daemon::bind(settings, args.addr).await?;
        if let Some(var) = &args.test_id_env {
            if !daemon::peer::Peers::supported() {
                return Err(Error::Usage(format!(
                    "--test-id-env reads each connection's process, which needs Linux with /proc; send the test's id in an X-Test-Id header instead (of {var})"
                )));
            }
            let _ = daemon.peers().set(daemon::peer::Peers::new(
                None,
                daemon::peer::IdVars::Named(var.clone()),
            ));
        }
        let (journal, store) = (daemon.journal(), daemon.store());
        let root = format!("http://{}", daemon.local_addr());
        // The CA's files are this process's own, removed when it ends.
        let mut run_dir = None;
        let first = if args.env {
            let ca = match daemon.ca_pem() {
                Some(pem) => {
                    let (dir, written) = crate::capture::write_run_ca(&target_dir, &pem)?;
                    run_dir = Some(dir);
                    Some(written)
                }
                None => None,
            };
            env_lines(
                &root,
                args.test_id.as_deref(),
                mode,
                &gateways,
                ca.as_ref(),
                daemon.proxy_secret(),
            )
        } else {
            format!("LLMREPLAY_BASE_URL={root}\n")
        };
        render::stdout(&first).map_err(|e| Error::io("cannot write to stdout", e))?;
        render::stderr(&format!(
            "cargo-llmreplay: serving in {mode} mode from {}\n",
            dir.display()
        ));
        if mode.goes_upstream() {
            render::stderr(&format!("cargo-llmreplay: upstreams:\n{upstreams}"));
        }
        let stats = daemon.run(shutdown_signal()).await;
        drop(run_dir);
        // What the tests recorded since the last flush reaches the cassettes now.
        let (settling, ended) = (store.clone(), journal.clone());
        let settled = tokio::task::spawn_blocking(move || {
            let settled = daemon::settle::settle_rest(&settling, &ended);
            daemon::settle::finish_run(&settling, &ended, false);
            settled
        })
        .await
        .map_err(|e| Error::io("settling the recordings", std::io::Error::other(e)))?;
        let mut out = format!("cargo-llmreplay: {}\n", render::stats_sentence(&stats));
        let ledger = journal.ledger();
        if let Some(line) = crate::report::ledger_line(&ledger) {
            out.push_str(&format!("  {}\n", crate::report::ledger_text(&line)));
        }
        let over_cap = crate::report::max_spend_sentence(&ledger);
        if let Some(said) = &over_cap {
            out.push_str(&format!("  error: {said}\n"));
        }
        for (test, e) in &settled {
            out.push_str(&format!(
                "  error: the recordings of {} were not written to its cassettes: {}; they are kept in the run's spool, and `{} recover` adds them once that is fixed\n",
                render::term(test.as_str()),
                render::term(&e.to_string()),
                crate::program()
            ));
        }
        for (slug, first, second) in store.collisions() {
            out.push_str(&format!(
                "  error: tests whose ids share a cassette folder: {} and {} (folder {}); the second's requests were refused: rename one\n",
                render::term(first.as_str()),
                render::term(second.as_str()),
                render::term(&slug)
            ));
        }
        let errors = journal.error_answers();
        if !errors.is_empty() {
            out.push_str(&format!(
                "  {}\n",
                render::term(&render::error_answers_line(&errors))
            ));
        }
        for miss in journal.misses() {
            let prompt = miss
                .detail
                .prompt
                .map(|p| format!(" {p:?}"))
                .unwrap_or_default();
            out.push_str(&format!(
                "  missing: {}: {}{prompt}\n",
                render::term(&miss.test),
                render::term(&miss.path)
            ));
        }
        render::stderr(&out);
        Ok(Outcome::gate(
            stats.misses > 0
                || stats.errors > 0
                || !settled.is_empty()
                || !store.collisions().is_empty()
                || over_cap.is_some(),
        ))
    })
}

/// The environment a client needs, as sh lines, in one piece: every base-URL variable of
/// every family and gateway, the test's id when one is named, a placeholder for each key
/// left unset in replay (SDKs refuse to start without one), the daemon as the proxy (with the
/// test's credentials and the run's CA) when capture is on, and loopback out of any proxy.
/// `LLMREPLAY_BASE_URL` comes last, so a script that waits for it has all of them.
fn env_lines(
    root: &str,
    test_id: Option<&str>,
    mode: daemon::Mode,
    gateways: &str,
    ca: Option<&(std::path::PathBuf, std::path::PathBuf)>,
    proxy_secret: &str,
) -> String {
    use cassettes::shell_quote;
    let base = match test_id {
        Some(id) => runner_plugin::test_base_url(root, id),
        None => root.to_string(),
    };
    let routed = providers::env::routed_from(Some(gateways));
    let mut out = String::new();
    let mut vars = providers::env::injected(&base, &routed);
    vars.extend(providers::env::mcp_urls(&base, Some(gateways)));
    for (name, value) in vars {
        out.push_str(&format!("export {name}={}\n", shell_quote(&value)));
    }
    if let Some(id) = test_id {
        out.push_str(&format!("export LLMREPLAY_TEST_ID={}\n", shell_quote(id)));
    }
    if mode == daemon::Mode::Replay {
        for var in providers::env::key_vars(&routed) {
            out.push_str(&format!(
                "export {var}=\"${{{var}:-{}}}\"\n",
                runner_plugin::PLACEHOLDER_KEY
            ));
        }
    }
    if let Some((ca, bundle)) = ca {
        // Credentials that name a test win over every other way; with no test named here,
        // they name none (the run's secret alone, so the proxy asks nothing more), and a
        // connection's process (its environment, or the test it announced) says whose each
        // call is, else `default`.
        let proxy = providers::env::proxy_url(root, test_id.unwrap_or(""), proxy_secret);
        let (ca, bundle) = (ca.to_string_lossy(), bundle.to_string_lossy());
        for (name, value) in providers::env::capture_vars(&proxy, &ca, &bundle) {
            out.push_str(&format!("export {name}={}\n", shell_quote(&value)));
        }
    }
    for var in providers::env::NO_PROXY_VARS {
        out.push_str(&format!(
            "export {var}=\"${{{var}:+${{{var}}},}}127.0.0.1,localhost,::1\"\n"
        ));
    }
    out.push_str(&format!(
        "export LLMREPLAY_BASE_URL={}\n",
        shell_quote(&base)
    ));
    out
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("installing a SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}
