//! The report as a part of an HTML page: the third renderer of `Sections`, beside the terminal's
//! and the markdown's (`summary`). What fails the run comes first, then what the replays did not
//! spend, then the rest in the summary's order. Every piece is escaped with `render::html`: the
//! page is opened from a CI job's artifacts, and its text came from cassettes and journals.

use super::sections::{Advice, Call, Closest, Item, LedgerLine, Section, Sections, Severity};
use crate::render::{change_kind, html};
use std::fmt::Write as _;

/// The run's sections as a `<section class="run">`.
pub(crate) fn sections(s: &Sections) -> String {
    let mut out = String::from("<section class=\"run\">\n<h2>The run</h2>\n");
    let _ = write!(out, "<p class=\"stats\">{}.", html(&s.headline.stats));
    for tally in &s.headline.tallies {
        let _ = write!(out, " {}.", html(tally));
    }
    out.push_str("</p>\n");
    let (gate, rest): (Vec<&Section>, Vec<&Section>) = s
        .sections
        .iter()
        .partition(|section| section.severity == Severity::Error);
    if !gate.is_empty() {
        out.push_str("<div class=\"gate\">\n<h3>Why the run fails</h3>\n");
        for section in gate {
            section_html(&mut out, section);
        }
        out.push_str("</div>\n");
    }
    if let Some(ledger) = &s.headline.ledger {
        let _ = writeln!(out, "<p class=\"ledger\">{}</p>", ledger_html(ledger));
    }
    for section in rest {
        section_html(&mut out, section);
    }
    if let Some(scope) = &s.footer.scope {
        let _ = writeln!(out, "<p class=\"scope\">({})</p>", html(scope));
    }
    out.push_str("</section>\n");
    out
}

/// The ledger's sentence, the unpriced models in code.
fn ledger_html(ledger: &LedgerLine) -> String {
    let mut out = html(&ledger.said);
    let unpriced: Vec<String> = ledger
        .unpriced
        .iter()
        .map(|(model, n)| format!("<code>{}</code> ({n})", html(model)))
        .collect();
    if !unpriced.is_empty() {
        let _ = write!(out, "; unpriced: {}", unpriced.join(", "));
    }
    out.push('.');
    out
}

fn severity(s: Severity) -> &'static str {
    match s {
        Severity::Error => "error",
        Severity::Warning => "warning",
        Severity::Note => "note",
        Severity::Info => "info",
    }
}

/// A notice as a paragraph; a list under its heading.
fn section_html(out: &mut String, section: &Section) {
    let class = severity(section.severity);
    if section.items.is_empty() {
        let _ = writeln!(
            out,
            "<p class=\"notice severity-{class}\">{}</p>",
            html(&section.heading)
        );
        return;
    }
    let _ = writeln!(
        out,
        "<div class=\"list severity-{class}\">\n<h4>{}</h4>\n<ul>",
        html(&section.heading)
    );
    for item in &section.items {
        out.push_str("<li>");
        item_html(out, item);
        out.push_str("</li>\n");
    }
    out.push_str("</ul>\n");
    if let Some(all) = &section.all {
        let _ = writeln!(out, "<p class=\"all\">{}</p>", advice(all));
    }
    out.push_str("</div>\n");
}

fn item_html(out: &mut String, item: &Item) {
    let _ = match item {
        Item::Test { test, what } => write!(out, "<code>{}</code> {}", html(test), html(what)),
        Item::Call(call) => {
            call_html(out, call);
            Ok(())
        }
        Item::Passed {
            test,
            host,
            counted,
            ..
        } => write!(
            out,
            "<code>{}</code> {} ({})",
            html(test),
            html(host),
            html(counted)
        ),
        Item::Recording {
            cassette,
            number,
            key,
            answer,
            ..
        } => {
            let _ = write!(
                out,
                "<code>{}</code> recording {number} of key <code>{}</code>",
                html(cassette),
                html(key)
            );
            match answer {
                Some(answer) => write!(out, ": <q>{}</q>", html(answer)),
                None => Ok(()),
            }
        }
        Item::Folder { folder, .. } => write!(
            out,
            "<code>{}/</code> no test of the suite has this folder's slug",
            html(folder)
        ),
        Item::Changed(ch) => {
            let _ = write!(
                out,
                "<code>{}</code> ({})",
                html(&ch.path),
                change_kind(ch.kind)
            );
            if let Some(from) = &ch.moved_from {
                let _ = write!(out, " from <code>{}</code>", html(from));
            }
            let _ = write!(out, ": {}", html(&ch.recordings));
            match &ch.error {
                Some(e) => write!(out, " ({})", html(e)),
                None => Ok(()),
            }
        }
    };
}

fn call_html(out: &mut String, call: &Call) {
    let _ = write!(
        out,
        "<code>{}</code> <code>{}</code>",
        html(&call.test),
        html(&call.request)
    );
    if let Some(model) = &call.model {
        let _ = write!(out, " model <code>{}</code>", html(model));
    }
    if let Some(prompt) = &call.prompt {
        let _ = write!(out, " <q>{}</q>", html(prompt));
    }
    match &call.closest {
        Some(Closest::Fields(fields)) => {
            let _ = write!(
                out,
                "<br>closest recording differs at <code>{}</code>",
                html(&fields.join(", "))
            );
        }
        Some(Closest::Values { values, more }) => {
            out.push_str("<br>closest recording differs (recorded → now):<ul>");
            for v in values {
                let _ = write!(
                    out,
                    "<li><code>{}</code>: <code>{}</code> → <code>{}</code></li>",
                    html(&v.field),
                    html(&daemon::short_json(v.recorded.as_ref(), 80)),
                    html(&daemon::short_json(v.now.as_ref(), 80))
                );
            }
            if *more > 0 {
                let _ = write!(out, "<li>and {more} more</li>");
            }
            out.push_str("</ul>");
        }
        None => {}
    }
    for a in &call.advice {
        let _ = write!(out, "<br>{}", advice(a));
    }
}

fn advice(a: &Advice) -> String {
    format!("{}: <code>{}</code>", html(&a.said), html(&a.command))
}
