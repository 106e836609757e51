//! An outside reader of a report: `report.json` as a run writes it (every field the schema has,
//! pretty-printed with its final newline), read with this crate alone and written back unchanged.

use llmreplay_runlog::report::{ChangeKind, Mode, Report, Unused};

const REPORT: &str = include_str!("fixtures/report.json");

#[test]
fn a_written_report_reads_and_writes_back_unchanged() {
    let report: Report = serde_json::from_str(REPORT).unwrap();
    assert_eq!(report.mode, Mode::RecordMissing);
    assert!(!report.scope.whole_suite());
    assert_eq!(report.counts.requests, 14);
    assert_eq!(report.missing[0].miss.test, "sample::chat$answers_hello");
    assert_eq!(report.missing[0].miss.detail.rules.len(), 2);
    assert!(matches!(&report.unused[0], Unused::Recording(u) if u.ordinal == 1));
    assert!(matches!(&report.unused[2], Unused::Folder { .. }));
    assert_eq!(report.changed[3].kind, ChangeKind::Moved);
    assert_eq!(report.first_failure.as_ref().unwrap().status, 502);

    let mut written = serde_json::to_string_pretty(&report).unwrap();
    written.push('\n');
    assert_eq!(written, REPORT);
}
