//! `cargo llmreplay init`: sets a project up for recording. It finds whether the project is a
//! Rust crate, a Python or a Node project, writes a commented `llmreplay.toml`, a
//! `.gitattributes` line that keeps cassette bytes as recorded, and that ecosystem's CI gate,
//! then says the next commands. A file that is there already is kept, and said so.

use crate::error::{Error, Outcome, Result};
use crate::render::{stderr, term};
use clap::{Args, ValueEnum};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The commented settings file, in the cassette folder's default place.
const CONFIG: &str = include_str!("../init/llmreplay.toml");
/// The gates, as `.ci/run` lints them and the book shows them.
const GATE_RUST: &str = include_str!("../init/gate-rust.yml");
const GATE_RUST_SHARDED: &str = include_str!("../init/gate-rust-sharded.yml");
const GATE_PYTHON: &str = include_str!("../init/gate-python.yml");
const GATE_NODE: &str = include_str!("../init/gate-node.yml");

/// Where the gate goes: GitHub reads workflows only there.
const GATE_PATH: &str = ".github/workflows/llmreplay.yml";

#[derive(Args)]
#[command(
    about = "Set a project up: llmreplay.toml, .gitattributes, a CI gate, and the next commands",
    long_about = "Set a project up for recording.\n\n\
        Finds whether the project is a Rust crate (Cargo.toml), a Python project (pyproject.toml, \
        setup.py, setup.cfg, requirements.txt, pytest.ini or tox.ini) or a Node project \
        (package.json), then writes a commented llmreplay.toml, a .gitattributes line that keeps \
        cassette bytes from line-ending conversion, and that ecosystem's CI gate \
        (.github/workflows/llmreplay.yml), and prints the commands to record, replay and commit. \
        A file that exists is kept and said so (--force overwrites it, and says so too); \
        .gitattributes gets its line added once.",
    after_help = "Examples:\n  cargo llmreplay init\n  \
        cargo llmreplay init --for python     # a folder that is more than one kind of project"
)]
pub struct InitArgs {
    /// The kind of project, when its files say none, or more than one
    #[arg(long = "for", value_enum, value_name = "KIND")]
    kind: Option<Kind>,
    /// Overwrite llmreplay.toml and the CI gate if they exist (each is named as it is)
    #[arg(long)]
    force: bool,
    /// A Rust crate's gate in partitions: one nextest archive, replayed in 2 partitions whose
    /// reports are merged
    #[arg(long)]
    sharded: bool,
}

/// The kinds of project `init` knows, by the files that mark them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Kind {
    Rust,
    Python,
    Node,
}

impl Kind {
    fn markers(self) -> &'static [&'static str] {
        match self {
            Kind::Rust => &["Cargo.toml"],
            Kind::Python => &[
                "pyproject.toml",
                "setup.py",
                "setup.cfg",
                "requirements.txt",
                "pytest.ini",
                "tox.ini",
            ],
            Kind::Node => &["package.json"],
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Rust => "a Rust crate",
            Kind::Python => "a Python project",
            Kind::Node => "a Node project",
        }
    }
}

pub fn run(args: InitArgs) -> Result<Outcome> {
    let here =
        std::env::current_dir().map_err(|e| Error::io("cannot read the current directory", e))?;
    let (kind, root) = project(&here, args.kind)?;
    if args.sharded && kind != Kind::Rust {
        return Err(Error::Usage(format!(
            "--sharded is for a Rust crate's gate (nextest partitions); {} runs its suite in one job",
            kind.name()
        )));
    }
    let mut facts = Facts::read(kind, &root);
    facts.sharded = args.sharded;
    // Said line by line as it is done: a step that fails leaves the ones before it said.
    let say = |line: String| stderr(&format!("{line}\n"));
    say(format!(
        "{}: {}",
        term(&root.display().to_string()),
        kind.name()
    ));
    let mut written = Vec::new();
    for (rel, text) in [
        (daemon::CONFIG_FILE.to_string(), CONFIG.to_string()),
        (GATE_PATH.to_string(), facts.gate()),
    ] {
        match write_file(&root, &rel, &text, args.force)? {
            Written::Kept(why) => say(format!("  kept     {rel}: {why}")),
            Written::New => {
                say(format!("  wrote    {rel}"));
                written.push(rel);
            }
            Written::Replaced => {
                say(format!("  replaced {rel}"));
                written.push(rel);
            }
        }
    }
    let cassettes = cassette_dir(&root);
    match &cassettes {
        Ok(dir) => {
            let (line, changed) = attributes(&root, dir)?;
            if changed {
                written.push(".gitattributes".into());
            }
            say(format!("  {line}"));
        }
        Err(why) => say(format!("  kept     .gitattributes: {why}")),
    }
    if let Some(note) = outside_repository_root(&root) {
        say(format!("  note: {note}"));
    }
    for note in facts.notes() {
        say(format!("  note: {note}"));
    }
    let mut next = facts.next_commands();
    if let Ok(dir) = &cassettes {
        written.push(dir.clone());
    }
    if !written.is_empty() {
        // From where the user is: a workspace member's root is the workspace's.
        let at = match here.strip_prefix(&root) {
            Ok(rel) if rel.as_os_str().is_empty() => String::new(),
            _ => format!(
                "-C {} ",
                cassettes::shell_quote(&root.display().to_string())
            ),
        };
        let paths: Vec<String> = written
            .iter()
            .map(|p| cassettes::shell_quote(p).into_owned())
            .collect();
        next.push((
            format!("git {at}add {}", paths.join(" ")),
            "the recordings are kept in git, beside the tests",
        ));
    }
    let width = next.iter().map(|(c, _)| c.len()).max().unwrap_or(0);
    let mut said = String::from("next:\n");
    for (command, why) in next {
        let _ = writeln!(said, "  {command:<width$}  # {why}");
    }
    stderr(&said);
    Ok(Outcome::Success)
}

/// What became of a file init writes.
enum Written {
    New,
    Replaced,
    /// Left as it was, and why.
    Kept(String),
}

/// Writes `rel` under `root`, never through a symbolic link (a link could point anywhere), never
/// over a file unless `force`; a new file is created only if it is still absent.
fn write_file(root: &Path, rel: &str, text: &str, force: bool) -> Result<Written> {
    let path = root.join(rel);
    // Every folder on the way, and the file, must be what they seem: no link out of the project.
    let mut at = root.to_path_buf();
    for part in Path::new(rel).components() {
        at.push(part);
        if std::fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_symlink()) {
            return Ok(Written::Kept(format!(
                "{} is a symbolic link, which init does not follow; write the file yourself if it is meant",
                term(&at.strip_prefix(root).unwrap_or(&at).display().to_string())
            )));
        }
    }
    let existed = match std::fs::symlink_metadata(&path) {
        Ok(m) if m.is_dir() => return Ok(Written::Kept("a folder of that name is there".into())),
        Ok(_) => true,
        Err(_) => false,
    };
    if existed && !force {
        return Ok(Written::Kept(
            "it exists (--force overwrites it; compare it with what init writes first)".into(),
        ));
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))?;
    }
    if existed {
        std::fs::write(&path, text)
            .map_err(|e| Error::io(format!("cannot write {}", path.display()), e))?;
        return Ok(Written::Replaced);
    }
    use std::io::Write as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| Error::io(format!("cannot create {}", path.display()), e))?;
    file.write_all(text.as_bytes())
        .map_err(|e| Error::io(format!("cannot write {}", path.display()), e))?;
    Ok(Written::New)
}

/// The project in `here` (or, for a Rust crate, its workspace's root) and its kind.
fn project(here: &Path, asked: Option<Kind>) -> Result<(Kind, PathBuf)> {
    let found: Vec<Kind> = [Kind::Rust, Kind::Python, Kind::Node]
        .into_iter()
        .filter(|k| k.markers().iter().any(|m| here.join(m).is_file()))
        .collect();
    let kind = match (asked, found.as_slice()) {
        (Some(kind), _) => kind,
        (None, [kind]) => *kind,
        (None, []) => {
            return Err(Error::Precondition(format!(
                "{} holds no Cargo.toml, pyproject.toml, setup.py, requirements.txt or \
                 package.json: run init in your project's folder, or say which kind it is \
                 with --for rust|python|node",
                term(&here.display().to_string())
            )))
        }
        (None, many) => {
            let names: Vec<&str> = many.iter().map(|k| k.name()).collect();
            return Err(Error::Usage(format!(
                "{} is {}: say which one's tests call LLM APIs with --for rust|python|node",
                term(&here.display().to_string()),
                names.join(" and ")
            )));
        }
    };
    let root = match kind {
        Kind::Rust => crate::locate::workspace_root()?,
        Kind::Python | Kind::Node => here.to_path_buf(),
    };
    Ok((kind, root))
}

/// The cassette folder the project's settings name (an llmreplay.toml kept from before may
/// name another), relative to its root, with `/` as git writes paths; or why no
/// `.gitattributes` line is written for it (a folder outside the project, or a name a line
/// cannot hold).
fn cassette_dir(root: &Path) -> std::result::Result<String, String> {
    let named = std::fs::read_to_string(root.join(daemon::CONFIG_FILE))
        .ok()
        .and_then(|t| t.parse::<toml::Table>().ok())
        .and_then(|t| t.get("cassette_dir")?.as_str().map(str::to_string));
    let Some(named) = named else {
        return Ok("tests/cassettes".into());
    };
    let dir = named.replace('\\', "/");
    let dir = dir.trim_start_matches("./").trim_end_matches('/');
    let outside = dir.is_empty()
        || dir == "."
        || Path::new(dir).is_absolute()
        || dir.starts_with('/')
        || dir.get(1..3) == Some(":/")
        || dir.split('/').any(|part| part == "..");
    if outside {
        return Err(format!(
            "cassette_dir = {} in llmreplay.toml is not a folder inside the project, so no line is added for it",
            term(&format!("{named:?}"))
        ));
    }
    if dir.chars().any(|c| c.is_control() || c == '"' || c == '\\') {
        return Err(format!(
            "cassette_dir = {} holds a character a .gitattributes line cannot hold; add `<dir>/** -text` yourself",
            term(&format!("{named:?}"))
        ));
    }
    Ok(dir.to_string())
}

/// Adds the line that keeps cassettes from line-ending conversion (they are compared byte for
/// byte), once; says what it did, and whether it changed the file.
fn attributes(root: &Path, cassette_dir: &str) -> Result<(String, bool)> {
    // git reads a pattern with spaces or a `#` only when quoted.
    let pattern = format!("{cassette_dir}/**");
    let line = if pattern.contains([' ', '#', '\t']) {
        format!("\"{pattern}\" -text")
    } else {
        format!("{pattern} -text")
    };
    let line = line.as_str();
    let path = root.join(".gitattributes");
    if std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink()) {
        let said = format!(
            ".gitattributes is a symbolic link, which init does not follow: add the line `{line}` yourself"
        );
        return Ok((said, false));
    }
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(Error::io(format!("cannot read {}", path.display()), e)),
    };
    if text.lines().any(|l| l.trim() == line) {
        let said = ".gitattributes already keeps cassette bytes as recorded".to_string();
        return Ok((said, false));
    }
    // The file's own line endings.
    let eol = if text.contains("\r\n") { "\r\n" } else { "\n" };
    let mut added = text.clone();
    if !added.is_empty() && !added.ends_with('\n') {
        added.push_str(eol);
    }
    added.push_str("# Cassettes are replayed byte for byte: no line-ending conversion.");
    added.push_str(eol);
    added.push_str(line);
    added.push_str(eol);
    std::fs::write(&path, added)
        .map_err(|e| Error::io(format!("cannot write {}", path.display()), e))?;
    let said = if text.is_empty() {
        format!("wrote    .gitattributes ({line})")
    } else {
        format!("added    `{line}` to .gitattributes")
    };
    Ok((said, true))
}

/// GitHub reads workflows only at the repository's root: a project in a subfolder says so.
fn outside_repository_root(root: &Path) -> Option<String> {
    let repo = root.ancestors().find(|d| d.join(".git").exists())?;
    (repo != root).then(|| {
        format!(
            "GitHub reads workflows only at the repository's root: move {GATE_PATH} to {}, set its run steps' working-directory to {sub}, and begin the artifact paths with {sub}/ (upload-artifact reads from the root)",
            term(&repo.join(GATE_PATH).display().to_string()),
            sub = term(&root.strip_prefix(repo).unwrap_or(root).display().to_string())
        )
    })
}

/// What the project's files say about how its tests run.
struct Facts {
    kind: Kind,
    /// Python: how the project's own dependencies install.
    python_install: Option<&'static str>,
    /// Node: the test command, and which setup entry files each test's calls under it.
    node_runner: NodeRunner,
    /// Node: whether package.json lists cargo-llmreplay already.
    node_has_package: bool,
    /// Node: whether package.json has a `test` script (`npm test` needs one).
    node_test_script: bool,
    /// Node: the lock file is not npm's (`npm ci` in the gate needs package-lock.json).
    node_other_lock: Option<&'static str>,
    /// Rust: the gate in partitions of one archive.
    sharded: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum NodeRunner {
    Vitest,
    Jest,
    /// `node --test` in the test script.
    NodeTest,
    Other,
}

impl Facts {
    fn read(kind: Kind, root: &Path) -> Facts {
        let python_install = if root.join("requirements.txt").is_file() {
            Some("python -m pip install -r requirements.txt")
        } else if root.join("setup.py").is_file() || has_project_table(root) {
            Some("python -m pip install -e .")
        } else {
            None
        };
        let package: serde_json::Value = std::fs::read_to_string(root.join("package.json"))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default();
        let depends = |name: &str| {
            ["dependencies", "devDependencies"]
                .iter()
                .any(|d| package.get(d).and_then(|m| m.get(name)).is_some())
        };
        let script = package
            .get("scripts")
            .and_then(|s| s.get("test"))
            .and_then(|t| t.as_str())
            .unwrap_or_default()
            .to_string();
        // The test script says which runner when the dependencies name more than one.
        let node_runner = if script.contains("node --test") {
            NodeRunner::NodeTest
        } else if script.contains("jest") && depends("jest") {
            NodeRunner::Jest
        } else if depends("vitest") {
            NodeRunner::Vitest
        } else if depends("jest") {
            NodeRunner::Jest
        } else {
            NodeRunner::Other
        };
        Facts {
            kind,
            python_install,
            node_runner,
            node_has_package: depends("cargo-llmreplay"),
            node_test_script: !script.is_empty(),
            node_other_lock: [
                ("pnpm-lock.yaml", "pnpm"),
                ("yarn.lock", "yarn"),
                ("bun.lockb", "bun"),
                ("bun.lock", "bun"),
            ]
            .into_iter()
            .find(|(lock, _)| {
                root.join(lock).is_file() && !root.join("package-lock.json").is_file()
            })
            .map(|(_, tool)| tool),
            sharded: false,
        }
    }

    /// The test command, as the user types it.
    fn test_command(&self) -> &'static str {
        match (self.kind, self.node_runner) {
            (Kind::Rust, _) => "",
            (Kind::Python, _) => "python -m pytest",
            (Kind::Node, NodeRunner::Vitest) => "npx vitest run",
            (Kind::Node, NodeRunner::Jest) => "npx jest",
            (Kind::Node, NodeRunner::NodeTest | NodeRunner::Other) => "npm test",
        }
    }

    /// This program, as the user would start it in this project.
    fn program(&self) -> String {
        let program = crate::program().to_string();
        match self.kind {
            // Installed by npm: reached through npx outside npm's own scripts.
            Kind::Node if program == "cargo-llmreplay" => format!("npx {program}"),
            _ => program,
        }
    }

    fn gate(&self) -> String {
        match self.kind {
            Kind::Rust if self.sharded => GATE_RUST_SHARDED.to_string(),
            Kind::Rust => GATE_RUST.to_string(),
            Kind::Python => {
                let install = match self.python_install {
                    Some(install) => format!("      - run: {install}\n"),
                    None => String::new(),
                };
                GATE_PYTHON.replace("      - run: python -m pip install -e .\n", &install)
            }
            Kind::Node => {
                GATE_NODE.replace("-- npx vitest run", &format!("-- {}", self.test_command()))
            }
        }
    }

    fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        match (self.kind, self.node_runner) {
            (Kind::Python, _) => {
                notes.push(
                    "each test's calls are filed under its node id by the pytest plugin, which \
                     `pip install cargo-llmreplay` installs (with the command)"
                        .into(),
                );
                if self.python_install.is_none() {
                    notes.push(format!(
                        "no requirements.txt, setup.py or [project] table says how the project \
                         installs: add its install step to {GATE_PATH}"
                    ));
                }
            }
            (Kind::Node, NodeRunner::Vitest) => notes.push(
                "each test's calls are filed under it by the setup file: add \
                 setupFiles: [\"cargo-llmreplay/vitest\"] to the test section of your vitest config"
                    .into(),
            ),
            (Kind::Node, NodeRunner::Jest) => notes.push(
                "each test's calls are filed under it by the setup file: add \
                 setupFilesAfterEnv: [\"cargo-llmreplay/jest\"] to your jest config"
                    .into(),
            ),
            (Kind::Node, NodeRunner::NodeTest) => notes.push(
                "each test's calls are filed under it by the node:test entry: run it with the \
                 tests, `node --test --import cargo-llmreplay/node-test`, in your test script"
                    .into(),
            ),
            (Kind::Node, NodeRunner::Other) => notes.push(
                "with no vitest, jest or node --test in package.json, each process is one test; \
                 vitest, jest and node:test have setup entries that file each test's calls under it"
                    .into(),
            ),
            _ => {}
        }
        if self.kind == Kind::Node && self.test_command() == "npm test" && !self.node_test_script {
            notes.push(
                "package.json has no \"test\" script, which `npm test` runs: add one, or put your \
                 test command after `--` in the commands below and in the gate"
                    .into(),
            );
        }
        if let (Kind::Node, Some(tool)) = (self.kind, self.node_other_lock) {
            notes.push(format!(
                "the project's lock file is {tool}'s, and the gate installs with `npm ci`, which \
                 needs package-lock.json: change its install step to {tool}'s"
            ));
        }
        notes
    }

    /// Record once, replay offline: each with why.
    fn next_commands(&self) -> Vec<(String, &'static str)> {
        let program = self.program();
        let mut commands = Vec::new();
        if self.kind == Kind::Node && !self.node_has_package {
            commands.push((
                "npm install --save-dev cargo-llmreplay".to_string(),
                "the command and its setup files, prebuilt",
            ));
        }
        let (record, replay) = match self.kind {
            Kind::Rust => (
                format!("{program} test --record-missing"),
                format!("{program} test"),
            ),
            _ => (
                format!("{program} run --record-missing -- {}", self.test_command()),
                format!("{program} run -- {}", self.test_command()),
            ),
        };
        commands.push((record, "once, with your API keys: records every call"));
        commands.push((replay, "offline, no keys: fails on a missing recording"));
        commands
    }
}

/// A pyproject.toml that says how the project installs (a `[project]` table).
fn has_project_table(root: &Path) -> bool {
    std::fs::read_to_string(root.join("pyproject.toml"))
        .ok()
        .and_then(|t| t.parse::<toml::Table>().ok())
        .is_some_and(|t| t.contains_key("project"))
}
