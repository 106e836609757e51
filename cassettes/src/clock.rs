//! The time a recording is stamped with: UTC, RFC 3339 to the second, from the system clock.

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, as `2026-11-27T06:33:02Z`.
pub fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    utc(secs)
}

/// `secs` after the Unix epoch, as RFC 3339 in UTC.
pub fn utc(secs: u64) -> String {
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// How fresh each recording of a cassette file is, read without its requests and answers:
/// each interaction's verified date, else its recorded one; none for one of before dates.
pub fn fresh_dates(text: &str) -> Result<Vec<Option<String>>, serde_json::Error> {
    #[derive(serde::Deserialize)]
    struct Dated {
        #[serde(default)]
        recorded_at: Option<String>,
        #[serde(default)]
        verified_at: Option<String>,
    }
    #[derive(serde::Deserialize)]
    struct File {
        #[serde(default)]
        interactions: Vec<Dated>,
    }
    let file: File = serde_json::from_str(text)?;
    Ok(file
        .interactions
        .iter()
        .map(|d| fresher(d.verified_at.as_deref(), d.recorded_at.as_deref()).map(str::to_string))
        .collect())
}

/// The later of a recording's verified and recorded dates (RFC 3339 in UTC sorts as text).
/// A date not in the form this crate writes (edited by hand: the seal covers only the answer)
/// is no date, so that it can neither make a recording look fresh nor hide another's date.
pub fn fresher<'a>(verified: Option<&'a str>, recorded: Option<&'a str>) -> Option<&'a str> {
    let (verified, recorded) = (
        verified.filter(|d| is_stamp(d)),
        recorded.filter(|d| is_stamp(d)),
    );
    match (verified, recorded) {
        (Some(v), Some(r)) => Some(v.max(r)),
        (v, r) => v.or(r),
    }
}

/// Whether `date` has the form [`utc`] writes (`2026-11-27T06:33:02Z`), so that dates sort as
/// text.
pub fn is_stamp(date: &str) -> bool {
    let b = date.as_bytes();
    b.len() == 20
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            10 => *c == b'T',
            13 | 16 => *c == b':',
            19 => *c == b'Z',
            _ => c.is_ascii_digit(),
        })
}

/// The proleptic Gregorian date of a day count from 1970-01-01 (Howard Hinnant's algorithm,
/// public domain): no date crate for one conversion.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::utc;

    #[test]
    fn known_instants() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc(1_798_349_582), "2026-12-27T05:33:02Z");
        assert_eq!(utc(4_107_542_399), "2100-02-28T23:59:59Z");
    }
}
