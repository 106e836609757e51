//! Every command the daemon prints for people to paste: each is quoted for the shell and
//! escaped for nextest, so that pasting it runs exactly that command whatever the test is
//! called, and each begins with the name the program was started by ([`Program`]).

use cassettes::TestId;
use std::ffi::OsStr;

/// The name the program was started by, as people type it: `cargo llmreplay` when cargo ran
/// it, else the file name it was started as (`cargo-llmreplay`, or a package's command), so
/// that a command it prints works when pasted where it was started (with no cargo there, say).
/// Decided once, at start, from the arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Program(String);

impl Program {
    /// From `argv[0]` and whether cargo ran it (cargo puts `llmreplay` before the arguments).
    /// A name a shell would need quoted is not a name people type: then `cargo-llmreplay`.
    pub fn from_args(argv0: &OsStr, via_cargo: bool) -> Program {
        if via_cargo {
            return Program::default();
        }
        let name = std::path::Path::new(argv0)
            .file_name()
            .and_then(OsStr::to_str)
            .map(|n| n.strip_suffix(".exe").unwrap_or(n))
            .filter(|n| {
                !n.is_empty()
                    && n.chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            })
            .unwrap_or("cargo-llmreplay");
        Program(name.to_string())
    }

    /// The name, as printed.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `text` with each command it names (`cargo llmreplay` before a subcommand) said in this
    /// name; `cargo llmreplay` anywhere else (a folder, a test's name) is data, left as it is.
    pub fn speak<'a>(&self, text: &'a str) -> std::borrow::Cow<'a, str> {
        const WRITTEN_AS: &str = "cargo llmreplay";
        const SUBCOMMANDS: &[&str] = &[
            "init", "test", "run", "serve", "status", "diff", "prune", "recover", "mv", "review",
            "rerun", "match", "rekey", "mcp", "report", "help",
        ];
        if self.0 == WRITTEN_AS || !text.contains(WRITTEN_AS) {
            return std::borrow::Cow::Borrowed(text);
        }
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(at) = rest.find(WRITTEN_AS) {
            let after = &rest[at + WRITTEN_AS.len()..];
            let command = after
                .strip_prefix(' ')
                .map(|a| {
                    a.split(|c: char| !c.is_ascii_alphanumeric())
                        .next()
                        .unwrap_or("")
                })
                .is_some_and(|word| SUBCOMMANDS.contains(&word));
            out.push_str(&rest[..at]);
            out.push_str(if command { &self.0 } else { WRITTEN_AS });
            rest = after;
        }
        out.push_str(rest);
        std::borrow::Cow::Owned(out)
    }
}

impl Default for Program {
    fn default() -> Program {
        Program("cargo llmreplay".into())
    }
}

impl std::fmt::Display for Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The command that records a test's missing requests: a filter on the test under nextest,
/// else the daemon's record-missing mode for clients naming tests themselves. The filter is
/// escaped for nextest and the whole argument quoted for the shell, so that pasting it runs
/// exactly this command whatever the test is called.
pub fn record_command(program: &Program, test: &TestId) -> String {
    command_for(program, test, "--record-missing")
}

/// The command that records a test again from scratch: its cassettes then hold exactly what
/// it calls now, and a recording it no longer matches is replaced.
pub fn rerecord_command(program: &Program, test: &TestId) -> String {
    command_for(program, test, "--record")
}

/// The command that gives a test's closest recordings the requests its client sends now,
/// keeping their answers (a miss of SDK shape).
pub fn rekey_command(program: &Program, test: &TestId) -> String {
    format!("{program} rekey {}", cassettes::shell_quote(test.as_str()))
}

/// One command for several tests: one filterset naming each nextest test (`--record`
/// replaces what they no longer match, `--record-missing` keeps it); none when fewer than two
/// of them are nextest's.
pub fn record_all_command(program: &Program, tests: &[&TestId], replace: bool) -> Option<String> {
    let filters = name_filters(tests);
    let flag = if replace {
        "--record"
    } else {
        "--record-missing"
    };
    (filters.len() >= 2).then(|| {
        format!(
            "{program} test {flag} -E {}",
            cassettes::shell_quote(&filters.join(" | "))
        )
    })
}

/// One nextest filterset naming each nextest test of `tests` exactly; none when there is none.
pub fn tests_filter(tests: &[&TestId]) -> Option<String> {
    let filters = name_filters(tests);
    (!filters.is_empty()).then(|| filters.join(" | "))
}

/// Each nextest test's exact filter, sorted, once each.
fn name_filters(tests: &[&TestId]) -> Vec<String> {
    let mut filters: Vec<String> = tests
        .iter()
        .filter(|t| t.is_nextest())
        .map(|t| name_filter(t))
        .collect();
    filters.sort();
    filters.dedup();
    filters
}

/// nextest's exact filter on a test's name, escaped for the filterset language.
fn name_filter(test: &TestId) -> String {
    let name = test.name();
    let mut escaped = String::with_capacity(name.len());
    for c in name.chars() {
        if matches!(c, '\\' | ')' | ',') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    format!("test(={escaped})")
}

fn command_for(program: &Program, test: &TestId, mode_flag: &str) -> String {
    match test.is_nextest() {
        true => format!(
            "{program} test {mode_flag} -E {}",
            cassettes::shell_quote(&name_filter(test))
        ),
        false => format!("{program} serve --mode record-missing"),
    }
}

#[cfg(test)]
mod tests {
    use super::{record_command, Program, TestId};

    /// Pasted into a shell, the command runs itself and nothing else, whatever the test is
    /// called; nextest gets the name as one exact matcher.
    #[test]
    fn record_commands_paste_safely() {
        let dir = tempfile::tempdir().unwrap();
        for name in [
            "answers_hello",
            "quote'; touch pwned; echo '",
            "dollar $(touch pwned) `touch pwned`",
            "back\\slash, comma) paren",
            "new\nline",
        ] {
            let command = record_command(&Program::default(), &TestId::nextest("k::t", name));
            let args = command
                .strip_prefix("cargo llmreplay test --record-missing -E ")
                .unwrap_or_else(|| panic!("{command}"));
            let filter = pasted(dir.path(), args);
            let inner = filter
                .strip_prefix("test(=")
                .and_then(|f| f.strip_suffix(')'))
                .unwrap();
            let mut unescaped = String::new();
            let mut chars = inner.chars();
            while let Some(c) = chars.next() {
                unescaped.push(if c == '\\' { chars.next().unwrap() } else { c });
            }
            assert_eq!(unescaped, name, "{command}");
        }
        assert_eq!(
            record_command(&Program::default(), &TestId::new("k::t$answers_hello")),
            "cargo llmreplay test --record-missing -E 'test(=answers_hello)'"
        );
    }

    /// What `args`, pasted into bash in `dir`, passes as one argument; fails the test when
    /// pasting ran anything (a file `pwned` appears).
    fn pasted(dir: &std::path::Path, args: &str) -> String {
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!("printf '%s' {args}"))
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args}");
        assert!(!dir.join("pwned").exists(), "{args} ran something");
        String::from_utf8(out.stdout).unwrap()
    }

    /// Several tests make one filterset, quoted once; fewer than two nextest tests make none.
    #[test]
    fn several_tests_make_one_pasteable_filter() {
        let (a, b) = (
            TestId::nextest("k::t", "quote'; touch pwned; echo '"),
            TestId::nextest("k::t", "b,c)"),
        );
        let command = super::record_all_command(&Program::default(), &[&a, &b, &a], true).unwrap();
        let args = command
            .strip_prefix("cargo llmreplay test --record -E ")
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            pasted(dir.path(), args),
            r"test(=b\,c\)) | test(=quote'; touch pwned; echo ')"
        );
        assert_eq!(
            super::record_all_command(&Program::default(), &[&a], false),
            None
        );
        let named = TestId::new("suite > one");
        assert_eq!(
            super::record_all_command(&Program::default(), &[&a, &named], false),
            None
        );
    }

    /// The name is the one people typed: cargo's subcommand under cargo, else the file name
    /// started (without a path or `.exe`), else, when a shell would need it quoted, the
    /// binary's own name; and every command printed begins with it.
    #[test]
    fn the_program_is_named_as_it_was_started() {
        use std::ffi::OsStr;
        let named = |argv0: &str, cargo: bool| Program::from_args(OsStr::new(argv0), cargo);
        assert_eq!(
            named("/home/u/.cargo/bin/cargo-llmreplay", true).as_str(),
            "cargo llmreplay"
        );
        assert_eq!(
            named("/venv/bin/cargo-llmreplay", false).as_str(),
            "cargo-llmreplay"
        );
        assert_eq!(
            named("cargo-llmreplay.exe", false).as_str(),
            "cargo-llmreplay"
        );
        assert_eq!(named("llmreplay", false).as_str(), "llmreplay");
        // What it says to a test's client too: commands renamed, data left.
        let pip = named("/venv/bin/cargo-llmreplay", false);
        assert_eq!(
            pip.speak("run `cargo llmreplay status --fix`; test cargo llmreplay rocks"),
            "run `cargo-llmreplay status --fix`; test cargo llmreplay rocks"
        );
        assert_eq!(named("/tmp/my tool", false).as_str(), "cargo-llmreplay");
        assert_eq!(named("", false).as_str(), "cargo-llmreplay");
        let program = named("cargo-llmreplay", false);
        let test = TestId::nextest("k::t", "answers_hello");
        assert_eq!(
            record_command(&program, &test),
            "cargo-llmreplay test --record-missing -E 'test(=answers_hello)'"
        );
        assert!(super::rekey_command(&program, &test).starts_with("cargo-llmreplay rekey "));
        assert_eq!(
            record_command(&program, &TestId::new("suite > one")),
            "cargo-llmreplay serve --mode record-missing"
        );
    }
}
