//! `cargo llmreplay report merge`: one report out of the reports of a partitioned suite.

use super::{Deny, Report, ReportExt};
use crate::args::CassetteDirArg;
use crate::error::{Outcome, Result};
use std::path::PathBuf;

#[derive(clap::Subcommand)]
pub enum ReportCommand {
    /// Merge the reports of a suite run in partitions (--partition slice:M/N on several machines)
    #[command(
        long_about = "Merge the reports of a suite run in partitions (--partition slice:M/N on several machines).\n\n\
            Counts add up; missing and unused recordings are gathered. Cassette folders of no test are \
            judged only here, once the reports of every partition 1/N..N/N are in: one partition alone \
            cannot tell an orphan from another partition's test."
    )]
    Merge {
        /// The partitions' reports.
        #[arg(required = true)]
        reports: Vec<PathBuf>,
        /// Where to write the merged report [default: <target dir>/llmreplay/report.json].
        #[arg(long, short, value_name = "PATH")]
        output: Option<PathBuf>,
        /// Fail on unused recordings or on cassettes changed against git HEAD. Repeatable.
        #[arg(long, value_enum)]
        deny: Vec<Deny>,
    },
}

pub fn run(cmd: ReportCommand) -> Result<Outcome> {
    match cmd {
        ReportCommand::Merge {
            reports,
            output,
            deny,
        } => {
            let read: Vec<Report> = reports
                .iter()
                .map(|p| Report::read(p))
                .collect::<Result<_>>()?;
            let merged = Report::merge(read)?;
            let root = std::env::current_dir().unwrap_or_default();
            let path = match output {
                Some(p) => p,
                None => {
                    crate::args::Resolved::workspace(&CassetteDirArg::default())?.default_report()
                }
            };
            merged.write(&path)?;
            merged.show(&root, &path, &merged.gate_failures(&deny));
            Ok(merged.outcome(None, &deny))
        }
    }
}
