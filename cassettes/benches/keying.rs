//! The cost of keying a 1 MiB prompt under `[match] replace` patterns near the largest
//! accepted (`MAX_PATTERN_STATES`), on the input that is worst for each: the same letter again
//! and again, a near match at every position. Rounds run one after the other, so the later
//! ones meet a warm cache (where a cache too small made them slowest). Prints the median and
//! the worst of 7 per pattern, and that the patterns over the limit are refused.
//!
//!   cargo bench -p llmreplay-cassettes --bench keying

use llmreplay_cassettes::{Key, Normalizer, ReplaceRule};
use std::time::{Duration, Instant};

fn main() {
    let prompt = "a".repeat(1 << 20);
    let body = serde_json::json!({"model": "m", "messages": [{"role": "user", "content": prompt}]})
        .to_string();
    let rule = |pattern: &str| ReplaceRule {
        pattern: pattern.into(),
        replacement: "x".into(),
        tests: vec![],
    };
    for pattern in [
        r"a{990}b",
        r"(?:a{1,5}){110}b",
        r"(?:a{1,3}){196}b",
        r"(?:(?:a{9}){9}){12}b",
        r"(?:a|ab|abc){195}d",
        r"\d{4}-\d{2}-\d{2}T[0-9:.]+Z",
    ] {
        let n = Normalizer::new(&[], &[rule(pattern)]).expect("accepted");
        let test = llmreplay_cassettes::TestId::new("t");
        let mut times: Vec<Duration> = (0..7)
            .map(|_| {
                let started = Instant::now();
                let request = n.for_test(&test).request(
                    "POST",
                    "/v1/chat/completions",
                    None,
                    None,
                    body.as_bytes(),
                    &[],
                );
                std::hint::black_box(Key::of(&request));
                started.elapsed()
            })
            .collect();
        times.sort();
        println!(
            "{pattern:32} 1 MiB prompt keyed in {:?} (median of 7), {:?} at worst",
            times[3], times[6]
        );
    }
    for pattern in [r"(?:(?:(?:a{20}){20}){20})b", r"a{1000}b"] {
        let refused = Normalizer::new(&[], &[rule(pattern)]).is_err();
        println!("{pattern:32} refused: {refused}");
    }
}
