//! Where the run's CA is written for clients to trust when the daemon is their proxy: its
//! certificate, and a bundle of the roots they trusted before with it (for the variables that
//! replace a trust store). Under the target folder, never in the repository.

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// The CA's certificate and the bundle, written beside `stem` (`<stem>.pem` and
/// `<stem>-bundle.pem`); returns their paths.
pub fn write_ca(stem: &Path, ca_pem: &str) -> Result<(PathBuf, PathBuf)> {
    let ca = stem.with_extension("pem");
    let bundle = stem.with_file_name(format!(
        "{}-bundle.pem",
        stem.file_name().unwrap_or_default().to_string_lossy()
    ));
    if let Some(dir) = ca.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::io(format!("cannot make {}", dir.display()), e))?;
    }
    for (path, text) in [
        (&ca, ca_pem.to_string()),
        (&bundle, daemon::ca::bundle(ca_pem)),
    ] {
        std::fs::write(path, text)
            .map_err(|e| Error::io(format!("cannot write {}", path.display()), e))?;
    }
    Ok((ca, bundle))
}
