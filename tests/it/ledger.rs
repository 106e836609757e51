//! The ledger and `--max-spend`, end to end: `cargo llmreplay run` of a small suite through the
//! official OpenAI, Anthropic and Gemini SDKs, recorded from the fake provider's real usage
//! blocks ([`real_usage`]) and replayed; the sums checked against prices worked out by hand
//! from the vendored table. Then a cap that refuses the request past it, keeps what was
//! recorded before, and fails the run.
//!
//! Prices (dollars per million tokens are micro-dollars per token), table of 2026-11-27:
//! - gpt-4o-mini, 0.15 in, 0.075 cached, 0.6 out: 1,200 in of which 1,000 cached, 300 out:
//!   200 × 0.15 + 1,000 × 0.075 + 300 × 0.6 = 30 + 75 + 180 = 285.
//! - claude-haiku-4-5, 1 in, 1.25 cache write, 0.1 cache read, 5 out: 200 in, 1,000 written,
//!   3,000 read, 400 out: 200 + 1,250 + 300 + 2,000 = 3,750.
//! - gemini-2.5-flash, 0.3 in, 0.03 cached, 2.5 out: 2,000 in of which 1,500 cached, 100 out
//!   and 200 thoughts: 500 × 0.3 + 1,500 × 0.03 + 300 × 2.5 = 150 + 45 + 750 = 945.
//! - my-finetune: no price in the table; `[prices."my-finetune"]` at 3 in and 15 out:
//!   1,200 × 3 + 300 × 15 = 8,100.

use crate::support::{binary, read_json, sdk_python, FakeProvider};
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;

const OPENAI: u64 = 285;
const ANTHROPIC: u64 = 3_750;
const GEMINI: u64 = 945;
const FINETUNE: u64 = 8_100;

/// `cargo llmreplay run ARGS -- python ledger_suite.py WHAT` in `dir`, recording from `fake`
/// for all three families; its exit code, stdout, stderr, report and CI page.
fn run_suite(
    dir: &Path,
    python: &Path,
    fake: &FakeProvider,
    what: &str,
    args: &[&str],
) -> (Option<i32>, String, String, Value, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/sdk/ledger_suite.py");
    let page = dir.join(format!("page-{what}-{}.md", args.len()));
    let mut cmd = Command::new(binary());
    cmd.current_dir(dir)
        .arg("llmreplay")
        .arg("run")
        .args(args)
        .args(["--upstream", &format!("openai={}", fake.url())])
        .args(["--upstream", &format!("anthropic={}", fake.url())])
        .args(["--upstream", &format!("gemini={}", fake.url())])
        .arg("--")
        .arg(python)
        .arg(&script)
        .arg(what)
        .env("CARGO_TARGET_DIR", dir.join("target"))
        .env("GITHUB_STEP_SUMMARY", &page)
        .env("OPENAI_API_KEY", "sk-ledger-test-key")
        .env("ANTHROPIC_API_KEY", "sk-ant-ledger-test-key")
        .env("GEMINI_API_KEY", "ledger-test-gemini-key")
        .env_remove("GOOGLE_API_KEY")
        .env_remove("CI");
    let out = cmd.output().unwrap();
    let report = read_json(&dir.join("target/llmreplay/report.json"));
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        report,
        std::fs::read_to_string(&page).unwrap_or_default(),
    )
}

/// A suite recorded, then replayed: the recording run's spend and the replay's savings are
/// the hand-computed sums; a model the table lacks is unpriced (never $0) until `[prices]`
/// names it; the summary and the CI page say it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ledger_of_a_small_suite_is_the_sum_worked_out_by_hand() {
    let Some(python) = sdk_python("google.genai") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start().await;
    let (code, stdout, stderr, report, page) =
        run_suite(dir.path(), &python, &fake, "suite", &["--record"]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    // The SDKs read the usage blocks as the providers send them.
    assert!(
        stdout.contains("openai 1000") && stdout.contains("openai stream [300]"),
        "{stdout}"
    );
    assert!(
        stdout.contains("anthropic 3000") && stdout.contains("anthropic stream 400"),
        "{stdout}"
    );
    assert!(stdout.contains("gemini 200"), "{stdout}");
    let spent = 2 * OPENAI + 2 * ANTHROPIC + GEMINI;
    assert_eq!(
        report["ledger"],
        json!({"prices_date": "2026-11-27", "saved_micros": 0, "replays_priced": 0,
            "replays_unpriced": 0, "spent_micros": spent, "recordings_priced": 5,
            "recordings_unpriced": 1, "unpriced": {"my-finetune": 1}}),
        "{report}"
    );
    assert!(
        stderr.contains(
            "≈ $0.009015 spent recording 5 answers (prices of 2026-11-27); unpriced: my-finetune (1)"
        ),
        "{stderr}"
    );
    assert!(
        page.contains("≈ $0.009015 spent recording 5 answers (prices of 2026-11-27); unpriced: `my-finetune` (1)."),
        "{page}"
    );

    std::fs::write(
        dir.path().join("llmreplay.toml"),
        "[prices.\"my-finetune\"]\ninput_per_mtok = 3.0\noutput_per_mtok = 15.0\n",
    )
    .unwrap();
    let sent_before = fake.received().len();
    let (code, stdout, stderr, report, page) = run_suite(dir.path(), &python, &fake, "suite", &[]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert_eq!(fake.received().len(), sent_before, "a replay sends nothing");
    let saved = spent + FINETUNE;
    assert_eq!(
        report["ledger"],
        json!({"prices_date": "2026-11-27", "saved_micros": saved, "replays_priced": 6,
            "replays_unpriced": 0, "spent_micros": 0, "recordings_priced": 0,
            "recordings_unpriced": 0}),
        "{report}"
    );
    // 17,115 micro-dollars, to the cent.
    assert!(
        stderr.contains("≈ $0.02 not spent by 6 replays (prices of 2026-11-27)"),
        "{stderr}"
    );
    assert!(
        page.contains("≈ $0.02 not spent by 6 replays (prices of 2026-11-27)."),
        "{page}"
    );
    // The pull request's comment ends with it too, from the run's report.
    git2::Repository::init(dir.path()).unwrap();
    std::fs::write(dir.path().join(".gitignore"), "target/\n").unwrap();
    crate::support::commit_all(dir.path());
    let diff = Command::new(binary())
        .current_dir(dir.path())
        .args([
            "llmreplay",
            "diff",
            "--base",
            "HEAD",
            "--format",
            "markdown",
        ])
        .env("CARGO_TARGET_DIR", dir.path().join("target"))
        .output()
        .unwrap();
    let comment = String::from_utf8_lossy(&diff.stdout);
    assert!(
        comment.ends_with("\n≈ $0.02 not spent by 6 replays (prices of 2026-11-27).\n"),
        "{comment}{}",
        String::from_utf8_lossy(&diff.stderr)
    );

    // A price that cannot be one is refused at start, naming the entry.
    std::fs::write(
        dir.path().join("llmreplay.toml"),
        "[prices.\"my-finetune\"]\ninput_per_mtok = -3.0\noutput_per_mtok = 15.0\n",
    )
    .unwrap();
    let (code, _, stderr, _, _) = run_suite(dir.path(), &python, &fake, "suite", &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("[prices.\"my-finetune\"] input_per_mtok = -3: a price is a number of US dollars per million tokens, 0 or more"),
        "{stderr}"
    );
}

/// Under `--max-spend`, a first recording run sends until the answers' cost reaches the cap
/// and refuses the rest with a 402 that names the cap and the spend; a re-record then refuses,
/// unsent, the request whose recording's cost would pass the cap. Both runs fail saying so,
/// and every recording made before a refusal is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_spend_refuses_the_request_past_the_cap_and_keeps_what_was_recorded() {
    let Some(python) = sdk_python("anthropic") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start().await;
    let cassette = dir
        .path()
        .join("tests/cassettes/capped--anthropic/anthropic.json");
    let cap = ["--max-spend", "0.008USD"];

    let (code, stdout, stderr, report, _) = run_suite(
        dir.path(),
        &python,
        &fake,
        "capped",
        &[&["--record"][..], &cap].concat(),
    );
    // 3,750 each: the third takes the spend to 11,250, past 8,000; the fourth is refused.
    assert!(stdout.contains("call 3: 200"), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("call 4: 402 cargo-llmreplay: not sent upstream: this run spent $0.01 of its --max-spend $0.008."),
        "{stdout}"
    );
    assert!(
        stdout.contains("What was recorded before is kept; raise the cap (--max-spend 1USD)"),
        "{stdout}"
    );
    assert_eq!(fake.received().len(), 3);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("--max-spend $0.008 reached: $0.01 spent recording, 1 request refused and not sent upstream"),
        "{stderr}"
    );
    assert_eq!(report["ledger"]["spent_micros"], 3 * ANTHROPIC);
    assert_eq!(report["ledger"]["refused_over_cap"], 1);
    assert_eq!(report["ledger"]["max_spend_micros"], 8_000);
    let recorded = read_json(&cassette);
    assert_eq!(
        recorded["interactions"].as_array().unwrap().len(),
        3,
        "{recorded}"
    );

    // Re-recorded: the first two (7,500) go; the third's recording cost 3,750, which would
    // pass 8,000, so it is not sent. The fourth has no recording to judge it by, and the
    // spend is under the cap: it goes, and takes the spend past.
    let (code, stdout, stderr, report, _) = run_suite(
        dir.path(),
        &python,
        &fake,
        "capped",
        &[&["--record"][..], &cap].concat(),
    );
    assert!(stdout.contains("call 2: 200"), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("call 3: 402 cargo-llmreplay: not sent upstream: this run spent $0.0075 of its --max-spend $0.008, and this request's recording cost $0.00375 when it was recorded, which would pass it."),
        "{stdout}"
    );
    assert!(stdout.contains("call 4: 200"), "{stdout}");
    let sent: Vec<String> = fake.received()[3..]
        .iter()
        .map(|r| {
            r.body["messages"][0]["content"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(
        sent,
        ["USAGE call 1", "USAGE call 2", "USAGE call 4"],
        "the third was never sent"
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(report["ledger"]["refused_over_cap"], 1);
    assert_eq!(report["ledger"]["spent_micros"], 3 * ANTHROPIC);
    let kept = read_json(&cassette);
    let prompts: Vec<&str> = kept["interactions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            i["request"]["body"]["messages"][0]["content"]
                .as_str()
                .unwrap()
        })
        .collect();
    assert_eq!(
        prompts,
        [
            "USAGE call 1",
            "USAGE call 2",
            "USAGE call 3",
            "USAGE call 4"
        ],
        "the recording of the request refused in this run is kept from the last"
    );

    // rerun, one request at a time: the first two (7,500) go; the third's recording would
    // take the spend past 8,000, so it and the fourth are not sent, and fail naming the cap.
    let before = fake.received().len();
    let out = crate::support::Output::of(
        Command::new(binary())
            .current_dir(dir.path())
            .args(["llmreplay", "rerun", "capped", "--save", "--jobs", "1"])
            .args(cap)
            .args(["--upstream", &format!("anthropic={}", fake.url())])
            .env("ANTHROPIC_API_KEY", "sk-ant-ledger-test-key")
            .env_remove("CI"),
    );
    assert_eq!(out.code, Some(1), "{}\n{}", out.stdout, out.stderr);
    assert_eq!(fake.received().len(), before + 2, "{}", out.stdout);
    assert_eq!(
        out.stdout
            .matches("not sent upstream: this run spent $0.0075 of its --max-spend $0.008, and this request's recording cost $0.00375")
            .count(),
        2,
        "{}",
        out.stdout
    );

    // A cap on a run that records nothing is refused, not ignored.
    let (code, _, stderr, _, _) = run_suite(dir.path(), &python, &fake, "capped", &cap);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("--max-spend caps what recording spends, and mode replay records nothing"),
        "{stderr}"
    );
}
