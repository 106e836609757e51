//! What a recording run spends, and `--max-spend`: each answer saved is priced as its exchange
//! ends (a stream once it ended), from the model and usage it reported; once the sum reaches
//! the cap, no request is sent upstream again. A request whose recording is being replaced is
//! judged before it is sent, by what that recording cost. Replays are priced by the report,
//! at the run's end, never here: this is only on the path of requests that go upstream.

use ledger::{Money, Priced, Prices, Tally};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

/// The run's prices, cap and spend so far.
#[derive(Debug, Default)]
pub struct Spend {
    prices: Prices,
    cap: Option<Money>,
    /// The flag that set the cap, as messages name it: `--max-spend` unless said otherwise.
    cap_flag: Option<&'static str>,
    /// The priced answers' sum, in picodollars: read on every forward, so an atomic.
    spent: AtomicU64,
    tally: Mutex<Tally>,
    refused: AtomicUsize,
}

impl Spend {
    /// Spend priced by `prices`, held to `cap` if any.
    pub fn new(prices: Prices, cap: Option<Money>) -> Spend {
        Spend {
            prices,
            cap,
            ..Spend::default()
        }
    }

    /// Held to `cap` as well (the lower of the two), named `flag` in what is said when it
    /// refuses; `rerun --budget` is also a cap on what its answers cost.
    pub fn capped_by(mut self, cap: Money, flag: &'static str) -> Spend {
        if self.cap.is_none_or(|c| cap < c) {
            self.cap = Some(cap);
            self.cap_flag = Some(flag);
        }
        self
    }

    /// The prices.
    pub fn prices(&self) -> &Prices {
        &self.prices
    }

    /// `--max-spend`.
    pub fn cap(&self) -> Option<Money> {
        self.cap
    }

    /// Notes an answer saved from upstream for `provider`.
    pub fn recorded(&self, provider: &str, model: Option<&str>, usage: Option<&serde_json::Value>) {
        let priced = self.prices.price(provider, model, usage);
        if let Priced::Cost(m) = priced {
            // Held at the largest sum: a wrapped one would read as little spent, and let the
            // run past its cap.
            let _ = self
                .spent
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |s| {
                    Some(s.saturating_add(m.pico()))
                });
        }
        self.tally.lock().expect("spend lock").add(priced);
    }

    /// What the saved answers cost so far.
    pub fn spent(&self) -> Money {
        Money::from_pico(self.spent.load(Ordering::Relaxed))
    }

    /// The saved answers, priced and not.
    pub fn tally(&self) -> Tally {
        self.tally.lock().expect("spend lock").clone()
    }

    /// Requests refused for the cap.
    pub fn refused(&self) -> usize {
        self.refused.load(Ordering::Relaxed)
    }

    /// Whether a request may go upstream: refused, with what to tell its client, once the
    /// spend reached the cap, or when `estimate` (what the recording it replaces cost) would
    /// take it past.
    pub fn allow(&self, estimate: Option<Money>) -> Result<(), String> {
        let Some(cap) = self.cap else {
            return Ok(());
        };
        let spent = self.spent();
        let flag = self.cap_flag.unwrap_or("--max-spend");
        let why = if spent >= cap {
            format!("this run spent {spent} of its {flag} {cap}")
        } else {
            match estimate {
                Some(e) if spent.saturating_add(e) > cap => format!(
                    "this run spent {spent} of its {flag} {cap}, and this request's recording cost {e} when it was recorded, which would pass it"
                ),
                _ => return Ok(()),
            }
        };
        self.refused.fetch_add(1, Ordering::Relaxed);
        Err(format!(
            "cargo-llmreplay: not sent upstream: {why}. What was recorded before is kept; raise the cap ({flag} {}USD) or record the rest in another run",
            suggested(cap)
        ))
    }
}

/// A cap twice as high, in whole dollars when it is over one.
fn suggested(cap: Money) -> String {
    let doubled = cap.micros().saturating_mul(2).max(1_000_000);
    let dollars = doubled.div_ceil(1_000_000);
    dollars.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// gpt-4o-mini: 1000 prompt tokens at 0.15 and 100 out at 0.6 cost 210 micro-dollars.
    #[test]
    fn the_cap_refuses_once_reached_and_before_an_estimate_would_pass_it() {
        let spend = Spend::new(Prices::vendored(), Some(Money::from_micros(500)));
        let usage = json!({"prompt_tokens": 1000, "completion_tokens": 100});
        assert_eq!(spend.allow(None), Ok(()));
        spend.recorded("openai", Some("gpt-4o-mini"), Some(&usage));
        spend.recorded("openai", Some("gpt-4o-mini"), Some(&usage));
        assert_eq!(spend.spent(), Money::from_micros(420));
        let e = spend.allow(Some(Money::from_micros(210))).unwrap_err();
        assert!(e.contains("$0.00042 of its --max-spend $0.0005"), "{e}");
        assert!(e.contains("recording cost $0.00021"), "{e}");
        assert_eq!(spend.allow(Some(Money::from_micros(80))), Ok(()));
        spend.recorded("openai", Some("my-finetune"), Some(&usage));
        spend.recorded("openai", Some("gpt-4o-mini"), Some(&usage));
        let e = spend.allow(None).unwrap_err();
        assert!(
            e.contains("this run spent $0.00063 of its --max-spend $0.0005"),
            "{e}"
        );
        assert!(e.contains("--max-spend 1USD"), "{e}");
        assert_eq!(spend.refused(), 2);
        assert_eq!(spend.tally().unpriced.get("my-finetune"), Some(&1));
    }

    /// An answer whose usage prices at the largest amount, then any other, must not wrap the
    /// sum round to little spent.
    #[test]
    fn a_sum_past_the_largest_amount_still_refuses() {
        let spend = Spend::new(Prices::vendored(), Some(Money::from_micros(500)));
        let huge = json!({"prompt_tokens": u64::MAX, "completion_tokens": u64::MAX});
        let usage = json!({"prompt_tokens": 1000, "completion_tokens": 100});
        spend.recorded("openai", Some("gpt-4o-mini"), Some(&huge));
        spend.recorded("openai", Some("gpt-4o-mini"), Some(&usage));
        assert_eq!(spend.spent(), Money::from_pico(u64::MAX));
        assert!(spend.allow(None).is_err());
    }
}
