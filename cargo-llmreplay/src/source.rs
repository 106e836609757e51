//! Where a test is written: the `file:line` of its `fn` in the workspace's sources, shown beside
//! its changed answers (as cargo-insta's review shows `Source:`). Found by reading the sources,
//! not by asking cargo: the test's name, its module path and its binary's target narrow it.

use cassettes::TestId;
use regex::Regex;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Sources read past this many files are not searched: a workspace that large names its
/// tests' files in other ways.
const MAX_FILES: usize = 20_000;

/// The workspace's `.rs` files, read once and searched per test.
pub struct Sources {
    root: PathBuf,
    files: OnceLock<Vec<(PathBuf, String)>>,
}

impl Sources {
    /// The sources under `root` (the repository's work tree), read on first use.
    pub fn new(root: &Path) -> Sources {
        Sources {
            root: root.to_path_buf(),
            files: OnceLock::new(),
        }
    }

    /// `path:line` of the `fn` of a test nextest named, relative to the root; none when no
    /// source has it.
    pub fn of(&self, test: &TestId) -> Option<String> {
        let binary = test.binary()?;
        let mut path: Vec<&str> = test.name().split("::").collect();
        let name = path.pop()?;
        // `pkg::target` for an integration test or a binary, `pkg` for the library.
        let target = binary.split_once("::").map(|(_, t)| t);
        let fn_at = Regex::new(&format!(
            r"(?m)^[ \t]*(?:pub(?:\([^)]*\))?[ \t]+)?(?:async[ \t]+)?fn[ \t]+{}[ \t]*[<(]",
            regex::escape(name)
        ))
        .ok()?;
        let files = self.files.get_or_init(|| read_sources(&self.root));
        let mut best: Option<(usize, &Path, usize)> = None;
        for (file, text) in files {
            let Some(found) = fn_at.find(text) else {
                continue;
            };
            let rel = file.to_string_lossy();
            let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
            let mut score = 0;
            if target.is_some_and(|t| stem == t || rel.contains(&format!("/{t}/"))) {
                score += 4;
            }
            if target.is_none() && rel.contains("src/") {
                score += 2;
            }
            score += path
                .iter()
                .filter(|m| **m != "tests" && (stem == **m || rel.contains(&format!("/{m}/"))))
                .count();
            let line = text[..found.start()].matches('\n').count() + 1;
            if best.is_none_or(|(s, _, _)| score > s) {
                best = Some((score, file, line));
            }
        }
        best.map(|(_, file, line)| format!("{}:{line}", file.display()))
    }
}

/// Every `.rs` file under `root`, relative to it, skipping build output and hidden folders.
fn read_sources(root: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.filter_map(Result::ok) {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.') || name == "target" || name == "node_modules" {
                continue;
            }
            let path = entry.path();
            match entry.file_type() {
                Ok(t) if t.is_dir() => dirs.push(path),
                Ok(t) if t.is_file() && name.ends_with(".rs") => {
                    if out.len() >= MAX_FILES {
                        return out;
                    }
                    if let Ok(text) = std::fs::read_to_string(&path) {
                        let rel = path.strip_prefix(root).unwrap_or(&path).to_path_buf();
                        out.push((rel, text));
                    }
                }
                _ => {}
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_test_is_found_by_its_name_module_and_target() {
        let dir = tempfile::tempdir().unwrap();
        let write = |rel: &str, text: &str| {
            let p = dir.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        write("tests/chat.rs", "use x;\n\n#[test]\nfn greets() {}\n");
        write("tests/other.rs", "#[test]\nfn greets() {}\n");
        write(
            "src/lib.rs",
            "mod a {\n    #[tokio::test]\n    async fn greets() {}\n}\n",
        );
        write("target/debug/build/x.rs", "fn greets() {}\n");
        let sources = Sources::new(dir.path());
        let of = |id: &str| sources.of(&TestId::new(id));
        assert_eq!(of("pkg::chat$greets").as_deref(), Some("tests/chat.rs:4"));
        assert_eq!(of("pkg::other$greets").as_deref(), Some("tests/other.rs:2"));
        assert_eq!(of("pkg$a::greets").as_deref(), Some("src/lib.rs:3"));
        assert_eq!(of("pkg::chat$nowhere"), None);
        assert_eq!(of("not nextest's"), None);
    }
}
