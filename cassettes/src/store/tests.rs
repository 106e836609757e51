//! The store, its entries and the offline maintenance, on real folders.

use super::*;
use crate::format::RecordOutcome;
use crate::format::{Interaction, RecordingId};
use crate::fs::lock_file;
use crate::maintenance::remove_recordings;
use crate::testing::interaction;
use crate::BLOB_DIR;

/// Records and writes the file at once, as a test's end would: these tests read the files.
trait RecordNow {
    fn record_now(&self, ordinal: usize, x: Interaction) -> Result<RecordOutcome, Error>;
}

impl RecordNow for Entry {
    fn record_now(&self, ordinal: usize, x: Interaction) -> Result<RecordOutcome, Error> {
        let outcome = self.record(ordinal, x)?;
        self.flush()?;
        Ok(outcome)
    }
}

fn file_key(e: &Entry, i: usize) -> Key {
    let c: Cassette = serde_json::from_slice(&std::fs::read(&e.path).unwrap()).unwrap();
    c.interactions[i].key.clone()
}

fn id(key: &Key, ordinal: usize) -> RecordingId {
    RecordingId {
        key: key.clone(),
        ordinal,
    }
}

fn ids() -> (TestId, ProviderName) {
    (TestId::new("crate$t"), ProviderName::new("openai").unwrap())
}

/// The test of [`ids`] with one recording, in a cassette under `dir`; and its key.
fn one_recording(dir: &Path) -> (Arc<Entry>, Key) {
    let (t, p) = ids();
    let a = interaction("a", r#"{"id":"1"}"#);
    let key = a.key.clone();
    let entry = Store::new(dir).entry(&t, &p).unwrap();
    entry.record_now(0, a).unwrap();
    (entry, key)
}

/// Preloading parses each test's own cassettes ahead of its requests, which then replay
/// from them; a folder moved by hand is left to the request, which names it.
#[test]
fn preloaded_cassettes_replay_and_a_moved_folder_is_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let (t, p) = ids();
    let (recorded, key) = one_recording(dir.path());
    let moved = dir.path().join("crate--moved");
    std::fs::create_dir(&moved).unwrap();
    std::fs::copy(&recorded.path, moved.join("openai.json")).unwrap();

    let store = Store::new(dir.path());
    assert_eq!(store.interactions_read(&recorded.path), None);
    store.preload();
    let entry = store.find(t.as_str(), &p).expect("preloaded");
    assert!(entry.state.lock().unwrap().loaded.is_some());
    assert!(store.find("crate$moved", &p).is_none());
    // What was read is told by path, and only what was read whole and sound.
    assert_eq!(store.interactions_read(&recorded.path), Some(1));
    assert_eq!(store.interactions_read(&moved.join("openai.json")), None);
    assert!(entry.next_recorded(&key, false).unwrap().hit.is_some());
    let elsewhere = store.entry(&TestId::new("crate$moved"), &p).unwrap();
    assert!(matches!(
        elsewhere.next_recorded(&key, false),
        Err(Error::MovedByHand { .. })
    ));
}

/// A replay's unused recordings come from the files preloading listed: those of a
/// provider the test no longer calls too, and not a file that appeared after.
#[test]
fn unused_after_preload_are_the_files_it_listed() {
    let dir = tempfile::tempdir().unwrap();
    let (t, p) = ids();
    let (_, key) = one_recording(dir.path());
    let other = ProviderName::new("anthropic").unwrap();
    let dropped = Store::new(dir.path()).entry(&t, &other).unwrap();
    dropped
        .record_now(0, interaction("b", r#"{"id":"2"}"#))
        .unwrap();

    let store = Store::new(dir.path());
    store.preload();
    std::fs::copy(&dropped.path, dropped.path.with_file_name("gemini.json")).unwrap();
    let entry = store.find(t.as_str(), &p).unwrap();
    assert!(entry.next_recorded(&key, false).unwrap().hit.is_some());
    let unused = store.unused_in(&t).unwrap();
    let providers: Vec<&str> = unused.iter().map(|u| u.provider.as_str()).collect();
    assert_eq!(providers, ["anthropic"]);
    // Without preloading, the folder is read when asked.
    let fresh = Store::new(dir.path());
    let providers: Vec<String> = fresh
        .unused_in(&t)
        .unwrap()
        .iter()
        .map(|u| u.provider.as_str().to_string())
        .collect();
    assert_eq!(providers, ["anthropic", "gemini", "openai"]);
}

/// An unused recording is shown by its answer; a tool call's, by the call.
#[test]
fn an_unused_tool_call_reads_as_the_call() {
    let dir = tempfile::tempdir().unwrap();
    let (t, p) = ids();
    let entry = Store::new(dir.path()).entry(&t, &p).unwrap();
    let call = r#"{"choices":[{"message":{"content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},"finish_reason":"tool_calls"}]}"#;
    let mut x = interaction("w", call);
    x.summary = crate::Summary::of(&x.response);
    entry.record_now(0, x).unwrap();
    let unused = Store::new(dir.path()).unused_in(&t).unwrap();
    assert_eq!(
        unused[0].answer.as_deref(),
        Some(r#"tool call: get_weather({"city":"Paris"})"#)
    );
}

#[test]
fn sequence_replace_in_place_and_append() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::new(dir.path());
    let (t, p) = ids();
    let e = store.entry(&t, &p).unwrap();
    let a = interaction("a", r#"{"id":"1","n":1}"#);
    let key = a.key.clone();
    assert_eq!(e.next(&key, false).unwrap().ordinal, 0);
    assert_eq!(e.record_now(0, a).unwrap(), RecordOutcome::Appended);
    assert_eq!(
        e.record_now(1, interaction("a", r#"{"n":2}"#)).unwrap(),
        RecordOutcome::Appended
    );
    assert_eq!(
        e.record_now(0, interaction("b", r#"{"n":3}"#)).unwrap(),
        RecordOutcome::Appended
    );
    let before = std::fs::read(&e.path).unwrap();
    // Only a volatile field differs: nothing is written.
    assert_eq!(
        e.record_now(0, interaction("a", r#"{"id":"9","n":1}"#))
            .unwrap(),
        RecordOutcome::Unchanged
    );
    assert_eq!(std::fs::read(&e.path).unwrap(), before);
    assert_eq!(
        e.record_now(1, interaction("a", r#"{"n":22}"#)).unwrap(),
        RecordOutcome::Replaced
    );

    let fresh = Store::new(dir.path());
    let e = fresh.entry(&t, &p).unwrap();
    assert_eq!(
        &e.next(&key, false).unwrap().hit.unwrap().body[..],
        br#"{"id":"1","n":1}"#
    );
    assert_eq!(
        &e.next(&key, false).unwrap().hit.unwrap().body[..],
        br#"{"n":22}"#
    );
    assert!(
        e.next(&key, false).unwrap().hit.is_none(),
        "a third request has no recording"
    );
    let other = file_key(&e, 2);
    let unused: Vec<_> = fresh
        .unused_in(&t)
        .unwrap()
        .into_iter()
        .map(|u| (u.key, u.ordinal))
        .collect();
    assert_eq!(
        unused,
        vec![(other, 0)],
        "only the recording of prompt b was not replayed"
    );
    assert!(
        e.next(&key, true).unwrap().hit.is_some(),
        "unless repeats are allowed"
    );
    fresh.reset_test(&t);
    assert_eq!(
        e.next(&key, false).unwrap().ordinal,
        0,
        "a retry starts afresh"
    );
    let file: Cassette = serde_json::from_slice(&std::fs::read(&e.path).unwrap()).unwrap();
    assert_eq!(file.interactions.len(), 3);
    assert_eq!(
        file.interactions[2].response.payloads(),
        [serde_json::json!({"n": 3})],
        "order kept"
    );
}

/// A re-recorded test that passed keeps exactly what it recorded, in order; a provider it
/// no longer calls loses its file; a test with an unsaved call keeps everything.
#[test]
fn finishing_a_rerecorded_test_keeps_exactly_its_run() {
    let dir = tempfile::tempdir().unwrap();
    let (t, p) = ids();
    let anthropic = ProviderName::new("anthropic").unwrap();
    let before = Store::new(dir.path());
    let e = before.entry(&t, &p).unwrap();
    for (prompt, answer) in [("a", "1"), ("b", "2"), ("c", "3")] {
        e.record_now(0, interaction(prompt, answer)).unwrap();
    }
    before
        .entry(&t, &anthropic)
        .unwrap()
        .record_now(0, interaction("old", "9"))
        .unwrap();

    // Each run records afresh, in a new store; an unsaved call keeps the old recordings.
    let rerecord = |unsaved: bool| {
        let run = Store::new(dir.path());
        let e = run.entry(&t, &p).unwrap();
        for (prompt, answer) in [("d", "4"), ("a", "11")] {
            let x = interaction(prompt, answer);
            let ordinal = e.next(&x.key, false).unwrap().ordinal;
            e.record(ordinal, x).unwrap();
        }
        if unsaved {
            e.note_unsaved();
        }
        run.finish_test(&t, true).unwrap()
    };
    let kept = rerecord(true);
    assert!(
        kept.kept.as_deref().unwrap().contains("not saved"),
        "{kept:?}"
    );
    assert_eq!((kept.added, kept.replaced, kept.removed), (1, 1, 0));
    assert_eq!(read_cassette(&e.path).unwrap().interactions.len(), 4);

    let done = rerecord(false);
    assert_eq!(done.kept, None);
    let file = read_cassette(&e.path).unwrap();
    let prompts: Vec<_> = file
        .interactions
        .iter()
        .map(|x| x.request.last_user_text().unwrap())
        .collect();
    assert_eq!(prompts, ["d", "a"], "this run's calls, in its order");
    assert_eq!(
        (done.added, done.replaced, done.removed),
        (0, 0, 3),
        "against the file as this run found it: b, c and anthropic's gone"
    );
    assert!(!e.path.with_file_name("anthropic.json").exists());
}

/// A re-record that shifts positions (an old recording trimmed before the new one): what
/// the run recorded is never reported unused after the trim.
#[test]
fn a_trimmed_rerecord_reports_none_of_its_recordings_unused() {
    let dir = tempfile::tempdir().unwrap();
    let (t, p) = ids();
    let old = Store::new(dir.path());
    let e = old.entry(&t, &p).unwrap();
    e.record_now(0, interaction("stale", "1")).unwrap();
    e.record_now(0, interaction("kept", "2")).unwrap();
    let run = Store::new(dir.path());
    let e = run.entry(&t, &p).unwrap();
    for prompt in ["kept", "fresh"] {
        let x = interaction(prompt, "3");
        let ordinal = e.next(&x.key, false).unwrap().ordinal;
        e.record_now(ordinal, x).unwrap();
    }
    let changes = run.finish_test(&t, true).unwrap();
    assert_eq!(changes.removed, 1, "{changes:?}");
    assert_eq!(read_cassette(&e.path).unwrap().interactions.len(), 2);
    assert_eq!(run.unused_in(&t).unwrap(), Vec::new());
}

/// Two runs re-record one test with other prompts at once: whichever ends the test last
/// leaves exactly its own recordings, never a mix, and the other learns that its recordings
/// were superseded; a recording run that nobody overtook is told nothing.
#[test]
fn two_runs_rerecording_at_once_leave_the_last_ones_set() {
    for a_ends_first in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let (t, p) = ids();
        Store::new(dir.path())
            .entry(&t, &p)
            .unwrap()
            .record_now(0, interaction("old", "0"))
            .unwrap();
        let (a, b) = (Store::new(dir.path()), Store::new(dir.path()));
        for (run, name) in [(&a, "A"), (&b, "B")] {
            let e = run.entry(&t, &p).unwrap();
            for n in 0..3 {
                e.record(0, interaction(&format!("{name}{n}"), "1"))
                    .unwrap();
            }
        }
        let (first, last, last_name) = if a_ends_first {
            (&a, &b, "B")
        } else {
            (&b, &a, "A")
        };
        first.finish_test(&t, true).unwrap();
        assert_eq!(first.superseded().unwrap(), vec![]);
        last.finish_test(&t, true).unwrap();
        let path = a.entry(&t, &p).unwrap().path.clone();
        let prompts: Vec<_> = read_cassette(&path)
            .unwrap()
            .interactions
            .iter()
            .map(|x| x.request.last_user_text().unwrap())
            .collect();
        let want: Vec<String> = (0..3).map(|n| format!("{last_name}{n}")).collect();
        assert_eq!(prompts, want, "a_ends_first: {a_ends_first}");
        assert_eq!(first.superseded().unwrap(), vec![(t.clone(), path)]);
        assert_eq!(last.superseded().unwrap(), vec![]);
    }
}

/// Until its test ends, a recording is in the run's spool alone: a run that dies leaves it
/// there, and applying the spool adds every whole recording, removing nothing, and names the
/// tests that never ended.
#[test]
fn a_spool_left_by_a_dead_run_is_applied_for_ended_tests() {
    let dir = tempfile::tempdir().unwrap();
    let cassettes = dir.path().join("cassettes");
    let run_dir = dir.path().join("runs").join("r1");
    let (t, p) = ids();
    let unfinished = TestId::new("crate$killed");
    Store::new(&cassettes)
        .entry(&t, &p)
        .unwrap()
        .record_now(0, interaction("old", "0"))
        .unwrap();
    {
        let spool = crate::spool::Spool::create(&run_dir, &cassettes).unwrap();
        let run = Store::new(&cassettes).with_spool(spool);
        let big = "x".repeat(crate::INLINE_LIMIT + 10);
        run.entry(&t, &p)
            .unwrap()
            .record(0, interaction("new", &format!("{{\"a\":\"{big}\"}}")))
            .unwrap();
        run.entry(&unfinished, &p)
            .unwrap()
            .record(0, interaction("half", "1"))
            .unwrap();
        run.spool().unwrap().ended(&t, "passed").unwrap();
        // While its run lives, nobody else applies the spool.
        assert!(crate::spool::read_unapplied(&run_dir).unwrap().is_none());
        drop(run);
    }
    // The run's process is gone: its lock with it (here, the file closed by hand).
    let left = crate::spool::unapplied_spools(&dir.path().join("runs"), &cassettes).unwrap();
    assert_eq!(left.len(), 1, "{left:?}");
    let applied = crate::spool::apply(&left[0]).unwrap().unwrap();
    assert_eq!(
        applied.applied,
        vec![(unfinished.clone(), 1), (t.clone(), 1)]
    );
    assert_eq!(applied.unfinished, vec![unfinished.clone()]);
    let path = Store::new(&cassettes).entry(&t, &p).unwrap().path.clone();
    let file = crate::read_cassette_with_blobs(&path).unwrap();
    let prompts: Vec<_> = file
        .interactions
        .iter()
        .map(|x| x.request.last_user_text().unwrap())
        .collect();
    assert_eq!(prompts, ["old", "new"], "added, nothing removed");
    assert!(file.interactions[1].recorded_at.is_some());
    assert!(!run_dir.join(crate::spool::SPOOL_FILE).exists());
    assert!(
        crate::spool::unapplied_spools(&dir.path().join("runs"), &cassettes)
            .unwrap()
            .is_empty()
    );
    // Another project's cassettes see none of it.
    assert!(
        crate::spool::unapplied_spools(&dir.path().join("runs"), dir.path())
            .unwrap()
            .is_empty()
    );
}

/// A recording served only through a fault (a cut answer) is used: a trim keeps it, and it
/// is not unused. A passing test that made no call keeps what it had.
#[test]
fn a_fault_served_recording_and_a_silent_test_keep_their_recordings() {
    let dir = tempfile::tempdir().unwrap();
    let (t, p) = ids();
    let x = interaction("cut me", "1");
    Store::new(dir.path())
        .entry(&t, &p)
        .unwrap()
        .record_now(0, x.clone())
        .unwrap();
    let run = Store::new(dir.path());
    let e = run.entry(&t, &p).unwrap();
    assert!(e.serve_fault(&x.key, false).unwrap().is_some());
    let changes = run.finish_test(&t, true).unwrap();
    assert_eq!(changes.removed, 0, "{changes:?}");
    assert_eq!(read_cassette(&e.path).unwrap().interactions.len(), 1);
    assert_eq!(run.unused_in(&t).unwrap(), Vec::new());

    let silent = Store::new(dir.path());
    let changes = silent.finish_test(&t, true).unwrap();
    assert_eq!(changes.removed, 0, "{changes:?}");
    assert_eq!(read_cassette(&e.path).unwrap().interactions.len(), 1);
    assert_eq!(
        silent.unused_in(&t).unwrap().len(),
        1,
        "unused, for prune to take"
    );
}

#[test]
fn corrupt_files_are_reported_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::new(dir.path());
    let (t, p) = ids();
    let e = store.entry(&t, &p).unwrap();
    std::fs::create_dir_all(e.path.parent().unwrap()).unwrap();
    std::fs::write(&e.path, "{\n  \"llmreplay\": 1,\n  oops\n").unwrap();
    let err = e
        .next(&interaction("a", "{}").key, false)
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("openai.json") && err.contains("line 3"),
        "{err}"
    );
    assert!(e.record_now(0, interaction("a", "{}")).is_err());
    assert_eq!(
        std::fs::read_to_string(&e.path).unwrap(),
        "{\n  \"llmreplay\": 1,\n  oops\n"
    );
}

#[test]
fn removing_recordings_takes_exactly_those_or_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t/openai.json");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut c = Cassette::new(&TestId::new("t"), &ProviderName::new("openai").unwrap());
    c.interactions = vec![
        interaction("a", "1"),
        interaction("a", "2"),
        interaction("b", "3"),
    ];
    std::fs::write(&path, c.to_bytes()).unwrap();
    let a = c.interactions[0].key.clone();
    let stale = remove_recordings(&path, &[id(&a, 0), id(&a, 5)]);
    assert!(matches!(stale, Err(Error::Stale { .. })), "{stale:?}");
    assert_eq!(
        read_cassette(&path).unwrap(),
        c,
        "a stale removal changes nothing"
    );
    assert_eq!(remove_recordings(&path, &[id(&a, 1)]).unwrap(), 1);
    let left = read_cassette(&path).unwrap().interactions;
    assert_eq!(left, [c.interactions[0].clone(), c.interactions[2].clone()]);
    let b = c.interactions[2].key.clone();
    remove_recordings(&path, &[id(&a, 0), id(&b, 0)]).unwrap();
    assert!(!path.exists(), "an empty cassette is deleted");
}

/// Blobs are written with their cassette, replaced with it, and removed with the last
/// recording that refers to them, by a re-record or by `prune`.
#[test]
fn blobs_live_and_go_with_their_recordings() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::new(dir.path());
    let entry = store
        .entry(
            &TestId::new("t$speech"),
            &ProviderName::new("openai").unwrap(),
        )
        .unwrap();
    let audio = |byte: u8| {
        let mut x = interaction("speak", "{}");
        let bytes = vec![0x80 | byte; crate::INLINE_LIMIT + 10];
        x.response = crate::RecordedResponse::with_body(200, Default::default(), &bytes);
        (x, crate::body::sha256_hex(&bytes), bytes)
    };
    let blobs = entry.path.parent().unwrap().join(BLOB_DIR);
    let (first, first_sha, _) = audio(1);
    entry.record_now(0, first).unwrap();
    assert!(blobs.join(&first_sha).is_file());
    let (second, second_sha, second_bytes) = audio(2);
    let key = second.key.clone();
    assert_eq!(
        entry.record_now(0, second).unwrap(),
        RecordOutcome::Replaced
    );
    assert!(
        !blobs.join(&first_sha).exists(),
        "the replaced answer's blob"
    );
    assert!(blobs.join(&second_sha).is_file());

    // A fresh run reads the blob back and replays its bytes.
    let fresh = Store::new(dir.path());
    let e = fresh
        .entry(
            &TestId::new("t$speech"),
            &ProviderName::new("openai").unwrap(),
        )
        .unwrap();
    assert_eq!(e.next(&key, false).unwrap().hit.unwrap().body, second_bytes);

    std::fs::write(blobs.join(&second_sha), b"damaged").unwrap();
    let damaged = Store::new(dir.path())
        .entry(
            &TestId::new("t$speech"),
            &ProviderName::new("openai").unwrap(),
        )
        .unwrap()
        .next(&key, false)
        .err()
        .unwrap()
        .to_string();
    assert!(damaged.contains("missing or damaged"), "{damaged}");

    remove_recordings(&entry.path, &[id(&key, 0)]).unwrap();
    assert!(!blobs.exists(), "pruned with the last recording");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]
    /// Any bytes as request and answer, recorded through the store and read back by a fresh
    /// one, replay identical: JSON, text, base64 and blob forms alike.
    #[test]
    fn any_bytes_record_and_replay_identical(
        request in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256),
        answer in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256),
        big in proptest::prelude::any::<bool>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let (test, provider) = (TestId::new("t$bytes"), ProviderName::new("openai").unwrap());
        let mut answer = answer;
        if big {
            answer = answer.repeat(crate::INLINE_LIMIT / answer.len().max(1) + 1);
        }
        let req = crate::Normalizer::plain().request("POST", "/p", None, None, &request, &[]);
        let x = Interaction {
            key: Key::of(&req),
            seal: None,
            request: req,
            response: crate::RecordedResponse::with_body(200, Default::default(), &answer),
            timing: None,
            summary: None,
            recorded_at: None,
            verified_at: None,
            step: None,
        };
        let key = x.key.clone();
        Store::new(dir.path()).entry(&test, &provider).unwrap().record_now(0, x).unwrap();
        let hit = Store::new(dir.path()).entry(&test, &provider).unwrap().next(&key, false).unwrap().hit;
        proptest::prop_assert_eq!(&hit.unwrap().body[..], &answer[..]);
    }
}

/// A folder another process holds delays that folder's recordings alone, then fails
/// naming it; the entry stays usable meanwhile and after.
#[test]
fn a_held_folder_lock_times_out_naming_the_folder() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::new(dir.path()).with_lock_timeout(Duration::from_millis(200));
    let (test, provider) = (
        TestId::new("t$locked"),
        ProviderName::new("openai").unwrap(),
    );
    let entry = store.entry(&test, &provider).unwrap();
    let folder = entry.path.parent().unwrap().to_path_buf();
    std::fs::create_dir_all(&folder).unwrap();
    let held = lock_file(&folder).unwrap();
    held.lock().unwrap();
    let x = interaction("held", "{}");
    let key = x.key.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let writer = entry.clone();
    let handle = std::thread::spawn(move || tx.send(writer.record_now(0, x)).unwrap());
    // While the write waits for the lock, the same entry still answers lookups.
    assert_eq!(entry.next(&key, false).unwrap().ordinal, 0);
    let err = rx.recv().unwrap().unwrap_err().to_string();
    handle.join().unwrap();
    assert!(
        err.contains(&folder.display().to_string()) && err.contains("lock"),
        "{err}"
    );
    held.unlock().unwrap();
    entry.record_now(0, interaction("held", "{}")).unwrap();
}

/// A cassette folder that is a link out of the cassette dir is refused, and nothing is
/// written where it points.
#[cfg(unix)]
#[test]
fn writes_never_leave_the_cassette_dir() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let store = Store::new(dir.path().join("c"));
    let (test, provider) = (
        TestId::new("t$linked"),
        ProviderName::new("openai").unwrap(),
    );
    let entry = store.entry(&test, &provider).unwrap();
    std::fs::create_dir_all(dir.path().join("c")).unwrap();
    std::os::unix::fs::symlink(outside.path(), entry.path.parent().unwrap()).unwrap();
    let err = entry.record_now(0, interaction("x", "{}")).unwrap_err();
    assert!(matches!(err, Error::Outside { .. }), "{err}");
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
}

/// New cassettes are 0666 less the umask, not 0600; a re-record keeps the file's mode.
#[cfg(unix)]
#[test]
fn file_modes_are_ordinary_and_kept() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::new(dir.path());
    let (test, provider) = (TestId::new("t$modes"), ProviderName::new("openai").unwrap());
    let entry = store.entry(&test, &provider).unwrap();
    entry.record_now(0, interaction("a", "{}")).unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    // The umask of this process, read without changing it: a file made with 0666.
    let probe = dir.path().join("probe");
    std::fs::write(&probe, b"").unwrap();
    assert_eq!(mode(&entry.path), mode(&probe));
    assert_ne!(mode(&entry.path), 0o600);
    std::fs::set_permissions(&entry.path, std::fs::Permissions::from_mode(0o640)).unwrap();
    entry.record_now(1, interaction("b", "{}")).unwrap();
    assert_eq!(mode(&entry.path), 0o640, "a re-record keeps the mode");
}

/// Replay keeps no cursor for a key that has no recording: misses take no memory.
#[test]
fn misses_in_replay_take_no_memory() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::new(dir.path());
    let entry = store
        .entry(
            &TestId::new("t$miss"),
            &ProviderName::new("openai").unwrap(),
        )
        .unwrap();
    for i in 0..1000 {
        let x = interaction(&format!("never {i}"), "{}");
        assert!(entry.next_recorded(&x.key, false).unwrap().hit.is_none());
    }
    assert!(entry.state.lock().unwrap().cursors.is_empty());
    let x = interaction("never 1", "{}");
    assert_eq!(entry.next(&x.key, false).unwrap().ordinal, 0);
    assert_eq!(
        entry.next(&x.key, false).unwrap().ordinal,
        1,
        "record modes count"
    );
}

#[test]
fn slug_collisions_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::new(dir.path());
    let p = ProviderName::new("openai").unwrap();
    store.entry(&TestId::new("a$b c"), &p).unwrap();
    let err = store
        .entry(&TestId::new("a$b.c"), &p)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("a$b c") && err.contains("a$b.c"), "{err}");
}

#[test]
fn closest_names_differences() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::new(dir.path());
    let (t, p) = ids();
    let e = store.entry(&t, &p).unwrap();
    e.record_now(0, interaction("hello", "{}")).unwrap();
    let c = e.closest(&interaction("hullo", "{}").request).unwrap();
    assert_eq!(c.differing, vec!["/body/messages/0/content"]);
}

/// A store over its budget unloads the cassettes used least recently; what it unloaded is read
/// again when asked for, and a test whose every recording was used is known to have none
/// unused without reading its file again.
#[test]
fn loaded_cassettes_stay_within_the_budget() {
    let dir = tempfile::tempdir().unwrap();
    let p = ProviderName::new("openai").unwrap();
    let tests: Vec<TestId> = (0..20)
        .map(|i| TestId::new(format!("crate$t{i}")))
        .collect();
    let mut keys = Vec::new();
    {
        let writer = Store::new(dir.path());
        for t in &tests {
            let a = interaction(
                &format!("ask {t}"),
                &format!(r#"{{"answer":"{}"}}"#, "x".repeat(4000)),
            );
            keys.push(a.key.clone());
            writer.entry(t, &p).unwrap().record_now(0, a).unwrap();
        }
    }
    // Room for about three of them.
    let store = Store::new(dir.path()).with_budget(3 * (4096 + 2048));
    for (t, key) in tests.iter().zip(&keys) {
        let entry = store.entry(t, &p).unwrap();
        assert!(entry.next_recorded(key, false).unwrap().hit.is_some());
        assert!(
            store.resident_bytes() <= 4 * (4096 + 2048),
            "{}",
            store.resident_bytes()
        );
    }
    let first = store.entry(&tests[0], &p).unwrap();
    assert!(
        first.state.lock().unwrap().loaded.is_none(),
        "the least recently used went"
    );
    // Read again for a retry: its sequence goes on, so the second call finds no recording.
    assert!(first.next_recorded(&keys[0], false).unwrap().hit.is_none());
    first.state.lock().unwrap().cursors.clear();
    assert!(first.next_recorded(&keys[0], false).unwrap().hit.is_some());
    for t in &tests {
        assert!(store.unused_in(t).unwrap().is_empty());
    }
    assert!(
        store.resident_bytes() <= 4 * (4096 + 2048),
        "the report does not read them all again"
    );
}

#[test]
fn a_test_that_said_it_ended_lets_go_of_its_cassettes() {
    let dir = tempfile::tempdir().unwrap();
    let (t, p) = ids();
    let a = interaction("hello", "{}");
    let key = a.key.clone();
    Store::new(dir.path())
        .entry(&t, &p)
        .unwrap()
        .record_now(0, a)
        .unwrap();
    let store = Store::new(dir.path());
    let entry = store.entry(&t, &p).unwrap();
    assert!(entry.next_recorded(&key, false).unwrap().hit.is_some());
    assert!(store.resident_bytes() > 0);
    store.release_test(&t);
    assert_eq!(store.resident_bytes(), 0);
    // What the report needs stays: the recording counts as used.
    assert!(store.unused_in(&t).unwrap().is_empty());
    // A retry reads it again.
    entry.state.lock().unwrap().cursors.clear();
    assert!(entry.next_recorded(&key, false).unwrap().hit.is_some());
}

/// A test that ends twice in one run (a failed attempt, then a passing retry with other
/// answers) is not superseded by its own second end.
#[test]
fn a_retry_does_not_supersede_its_own_first_attempt() {
    let dir = tempfile::tempdir().unwrap();
    let (t, p) = ids();
    let run = Store::new(dir.path());
    let e = run.entry(&t, &p).unwrap();
    e.record(0, interaction("a", "first")).unwrap();
    run.finish_test(&t, false).unwrap();
    run.reset_test(&t);
    e.record(0, interaction("a", "second")).unwrap();
    e.record(0, interaction("b", "more")).unwrap();
    let changes = run.finish_test(&t, true).unwrap();
    assert_eq!((changes.added, changes.replaced), (1, 1), "{changes:?}");
    assert_eq!(run.superseded().unwrap(), vec![]);
    // Another run that ends the test later does supersede it.
    let other = Store::new(dir.path());
    other
        .entry(&t, &p)
        .unwrap()
        .record(0, interaction("c", "theirs"))
        .unwrap();
    other.finish_test(&t, true).unwrap();
    assert_eq!(run.superseded().unwrap(), vec![(t.clone(), e.path.clone())]);
}

/// Applying a dead run's spool adds what is missing and never replaces a recording made in
/// its place since; a damaged line or an answer edited in the spool is not added, and the
/// spool is kept aside for a look; a spool of a project whose cassettes do not exist yet is
/// nobody else's.
#[test]
fn a_spool_gives_way_to_newer_recordings_and_keeps_its_damage_aside() {
    let dir = tempfile::tempdir().unwrap();
    let cassettes = dir.path().join("cassettes");
    let runs = dir.path().join("runs");
    let run_dir = runs.join("r1");
    let (t, p) = ids();
    {
        let spool = crate::spool::Spool::create(&run_dir, &cassettes).unwrap();
        let run = Store::new(&cassettes).with_spool(spool);
        let e = run.entry(&t, &p).unwrap();
        e.record(0, interaction("same", "stale")).unwrap();
        e.record(0, interaction("edited", "1")).unwrap();
        e.record(0, interaction("fresh", "2")).unwrap();
    }
    // Since the run died, another ended the test with its own answer to "same".
    Store::new(&cassettes)
        .entry(&t, &p)
        .unwrap()
        .record_now(0, interaction("same", "newer"))
        .unwrap();
    // An answer edited in the spool, and a line damaged in its middle.
    let path = run_dir.join(crate::spool::SPOOL_FILE);
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let edited = lines.iter().position(|l| l.contains("edited")).unwrap();
    assert!(lines[edited].contains(r#""body":1"#), "{}", lines[edited]);
    lines[edited] = lines[edited].replace(r#""body":1"#, r#""body":9"#);
    lines.insert(1, "{\"kind\":\"recorded\",\"tes".into());
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();

    let left = crate::spool::unapplied_spools(&runs, &cassettes).unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].damaged, 2, "the torn line and the edited answer");
    let applied = crate::spool::apply(&left[0]).unwrap().unwrap();
    assert_eq!(applied.applied, vec![(t.clone(), 1)]);
    assert_eq!(applied.newer, 1);
    let (kept, n) = applied.damaged.clone().unwrap();
    assert_eq!(n, 2);
    assert!(kept.is_file() && !path.exists());
    let file = read_cassette(&Store::new(&cassettes).entry(&t, &p).unwrap().path).unwrap();
    let answers: Vec<_> = file
        .interactions
        .iter()
        .map(|x| String::from_utf8(x.response.body_bytes().to_vec()).unwrap())
        .collect();
    assert_eq!(answers, ["newer", "2"]);
    assert!(crate::spool::unapplied_spools(&runs, &cassettes)
        .unwrap()
        .is_empty());

    // Two projects whose cassette folders do not exist yet are not the same project.
    let spool = crate::spool::Spool::create(&runs.join("r2"), &dir.path().join("p1/c")).unwrap();
    drop(spool);
    assert!(
        crate::spool::unapplied_spools(&runs, &dir.path().join("p2/c"))
            .unwrap()
            .is_empty()
    );
}

/// A folder the old slug rule named for one test, which is now another test's folder, is not
/// replayed for either, and the error names `status --fix` (not an `mv` that would give the
/// first test's recordings to the second).
#[test]
fn an_old_rule_folder_that_is_another_tests_folder_names_status_fix() {
    let dir = tempfile::tempdir().unwrap();
    let p = ProviderName::new("openai").unwrap();
    let old = TestId::new("chat.test.js > 挨拶 > hello");
    assert_eq!(Slug::legacy_from_test_id(&old).as_str(), "hello");
    std::fs::create_dir(dir.path().join("hello")).unwrap();
    std::fs::write(
        dir.path().join("hello/openai.json"),
        Cassette::new(&old, &p).to_bytes(),
    )
    .unwrap();
    let store = Store::new(dir.path());
    let entry = store.entry(&TestId::new("hello"), &p).unwrap();
    let key = interaction("a", r#"{"id":"1"}"#).key;
    match entry.next_recorded(&key, false) {
        Err(e @ Error::OldRuleFolder { .. }) => {
            assert!(e.to_string().contains("status --fix"), "{e}")
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
}
