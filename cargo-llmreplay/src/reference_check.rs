//! The book's command reference (docs/src/reference/commands/, one page a command) checked
//! against the commands themselves: each command's long help is rendered from its clap
//! definition, every flag it has must be listed in the `## Flags` section of its page, and
//! that section may name no flag the command does not have.

use clap::CommandFactory;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn pages() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/src/reference/commands")
}

/// Every command the book has a page for: its words after `cargo llmreplay`, and its
/// definition. `test` parses its own arguments, so its definition is `TestArgs`.
fn commands() -> Vec<(String, clap::Command)> {
    let mut out = vec![("test".to_string(), crate::test_cmd::TestArgs::command())];
    for sub in crate::Cli::command().get_subcommands() {
        if sub.get_name() == "test" {
            continue;
        }
        if sub.has_subcommands() {
            for inner in sub.get_subcommands() {
                let name = format!("{} {}", sub.get_name(), inner.get_name());
                out.push((name, inner.clone()));
            }
        } else {
            out.push((sub.get_name().to_string(), sub.clone()));
        }
    }
    out
}

/// The command's flags as its help shows them (`--long`, `-s`), less help and version.
fn flags(cmd: &mut clap::Command) -> BTreeSet<String> {
    cmd.build();
    let mut out = BTreeSet::new();
    for arg in cmd.get_arguments() {
        let id = arg.get_id().as_str();
        if arg.is_hide_set() || id == "help" || id == "version" {
            continue;
        }
        if let Some(long) = arg.get_long() {
            out.insert(format!("--{long}"));
        }
        if let Some(short) = arg.get_short() {
            out.insert(format!("-{short}"));
        }
    }
    out
}

/// The page's `## Flags` section: up to the next heading of its level.
fn flags_section(page: &str) -> Option<String> {
    let start = page.find("\n## Flags\n")? + 1;
    let rest = &page[start + "## Flags\n".len()..];
    let end = rest.find("\n## ").map_or(rest.len(), |i| i + 1);
    Some(rest[..end].to_string())
}

/// What the section lists: the first word of each code span in a table row's first cell
/// (`--upstream NAME=URL` lists `--upstream`).
fn listed(section: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for row in section.lines().filter(|l| l.starts_with('|')) {
        let first = row.split('|').nth(1).unwrap_or("");
        for (i, span) in first.split('`').enumerate() {
            let word = span.split_whitespace().next().unwrap_or("");
            if i % 2 == 1 && word.starts_with('-') {
                out.insert(word.to_string());
            }
        }
    }
    out
}

/// Every long flag the section names anywhere (`--mode` in "`--mode record`"), and every
/// short flag a row lists.
fn named(section: &str) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = listed(section)
        .into_iter()
        .filter(|f| !f.starts_with("--"))
        .collect();
    let bytes = section.as_bytes();
    let mut at = 0;
    while let Some(i) = section[at..].find("--") {
        let start = at + i;
        let before_ok =
            start == 0 || !(bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'-');
        let end = section[start + 2..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .map_or(section.len(), |j| start + 2 + j);
        let word = &section[start..end];
        if before_ok && word.len() > 2 && bytes[start + 2].is_ascii_lowercase() {
            out.insert(word.to_string());
        }
        at = end.max(start + 2);
    }
    out
}

#[test]
fn every_commands_page_lists_exactly_its_flags() {
    let mut problems = Vec::new();
    let mut pages_wanted = BTreeSet::new();
    for (name, mut cmd) in commands() {
        let file = format!("{}.md", name.replace(' ', "-"));
        pages_wanted.insert(file.clone());
        let page_path = format!("docs/src/reference/commands/{file}");
        let theirs = flags(&mut cmd);
        let help = cmd.render_long_help().to_string();
        for flag in &theirs {
            assert!(
                help.contains(flag.as_str()),
                "{flag} is not in the help of `cargo llmreplay {name}`:\n{help}"
            );
        }
        let Ok(page) = std::fs::read_to_string(pages().join(&file)) else {
            problems.push(format!(
                "{page_path}: no page for `cargo llmreplay {name}` (its flags: {theirs:?})"
            ));
            continue;
        };
        let Some(section) = flags_section(&page) else {
            problems.push(format!("{page_path}: no `## Flags` section"));
            continue;
        };
        let listed = listed(&section);
        for flag in theirs.difference(&listed) {
            problems.push(format!(
                "{page_path}: `cargo llmreplay {name} --help` has {flag}, which the page's Flags table does not list"
            ));
        }
        for flag in named(&section).difference(&theirs) {
            if flag != "--help" && flag != "-h" {
                problems.push(format!(
                    "{page_path}: the Flags section names {flag}, which `cargo llmreplay {name}` does not have"
                ));
            }
        }
    }
    for entry in std::fs::read_dir(pages()).expect("docs/src/reference/commands") {
        let file = entry
            .expect("a page")
            .file_name()
            .to_string_lossy()
            .into_owned();
        if !pages_wanted.contains(&file) {
            problems.push(format!(
                "docs/src/reference/commands/{file}: a page for no command"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "the command reference disagrees with --help:\n  {}",
        problems.join("\n  ")
    );
}

/// The check itself finds a missing flag and a made-up one, and names the page.
#[test]
fn the_check_names_the_flag_and_the_page() {
    let section = "\n| flag | what |\n| --- | --- |\n| `--dry-run` | and `--made-up` here |\n| `-j N`, `--jobs N` | x |\n";
    assert_eq!(
        listed(section),
        BTreeSet::from(["--dry-run".into(), "-j".into(), "--jobs".into()])
    );
    assert!(named(section).contains("--made-up"));
    assert!(!named("a --b").is_empty() && named("a---b x").is_empty());
    let page = "# t\n\n## Flags\n\n| `--x` | y |\n\n## See also\n\n`--not-flags`\n";
    assert_eq!(flags_section(page).as_deref(), Some("\n| `--x` | y |\n\n"));
}
