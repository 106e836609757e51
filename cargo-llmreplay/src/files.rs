//! Files this command writes anew on every run (the report, the log, the CA's files).

use std::path::Path;

/// Creates `path` as a new, empty file, in place of any file there. On ext4, a file emptied
/// by truncation has its new data written out when it is closed (a guard against losing
/// a rewritten file in a crash), which cost a run's start and end most of a millisecond
/// each; a new file is written out in the background like any other.
pub fn create_anew(path: &Path) -> std::io::Result<std::fs::File> {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    std::fs::File::create(path)
}

/// Writes `contents` to `path` as a new file (see [`create_anew`]).
pub fn write_anew(path: &Path, contents: impl AsRef<[u8]>) -> std::io::Result<()> {
    use std::io::Write as _;
    create_anew(path)?.write_all(contents.as_ref())
}
