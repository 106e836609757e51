//! Where the run's CA is written for clients to trust when the daemon is their proxy: its
//! certificate, and a bundle of the roots they trusted before with it (for the variables that
//! replace a trust store). Under the target folder, never in the repository.

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// Where [`write_ca`] writes the CA's certificate and the bundle: `<stem>.pem` and
/// `<stem>-bundle.pem`.
pub fn ca_paths(stem: &Path) -> (PathBuf, PathBuf) {
    let ca = stem.with_extension("pem");
    let bundle = stem.with_file_name(format!(
        "{}-bundle.pem",
        stem.file_name().unwrap_or_default().to_string_lossy()
    ));
    (ca, bundle)
}

/// The CA's certificate and the bundle, written beside `stem` (see [`ca_paths`]); returns
/// their paths.
pub fn write_ca(stem: &Path, ca_pem: &str) -> Result<(PathBuf, PathBuf)> {
    let (ca, bundle) = ca_paths(stem);
    if let Some(dir) = ca.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::io(format!("cannot make {}", dir.display()), e))?;
    }
    let failed = |path: &Path, e| Error::io(format!("cannot write {}", path.display()), e);
    crate::files::write_anew(&ca, ca_pem).map_err(|e| failed(&ca, e))?;
    daemon::ca::write_bundle(ca_pem, || crate::files::create_anew(&bundle))
        .map_err(|e| failed(&bundle, e))?;
    Ok((ca, bundle))
}

/// The CA's files for a process of its own (`serve --env`, `run`): a fresh folder under
/// `<target>/llmreplay`, removed with the returned [`crate::files::RunDir`], and the files in it.
pub fn write_run_ca(
    target_dir: &Path,
    ca_pem: &str,
) -> Result<(crate::files::RunDir, (PathBuf, PathBuf))> {
    let parent = target_dir.join("llmreplay");
    let dir = crate::files::RunDir::make(&parent)
        .map_err(|e| Error::io(format!("cannot make a folder in {}", parent.display()), e))?;
    let written = write_ca(&dir.path().join("ca"), ca_pem)?;
    Ok((dir, written))
}

/// A listener on a free loopback port, and its URL: the daemon's, known before it is made.
pub fn loopback() -> Result<(std::net::TcpListener, String)> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    let listener = std::net::TcpListener::bind(addr)
        .map_err(|source| daemon::DaemonError::Bind { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| daemon::DaemonError::Bind { addr, source })?;
    Ok((listener, format!("http://{bound}")))
}
