//! Amounts of US dollars as whole picodollars: a price per million tokens with up to six
//! decimals is a whole number of picodollars per token, so every sum is exact and is rounded
//! once, when it is shown.

use std::fmt;

/// An amount of US dollars, in picodollars (10^-12 dollars).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Money(u64);

const PICO_PER_MICRO: u64 = 1_000_000;
const PICO_PER_DOLLAR: u64 = 1_000_000_000_000;

impl Money {
    /// Nothing.
    pub const ZERO: Money = Money(0);

    /// `n` picodollars.
    pub fn from_pico(n: u64) -> Money {
        Money(n)
    }

    /// `n` micro-dollars.
    pub fn from_micros(n: u64) -> Money {
        Money(n.saturating_mul(PICO_PER_MICRO))
    }

    /// In picodollars.
    pub fn pico(self) -> u64 {
        self.0
    }

    /// In micro-dollars, rounded half up: what the report writes.
    pub fn micros(self) -> u64 {
        self.0 / PICO_PER_MICRO + u64::from(self.0 % PICO_PER_MICRO >= PICO_PER_MICRO / 2)
    }

    /// The sum, held at the largest amount rather than wrapping (about $18 million).
    pub fn saturating_add(self, other: Money) -> Money {
        Money(self.0.saturating_add(other.0))
    }

    /// `self` less `other`, never below nothing.
    pub fn saturating_sub(self, other: Money) -> Money {
        Money(self.0.saturating_sub(other.0))
    }

    /// Reads an amount of dollars as `--max-spend` takes it: `2USD`, `0.50usd`, `2 USD`,
    /// `$2` or `2`, up to six decimals.
    pub fn parse_usd(text: &str) -> Result<Money, String> {
        let t = text.trim();
        let t = t.strip_prefix('$').unwrap_or(t);
        let t = t
            .strip_suffix("USD")
            .or_else(|| t.strip_suffix("usd"))
            .unwrap_or(t)
            .trim();
        let bad = || {
            format!("{text:?} is not an amount of US dollars; write it as 2USD, 0.50USD or $2 (up to six decimals)")
        };
        let micros = decimal_micros(t).ok_or_else(bad)?;
        Ok(Money::from_micros(micros))
    }

    /// A price of `text` dollars per million tokens (a decimal, up to six decimals) as
    /// picodollars per token: the same number, scaled by 10^6.
    pub fn per_token_from_mtok(text: &str) -> Option<u64> {
        decimal_micros(text)
    }
}

/// A non-negative decimal with up to six decimals, times 10^6; none for anything else.
fn decimal_micros(text: &str) -> Option<u64> {
    let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
    if whole.is_empty() && frac.is_empty()
        || frac.len() > 6
        || !whole.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let whole: u64 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    let frac: u64 = format!("{frac:0<6}").parse().ok()?;
    whole.checked_mul(1_000_000)?.checked_add(frac)
}

impl fmt::Display for Money {
    /// Dollars to the cent from a cent up (`$18.40`); below it, to the micro-dollar with its
    /// zeros trimmed (`$0.000021`), so that a small suite's cost is not shown as nothing.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let micros = self.micros();
        if self.0 >= PICO_PER_DOLLAR / 100 || micros == 0 {
            let cents = self.0.saturating_add(PICO_PER_DOLLAR / 200) / (PICO_PER_DOLLAR / 100);
            let dollars = cents / 100;
            let mut whole = dollars.to_string();
            // Thousands grouped, as `1,240 replays` is.
            let mut i = whole.len();
            while i > 3 {
                i -= 3;
                whole.insert(i, ',');
            }
            write!(f, "${whole}.{:02}", cents % 100)
        } else {
            let text = format!("{micros:06}");
            write!(f, "$0.{}", text.trim_end_matches('0'))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_parse_in_the_forms_the_flag_takes_and_nothing_else() {
        for (text, micros) in [
            ("2USD", 2_000_000),
            ("0.50usd", 500_000),
            ("2 USD", 2_000_000),
            ("$2", 2_000_000),
            ("1.000001", 1_000_001),
            (".5USD", 500_000),
            ("0USD", 0),
        ] {
            assert_eq!(
                Money::parse_usd(text),
                Ok(Money::from_micros(micros)),
                "{text}"
            );
        }
        for bad in [
            "",
            "USD",
            "-1USD",
            "2EUR",
            "1.0000001",
            "1e3",
            "2,5",
            "abc",
            ".",
        ] {
            let e = Money::parse_usd(bad).unwrap_err();
            assert!(e.contains("2USD"), "{bad}: {e}");
        }
    }

    #[test]
    fn amounts_show_to_the_cent_or_below_it_to_the_micro_dollar() {
        for (pico, shown) in [
            (0, "$0.00"),
            (18_404_000_000_000, "$18.40"),
            (18_405_000_000_000, "$18.41"),
            (1_234_567_000_000_000, "$1,234.57"),
            (21_000_000, "$0.000021"),
            (499_999, "$0.00"),
            (500_000, "$0.000001"),
            (10_000_000_000, "$0.01"),
        ] {
            assert_eq!(Money::from_pico(pico).to_string(), shown, "{pico}");
        }
        assert_eq!(Money::from_pico(1_500_000).micros(), 2);
        assert_eq!(Money::from_pico(1_499_999).micros(), 1);
    }
}
