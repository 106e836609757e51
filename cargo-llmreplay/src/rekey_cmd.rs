//! `cargo llmreplay rekey [FILTER]`: after a client or SDK change that sends the same call in
//! another shape (a field added with its default, `cache_control`, a key's casing), the last
//! run's misses of that class give their closest recordings the new request and key; each
//! answer stays byte for byte. A miss whose question changed is refused: its answer would no
//! longer be the provider's; so is one whose closest recording another call of the run
//! replayed. Each re-keyed recording is a change of its own (`request only`)
//! in `review`, `diff` and the PR markdown, for a person to accept. Never under CI.

use crate::args::{CassetteDirArg, Resolved};
use crate::error::{Error, Outcome, Result};
use crate::render::{plural, stderr, term};
use crate::report::{Missing, Report, ReportExt, Unused};
use cassettes::classify::Class;
use cassettes::{Body, Key, RecordedRequest};
use clap::Args;
use serde_json::Value;
use std::path::{Path, PathBuf};

#[derive(Args)]
#[command(
    about = "Give the recordings a changed client missed its new requests, keeping their answers",
    long_about = "Give the recordings a changed client missed its new requests, keeping their answers.\n\n\
        Reads the last run's report. Each miss of class `sdk shape` (every field that differs from \
        its closest recording is a default made explicit, a key's casing, or a parameter that only \
        shapes the cache such as cache_control) gives that recording its new request and key; the \
        answer is kept byte for byte. Only a recording no call of the run replayed is re-keyed. A miss of another class is refused: a \
        `semantic` one asks something else (record it), a `volatile` one wants a [match] rule \
        (cargo llmreplay match suggest). The tests are then replayed.\n\n\
        The re-keyed recordings show in cargo llmreplay review and diff as `request only`, for a \
        person to accept. It never runs under CI.\n\n\
        FILTER matches a part of a test's id, or is a glob (`*`, `?`).\n\n\
        Examples:\n  \
        cargo llmreplay rekey\n  \
        cargo llmreplay rekey chat::streams"
)]
pub struct RekeyArgs {
    /// Only the misses of tests FILTER matches.
    filter: Option<String>,
    /// Print what would be re-keyed, and change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Do not replay the tests afterwards.
    #[arg(long)]
    no_replay: bool,
    /// The report to read [default: <target dir>/llmreplay/report.json].
    #[arg(long, value_name = "PATH")]
    report: Option<PathBuf>,
    #[command(flatten)]
    cassettes: CassetteDirArg,
}

pub fn run(args: RekeyArgs) -> Result<Outcome> {
    if let Some(ci) = std::env::var_os("CI").filter(|v| !v.is_empty() && v != "false" && v != "0") {
        return Err(Error::Usage(format!(
            "rekey rewrites which request a recording answers, for a person to review; it never runs under CI (CI={})",
            ci.to_string_lossy()
        )));
    }
    let resolved = Resolved::workspace(&args.cassettes)?;
    let (path, report) = Report::last_run(&resolved, args.report.as_deref())?;
    let chosen: Vec<&Missing> = report
        .missing
        .iter()
        .filter(|m| {
            args.filter
                .as_deref()
                .is_none_or(|f| crate::args::filter_matches(f, &[m.miss.test.as_str()]))
        })
        .collect();
    if chosen.is_empty() {
        stderr(&format!(
            "no miss in the last run's report ({}){}: nothing to re-key\n",
            term(&resolved.rel(&path)),
            args.filter
                .as_deref()
                .map(|f| format!(" matches {:?}", f))
                .unwrap_or_default()
        ));
        return Ok(Outcome::Success);
    }
    let mut refused = 0;
    let mut rekeyed: Vec<&cassettes::TestId> = Vec::new();
    for m in chosen {
        let line = format!(
            "{}  {} {} {}",
            term(m.miss.test.as_str()),
            term(&m.miss.provider),
            term(&m.miss.method),
            term(&m.miss.path)
        );
        match plan(m, &resolved, &report) {
            Err(why) => {
                refused += 1;
                stderr(&format!("refused: {line}\n  {}\n", term(&why)));
            }
            Ok(plan) if args.dry_run => {
                stderr(&format!("would re-key: {line} ({})\n", plan.fields));
            }
            Ok(plan) => {
                let fields = plan.fields.clone();
                plan.write()?;
                stderr(&format!("re-keyed: {line} ({fields}); answer unchanged\n"));
                if !rekeyed.contains(&&m.miss.test) {
                    rekeyed.push(&m.miss.test);
                }
            }
        }
    }
    if !rekeyed.is_empty() {
        stderr(&format!(
            "{} re-keyed after a client change; review and accept them: {} review\n",
            plural(rekeyed.len(), "test"),
            crate::program()
        ));
    }
    if refused > 0 {
        return Ok(Outcome::GateFailed);
    }
    if args.no_replay || args.dry_run || rekeyed.is_empty() {
        return Ok(Outcome::Success);
    }
    crate::match_cmd::replay(&rekeyed, &path)
}

/// One re-key, checked and ready to write.
struct Plan {
    /// The cassette folder, which every write stays inside.
    root: PathBuf,
    cassette: PathBuf,
    index: usize,
    old_key: Key,
    request: RecordedRequest,
    /// The fields, as people read them: `+/body/stream_options`.
    fields: String,
}

impl Plan {
    /// Writes it under the folder's lock, failing (and changing nothing) when the recording is
    /// no longer the one planned on.
    fn write(self) -> Result<()> {
        let current = cassettes::read_cassette(&self.cassette)?;
        let expected = cassettes::sealed(Some(&current));
        let Plan {
            root,
            cassette,
            index,
            old_key,
            request,
            ..
        } = self;
        let mut stale = false;
        cassettes::rewrite_cassette(
            &cassette,
            &root,
            &current.test,
            &current.provider,
            &expected,
            |interactions| match interactions.get_mut(index) {
                Some(x) if x.key == old_key => {
                    x.key = Key::of(&request);
                    x.request = request;
                }
                _ => stale = true,
            },
        )?;
        if stale {
            return Err(Error::Usage(format!(
                "{}: recording #{} changed since the run; run the tests again and then rekey",
                cassette.display(),
                index + 1
            )));
        }
        Ok(())
    }
}

/// What re-keying `m` would write, or why it may not: only a miss of SDK shape, whose report
/// holds every field that differs, whose recording is still there, and whose rebuilt request
/// has the very key the client sent.
fn plan(m: &Missing, resolved: &Resolved, report: &Report) -> Result<Plan, String> {
    let d = &m.miss.detail;
    match d.class {
        Some(Class::SdkShape) => {}
        Some(Class::Volatile) => {
            return Err(
                format!("volatile: values that change every run, which a [match] rule keys the same: {} match suggest --apply", crate::program()),
            )
        }
        Some(Class::Semantic) => {
            let fields: Vec<&str> = d
                .values
                .iter()
                .filter(|v| v.class == Some(Class::Semantic))
                .map(|v| v.field.as_str())
                .collect();
            return Err(format!(
                "semantic: what is asked changed ({}); the recorded answer is not the answer to it. Record it: {}",
                fields.join(", "),
                m.rerecord.as_deref().unwrap_or(&m.command)
            ));
        }
        None => {
            return Err(format!(
                "no recording of this test to re-key; record it: {}",
                m.command
            ))
        }
    }
    let fields = d.closest.as_deref().unwrap_or_default();
    let Some((index, key)) = d.closest_at.clone() else {
        return Err("the report names no closest recording; run the tests again".into());
    };
    if fields.len() != d.values.len() {
        return Err(format!(
            "{} fields differ and the report keeps {}; record it: {}",
            fields.len(),
            d.values.len(),
            m.command
        ));
    }
    let cassette = report
        .cassette_on_this_machine(
            resolved.cassette_dir(),
            Path::new(&m.miss.cassette),
            2,
            "rekey rewrites",
        )
        .map_err(|e| e.to_string())?;
    let current = cassettes::read_cassette(&cassette).map_err(|e| e.to_string())?;
    let Some(recorded) = current
        .interactions
        .get(index)
        .filter(|x| x.key.as_str() == key)
    else {
        return Err(format!(
            "{}: recording #{} is no longer the one the run compared with; run the tests again",
            cassette.display(),
            index + 1
        ));
    };
    // A recording another call of the run replayed answers that call: re-keyed, that call
    // would miss instead.
    let ordinal = current.interactions[..index]
        .iter()
        .filter(|x| x.key == recorded.key)
        .count();
    let unused = report.unused.iter().any(|u| match u {
        Unused::Recording(u) => {
            u.test == m.miss.test
                && u.provider == m.miss.provider
                && u.key == recorded.key
                && u.ordinal == ordinal
        }
        Unused::Folder { .. } => false,
    });
    if !unused {
        return Err(format!(
            "its closest recording (#{}) answered another call of this run, which would miss once it is re-keyed; record it: {}",
            index + 1,
            m.rerecord.as_deref().unwrap_or(&m.command)
        ));
    }
    let mut request = recorded.request.clone();
    let Body::Json { value, .. } = &mut request.body else {
        return Err("its body is not JSON: only a JSON body can be rebuilt; record it".into());
    };
    let mut said = Vec::new();
    for v in &d.values {
        let Some(pointer) = v.field.strip_prefix("/body") else {
            return Err(format!("{} differs, outside the body; record it", v.field));
        };
        set(value, pointer, v.now.clone())
            .map_err(|e| format!("{}: {e}; record it: {}", v.field, m.command))?;
        said.push(format!(
            "{}{}",
            if v.now.is_none() { "-" } else { "+" },
            v.field
        ));
    }
    if Key::of(&request).as_str() != m.miss.key {
        return Err(format!(
            "the rebuilt request does not have the key the client sent; record it: {}",
            m.command
        ));
    }
    Ok(Plan {
        root: resolved.cassette_dir().to_path_buf(),
        cassette,
        index,
        old_key: recorded.key.clone(),
        request,
        fields: said.join(", "),
    })
}

/// Sets (or with `None` removes) the value at a JSON pointer whose parent exists.
fn set(value: &mut Value, pointer: &str, new: Option<Value>) -> Result<(), &'static str> {
    let tokens = cassettes::pointer::parse(pointer)?;
    let (last, parents) = tokens.split_last().ok_or("the whole body differs")?;
    let mut at = value;
    for t in parents {
        at = match at {
            Value::Object(map) => map.get_mut(t),
            Value::Array(items) => t.parse::<usize>().ok().and_then(|i| items.get_mut(i)),
            _ => None,
        }
        .ok_or("its parent is not in the recording")?;
    }
    match (at, new) {
        (Value::Object(map), Some(v)) => {
            map.insert(last.clone(), v);
        }
        (Value::Object(map), None) => {
            map.shift_remove(last);
        }
        _ => return Err("only an object's member can be added or removed"),
    }
    Ok(())
}
