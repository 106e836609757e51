//! How two runs' sequences of tool calls are compared (`[drift] trajectory`), in the modes
//! agent evaluation tools use for trajectories: the same calls in the same order, the same
//! calls in any order, or only calls the base made, or at least every call it made.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How a test's tool calls must compare with the base's for its trajectory to be unchanged.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SequenceMode {
    /// The same tools, in the same order.
    #[default]
    Strict,
    /// The same tools, each as many times, in any order.
    Unordered,
    /// No tool the base did not call (as many times at most), in any order.
    Subset,
    /// Every tool the base called (as many times at least), in any order, and others.
    Superset,
}

impl SequenceMode {
    /// Its name in `llmreplay.toml`.
    pub fn as_str(self) -> &'static str {
        match self {
            SequenceMode::Strict => "strict",
            SequenceMode::Unordered => "unordered",
            SequenceMode::Subset => "subset",
            SequenceMode::Superset => "superset",
        }
    }

    /// Whether `now` holds against `base` in this mode.
    pub fn holds<T: Ord>(self, base: &[T], now: &[T]) -> bool {
        let within = |small: &[T], large: &[T]| {
            let (small, large) = (counted(small), counted(large));
            small
                .iter()
                .all(|(item, n)| large.get(item).is_some_and(|m| m >= n))
        };
        match self {
            SequenceMode::Strict => base == now,
            SequenceMode::Unordered => counted(base) == counted(now),
            SequenceMode::Subset => within(now, base),
            SequenceMode::Superset => within(base, now),
        }
    }
}

/// Each item with the number of times it comes.
fn counted<T: Ord>(items: &[T]) -> BTreeMap<&T, usize> {
    let mut out = BTreeMap::new();
    for item in items {
        *out.entry(item).or_default() += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_mode_judges_reordered_dropped_added_and_repeated_calls() {
        let base = ["search", "weather", "search"];
        // (now, strict, unordered, subset, superset)
        let cases: [(&[&str], [bool; 4]); 6] = [
            (&["search", "weather", "search"], [true, true, true, true]),
            (&["weather", "search", "search"], [false, true, true, true]),
            (&["search", "weather"], [false, false, true, false]),
            (
                &["search", "weather", "search", "calc"],
                [false, false, false, true],
            ),
            (
                &["search", "forecast", "search"],
                [false, false, false, false],
            ),
            (
                &["search", "weather", "weather"],
                [false, false, false, false],
            ),
        ];
        let modes = [
            SequenceMode::Strict,
            SequenceMode::Unordered,
            SequenceMode::Subset,
            SequenceMode::Superset,
        ];
        for (now, expected) in cases {
            for (mode, holds) in modes.iter().zip(expected) {
                assert_eq!(mode.holds(&base, now), holds, "{mode:?} {now:?}");
            }
        }
    }

    #[test]
    fn names_read_back_from_the_configuration() {
        for mode in ["strict", "unordered", "subset", "superset"] {
            let parsed: SequenceMode = serde_json::from_str(&format!("\"{mode}\"")).unwrap();
            assert_eq!(parsed.as_str(), mode);
        }
        assert!(serde_json::from_str::<SequenceMode>("\"loose\"").is_err());
    }
}
