//! The ledger of cargo-llmreplay: what a model call costs, from the model it names and the
//! usage its answer reported, by a dated price table vendored from pydantic's genai-prices
//! (MIT; `data/README.md`) with `[prices]` of `llmreplay.toml` over it. A call whose model
//! the table does not know, or whose answer reported no usage, is unpriced, never free. The
//! report prices each replay once, at the run's end; the daemon prices each answer it
//! records, to hold a run to `--max-spend`.
#![warn(missing_docs)]

mod money;
mod table;

pub use money::Money;
pub use table::{ModelPrice, Rate};

use cassettes::{Interaction, RecordedRequest, Tokens};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use table::Table;

/// The vendored table, parsed once per process.
fn vendored() -> Arc<Table> {
    static TABLE: OnceLock<Arc<Table>> = OnceLock::new();
    TABLE
        .get_or_init(|| {
            Arc::new(
                Table::parse(include_str!("../data/prices.json"))
                    .expect("the vendored price table parses"),
            )
        })
        .clone()
}

/// A `[prices."MODEL"]` table of `llmreplay.toml`: a model's prices in US dollars per million
/// tokens, over the vendored table's. `MODEL` is a name as requests give it, or a prefix
/// ending in `*` (`"my-finetune-*"`).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriceOverride {
    /// An input token.
    pub input_per_mtok: f64,
    /// An output token.
    pub output_per_mtok: f64,
    /// An input token read from the cache; the input's price when not given.
    #[serde(default)]
    pub cached_input_per_mtok: Option<f64>,
    /// An input token written to the cache; the input's price when not given.
    #[serde(default)]
    pub cache_write_per_mtok: Option<f64>,
}

/// A `[prices]` entry that cannot be used.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("[prices.{model:?}] {field} = {value}: {why}")]
pub struct OverrideError {
    /// The model it names.
    pub model: String,
    /// The key.
    pub field: &'static str,
    /// Its value.
    pub value: f64,
    /// What is wrong, and what would do.
    pub why: &'static str,
}

/// The prices a run uses: the vendored table and the `[prices]` overrides.
#[derive(Clone, Debug)]
pub struct Prices {
    table: Arc<Table>,
    /// `(name or prefix*, price)`, lowercased, exact names first.
    overrides: Vec<(String, ModelPrice)>,
}

impl Default for Prices {
    fn default() -> Self {
        Prices::vendored()
    }
}

/// Why a call has no price.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unpriced {
    /// Neither its answer nor its request names a model.
    NoModel,
    /// Its answer reported no token counts.
    NoUsage(String),
    /// The table has no price for its model (nor has `[prices]`).
    UnknownModel(String),
}

impl Unpriced {
    /// What the report lists it under: the model, and why when it is not the table's fault.
    pub fn label(&self) -> String {
        match self {
            Unpriced::NoModel => "(no model named)".to_string(),
            Unpriced::NoUsage(m) => format!("{m} (no usage reported)"),
            Unpriced::UnknownModel(m) => m.clone(),
        }
    }
}

/// What a call cost, or why that is not known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Priced {
    /// Its cost.
    Cost(Money),
    /// Not known.
    Unpriced(Unpriced),
}

impl Prices {
    /// The vendored table alone.
    pub fn vendored() -> Prices {
        Prices {
            table: vendored(),
            overrides: Vec::new(),
        }
    }

    /// With `[prices]` over the table, each checked: a price is a finite, non-negative number
    /// of dollars per million tokens, with up to six decimals.
    pub fn with_overrides(
        mut self,
        overrides: &BTreeMap<String, PriceOverride>,
    ) -> Result<Prices, OverrideError> {
        for (model, o) in overrides {
            let rate = |field: &'static str, value: f64| {
                let err = |why| OverrideError {
                    model: model.clone(),
                    field,
                    value,
                    why,
                };
                if !value.is_finite() || value < 0.0 {
                    return Err(err(
                        "a price is a number of US dollars per million tokens, 0 or more",
                    ));
                }
                if value > 1_000_000.0 {
                    return Err(err(
                        "that is over a dollar a token; prices are per million tokens",
                    ));
                }
                let scaled = value * 1e6;
                if (scaled - scaled.round()).abs() > 1e-6 {
                    return Err(err("at most six decimals"));
                }
                Ok(Rate::flat(scaled.round() as u64))
            };
            let price = ModelPrice {
                input: rate("input_per_mtok", o.input_per_mtok)?,
                output: rate("output_per_mtok", o.output_per_mtok)?,
                cache_read: o
                    .cached_input_per_mtok
                    .map(|v| rate("cached_input_per_mtok", v))
                    .transpose()?,
                cache_write: o
                    .cache_write_per_mtok
                    .map(|v| rate("cache_write_per_mtok", v))
                    .transpose()?,
            };
            self.overrides.push((model.to_lowercase(), price));
        }
        // An exact name wins over a prefix, a longer prefix over a shorter one.
        self.overrides
            .sort_by_key(|(m, _)| (m.ends_with('*'), std::cmp::Reverse(m.len())));
        Ok(self)
    }

    /// The day the table's prices were in force.
    pub fn date(&self) -> &str {
        &self.table.date
    }

    /// Where the table comes from, and its licence.
    pub fn source(&self) -> &str {
        &self.table.source
    }

    /// The price of `model` as cassette `provider` (`openai`, `anthropic`, `gemini`,
    /// `vertex`, `bedrock`, `azure`, a gateway's name) serves it: `[prices]` first, then the
    /// table's provider for it, then any provider of the table that knows the name (a gateway
    /// serving another family's models).
    pub fn lookup(&self, provider: &str, model: &str) -> Option<&ModelPrice> {
        let name = model.trim().to_lowercase();
        if let Some((_, price)) = self
            .overrides
            .iter()
            .find(|(m, _)| match m.strip_suffix('*') {
                Some(prefix) => name.starts_with(prefix),
                None => *m == name,
            })
        {
            return Some(price);
        }
        // Bedrock's ids carry a region and a vendor (`us.anthropic.claude-…-v1:0`); Vertex's
        // and Gemini's paths a `models/` prefix.
        let name = name.strip_prefix("models/").unwrap_or(&name);
        let own = table_provider(provider);
        let providers = &self.table.providers;
        providers
            .iter()
            .filter(|(id, _)| Some(id.as_str()) == own)
            .chain(providers.iter().filter(|(id, _)| Some(id.as_str()) != own))
            .find_map(|(_, models)| models.iter().find(|m| m.rule.matches(name)))
            .map(|m| &m.price)
    }

    /// What a call to `provider` cost, from the model it names and its answer's usage block.
    pub fn price(&self, provider: &str, model: Option<&str>, usage: Option<&Value>) -> Priced {
        self.price_tokens(provider, model, usage.and_then(Tokens::of).as_ref())
    }

    /// What a call to `provider` cost, from the model it names and the tokens its usage counts.
    pub fn price_tokens(
        &self,
        provider: &str,
        model: Option<&str>,
        tokens: Option<&Tokens>,
    ) -> Priced {
        let Some(model) = model.filter(|m| !m.trim().is_empty()) else {
            return Priced::Unpriced(Unpriced::NoModel);
        };
        let Some(tokens) = tokens else {
            return Priced::Unpriced(Unpriced::NoUsage(model.to_string()));
        };
        match self.lookup(provider, model) {
            Some(price) => Priced::Cost(price.cost(tokens)),
            None => Priced::Unpriced(Unpriced::UnknownModel(model.to_string())),
        }
    }

    /// What recording `interaction` again would cost, judged by what it cost when recorded:
    /// its model and its summary's usage.
    pub fn estimate(&self, provider: &str, interaction: &Interaction) -> Priced {
        let usage = interaction.summary.as_ref().and_then(|s| s.usage.as_ref());
        self.price(provider, model_of(interaction).as_deref(), usage)
    }
}

/// The table's provider for a cassette's provider.
fn table_provider(provider: &str) -> Option<&'static str> {
    Some(match provider {
        "openai" => "openai",
        "azure" => "azure",
        "anthropic" => "anthropic",
        "gemini" | "vertex" => "google",
        "bedrock" => "aws",
        "mistral" => "mistral",
        _ => return None,
    })
}

/// The model a recording names: its answer's (`gpt-4o-mini-2024-07-18`, Gemini's
/// `modelVersion`), else its request's.
pub fn model_of(interaction: &Interaction) -> Option<String> {
    answer_model(&interaction.response.payloads()).or_else(|| request_model(&interaction.request))
}

/// The model an answer's payloads name.
pub fn answer_model(payloads: &[Value]) -> Option<String> {
    payloads.iter().find_map(|p| {
        p.get("model")
            .or_else(|| p.pointer("/message/model"))
            .or_else(|| p.pointer("/response/model"))
            .or_else(|| p.get("modelVersion"))
            .and_then(Value::as_str)
            .map(str::to_string)
    })
}

/// The model a request names, as its family reads it (a body's `model`, Gemini's and
/// Bedrock's paths).
pub fn request_model(request: &RecordedRequest) -> Option<String> {
    request.model()
}

/// Costs added up: what was priced, how many calls, and the unpriced ones by what they name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// The sum of the priced calls.
    pub cost: Money,
    /// How many were priced.
    pub priced: usize,
    /// The unpriced, by [`Unpriced::label`], with how many.
    pub unpriced: BTreeMap<String, usize>,
}

impl Tally {
    /// Adds one call.
    pub fn add(&mut self, priced: Priced) {
        match priced {
            Priced::Cost(m) => {
                self.cost = self.cost.saturating_add(m);
                self.priced += 1;
            }
            Priced::Unpriced(why) => *self.unpriced.entry(why.label()).or_default() += 1,
        }
    }

    /// How many were not priced.
    pub fn unpriced_count(&self) -> usize {
        self.unpriced.values().sum()
    }
}

#[cfg(test)]
mod tests;
