//! How fresh recordings are: each interaction's recorded date, or the later date on which the
//! live provider gave an answer no code could tell from it (`rerun --mark-verified`). A
//! recording neither recorded nor verified within a given age is stale; one of before dates
//! were kept has no date, and counts as stale.

use cassettes::{Slug, TestId};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, SystemTime};

/// An age as people write it (`30d`, `2w`, `12h`), for `--deny stale=` and `status --stale`.
pub(crate) fn max_age(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim())
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| format!("{text:?} is no age: write it as 30d, 2w or 12h"))
}

/// The least fresh date of the recordings in `folder` (none when one has no date), if it has
/// any recording. A file that does not parse is left to the checks that name it.
pub(crate) fn oldest_in(folder: &Path) -> Option<Option<String>> {
    let mut oldest: Option<Option<String>> = None;
    for path in cassettes::json_files(folder).ok()? {
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let Ok(dates) = cassettes::clock::fresh_dates(&text) else {
            continue;
        };
        for date in dates {
            oldest = Some(match oldest {
                None => date,
                Some(None) => None,
                Some(Some(was)) => date.map(|d| d.min(was)),
            });
        }
    }
    oldest
}

/// Each of `tests` with recordings under `cassette_dir`: its least fresh date.
pub(crate) fn fresh_of(
    cassette_dir: &Path,
    tests: &BTreeSet<TestId>,
) -> BTreeMap<String, Option<String>> {
    tests
        .iter()
        .filter_map(|t| {
            let folder = cassette_dir.join(Slug::from_test_id(t).as_str());
            oldest_in(&folder).map(|date| (t.as_str().to_string(), date))
        })
        .collect()
}

/// Keeps the less fresh of two dates of one test (merging partitions' reports).
pub(crate) fn keep_older(
    fresh: &mut BTreeMap<String, Option<String>>,
    test: String,
    date: Option<String>,
) {
    match fresh.get_mut(&test) {
        None => {
            fresh.insert(test, date);
        }
        Some(was) => {
            *was = match (was.take(), date) {
                (Some(a), Some(b)) => Some(a.min(b)),
                _ => None,
            }
        }
    }
}

/// A test whose least fresh recording is older than the gate allows.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Stale {
    pub test: String,
    /// How old, if its date is known.
    pub age: Option<Duration>,
}

impl std::fmt::Display for Stale {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.age {
            Some(age) => write!(
                f,
                "{} ({})",
                crate::render::term(&self.test),
                age_words(age)
            ),
            None => write!(
                f,
                "{} (no usable date: none kept, garbled, or ahead of this clock)",
                crate::render::term(&self.test)
            ),
        }
    }
}

/// The tests of `fresh` with a recording older than `max` at `now`, oldest first.
pub(crate) fn stale_tests(
    fresh: &BTreeMap<String, Option<String>>,
    max: Duration,
    now: SystemTime,
) -> Vec<Stale> {
    let mut out: Vec<Stale> = fresh
        .iter()
        .filter_map(|(test, date)| {
            // A date that cannot be judged is stale, as none is.
            let age = date.as_deref().and_then(|d| age_at(d, now));
            let stale = age.is_none_or(|a| a > max);
            stale.then(|| Stale {
                test: test.clone(),
                age,
            })
        })
        .collect();
    out.sort_by(|a, b| {
        b.age
            .unwrap_or(Duration::MAX)
            .cmp(&a.age.unwrap_or(Duration::MAX))
    });
    out
}

/// How long before `now` a recording's date is: none for a date that is no date, or that is
/// further ahead of `now` than another machine's clock could be (a day); a date ahead by less
/// is no age at all.
pub(crate) fn age_at(date: &str, now: SystemTime) -> Option<Duration> {
    let at = humantime::parse_rfc3339(date).ok()?;
    match now.duration_since(at) {
        Ok(age) => Some(age),
        Err(ahead) if ahead.duration() <= Duration::from_secs(86_400) => Some(Duration::ZERO),
        Err(_) => None,
    }
}

/// An age in the largest whole unit: "45 days", "3 hours", "under a minute".
pub(crate) fn age_words(age: Duration) -> String {
    let secs = age.as_secs();
    let (n, unit) = match secs {
        s if s >= 86_400 => (s / 86_400, "day"),
        s if s >= 3_600 => (s / 3_600, "hour"),
        s if s >= 60 => (s / 60, "minute"),
        _ => return "under a minute".into(),
    };
    format!("{} old", crate::render::plural(n as usize, unit))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_as_written_and_tests_past_them() {
        assert_eq!(max_age("30d"), Ok(Duration::from_secs(30 * 86_400)));
        assert_eq!(max_age("2w"), Ok(Duration::from_secs(14 * 86_400)));
        assert!(max_age("0d").is_err());
        assert!(max_age("a month-ish").unwrap_err().contains("30d"));
        let now = humantime::parse_rfc3339("2026-11-27T00:00:00Z").unwrap();
        let fresh: BTreeMap<String, Option<String>> = [
            ("new", Some("2026-11-20T00:00:00Z")),
            ("old", Some("2026-09-28T00:00:00Z")),
            ("undated", None),
            ("skewed", Some("2026-11-27T00:05:00Z")),
            ("ahead", Some("9999-01-01T00:00:00Z")),
            ("garbled", Some("yesterday")),
        ]
        .into_iter()
        .map(|(t, d)| (t.to_string(), d.map(str::to_string)))
        .collect();
        let stale = stale_tests(&fresh, max_age("30d").unwrap(), now);
        let named: Vec<String> = stale.iter().map(|s| s.to_string()).collect();
        assert_eq!(
            named,
            [
                "ahead (no usable date: none kept, garbled, or ahead of this clock)",
                "garbled (no usable date: none kept, garbled, or ahead of this clock)",
                "undated (no usable date: none kept, garbled, or ahead of this clock)",
                "old (60 days old)"
            ]
        );
        // A date edited by hand (the seal covers only the answer) must not make a recording
        // look fresh, nor hide another's date.
        let folder = tempfile::tempdir().unwrap();
        let file = |recorded: &str, verified: &str| {
            format!(r#"{{"recorded_at":"{recorded}","verified_at":"{verified}"}}"#)
        };
        std::fs::write(
            folder.path().join("openai.json"),
            format!(
                r#"{{"interactions":[{},{}]}}"#,
                file("2024-01-01T00:00:00Z", "zzz"),
                file("2026-11-20T00:00:00Z", "0")
            ),
        )
        .unwrap();
        assert_eq!(
            oldest_in(folder.path()),
            Some(Some("2024-01-01T00:00:00Z".to_string()))
        );
        let mut merged = BTreeMap::new();
        keep_older(&mut merged, "t".into(), Some("2026-11-01T00:00:00Z".into()));
        keep_older(&mut merged, "t".into(), Some("2026-10-01T00:00:00Z".into()));
        assert_eq!(merged["t"].as_deref(), Some("2026-10-01T00:00:00Z"));
        keep_older(&mut merged, "t".into(), None);
        assert_eq!(merged["t"], None, "an undated one wins");
    }
}
