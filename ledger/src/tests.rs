//! Prices worked out by hand from the vendored table's rates (dollars per million tokens are
//! micro-dollars per token).

use super::*;
use cassettes::Body;
use serde_json::json;

fn cost(provider: &str, model: &str, usage: Value) -> Priced {
    Prices::vendored().price(provider, Some(model), Some(&usage))
}

fn micros(n: u64) -> Priced {
    Priced::Cost(Money::from_micros(n))
}

#[test]
fn the_table_parses_and_says_its_date_and_source() {
    let p = Prices::vendored();
    assert_eq!(p.date(), "2026-11-27");
    assert!(p.source().contains("genai-prices") && p.source().contains("MIT"));
}

/// gpt-4o-mini: 0.15 in, 0.075 cached, 0.6 out. 600 × 0.15 + 400 × 0.075 + 200 × 0.6.
#[test]
fn openai_chat_counts_cached_tokens_at_their_rate() {
    let usage = json!({"prompt_tokens": 1000, "completion_tokens": 200,
        "prompt_tokens_details": {"cached_tokens": 400}});
    assert_eq!(
        cost("openai", "gpt-4o-mini-2024-07-18", usage),
        micros(90 + 30 + 120)
    );
}

/// o3-mini: 1.1 in, 0.55 cached, 4.4 out; reasoning is within the output's count.
#[test]
fn openai_responses_count_reasoning_within_output() {
    let usage = json!({"input_tokens": 1000, "output_tokens": 500,
        "input_tokens_details": {"cached_tokens": 1000},
        "output_tokens_details": {"reasoning_tokens": 400}});
    assert_eq!(cost("openai", "o3-mini", usage), micros(550 + 2200));
}

/// claude-haiku-4-5: 1 in, 1.25 cache write, 0.1 cache read, 5 out; Anthropic's
/// `input_tokens` leaves the cache out.
#[test]
fn anthropic_cache_reads_and_writes_are_input_at_their_rates() {
    let usage = json!({"input_tokens": 100, "cache_creation_input_tokens": 200,
        "cache_read_input_tokens": 1000, "output_tokens": 50});
    assert_eq!(
        cost("anthropic", "claude-haiku-4-5-20251001", usage),
        micros(100 + 250 + 100 + 250)
    );
}

/// gemini-2.5-flash: 0.3 in, 0.03 cached, 2.5 out; thoughts are billed as output.
#[test]
fn gemini_thoughts_are_output_and_cached_content_is_within_the_prompt() {
    let usage = json!({"promptTokenCount": 1000, "cachedContentTokenCount": 500,
        "candidatesTokenCount": 100, "thoughtsTokenCount": 300});
    assert_eq!(
        cost("gemini", "gemini-2.5-flash", usage.clone()),
        micros(150 + 15 + 1000)
    );
    assert_eq!(
        cost("vertex", "models/gemini-2.5-flash", usage),
        micros(150 + 15 + 1000)
    );
}

/// claude-sonnet-4-5 past 200,000 input tokens: 6 in and 22.5 out for every token.
#[test]
fn a_tiered_price_applies_to_every_token_past_its_start() {
    let below = json!({"input_tokens": 200_000, "output_tokens": 1000});
    let above = json!({"input_tokens": 250_000, "output_tokens": 1000});
    assert_eq!(
        cost("anthropic", "claude-sonnet-4-5", below),
        micros(600_000 + 15_000)
    );
    assert_eq!(
        cost("anthropic", "claude-sonnet-4-5", above),
        micros(1_500_000 + 22_500)
    );
}

#[test]
fn a_call_without_a_known_model_or_usage_is_unpriced_never_free() {
    let usage = json!({"prompt_tokens": 10, "completion_tokens": 1});
    let p = Prices::vendored();
    assert_eq!(
        p.price("openai", Some("my-finetune"), Some(&usage)),
        Priced::Unpriced(Unpriced::UnknownModel("my-finetune".into()))
    );
    assert_eq!(
        p.price("openai", Some("gpt-4o-mini"), None),
        Priced::Unpriced(Unpriced::NoUsage("gpt-4o-mini".into()))
    );
    assert_eq!(
        p.price("openai", None, Some(&usage)),
        Priced::Unpriced(Unpriced::NoModel)
    );
    let mut tally = Tally::default();
    tally.add(p.price("openai", Some("my-finetune"), Some(&usage)));
    tally.add(p.price("openai", Some("my-finetune"), Some(&usage)));
    tally.add(p.price("openai", Some("gpt-4o-mini"), Some(&usage)));
    assert_eq!(tally.priced, 1);
    assert_eq!(
        tally.unpriced,
        BTreeMap::from([("my-finetune".to_string(), 2)])
    );
    // 10 × 0.15 + 1 × 0.6
    assert_eq!(tally.cost, Money::from_pico(2_100_000));
}

#[test]
fn overrides_price_a_model_by_name_or_prefix_over_the_table() {
    let o = |i, o| PriceOverride {
        input_per_mtok: i,
        output_per_mtok: o,
        cached_input_per_mtok: None,
        cache_write_per_mtok: None,
    };
    let prices = Prices::vendored()
        .with_overrides(&BTreeMap::from([
            ("My-Finetune".to_string(), o(3.0, 15.0)),
            ("my-*".to_string(), o(1.0, 1.0)),
            ("gpt-4o-mini".to_string(), o(0.5, 0.25)),
        ]))
        .unwrap();
    let usage = json!({"prompt_tokens": 1000, "completion_tokens": 100});
    let at = |model| prices.price("openai", Some(model), Some(&usage));
    assert_eq!(at("my-finetune"), micros(3000 + 1500));
    assert_eq!(at("my-other"), micros(1000 + 100));
    assert_eq!(at("gpt-4o-mini"), micros(500 + 25));
    for (bad, field) in [
        (o(-1.0, 1.0), "input_per_mtok"),
        (o(1.0, f64::NAN), "output_per_mtok"),
        (o(0.0000001, 1.0), "input_per_mtok"),
        (o(2e6, 1.0), "input_per_mtok"),
    ] {
        let e = Prices::vendored()
            .with_overrides(&BTreeMap::from([("m".to_string(), bad)]))
            .unwrap_err();
        assert_eq!(e.field, field);
        assert!(e.to_string().starts_with("[prices.\"m\"] "), "{e}");
    }
}

#[test]
fn models_are_read_from_the_answer_else_the_request() {
    let request = |path: &str, body: Value| RecordedRequest {
        method: "POST".into(),
        path: path.into(),
        query: None,
        body: Body::Json {
            value: body,
            layout: None,
        },
        websocket: false,
    };
    assert_eq!(
        request_model(&request("/v1/chat/completions", json!({"model": "gpt-4o"}))),
        Some("gpt-4o".into())
    );
    assert_eq!(
        request_model(&request(
            "/v1beta/models/gemini-2.5-flash:generateContent",
            json!({})
        )),
        Some("gemini-2.5-flash".into())
    );
    assert_eq!(
        request_model(&request(
            "/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse",
            json!({})
        )),
        Some("anthropic.claude-3-haiku-20240307-v1:0".into())
    );
    assert_eq!(
        answer_model(&[json!({"modelVersion": "gemini-2.5-flash"})]),
        Some("gemini-2.5-flash".into())
    );
}

/// Bedrock's Claude 3.5 Haiku under `aws`: 0.8 in, 1 cache write, 0.08 cache read, 4 out;
/// the Converse API counts the cache apart from `inputTokens`.
#[test]
fn bedrock_counts_its_cache_apart_and_its_ids_carry_region_and_vendor() {
    let usage = json!({"inputTokens": 100, "cacheReadInputTokens": 1000,
        "cacheWriteInputTokens": 200, "outputTokens": 50});
    assert_eq!(
        cost(
            "bedrock",
            "us.anthropic.claude-3-5-haiku-20241022-v1:0",
            usage
        ),
        micros(80 + 80 + 200 + 200)
    );
}

/// A garbled or hostile usage block (counts near 2^64) must neither panic the daemon nor wrap
/// to a small cost that lets a run past its `--max-spend`: the cost holds at the largest
/// amount, and shows as it.
#[test]
fn huge_usage_holds_at_the_largest_cost_and_shows_it() {
    let max = u64::MAX;
    let anthropic = json!({"input_tokens": max, "cache_read_input_tokens": 1,
        "cache_creation_input_tokens": 1, "output_tokens": max});
    let bedrock = json!({"inputTokens": max, "outputTokens": 1, "cacheReadInputTokens": 1});
    let gemini = json!({"promptTokenCount": max, "toolUsePromptTokenCount": 1,
        "candidatesTokenCount": max, "thoughtsTokenCount": 1});
    for (provider, model, usage) in [
        ("anthropic", "claude-3-5-haiku-20241022", anthropic),
        (
            "bedrock",
            "anthropic.claude-3-5-haiku-20241022-v1:0",
            bedrock,
        ),
        ("gemini", "gemini-1.5-flash", gemini),
    ] {
        let Priced::Cost(m) = cost(provider, model, usage) else {
            panic!("{provider}: priced");
        };
        assert_eq!(m, Money::from_pico(u64::MAX), "{provider}");
    }
    assert_eq!(Money::from_pico(u64::MAX).to_string(), "$18,446,744.07");
}
