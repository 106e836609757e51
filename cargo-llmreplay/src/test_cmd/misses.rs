//! `cargo llmreplay test --review` after a replay that missed: each missed test, what differs
//! from its closest recording, and a key to record it again now; then the review of what that
//! recorded, to accept (stage) or reject. The changed-prompt loop in one command, no test
//! named. Never under CI: a missing recording there fails the run.

use crate::error::{Error, Result};
use crate::render::{self, term, Styles};
use crate::report::Missing;
use cassettes::TestId;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::Path;

/// Walks the missed tests on the terminal; records those asked for with `record` (given the
/// chosen tests, it runs the command that records them and says whether it succeeded), then
/// reviews what that changed.
pub(crate) fn walk(
    missing: &[Missing],
    run: &crate::run_core::Run,
    record: &dyn Fn(&[&TestId]) -> Result<bool>,
) -> Result<()> {
    if std::env::var_os("CI").is_some() {
        render::stderr("cargo-llmreplay: --review records no missed test under CI\n");
        return Ok(());
    }
    let terminal = console::Term::stdout();
    if !terminal.is_term() {
        render::stderr("cargo-llmreplay: --review walks missed tests in a terminal; record them with the command above\n");
        return Ok(());
    }
    let mut by_test: BTreeMap<&TestId, Vec<&Missing>> = BTreeMap::new();
    for m in missing.iter().filter(|m| m.renamed_from.is_none()) {
        by_test.entry(&m.miss.test).or_default().push(m);
    }
    let sources = crate::source::Sources::new(&run.root);
    let styles = Styles::for_stdout();
    let failed = |e| Error::io("cannot use the terminal", e);
    let mut chosen: Vec<&TestId> = Vec::new();
    for (n, (test, misses)) in by_test.iter().enumerate() {
        terminal.clear_screen().map_err(failed)?;
        let shown = screen(test, misses, (n + 1, by_test.len()), &sources, styles);
        terminal.write_str(&shown).map_err(failed)?;
        match terminal.read_key().map_err(failed)? {
            console::Key::Char('r') => chosen.push(test),
            console::Key::Char('q') | console::Key::Escape => break,
            _ => {}
        }
    }
    terminal.clear_screen().map_err(failed)?;
    if chosen.is_empty() {
        render::stderr("cargo-llmreplay: no missed test recorded\n");
        return Ok(());
    }
    if !record(&chosen)? {
        render::stderr("cargo-llmreplay: the recording run failed (above); nothing to review\n");
        return Ok(());
    }
    crate::review_cmd::after_test_run(&run.cassette_dir, run.trajectory_mode)
}

/// Runs this program with `args` (a recording run it prints first), outside of any run's mode.
pub(crate) fn record_with(args: &[OsString]) -> Result<bool> {
    let said: Vec<String> = args
        .iter()
        .map(|a| cassettes::shell_quote(&a.to_string_lossy()).into_owned())
        .collect();
    render::stderr(&format!(
        "cargo-llmreplay: {} {}\n",
        crate::program(),
        said.join(" ")
    ));
    let exe = std::env::current_exe().map_err(|e| Error::io("cannot find this program", e))?;
    let status = std::process::Command::new(exe)
        .arg("llmreplay")
        .args(args)
        .env_remove("LLMREPLAY_MODE")
        .status()
        .map_err(|e| Error::io("cannot run the recording run", e))?;
    Ok(status.success())
}

/// `cargo llmreplay test --record -E <the chosen tests>` with the run's own forwarded flags.
pub(super) fn record_tests(chosen: &[&TestId], forward: &[OsString]) -> Result<bool> {
    let Some(filter) = daemon::tests_filter(chosen) else {
        return Ok(true);
    };
    let mut args: Vec<OsString> = ["test", "--record", "-E"].map(OsString::from).to_vec();
    args.push(filter.into());
    args.extend(forward.iter().cloned());
    record_with(&args)
}

/// One missed test: its requests, what differs from the closest recording, and the keys.
fn screen(
    test: &TestId,
    misses: &[&Missing],
    (n, of): (usize, usize),
    sources: &crate::source::Sources,
    styles: Styles,
) -> String {
    let mut out = format!(
        "{}\n\n",
        styles.bold(&format!(
            "cargo llmreplay test --review: missed test {n} of {of}"
        ))
    );
    let _ = writeln!(out, "  test:     {}", term(test));
    if let Some(at) = sources.of(test) {
        let _ = writeln!(out, "  source:   {}", term(&at));
    }
    for m in misses {
        let d = &m.miss.detail;
        let _ = writeln!(
            out,
            "  request:  {} {} {}{}",
            term(&m.miss.provider),
            term(&m.miss.method),
            term(&m.miss.path),
            d.model
                .as_deref()
                .map(|x| format!(", model {}", term(x)))
                .unwrap_or_default()
        );
        if d.values.is_empty() {
            let _ = writeln!(out, "    no recording like it");
        } else {
            let _ = writeln!(
                out,
                "    differs from its closest recording (recorded -> now):"
            );
            render::field_values(&mut out, &d.values);
        }
    }
    // The spend, said before it is made: the test makes its recorded requests again.
    let before = misses
        .first()
        .and_then(|m| Path::new(&m.miss.cassette).parent().map(recorded_in))
        .unwrap_or(0);
    let calls = before.max(misses.len());
    let _ = write!(
        out,
        "\n  {}\n",
        styles.note(&format!(
            "r record it again now (about {} to the real upstream; its old recordings are replaced)   s skip   q quit",
            crate::render::plural(calls, "request")
        ))
    );
    out
}

/// How many recordings a test's cassette folder holds: what recording it again calls anew.
fn recorded_in(folder: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(folder) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .filter_map(|p| cassettes::read_cassette(&p).ok())
        .map(|c| c.interactions.len())
        .sum()
}
