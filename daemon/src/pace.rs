//! Paced recording: one key records a whole suite without tripping its provider's limits.
//! `[providers.NAME] max_concurrent` bounds the requests in flight to it (each holds its slot
//! until its answer has been read to the end), `min_interval_ms` spaces their starts, and a 429
//! that says when to come back (`retry-after`, `retry-after-ms`, Gemini's `retryDelay`) is
//! waited out and sent again, within a bound, rather than failing the test. A 429 is still
//! never saved.

use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Mutex, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// The longest a request waits in all for a provider that keeps answering 429 before the 429
/// is passed on; a test's own timeout is usually longer.
pub const MAX_RETRY_WAIT: Duration = Duration::from_secs(60);
/// The most times one request is sent again after a 429.
pub const MAX_RETRIES: u32 = 5;

/// How one provider's requests are paced.
#[derive(Debug)]
pub struct Pace {
    slots: Option<Arc<Semaphore>>,
    interval: Option<Duration>,
    /// When the next request may start.
    next: Mutex<Option<Instant>>,
}

/// A request's place among its provider's: held until its answer is read.
#[derive(Debug)]
pub struct Slot {
    _permit: Option<OwnedSemaphorePermit>,
}

impl Pace {
    /// A pace of at most `max_concurrent` requests at once, started `min_interval` apart;
    /// none when neither is set.
    pub fn new(max_concurrent: Option<usize>, min_interval: Option<Duration>) -> Option<Pace> {
        if max_concurrent.is_none() && min_interval.is_none() {
            return None;
        }
        Some(Pace {
            slots: max_concurrent.map(|n| Arc::new(Semaphore::new(n))),
            interval: min_interval,
            next: Mutex::new(None),
        })
    }

    /// Waits for a slot, then for the interval since the last start.
    pub async fn start(&self) -> Slot {
        let permit = match &self.slots {
            Some(slots) => Some(
                slots
                    .clone()
                    .acquire_owned()
                    .await
                    .expect("a provider's slots are never closed"),
            ),
            None => None,
        };
        if let Some(interval) = self.interval {
            let mut next = self.next.lock().await;
            let now = Instant::now();
            let at = next.map_or(now, |n| n.max(now));
            *next = Some(at + interval);
            drop(next);
            tokio::time::sleep_until(at).await;
        }
        Slot { _permit: permit }
    }
}

/// How long a 429's headers (or Gemini's body) ask the client to wait, if they say.
pub fn retry_after(headers: &http::HeaderMap, body: Option<&[u8]>) -> Option<Duration> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    // One that says nothing usable (NaN, -1) gives way to the next way of saying it.
    if let Some(wait) = text("retry-after-ms")
        .and_then(|v| v.trim().parse::<f64>().ok())
        .and_then(|ms| finite(ms / 1000.0))
    {
        return Some(wait);
    }
    if let Some(value) = text("retry-after") {
        let value = value.trim();
        if let Ok(seconds) = value.parse::<f64>() {
            return finite(seconds);
        }
        if let Ok(at) = httpdate::parse_http_date(value) {
            return Some(
                at.duration_since(std::time::SystemTime::now())
                    .unwrap_or_default(),
            );
        }
    }
    // Gemini: {"error": {"details": [{"@type": "...RetryInfo", "retryDelay": "30s"}]}}.
    let error: serde_json::Value = serde_json::from_slice(body?).ok()?;
    error["error"]["details"]
        .as_array()?
        .iter()
        .find_map(|d| d["retryDelay"].as_str())
        .and_then(|d| d.strip_suffix('s'))
        .and_then(|s| s.parse::<f64>().ok())
        .and_then(finite)
}

fn finite(seconds: f64) -> Option<Duration> {
    (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds.min(3600.0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> http::HeaderMap {
        pairs
            .iter()
            .map(|(k, v)| {
                (
                    http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                    http::HeaderValue::from_str(v).unwrap(),
                )
            })
            .collect()
    }

    #[test]
    fn each_providers_way_of_saying_when() {
        let at = |h: &[(&str, &str)], body: Option<&str>| {
            retry_after(&headers(h), body.map(str::as_bytes))
        };
        assert_eq!(
            at(&[("retry-after", "2")], None),
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            at(&[("retry-after-ms", "250"), ("retry-after", "1")], None),
            Some(Duration::from_millis(250)),
            "OpenAI's finer one first"
        );
        let gemini = r#"{"error":{"code":429,"details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"1.5s"}]}}"#;
        assert_eq!(at(&[], Some(gemini)), Some(Duration::from_millis(1500)));
        assert_eq!(
            at(&[("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT")], None),
            Some(Duration::ZERO),
            "a date past"
        );
        assert_eq!(at(&[("retry-after", "soon")], None), None);
        assert_eq!(at(&[("retry-after", "-1")], None), None);
        for nonsense in ["NaN", "inf", "-1"] {
            assert_eq!(
                at(&[("retry-after-ms", nonsense), ("retry-after", "2")], None),
                Some(Duration::from_secs(2)),
                "retry-after-ms: {nonsense} gives way to retry-after"
            );
        }
        assert_eq!(
            at(&[("retry-after", "999999999")], None),
            Some(Duration::from_secs(3600)),
            "held to an hour, past the retry bound: passed on"
        );
        assert_eq!(at(&[], Some("not json")), None);
    }

    #[tokio::test(start_paused = true)]
    async fn starts_are_spaced_and_slots_bounded() {
        let pace = Arc::new(Pace::new(Some(2), Some(Duration::from_millis(100))).unwrap());
        let t0 = Instant::now();
        let a = pace.start().await;
        let b = pace.start().await;
        assert_eq!(
            t0.elapsed(),
            Duration::from_millis(100),
            "the second waits the interval"
        );
        let waiting = tokio::spawn({
            let pace = pace.clone();
            async move {
                let _c = pace.start().await;
                Instant::now()
            }
        });
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(!waiting.is_finished(), "two in flight: the third waits");
        let freed = Instant::now();
        drop(a);
        let started = waiting.await.unwrap();
        assert_eq!(
            started, freed,
            "it starts once a slot is free, the interval long past"
        );
        drop(b);
    }
}
