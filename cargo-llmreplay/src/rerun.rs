//! `cargo llmreplay rerun`: sends what the tests recorded to the live provider again, with a
//! model or parameters changed if asked, and compares the answers with the cassettes: text
//! diffs, tokens and latency before and after. With `--save` the new answers go into the
//! cassettes as a re-record would put them, for `cargo llmreplay diff` to show.

use crate::args::{CassetteDirArg, Resolved, TestSelection, UpstreamArg};
use crate::error::{Error, Outcome, Result};
use crate::render::{self, fenced, html, table_code, term};
use cassettes::{Interaction, Key, ProviderName, RecordOutcome, Summary, TestId, Timing, Tokens};
use clap::Args;
use daemon::provider::Provider;
use daemon::resend::Resender;
use daemon::Settings;
use futures_util::StreamExt;
use review::review::{answer_text, text_diff, tokens};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// How the results are printed: as `diff` prints, less its HTML page.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Markdown,
    Json,
}

#[derive(Args)]
#[command(
    about = "Send the recorded requests to the live provider again and diff the answers",
    long_about = "Send the recorded requests to the live provider again and diff the answers.\n\n\
        Picks the interactions of the cassettes whose test matches FILTER (a substring of the test id) \
        or -E (nextest's filter language over test ids: test(), package(), binary_id(), ...), sends each \
        upstream with --model and --param applied (streams are sent streaming and assembled), with your \
        key from the provider's usual variable (OPENAI_API_KEY, ANTHROPIC_API_KEY, GEMINI_API_KEY, \
        OLLAMA_API_KEY, or <NAME>_API_KEY for a gateway of llmreplay.toml). The key is only ever sent, \
        never written.\n\n\
        Each request gets a result: identical, changed (a diff of the answer's text, tool calls as \
        name and arguments) or failed, with tokens and latency before and after. Exits 1 when any \
        request failed, or with --fail-on-change when any answer changed.",
    after_help = "Examples:\n  cargo llmreplay rerun                                    # every recording, as recorded\n  \
        cargo llmreplay rerun chat --model gpt-4.1-mini         # tests whose id contains \"chat\", on another model\n  \
        cargo llmreplay rerun -E 'test(=summarises)' --param temperature=0\n  \
        cargo llmreplay rerun --fail-on-change --format markdown # a scheduled drift check"
)]
pub struct RerunArgs {
    #[command(flatten)]
    tests: TestSelection,
    /// Send every request with this model instead of the recorded one.
    #[arg(long, value_name = "MODEL")]
    model: Option<String>,
    /// Set a body field: temperature=0, max_tokens=50, generationConfig.topK=1, or a JSON pointer
    /// (/generationConfig/topK=1). The value is JSON when it parses as JSON, else a string.
    #[arg(long = "param", value_name = "KEY=VALUE")]
    params: Vec<String>,
    /// Requests in flight at once.
    #[arg(long, short = 'j', default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..))]
    jobs: u16,
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
    #[command(flatten)]
    upstream: UpstreamArg,
    /// Write the new answers into the cassettes, as a re-record would.
    #[arg(long)]
    save: bool,
    /// Exit 1 when any answer changed.
    #[arg(long)]
    fail_on_change: bool,
    /// Stop sending once the answers cost this much (US dollars: 2USD, 0.50USD), priced from
    /// their model and usage by the vendored price table and [prices] of llmreplay.toml; a
    /// request whose recording's own cost (on --model's price, if given) would pass the cap
    /// is not sent. Each request not sent fails, naming the cap and the spend.
    #[arg(long, value_name = "AMOUNT", value_parser = crate::args::parse_money)]
    max_spend: Option<ledger::Money>,
    /// Send recordings, in their order (with --oldest-first, the least fresh first), until the
    /// next would pass this budget (2USD, 0.50USD), each estimated before sending from its
    /// recording's model and usage; those with no price are not sent under a budget. The
    /// answers' own cost is held to it too, as by --max-spend.
    #[arg(long, value_name = "AMOUNT", value_parser = crate::args::parse_money)]
    budget: Option<ledger::Money>,
    /// Send the least fresh recordings first (neither recorded nor verified for longest;
    /// undated ones before all).
    #[arg(long)]
    oldest_first: bool,
    /// Stamp today as the verified date of each recording whose fresh answer is the same, or
    /// differs only where no code can break (wording, usage, metadata); its answer stays as
    /// recorded. The others are reported as drift. Not with --save, --model or --param.
    #[arg(long, conflicts_with_all = ["save", "model", "params"])]
    mark_verified: bool,
    /// Let --mark-verified (which spends on the live provider) run where CI is set.
    #[arg(long)]
    allow_in_ci: bool,
    #[command(flatten)]
    cassettes: CassetteDirArg,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Identical,
    Changed,
    Failed,
}

/// What became of one recorded request.
#[derive(Debug, Serialize, Deserialize)]
pub struct RerunResult {
    pub test: TestId,
    pub provider: String,
    pub cassette: PathBuf,
    /// Position of the interaction in its cassette, from 1.
    pub interaction: usize,
    pub method: String,
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    pub verdict: Verdict,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens_before: Option<Tokens>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens_after: Option<Tokens>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens_delta: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_before: Option<Timing>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_after: Option<Timing>,
    /// Total time after minus before, in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_delta_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What `--save` did: recorded, replaced or unchanged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub saved: Option<String>,
    /// How the fresh answer differs from the recorded one, worst first (empty when no more
    /// than volatile fields moved).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drift: Vec<review::review::Drift>,
    /// With --mark-verified: whether the recording was stamped verified (its drift, if any,
    /// can break no code).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verified: Option<bool>,
}

#[derive(Debug, Default, Serialize)]
pub struct Totals {
    pub identical: usize,
    pub changed: usize,
    pub failed: usize,
    pub tokens_before: u64,
    pub tokens_after: u64,
    pub latency_before_ms: u64,
    pub latency_after_ms: u64,
}

/// One recorded request picked for the rerun.
struct Item {
    cassette: PathBuf,
    test: TestId,
    provider: String,
    index: usize,
    old: Interaction,
}

/// What one request got: the request as sent and the fresh answer, or why there is none.
type Sent = Result<(Outgoing, daemon::resend::Resent), String>;

/// The request as it will be sent, and as it would be recorded.
struct Outgoing {
    body: bytes::Bytes,
    /// For a multipart upload: its content type, with the fresh boundary of `body`.
    content_type: Option<String>,
    request: cassettes::RecordedRequest,
}

pub fn run(args: RerunArgs) -> Result<Outcome> {
    let Resolved { root, settings } =
        Resolved::workspace_with_upstreams(&args.cassettes, &args.upstream)?;
    let params = args
        .params
        .iter()
        .map(|p| parse_param(p))
        .collect::<Result<Vec<_>>>()?;
    if args.mark_verified && !args.allow_in_ci && std::env::var_os("CI").is_some() {
        return Err(Error::Usage(
            "rerun --mark-verified spends on the live provider: under CI it runs only with --allow-in-ci".into(),
        ));
    }
    let (mut items, mut results) = select(&args, &settings.cassette_dir, &root)?;
    if args.oldest_first {
        // Undated recordings (of before dates were kept) are the least fresh of all.
        items.sort_by(|a, b| a.old.fresh_at().cmp(&b.old.fresh_at()));
    }
    if let Some(budget) = args.budget {
        items = within_budget(items, budget, &settings.prices, args.model.as_deref());
    }
    let providers: HashMap<String, Arc<Provider>> = settings
        .providers
        .iter()
        .map(|p| (p.name.as_str().to_string(), p.clone()))
        .collect();
    warn_of_missing_keys(&items, &providers);
    let mut spend = daemon::Spend::new(settings.prices.clone(), args.max_spend);
    // The budget was planned from the recordings' usage, which the seal does not cover and
    // the live answers need not match: it holds as a cap on what they cost, too.
    if let Some(budget) = args.budget {
        spend = spend.capped_by(budget, "--budget");
    }
    let request = Request {
        providers: &providers,
        model: args.model.as_deref(),
        params: &params,
        settings: &settings,
        spend: &spend,
    };
    let outcomes = send_all(items, &request, args.jobs.into())?;
    let mut saves = Vec::new();
    let mut holds: Vec<(PathBuf, usize, Option<String>)> = Vec::new();
    for (item, sent) in outcomes {
        let (mut result, save) = judge(&item, sent, &root, args.save);
        if args.mark_verified && result.verdict != Verdict::Failed {
            result.verified = Some(result.drift.iter().all(|d| !d.can_break_code()));
            if result.verified == Some(true) {
                holds.push((item.cassette.clone(), item.index, item.old.seal.clone()));
            }
        }
        if let Some(interaction) = save {
            saves.push((results.len(), item, interaction));
        }
        results.push(result);
    }
    let unstamped = if holds.is_empty() {
        0
    } else {
        stamp_verified(holds, &root)
    };
    if args.save {
        save(
            &cassettes::Store::new(&settings.cassette_dir),
            saves,
            &mut results,
        )?;
    }
    results.sort_by(|a, b| (&a.cassette, a.interaction).cmp(&(&b.cassette, b.interaction)));
    let totals = totals(&results);
    let out = match args.format {
        Format::Text => text(&results, &totals),
        Format::Markdown => markdown(&results, &totals),
        Format::Json => json(&results, &totals)?,
    };
    render::stdout(&out).map_err(|e| Error::io("cannot write to stdout", e))?;
    if args.format != Format::Text {
        render::stderr(&format!("{}\n", totals_line(&totals)));
    }
    Ok(Outcome::gate(
        totals.failed > 0 || unstamped > 0 || (args.fail_on_change && totals.changed > 0),
    ))
}

/// The items, in their order, up to the first whose estimated cost (its recording's usage, at
/// its model's price or `model`'s) would pass `budget`; those with no price are left out, since
/// their cost cannot be known before sending. Says what it kept and left.
fn within_budget(
    items: Vec<Item>,
    budget: ledger::Money,
    prices: &ledger::Prices,
    model: Option<&str>,
) -> Vec<Item> {
    let (mut kept, mut unpriced, mut left) = (Vec::new(), 0, 0);
    let mut planned = ledger::Money::ZERO;
    for item in items {
        if left > 0 {
            left += 1;
            continue;
        }
        let usage = item.old.summary.as_ref().and_then(|s| s.usage.as_ref());
        let cost = match model {
            Some(m) => prices.price(&item.provider, Some(m), usage),
            None => prices.estimate(&item.provider, &item.old),
        };
        match cost {
            ledger::Priced::Cost(cost) if planned.saturating_add(cost) <= budget => {
                planned = planned.saturating_add(cost);
                kept.push(item);
            }
            ledger::Priced::Cost(_) => left = 1,
            ledger::Priced::Unpriced(_) => unpriced += 1,
        }
    }
    let mut said = format!(
        "cargo-llmreplay: budget {budget}: {} to send, estimated {planned} from their recordings",
        render::plural(kept.len(), "recording")
    );
    if left > 0 {
        said.push_str(&format!(
            "; {} left, the next would pass the budget",
            render::plural(left, "recording")
        ));
    }
    if unpriced > 0 {
        said.push_str(&format!(
            "; {} not sent: no price, so no estimate (name it in [prices] of llmreplay.toml)",
            render::plural(unpriced, "unpriced recording")
        ));
    }
    render::stderr(&format!("{said}\n"));
    kept
}

/// Stamps today as the verified date of each `(cassette, position, seal)`, one write per file.
/// A file that cannot be stamped (it stopped parsing, its folder stayed locked) is said and
/// left; the others are still stamped, and the results, paid for, still shown. Says how many
/// files were left.
fn stamp_verified(holds: Vec<(PathBuf, usize, Option<String>)>, root: &Path) -> usize {
    let today = cassettes::clock::utc_now();
    let mut by_file: std::collections::BTreeMap<PathBuf, Vec<(usize, Option<String>)>> =
        std::collections::BTreeMap::new();
    for (path, position, seal) in holds {
        by_file.entry(path).or_default().push((position, seal));
    }
    let (mut stamped, mut asked, mut left) = (0, 0, 0);
    for (path, positions) in by_file {
        match cassettes::mark_verified(&path, root, &positions, &today) {
            Ok(n) => {
                asked += positions.len();
                stamped += n;
            }
            Err(e) => {
                left += 1;
                render::stderr(&format!("cargo-llmreplay: not stamped verified: {e}\n"));
            }
        }
    }
    render::stderr(&format!(
        "cargo-llmreplay: {} verified as of {today}{}\n",
        render::plural(stamped, "recording"),
        match asked - stamped {
            0 => String::new(),
            n => format!(
                " ({} changed since it was read, or edited by hand since it was sealed, left alone)",
                render::plural(n, "recording")
            ),
        }
    ));
    left
}

/// The recorded requests of the tests the filter and `-E` pick, and a failed result for each
/// cassette that does not parse. None at all is an error that says where it looked.
fn select(
    args: &RerunArgs,
    cassette_dir: &Path,
    root: &Path,
) -> Result<(Vec<Item>, Vec<RerunResult>)> {
    let (items, results) = pick(cassette_dir, root, args.tests.matcher()?)?;
    if items.is_empty() && results.is_empty() {
        return Err(Error::Rerun(format!(
            "no recorded request matches{} in {}",
            args.tests.described(),
            cassette_dir.display()
        )));
    }
    Ok((items, results))
}

/// Says which providers' requests go without a key, once each.
fn warn_of_missing_keys(items: &[Item], providers: &HashMap<String, Arc<Provider>>) {
    let used: std::collections::BTreeSet<&String> = items.iter().map(|i| &i.provider).collect();
    for p in used.into_iter().filter_map(|name| providers.get(name)) {
        if !p.key_vars().is_empty() && key_for(p).is_none() {
            render::stderr(&format!(
                "cargo-llmreplay: warning: {} is not set; {} requests go without a key\n",
                p.key_vars().join(" or "),
                p.name
            ));
        }
    }
}

/// What every request is sent with.
struct Request<'a> {
    providers: &'a HashMap<String, Arc<Provider>>,
    model: Option<&'a str>,
    params: &'a [(String, Value)],
    settings: &'a Settings,
    /// What the answers cost so far, against `--max-spend`.
    spend: &'a daemon::Spend,
}

/// Sends every item, `jobs` at a time, with a progress bar on a terminal.
fn send_all(items: Vec<Item>, request: &Request, jobs: usize) -> Result<Vec<(Item, Sent)>> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io("cannot start the async runtime", e))?;
    let resender = Resender::new(request.settings).map_err(daemon::DaemonError::Upstream)?;
    let progress = indicatif::ProgressBar::new(items.len() as u64).with_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} requests {msg}")
            .expect("a valid template"),
    );
    let outcomes = runtime.block_on(
        futures_util::stream::iter(items)
            .map(|item| {
                let (resender, progress) = (&resender, &progress);
                async move {
                    let sent = send_one(&item, request, resender).await;
                    progress.inc(1);
                    (item, sent)
                }
            })
            .buffer_unordered(jobs)
            .collect(),
    );
    progress.finish_and_clear();
    Ok(outcomes)
}

async fn send_one(item: &Item, request: &Request<'_>, resender: &Resender) -> Sent {
    let provider = request.providers.get(&item.provider).ok_or_else(|| {
        format!(
            "no provider {:?} is configured; add [providers.{}] to llmreplay.toml or pass --upstream {}=URL",
            item.provider, item.provider, item.provider
        )
    })?;
    let outgoing = outgoing(
        &item.test,
        &item.old,
        provider,
        request.model,
        request.params,
        request.settings,
    )?;
    let spend = request.spend;
    if spend.cap().is_some() {
        // The old answer's usage, at the price of the model it will be sent to.
        let model = request
            .model
            .map(str::to_string)
            .or_else(|| ledger::model_of(&item.old));
        let usage = item.old.summary.as_ref().and_then(|s| s.usage.as_ref());
        let estimate = match spend
            .prices()
            .price(&item.provider, model.as_deref(), usage)
        {
            ledger::Priced::Cost(m) => Some(m),
            ledger::Priced::Unpriced(_) => None,
        };
        spend.allow(estimate)?;
    }
    let key = key_for(provider);
    let resent = resender
        .send(
            provider,
            &outgoing.request,
            outgoing.body.clone(),
            outgoing.content_type.as_deref(),
            key.as_deref(),
        )
        .await
        .map_err(|e| e.to_string())?;
    let usage = Summary::of(&resent.response).and_then(|s| s.usage);
    let model =
        ledger::answer_model(&resent.response.payloads()).or_else(|| outgoing.request.model());
    spend.recorded(&item.provider, model.as_deref(), usage.as_ref());
    Ok((outgoing, resent))
}

/// The result of one request, and what `--save` would write for it.
fn judge(item: &Item, sent: Sent, root: &Path, save: bool) -> (RerunResult, Option<Interaction>) {
    let mut result = blank(item, root);
    let (outgoing, resent) = match sent {
        Err(e) => {
            result.verdict = Verdict::Failed;
            result.error = Some(e);
            return (result, None);
        }
        Ok(sent) => sent,
    };
    result.model = outgoing.request.model();
    result.request_id = resent.request_id.clone();
    result.latency_after = Some(resent.timing.clone());
    result.latency_delta_ms = item
        .old
        .timing
        .as_ref()
        .map(|t| resent.timing.total_ms as i64 - t.total_ms as i64);
    let summary = Summary::of(&resent.response);
    result.tokens_after = summary.as_ref().and_then(Summary::tokens);
    if let (Some(a), Some(b)) = (result.tokens_before, result.tokens_after) {
        result.tokens_delta = Some(b.total() as i64 - a.total() as i64);
    }
    let status = resent.response.status;
    if status >= 400 {
        result.verdict = Verdict::Failed;
        let body = answer_text(&resent.response);
        result.error = Some(format!(
            "HTTP {status}: {}",
            body.chars().take(300).collect::<String>()
        ));
        return (result, None);
    }
    result.diff = text_diff(
        &answer_text(&item.old.response),
        &answer_text(&resent.response),
    );
    result.drift = review::review::drift(&item.old.response, &resent.response);
    result.verdict = if result.diff.is_some() {
        Verdict::Changed
    } else {
        Verdict::Identical
    };
    let saved = save.then(|| Interaction {
        key: Key::of(&outgoing.request),
        seal: None,
        request: outgoing.request,
        summary,
        response: resent.response,
        timing: Some(resent.timing),
        recorded_at: None,
        verified_at: None,
        step: None,
    });
    (result, saved)
}

fn json(results: &[RerunResult], totals: &Totals) -> Result<String> {
    let mut s = serde_json::to_string_pretty(&serde_json::json!({
        "llmreplay_rerun": 1,
        "totals": totals,
        "results": results,
    }))
    .map_err(|e| Error::io("cannot write the results as JSON", std::io::Error::other(e)))?;
    s.push('\n');
    Ok(s)
}

/// The key from the first of the provider's variables that is set.
fn key_for(provider: &Provider) -> Option<String> {
    provider
        .key_vars()
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|k| !k.is_empty()))
}

/// Every interaction of the matching tests' cassettes; a cassette that does not parse is a
/// failed result of its own.
fn pick(
    dir: &Path,
    root: &Path,
    selected: impl Fn(&TestId) -> bool,
) -> Result<(Vec<Item>, Vec<RerunResult>)> {
    let (mut items, mut broken) = (Vec::new(), Vec::new());
    for path in cassettes::cassette_files(dir)? {
        match cassettes::read_cassette_with_blobs(&path) {
            Ok(c) if selected(&c.test) => {
                for (index, old) in c.interactions.into_iter().enumerate() {
                    if old.request.websocket {
                        // A session is a conversation, not one request to send again.
                        render::stderr(&format!(
                            "cargo-llmreplay: skipping {} #{}: rerun does not replay WebSocket sessions\n",
                            render::term(&c.test),
                            index + 1
                        ));
                        continue;
                    }
                    items.push(Item {
                        cassette: path.clone(),
                        test: c.test.clone(),
                        provider: c.provider.to_string(),
                        index,
                        old,
                    });
                }
            }
            Ok(_) => {}
            Err(e) => broken.push(RerunResult {
                verdict: Verdict::Failed,
                error: Some(e.to_string()),
                ..empty(path.strip_prefix(root).unwrap_or(&path).to_path_buf())
            }),
        }
    }
    Ok((items, broken))
}

fn empty(cassette: PathBuf) -> RerunResult {
    RerunResult {
        test: TestId::new(""),
        provider: String::new(),
        cassette,
        interaction: 0,
        method: String::new(),
        path: String::new(),
        model: None,
        prompt: None,
        verdict: Verdict::Failed,
        diff: None,
        tokens_before: None,
        tokens_after: None,
        tokens_delta: None,
        latency_before: None,
        latency_after: None,
        latency_delta_ms: None,
        request_id: None,
        error: None,
        saved: None,
        drift: Vec::new(),
        verified: None,
    }
}

fn blank(item: &Item, root: &Path) -> RerunResult {
    let cassette = item.cassette.strip_prefix(root).unwrap_or(&item.cassette);
    RerunResult {
        test: item.test.clone(),
        provider: item.provider.clone(),
        interaction: item.index + 1,
        method: item.old.request.method.clone(),
        path: item.old.request.path.clone(),
        model: item.old.request.model(),
        prompt: item.old.request.last_user_text(),
        tokens_before: tokens(&item.old.response),
        latency_before: item.old.timing.clone(),
        ..empty(cassette.to_path_buf())
    }
}

/// `KEY=VALUE` as a JSON pointer and a value: JSON when it parses, else a string.
fn parse_param(p: &str) -> Result<(String, Value)> {
    let (key, value) = p
        .split_once('=')
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| {
            Error::Usage(format!(
                "--param {p:?}: expected KEY=VALUE, e.g. temperature=0 or generationConfig.topK=1"
            ))
        })?;
    let pointer = if key.starts_with('/') {
        key.to_string()
    } else {
        cassettes::pointer::join(key.split('.'))
    };
    let value = serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.to_string()));
    Ok((pointer, value))
}

/// Sets `value` at `pointer`, making the objects on the way.
fn set_at(target: &mut Value, pointer: &str, value: Value) -> Result<(), String> {
    let mut at = target;
    let parts =
        cassettes::pointer::parse(pointer).map_err(|e| format!("--param {pointer}: {e}"))?;
    for (i, part) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        at = match at {
            Value::Object(map) => {
                if last {
                    map.insert(part.clone(), value);
                    return Ok(());
                }
                map.entry(part.clone())
                    .or_insert_with(|| Value::Object(Default::default()))
            }
            Value::Array(list) => {
                let n: usize = part
                    .parse()
                    .ok()
                    .filter(|n| *n < list.len())
                    .ok_or_else(|| format!("--param {pointer}: no element {part} in the array"))?;
                if last {
                    list[n] = value;
                    return Ok(());
                }
                &mut list[n]
            }
            _ => {
                return Err(format!(
                    "--param {pointer}: {part} is inside a value that is not an object"
                ))
            }
        };
    }
    Err(format!("--param {pointer}: an empty key"))
}

fn outgoing(
    test: &TestId,
    old: &Interaction,
    provider: &Provider,
    model: Option<&str>,
    params: &[(String, Value)],
    settings: &Settings,
) -> Result<Outgoing, String> {
    let request = &old.request;
    let mut path = request.path.clone();
    let (body, content_type) = match request.json() {
        Some(body) => {
            let mut body = body.clone();
            if let Some(m) = model {
                provider.family().set_model(&mut path, &mut body, m);
            }
            for (pointer, value) in params {
                set_at(&mut body, pointer, value.clone())?;
            }
            (
                serde_json::to_vec(&body).expect("JSON serialises").into(),
                None,
            )
        }
        None if model.is_some() || !params.is_empty() => {
            return Err("the recorded body is not JSON, so --model and --param cannot apply".into())
        }
        // Multipart goes out with a fresh boundary; the key hashes the parts, so it is unchanged.
        None => request.body.encode()?,
    };
    let recorded = settings.normalizer.for_test(test).request(
        &request.method,
        &path,
        request.query.as_deref(),
        content_type.as_deref(),
        &body,
        providers::secret_params(),
    );
    Ok(Outgoing {
        body,
        content_type,
        request: recorded,
    })
}

/// Writes the new answers as a re-record would: the n-th request with a key in a test is the
/// n-th recording of that key, replaced in place, left alone when only ids moved, or appended.
fn save(
    store: &cassettes::Store,
    mut saves: Vec<(usize, Item, Interaction)>,
    results: &mut [RerunResult],
) -> Result<()> {
    saves.sort_by(|a, b| (&a.1.cassette, a.1.index).cmp(&(&b.1.cassette, b.1.index)));
    let mut seen: HashMap<(PathBuf, Key), usize> = HashMap::new();
    for (at, item, interaction) in saves {
        let n = seen
            .entry((item.cassette.clone(), interaction.key.clone()))
            .or_insert(0);
        let ordinal = *n;
        *n += 1;
        let provider = ProviderName::new(&item.provider).ok_or_else(|| {
            Error::Rerun(format!(
                "{}: bad provider name {:?}",
                item.cassette.display(),
                item.provider
            ))
        })?;
        let entry = store.entry(&TestId::new(item.test.as_str()), &provider)?;
        let outcome = entry.record(ordinal, interaction)?;
        // One write per recording: a rerun saves answers outside any test run.
        entry.flush()?;
        results[at].saved = Some(
            match outcome {
                RecordOutcome::Appended => "recorded",
                RecordOutcome::Replaced => "replaced",
                RecordOutcome::Unchanged => "unchanged",
            }
            .into(),
        );
    }
    Ok(())
}

pub(crate) fn totals(results: &[RerunResult]) -> Totals {
    let mut t = Totals::default();
    for r in results {
        match r.verdict {
            Verdict::Identical => t.identical += 1,
            Verdict::Changed => t.changed += 1,
            Verdict::Failed => t.failed += 1,
        }
        if r.verdict != Verdict::Failed {
            t.tokens_before += r.tokens_before.map_or(0, |x| x.total());
            t.tokens_after += r.tokens_after.map_or(0, |x| x.total());
            t.latency_before_ms += r.latency_before.as_ref().map_or(0, |x| x.total_ms);
            t.latency_after_ms += r.latency_after.as_ref().map_or(0, |x| x.total_ms);
        }
    }
    t
}

fn totals_line(t: &Totals) -> String {
    format!(
        "{} identical, {} changed, {} failed; tokens {} -> {} ({:+}); latency {} -> {} ms ({:+})",
        t.identical,
        t.changed,
        t.failed,
        t.tokens_before,
        t.tokens_after,
        t.tokens_after as i64 - t.tokens_before as i64,
        t.latency_before_ms,
        t.latency_after_ms,
        t.latency_after_ms as i64 - t.latency_before_ms as i64
    )
}

fn figures(r: &RerunResult) -> String {
    let mut parts = Vec::new();
    if let (Some(a), Some(b)) = (r.tokens_before, r.tokens_after) {
        parts.push(format!(
            "tokens {} -> {} ({:+})",
            a.total(),
            b.total(),
            b.total() as i64 - a.total() as i64
        ));
    }
    if let (Some(a), Some(b)) = (&r.latency_before, &r.latency_after) {
        parts.push(format!(
            "latency {} -> {} ms ({:+}), first byte {} -> {} ms",
            a.total_ms,
            b.total_ms,
            b.total_ms as i64 - a.total_ms as i64,
            a.ttfb_ms,
            b.ttfb_ms
        ));
    }
    if let Some(id) = &r.request_id {
        parts.push(format!("request {id}"));
    }
    if let Some(s) = &r.saved {
        parts.push(format!("saved: {s}"));
    }
    parts.join("; ")
}

fn verdict_word(v: Verdict) -> &'static str {
    match v {
        Verdict::Identical => "identical",
        Verdict::Changed => "changed",
        Verdict::Failed => "failed",
    }
}

pub(crate) fn text(results: &[RerunResult], totals: &Totals) -> String {
    let mut out = String::new();
    for r in results {
        let who = if r.test.is_empty() {
            r.cassette.to_string_lossy().into_owned()
        } else {
            r.test.to_string()
        };
        let _ = writeln!(
            out,
            "{:<9}  {} #{} ({} {} {})",
            verdict_word(r.verdict),
            term(&who),
            r.interaction,
            term(&r.provider),
            term(&r.method),
            term(&r.path)
        );
        let f = figures(r);
        if !f.is_empty() {
            let _ = writeln!(out, "           {}", term(&f));
        }
        if let Some(e) = &r.error {
            let _ = writeln!(out, "           {}", term(e));
        }
        if !r.drift.is_empty() {
            let classes: Vec<&str> = r.drift.iter().map(|d| d.as_str()).collect();
            let verified = match r.verified {
                Some(true) => "; verified: no code can break on it",
                Some(false) => "; not verified: drift to review",
                None => "",
            };
            let _ = writeln!(out, "           drift: {}{verified}", classes.join(", "));
        } else if r.verified == Some(true) {
            let _ = writeln!(out, "           verified");
        }
        for line in r.diff.iter().flat_map(|d| d.lines()) {
            let _ = writeln!(out, "           {}", term(line));
        }
    }
    out.push_str(&totals_line(totals));
    out.push('\n');
    out
}

/// For a pull request or an issue: a table, then the diffs and errors in collapsed sections.
pub(crate) fn markdown(results: &[RerunResult], totals: &Totals) -> String {
    let mut out = format!(
        "### cargo-llmreplay rerun\n\n**{}**\n\n| | test | request | tokens | latency (ms) |\n| --- | --- | --- | --- | --- |\n",
        totals_line(totals)
    );
    for r in results {
        let delta = |d: Option<i64>| d.map(|d| format!("{d:+}")).unwrap_or_default();
        let _ = writeln!(
            out,
            "| {} | {} #{} | {} {} | {} | {} |",
            verdict_word(r.verdict),
            table_code(&r.test),
            r.interaction,
            table_code(&r.provider),
            table_code(&r.path),
            delta(r.tokens_delta),
            delta(r.latency_delta_ms)
        );
    }
    for r in results
        .iter()
        .filter(|r| r.diff.is_some() || r.error.is_some())
    {
        let _ = write!(
            out,
            "\n<details>\n<summary>{} <code>{}</code> #{}</summary>\n\n{}\n</details>\n",
            verdict_word(r.verdict),
            html(&r.test),
            r.interaction,
            fenced(
                if r.diff.is_some() { "diff" } else { "text" },
                r.diff.as_deref().or(r.error.as_deref()).unwrap_or("")
            )
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gemini_model_goes_into_the_path_and_params_into_the_body() {
        let dir = tempfile::tempdir().unwrap();
        let settings = Settings::load(dir.path(), None, &daemon::Overrides::default()).unwrap();
        let body = r#"{"contents":[{"role":"user","parts":[{"text":"Hi"}]}]}"#;
        let request = settings.normalizer.for_test(&TestId::new("t")).request(
            "POST",
            "/v1beta/models/gemini-1.5-flash:streamGenerateContent",
            Some("alt=sse"),
            None,
            body.as_bytes(),
            &[],
        );
        let old = Interaction {
            key: Key::of(&request),
            seal: None,
            request,
            response: cassettes::RecordedResponse::with_body(200, Default::default(), b"{}"),
            timing: None,
            summary: None,
            recorded_at: None,
            verified_at: None,
            step: None,
        };
        let gemini = Provider::builtin(daemon::provider::Kind::Gemini);
        let t = TestId::new("t");
        let params = [parse_param("generationConfig.temperature=0").unwrap()];
        let out = outgoing(
            &t,
            &old,
            &gemini,
            Some("gemini-2.5-pro"),
            &params,
            &settings,
        )
        .unwrap();
        assert_eq!(
            out.request.path,
            "/v1beta/models/gemini-2.5-pro:streamGenerateContent"
        );
        assert_eq!(out.request.query.as_deref(), Some("alt=sse"));
        let sent: Value = serde_json::from_slice(&out.body).unwrap();
        assert_eq!(sent["generationConfig"]["temperature"], 0);
        assert!(sent.get("model").is_none());
        assert_ne!(Key::of(&out.request), old.key);
        let same = outgoing(&t, &old, &gemini, None, &[], &settings).unwrap();
        assert_eq!(Key::of(&same.request), old.key, "no override, the same key");
    }

    #[test]
    fn params_become_pointers_and_values() {
        assert_eq!(
            parse_param("temperature=0").unwrap(),
            ("/temperature".into(), serde_json::json!(0))
        );
        assert_eq!(
            parse_param("generationConfig.topK=1").unwrap().0,
            "/generationConfig/topK"
        );
        assert_eq!(
            parse_param("user=alice").unwrap().1,
            Value::String("alice".into())
        );
        assert!(parse_param("=1").is_err());
        let mut body = serde_json::json!({"messages": [{"role": "user"}]});
        set_at(&mut body, "/generationConfig/topK", serde_json::json!(1)).unwrap();
        set_at(&mut body, "/messages/0/role", serde_json::json!("system")).unwrap();
        assert_eq!(
            body,
            serde_json::json!({"messages": [{"role": "system"}], "generationConfig": {"topK": 1}})
        );
        assert!(set_at(&mut body, "/messages/3/x", Value::Null).is_err());
    }
}
