//! Finding the workspace root and checking cargo-nextest without a cargo call where that is
//! safe: each cargo call costs a few tens of milliseconds before the tests even start, on
//! every run. When the manifests leave any doubt, cargo itself is asked.

use crate::error::{Error, Result};
use cassettes::glob::{glob, Separator};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The oldest nextest that sets every variable the runner reads.
const MIN_NEXTEST: (u64, u64, u64) = (0, 9, 116);

/// The root of the workspace the current directory is in.
pub fn workspace_root() -> Result<PathBuf> {
    if let Some(root) = std::env::current_dir()
        .ok()
        .and_then(|d| root_from_manifests(&d))
    {
        return Ok(root);
    }
    let out = Command::new(cargo())
        .args(["locate-project", "--workspace", "--message-format", "plain"])
        .output()
        .map_err(|e| Error::io("cannot run cargo", e))?;
    if !out.status.success() {
        return Err(Error::Precondition(format!(
            "not inside a cargo workspace ({}). Run cargo llmreplay in your crate or workspace",
            String::from_utf8_lossy(&out.stderr)
                .trim()
                .trim_start_matches("error: ")
        )));
    }
    let manifest = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    Ok(manifest.parent().map(Into::into).unwrap_or(manifest))
}

/// The project's root for `run` and the cassette commands: the nearest folder up from here
/// that is a project. A Rust crate's is its cargo workspace's root; a folder with
/// `llmreplay.toml`, `pyproject.toml`, `setup.py`, `setup.cfg` or `package.json` is its own
/// (so two Python projects inside one Rust workspace keep their cassettes apart); else the
/// repository's root (`.git`); else this folder.
pub fn project_root() -> Result<PathBuf> {
    let here =
        std::env::current_dir().map_err(|e| Error::io("cannot read the current directory", e))?;
    for dir in here.ancestors() {
        if dir.join("Cargo.toml").is_file() {
            // Cargo's rule where it is sure; else cargo says.
            return match root_from_manifests(dir) {
                Some(root) => Ok(root),
                None => workspace_root(),
            };
        }
        let own = [
            daemon::CONFIG_FILE,
            "pyproject.toml",
            "setup.py",
            "setup.cfg",
            "package.json",
        ]
        .iter()
        .any(|marker| dir.join(marker).is_file());
        if own || dir.join(".git").exists() {
            return Ok(dir.to_path_buf());
        }
    }
    Ok(here)
}

fn read_manifest(dir: &Path) -> Option<toml::Table> {
    let text = std::fs::read_to_string(dir.join("Cargo.toml")).ok()?;
    toml::from_str(&text).ok()
}

/// Cargo's rule, for the layouts it is sure of: the nearest manifest is the root if it has a
/// `[workspace]`; else the first ancestor with one, if it lists the package among its members
/// (or excludes it: then the package is its own root); else the package alone. `None` when
/// a manifest does not parse, names its workspace by path, or the ancestor's members do not
/// say (a path dependency is a member too): cargo decides those.
fn root_from_manifests(start: &Path) -> Option<PathBuf> {
    let package = start.ancestors().find(|d| d.join("Cargo.toml").is_file())?;
    let manifest = read_manifest(package)?;
    if manifest.contains_key("workspace") {
        return Some(package.to_path_buf());
    }
    if manifest
        .get("package")
        .and_then(|p| p.get("workspace"))
        .is_some()
    {
        return None;
    }
    for dir in package.ancestors().skip(1) {
        if !dir.join("Cargo.toml").is_file() {
            continue;
        }
        let outer = read_manifest(dir)?;
        let Some(ws) = outer.get("workspace") else {
            continue;
        };
        let rel = package
            .strip_prefix(dir)
            .ok()?
            .to_string_lossy()
            .replace('\\', "/");
        let listed = |key: &str| -> Vec<String> {
            ws.get(key)
                .and_then(|v| v.as_array())
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str())
                        .map(|s| s.trim_end_matches('/').to_string())
                        .collect()
                })
                .unwrap_or_default()
        };
        if listed("exclude")
            .iter()
            .any(|e| rel == *e || rel.starts_with(&format!("{e}/")))
        {
            return Some(package.to_path_buf());
        }
        return listed("members")
            .iter()
            .any(|m| glob(m, Separator::Literal).is_ok_and(|g| g.is_match(&rel)))
            .then(|| dir.to_path_buf());
    }
    Some(package.to_path_buf())
}

/// Checks that cargo-nextest is installed and new enough. A version once found good is kept
/// in `<target dir>/llmreplay/`, named by the binary's path, size and time, so later runs do
/// not ask again until nextest changes.
pub fn check_nextest(target_dir: &Path) -> Result<()> {
    let stamp = nextest_binary().and_then(|bin| {
        let bin = bin.canonicalize().ok()?;
        let meta = std::fs::metadata(&bin).ok()?;
        let modified = meta
            .modified()
            .ok()?
            .duration_since(std::time::UNIX_EPOCH)
            .ok()?;
        // The cargo that runs it is part of the name: a different cargo may find another.
        Some(format!(
            "{} {} {} {}",
            cargo().to_string_lossy(),
            bin.display(),
            meta.len(),
            modified.as_nanos()
        ))
    });
    let cache = target_dir.join("llmreplay/nextest-checked");
    if let Some(stamp) = &stamp {
        if std::fs::read_to_string(&cache).is_ok_and(|c| c == *stamp) {
            return Ok(());
        }
    }
    let out = nextest(["--version"])
        .output()
        .map_err(|e| Error::io("cannot run cargo", e))?;
    check_version(&out)?;
    if let Some(stamp) = stamp {
        // Only a cache: a run that cannot write it checks again next time.
        let _ = std::fs::create_dir_all(target_dir.join("llmreplay"))
            .and_then(|_| std::fs::write(&cache, stamp));
    }
    Ok(())
}

/// A command that runs `cargo nextest` with `args`, as cargo would. Under cargo (`cargo
/// llmreplay ...` sets `CARGO`), it starts the `cargo-nextest` that cargo would find, with
/// the arguments and the `CARGO` variable cargo gives it: going through cargo again would be
/// a second cargo start, about 10 ms, on every run. Otherwise, and whenever a cargo alias may
/// redefine `nextest`, cargo runs it.
pub fn nextest<I, S>(args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let direct = std::env::var_os("CARGO")
        .filter(|_| !nextest_aliased())
        .and_then(|cargo| Some((cargo, nextest_binary()?)));
    let mut cmd = match direct {
        Some((cargo, bin)) => {
            let mut cmd = Command::new(bin);
            cmd.env("CARGO", cargo);
            cmd
        }
        None => Command::new(cargo()),
    };
    cmd.arg("nextest").args(args);
    cmd
}

/// Where cargo looks for `cargo-<name>`: `$CARGO_HOME/bin` first unless PATH lists it, then
/// PATH.
fn subcommand_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    if let Some(bin) = cargo_home().map(|home| home.join("bin")) {
        if !dirs.contains(&bin) {
            dirs.insert(0, bin);
        }
    }
    dirs
}

fn cargo_home() -> Option<PathBuf> {
    std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
}

/// The `cargo-nextest` that `cargo nextest` runs, as cargo looks for it. Looked for once: a
/// run's start asks for it twice (to check its version, then to start it).
fn nextest_binary() -> Option<&'static Path> {
    static FOUND: OnceLock<Option<PathBuf>> = OnceLock::new();
    FOUND
        .get_or_init(|| {
            let name = format!("cargo-nextest{}", std::env::consts::EXE_SUFFIX);
            subcommand_dirs()
                .into_iter()
                .map(|d| d.join(&name))
                .find(|p| is_executable(p))
        })
        .as_deref()
}

#[cfg(unix)]
fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(not(unix))]
fn is_executable(path: &Path) -> bool {
    path.is_file()
}

/// Whether a cargo alias named `nextest` may exist (`CARGO_ALIAS_NEXTEST`, or `[alias]` in
/// a cargo config file cargo would read from here), which cargo would run instead of
/// cargo-nextest. A config file that names nextest but is no valid TOML counts as one. Read
/// once: the run starts nextest, and may list its tests after.
fn nextest_aliased() -> bool {
    static ALIASED: OnceLock<bool> = OnceLock::new();
    *ALIASED.get_or_init(alias_defined)
}

fn alias_defined() -> bool {
    if std::env::var_os("CARGO_ALIAS_NEXTEST").is_some() {
        return true;
    }
    let cwd = std::env::current_dir().unwrap_or_default();
    let dirs = cwd
        .ancestors()
        .map(|d| d.join(".cargo"))
        .chain(cargo_home());
    dirs.flat_map(|d| [d.join("config.toml"), d.join("config")])
        .filter_map(|file| std::fs::read_to_string(file).ok())
        .filter(|text| text.contains("nextest"))
        .any(|text| match toml::from_str::<toml::Table>(&text) {
            Ok(config) => config.get("alias").and_then(|a| a.get("nextest")).is_some(),
            Err(_) => true,
        })
}

fn check_version(out: &std::process::Output) -> Result<()> {
    let install = "install it with: cargo install --locked cargo-nextest (see https://nexte.st/docs/installation)";
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || !text.starts_with("cargo-nextest") {
        return Err(Error::Precondition(format!(
            "cargo-nextest is not installed; {install}"
        )));
    }
    let version = text.split_whitespace().nth(1).unwrap_or("");
    let parts: Vec<u64> = version
        .split(['.', '-'])
        .take(3)
        .filter_map(|p| p.parse().ok())
        .collect();
    if parts.len() == 3 && (parts[0], parts[1], parts[2]) < MIN_NEXTEST {
        return Err(Error::Precondition(format!(
            "cargo-nextest {version} is too old: cargo llmreplay needs 0.9.116 or newer; {install}"
        )));
    }
    Ok(())
}

/// The cargo that runs us, for `cargo nextest` calls.
pub fn cargo() -> std::ffi::OsString {
    std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    fn cargo_says(dir: &Path) -> PathBuf {
        let out = Command::new(cargo())
            .args(["locate-project", "--workspace", "--message-format", "plain"])
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
            .parent()
            .unwrap()
            .to_path_buf()
    }

    /// Every layout where the fast answer is given must agree with cargo's own.
    #[test]
    fn agrees_with_cargo_locate_project() {
        let tmp = tempfile::tempdir().unwrap();
        let t = tmp.path().canonicalize().unwrap();
        let pkg = |name: &str| format!("[package]\nname = \"{name}\"\nversion = \"0.1.0\"\n");
        write(
            &t,
            "ws/Cargo.toml",
            "[workspace]\nmembers = [\"crates/*\"]\nexclude = [\"crates/out\"]\n",
        );
        write(&t, "ws/crates/a/Cargo.toml", &pkg("a"));
        write(&t, "ws/crates/a/src/lib.rs", "");
        write(&t, "ws/crates/out/Cargo.toml", &pkg("out"));
        write(&t, "ws/crates/out/src/lib.rs", "");
        write(&t, "alone/Cargo.toml", &pkg("alone"));
        write(&t, "alone/src/lib.rs", "");
        write(
            &t,
            "rooted/Cargo.toml",
            &format!("{}\n[workspace]\n", pkg("rooted")),
        );
        write(&t, "rooted/src/lib.rs", "");
        for dir in [
            "ws",
            "ws/crates/a/src",
            "ws/crates/out",
            "alone/src",
            "rooted",
        ] {
            let dir = t.join(dir);
            let fast = root_from_manifests(&dir).expect("a layout cargo leaves no doubt about");
            assert_eq!(fast, cargo_says(&dir), "in {}", dir.display());
        }
        // A member only by being a path dependency: cargo decides.
        write(
            &t,
            "dep/Cargo.toml",
            &format!(
                "{}\n[workspace]\n[dependencies]\nd = {{ path = \"d\" }}\n",
                pkg("top")
            ),
        );
        write(&t, "dep/d/Cargo.toml", &pkg("d"));
        assert_eq!(root_from_manifests(&t.join("dep/d")), None);
    }
}
