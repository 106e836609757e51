//! `cargo llmreplay init` in a Rust crate: the files it writes, what it keeps, and the commands
//! it prints, pasted into a shell (the Python and Node projects are `.ci/packages.py`'s, with
//! the packages installed as users install them).

use crate::support::{binary, upstream_args, FakeProvider, Output, Sample};
use std::path::Path;

/// The commands after `next:`, without their comments.
fn next_commands(said: &str) -> Vec<String> {
    said.lines()
        .skip_while(|l| *l != "next:")
        .skip(1)
        .map(|l| l.split("  # ").next().unwrap().trim().to_string())
        .collect()
}

/// `line` in a shell in `dir`, as pasted, with the built binary on PATH for cargo to find.
fn paste(sample: &Sample, line: &str) -> Output {
    let bin = binary().parent().unwrap().to_path_buf();
    let path = std::env::join_paths(
        std::iter::once(bin).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap())),
    )
    .unwrap();
    Output::of(sample.command("sh").args(["-c", line]).env("PATH", path))
}

/// In a crate with no set-up: a config that parses, the gate, `.gitattributes`; the printed
/// commands record (from a stand-in provider) and then replay offline under CI; a second
/// `init` keeps every file, and `--force` says what it replaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_sets_a_crate_up_and_its_printed_commands_record_and_replay() {
    let sample = Sample::new();
    sample.own_build("0.1.0-init");
    std::fs::remove_file(sample.root.join("tests/chat.rs")).unwrap();
    sample.add_test("hello.rs");
    let init = sample.llmreplay(&["init"]);
    assert_eq!(init.code, Some(0), "{}", init.stderr);
    assert!(init.stderr.contains(": a Rust crate\n"), "{}", init.stderr);
    let gate =
        std::fs::read_to_string(sample.root.join(".github/workflows/llmreplay.yml")).unwrap();
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("init/gate-rust.yml");
    assert_eq!(gate, std::fs::read_to_string(shipped).unwrap());
    let attributes = std::fs::read_to_string(sample.root.join(".gitattributes")).unwrap();
    assert!(
        attributes.lines().any(|l| l == "tests/cassettes/** -text"),
        "{attributes}"
    );
    assert!(sample.root.join("llmreplay.toml").is_file());

    let next = next_commands(&init.stderr);
    assert_eq!(
        next,
        [
            "cargo llmreplay test --record-missing",
            "cargo llmreplay test",
            "git add llmreplay.toml .github/workflows/llmreplay.yml .gitattributes tests/cassettes",
        ],
        "{}",
        init.stderr
    );
    let fake = FakeProvider::start().await;
    // The stand-in provider's address: the one thing added to the pasted command.
    let record = format!("{} {}", next[0], upstream_args(&fake).join(" "));
    let recorded = paste(&sample, &record);
    assert_eq!(recorded.code, Some(0), "{}", recorded.stderr);
    assert_eq!(fake.received().len(), 2, "{}", recorded.stderr);
    for test in ["says_hello", "asks_claude"] {
        let id = cassettes::TestId::new(format!("sample::hello${test}"));
        let slug = cassettes::Slug::from_test_id(&id);
        let folder = sample.root.join("tests/cassettes").join(slug.as_str());
        assert!(folder.is_dir(), "{test}: {}", recorded.stderr);
    }
    let replayed = paste(&sample, &format!("CI=true {}", next[1]));
    assert_eq!(replayed.code, Some(0), "{}", replayed.stderr);
    assert_eq!(fake.received().len(), 2, "the replay called the provider");
    let added = paste(&sample, &next[2]);
    assert_eq!(added.code, Some(0), "{}", added.stderr);

    // Again: nothing is overwritten, and .gitattributes gets its line once.
    std::fs::write(sample.root.join("llmreplay.toml"), "# mine\n").unwrap();
    let again = sample.llmreplay(&["init"]);
    assert_eq!(again.code, Some(0), "{}", again.stderr);
    assert!(
        again.stderr.contains("kept     llmreplay.toml: it exists"),
        "{}",
        again.stderr
    );
    assert_eq!(
        std::fs::read_to_string(sample.root.join("llmreplay.toml")).unwrap(),
        "# mine\n"
    );
    assert_eq!(
        std::fs::read_to_string(sample.root.join(".gitattributes")).unwrap(),
        attributes
    );
    let forced = sample.llmreplay(&["init", "--force"]);
    assert!(
        forced.stderr.contains("replaced llmreplay.toml"),
        "{}",
        forced.stderr
    );
}

/// A folder that is two kinds of project, or none, is asked about before anything is written.
#[test]
fn init_asks_which_project_when_the_folder_does_not_say() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let mut cmd = std::process::Command::new(binary());
        cmd.current_dir(dir.path())
            .arg("llmreplay")
            .arg("init")
            .args(args);
        Output::of(&mut cmd)
    };
    let none = run(&[]);
    assert_eq!(none.code, Some(2), "{}", none.stderr);
    assert!(
        none.stderr.contains("--for rust|python|node"),
        "{}",
        none.stderr
    );
    std::fs::write(dir.path().join("package.json"), "{}").unwrap();
    std::fs::write(dir.path().join("requirements.txt"), "openai\n").unwrap();
    let two = run(&[]);
    assert_eq!(two.code, Some(2), "{}", two.stderr);
    assert!(
        two.stderr.contains("a Python project and a Node project"),
        "{}",
        two.stderr
    );
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        2,
        "nothing written"
    );
    let chosen = run(&["--for", "python"]);
    assert_eq!(chosen.code, Some(0), "{}", chosen.stderr);
    let gate = std::fs::read_to_string(dir.path().join(".github/workflows/llmreplay.yml")).unwrap();
    assert!(
        gate.contains("python -m pip install -r requirements.txt"),
        "{gate}"
    );
}

/// The sharded gate's steps, as written in it, on one crate: one nextest archive, two
/// partitions replayed from it, each with its report, then the merge, which alone judges a
/// cassette folder no test uses. `init --sharded` writes that gate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sharded_gate_replays_two_partitions_of_one_archive_and_merges_them() {
    let sample = Sample::new();
    sample.own_build("0.1.0-shards");
    std::fs::remove_file(sample.root.join("tests/chat.rs")).unwrap();
    sample.add_test("hello.rs");
    let init = sample.llmreplay(&["init", "--sharded"]);
    assert_eq!(init.code, Some(0), "{}", init.stderr);
    let gate =
        std::fs::read_to_string(sample.root.join(".github/workflows/llmreplay.yml")).unwrap();
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("init/gate-rust-sharded.yml");
    assert_eq!(gate, std::fs::read_to_string(shipped).unwrap());
    let fake = FakeProvider::start().await;
    let mut record = vec!["--record".to_string()];
    record.extend(upstream_args(&fake));
    let record: Vec<&str> = record.iter().map(String::as_str).collect();
    let recorded = sample.run(&record, &[]);
    assert_eq!(recorded.code, Some(0), "{}", recorded.stderr);

    // The gate's commands, from the gate.
    let lines: Vec<&str> = gate.lines().map(str::trim).collect();
    let archive = lines
        .iter()
        .find_map(|l| l.strip_prefix("- run: cargo nextest archive"))
        .map(|rest| format!("cargo nextest archive{rest}"))
        .expect("an archive step");
    let folded = lines
        .iter()
        .position(|l| *l == "- run: >-")
        .expect("the partition's test step");
    let test = lines[folded + 1..]
        .iter()
        .take_while(|l| !l.starts_with("- "))
        .copied()
        .collect::<Vec<_>>()
        .join(" ");
    let merge = lines
        .iter()
        .find_map(|l| l.strip_prefix("- run: cargo llmreplay report merge"))
        .map(|rest| format!("cargo llmreplay report merge{rest}"))
        .expect("a merge step");
    assert!(
        test.contains("--partition hash:${{ matrix.partition }}/2"),
        "{test}"
    );

    let archived = paste(&sample, &archive);
    assert_eq!(archived.code, Some(0), "{}", archived.stderr);
    let mut replayed = 0;
    for k in ["1", "2"] {
        let line = format!("CI=true {}", test.replace("${{ matrix.partition }}", k));
        let part = paste(&sample, &line);
        assert_eq!(part.code, Some(0), "partition {k}: {}", part.stderr);
        let report = crate::support::read_json(&sample.root.join(format!("llmreplay-{k}.json")));
        assert_eq!(
            report["scope"]["partition"],
            format!("hash:{k}/2"),
            "{report}"
        );
        replayed += report["counts"]["hits"].as_u64().unwrap();
    }
    assert_eq!(replayed, 2, "each test replayed in one partition");
    let merged = paste(&sample, &merge);
    assert_eq!(merged.code, Some(0), "{}", merged.stderr);
    let report = crate::support::read_json(&sample.root.join("llmreplay.json"));
    assert_eq!(report["counts"]["hits"], 2, "{report}");

    // A folder of no test: no partition can judge it; the merge fails on it.
    let orphan = sample.root.join("tests/cassettes/sample--hello--gone");
    std::fs::create_dir_all(&orphan).unwrap();
    std::fs::copy(
        std::fs::read_dir(sample.root.join("tests/cassettes"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p != &orphan)
            .unwrap()
            .join("openai.json"),
        orphan.join("openai.json"),
    )
    .ok();
    for k in ["1", "2"] {
        let line = format!("CI=true {}", test.replace("${{ matrix.partition }}", k));
        assert_eq!(paste(&sample, &line).code, Some(0), "partition {k}");
    }
    let merged = paste(&sample, &merge);
    assert_ne!(merged.code, Some(0), "{}", merged.stderr);
    assert!(
        merged.stderr.contains("sample--hello--gone"),
        "{}",
        merged.stderr
    );
}

/// A file or folder init would write that is a symbolic link is not followed (it could point
/// anywhere); a cassette folder with a space is quoted for git and for the shell, and one
/// outside the project gets no line; a workspace member's `git add` runs at the workspace.
#[test]
fn init_follows_no_link_and_quotes_what_it_writes() {
    let dir = tempfile::tempdir().unwrap();
    let (project, outside) = (dir.path().join("p"), dir.path().join("outside"));
    std::fs::create_dir_all(&project).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(
        project.join("package.json"),
        r#"{"scripts":{"test":"node --test"}}"#,
    )
    .unwrap();
    std::fs::write(outside.join("attrs"), "mine\n").unwrap();
    std::os::unix::fs::symlink(outside.join("attrs"), project.join(".gitattributes")).unwrap();
    std::os::unix::fs::symlink(outside.join("config.toml"), project.join("llmreplay.toml"))
        .unwrap();
    std::os::unix::fs::symlink(&outside, project.join(".github")).unwrap();
    let run = |at: &Path, args: &[&str]| {
        let mut cmd = std::process::Command::new(binary());
        cmd.current_dir(at).arg("llmreplay").arg("init").args(args);
        Output::of(&mut cmd)
    };
    for args in [&[][..], &["--force"]] {
        let linked = run(&project, args);
        assert_eq!(linked.code, Some(0), "{}", linked.stderr);
        assert_eq!(
            linked
                .stderr
                .matches("a symbolic link, which init does not follow")
                .count(),
            3,
            "{}",
            linked.stderr
        );
        assert_eq!(
            std::fs::read_to_string(outside.join("attrs")).unwrap(),
            "mine\n"
        );
        assert!(!outside.join("config.toml").exists() && !outside.join("workflows").exists());
        // node:test is named, with its entry.
        assert!(
            linked.stderr.contains("--import cargo-llmreplay/node-test"),
            "{}",
            linked.stderr
        );
    }

    let spaced = dir.path().join("s");
    std::fs::create_dir_all(&spaced).unwrap();
    std::fs::write(spaced.join("requirements.txt"), "openai\n").unwrap();
    std::fs::write(
        spaced.join("llmreplay.toml"),
        "cassette_dir = \"my cassettes\"\n",
    )
    .unwrap();
    let said = run(&spaced, &[]);
    assert_eq!(said.code, Some(0), "{}", said.stderr);
    let attributes = std::fs::read_to_string(spaced.join(".gitattributes")).unwrap();
    assert!(
        attributes.lines().any(|l| l == "\"my cassettes/**\" -text"),
        "{attributes}"
    );
    assert!(
        said.stderr
            .contains("git add .github/workflows/llmreplay.yml .gitattributes 'my cassettes'"),
        "{}",
        said.stderr
    );
    std::fs::write(
        spaced.join("llmreplay.toml"),
        "cassette_dir = \"../elsewhere\"\n",
    )
    .unwrap();
    std::fs::remove_file(spaced.join(".gitattributes")).unwrap();
    let outside_dir = run(&spaced, &[]);
    assert!(
        outside_dir
            .stderr
            .contains("is not a folder inside the project"),
        "{}",
        outside_dir.stderr
    );
    assert!(!spaced.join(".gitattributes").exists());

    // A workspace member: the files go to the workspace's root, and `git add` says so.
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(ws.join("m1/src")).unwrap();
    std::fs::write(
        ws.join("Cargo.toml"),
        "[workspace]\nmembers = [\"m1\"]\nresolver = \"2\"\n",
    )
    .unwrap();
    std::fs::write(
        ws.join("m1/Cargo.toml"),
        "[package]\nname = \"m1\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    )
    .unwrap();
    std::fs::write(ws.join("m1/src/lib.rs"), "").unwrap();
    let member = run(&ws.join("m1"), &[]);
    assert_eq!(member.code, Some(0), "{}", member.stderr);
    assert!(ws.join("llmreplay.toml").is_file());
    assert!(
        member
            .stderr
            .contains(&format!("git -C {} add llmreplay.toml", ws.display())),
        "{}",
        member.stderr
    );
}
