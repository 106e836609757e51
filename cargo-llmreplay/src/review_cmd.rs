//! `cargo llmreplay review`: every recorded interaction that differs from what git's index
//! holds (or from `--base`), one at a time, as cargo-insta's review walks pending snapshots:
//! accept stages the new recording in the index (as `git add -p` would stage that interaction
//! alone), reject restores the index's under the folder's lock, skip leaves it pending. What
//! is staged is what `git commit` commits, and every git tool shows the state: `git diff` what
//! is left, `git diff --cached` what was accepted. `--list`, `--show`, `--accept` and
//! `--reject` do the same for scripts and coding agents.

use crate::args::{CassetteDirArg, Resolved};
use crate::diff_cmd::{drift_suffix, interaction_text};
use crate::error::{Error, Outcome, Result};
use crate::render::{self, plural, term, Styles};
use cassettes::sequence::SequenceMode;
use clap::{Args, ValueEnum};
use review::git::{diff_against, diff_against_with, Base, Diff};
use review::pending::{pending, pending_in, reject, stage, staged_files, Pending};
use review::trajectory::{Gather, TrajectoryDiff};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ListFormat {
    Text,
    Json,
}

#[derive(Args)]
#[command(
    about = "Walk through every recorded interaction that changed: accept, reject or skip each",
    long_about = "Walk through every recorded interaction that changed: accept, reject or skip each.\n\n\
        Shows each interaction that differs from what git's index holds (or from --base): its \
        test, the request fields that changed, the answer as a word or line diff, its drift classes \
        (error, tool call, structure, wording, usage, metadata) and the tokens before and after. \
        Keys: a accept (stage it in git's index), r reject (restore the index's interaction), s \
        skip, A/R/S the same for all the rest, t/x accept/reject every interaction of the shown \
        test at once (its whole trajectory: all its cassette files), d the full answer, q quit. Decisions are written \
        when the review ends; then git diff --cached shows what was accepted and git commit \
        commits it.\n\n\
        Each interaction has an ID, <folder>/<provider>#<n>: its position in the cassette, or #-<n> \
        for one only the base has (removed), at its position there.",
    after_help = "Examples:\n  cargo llmreplay review                        # one at a time, in the terminal\n  \
        cargo llmreplay review --list --format json   # what is pending, for scripts\n  \
        cargo llmreplay review --show 'my-crate--chat--greets/openai#2'\n  \
        cargo llmreplay review --accept greets        # accept every pending change of tests matching 'greets'\n  \
        cargo llmreplay review --reject               # restore every changed interaction from the index"
)]
pub struct ReviewArgs {
    /// Compare with this commit instead of git's index, to read (accepting stages in the
    /// index, so it needs no --base) [default: the index].
    #[arg(long, value_name = "REF")]
    base: Option<String>,
    /// List what is pending, one a line, and change nothing.
    #[arg(long, conflicts_with_all = ["show", "accept", "reject"])]
    list: bool,
    /// How --list prints.
    #[arg(long, value_enum, default_value = "text", requires = "list")]
    format: ListFormat,
    /// Print one interaction in full, by its ID, and change nothing.
    #[arg(long, value_name = "ID", conflicts_with_all = ["accept", "reject"])]
    show: Option<String>,
    /// Accept every pending interaction FILTER matches (all of them without one).
    #[arg(long, conflicts_with = "reject")]
    accept: bool,
    /// Restore the base's version of every pending interaction FILTER matches (all without one).
    #[arg(long)]
    reject: bool,
    /// Only interactions whose ID or test contains this text (or matches it as a glob: *, ?).
    filter: Option<String>,
    #[command(flatten)]
    cassettes: CassetteDirArg,
}

/// What a review found. Accepting stages in git's index; what the index and the work tree
/// still differ on is what is left to review, so no state is kept of its own.
struct Session {
    diff: Diff,
    pending: Vec<Pending>,
    cassette_dir: PathBuf,
    /// Compared with a revision (`--base`) rather than the index: nothing to stage against.
    against_rev: bool,
    /// Each changed test's run against the base's (none for a listing).
    runs: Vec<TrajectoryDiff>,
}

impl Session {
    /// The session over what differs from `base` (else the index); a `listing` one keeps no
    /// cassette in memory once its pending interactions are read.
    fn open(
        cassette_dir: &Path,
        base: Option<&str>,
        listing: bool,
        mode: SequenceMode,
    ) -> Result<Session> {
        let against = match base {
            Some(rev) => Base::Rev(Some(rev)),
            None => Base::Index,
        };
        let (diff, pending) = if listing {
            let mut by_file: std::collections::HashMap<PathBuf, Vec<Pending>> = Default::default();
            let mut visit = |workdir: &Path, file: &mut review::git::FileDiff| {
                by_file.insert(file.path.clone(), pending_in(workdir, file, false));
                // The listing reads them from the pending interactions.
                file.interactions = Vec::new();
                file.positions = Vec::new();
            };
            let diff = diff_against_with(cassette_dir, against, &[], Some(&mut visit))?;
            let pending = diff
                .files
                .iter()
                .flat_map(|f| by_file.remove(&f.path).unwrap_or_default())
                .collect();
            (diff, pending)
        } else {
            let diff = diff_against(cassette_dir, against, &[])?;
            let pending = pending(&diff);
            (diff, pending)
        };
        // A listing's files kept no sides to build runs from, and it shows none.
        let mut gather = Gather::default();
        if !listing {
            for file in &diff.files {
                gather.add(&diff.workdir, file);
            }
        }
        Ok(Session {
            runs: gather.compare(mode),
            diff,
            pending,
            cassette_dir: cassette_dir.to_path_buf(),
            against_rev: base.is_some(),
        })
    }

    /// The run of `test` against the base's, when it moved.
    fn run_of(&self, test: &cassettes::TestId) -> Option<&TrajectoryDiff> {
        self.runs.iter().find(|r| &r.test == test)
    }

    /// Pending, matching `filter`.
    fn open_items(&self, filter: Option<&str>) -> Vec<&Pending> {
        self.pending
            .iter()
            .filter(|p| filter.is_none_or(|f| matches(f, p)))
            .collect()
    }

    /// Stages `accepted` in git's index and restores `rejected` in the work tree from it.
    fn decide(&mut self, accepted: &[&Pending], rejected: &[&Pending]) -> Result<()> {
        if !accepted.is_empty() && self.against_rev {
            return Err(Error::Usage(format!(
                "accepting stages in git's index, and this review compares with {}; run `{} review` without --base to accept",
                term(&self.diff.base),
                crate::program()
            )));
        }
        if !rejected.is_empty() {
            reject(&self.diff, &self.cassette_dir, rejected)?;
        }
        if !accepted.is_empty() {
            stage(&self.diff, accepted)?;
        }
        Ok(())
    }

    /// What accepting staged so far, for `--list` and the end of a review.
    fn staged_line(&self) -> String {
        match staged_files(&self.diff, &self.cassette_dir) {
            Ok(0) | Err(_) => String::new(),
            Ok(n) => format!(
                "{} staged (git diff --cached shows them; git commit commits them)\n",
                plural(n, "cassette file")
            ),
        }
    }
}

/// A filter matches an ID or a test id.
fn matches(filter: &str, p: &Pending) -> bool {
    crate::args::filter_matches(filter, &[&p.id, p.test.as_str()])
}

pub fn run(args: ReviewArgs) -> Result<Outcome> {
    let resolved = Resolved::workspace(&args.cassettes)?;
    let mut session = Session::open(
        resolved.cassette_dir(),
        args.base.as_deref(),
        args.list,
        resolved.settings.trajectory_mode,
    )?;
    let filter = args.filter.as_deref();
    if args.list {
        let items = session.open_items(filter);
        let out = match args.format {
            ListFormat::Text => list_text(&session.diff, &items) + &session.staged_line(),
            ListFormat::Json => list_json(&session.diff, &items),
        };
        render::stdout(&out).map_err(|e| Error::io("cannot write to stdout", e))?;
        return Ok(Outcome::Success);
    }
    if let Some(id) = &args.show {
        let Some(p) = session.pending.iter().find(|p| &p.id == id) else {
            return Err(Error::Usage(format!(
                "no interaction {} differs from {}; `{} review --list` lists those that do",
                term(id),
                term(&session.diff.base),
                crate::program()
            )));
        };
        let source = crate::source::Sources::new(&session.diff.workdir).of(&p.test);
        let out = screen(
            p,
            None,
            &session.diff.base,
            source.as_deref(),
            session.run_of(&p.test),
            true,
            Styles::for_stdout(),
        );
        render::stdout(&out).map_err(|e| Error::io("cannot write to stdout", e))?;
        return Ok(Outcome::Success);
    }
    if args.accept || args.reject {
        let items: Vec<&Pending> = session.open_items(filter);
        let items: Vec<Pending> = items.into_iter().cloned().collect();
        let refs: Vec<&Pending> = items.iter().collect();
        if let (true, Some(filter)) = (refs.is_empty(), filter) {
            return Err(Error::Usage(format!(
                "no pending interaction matches {}; `{} review --list` shows what is pending",
                term(filter),
                crate::program()
            )));
        }
        let (accepted, rejected): (&[&Pending], &[&Pending]) = if args.accept {
            (&refs, &[])
        } else {
            (&[], &refs)
        };
        session.decide(accepted, rejected)?;
        render::stderr(&format!(
            "{} {}\n{}",
            if args.accept {
                "accepted (staged)"
            } else {
                "rejected (restored from the base)"
            },
            plural(refs.len(), "interaction"),
            session.staged_line()
        ));
        return Ok(Outcome::Success);
    }
    interactive(&mut session, filter)
}

/// After `test --record --review`: the review in a terminal, else a line saying what waits.
pub fn after_test_run(cassette_dir: &Path, mode: SequenceMode) -> Result<()> {
    let mut session = Session::open(cassette_dir, None, false, mode)?;
    if console::Term::stdout().is_term() && console::user_attended_stderr() {
        interactive(&mut session, None)?;
    } else {
        let n = session.open_items(None).len();
        render::stderr(&format!(
            "review: {} to review against {}; run `{} review` in a terminal, or --list\n",
            plural(n, "changed interaction"),
            term(&session.diff.base),
            crate::program()
        ));
    }
    Ok(())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Decision {
    Accept,
    Reject,
    Skip,
}

fn interactive(session: &mut Session, filter: Option<&str>) -> Result<Outcome> {
    let terminal = console::Term::stdout();
    if !terminal.is_term() {
        return Err(Error::Usage(
            "review walks through changes in a terminal, and this is none; in scripts use review --list, --show ID, --accept [FILTER] or --reject [FILTER]".into(),
        ));
    }
    let items: Vec<Pending> = session.open_items(filter).into_iter().cloned().collect();
    let sources = crate::source::Sources::new(&session.diff.workdir);
    if items.is_empty() {
        render::stderr(&format!(
            "Nothing to review: no recorded interaction differs from {}.\n",
            term(&session.diff.base)
        ));
        return Ok(Outcome::Success);
    }
    let failed = |e| Error::io("cannot use the terminal", e);
    let styles = Styles::for_stdout();
    let mut decisions = vec![Decision::Skip; items.len()];
    let (mut i, mut full, mut rest) = (0, false, None);
    // Tests decided whole (`t`/`x`): their interactions later in the walk (a test's cassettes
    // need not sit together) are not shown again, and no key for the rest undoes it.
    let mut whole: Vec<cassettes::TestId> = Vec::new();
    while i < items.len() {
        if whole.contains(&items[i].test) {
            i += 1;
            continue;
        }
        if let Some(d) = rest {
            decisions[i] = d;
            i += 1;
            continue;
        }
        terminal.clear_screen().map_err(failed)?;
        let run = session.run_of(&items[i].test);
        let shown = screen(
            &items[i],
            Some((i + 1, items.len())),
            &session.diff.base,
            sources.of(&items[i].test).as_deref(),
            run,
            full,
            styles,
        );
        terminal.write_str(&shown).map_err(failed)?;
        let decided = match terminal.read_key().map_err(failed)? {
            console::Key::Char('a') => Some(Decision::Accept),
            console::Key::Char('r') => Some(Decision::Reject),
            console::Key::Char('s') | console::Key::Enter => Some(Decision::Skip),
            console::Key::Char('A') => {
                rest = Some(Decision::Accept);
                None
            }
            console::Key::Char('R') => {
                rest = Some(Decision::Reject);
                None
            }
            console::Key::Char('S') | console::Key::Char('q') | console::Key::Escape => {
                rest = Some(Decision::Skip);
                None
            }
            console::Key::Char('d') => {
                full = !full;
                None
            }
            // The test's whole run at once: every interaction of it, before and after this.
            console::Key::Char(key @ ('t' | 'x')) => {
                let verdict = match key {
                    't' => Decision::Accept,
                    _ => Decision::Reject,
                };
                let test = items[i].test.clone();
                for (item, decision) in items.iter().zip(decisions.iter_mut()) {
                    if item.test == test {
                        *decision = verdict;
                    }
                }
                whole.push(test);
                full = false;
                None
            }
            _ => None,
        };
        if let Some(d) = decided {
            decisions[i] = d;
            (i, full) = (i + 1, false);
        }
    }
    terminal.clear_screen().map_err(failed)?;
    let pick = |d: Decision| -> Vec<&Pending> {
        items
            .iter()
            .zip(&decisions)
            .filter(|(_, x)| **x == d)
            .map(|(p, _)| p)
            .collect()
    };
    let (accepted, rejected, skipped) = (
        pick(Decision::Accept),
        pick(Decision::Reject),
        pick(Decision::Skip),
    );
    session.decide(&accepted, &rejected)?;
    let mut out = format!(
        "cargo llmreplay review: {} accepted, {} rejected, {} skipped\n",
        accepted.len(),
        rejected.len(),
        skipped.len()
    );
    for (word, list) in [("rejected", &rejected), ("skipped", &skipped)] {
        for p in list.iter() {
            let _ = writeln!(out, "  {word}  {}", term(&p.id));
        }
    }
    if !rejected.is_empty() {
        let _ = writeln!(
            out,
            "rejected interactions were restored from {}",
            term(&session.diff.base)
        );
    }
    out.push_str(&session.staged_line());
    render::stderr(&out);
    Ok(Outcome::Success)
}

/// One interaction as review shows it; `at` is its place in the walk, and the keys are shown
/// with it.
fn screen(
    p: &Pending,
    at: Option<(usize, usize)>,
    base: &str,
    source: Option<&str>,
    run: Option<&TrajectoryDiff>,
    full: bool,
    styles: Styles,
) -> String {
    let mut out = String::new();
    if let Some((n, of)) = at {
        let _ = write!(
            out,
            "{}\n\n",
            styles.bold(&format!(
                "{} review: {n} of {of}, against {}",
                crate::program(),
                term(base)
            ))
        );
    }
    let _ = writeln!(
        out,
        "{}  {}{}",
        styles.bold(&term(&p.id)),
        change_word(p),
        drift_suffix(&p.diff)
    );
    let _ = writeln!(out, "  test:     {}", term(&p.test));
    if let Some(at) = source {
        let _ = writeln!(out, "  source:   {}", term(at));
    }
    let _ = writeln!(out, "  cassette: {}", term(&p.cassette.to_string_lossy()));
    if let Some(run) = run {
        out.push_str(&crate::diff_cmd::trajectory_text(run, styles, "  "));
    }
    let _ = writeln!(
        out,
        "  request:  {} {}{}",
        term(&p.diff.method),
        term(&p.diff.path),
        p.diff
            .model
            .as_deref()
            .map(|m| format!(", model {}", term(m)))
            .unwrap_or_default()
    );
    out.push_str(&interaction_text(&p.diff, styles, full, "  "));
    if at.is_some() {
        let _ = write!(
            out,
            "\n  {}\n",
            styles.note(if full {
                "a accept   r reject (restore the base's)   s skip   A/R/S all the rest   t/x accept/reject the test's whole trajectory   d changed lines only   q quit"
            } else {
                "a accept   r reject (restore the base's)   s skip   A/R/S all the rest   t/x accept/reject the test's whole trajectory   d full answer   q quit"
            })
        );
    }
    out
}

fn change_word(p: &Pending) -> &'static str {
    match p.diff.change {
        review::review::Change::Added => "added",
        review::review::Change::Removed => "removed",
        review::review::Change::Changed => "changed",
    }
}

fn list_text(diff: &Diff, items: &[&Pending]) -> String {
    if items.is_empty() {
        return format!(
            "Nothing to review: no recorded interaction differs from {}.\n",
            term(&diff.base)
        );
    }
    let mut out = format!(
        "{} to review against {}:\n",
        plural(items.len(), "interaction"),
        term(&diff.base)
    );
    for p in items {
        let answer = p
            .diff
            .answer_after
            .as_deref()
            .or(p.diff.answer_before.as_deref())
            .unwrap_or_default();
        let short: String = answer.split_whitespace().collect::<Vec<_>>().join(" ");
        let short: String = short.chars().take(60).collect();
        let _ = writeln!(
            out,
            "{}  {}{}  {}  {} {}  {:?}",
            term(&p.id),
            change_word(p),
            drift_suffix(&p.diff),
            term(&p.test),
            term(&p.diff.method),
            term(&p.diff.path),
            short
        );
    }
    out
}

fn list_json(diff: &Diff, items: &[&Pending]) -> String {
    #[derive(serde::Serialize)]
    struct List<'a> {
        llmreplay_review: u32,
        base: &'a str,
        pending: &'a [&'a Pending],
    }
    let mut s = serde_json::to_string_pretty(&List {
        llmreplay_review: 1,
        base: &diff.base,
        pending: items,
    })
    .expect("serialises");
    s.push('\n');
    s
}
