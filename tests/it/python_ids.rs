//! Python tests told apart from inside each test's own context: async tests that
//! pytest-asyncio-cooperative runs side by side in one process, each through another client
//! (the header each request carries is all that tells them apart); a session fixture's calls
//! as its own test, replayed whichever test sets it up; `python -m unittest` with no plugin;
//! and the listed suite that judges a deleted test's folder.

use crate::runners::{answers, record_flags, run_keeping, succeeded, KEYS};
use crate::support::{read_json, sdk_python, FakeProvider, Output};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// A copy of `tests/sdk/<suite>` in its own temp dir, run with `cargo llmreplay run`.
struct Project {
    dir: tempfile::TempDir,
    python: PathBuf,
}

impl Project {
    fn new(suite: &str, module: &str) -> Option<Project> {
        let python = sdk_python(module)?;
        let dir = tempfile::tempdir().unwrap();
        let from = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/sdk")
            .join(suite);
        copy_tree(&from, dir.path());
        Some(Project { dir, python })
    }

    /// `cargo llmreplay run FLAGS -- python ARGS`; what the tests were answered lands in a
    /// fresh folder, returned with the output.
    fn python(&self, flags: &[&str], args: &[&str], env: &[(&str, &str)]) -> (Output, PathBuf) {
        let mut command: Vec<&OsStr> = vec![self.python.as_os_str()];
        command.extend(args.iter().map(OsStr::new));
        run_keeping(self.dir.path(), flags, &command, env)
    }

    fn pytest(&self, flags: &[&str], args: &[&str], env: &[(&str, &str)]) -> (Output, PathBuf) {
        let mut all = vec!["-m", "pytest", "-q", "-p", "no:cacheprovider"];
        all.extend(args);
        self.python(flags, &all, env)
    }

    fn folder(&self, test: &str) -> PathBuf {
        let slug = cassettes::Slug::from_test_id(&cassettes::TestId::new(test));
        self.dir.path().join("tests/cassettes").join(slug.as_str())
    }

    fn folders(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.dir.path().join("tests/cassettes"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// The prompts `test`'s OpenAI cassette holds, in order.
    fn prompts(&self, test: &str) -> Vec<String> {
        let file = self.folder(test).join("openai.json");
        assert!(file.is_file(), "{} has no cassette", test);
        crate::support::prompts(&read_json(&file))
    }

    fn report(&self) -> serde_json::Value {
        read_json(&self.dir.path().join("target/llmreplay/report.json"))
    }
}

fn copy_tree(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            if entry.file_name() == "__pycache__" {
                continue;
            }
            std::fs::create_dir_all(&target).unwrap();
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// Where .ci/run installs pytest-asyncio-cooperative apart from the venv: once installed it
/// takes over every pytest run's loop, xdist's workers included.
fn cooperative() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/sdk-venv/cooperative");
    if dir.join("pytest_asyncio_cooperative").is_dir() {
        return Some(dir);
    }
    let why = format!(
        "pytest-asyncio-cooperative is not in {}; install it with: target/sdk-venv/bin/pip install --no-deps --target target/sdk-venv/cooperative -r tests/sdk/requirements-cooperative.txt",
        dir.display()
    );
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{why}");
    }
    eprintln!("SKIPPED (not under CI): {why}");
    None
}

fn slugs(tests: &[&str]) -> Vec<String> {
    let mut names: Vec<String> = tests
        .iter()
        .map(|t| {
            cassettes::Slug::from_test_id(&cassettes::TestId::new(*t))
                .as_str()
                .to_string()
        })
        .collect();
    names.sort();
    names
}

fn strs(words: &[String]) -> Vec<&str> {
    words.iter().map(String::as_str).collect()
}

/// Four async tests in flight at once in one event loop, through the OpenAI SDK (httpx's
/// AsyncClient), aiohttp, requests on a ThreadPoolExecutor's thread and httpx's Client on
/// asyncio.to_thread: each test's two calls (and a function-scoped fixture's) land in its own
/// folder, in its own order, and replay identically three times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_tests_run_side_by_side_keep_their_own_calls_through_every_client() {
    let (Some(project), Some(cooperative)) =
        (Project::new("concurrent_suite", "aiohttp"), cooperative())
    else {
        return;
    };
    let cooperative = cooperative.to_str().unwrap();
    let tests = [
        ("test_together.py::test_sdk", "From the SDK"),
        ("test_together.py::test_aiohttp", "From aiohttp"),
        ("test_together.py::test_requests_in_a_pool", "From requests"),
        ("test_together.py::test_httpx_in_a_thread", "From httpx"),
    ];
    let mut fake = FakeProvider::start().await;
    // No answer until all four tests have a call in flight.
    *fake.state.gate.lock().unwrap() = Some(tests.len());
    // pytest-asyncio and the cooperative plugin refuse to run together.
    let plugins = ["-p", "no:asyncio"];
    let flags = record_flags(&fake);
    let mut env = KEYS.to_vec();
    env.push(("PYTHONPATH", cooperative));
    let (recorded, recorded_out) = project.pytest(&strs(&flags), &plugins, &env);
    succeeded(&recorded);
    assert_eq!(
        fake.state.peak.load(std::sync::atomic::Ordering::SeqCst),
        tests.len(),
        "the tests ran one at a time"
    );
    let ids: Vec<&str> = tests.iter().map(|(t, _)| *t).collect();
    assert_eq!(project.folders(), slugs(&ids), "{}", recorded.stderr);
    for (test, prompt) in tests {
        let mut expected = vec![format!("{prompt} 1"), format!("{prompt} 2")];
        if test.ends_with("test_sdk") {
            expected.insert(0, "Warm up the SDK".into());
        }
        assert_eq!(project.prompts(test), expected, "{test}");
    }
    assert_eq!(answers(&recorded_out).len(), 9);
    fake.stop();
    for _ in 0..3 {
        let env = [("CI", "true"), ("PYTHONPATH", cooperative)];
        let (replayed, replayed_out) = project.pytest(&[], &plugins, &env);
        succeeded(&replayed);
        assert_eq!(answers(&replayed_out), answers(&recorded_out));
        assert_eq!(
            project.report()["counts"]["hits"],
            9,
            "{}",
            project.report()
        );
    }
}

const FIXTURE: &str = "conftest.py::fixture:greeting";
const TEARDOWN: &str = "conftest.py::fixture:greeting:teardown";

/// The fixture suite recorded: four tests, the session fixture's folder, which holds its
/// setup's call, and its teardown's, which holds the teardown's.
async fn fixture_suite_recorded() -> Option<(Project, std::collections::BTreeMap<String, String>)> {
    let project = Project::new("fixture_suite", "xdist")?;
    let tests: Vec<String> = ["a", "b", "c", "d"]
        .iter()
        .map(|n| format!("test_users.py::test_user[{n}]"))
        .collect();
    let mut fake = FakeProvider::start().await;
    let flags = record_flags(&fake);
    let (recorded, recorded_out) = project.pytest(&strs(&flags), &[], KEYS);
    succeeded(&recorded);
    let mut ids = strs(&tests);
    ids.extend([FIXTURE, TEARDOWN]);
    assert_eq!(project.folders(), slugs(&ids), "{}", recorded.stderr);
    assert_eq!(project.prompts(FIXTURE), ["Set up the session"]);
    assert_eq!(project.prompts(TEARDOWN), ["Tear down the session"]);
    assert_eq!(project.prompts(&tests[0]), ["Test a"]);
    fake.stop();
    Some((project, answers(&recorded_out)))
}

/// A session fixture's calls are its own test's, set up and torn down: recorded with the
/// first test that uses it, they replay for a test chosen with `-k` that was not its first
/// user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_fixtures_calls_replay_for_whichever_test_sets_it_up() {
    let Some((project, _)) = fixture_suite_recorded().await else {
        return;
    };
    let (one, one_out) = project.pytest(&[], &["-k", "c"], &[("CI", "true")]);
    succeeded(&one);
    let answered = answers(&one_out);
    assert_eq!(
        answered.keys().collect::<Vec<_>>(),
        ["c.txt", "greeting-c.txt"]
    );
    assert_eq!(answered["greeting-c.txt"], "You said: Set up the session");
}

/// Under xdist each worker sets the session fixture up (and tears it down) in its own
/// process: they take turns, and each replays the fixture's calls from the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_fixture_set_up_by_every_xdist_worker_replays_in_each() {
    let Some((project, recorded)) = fixture_suite_recorded().await else {
        return;
    };
    let (replayed, replayed_out) = project.pytest(&[], &["-n", "4"], &[("CI", "true")]);
    succeeded(&replayed);
    assert_eq!(answers(&replayed_out), recorded);
}

/// The listed suite judges folders: a test deleted after recording leaves a folder that
/// `--deny unused` names, while the fixture's folder, listed with its tests, is no orphan.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_pytest_tests_folder_is_named_by_deny_unused() {
    let Some(project) = Project::new("fixture_suite", "pytest_llmreplay") else {
        return;
    };
    let mut fake = FakeProvider::start().await;
    let flags = record_flags(&fake);
    let (recorded, _) = project.pytest(&strs(&flags), &[], KEYS);
    succeeded(&recorded);
    fake.stop();
    let strict = ["--deny", "unused"];
    let (clean, _) = project.pytest(&strict, &[], &[("CI", "true")]);
    succeeded(&clean);
    let file = project.dir.path().join("test_users.py");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, text.replace(r#""c", "d""#, r#""c""#)).unwrap();
    let (orphaned, _) = project.pytest(&strict, &[], &[("CI", "true")]);
    assert_ne!(orphaned.code, Some(0), "{}", orphaned.stderr);
    let orphan = project.folder("test_users.py::test_user[d]");
    let name = orphan.file_name().unwrap().to_string_lossy().into_owned();
    assert!(orphaned.stderr.contains(&name), "{}", orphaned.stderr);
    let fixture = project.folder(FIXTURE);
    let fixture = fixture.file_name().unwrap().to_string_lossy();
    assert!(
        orphaned.stderr.contains("unused (1):") && !orphaned.stderr.contains(&*fixture),
        "the fixture's folder is listed with its tests: {}",
        orphaned.stderr
    );
    // The run listed its whole suite, so `prune` takes its report (its tests passed: the
    // gate alone failed it), and the gate then passes.
    let (passed, _) = project.pytest(&[], &[], &[("CI", "true")]);
    succeeded(&passed);
    let pruned = prune_in(project.dir.path());
    assert_eq!(pruned.code, Some(0), "{}", pruned.stderr);
    assert!(pruned.stderr.contains(&name), "{}", pruned.stderr);
    assert!(!orphan.exists());
    let (clean, _) = project.pytest(&strict, &[], &[("CI", "true")]);
    succeeded(&clean);
    // A run that selected tests is filtered: `prune` refuses it, saying why.
    let (filtered, _) = project.pytest(&[], &["-k", "a"], &[("CI", "true")]);
    succeeded(&filtered);
    let refused = prune_in(project.dir.path());
    assert_ne!(refused.code, Some(0), "{}", refused.stderr);
    assert!(
        refused.stderr.contains("comes from a filtered run"),
        "{}",
        refused.stderr
    );
}

/// `cargo llmreplay prune` in `dir`, whose report is under `dir/target`.
fn prune_in(dir: &Path) -> Output {
    Output::of(
        std::process::Command::new(crate::support::binary())
            .current_dir(dir)
            .args(["llmreplay", "prune"])
            .env("CARGO_TARGET_DIR", dir.join("target"))
            .env_remove("CI"),
    )
}

/// A way to run part of a suite: how, where pytest starts, its arguments, its environment.
type Partial<'a> = (&'a str, &'a Path, &'a [&'a str], &'a [(&'a str, &'a str)]);

/// A pytest run that leaves some of the suite uncollected while its command line names no
/// tests (a module that skips itself as it is imported, as `pytest.importorskip` does;
/// `--ignore`; no arguments from a folder below the rootdir) is filtered: `--deny unused`
/// names none of the folders of the tests it left out, and `prune` refuses its report
/// instead of deleting them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pytest_run_that_leaves_modules_uncollected_prunes_none_of_their_folders() {
    let Some(project) = Project::new("fixture_suite", "pytest_llmreplay") else {
        return;
    };
    let root = project.dir.path();
    // The rootdir (and the project's root) whichever folder pytest starts in.
    std::fs::write(root.join("pyproject.toml"), "[tool.pytest.ini_options]\n").unwrap();
    std::fs::write(
        root.join("test_optional.py"),
        "import os\nimport pytest\nif os.environ.get('NO_OPTIONAL'):\n    pytest.skip('its SDK is not installed', allow_module_level=True)\nfrom conftest import ask\n\n\ndef test_optional():\n    ask('Optional')\n",
    )
    .unwrap();
    std::fs::create_dir(root.join("sub")).unwrap();
    std::fs::write(
        root.join("sub/test_sub.py"),
        "from conftest import ask\n\n\ndef test_sub():\n    ask('Sub')\n",
    )
    .unwrap();
    let mut fake = FakeProvider::start().await;
    let flags = record_flags(&fake);
    let (recorded, _) = project.pytest(&strs(&flags), &[], KEYS);
    succeeded(&recorded);
    fake.stop();
    let kept = [
        project.folder("test_optional.py::test_optional"),
        project.folder("sub/test_sub.py::test_sub"),
        project.folder("test_users.py::test_user[a]"),
    ];
    for folder in &kept {
        assert!(
            folder.is_dir(),
            "{} recorded: {}",
            folder.display(),
            recorded.stderr
        );
    }
    let strict = ["--deny", "unused"];
    let replay = [("CI", "true")];
    let skipped = [("CI", "true"), ("NO_OPTIONAL", "1")];
    let sub = root.join("sub");
    // How, where pytest starts, its arguments, and the environment.
    let partial: [Partial; 3] = [
        ("a module skipped at import", root, &[], &skipped),
        ("--ignore", root, &["--ignore", "sub"], &replay),
        (
            "no arguments from a folder below the rootdir",
            &sub,
            &[],
            &replay,
        ),
    ];
    for (how, at, args, env) in partial {
        let mut command: Vec<&OsStr> = vec![project.python.as_os_str()];
        command.extend(["-m", "pytest", "-q", "-p", "no:cacheprovider"].map(OsStr::new));
        command.extend(args.iter().map(OsStr::new));
        let (out, _) = run_keeping(at, &strict, &command, env);
        assert_eq!(out.code, Some(0), "{how}: {}", out.stderr);
        assert!(!out.stderr.contains("unused ("), "{how}: {}", out.stderr);
        let refused = prune_in(at);
        assert!(
            refused.stderr.contains("comes from a filtered run"),
            "{how}: {}",
            refused.stderr
        );
        for folder in &kept {
            assert!(folder.is_dir(), "{how} pruned {}", folder.display());
        }
    }
    // The whole suite, from the rootdir, is judged.
    let (whole, _) = project.pytest(&strict, &[], &replay);
    succeeded(&whole);
    assert!(!whole.stderr.contains("a filtered run"), "{}", whole.stderr);
}

/// A module fixture of a conftest is set up once for each module, a class fixture once for
/// each class (or test outside a class), and a parametrized session fixture once for each
/// parameter, each time with calls of its own: each setup is an id of its own, so recording
/// them one after another keeps every setup's calls, and each replays its own, alone and under
/// xdist, with `--deny unused` clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_module_and_parameter_of_a_wider_fixture_keeps_its_own_recording() {
    let Some(project) = Project::new("fixture_suite", "xdist") else {
        return;
    };
    let root = project.dir.path();
    let mut conftest = std::fs::read_to_string(root.join("conftest.py")).unwrap();
    conftest.push_str(
        "\n\n@pytest.fixture(scope='module')\ndef per_module(request):\n    return ask(f'Set up {request.module.__name__}')\n\n\n@pytest.fixture(scope='session', params=['en', 'fr'])\ndef language(request):\n    return request.param, ask(f'Speak {request.param}')\n\n\n@pytest.fixture(scope='class')\ndef per_class(request):\n    return ask(f'Class {request.node.name}')\n",
    );
    std::fs::write(root.join("conftest.py"), conftest).unwrap();
    for module in ["test_mod_a", "test_mod_b"] {
        std::fs::write(
            root.join(format!("{module}.py")),
            "def test_setups(per_module, language):\n    assert per_module == f'You said: Set up {__name__}'\n    code, said = language\n    assert said == f'You said: Speak {code}'\n\n\nclass TestGroup:\n    def test_in_class(self, per_class):\n        assert per_class == 'You said: Class TestGroup'\n\n\ndef test_outside(per_class):\n    assert per_class == 'You said: Class test_outside'\n",
        )
        .unwrap();
    }
    let only = ["test_mod_a.py", "test_mod_b.py"];
    let mut fake = FakeProvider::start().await;
    let flags = record_flags(&fake);
    let (recorded, _) = project.pytest(&strs(&flags), &[], KEYS);
    succeeded(&recorded);
    fake.stop();
    assert_eq!(
        project.prompts("test_mod_a.py::fixture:per_module"),
        ["Set up test_mod_a"]
    );
    assert_eq!(
        project.prompts("test_mod_b.py::fixture:per_module"),
        ["Set up test_mod_b"]
    );
    assert_eq!(
        project.prompts("conftest.py::fixture:language[en]"),
        ["Speak en"]
    );
    assert_eq!(
        project.prompts("conftest.py::fixture:language[fr]"),
        ["Speak fr"]
    );
    // A class fixture of a test outside a class is set up for that test alone.
    assert_eq!(
        project.prompts("test_mod_b.py::TestGroup::fixture:per_class"),
        ["Class TestGroup"]
    );
    assert_eq!(
        project.prompts("test_mod_b.py::test_outside::fixture:per_class"),
        ["Class test_outside"]
    );
    let replay = [("CI", "true")];
    let (alone, _) = project.pytest(&[], &only, &replay);
    succeeded(&alone);
    let (workers, _) = project.pytest(&[], &["-n", "2", only[0], only[1]], &replay);
    succeeded(&workers);
    // The whole suite lists each setup's id: none of their folders is unused.
    let (whole, _) = project.pytest(&["--deny", "unused"], &[], &replay);
    succeeded(&whole);
}

/// A request an httpx client sends through a proxy of its own, or a transport of its own that
/// has one, never reaches the daemon: it carries no `X-Test-Id` to that other host, though
/// the run's environment names the daemon as every client's proxy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_httpx_client_with_a_proxy_of_its_own_tells_it_no_test_id() {
    let Some(project) = Project::new("fixture_suite", "pytest_llmreplay") else {
        return;
    };
    std::fs::write(
        project.dir.path().join("test_other_proxy.py"),
        "import os\nimport httpx\n\nBODY = {'model': 'gpt-4o-mini', 'messages': [{'role': 'user', 'content': 'hi'}]}\n\n\ndef test_other_proxy():\n    other = os.environ['OTHER_PROXY']\n    httpx.Client(proxy=other).post('http://third.example/v1/chat/completions', json=BODY)\n    transport = httpx.HTTPTransport(proxy=other)\n    httpx.Client(transport=transport).post('http://third.example/v1/chat/completions', json=BODY)\n",
    )
    .unwrap();
    let other = FakeProvider::start().await;
    let url = other.url();
    let env = [("CI", "true"), ("OTHER_PROXY", url.as_str())];
    let (ran, _) = project.pytest(&[], &["test_other_proxy.py"], &env);
    succeeded(&ran);
    let received = other.received();
    assert_eq!(received.len(), 2, "{}", ran.stderr);
    for r in received {
        assert!(
            !r.headers
                .iter()
                .any(|(k, _)| k.eq_ignore_ascii_case("x-test-id")),
            "the other proxy was told the test: {:?}",
            r.headers
        );
    }
}

/// The folder of fixture locks lives in the temp folder every local user shares, under a name
/// anyone can work out: one someone else put there first (here a link to a folder of theirs,
/// where the lock files would be made, and could be held by them forever) is refused with a
/// message naming it, and nothing is made where it leads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixture_lock_folder_someone_else_made_is_refused_not_followed() {
    let Some(project) = Project::new("fixture_suite", "pytest_llmreplay") else {
        return;
    };
    let root = project.dir.path();
    let elsewhere = root.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    // Made as the run starts, before any fixture: the lock folder's name for this daemon, as
    // this plugin names it and as its first release did.
    let mut conftest = std::fs::read_to_string(root.join("conftest.py")).unwrap();
    conftest.push_str(&format!(
        "\n\ndef pytest_configure(config):\n    import hashlib, tempfile\n    at = os.environ['LLMREPLAY_BASE_URL'].split('/t/', 1)[0].rstrip('/')\n    run = hashlib.sha256(at.encode()).hexdigest()[:16]\n    for name in (f'llmreplay-fixtures-{{os.getuid()}}-{{run}}', f'llmreplay-fixtures-{{run}}'):\n        link = os.path.join(tempfile.gettempdir(), name)\n        if not os.path.lexists(link):\n            os.symlink({:?}, link)\n            config.add_cleanup(lambda link=link: os.unlink(link))\n",
        elsewhere.to_str().unwrap()
    ));
    std::fs::write(root.join("conftest.py"), conftest).unwrap();
    let mut fake = FakeProvider::start().await;
    let flags = record_flags(&fake);
    let (ran, _) = project.pytest(&strs(&flags), &[], KEYS);
    fake.stop();
    let made: Vec<_> = std::fs::read_dir(&elsewhere).unwrap().collect();
    assert!(
        made.is_empty(),
        "lock files made through the link: {made:?}"
    );
    assert_ne!(ran.code, Some(0), "{}", ran.stderr);
    assert!(
        ran.stdout.contains("is not a folder of this user's alone"),
        "{}",
        ran.stdout
    );
}

/// Tests that skip themselves on this machine (a `skipif` marker, `pytest.skip` before any
/// call or after one) leave their recordings alone: `--deny unused` names none of them, and
/// `prune` of that run removes nothing, so the tests still replay where they do run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recordings_of_tests_that_skip_themselves_are_not_unused() {
    let Some(project) = Project::new("fixture_suite", "pytest_llmreplay") else {
        return;
    };
    std::fs::write(
        project.dir.path().join("test_skips.py"),
        "import os\nimport pytest\nfrom conftest import ask\n\nHERE = bool(os.environ.get('NO_GPU'))\n\n\n@pytest.mark.skipif(HERE, reason='needs a GPU')\ndef test_marked():\n    ask('Marked')\n\n\ndef test_inside():\n    if HERE:\n        pytest.skip('needs a GPU')\n    ask('Inside')\n\n\ndef test_half():\n    ask('Half one')\n    if HERE:\n        pytest.skip('the rest needs a GPU')\n    ask('Half two')\n",
    )
    .unwrap();
    let mut fake = FakeProvider::start().await;
    let flags = record_flags(&fake);
    let (recorded, _) = project.pytest(&strs(&flags), &[], KEYS);
    succeeded(&recorded);
    fake.stop();
    let (skipping, _) = project.pytest(
        &["--deny", "unused"],
        &[],
        &[("CI", "true"), ("NO_GPU", "1")],
    );
    succeeded(&skipping);
    assert!(!skipping.stderr.contains("unused ("), "{}", skipping.stderr);
    let pruned = prune_in(project.dir.path());
    assert_eq!(pruned.code, Some(0), "{}", pruned.stderr);
    assert_eq!(project.prompts("test_skips.py::test_marked"), ["Marked"]);
    assert_eq!(project.prompts("test_skips.py::test_inside"), ["Inside"]);
    assert_eq!(
        project.prompts("test_skips.py::test_half"),
        ["Half one", "Half two"]
    );
    let (everywhere, _) = project.pytest(&["--deny", "unused"], &[], &[("CI", "true")]);
    succeeded(&everywhere);
}

/// `python -m unittest`, no plugin: each TestCase method is its own test, by `TestCase.id()`,
/// recorded, replayed, and missed under its own id; the listed suite judges folders unless
/// the command named tests; the user's own sitecustomize still loads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unittest_methods_record_replay_and_miss_each_in_their_own_folder() {
    let Some(project) = Project::new("unittest_suite", "openai") else {
        return;
    };
    let tests = [
        "test_mod.TestChat.test_hello",
        "test_mod.TestChat.test_twice",
        "test_mod.TestOther.test_other",
    ];
    let user_site = project.dir.path().join("user_site");
    let user_site = user_site.to_str().unwrap();
    let mut env = KEYS.to_vec();
    env.push(("PYTHONPATH", user_site));
    let unittest = ["-m", "unittest", "-v"];
    let mut fake = FakeProvider::start().await;
    let flags = record_flags(&fake);
    let (recorded, recorded_out) = project.python(&strs(&flags), &unittest, &env);
    succeeded(&recorded);
    assert_eq!(project.folders(), slugs(&tests), "{}", recorded.stderr);
    assert_eq!(project.prompts(tests[1]), ["Once", "Twice"]);
    assert_eq!(project.prompts(tests[2]), ["Other"]);
    let kept = answers(&recorded_out);
    assert_eq!(kept["user-sitecustomize.txt"], "loaded");
    fake.stop();
    let replay = [("CI", "true"), ("PYTHONPATH", user_site)];
    let (replayed, replayed_out) = project.python(&[], &unittest, &replay);
    succeeded(&replayed);
    assert_eq!(answers(&replayed_out), kept);
    let mut changed = replay.to_vec();
    changed.push(("SAMPLE_CHANGED", "1"));
    let (missed, _) = project.python(&[], &unittest, &changed);
    assert_ne!(missed.code, Some(0), "{}", missed.stderr);
    let report = project.report();
    assert_eq!(report["missing"][0]["test"], tests[0], "{report}");
    assert_eq!(report["missing"].as_array().unwrap().len(), 1, "{report}");
    // The command the miss printed to record that test again, pasted into a shell (the
    // stand-in provider's address added): it runs that one test method, by its id.
    let rerecord = report["missing"][0]["rerecord"].as_str().unwrap();
    assert!(
        rerecord.ends_with("-m unittest -v test_mod.TestChat.test_hello"),
        "{rerecord}"
    );
    let again = FakeProvider::start().await;
    let others: Vec<(PathBuf, Vec<u8>)> = tests[1..]
        .iter()
        .map(|t| project.folder(t).join("openai.json"))
        .map(|p| (p.clone(), std::fs::read(&p).unwrap()))
        .collect();
    let flags = record_flags(&again);
    let pasted = rerecord.replacen(
        " run --record -- ",
        &format!(" run --record {} -- ", flags[1..].join(" ")),
        1,
    );
    let bin = crate::support::binary().parent().unwrap().to_path_buf();
    let path = std::env::join_paths(
        std::iter::once(bin).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap())),
    )
    .unwrap();
    let mut sh = std::process::Command::new("sh");
    sh.current_dir(project.dir.path())
        .args(["-c", &pasted])
        .env("PATH", path)
        .env("CARGO_TARGET_DIR", project.dir.path().join("target"))
        .env("PYTHONPATH", user_site)
        .env("SAMPLE_CHANGED", "1")
        .env_remove("CI");
    crate::support::without_provider_env(&mut sh);
    sh.envs(KEYS.iter().copied());
    let one = Output::of(&mut sh);
    succeeded(&one);
    assert_eq!(again.received().len(), 1, "that one test alone");
    for (path, bytes) in others {
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "{}", path.display());
    }
    // One class named: a filtered run, whose other folders are not judged.
    let strict = ["--deny", "unused"];
    let named = ["-m", "unittest", "test_mod.TestChat"];
    // (test_hello is recorded with the changed prompt now.)
    let (one_class, _) = project.python(&strict, &named, &changed);
    succeeded(&one_class);
    // The loader's suite is listed: a deleted class's folder is named by `--deny unused`.
    let file = project.dir.path().join("test_mod.py");
    let text = std::fs::read_to_string(&file).unwrap();
    let kept = text.split("\n\nclass TestOther").next().unwrap();
    std::fs::write(&file, format!("{kept}\n")).unwrap();
    let (orphaned, _) = project.python(&strict, &unittest, &changed);
    assert_ne!(orphaned.code, Some(0), "{}", orphaned.stderr);
    let orphan = project.folder(tests[2]);
    let name = orphan.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        orphaned.stderr.contains("unused (1):") && orphaned.stderr.contains(&name),
        "{}",
        orphaned.stderr
    );
}

/// pytest-asyncio's async tests and a module-scoped async fixture beside a sync test and a
/// unittest TestCase: each test's calls in its own folder (the TestCase's by its node id), the
/// fixture's in its own, replayed; and requests to another
/// host than the daemon carry no `X-Test-Id`, through httpx, requests and aiohttp.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pytest_asyncio_tests_and_an_async_module_fixture_keep_their_own_calls() {
    let Some(project) = Project::new("asyncio_suite", "pytest_asyncio") else {
        return;
    };
    let fixture = "test_mixed.py::fixture:opening";
    let tests = [
        ("test_mixed.py::test_sync", "Sync"),
        ("test_mixed.py::test_async", "Async"),
        ("test_mixed.py::test_async_again", "Async again"),
        (fixture, "Open the module"),
        // Not `test_case.TestOld.test_style`: pytest's id wins over the unittest hook's.
        ("test_case.py::TestOld::test_style", "Old style"),
    ];
    let mut fake = FakeProvider::start().await;
    let flags = record_flags(&fake);
    let direct = fake.url();
    let mut env = KEYS.to_vec();
    env.push(("SAMPLE_DIRECT", &direct));
    let (recorded, recorded_out) = project.pytest(&strs(&flags), &[], &env);
    succeeded(&recorded);
    let ids: Vec<&str> = tests.iter().map(|(t, _)| *t).collect();
    assert_eq!(project.folders(), slugs(&ids), "{}", recorded.stderr);
    for (test, prompt) in tests {
        assert_eq!(project.prompts(test), [prompt], "{test}");
    }
    // Straight to the provider, not through the daemon: no client names the test to it.
    let direct: Vec<_> = fake
        .received()
        .into_iter()
        .filter(|r| r.body.to_string().contains("Direct "))
        .collect();
    assert_eq!(direct.len(), 3);
    for r in direct {
        assert!(
            !r.headers
                .iter()
                .any(|(k, _)| k.eq_ignore_ascii_case("x-test-id")),
            "{:?}",
            r.headers
        );
    }
    fake.stop();
    let (replayed, replayed_out) = project.pytest(&[], &[], &[("CI", "true")]);
    succeeded(&replayed);
    assert_eq!(answers(&replayed_out), answers(&recorded_out));
    assert_eq!(answers(&replayed_out).len(), 4);
    assert_eq!(
        project.report()["counts"]["hits"],
        5,
        "{}",
        project.report()
    );
}

/// Two node ids that would share one cassette folder stop the run when pytest has collected
/// them, naming both and the folder; neither test calls out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pytest_tests_that_would_share_a_folder_stop_the_run_before_they_call() {
    let Some(project) = Project::new("pytest_clash", "pytest_llmreplay") else {
        return;
    };
    let fake = FakeProvider::start().await;
    let flags = record_flags(&fake);
    let (out, _) = project.pytest(&strs(&flags), &[], KEYS);
    assert_ne!(out.code, Some(0), "{}", out.stderr);
    let said = format!("{}{}", out.stdout, out.stderr);
    assert!(
        said.contains("tests whose ids share a cassette folder")
            && said.contains("test_clash.py::test_greets[a b]")
            && said.contains("test_clash.py::test_greets[a-b]"),
        "{said}"
    );
    assert!(fake.received().is_empty(), "no test called out");
}

/// One project, two runners: pytest's listing judges pytest's folders alone, so the folders
/// vitest recorded beside them are no orphans of a `run -- pytest`, and `prune` leaves them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pytest_run_judges_no_folder_another_runner_recorded() {
    let Some((dir, vitest)) = crate::runners::vitest_project() else {
        return;
    };
    let Some(python) = sdk_python("pytest_llmreplay") else {
        return;
    };
    let suite = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/sdk/pytest_suite");
    std::fs::copy(suite.join("test_chat.py"), dir.path().join("test_chat.py")).unwrap();
    let fake = FakeProvider::start().await;
    let flags = record_flags(&fake);
    let vitest_run: Vec<&OsStr> = vec![
        OsStr::new("node"),
        vitest.as_os_str(),
        OsStr::new("run"),
        OsStr::new("--reporter=dot"),
    ];
    let (recorded, _) = run_keeping(dir.path(), &strs(&flags), &vitest_run, KEYS);
    succeeded(&recorded);
    let pytest: Vec<&OsStr> = [python.as_os_str()]
        .into_iter()
        .chain(["-m", "pytest", "-q", "-p", "no:cacheprovider"].map(OsStr::new))
        .collect();
    let (recorded, _) = run_keeping(dir.path(), &strs(&flags), &pytest, KEYS);
    succeeded(&recorded);
    let vitest_folder = dir.path().join("tests/cassettes/chat-test-js--chat--hello");
    assert!(vitest_folder.is_dir());
    let (gated, _) = run_keeping(
        dir.path(),
        &["--deny", "unused"],
        &pytest,
        &[("CI", "true")],
    );
    succeeded(&gated);
    let pruned = prune_in(dir.path());
    assert_eq!(pruned.code, Some(0), "{}", pruned.stderr);
    assert!(
        vitest_folder.is_dir(),
        "vitest's recordings are left: {}",
        pruned.stderr
    );
}
