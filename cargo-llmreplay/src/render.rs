//! What every command's output is made of: styles that are plain unless the stream takes
//! colour, one plural rule, one set of labels, and escaping of everything that comes from a
//! cassette for the medium it is printed in. Cassettes come from pull requests, and the
//! markdown goes to public PR comments: a test name or a request path must not be able to
//! end a code span, open a link or clear a reviewer's terminal.

use anstyle::{AnsiColor, Style};
use review::git::ChangeKind;
use std::borrow::Cow;
use std::fmt::Write as _;
use std::io::Write;

/// Colours for one output stream: plain unless it takes them (a terminal, no `NO_COLOR`, or
/// `CLICOLOR_FORCE`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Styles {
    on: bool,
}

impl Styles {
    #[cfg(test)]
    pub fn plain() -> Self {
        Styles { on: false }
    }

    #[cfg(test)]
    pub fn coloured() -> Self {
        Styles { on: true }
    }

    pub fn for_stdout() -> Self {
        Self::choose(&std::io::stdout())
    }

    pub fn for_stderr() -> Self {
        Self::choose(&std::io::stderr())
    }

    fn choose<S: anstream::stream::RawStream>(stream: &S) -> Self {
        Styles {
            on: anstream::AutoStream::choice(stream) != anstream::ColorChoice::Never,
        }
    }

    fn paint(&self, style: Style, text: &str) -> String {
        if self.on {
            format!("{style}{text}{style:#}")
        } else {
            text.to_string()
        }
    }

    pub fn bold(&self, text: &str) -> String {
        self.paint(Style::new().bold(), text)
    }

    /// A heading for something that fails the run.
    pub fn error(&self, text: &str) -> String {
        self.paint(AnsiColor::Red.on_default().bold(), text)
    }

    /// A heading for something to look at.
    pub fn warning(&self, text: &str) -> String {
        self.paint(AnsiColor::Yellow.on_default().bold(), text)
    }

    /// A heading for what changed.
    pub fn note(&self, text: &str) -> String {
        self.paint(AnsiColor::Cyan.on_default().bold(), text)
    }

    /// Words a word diff removed: red, struck through.
    pub fn removed(&self, text: &str) -> String {
        self.paint(AnsiColor::Red.on_default().strikethrough(), text)
    }

    /// Words a word diff added: green, underlined.
    pub fn added(&self, text: &str) -> String {
        self.paint(AnsiColor::Green.on_default().underline(), text)
    }
}

/// `1 test`, `2 tests`.
pub fn plural(n: usize, one: &str) -> String {
    format!("{n} {one}{}", if n == 1 { "" } else { "s" })
}

/// The word for a changed cassette file, padded for a column when `padded`.
pub fn change_kind(kind: ChangeKind) -> &'static str {
    match kind {
        ChangeKind::New => "new",
        ChangeKind::Modified => "modified",
        ChangeKind::Deleted => "deleted",
        ChangeKind::Moved => "moved",
    }
}

/// The same word, padded to the longest for a column.
pub fn change_kind_column(kind: ChangeKind) -> String {
    format!("{:<8}", change_kind(kind))
}

/// The daemon's counts as one sentence, as `serve` and `test` print them.
pub fn stats_sentence(s: &daemon::Stats) -> String {
    if s.requests == 0 {
        return "no requests".into();
    }
    let counts = [
        (s.hits, "replayed".to_string()),
        (s.misses, "missing".into()),
        (s.recorded, "recorded".into()),
        (s.replaced, "re-recorded".into()),
        (s.unchanged, "re-recorded unchanged".into()),
        (s.passthrough, "passed through".into()),
        (s.refused, "refused, not saved".into()),
        (s.broken, plural_word(s.broken, "broken stream")),
        (s.errors, plural_word(s.errors, "error")),
        (s.faults, "answered by faults".into()),
        (s.telemetry, "telemetry answered here".into()),
    ];
    let said: Vec<String> = counts
        .into_iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{n} {what}"))
        .collect();
    format!("{}: {}", plural(s.requests, "request"), said.join(", "))
}

/// A word diff as text: one copy of the answer, removed words as `[-...-]` and added ones as
/// `{+...+}` (git's word-diff markers, readable without colour), coloured when `styles` say so.
/// Unless `full`, only the lines that changed and one line around each are shown. Every
/// piece is escaped for a terminal.
pub fn word_diff(words: &[review::review::Words], styles: Styles, full: bool) -> String {
    use review::review::Words;
    // Lines of (changed, text) pieces: a run that spans lines is split at each newline.
    let mut lines: Vec<(bool, String)> = vec![(false, String::new())];
    for w in words {
        let (text, open, close, changed) = match w {
            Words::Same(t) => (t, "", "", false),
            Words::Removed(t) => (t, "[-", "-]", true),
            Words::Added(t) => (t, "{+", "+}", true),
        };
        let mut pieces = text.split('\n').peekable();
        while let Some(piece) = pieces.next() {
            let line = lines.last_mut().expect("one line at least");
            if !piece.is_empty() {
                let marked = format!("{open}{}{close}", term(piece));
                line.1.push_str(&match w {
                    Words::Same(_) => marked,
                    Words::Removed(_) => styles.removed(&marked),
                    Words::Added(_) => styles.added(&marked),
                });
                line.0 |= changed;
            } else if changed && pieces.peek().is_some() {
                // A removed or added line break.
                line.1.push_str(&match w {
                    Words::Removed(_) => styles.removed(&format!("{open}⏎{close}")),
                    _ => styles.added(&format!("{open}⏎{close}")),
                });
                line.0 = true;
            }
            if pieces.peek().is_some() {
                lines.push((false, String::new()));
            }
        }
    }
    let shown: Vec<bool> = (0..lines.len())
        .map(|i| full || (i.saturating_sub(1)..=(i + 1).min(lines.len() - 1)).any(|j| lines[j].0))
        .collect();
    let mut out = String::new();
    let mut skipped = false;
    for (i, (_, line)) in lines.iter().enumerate() {
        if shown[i] {
            if skipped {
                out.push_str("…\n");
                skipped = false;
            }
            out.push_str(line);
            out.push('\n');
        } else {
            skipped = true;
        }
    }
    if skipped {
        out.push_str("…\n");
    }
    out
}

/// `one`, or its plural for any other count.
fn plural_word(n: usize, one: &str) -> String {
    if n == 1 {
        one.to_string()
    } else {
        format!("{one}s")
    }
}

/// "2 recordings are error answers (404 on /v1/x, 400 on /v1/y)", each status and path
/// said once; not escaped.
pub fn error_answers_line(answers: &[daemon::ErrorAnswer]) -> String {
    let n = answers.len();
    let mut shown: Vec<String> = Vec::new();
    for e in answers {
        let said = format!("{} on {}", e.status, e.path);
        if !shown.contains(&said) {
            shown.push(said);
        }
    }
    let more = shown.len().saturating_sub(3);
    shown.truncate(3);
    if more > 0 {
        shown.push(format!("{more} more"));
    }
    format!(
        "{} {} error {} ({}); `{} status` lists them",
        plural(n, "recording"),
        if n == 1 { "is an" } else { "are" },
        if n == 1 { "answer" } else { "answers" },
        shown.join(", "),
        crate::program()
    )
}

/// Writes to stdout; a reader that went away (`| head`) is not an error.
pub fn stdout(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// Writes to stderr, ignoring a closed pipe as `stdout` does. What is said there is said to
/// people, so the commands it names are said in the program's name.
pub fn stderr(text: &str) {
    let text = crate::program::speak(text);
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(text.as_bytes()).and_then(|_| err.flush());
}

/// Characters a terminal acts on or that reorder text: C0 and C1 controls, DEL, and the
/// bidirectional overrides (Trojan Source).
fn unsafe_char(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// For a terminal, on one line: control characters (newlines too) shown escaped, `\u{1b}`.
pub fn term(text: &str) -> Cow<'_, str> {
    escape_where(text, unsafe_char)
}

/// For a terminal, over several lines: as `term`, but newlines and tabs kept.
pub fn term_lines(text: &str) -> Cow<'_, str> {
    escape_where(text, |c| unsafe_char(c) && c != '\n' && c != '\t')
}

fn escape_where(text: &str, escape: impl Fn(char) -> bool) -> Cow<'_, str> {
    if !text.chars().any(&escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if escape(c) {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// A miss's differing fields, a line each: `      /pointer: recorded -> now`, values shortened.
pub fn field_values(out: &mut String, values: &[daemon::FieldValues]) {
    use std::fmt::Write as _;
    for v in values {
        let class = v.class.map(|c| format!(" ({c})")).unwrap_or_default();
        let _ = writeln!(
            out,
            "      {}{class}: {} -> {}",
            term(&v.field),
            term(&daemon::short_json(v.recorded.as_ref(), 80)),
            term(&daemon::short_json(v.now.as_ref(), 80))
        );
    }
}

/// For HTML (and markdown's HTML blocks): on one line, with `&`, `<`, `>` and quotes as
/// entities. A newline could end the HTML block and let the rest be read as markdown.
pub fn html(text: &str) -> String {
    entities(&term(text))
}

/// For HTML over several lines (inside `<pre>`): as `html`, but newlines and tabs kept.
pub fn html_lines(text: &str) -> String {
    entities(&term_lines(text))
}

fn entities(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A markdown code span holding `text` on one line, that nothing in `text` can end: its
/// delimiter is longer than any run of backticks inside. Use `table_code` in a table.
pub fn code(text: &str) -> String {
    let one_line = term(text);
    let longest = longest_run(&one_line, '`');
    let fence = "`".repeat(longest + 1);
    // A space on each side when the text starts or ends with a backtick (CommonMark strips one).
    let pad = if one_line.starts_with('`') || one_line.ends_with('`') || one_line.is_empty() {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{one_line}{pad}{fence}")
}

/// A code span inside a GFM table cell: `|` would end the cell even inside the span.
pub fn table_code(text: &str) -> String {
    code(text).replace('|', "\\|")
}

/// A shortened one-line code span, for a prompt.
pub fn code_short(text: &str, max_chars: usize) -> String {
    let one_line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut short: String = one_line.chars().take(max_chars).collect();
    if short.len() < one_line.len() {
        short.push('…');
    }
    code(&short)
}

/// A fenced code block holding `body`, whose fence no line of `body` can close.
pub fn fenced(lang: &str, body: &str) -> String {
    let body = term_lines(body.trim_end());
    let fence = "`".repeat(longest_run(&body, '`').max(2) + 1);
    format!("{fence}{lang}\n{body}\n{fence}\n")
}

fn longest_run(text: &str, of: char) -> usize {
    text.split(|c| c != of)
        .map(|run| run.chars().count())
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_escapes() {
        assert_eq!(term("a\x1b[2Jb"), "a\\u{1b}[2Jb");
        assert_eq!(term("a\nb"), "a\\u{a}b");
        assert_eq!(term_lines("a\nb\tc\x07"), "a\nb\tc\\u{7}");
        assert_eq!(term("\u{202e}evil"), "\\u{202e}evil");
        assert!(matches!(term("plain ü"), Cow::Borrowed(_)));
    }

    #[test]
    fn code_spans_cannot_be_broken_out_of() {
        assert_eq!(code("a"), "`a`");
        assert_eq!(code("a`b"), "``a`b``");
        assert_eq!(code("`x"), "`` `x ``");
        assert_eq!(code("a\n\n## H"), "`a\\u{a}\\u{a}## H`");
        assert_eq!(table_code("a|b"), "`a\\|b`");
        assert_eq!(html("</code>\n<b>"), "&lt;/code&gt;\\u{a}&lt;b&gt;");
        assert_eq!(
            html_lines("<p>\n\u{202e}'\t\x1b"),
            "&lt;p&gt;\n\\u{202e}&#39;\t\\u{1b}"
        );
        assert_eq!(fenced("diff", "x\n```\ny"), "````diff\nx\n```\ny\n````\n");
    }

    #[test]
    fn styles_are_plain_unless_asked() {
        assert_eq!(Styles::plain().bold("x"), "x");
        assert_eq!(Styles::coloured().bold("x"), "\x1b[1mx\x1b[0m");
        assert_eq!(plural(1, "test"), "1 test");
        assert_eq!(plural(2, "test"), "2 tests");
    }
}
