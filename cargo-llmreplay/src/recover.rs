//! `cargo llmreplay recover`: applies what a run that did not end recorded. Every recording a
//! run makes is in its spool (`target/llmreplay/runs/<run id>/spool.ndjson`) before its test
//! gets the answer, and reaches the cassettes when the test ends; a daemon killed between the
//! two leaves the spool. Its recordings are added to their cassettes as `--record-missing`
//! adds them, removing nothing. `test` and `run` do this at their start.

use crate::args::{CassetteDirArg, Resolved};
use crate::error::{Outcome, Result};
use crate::render::{plural, stderr, term};
use clap::Args;
use std::path::Path;

#[derive(Args)]
#[command(
    about = "Apply the recordings a killed run left in its spool to the cassettes",
    long_about = "Apply the recordings a killed run left in its spool to the cassettes.\n\n\
        A recording run keeps every recording in target/llmreplay/runs/<run id>/spool.ndjson the \
        moment it is made, and writes a test's cassettes when the test ends. A run killed in between \
        (SIGKILL, a crash, a lost machine) leaves its spool: this adds its recordings to their \
        cassettes, as --record-missing would, removing nothing, and names the tests that never \
        ended (their later calls may be missing). `cargo llmreplay test` and `run` do the same \
        at their start; `cargo llmreplay status` lists a spool not yet applied.",
    after_help = "Examples:\n  cargo llmreplay recover            # apply every spool a dead run left\n  \
        cargo llmreplay recover --dry-run  # say what would be applied"
)]
pub struct RecoverArgs {
    /// Say what would be applied, and apply nothing.
    #[arg(long)]
    dry_run: bool,
    #[command(flatten)]
    cassettes: CassetteDirArg,
}

pub fn run(args: RecoverArgs) -> Result<Outcome> {
    let resolved = Resolved::workspace(&args.cassettes)?;
    let runs = daemon::settle::runs_dir(&resolved.target_dir());
    let left = cassettes::spool::unapplied_spools(&runs, resolved.cassette_dir())?;
    if left.is_empty() {
        stderr("cargo-llmreplay: no run left recordings to apply\n");
        return Ok(Outcome::Success);
    }
    let mut kept = false;
    for spool in &left {
        if let Some(why) = &spool.unusable {
            unusable(spool, why);
            kept = true;
            continue;
        }
        if args.dry_run {
            stderr(&format!(
                "{}: {} to apply{}\n",
                term(&spool.run_dir.display().to_string()),
                plural(spool.to_apply().len(), "test"),
                unfinished_note(spool.unfinished().len()),
            ));
            for test in spool.to_apply() {
                stderr(&format!(
                    "  {}  {}\n",
                    term(test.as_str()),
                    plural(spool.recorded[test].len(), "recording")
                ));
            }
        } else if let Err(e) = apply(spool) {
            // The others are still applied; this one is kept for another try.
            stderr(&format!(
                "cargo-llmreplay: error: the recordings left in {} could not be added: {}\n",
                term(&spool.run_dir.display().to_string()),
                term(&e.to_string()),
            ));
            kept = true;
        }
    }
    Ok(Outcome::gate(kept))
}

/// Says that a spool cannot be applied by this version, and why; it is kept.
fn unusable(spool: &cassettes::spool::Unapplied, why: &str) {
    stderr(&format!(
        "cargo-llmreplay: warning: a run left recordings in {} that this cargo-llmreplay cannot add, so they are kept there: {}\n",
        term(&spool.run_dir.display().to_string()),
        term(why),
    ));
}

/// Applies every spool of `cassette_dir` under the project's runs that no live run holds,
/// saying so: a run begins with what an earlier one left. One that cannot be applied is said
/// and left for `recover`; the run goes on.
pub fn apply_left(target_dir: &Path, cassette_dir: &Path) -> Result<()> {
    let runs = daemon::settle::runs_dir(target_dir);
    let left = match cassettes::spool::unapplied_spools(&runs, cassette_dir) {
        Ok(left) => left,
        Err(e) => {
            stderr(&format!(
                "cargo-llmreplay: warning: cannot read what earlier runs left: {}\n",
                term(&e.to_string())
            ));
            return Ok(());
        }
    };
    for spool in left {
        if let Some(why) = &spool.unusable {
            unusable(&spool, why);
            continue;
        }
        if let Err(e) = apply(&spool) {
            stderr(&format!(
                "cargo-llmreplay: warning: a run that did not end left recordings in {}, which could not be added: {}; `{} recover` tries again\n",
                term(&spool.run_dir.display().to_string()),
                term(&e.to_string()),
                crate::program()
            ));
        }
    }
    Ok(())
}

fn apply(spool: &cassettes::spool::Unapplied) -> Result<()> {
    // Another process is applying it: it says what it added.
    let Some(applied) = cassettes::spool::apply(spool)? else {
        return Ok(());
    };
    let recordings: usize = applied.applied.iter().map(|(_, n)| n).sum();
    stderr(&format!(
        "cargo-llmreplay: a run that did not end ({}) left recordings: added {} of {} to their cassettes, removing nothing{}\n",
        term(&spool.run_dir.display().to_string()),
        plural(recordings, "recording"),
        plural(applied.applied.len(), "test"),
        unfinished_note(applied.unfinished.len()),
    ));
    if applied.newer > 0 {
        stderr(&format!(
            "  kept {} made since in {} place, by a run that ended its test\n",
            plural(applied.newer, "recording"),
            if applied.newer == 1 { "its" } else { "their" },
        ));
    }
    for test in &applied.unfinished {
        stderr(&format!("  never ended: {}\n", term(test.as_str())));
    }
    if let Some((kept, n)) = &applied.damaged {
        stderr(&format!(
            "  {} of it could not be read or no longer match their seal (edited or damaged), so were not added; the spool is kept at {}\n",
            plural(*n, "line"),
            term(&kept.display().to_string()),
        ));
    }
    Ok(())
}

fn unfinished_note(n: usize) -> String {
    match n {
        0 => String::new(),
        n => format!(
            "; {} never ended, so {} later calls may be missing",
            plural(n, "test"),
            if n == 1 { "its" } else { "their" }
        ),
    }
}
