//! The command line split between this command and nextest: this command's own flags from its
//! clap definition, nextest's from a table checked against nextest's own help, and a typo of
//! ours refused before nextest sees it.

use super::TestArgs;
use clap::CommandFactory;
use std::ffi::OsString;

/// This command's own flags, from its clap definition: switches, and flags that take a value.
/// Everything else goes to nextest, so a flag added to `TestArgs` is never passed on by mistake.
pub(super) fn own_flags() -> (Vec<String>, Vec<String>) {
    let mut cmd = TestArgs::command();
    cmd.build();
    let (mut switches, mut with_value) = (Vec::new(), Vec::new());
    for arg in cmd.get_arguments() {
        let mut names: Vec<String> = arg
            .get_long_and_visible_aliases()
            .unwrap_or_default()
            .into_iter()
            .map(|l| format!("--{l}"))
            .collect();
        names.extend(
            arg.get_short_and_visible_aliases()
                .unwrap_or_default()
                .into_iter()
                .map(|c| format!("-{c}")),
        );
        if arg.get_action().takes_values() {
            with_value.extend(names);
        } else {
            switches.extend(names);
        }
    }
    (switches, with_value)
}

/// Splits the command line into this command's own flags and nextest's.
pub(super) fn split_args(args: Vec<OsString>) -> (Vec<OsString>, Vec<OsString>) {
    let (switches, with_value) = own_flags();
    let (mut own, mut nextest) = (Vec::new(), Vec::new());
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        let s = arg.to_string_lossy();
        if s == "--" {
            nextest.push(arg);
            nextest.extend(it.by_ref());
            break;
        }
        if switches.iter().any(|f| *f == s)
            || with_value.iter().any(|f| s.starts_with(&format!("{f}=")))
        {
            own.push(arg);
        } else if with_value.iter().any(|f| *f == s) {
            own.push(arg);
            own.extend(it.next());
        } else {
            nextest.push(arg);
        }
    }
    (own, nextest)
}

/// nextest's options that decide whether a run stops at its first failure.
pub(super) const FAIL_FAST_FLAGS: &[&str] = &["--fail-fast", "--no-fail-fast", "--max-fail"];

/// The nextest arguments before `--` (what follows goes to the test binaries).
pub(super) fn before_separator(
    args: &[OsString],
) -> impl Iterator<Item = std::borrow::Cow<'_, str>> {
    args.iter()
        .take_while(|a| *a != "--")
        .map(|a| a.to_string_lossy())
}

/// The user's fail-fast option, if any: `--fail-fast`, `--no-fail-fast`, `--max-fail=N`.
pub(super) fn fail_fast_option(args: &[OsString]) -> Option<String> {
    before_separator(args)
        .find(|a| FAIL_FAST_FLAGS.contains(&a.split('=').next().unwrap_or_default()))
        .map(|a| a.into_owned())
}

/// The long flags of `cargo nextest run` and their aliases, as its own `--help` lists them (a
/// test compares the two, so a nextest that adds or drops a flag fails it rather than drifting
/// silently): known to be nextest's, so never refused as a typo of ours, and with no `--help`
/// asked of nextest to tell (a few hundred milliseconds, for `--retries` or `--release` on
/// every run). A flag of a newer nextest that is close to one of ours is still let through:
/// nextest's help is asked for those.
pub(super) const NEXTEST_FLAGS: &[&str] = &[
    "--all",
    "--all-features",
    "--all-targets",
    "--archive-file",
    "--archive-format",
    "--bench",
    "--benches",
    "--bin",
    "--binaries-metadata",
    "--bins",
    "--build-dir-remap",
    "--build-jobs",
    "--cargo-message-format",
    "--cargo-metadata",
    "--cargo-profile",
    "--cargo-quiet",
    "--cargo-verbose",
    "--color",
    "--config",
    "--config-file",
    "--debugger",
    "--exact",
    "--example",
    "--examples",
    "--exclude",
    "--extract-overwrite",
    "--extract-to",
    "--fail-fast",
    "--failure-output",
    "--features",
    "--ff",
    "--filterset",
    "--final-status-level",
    "--flaky-result",
    "--frozen",
    "--future-incompat-report",
    "--help",
    "--hide-progress-bar",
    "--ignore-default-filter",
    "--ignore-rust-version",
    "--ignored",
    "--include-ignored",
    "--jobs",
    "--lib",
    "--locked",
    "--manifest-path",
    "--max-fail",
    "--max-progress-running",
    "--message-format",
    "--message-format-version",
    "--nff",
    "--no-capture",
    "--no-default-features",
    "--no-fail-fast",
    "--no-input-handler",
    "--no-output-indent",
    "--no-pager",
    "--no-run",
    "--no-tests",
    "--nocapture",
    "--offline",
    "--override-version-check",
    "--package",
    "--partition",
    "--persist-extract-tempdir",
    "--platform-filter",
    "--profile",
    "--release",
    "--rerun",
    "--retries",
    "--run-ignored",
    "--show-progress",
    "--skip",
    "--status-level",
    "--stress-count",
    "--stress-duration",
    "--success-output",
    "--target",
    "--target-dir",
    "--target-dir-remap",
    "--test",
    "--test-threads",
    "--tests",
    "--timings",
    "--tool-config-file",
    "--tracer",
    "--unit-graph",
    "--user-config-file",
    "--verbose",
    "--workspace",
    "--workspace-remap",
];

/// A flag meant for this command but mistyped (`--recrod`) would otherwise reach nextest,
/// which answers with its own usage and suggestions. A `--flag` that is not ours but close to
/// one of ours (clap's suggestion) and that nextest does not know is refused with clap's error.
pub(super) fn check_typos(nextest_args: &[OsString]) -> std::result::Result<(), clap::Error> {
    let mut nextest_help: Option<String> = None;
    for arg in before_separator(nextest_args) {
        let Some(flag) = arg
            .split('=')
            .next()
            .filter(|f| f.starts_with("--") && !NEXTEST_FLAGS.contains(f))
        else {
            continue;
        };
        let Err(e) = TestArgs::command().try_get_matches_from(["cargo llmreplay test", flag])
        else {
            continue;
        };
        let suggested = e.kind() == clap::error::ErrorKind::UnknownArgument
            && e.get(clap::error::ContextKind::SuggestedArg).is_some();
        if !suggested {
            continue;
        }
        // Asked only for a near miss: a flag of nextest's own close to ours goes through.
        let help = nextest_help.get_or_insert_with(|| {
            crate::locate::nextest(["run", "--help"])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default()
        });
        let known = help.match_indices(flag).any(|(at, _)| {
            help[at + flag.len()..]
                .chars()
                .next()
                .is_none_or(|c| !(c.is_alphanumeric() || c == '-'))
        });
        if !known {
            return Err(e);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The flag table is nextest's: every long flag and alias `cargo nextest run --help`
    /// lists, and nothing else.
    #[test]
    fn the_flag_table_is_nextests_own() {
        let out = crate::locate::nextest(["run", "--help"]).output();
        let help = match out {
            Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).into_owned(),
            _ if std::env::var_os("CI").is_some_and(|v| v == "true") => {
                panic!("cargo-nextest is needed for this test (CI=true)")
            }
            _ => {
                eprintln!("skipped: cargo-nextest is not installed");
                return;
            }
        };
        let flag = regex::Regex::new(r"^\s+(?:-\w, )?(--[a-z][a-z0-9-]*)").unwrap();
        let alias = regex::Regex::new(r"\[alias(?:es)?: ([^\]]*)\]").unwrap();
        let mut listed = std::collections::BTreeSet::new();
        for line in help.lines() {
            if let Some(c) = flag.captures(line) {
                listed.insert(c[1].to_string());
            }
            if let Some(c) = alias.captures(line) {
                for a in c[1].split(',') {
                    listed.insert(a.trim().to_string());
                }
            }
        }
        let table: std::collections::BTreeSet<String> =
            NEXTEST_FLAGS.iter().map(|f| f.to_string()).collect();
        assert_eq!(
            table.difference(&listed).collect::<Vec<_>>(),
            Vec::<&String>::new(),
            "in the table, not in nextest's help"
        );
        assert_eq!(
            listed.difference(&table).collect::<Vec<_>>(),
            Vec::<&String>::new(),
            "in nextest's help, not in the table: add them to NEXTEST_FLAGS"
        );
        // Our short flags (-i) are none of nextest's.
        let short = regex::Regex::new(r"^\s+-(\w),").unwrap();
        let theirs: Vec<String> = help
            .lines()
            .filter_map(|l| short.captures(l).map(|c| format!("-{}", &c[1])))
            .collect();
        let (switches, with_value) = own_flags();
        // -h is help, ours and nextest's alike.
        for ours in switches
            .iter()
            .chain(&with_value)
            .filter(|f| !f.starts_with("--") && *f != "-h")
        {
            assert!(!theirs.contains(ours), "{ours} is nextest's too");
        }
    }

    fn split(args: &[&str]) -> (Vec<String>, Vec<String>) {
        let (a, b) = split_args(args.iter().map(OsString::from).collect());
        let s = |v: Vec<OsString>| v.into_iter().map(|x| x.into_string().unwrap()).collect();
        (s(a), s(b))
    }

    /// nextest's own flags close to ours pass without a look at nextest's help; a near miss of
    /// ours is clap's error with its suggestion.
    #[test]
    fn typos_of_ours_are_refused_and_nextest_flags_pass() {
        let args = |a: &[&str]| a.iter().map(OsString::from).collect::<Vec<_>>();
        for flag in [
            "--retries",
            "--release",
            "--run-ignored",
            "--color",
            "--target-dir",
        ] {
            assert!(check_typos(&args(&[flag, "x"])).is_ok(), "{flag}");
        }
        let e = check_typos(&args(&["--recrod"])).unwrap_err().to_string();
        assert!(e.contains("--record"), "{e}");
    }

    #[test]
    fn own_flags_anywhere_the_rest_to_nextest() {
        let (own, rest) = split(&[
            "-E",
            "test(=a)",
            "--record-missing",
            "--upstream",
            "openai=http://x",
            "--retries=2",
            "--deny=unused",
            "--",
            "--record",
        ]);
        assert_eq!(
            own,
            [
                "--record-missing",
                "--upstream",
                "openai=http://x",
                "--deny=unused"
            ]
        );
        assert_eq!(rest, ["-E", "test(=a)", "--retries=2", "--", "--record"]);
    }
}
