//! The file system rules every write keeps: a file replaced whole (a temporary file renamed
//! over it), a folder's exclusive lock taken with a timeout, and no path outside the cassette
//! directory.

use crate::Error;
use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

/// How long a write waits for another process to release a cassette folder's lock by default.
pub const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(30);

/// Writes a temporary file beside `path` and renames it over: a crash leaves the old file or
/// the new one, never half of either.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    let dir = path.parent().expect("cassette paths have a folder");
    let mut builder = tempfile::Builder::new();
    builder.prefix(".llmreplay-").suffix(".tmp");
    // A new file is readable as any file the user makes (0644 less the umask, README "Limits and hostile input"), not 0600; a
    // re-recorded one keeps the mode it had.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        builder.permissions(std::fs::Permissions::from_mode(0o644));
    }
    let mut tmp = builder.tempfile_in(dir).map_err(|e| Error::io(dir, e))?;
    if let Ok(existing) = std::fs::metadata(path) {
        tmp.as_file()
            .set_permissions(existing.permissions())
            .map_err(|e| Error::io(tmp.path(), e))?;
    }
    tmp.write_all(bytes)
        .and_then(|_| tmp.as_file().sync_all())
        .map_err(|e| Error::io(tmp.path(), e))?;
    tmp.persist(path).map_err(|e| Error::io(path, e.error))?;
    Ok(())
}

/// Takes a folder's exclusive lock, waiting up to `timeout` for another process to release it,
/// then failing with an error that names the folder. Blocks: call it off the async workers.
pub(crate) fn lock_folder(dir: &Path, timeout: Duration) -> Result<File, Error> {
    let file = lock_file(dir)?;
    let started = Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        match file.try_lock() {
            Ok(()) => break,
            Err(std::fs::TryLockError::WouldBlock) if started.elapsed() < timeout => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(Error::Locked {
                    folder: dir.to_path_buf(),
                    waited: timeout,
                })
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(Error::io(dir, e)),
        }
    }
    // The holder before may have removed the folder (its test's last recording trimmed):
    // a lock on a folder no longer there guards nothing.
    if !still_there(dir, &file) {
        return Err(Error::io(
            dir,
            std::io::Error::from(std::io::ErrorKind::NotFound),
        ));
    }
    Ok(file)
}

/// Makes the folder if need be and takes its lock; a folder another run removed meanwhile is
/// made again.
pub(crate) fn lock_creating(dir: &Path, root: &Path, timeout: Duration) -> Result<File, Error> {
    let mut tries = 0;
    loop {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        // A folder that is a link to elsewhere would carry the write out of the cassette dir.
        confined(root, dir)?;
        match lock_folder(dir, timeout) {
            Err(Error::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound && tries < 8 =>
            {
                tries += 1;
            }
            other => return other,
        }
    }
}

/// Removes a cassette folder left empty, while holding its lock (which goes with it).
pub(crate) fn remove_if_empty(folder: &Path, lock: File) {
    if std::fs::read_dir(folder).is_ok_and(|mut d| d.next().is_none()) {
        let _ = std::fs::remove_dir(folder);
    }
    drop(lock);
}

/// Whether `dir` still names the folder `locked` was opened on.
#[cfg(unix)]
pub(crate) fn still_there(dir: &Path, locked: &File) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(dir), locked.metadata()) {
        (Ok(now), Ok(held)) => now.dev() == held.dev() && now.ino() == held.ino(),
        _ => false,
    }
}

// Elsewhere the lock is a file inside the folder, which is then never empty nor removed.
#[cfg(not(unix))]
pub(crate) fn still_there(_dir: &Path, _locked: &File) -> bool {
    true
}

/// Fails unless `path`, with every link resolved, lies inside `root`.
pub fn confined(root: &Path, path: &Path) -> Result<(), Error> {
    let root = root.canonicalize().map_err(|e| Error::io(root, e))?;
    let real = path.canonicalize().map_err(|e| Error::io(path, e))?;
    if real.starts_with(&root) {
        Ok(())
    } else {
        Err(Error::Outside {
            path: path.to_path_buf(),
            resolved: real,
            root,
        })
    }
}

// The folder itself is the lock on Unix, so no lock file is left beside the cassettes.
#[cfg(unix)]
pub(crate) fn lock_file(dir: &Path) -> Result<File, Error> {
    File::open(dir).map_err(|e| Error::io(dir, e))
}

#[cfg(not(unix))]
pub(crate) fn lock_file(dir: &Path) -> Result<File, Error> {
    let path = dir.join(".llmreplay.lock");
    File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| Error::io(&path, e))
}
