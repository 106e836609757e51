//! The price table as genai-prices writes it (`data/prices.json`, see `data/README.md`): per
//! provider, models each with a rule matching the names a request may give it, and their
//! prices per million tokens, some tiered by the prompt's size.

use crate::money::Money;
use cassettes::Tokens;
use serde::Deserialize;

/// A rule over a model's name, lowercased.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Rule {
    Equals(String),
    StartsWith(String),
    EndsWith(String),
    Contains(String),
    #[serde(with = "regex_text")]
    Regex(regex::Regex),
    Or(Vec<Rule>),
    And(Vec<Rule>),
    /// What genai-prices writes as a regex's negative look-ahead, which Rust's regex lacks.
    Not(Box<Rule>),
}

mod regex_text {
    use serde::{Deserialize, Deserializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<regex::Regex, D::Error> {
        let text = String::deserialize(d)?;
        regex::Regex::new(&text).map_err(serde::de::Error::custom)
    }
}

impl Rule {
    pub(crate) fn matches(&self, name: &str) -> bool {
        match self {
            Rule::Equals(s) => name == s,
            Rule::StartsWith(s) => name.starts_with(s.as_str()),
            Rule::EndsWith(s) => name.ends_with(s.as_str()),
            Rule::Contains(s) => name.contains(s.as_str()),
            Rule::Regex(r) => r.is_match(name),
            Rule::Or(rules) => rules.iter().any(|r| r.matches(name)),
            Rule::And(rules) => rules.iter().all(|r| r.matches(name)),
            Rule::Not(rule) => !rule.matches(name),
        }
    }
}

/// A price in picodollars per token, the same for every prompt or tiered by its size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rate {
    /// Below the first tier.
    pub base: u64,
    /// `(start, rate)`, by start: a prompt of more than `start` input tokens pays `rate` for
    /// all its tokens (the cliff genai-prices and the providers describe).
    pub tiers: Vec<(u64, u64)>,
}

impl Rate {
    /// One rate for every prompt.
    pub fn flat(pico_per_token: u64) -> Rate {
        Rate {
            base: pico_per_token,
            tiers: Vec::new(),
        }
    }

    fn at(&self, input_tokens: u64) -> u64 {
        self.tiers
            .iter()
            .rev()
            .find(|(start, _)| input_tokens > *start)
            .map_or(self.base, |(_, rate)| *rate)
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawRate {
    Flat(String),
    Tiered { base: String, tiers: Vec<RawTier> },
}

#[derive(Deserialize)]
struct RawTier {
    start: u64,
    price: String,
}

impl TryFrom<RawRate> for Rate {
    type Error = String;

    fn try_from(raw: RawRate) -> Result<Rate, String> {
        let per_token = |text: &str| {
            Money::per_token_from_mtok(text)
                .ok_or_else(|| format!("{text:?} is not a price per million tokens"))
        };
        Ok(match raw {
            RawRate::Flat(p) => Rate::flat(per_token(&p)?),
            RawRate::Tiered { base, tiers } => {
                let mut tiers = tiers
                    .into_iter()
                    .map(|t| Ok((t.start, per_token(&t.price)?)))
                    .collect::<Result<Vec<_>, String>>()?;
                tiers.sort();
                Rate {
                    base: per_token(&base)?,
                    tiers,
                }
            }
        })
    }
}

/// What a model's tokens cost.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelPrice {
    /// An input token not read from nor written to the cache.
    pub input: Rate,
    /// An output token, reasoning included.
    pub output: Rate,
    /// An input token read from the cache; the input's rate when none is given.
    pub cache_read: Option<Rate>,
    /// An input token written to the cache; the input's rate when none is given.
    pub cache_write: Option<Rate>,
}

impl ModelPrice {
    /// What `tokens` cost: uncached input, cache reads, cache writes and output, each at its
    /// rate for a prompt of `tokens.input` tokens.
    pub fn cost(&self, tokens: &Tokens) -> Money {
        let n = tokens.input;
        let read = tokens.cache_read.min(n);
        let written = tokens.cache_write.min(n - read);
        let plain = n - read - written;
        let rate = |r: &Option<Rate>| r.as_ref().unwrap_or(&self.input).at(n);
        let pico = u128::from(plain) * u128::from(self.input.at(n))
            + u128::from(read) * u128::from(rate(&self.cache_read))
            + u128::from(written) * u128::from(rate(&self.cache_write))
            + u128::from(tokens.output) * u128::from(self.output.at(n));
        Money::from_pico(u64::try_from(pico).unwrap_or(u64::MAX))
    }
}

#[derive(Deserialize)]
struct RawPrices {
    input_mtok: Option<RawRate>,
    output_mtok: Option<RawRate>,
    cache_read_mtok: Option<RawRate>,
    cache_write_mtok: Option<RawRate>,
}

#[derive(Deserialize)]
struct RawModel {
    /// Named in errors; the table's own name for the model.
    id: String,
    #[serde(rename = "match")]
    rule: Rule,
    prices: RawPrices,
}

#[derive(Deserialize)]
struct RawProvider {
    id: String,
    models: Vec<RawModel>,
}

#[derive(Deserialize)]
struct RawTable {
    date: String,
    source: String,
    providers: Vec<RawProvider>,
}

/// One model of the table.
#[derive(Debug)]
pub(crate) struct Model {
    pub rule: Rule,
    pub price: ModelPrice,
}

/// The table: its date and source, and per provider its models in the table's order.
#[derive(Debug)]
pub(crate) struct Table {
    pub date: String,
    pub source: String,
    pub providers: Vec<(String, Vec<Model>)>,
}

impl Table {
    pub(crate) fn parse(text: &str) -> Result<Table, String> {
        let raw: RawTable = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let rate = |r: Option<RawRate>| r.map(Rate::try_from).transpose();
        let mut providers = Vec::new();
        for p in raw.providers {
            let mut models = Vec::new();
            for m in p.models {
                let why = |e: String| format!("{} {}: {e}", p.id, m.id);
                let input = rate(m.prices.input_mtok).map_err(why)?;
                let output = rate(m.prices.output_mtok).map_err(why)?;
                let price = ModelPrice {
                    input: input.unwrap_or(Rate::flat(0)),
                    output: output.unwrap_or(Rate::flat(0)),
                    cache_read: rate(m.prices.cache_read_mtok).map_err(why)?,
                    cache_write: rate(m.prices.cache_write_mtok).map_err(why)?,
                };
                models.push(Model {
                    rule: m.rule,
                    price,
                });
            }
            providers.push((p.id, models));
        }
        Ok(Table {
            date: raw.date,
            source: raw.source,
            providers,
        })
    }
}
