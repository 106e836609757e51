//! Files this command writes anew on every run (the report, the log, the CA's files).

use std::path::{Path, PathBuf};

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

/// Writes `contents` to a temporary file beside `path` and renames it over `path`: a reader
/// sees the old file or the new one whole, and two runs writing one path never mix.
pub fn replace_atomically(path: &Path, contents: impl AsRef<[u8]>) -> std::io::Result<()> {
    use std::io::Write as _;
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".llmreplay-")
        .suffix(".tmp")
        .tempfile_in(dir)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o644))?;
    }
    tmp.write_all(contents.as_ref())?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// A folder of one run's own files (the CA's certificate and bundle) under the target dir,
/// named for its process, removed when the run ends; a run killed before that leaves it to
/// the next run, which removes the folders of processes that are gone.
pub struct RunDir {
    path: PathBuf,
}

impl RunDir {
    /// Makes `<parent>/run-<pid>`, after removing what runs no longer alive left there.
    pub fn make(parent: &Path) -> std::io::Result<RunDir> {
        std::fs::create_dir_all(parent)?;
        for entry in std::fs::read_dir(parent)?.filter_map(Result::ok) {
            let name = entry.file_name();
            let pid = name
                .to_str()
                .and_then(|n| n.strip_prefix("run-"))
                .and_then(|p| p.parse::<u32>().ok());
            if pid.is_some_and(|pid| !alive(pid)) {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
        let path = parent.join(format!("run-{}", std::process::id()));
        // A folder of an earlier process with this pid is stale: this process is new.
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir(&path)?;
        Ok(RunDir { path })
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Whether a process with this pid exists (one of another user's counts).
#[cfg(unix)]
fn alive(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return false;
    };
    rustix::process::test_kill_process(pid) != Err(rustix::io::Errno::SRCH)
}

/// Elsewhere a run's folder is left for its own run to remove.
#[cfg(not(unix))]
fn alive(_pid: u32) -> bool {
    true
}
