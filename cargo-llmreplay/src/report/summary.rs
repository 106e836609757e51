//! The report as people read it: the summary on stderr after a run, and the markdown of a CI
//! job's summary page. Everything that comes from a cassette or a test name is escaped for its
//! medium (see `render`).

use super::{Report, Unused};
use crate::render::{self, code, plural, table_code, term, Styles};
use review::git::ChangeKind;
use std::fmt::Write as _;
use std::path::Path;

impl Report {
    /// One command that records every missing test, when two or more tests missed (a renamed
    /// test's fix is `mv`, so it is left out): replacing their recordings when every miss is
    /// the same call changed, else keeping them.
    fn record_all_command(&self) -> Option<String> {
        let recordable: Vec<_> = self
            .missing
            .iter()
            .filter(|m| m.renamed_from.is_none())
            .collect();
        let tests: Vec<&cassettes::TestId> = recordable.iter().map(|m| &m.miss.test).collect();
        let replace = recordable.iter().all(|m| m.rerecord.is_some());
        daemon::record_all_command(&tests, replace)
    }

    /// The summary after a run, paths relative to `root`, ending with where the report is.
    pub fn summary(&self, root: &Path, path: &Path, styles: Styles) -> String {
        let rel = |p: &str| {
            let shown = Path::new(p)
                .strip_prefix(root)
                .map(|r| r.display().to_string())
                .unwrap_or_else(|_| p.to_string());
            term(&shown).into_owned()
        };
        let mut out = format!(
            "{} {}\n",
            styles.bold("cargo-llmreplay:"),
            render::stats_sentence(&self.counts)
        );
        if let Some(f) = &self.first_failure {
            let cause = f.message.lines().next().unwrap_or_default();
            let line = format!("first failure ({}, {}): {cause}", f.test, f.status);
            let _ = writeln!(out, "{}", styles.warning(&term(&line)));
        }
        if !self.error_answers.is_empty() {
            let _ = writeln!(
                out,
                "{}",
                styles.warning(&render::error_answers_line(&self.error_answers))
            );
        }
        if !self.recorded.is_empty() {
            let heading = format!("recorded ({}):", plural(self.recorded.len(), "test"));
            let _ = writeln!(out, "{}", styles.note(&heading));
            for t in &self.recorded {
                let _ = writeln!(out, "  {}  {}", term(&t.test), render::test_changes(t));
            }
        }
        if !self.faults.is_empty() {
            let _ = writeln!(
                out,
                "answered by faults the tests asked for ({}):",
                self.counts.faults
            );
            for (test, n) in &self.faults {
                let _ = writeln!(out, "  {}  {n}", term(test));
            }
        }
        if !self.live_differs.is_empty() {
            let heading = format!(
                "live MCP answers that differ from their recordings ({}):",
                self.live_differs.len()
            );
            let _ = writeln!(out, "{}", styles.error(&heading));
            for d in &self.live_differs {
                let said = d.detail.message.as_deref().unwrap_or("");
                let _ = writeln!(
                    out,
                    "  {}  {} {}: {}",
                    term(&d.test),
                    term(&d.provider),
                    term(&d.path),
                    term(said.rsplit("; ").next().unwrap_or(said))
                );
            }
        }
        if !self.missing.is_empty() {
            let heading = format!("missing ({}):", self.missing.len());
            let _ = writeln!(out, "{}", styles.error(&heading));
            for m in &self.missing {
                let d = &m.miss.detail;
                let _ = write!(
                    out,
                    "  {}  {} {} {}",
                    term(&m.miss.test),
                    term(&m.miss.provider),
                    term(&m.miss.method),
                    term(&m.miss.path)
                );
                if let Some(model) = &d.model {
                    let _ = write!(out, " model {}", term(model));
                }
                if let Some(prompt) = &d.prompt {
                    // Debug quoting shows control characters escaped.
                    let _ = write!(out, " {:?}", prompt.chars().take(60).collect::<String>());
                }
                out.push('\n');
                if let Some(fields) = d.closest.as_ref().filter(|f| !f.is_empty()) {
                    if d.values.is_empty() {
                        let _ = writeln!(
                            out,
                            "    closest recording differs at {}",
                            term(&fields.join(", "))
                        );
                    } else {
                        let _ = writeln!(out, "    closest recording differs (recorded -> now):");
                        render::field_values(&mut out, &d.values[..d.values.len().min(4)]);
                        if fields.len() > 4 {
                            let _ = writeln!(out, "      and {} more", fields.len() - 4);
                        }
                    }
                }
                match d.class {
                    Some(cassettes::classify::Class::Volatile) if !d.rules.is_empty() => {
                        let _ = writeln!(
                            out,
                            "    volatile: values that change every run; add the [match] rule, re-key and replay: cargo llmreplay match suggest --apply"
                        );
                    }
                    Some(cassettes::classify::Class::SdkShape) => {
                        let _ = writeln!(
                            out,
                            "    sdk shape: the same call in another shape; keep its answer under the new request: {}",
                            term(&daemon::rekey_command(&m.miss.test))
                        );
                    }
                    _ => {}
                }
                if let Some(old) = &m.renamed_from {
                    let _ = writeln!(
                        out,
                        "    renamed? {} (no longer in the suite) recorded this very request; keep its recordings: {}",
                        term(&old.test),
                        term(&old.command)
                    );
                }
                match &m.rerecord {
                    // The same call with other parameters: the fix for a deliberate change
                    // replaces the old recording; recording the miss alone keeps both.
                    Some(rerecord) => {
                        let _ = writeln!(
                            out,
                            "    changed on purpose? record the test again, replacing its old recording: {}",
                            term(rerecord)
                        );
                        let _ = writeln!(
                            out,
                            "    or keep both (--record-missing): {}",
                            term(&m.command)
                        );
                    }
                    None => {
                        let _ = writeln!(out, "    record it: {}", term(&m.command));
                    }
                }
            }
            if let Some(all) = self.record_all_command() {
                let _ = writeln!(out, "  record them all: {}", term(&all));
            }
        }
        if !self.escaped.is_empty() {
            let heading = format!(
                "escaped ({}): calls captured on their way to a host with no recording; answered as missing, they never left the machine:",
                self.escaped.len()
            );
            let _ = writeln!(out, "{}", styles.warning(&heading));
            for m in &self.escaped {
                let _ = writeln!(
                    out,
                    "  {}  {} {} {}",
                    term(&m.miss.test),
                    term(m.miss.detail.host.as_deref().unwrap_or_default()),
                    term(&m.miss.method),
                    term(&m.miss.path)
                );
                let _ = writeln!(out, "    record it: {}", term(&m.command));
            }
        }
        if !self.passed_through.is_empty() {
            let heading = format!(
                "passed through ({}): tunnels to [capture] pass hosts, which left the machine unrecorded:",
                self.passed_through.len()
            );
            let _ = writeln!(out, "{heading}");
            for p in &self.passed_through {
                let _ = writeln!(
                    out,
                    "  {}  {} ({} tunnel{})",
                    term(&p.test),
                    term(&p.host),
                    p.tunnels,
                    if p.tunnels == 1 { "" } else { "s" }
                );
            }
        }
        if self.unattributed {
            let _ = writeln!(
                out,
                "{}",
                styles.warning(
                    "some calls named no test and were filed under the test `default`: a client that sends no proxy credentials (or a script with no X-Test-Id); the log names them"
                )
            );
        }
        if self.stopped_early {
            let _ = writeln!(
                out,
                "{}",
                styles.warning(
                    "nextest stopped at the first failure: the tests after it did not run, so this report may miss what they would call (pass --no-fail-fast to see everything)"
                )
            );
        }
        if !self.unused.is_empty() {
            let heading = format!("unused ({}):", self.unused.len());
            let _ = writeln!(out, "{}", styles.warning(&heading));
            for u in &self.unused {
                match u {
                    Unused::Recording(r) => {
                        let _ = write!(
                            out,
                            "  {}  recording {} of key {}",
                            rel(&r.cassette.to_string_lossy()),
                            r.ordinal + 1,
                            short_key(r.key.as_str())
                        );
                        if let Some(answer) = &r.answer {
                            let _ = write!(out, " {answer:?}");
                        }
                        out.push('\n');
                    }
                    Unused::Folder { folder } => {
                        let _ = writeln!(
                            out,
                            "  {}/  no test of the suite has this folder's slug",
                            rel(folder)
                        );
                    }
                }
            }
        }
        if !self.changed.is_empty() {
            let heading = format!("changed against HEAD ({}):", self.changed.len());
            let _ = writeln!(out, "{}", styles.note(&heading));
            for ch in &self.changed {
                let shown = term(&ch.path.to_string_lossy()).into_owned();
                let kind = render::change_kind_column(ch.kind);
                let what = match ch.kind {
                    ChangeKind::New => {
                        format!("{kind}  {shown} ({})", plural(ch.added, "interaction"))
                    }
                    ChangeKind::Deleted => {
                        format!("{kind}  {shown} ({})", plural(ch.removed, "interaction"))
                    }
                    ChangeKind::Modified | ChangeKind::Moved => {
                        let counts: Vec<String> = [
                            (ch.added, "added"),
                            (ch.replaced, "replaced"),
                            (ch.removed, "removed"),
                            (ch.unchanged, "unchanged"),
                        ]
                        .into_iter()
                        .filter(|(n, _)| *n > 0)
                        .map(|(n, what)| format!("{n} {what}"))
                        .collect();
                        let from = ch
                            .moved_from
                            .as_ref()
                            .map(|f| format!(" (from {})", term(&f.to_string_lossy())))
                            .unwrap_or_default();
                        format!("{kind}  {shown}{from}: {}", counts.join(", "))
                    }
                };
                let _ = write!(out, "  {what}");
                if let Some(e) = &ch.error {
                    let _ = write!(out, " ({})", term(e));
                }
                out.push('\n');
            }
        }
        if self.scope.filtered {
            out.push_str(
                "  (a filtered run: cassette folders of tests that did not run are not judged)\n",
            );
        } else if self.scope.partition.is_some() {
            out.push_str("  (one partition of the suite: cassette folders are judged by `cargo llmreplay report merge` over every partition's report)\n");
        }
        let _ = writeln!(out, "report: {}", path.display());
        let c = &self.counts;
        let went_wrong = !self.tests_passed || c.misses + c.errors + c.refused + c.broken > 0;
        if let Some(log) = self.log.as_ref().filter(|_| went_wrong) {
            let _ = writeln!(out, "log: {} (a line per request)", rel(log));
        }
        out
    }

    /// The summary as markdown, for a CI job's summary page.
    pub fn markdown(&self) -> String {
        let mut out = format!(
            "### cargo-llmreplay\n\n{}.",
            render::stats_sentence(&self.counts)
        );
        for (n, what) in [
            (self.unused.len(), "unused"),
            (self.changed.len(), "changed against HEAD"),
        ] {
            if n > 0 {
                let _ = write!(out, " {n} {what}.");
            }
        }
        out.push('\n');
        if self.stopped_early {
            out.push_str("\nnextest stopped at the first failure: tests after it did not run, so more may be missing.\n");
        }
        if !self.recorded.is_empty() {
            out.push_str("\n| recorded in test | what changed |\n| --- | --- |\n");
            for t in &self.recorded {
                let _ = writeln!(
                    out,
                    "| {} | {} |",
                    table_code(&t.test),
                    table_code(&render::test_changes(t))
                );
            }
        }
        if !self.error_answers.is_empty() {
            let _ = writeln!(
                out,
                "\n{}",
                render::code(&render::error_answers_line(&self.error_answers))
            );
        }
        if !self.escaped.is_empty() {
            out.push_str(
                "\n| escaped from test | host and request | record it |\n| --- | --- | --- |\n",
            );
            for m in &self.escaped {
                let request = format!(
                    "{} {} {}",
                    m.miss.detail.host.as_deref().unwrap_or_default(),
                    m.miss.method,
                    m.miss.path
                );
                let _ = writeln!(
                    out,
                    "| {} | {} | {} |",
                    table_code(&m.miss.test),
                    table_code(&request),
                    table_code(&m.command)
                );
            }
        }
        if !self.passed_through.is_empty() {
            out.push_str("\n| passed through by test | host | tunnels |\n| --- | --- | --- |\n");
            for p in &self.passed_through {
                let _ = writeln!(
                    out,
                    "| {} | {} | {} |",
                    table_code(&p.test),
                    table_code(&p.host),
                    p.tunnels
                );
            }
        }
        if !self.missing.is_empty() {
            out.push_str("\n| missing in test | request | record it |\n| --- | --- | --- |\n");
            for m in &self.missing {
                let request = format!("{} {} {}", m.miss.provider, m.miss.method, m.miss.path);
                let _ = writeln!(
                    out,
                    "| {} | {} | {} |",
                    table_code(&m.miss.test),
                    table_code(&request),
                    // A renamed test's recordings are kept by moving them, not by recording.
                    table_code(m.renamed_from.as_ref().map_or(&m.command, |r| &r.command))
                );
            }
            if let Some(all) = self.record_all_command() {
                let _ = writeln!(out, "\nRecord them all: {}", render::code(&all));
            }
        }
        if !self.unused.is_empty() {
            out.push_str(
                "\n**unused**: run `cargo llmreplay prune` after a full run to remove:\n\n",
            );
            for u in &self.unused {
                match u {
                    Unused::Recording(r) => {
                        let _ = writeln!(
                            out,
                            "- recording {} of key {} in {}",
                            r.ordinal + 1,
                            code(short_key(r.key.as_str())),
                            code(&r.test)
                        );
                    }
                    Unused::Folder { folder } => {
                        let name = Path::new(folder)
                            .file_name()
                            .map_or(folder.clone(), |f| f.to_string_lossy().into_owned());
                        let _ = writeln!(out, "- folder {} (no test has its slug)", code(&name));
                    }
                }
            }
        }
        if !self.changed.is_empty() {
            out.push_str("\n**changed against HEAD**:\n\n");
            for ch in &self.changed {
                let _ = writeln!(
                    out,
                    "- {} ({})",
                    code(&ch.path.to_string_lossy()),
                    render::change_kind(ch.kind)
                );
            }
        }
        out
    }

    /// Appends the markdown summary to `$GITHUB_STEP_SUMMARY` when GitHub Actions sets it.
    /// Why the run fails its gate, for the terminal: one line each, with its fix.
    pub fn gate_text(failures: &[String], styles: Styles) -> String {
        if failures.is_empty() {
            return String::new();
        }
        let mut out = format!("{}\n", styles.error("the run fails its gate:"));
        for why in failures {
            let _ = writeln!(out, "  - {}", term(why));
        }
        out
    }

    /// Appends the markdown to `$GITHUB_STEP_SUMMARY`, with why the gate failed.
    pub fn to_step_summary(&self, failures: &[String]) {
        let Some(path) = std::env::var_os("GITHUB_STEP_SUMMARY") else {
            return;
        };
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| {
                let mut text = self.markdown();
                if !failures.is_empty() {
                    text.push_str("\n**The run fails its gate:**\n\n");
                    for why in failures {
                        let _ = writeln!(text, "- {why}");
                    }
                }
                std::io::Write::write_all(&mut f, text.as_bytes())
            });
        if let Err(e) = written {
            render::stderr(&format!(
                "cargo-llmreplay: warning: cannot write GITHUB_STEP_SUMMARY: {e}\n"
            ));
        }
    }
}

/// The first 12 hex digits of a key, which name it in lists.
fn short_key(key: &str) -> &str {
    key.get(..12).unwrap_or(key)
}
