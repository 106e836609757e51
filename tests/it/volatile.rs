//! Volatile inputs and client changes, end to end with the official Python `openai` SDK under the
//! real `cargo llmreplay test`: prompts that carry a time, a UUID and ids a tool minted miss
//! as `volatile` and `match suggest --apply` makes them replay offline; an SDK option that adds
//! a field misses as `sdk shape` and `rekey` keeps the recorded answer under the new request;
//! another prompt is `semantic`, and `rekey` refuses it. The OpenAI Agents SDK's traces are
//! telemetry: recorded once, answered in replay whatever their body.

use crate::support::{read_json, sdk_python, upstream_args, FakeProvider, Sample, TestCa};
use serde_json::Value;
use std::path::Path;

fn scripts() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/sdk")
        .display()
        .to_string()
}

/// The volatile sample (its own build: it adds a test binary) with the tests `filter` names
/// recorded from a fake provider, and the environment its tests need.
struct Recorded {
    fake: FakeProvider,
    sample: Sample,
    env: Vec<(String, String)>,
}

impl Recorded {
    async fn new(version: &str, filter: &str) -> Option<Recorded> {
        let python = sdk_python("openai")?;
        let fake = FakeProvider::start().await;
        let sample = Sample::new();
        sample.own_build(version);
        sample.add_test("volatile.rs");
        let env = vec![
            ("SAMPLE_PYTHON".into(), python.display().to_string()),
            ("SAMPLE_SCRIPTS".into(), scripts()),
            ("OPENAI_API_KEY".into(), "sk-test-not-real".into()),
        ];
        let mut record: Vec<String> = vec!["--record".into(), "-E".into(), filter.into()];
        record.extend(upstream_args(&fake));
        let record: Vec<&str> = record.iter().map(String::as_str).collect();
        let this = Recorded { fake, sample, env };
        let recorded = this.sample.run(&record, &this.env(&[]));
        assert_eq!(recorded.code, Some(0), "{}", recorded.stderr);
        Some(this)
    }

    /// Its environment, with `more` on top.
    fn env<'a>(&'a self, more: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
        let mut env: Vec<(&str, &str)> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        env.extend_from_slice(more);
        env
    }
}

/// `match suggest --apply` on `report`, which must succeed.
fn apply(sample: &Sample, report: &str, env: &[(&str, &str)]) -> crate::support::Output {
    let applied = sample.llmreplay_with(&["match", "suggest", "--apply", "--report", report], env);
    assert_eq!(
        applied.code,
        Some(0),
        "{}\n{}",
        applied.stdout,
        applied.stderr
    );
    applied
}

fn classes(report: &Value) -> Vec<String> {
    report["missing"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["class"].as_str().unwrap_or("none").to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volatile_prompts_miss_then_match_suggest_apply_makes_them_replay_offline() {
    let filter = "test(/^volatile_/)";
    let Some(mut r) = Recorded::new("0.1.37", filter).await else {
        return;
    };
    let env = r.env(&[]);
    let (sample, fake) = (&r.sample, &r.fake);
    let upstream_calls = fake.received().len();
    assert_eq!(upstream_calls, 3, "one call, then two turns");

    // The second run sends another time, UUID and pair of order ids: each misses, volatile.
    let missed = sample.run(&["-E", filter], &env);
    assert_ne!(missed.code, Some(0), "{}", missed.stderr);
    assert_eq!(
        classes(&missed.report),
        ["volatile", "volatile"],
        "{}",
        missed.report
    );
    let time_miss = missed.report["missing"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| {
            m["test"]
                .as_str()
                .unwrap()
                .ends_with("volatile_time_and_uuid")
        })
        .unwrap();
    assert_eq!(
        time_miss["values"][0]["why"], "a time and a UUID",
        "{time_miss}"
    );
    let message = time_miss["message"].as_str().unwrap();
    assert!(
        message.contains("this rule in llmreplay.toml keys them the same:")
            && message.contains("<TIME>")
            && message.contains("<UUID>"),
        "{message}"
    );
    assert!(
        missed
            .stderr
            .contains("volatile: values that change every run"),
        "{}",
        missed.stderr
    );
    let report = missed.report_path.to_str().unwrap();

    // The rules, written for the user: a numbered one for the two ids turn 1 minted.
    let suggested = sample.llmreplay_with(&["match", "suggest", "--report", report], &env);
    assert_eq!(suggested.code, Some(0), "{}", suggested.stderr);
    assert!(
        suggested.stdout.contains("[match]\nreplace = [")
            && suggested.stdout.contains("with = '<TIME>'")
            && suggested.stdout.contains("with = '<UUID>'")
            && suggested
                .stdout
                .contains(r"pattern = '\bord_[A-Za-z0-9]{12}\b', with = '<ORD_ID_{n}>'"),
        "{}",
        suggested.stdout
    );
    assert!(
        !sample.root.join("llmreplay.toml").exists(),
        "suggest alone writes nothing"
    );

    // Applied: the rules in llmreplay.toml, the cassettes re-keyed, the two tests replayed green.
    let applied = apply(sample, report, &env);
    assert!(
        applied.stderr.contains("added 3 rules to llmreplay.toml")
            && applied
                .stderr
                .contains("re-keyed 2 recordings in 2 cassettes"),
        "{}",
        applied.stderr
    );
    let toml = std::fs::read_to_string(sample.root.join("llmreplay.toml")).unwrap();
    assert!(toml.contains("<ORD_ID_{n}>"), "{toml}");
    let turn2 = read_json(&sample.cassette("sample--volatile--volatile_minted_ids", "openai"));
    let sent = turn2["interactions"][1]["request"]["body"]["messages"][2]["content"].clone();
    assert_eq!(
        sent, "The tool made orders <ORD_ID_1> and <ORD_ID_2>. Confirm both.",
        "{turn2}"
    );
    assert_eq!(fake.received().len(), upstream_calls, "no provider call");

    // Every later run replays, offline, under CI.
    drop(env);
    r.fake.stop();
    let again = r.sample.run(&["-E", filter], &r.env(&[("CI", "true")]));
    assert_eq!(again.code, Some(0), "{}", again.stderr);
    assert_eq!(again.report["counts"]["misses"], 0, "{}", again.report);
    assert_eq!(again.report["counts"]["hits"], 3, "{}", again.report);
}

/// A rule `match suggest --apply` writes names the tests whose misses suggested it: two tests
/// send the same kind of prompt (a time and a UUID); the rule one test's miss suggested lets
/// that test replay, and the other's keys stay as they were (it still misses) until its own
/// miss widens the rule. Before any of that, an apply that would re-key a cassette it cannot
/// read refuses, having written nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_applied_rule_applies_to_the_tests_that_missed_until_widened() {
    let one = "test(=volatile_time_and_uuid)";
    let both = "test(/time_and_uuid$/)";
    let Some(mut r) = Recorded::new("0.1.47", both).await else {
        return;
    };
    let env = r.env(&[]);
    let sample = &r.sample;
    let config = sample.root.join("llmreplay.toml");
    let one_file = sample.cassette("sample--volatile--volatile_time_and_uuid", "openai");
    let other_file = sample.cassette("sample--volatile--scoped_time_and_uuid", "openai");
    let other_before = std::fs::read(&other_file).unwrap();

    let missed = sample.run(&["-E", one], &env);
    assert_ne!(missed.code, Some(0), "{}", missed.stderr);
    assert_eq!(classes(&missed.report), ["volatile"], "{}", missed.report);
    let report = missed.report_path.to_str().unwrap().to_string();

    // A cassette that does not parse in the folder apply would re-key: nothing is written.
    let one_before = std::fs::read(&one_file).unwrap();
    let broken = one_file.with_file_name("anthropic.json");
    std::fs::write(&broken, "{ \"llmreplay\": 2, \"interactions\": [").unwrap();
    let refused =
        sample.llmreplay_with(&["match", "suggest", "--apply", "--report", &report], &env);
    assert_eq!(
        refused.code,
        Some(2),
        "{}\n{}",
        refused.stdout,
        refused.stderr
    );
    assert!(
        refused.stderr.contains("anthropic.json")
            && refused
                .stderr
                .contains("nothing was changed: no rule added"),
        "{}",
        refused.stderr
    );
    assert!(!config.exists(), "no rule written");
    assert_eq!(
        std::fs::read(&one_file).unwrap(),
        one_before,
        "no cassette re-keyed"
    );
    std::fs::remove_file(&broken).unwrap();

    // Applied from the one test's miss: written for that test, its cassette alone re-keyed.
    let applied = apply(sample, &report, &env);
    assert!(
        applied
            .stdout
            .contains("--apply writes each for the tests whose misses suggested it"),
        "{}",
        applied.stdout
    );
    let toml = std::fs::read_to_string(&config).unwrap();
    assert!(
        toml.contains(r#"tests = ["sample::volatile$volatile_time_and_uuid"]"#)
            && !toml.contains("scoped_time_and_uuid"),
        "{toml}"
    );
    assert_ne!(std::fs::read(&one_file).unwrap(), one_before, "re-keyed");
    assert_eq!(
        std::fs::read(&other_file).unwrap(),
        other_before,
        "the other test's keys are untouched"
    );

    // Both, offline: the one replays, the other still misses.
    let ci = r.env(&[("CI", "true")]);
    let next = sample.run(&["-E", both], &ci);
    assert_ne!(next.code, Some(0), "{}", next.stderr);
    let missing = next.report["missing"].as_array().unwrap();
    assert_eq!(missing.len(), 1, "{}", next.report);
    assert!(
        missing[0]["test"]
            .as_str()
            .unwrap()
            .ends_with("scoped_time_and_uuid"),
        "{}",
        next.report
    );
    assert_eq!(next.report["counts"]["hits"], 1, "{}", next.report);

    // Widened by the other test's own miss: the same rule now names both, and both replay.
    let report = next.report_path.to_str().unwrap().to_string();
    apply(sample, &report, &env);
    let toml = std::fs::read_to_string(&config).unwrap();
    assert!(toml.contains("scoped_time_and_uuid"), "{toml}");
    assert_eq!(
        toml.matches("<TIME>").count(),
        1,
        "one rule, widened: {toml}"
    );
    drop((env, ci));
    r.fake.stop();
    let again = r.sample.run(&["-E", both], &r.env(&[("CI", "true")]));
    assert_eq!(again.code, Some(0), "{}", again.stderr);
    assert_eq!(again.report["counts"]["hits"], 2, "{}", again.report);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sdk_option_rekeys_keeping_the_answer_and_a_new_prompt_is_refused() {
    let filter = "test(=shape_streams_a_greeting)";
    let Some(r) = Recorded::new("0.1.38", filter).await else {
        return;
    };
    let (sample, fake, env) = (&r.sample, &r.fake, r.env(&[]));
    sample.commit_all();
    let cassette = sample.cassette("sample--volatile--shape_streams_a_greeting", "openai");
    let before = read_json(&cassette);

    // The SDK's stream_options asks for a usage chunk the recording lacks: semantic, and
    // rekey keeps the cassette as it was.
    let usage = r.env(&[("SAMPLE_USAGE", "1")]);
    let more = sample.run(&["-E", filter], &usage);
    assert_eq!(classes(&more.report), ["semantic"], "{}", more.report);
    let field = &more.report["missing"][0]["values"][0];
    assert_eq!(field["field"], "/body/stream_options", "{field}");
    assert_eq!(field["class"], "semantic");
    let more_report = more.report_path.to_str().unwrap().to_string();
    let no = sample.llmreplay_with(&["rekey", "--report", &more_report], &usage);
    assert_eq!(no.code, Some(1), "{}", no.stderr);
    assert!(
        no.stderr
            .contains("semantic: what is asked changed (/body/stream_options)"),
        "{}",
        no.stderr
    );
    assert_eq!(read_json(&cassette), before);

    // The same call with `n=1`, its default made explicit: a miss of SDK shape.
    let mut usage = env.clone();
    usage.push(("SAMPLE_N", "1"));
    let missed = sample.run(&["-E", filter], &usage);
    assert_ne!(missed.code, Some(0), "{}", missed.stderr);
    assert_eq!(classes(&missed.report), ["sdk_shape"], "{}", missed.report);
    let field = &missed.report["missing"][0]["values"][0];
    assert_eq!(field["field"], "/body/n", "{field}");
    assert_eq!(field["class"], "sdk_shape");
    let report = missed.report_path.to_str().unwrap().to_string();

    // Never under CI.
    let mut ci = usage.clone();
    ci.push(("CI", "true"));
    let refused = sample.llmreplay_with(&["rekey", "--report", &report], &ci);
    assert_eq!(refused.code, Some(2), "{}", refused.stderr);
    assert!(
        refused.stderr.contains("never runs under CI"),
        "{}",
        refused.stderr
    );
    assert_eq!(read_json(&cassette), before);

    // A new prompt is semantic: refused, the cassette as it was.
    let mut other = usage.clone();
    other.push(("SAMPLE_PROMPT", "Stream a farewell"));
    let semantic = sample.run(&["-E", filter], &other);
    assert_eq!(
        classes(&semantic.report),
        ["semantic"],
        "{}",
        semantic.report
    );
    let semantic_report = semantic.report_path.to_str().unwrap();
    let no = sample.llmreplay_with(&["rekey", "--report", semantic_report], &other);
    assert_eq!(no.code, Some(1), "{}", no.stderr);
    assert!(
        no.stderr.contains("refused: ")
            && no
                .stderr
                .contains("semantic: what is asked changed (/body/messages/0/content"),
        "{}",
        no.stderr
    );
    assert_eq!(read_json(&cassette), before);

    // Re-keyed: the new request and key, the answer byte for byte, and the test replays.
    let rekeyed = sample.llmreplay_with(&["rekey", "shape_streams", "--report", &report], &usage);
    assert_eq!(rekeyed.code, Some(0), "{}", rekeyed.stderr);
    assert!(
        rekeyed.stderr.contains("re-keyed: sample::volatile$shape_streams_a_greeting  openai POST /v1/chat/completions (+/body/n); answer unchanged"),
        "{}",
        rekeyed.stderr
    );
    let after = read_json(&cassette);
    let (old, new) = (&before["interactions"][0], &after["interactions"][0]);
    assert_eq!(new["response"], old["response"]);
    assert_eq!(new["seal"], old["seal"]);
    assert_ne!(new["key"], old["key"]);
    assert_eq!(new["request"]["body"]["n"], 1);
    let replayed = sample.run(&["-E", filter], &usage);
    assert_eq!(replayed.code, Some(0), "{}", replayed.stderr);
    assert_eq!(fake.received().len(), 1, "one call, when it was recorded");

    // A change of its own for review and the PR: request only.
    let list = sample.llmreplay(&["review", "--list"]);
    assert!(
        list.stdout.contains("[request only]"),
        "{}\n{}",
        list.stdout,
        list.stderr
    );
    let markdown = sample.llmreplay(&["diff", "--format", "markdown"]);
    assert!(
        markdown
            .stdout
            .contains("1 recording re-keyed after a client change, answers unchanged"),
        "{}",
        markdown.stdout
    );
}

/// A test that streams a greeting and a farewell, then the greeting twice (the second with
/// `n=1`): the second call's closest recording is the greeting the first call replayed.
/// `rekey` refuses to take it, so the first call still replays, and the cassette stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rekey_never_takes_a_recording_another_call_of_the_run_replayed() {
    let filter = "test(=shape_streams_twice)";
    let Some(r) = Recorded::new("0.1.41", filter).await else {
        return;
    };
    let sample = &r.sample;
    let cassette = sample.cassette("sample--volatile--shape_streams_twice", "openai");
    let before = read_json(&cassette);
    let env = r.env(&[
        ("SAMPLE_N", "1"),
        ("SAMPLE_SECOND_PROMPT", "Stream a greeting"),
    ]);
    let missed = sample.run(&["-E", filter], &env);
    assert_eq!(missed.report["counts"]["hits"], 1, "{}", missed.report);
    assert_eq!(classes(&missed.report), ["sdk_shape"], "{}", missed.report);
    let report = missed.report_path.to_str().unwrap();
    let rekey = sample.llmreplay_with(&["rekey", "--report", report], &env);
    assert_eq!(rekey.code, Some(1), "{}", rekey.stderr);
    assert!(
        rekey
            .stderr
            .contains("its closest recording (#1) answered another call of this run"),
        "{}",
        rekey.stderr
    );
    assert_eq!(read_json(&cassette), before);
}

/// A value of no known shape that differs between two runs of the same code is volatile too:
/// the second run's report says so, with a rule that replaces just that word.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_that_differs_between_two_runs_of_the_same_code_is_volatile() {
    let filter = "test(=drifting_word)";
    let Some(mut r) = Recorded::new("0.1.39", filter).await else {
        return;
    };
    r.fake.stop();
    let (sample, env) = (&r.sample, r.env(&[]));
    let report = sample.scratch().join("report.json");
    let first = sample.run_reporting(&report, &["-E", filter], &env);
    assert_eq!(
        classes(&first.report),
        ["semantic"],
        "one run tells nothing: {}",
        first.report
    );
    let second = sample.run_reporting(&report, &["-E", filter], &env);
    assert_eq!(classes(&second.report), ["volatile"], "{}", second.report);
    assert_eq!(
        second.report["missing"][0]["rules"][0]["pattern"], r"(Tell me about )[a-z]{8}( please)",
        "{}",
        second.report
    );
    apply(sample, report.to_str().unwrap(), &env);
    let mut ci = env.to_vec();
    ci.push(("CI", "true"));
    let again = sample.run(&["-E", filter], &ci);
    assert_eq!(again.code, Some(0), "{}", again.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_sdks_traces_are_telemetry_and_its_run_replays_offline_with_no_miss() {
    let Some(python) = sdk_python("agents") else {
        return;
    };
    let ca = TestCa::new("agents");
    let fake = FakeProvider::start().await;
    let tls = FakeProvider::start_tls(&ca).await;
    let sample = Sample::capture();
    ca.trusted_by(&sample.root, sample.scratch(), "");
    let scripts = scripts();
    let out = sample.scratch().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let env = [
        ("SAMPLE_PYTHON", python.to_str().unwrap()),
        ("SAMPLE_SCRIPTS", scripts.as_str()),
        ("SAMPLE_OUT", out.to_str().unwrap()),
        ("SAMPLE_AGENTS", "1"),
        // What a developer records with; the daemon forwards it and writes it nowhere.
        ("OPENAI_API_KEY", "sk-test-agents-not-real"),
    ];
    let filter = "test(=agent_with_tracing)";
    let openai = format!("openai={}", fake.url());
    let traces = format!("api.openai.com=https://127.0.0.1:{}", tls.addr.port());
    let record = [
        "--record",
        "-E",
        filter,
        "--upstream",
        &openai,
        "--upstream",
        &traces,
    ];
    let recorded = sample.run(&record, &env);
    assert_eq!(recorded.code, Some(0), "{}", recorded.stderr);
    let ingested: Vec<_> = tls
        .received()
        .into_iter()
        .filter(|r| r.path == "/v1/traces/ingest")
        .collect();
    assert!(!ingested.is_empty(), "the SDK posted its traces");
    let answer = std::fs::read_to_string(out.join("agents")).unwrap();
    let trace_id = serde_json::from_str::<Value>(&answer).unwrap()["trace_id"]
        .as_str()
        .unwrap()
        .to_string();
    let cassette = sample
        .root
        .join("tests/cassettes/capture--capture--agent_with_tracing/openai.json");
    let text = std::fs::read_to_string(&cassette).unwrap();
    let kept = read_json(&cassette);
    let telemetry: Vec<&Value> = kept["interactions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["request"]["path"] == "/v1/traces/ingest")
        .collect();
    assert_eq!(
        telemetry.len(),
        1,
        "one recording a test, whatever the batches: {text}"
    );
    assert!(telemetry[0]["request"].get("body").is_none(), "{text}");
    assert!(!text.contains(&trace_id), "no trace in the cassette");

    // Replay, offline: fresh trace ids, answered here, never missed.
    let (seen, seen_tls) = (fake.received().len(), tls.received().len());
    let mut ci = env.to_vec();
    ci.push(("CI", "true"));
    let replayed = sample.run(&["-E", filter, "--deny", "unused"], &ci);
    assert_eq!(replayed.code, Some(0), "{}", replayed.stderr);
    assert_eq!(
        replayed.report["counts"]["misses"], 0,
        "{}",
        replayed.report
    );
    assert!(
        replayed.report["counts"]["telemetry"].as_u64().unwrap() >= 1,
        "{}",
        replayed.report
    );
    assert!(
        replayed.stderr.contains("telemetry answered here"),
        "{}",
        replayed.stderr
    );
    assert_eq!(
        (fake.received().len(), tls.received().len()),
        (seen, seen_tls)
    );
    assert_eq!(
        std::fs::read_to_string(out.join("agents")).unwrap().len(),
        answer.len()
    );
}

/// Paths `[telemetry]` names, of any provider, are telemetry too: recorded once a test, without
/// their bodies; in replay answered with the recorded status whatever they send, or with a 204
/// when none was recorded; never a miss. Its `*` stays within one segment of the path: a path
/// one segment deeper is an ordinary call, and misses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configured_telemetry_paths_are_answered_whatever_their_body() {
    use crate::support::{http, Serve};
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("llmreplay.toml"),
        "[providers.tracer]\nkind = \"http\"\nupstream = \"https://tracer.example\"\n\n[telemetry]\npaths = [\"/tools/ingest/*\"]\n",
    )
    .unwrap();
    let fake = FakeProvider::start().await;
    let test = "traces$batches";
    let rec = Serve::recording(dir.path(), &format!("tracer={}", fake.url()));
    let url = format!("{}/tracer/tools/ingest/batch", rec.for_test(test));
    for run in ["run-1", "run-2"] {
        let sent = http()
            .post(&url)
            .json(&serde_json::json!({"id": run}))
            .send();
        assert_eq!(sent.await.unwrap().status(), 200);
    }
    assert!(rec.stop().status.success());
    assert_eq!(fake.received().len(), 2, "both batches reach the sink");
    let slug = cassettes::Slug::from_test_id(&cassettes::TestId::new(test));
    let text =
        std::fs::read_to_string(dir.path().join("c").join(slug.as_str()).join("tracer.json"))
            .unwrap();
    let kept: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(kept["interactions"].as_array().unwrap().len(), 1, "{text}");
    // The request is kept without what it reported (this sink echoes it in its answer).
    assert!(
        kept["interactions"][0]["request"].get("body").is_none(),
        "{text}"
    );

    let replay = Serve::replaying(dir.path());
    let url = format!("{}/tracer/tools/ingest/batch", replay.for_test(test));
    for run in ["run-3", "run-4", "run-5"] {
        let sent = http()
            .post(&url)
            .json(&serde_json::json!({"id": run}))
            .send();
        assert_eq!(sent.await.unwrap().status(), 200);
    }
    let other = format!(
        "{}/tracer/tools/ingest/never-recorded",
        replay.for_test(test)
    );
    let sent = http().post(&other).body("anything").send().await.unwrap();
    assert_eq!(sent.status(), 204);
    let deeper = format!("{}/tracer/tools/ingest/batch/one", replay.for_test(test));
    let sent = http().post(&deeper).body("anything").send().await.unwrap();
    assert!(!sent.status().is_success(), "{}", sent.status());
    let journal = replay.journal().await;
    let outcomes: Vec<&str> = journal
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(
        outcomes,
        ["telemetry", "telemetry", "telemetry", "telemetry", "miss"],
        "{journal}"
    );
    let stopped = replay.stop();
    assert!(
        !stopped.status.success(),
        "the deeper path missed: {}",
        stopped.stderr
    );
    assert!(
        stopped.stderr.contains("4 telemetry answered here"),
        "{}",
        stopped.stderr
    );
    assert_eq!(fake.received().len(), 2, "replay never reaches the sink");
}

/// Langfuse's trace export (OpenTelemetry, as its Python SDK 3+ sends it) and its ingestion
/// endpoint are telemetry of any HTTP API with no setting: new spans replay with no miss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn langfuse_traces_are_telemetry_by_default() {
    use crate::support::{http, Serve};
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("llmreplay.toml"),
        "[providers.langfuse]\nkind = \"http\"\nupstream = \"https://cloud.langfuse.com\"\n",
    )
    .unwrap();
    let fake = FakeProvider::start().await;
    let test = "traces$langfuse";
    let paths = [
        "/langfuse/api/public/otel/v1/traces",
        "/langfuse/api/public/ingestion",
    ];
    let rec = Serve::recording(dir.path(), &format!("langfuse={}", fake.url()));
    for path in paths {
        let url = format!("{}{path}", rec.for_test(test));
        http()
            .post(&url)
            .body(vec![0x0a, 0x01, 0x02])
            .send()
            .await
            .unwrap();
    }
    assert!(rec.stop().status.success());
    assert_eq!(
        fake.received().len(),
        2,
        "both reach Langfuse while recording"
    );
    let replay = Serve::replaying(dir.path());
    for path in paths {
        let url = format!("{}{path}", replay.for_test(test));
        // Answered here, as recorded or with 204, whatever the new spans hold.
        http()
            .post(&url)
            .body(vec![0x0a, 0x09, 0x09, 0x09])
            .send()
            .await
            .unwrap();
    }
    let journal = replay.journal().await;
    let outcomes: Vec<&str> = journal
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["telemetry", "telemetry"], "{journal}");
    assert!(replay.stop().status.success());
}
