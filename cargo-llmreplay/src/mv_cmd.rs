//! `cargo llmreplay mv`: a renamed test keeps its recordings. Its cassette folder is renamed
//! and each cassette names the new test, under the folder's lock; a folder already moved by
//! hand (`git mv`) is finished in place.

use crate::args::{CassetteDirArg, Resolved};
use crate::error::{Error, Outcome, Result};
use crate::render::{plural, stderr, term};
use cassettes::TestId;
use clap::Args;
use std::collections::BTreeSet;
use std::path::Path;

#[derive(Args)]
#[command(
    about = "Move a renamed test's cassettes to its new name",
    long_about = "Move a renamed test's cassettes to its new name.\n\n\
        Renames the test's cassette folder (blobs and all) and writes the new test id into each of \
        its cassettes, so the renamed test replays what the old one recorded. OLD and NEW are test \
        ids as nextest names them (`my-crate::chat$greets_politely`), or only the test's name when \
        one cassette folder has it; NEW then keeps OLD's binary. Nothing is overwritten: a NEW \
        that already has cassettes is refused. A folder moved by hand (git mv) is finished in place.",
    after_help = "Examples:\n  cargo llmreplay mv greets_politely says_hi_politely\n  \
        cargo llmreplay mv 'my-crate::chat$greets_politely' 'my-crate::chat$says_hi_politely'"
)]
pub struct MvArgs {
    /// The test's old id, or its old name.
    old: String,
    /// The test's new id, or its new name (in OLD's binary).
    new: String,
    #[command(flatten)]
    cassettes: CassetteDirArg,
}

pub fn run(args: MvArgs) -> Result<Outcome> {
    let resolved = Resolved::workspace(&args.cassettes)?;
    let dir = resolved.cassette_dir();
    let from = resolve_old(dir, &args.old)?;
    let new = TestId::new(args.new.as_str());
    let to = match (new.is_nextest(), from.binary()) {
        (false, Some(binary)) => TestId::nextest(binary, &args.new),
        _ => new,
    };
    if from == to {
        return Err(Error::Usage(format!(
            "{} and {} are the same test",
            term(&args.old),
            term(&args.new)
        )));
    }
    let moved = cassettes::move_test(dir, &from, &to)?;
    stderr(&format!(
        "moved {} to {}: {} ({}) now {} {}\n",
        term(&resolved.rel(&moved.from)),
        term(&resolved.rel(&moved.to)),
        plural(moved.files, "cassette"),
        plural(moved.recordings, "recording"),
        if moved.files == 1 { "names" } else { "name" },
        term(to.as_str())
    ));
    Ok(Outcome::Success)
}

/// An old test id as given, or the one test whose cassettes have this name (or this folder).
fn resolve_old(dir: &Path, old: &str) -> Result<TestId> {
    let given = TestId::new(old);
    if given.is_nextest() {
        return Ok(given);
    }
    let mut found = BTreeSet::new();
    for file in cassettes::cassette_files(dir)? {
        let Ok(cassette) = cassettes::read_cassette(&file) else {
            continue;
        };
        let test = cassette.test;
        let folder = file
            .parent()
            .and_then(Path::file_name)
            .map(|f| f.to_string_lossy().into_owned());
        if test.name() == old || folder.as_deref() == Some(old) {
            found.insert(test);
        }
    }
    let mut found = found.into_iter();
    match (found.next(), found.next()) {
        (Some(one), None) => Ok(one),
        (None, _) => Err(Error::Usage(format!(
            "no cassette in {} belongs to a test named {}; give its whole id, as nextest names it ('my-crate::binary$module::test')",
            dir.display(),
            term(old)
        ))),
        (Some(a), Some(b)) => {
            let all: Vec<String> = [a, b].into_iter().chain(found).map(String::from).collect();
            Err(Error::Usage(format!(
                "{} names more than one test ({}); give the whole id of the one to move",
                term(old),
                term(&all.join(", "))
            )))
        }
    }
}
