//! The hook that gives Python's own runner, `python -m unittest`, one test per TestCase
//! method under `run`: a folder of the run's own, first on PYTHONPATH, with a `sitecustomize`
//! that every Python process of the command loads and the identity module it shares with the
//! pytest plugin (`src/python/`, the one source of both; the plugin's package links to it).

use crate::error::{Error, Result};
use crate::files::RunDir;
use std::ffi::OsString;
use std::path::Path;

const SITECUSTOMIZE: &str = include_str!("python/sitecustomize.py");
const IDENTITY: &str = include_str!("python/llmreplay_identity.py");

/// The run's folder of Python files, removed when the run ends.
pub(crate) struct PythonHook {
    dir: RunDir,
}

impl PythonHook {
    /// Writes the files into a folder of this run's own under the target dir.
    pub(crate) fn write(target_dir: &Path) -> Result<PythonHook> {
        let parent = target_dir.join("llmreplay").join("python");
        let dir = RunDir::make(&parent)
            .map_err(|e| Error::io(format!("cannot make a folder in {}", parent.display()), e))?;
        for (name, text) in [
            ("sitecustomize.py", SITECUSTOMIZE),
            ("_llmreplay_identity.py", IDENTITY),
        ] {
            let path = dir.path().join(name);
            std::fs::write(&path, text)
                .map_err(|e| Error::io(format!("cannot write {}", path.display()), e))?;
        }
        Ok(PythonHook { dir })
    }

    /// PYTHONPATH with the folder first, before what the environment already has.
    pub(crate) fn pythonpath(&self) -> OsString {
        let mut paths = vec![self.dir.path().to_path_buf()];
        if let Some(given) = std::env::var_os("PYTHONPATH").filter(|p| !p.is_empty()) {
            paths.extend(std::env::split_paths(&given));
        }
        std::env::join_paths(paths).unwrap_or_else(|_| self.dir.path().as_os_str().to_owned())
    }
}
