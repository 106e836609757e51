//! `cargo llmreplay prune`: removes what the last run over the whole suite found unused, the
//! recordings no request replayed and the folders of no test, and nothing else. It trusts only
//! a report that can tell: one from an unfiltered run (or merged partitions) whose tests
//! passed, written after the cassettes last changed.

use crate::args::{CassetteDirArg, Resolved};
use crate::error::{Error, Outcome, Result};
use crate::render::{plural, stderr, term};
use crate::report::{Report, ReportExt, Unused};
use cassettes::RecordingId;
use clap::Args;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Args)]
#[command(
    about = "Remove the recordings and cassette folders the last full run found unused",
    long_about = "Remove the recordings and cassette folders the last full run found unused.\n\n\
        Reads the report of the last `cargo llmreplay test` (or of `cargo llmreplay report merge`). \
        It refuses a report from a filtered or partitioned run (it cannot know what the other tests \
        use), from a run where tests failed, from a passthrough run, or one older than the cassettes."
)]
pub struct PruneArgs {
    /// Print what would be removed, and remove nothing.
    #[arg(long)]
    dry_run: bool,
    /// The report to act on [default: <target dir>/llmreplay/report.json].
    #[arg(long, value_name = "PATH")]
    report: Option<PathBuf>,
    #[command(flatten)]
    cassettes: CassetteDirArg,
}

pub fn run(args: PruneArgs) -> Result<Outcome> {
    let resolved = Resolved::workspace(&args.cassettes)?;
    let cassette_dir = resolved.cassette_dir().to_path_buf();
    let (path, report) = Report::last_run(&resolved, args.report.as_deref())?;
    trust(&report, &path, &cassette_dir)?;
    let mut recordings: BTreeMap<PathBuf, Vec<RecordingId>> = BTreeMap::new();
    let mut folders = Vec::new();
    for u in &report.unused {
        match u {
            Unused::Recording(r) => recordings
                .entry(report.cassette_on_this_machine(
                    &cassette_dir,
                    &r.cassette,
                    2,
                    "prune removes",
                )?)
                .or_default()
                .push(RecordingId {
                    key: r.key.clone(),
                    ordinal: r.ordinal,
                }),
            Unused::Folder { folder } => folders.push(report.cassette_on_this_machine(
                &cassette_dir,
                Path::new(folder),
                1,
                "prune removes",
            )?),
        }
    }
    let rel = |p: &Path| term(&resolved.rel(p)).into_owned();
    if recordings.is_empty() && folders.is_empty() {
        stderr(&format!(
            "nothing to prune: the report of {} found nothing unused\n",
            rel(&path)
        ));
        return Ok(Outcome::Success);
    }
    let verb = if args.dry_run {
        "would remove"
    } else {
        "removed"
    };
    for (file, which) in &recordings {
        if !args.dry_run {
            cassettes::remove_recordings(file, which)?;
        }
        stderr(&format!(
            "{verb} {} from {}\n",
            plural(which.len(), "recording"),
            rel(file)
        ));
    }
    for folder in &folders {
        if !folder.is_dir() {
            continue;
        }
        if args.dry_run {
            stderr(&format!("{verb} {}/\n", rel(folder)));
            continue;
        }
        let left = cassettes::remove_folder(folder)?;
        if left.is_empty() {
            stderr(&format!("{verb} {}/\n", rel(folder)));
        } else {
            stderr(&format!(
                "{verb} the cassettes of {}/ and left {} there\n",
                rel(folder),
                plural(left.len(), "other file")
            ));
        }
    }
    if args.dry_run {
        stderr("(dry run: nothing was removed)\n");
    }
    Ok(Outcome::Success)
}

/// Why this report cannot be trusted to say what is unused, if it cannot.
fn trust(report: &Report, path: &Path, cassette_dir: &Path) -> Result<()> {
    let again = "Run the whole suite first: `cargo llmreplay test`, or `cargo llmreplay run -- <runner>` with no test selected and its plugin (pytest-llmreplay, the vitest or jest setup) listing the suite";
    if report.scope.filtered {
        return Err(Error::Report(format!(
            "{} comes from a filtered run (nextest's -E, -p or a test name; a runner's own selection such as pytest -k or vitest -t or files; or a `run` whose command no test plugin listed): recordings of the tests it left out would look unused. {again}",
            path.display()
        )));
    }
    if let Some(p) = &report.scope.partition {
        return Err(Error::Report(format!(
            "{} comes from a partitioned run ({p}): merge every partition's report with `cargo llmreplay report merge` and prune with --report on the merged one",
            path.display()
        )));
    }
    if !report.tests_passed {
        return Err(Error::Report(format!(
            "tests failed in the run of {}: a failing test may stop before the calls it recorded, which would look unused. Fix them and run `cargo llmreplay test` again first",
            path.display()
        )));
    }
    if report.mode == daemon::Mode::Passthrough {
        return Err(Error::Report(format!(
            "{} comes from a passthrough run, which replays nothing. {again}",
            path.display()
        )));
    }
    if let Some(newer) =
        newest_cassette(cassette_dir).filter(|(ms, _)| *ms > report.generated_at_ms)
    {
        return Err(Error::Report(format!(
            "{} changed after {} was written, so the report may be stale. {again}",
            newer.1.display(),
            path.display()
        )));
    }
    Ok(())
}

/// The most recently modified cassette file, as milliseconds since the Unix epoch.
fn newest_cassette(dir: &Path) -> Option<(u64, PathBuf)> {
    cassettes::cassette_files(dir)
        .ok()?
        .into_iter()
        .filter_map(|file| {
            let modified = std::fs::metadata(&file).and_then(|m| m.modified()).ok()?;
            let ms = modified
                .duration_since(std::time::UNIX_EPOCH)
                .ok()?
                .as_millis() as u64;
            Some((ms, file))
        })
        .max()
}
