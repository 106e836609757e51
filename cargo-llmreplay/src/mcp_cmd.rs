//! `cargo llmreplay mcp [--name NAME] -- COMMAND...`: a stdio MCP server's stand-in, run by the
//! agent's MCP configuration in place of the server's command (README, "MCP servers"). It asks
//! the run's daemon what to do with each client message: in replay it answers from the test's
//! `mcp-<name>.json` and never starts the server; in the recording modes it starts the server,
//! relays both ways and hands each exchange (the server's messages until the request's
//! response, with the client's answers to the server's own requests) to the daemon to save.
//! With no daemon it only relays. Clients often give a server a short list of variables only
//! (the Python SDK's `stdio_client` does), so the daemon and the test are found in the
//! environment of the nearest process up the tree that has them.

use crate::error::{Error, Outcome, Result};
use bytes::Bytes;
use clap::Args;
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::ffi::OsString;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot};

#[derive(Args)]
#[command(
    about = "Stand in for a stdio MCP server: record its messages per test, replay them without it",
    long_about = "Stand in for a stdio MCP server in an agent's MCP configuration: put \
        `cargo llmreplay mcp --name NAME --` before the server's command.\n\n\
        Under `cargo llmreplay test` or `run`, each message is filed under the test whose process \
        started the server, in tests/cassettes/<test>/mcp-NAME.json. Replay answers from it and \
        never starts the server (CI needs neither its binary nor its credentials); --record and \
        --record-missing start it and record; --live mcp:NAME runs it and reports answers that \
        differ from the recording. Outside a run (no LLMREPLAY_BASE_URL in this process or \
        the ones that started it), the server runs as if the shim were not there.",
    after_help = "Examples:\n  \
        cargo llmreplay mcp --name fs -- npx -y @modelcontextprotocol/server-filesystem /data\n  \
        cargo llmreplay mcp -- python weather_server.py      # name: weather_server"
)]
pub struct McpArgs {
    /// The server's name in cassette files (`mcp-NAME.json`) and in --live mcp:NAME
    /// [default: from the command, e.g. server-everything for npx @modelcontextprotocol/server-everything].
    #[arg(long, value_name = "NAME")]
    name: Option<String>,
    /// The server's command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

/// Programs that run another, whose first argument names the server.
const LAUNCHERS: &[&str] = &[
    "npx", "node", "bunx", "bun", "deno", "uvx", "uv", "python", "python3", "pipx", "docker",
    "pnpm", "yarn",
];

/// The server's name from its command: the program's, or for a launcher the first argument
/// that is no flag nor a launcher's own word, without its scope, version and extension.
pub fn name_of(command: &[OsString]) -> String {
    let words: Vec<String> = command
        .iter()
        .map(|w| w.to_string_lossy().into_owned())
        .collect();
    let base = |w: &str| w.rsplit(['/', '\\']).next().unwrap_or(w).to_string();
    let program = words.first().map(|w| base(w)).unwrap_or_default();
    let launcher = LAUNCHERS.contains(&program.trim_end_matches(".exe"));
    let chosen = match launcher {
        false => program,
        true => words
            .iter()
            .skip(1)
            .find(|w| !w.starts_with('-') && !matches!(w.as_str(), "run" | "exec" | "tool" | "dlx"))
            .map(|w| {
                let w = w
                    .rsplit_once('@')
                    .filter(|(head, _)| !head.is_empty())
                    .map_or(w.as_str(), |(head, _)| head);
                base(w)
            })
            .unwrap_or(program),
    };
    let stem = chosen
        .strip_suffix(".py")
        .or_else(|| chosen.strip_suffix(".js"))
        .or_else(|| chosen.strip_suffix(".mjs"))
        .or_else(|| chosen.strip_suffix(".exe"))
        .unwrap_or(&chosen);
    let name: String = stem
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    if name.is_empty() {
        "server".into()
    } else {
        name
    }
}

/// The daemon and the test, as the nearest process up the tree that has them names them.
struct Found {
    /// `LLMREPLAY_BASE_URL`: the run's root, or a test's `<root>/t/<id>`.
    base: String,
    /// The test its variables name (nextest's, or `LLMREPLAY_TEST_ID`); none when the daemon
    /// tells it from the process (a test announced by the pytest plugin, say).
    test: Option<String>,
}

fn find_daemon() -> Option<Found> {
    let own: HashMap<String, String> = std::env::vars().collect();
    found_in(&own).or_else(found_up_the_tree)
}

/// The nearest ancestor's environment that names the daemon (Linux's `/proc`; elsewhere none).
#[cfg(unix)]
fn found_up_the_tree() -> Option<Found> {
    let mut pid = std::os::unix::process::parent_id();
    for _ in 0..64 {
        if pid <= 1 {
            break;
        }
        let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
        let vars: HashMap<String, String> = environ
            .split(|b| *b == 0)
            .filter_map(|kv| {
                let kv = String::from_utf8_lossy(kv);
                let (k, v) = kv.split_once('=')?;
                Some((k.to_string(), v.to_string()))
            })
            .collect();
        if let Some(found) = found_in(&vars) {
            return Some(found);
        }
        pid = parent_of(pid)?;
    }
    None
}

#[cfg(not(unix))]
fn found_up_the_tree() -> Option<Found> {
    None
}

fn found_in(vars: &HashMap<String, String>) -> Option<Found> {
    let base = vars
        .get("LLMREPLAY_BASE_URL")
        .filter(|b| !b.is_empty())?
        .clone();
    let test = vars.get("LLMREPLAY_TEST_ID").cloned().or_else(|| {
        let (binary, name) = (
            vars.get("NEXTEST_BINARY_ID")?,
            vars.get("NEXTEST_TEST_NAME")?,
        );
        Some(format!("{binary}${name}"))
    });
    Some(Found { base, test })
}

#[cfg(unix)]
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The field after the command's closing parenthesis and the state.
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// One keep-alive connection to the daemon's MCP route.
#[derive(Clone)]
struct Daemon {
    send: Arc<tokio::sync::Mutex<hyper::client::conn::http1::SendRequest<Full<Bytes>>>>,
    authority: String,
    path: String,
    name: String,
    test: Option<String>,
}

impl Daemon {
    async fn connect(found: &Found, name: &str) -> Result<Daemon> {
        let rest = found.base.strip_prefix("http://").ok_or_else(|| {
            Error::Usage(format!(
                "LLMREPLAY_BASE_URL={} is not an http:// URL",
                found.base
            ))
        })?;
        let (authority, prefix) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let stream = tokio::net::TcpStream::connect(authority)
            .await
            .map_err(|e| Error::io(format!("cannot reach the daemon at {}", found.base), e))?;
        let _ = stream.set_nodelay(true);
        let (send, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .map_err(|e| {
                    Error::Usage(format!("cannot talk to the daemon at {}: {e}", found.base))
                })?;
        tokio::spawn(conn);
        Ok(Daemon {
            send: Arc::new(tokio::sync::Mutex::new(send)),
            authority: authority.to_string(),
            path: format!("{}/__llmreplay/mcp", prefix.trim_end_matches('/')),
            name: name.to_string(),
            test: found.test.clone(),
        })
    }

    /// `op` with `body`; the daemon's JSON answer, or what it said instead.
    async fn post(
        &self,
        op: &str,
        extra: &str,
        body: Vec<u8>,
    ) -> std::result::Result<Value, String> {
        let mut req =
            http::Request::post(format!("{}?name={}&op={op}{extra}", self.path, self.name))
                .header(http::header::HOST, &self.authority)
                .header(http::header::CONTENT_TYPE, "application/json");
        if let Some(test) = &self.test {
            let encoded =
                percent_encoding::utf8_percent_encode(test, percent_encoding::NON_ALPHANUMERIC)
                    .to_string();
            req = req.header("x-test-id", encoded);
        }
        let req = req
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| e.to_string())?;
        let answer = {
            let mut send = self.send.lock().await;
            send.ready().await.map_err(|e| e.to_string())?;
            send.send_request(req).await.map_err(|e| e.to_string())?
        };
        let status = answer.status();
        let bytes = answer
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        if !status.is_success() {
            return Err(String::from_utf8_lossy(&bytes).into_owned());
        }
        serde_json::from_slice(&bytes).map_err(|e| e.to_string())
    }
}

pub fn run(args: McpArgs) -> Result<Outcome> {
    let name = args.name.clone().unwrap_or_else(|| name_of(&args.command));
    let Some(found) = find_daemon() else {
        return passthrough(&args.command);
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io("cannot start the shim's runtime".to_string(), e))?;
    runtime.block_on(async move {
        let daemon = Daemon::connect(&found, &name).await?;
        let opened = daemon
            .post("open", "", b"{}".to_vec())
            .await
            .map_err(|m| Error::Usage(format!("the daemon refused MCP server {name:?}: {m}")))?;
        let mode = opened["mode"].as_str().unwrap_or("replay").to_string();
        let live = opened["live"].as_bool().unwrap_or(false);
        let max_line = opened["body_bytes"]
            .as_u64()
            .map_or(DEFAULT_MAX_LINE, |b| b as usize);
        let code = if mode == "replay" && !live {
            replay(daemon, max_line).await
        } else {
            relay(
                daemon,
                &args.command,
                mode == "record-missing" && !live,
                max_line,
            )
            .await?
        };
        std::process::exit(code)
    })
}

/// No daemon: the server runs as if the shim were not there.
fn passthrough(command: &[OsString]) -> Result<Outcome> {
    let status = std::process::Command::new(&command[0])
        .args(&command[1..])
        .status()
        .map_err(|e| Error::io(format!("cannot start {}", command[0].to_string_lossy()), e))?;
    std::process::exit(status.code().unwrap_or(1))
}

/// Writes lines to our stdout in the order they are sent.
fn writer() -> (mpsc::UnboundedSender<Vec<u8>>, tokio::task::JoinHandle<()>) {
    let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
    let task = tokio::spawn(async move {
        let mut out = tokio::io::stdout();
        while let Some(mut line) = rx.recv().await {
            line.push(b'\n');
            if out.write_all(&line).await.is_err() || out.flush().await.is_err() {
                break;
            }
        }
    });
    (tx, task)
}

fn line_of(message: &Value) -> Vec<u8> {
    serde_json::to_vec(message).expect("JSON values serialise")
}

/// Which end of the shim a line came from, for what it says when one is broken.
#[derive(Clone, Copy)]
enum Side {
    Client,
    Server,
}

impl std::fmt::Display for Side {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Side::Client => "the client (on the shim's stdin)",
            Side::Server => "the MCP server (on its stdout)",
        })
    }
}

/// The longest line when the daemon does not say (`[limits] body_mib`'s default, 100 MiB).
const DEFAULT_MAX_LINE: usize = 100 << 20;

/// One line of stdio MCP framing (newline-delimited, UTF-8 JSON-RPC), as read.
#[derive(Debug, PartialEq)]
pub(crate) enum Line {
    /// A UTF-8 line, without its `\n` (nor a `\r` before it).
    Text(String),
    /// A line that is not UTF-8: its bytes as read (with their `\n`), its number from 1, and
    /// the offset in the stream of its first byte that is not UTF-8.
    NotUtf8 {
        bytes: Vec<u8>,
        number: u64,
        at: u64,
    },
    /// A line longer than the cap, without its end read: its number from 1 and the offset of
    /// its first byte. Nothing after it is read.
    TooLong { number: u64, at: u64 },
}

/// Reads stdio MCP framing line by line, counting lines and bytes, so that a broken line can
/// be named where it is; `tokio`'s `lines()` instead ends the stream at the first bad byte.
/// A line is at most `max` bytes before its `\n`, so that a peer that never sends one cannot
/// grow the shim's memory without bound.
pub(crate) struct Lines<R> {
    reader: BufReader<R>,
    number: u64,
    offset: u64,
    max: usize,
    /// Set after a line over the cap: the rest of the stream is not framed.
    overlong: bool,
}

impl<R: tokio::io::AsyncRead + Unpin> Lines<R> {
    pub(crate) fn new(read: R, max: usize) -> Self {
        Lines {
            reader: BufReader::new(read),
            number: 0,
            offset: 0,
            max,
            overlong: false,
        }
    }

    /// The next line; none at the end.
    pub(crate) async fn next(&mut self) -> std::io::Result<Option<Line>> {
        if self.overlong {
            return Ok(None);
        }
        let mut bytes = Vec::new();
        loop {
            let buf = self.reader.fill_buf().await?;
            if buf.is_empty() {
                break;
            }
            let (used, done) = match buf.iter().position(|b| *b == b'\n') {
                Some(at) => (at + 1, true),
                None => (buf.len(), false),
            };
            bytes.extend_from_slice(&buf[..used]);
            self.reader.consume(used);
            let content = bytes.len() - usize::from(done);
            if content > self.max {
                self.overlong = true;
                self.number += 1;
                return Ok(Some(Line::TooLong {
                    number: self.number,
                    at: self.offset,
                }));
            }
            if done {
                break;
            }
        }
        if bytes.is_empty() {
            return Ok(None);
        }
        self.number += 1;
        let start = self.offset;
        self.offset += bytes.len() as u64;
        Ok(Some(frame(bytes, self.number, start)))
    }
}

/// One line's bytes (`start` the stream offset of its first) as a [`Line`].
pub(crate) fn frame(bytes: Vec<u8>, number: u64, start: u64) -> Line {
    match String::from_utf8(bytes) {
        Ok(mut text) => {
            if text.ends_with('\n') {
                text.pop();
                if text.ends_with('\r') {
                    text.pop();
                }
            }
            Line::Text(text)
        }
        Err(e) => {
            let at = start + e.utf8_error().valid_up_to() as u64;
            Line::NotUtf8 {
                bytes: e.into_bytes(),
                number,
                at,
            }
        }
    }
}

/// What the shim says when `side` sent a line that is not UTF-8.
fn not_utf8(side: Side, number: u64, at: u64) -> String {
    format!("cargo-llmreplay mcp: {side} sent a line that is not UTF-8 (line {number}, byte offset {at}); MCP's stdio messages are UTF-8 JSON, one a line")
}

/// What the shim says when `side` sent a line longer than the cap.
fn too_long(side: Side, number: u64, at: u64, max: usize) -> String {
    format!("cargo-llmreplay mcp: {side} sent a line longer than {max} bytes (line {number}, starting at byte offset {at}) without its newline; MCP's stdio messages are one a line, and a larger one than [limits] body_mib in llmreplay.toml allows cannot be recorded")
}

/// Replay: every answer from the cassette; the server never starts.
async fn replay(daemon: Daemon, max_line: usize) -> i32 {
    let (out, writing) = writer();
    // The server's requests waiting for the client's answer, by id.
    let waiting: Arc<Mutex<HashMap<String, oneshot::Sender<()>>>> = Arc::default();
    let mut lines = Lines::new(tokio::io::stdin(), max_line);
    loop {
        let line = match lines.next().await {
            Ok(Some(Line::Text(line))) => line,
            Ok(None) => break,
            Ok(Some(Line::NotUtf8 { number, at, .. })) => {
                eprintln!("{}", not_utf8(Side::Client, number, at));
                return 1;
            }
            Ok(Some(Line::TooLong { number, at })) => {
                eprintln!("{}", too_long(Side::Client, number, at, max_line));
                return 1;
            }
            Err(e) => {
                eprintln!("cargo-llmreplay mcp: cannot read the client's messages: {e}");
                return 1;
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        let Ok(message) = serde_json::from_str::<Value>(&line) else {
            let _ = out.send(line_of(&cassettes::mcp::miss_error(
                &Value::Null,
                "cargo-llmreplay: a line that is no JSON",
            )));
            continue;
        };
        if cassettes::mcp::kind(&message) == Some(cassettes::mcp::Kind::Response) {
            if let Some(done) = waiting
                .lock()
                .expect("lock")
                .remove(&message["id"].to_string())
            {
                let _ = done.send(());
            }
        }
        let answer = match daemon.post("call", "", line.into_bytes()).await {
            Ok(answer) => answer,
            Err(m) => {
                json!({"do": "answer", "message": cassettes::mcp::miss_error(message.get("id").unwrap_or(&Value::Null), &format!("cargo-llmreplay: the daemon could not answer: {m}"))})
            }
        };
        match answer["do"].as_str() {
            Some("replay") => {
                let steps = answer["steps"].as_array().cloned().unwrap_or_default();
                let (out, waiting) = (out.clone(), waiting.clone());
                tokio::spawn(async move { play(steps, out, waiting).await });
            }
            Some("answer") if message.get("id").is_some() => {
                let _ = out.send(line_of(&answer["message"]));
            }
            Some("exit") => return 1,
            _ => {}
        }
    }
    drop(out);
    let _ = writing.await;
    0
}

/// Sends a recorded exchange's server messages in order, waiting after each request of the
/// server's for the client's answer when more follows.
async fn play(
    steps: Vec<Value>,
    out: mpsc::UnboundedSender<Vec<u8>>,
    waiting: Arc<Mutex<HashMap<String, oneshot::Sender<()>>>>,
) {
    let n = steps.len();
    for (i, step) in steps.into_iter().enumerate() {
        let Some(message) = step.get("server") else {
            continue;
        };
        let asks =
            cassettes::mcp::kind(message) == Some(cassettes::mcp::Kind::Request) && i + 1 < n;
        let answered = asks.then(|| {
            let (tx, rx) = oneshot::channel();
            waiting
                .lock()
                .expect("lock")
                .insert(message["id"].to_string(), tx);
            rx
        });
        if out.send(line_of(message)).is_err() {
            return;
        }
        if let Some(answered) = answered {
            let _ = answered.await;
        }
    }
}

/// One exchange under way while the server runs: its ticket and what crossed so far.
struct Flow {
    ticket: Option<u64>,
    steps: Vec<Value>,
    started: Instant,
}

#[derive(Default)]
struct Flows {
    /// Requests sent to the server, not answered yet, in the order sent.
    open: Vec<(String, Flow)>,
    /// The last notification the client sent while no request was open: the server's
    /// messages that follow it are its answer.
    after_notification: Option<Flow>,
    /// The server's requests, by id, and the request whose exchange they belong to.
    asked: HashMap<String, String>,
    /// Ids of requests whose answers the client already had from the cassette (record-missing
    /// keeps the server's handshake).
    swallowed: Vec<String>,
}

/// The recording modes and --live: the server runs and each exchange goes to the daemon.
async fn relay(
    daemon: Daemon,
    command: &[OsString],
    lazy_handshake: bool,
    max_line: usize,
) -> Result<i32> {
    let mut child = tokio::process::Command::new(&command[0])
        .args(&command[1..])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| {
            Error::io(
                format!(
                    "cannot start the MCP server {}",
                    command[0].to_string_lossy()
                ),
                e,
            )
        })?;
    let mut server_in = child.stdin.take().expect("piped");
    let server_out = child.stdout.take().expect("piped");
    let server_err = stderr_tail(child.stderr.take().expect("piped"));
    // Set when the server sent a line that is not UTF-8: passed on as it was, never recorded,
    // and the shim's status says so.
    let broken = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (out, writing) = writer();
    let flows: Arc<Mutex<Flows>> = Arc::default();
    // Saves an exchange (or, with nothing to save, lets the daemon forget it). The client gets
    // a request's response only once it is saved: a client that ends the server as soon as it
    // has its answer loses nothing.
    let save = {
        let daemon = daemon.clone();
        move |flow: Flow| {
            let daemon = daemon.clone();
            async move {
                let Some(ticket) = flow.ticket else { return };
                let ms = flow.started.elapsed().as_millis();
                let body = line_of(&Value::Array(flow.steps));
                if let Err(m) = daemon
                    .post("save", &format!("&ticket={ticket}&ms={ms}"), body)
                    .await
                {
                    eprintln!("cargo-llmreplay mcp: {m}");
                }
            }
        }
    };
    // The server's messages: to the client, and into the exchange they belong to. Ends
    // true when the server broke the framing past repair (a line over the cap).
    let from_server = {
        let (out, flows, save, broken) = (out.clone(), flows.clone(), save.clone(), broken.clone());
        tokio::spawn(async move {
            let mut lines = Lines::new(server_out, max_line);
            loop {
                let line = match lines.next().await {
                    Ok(Some(Line::Text(line))) => line,
                    Ok(None) => break,
                    Ok(Some(Line::TooLong { number, at })) => {
                        eprintln!("{}", too_long(Side::Server, number, at, max_line));
                        return true;
                    }
                    // The client gets the line as the server wrote it, as it would without the
                    // shim: the shim changes nothing a client sees. It cannot be recorded (a
                    // cassette holds JSON), so the exchange it belongs to is not saved, and the
                    // shim says so and ends with a failure status.
                    Ok(Some(Line::NotUtf8 {
                        mut bytes,
                        number,
                        at,
                    })) => {
                        eprintln!("{}; it was passed on to the client as it is, and its exchange is not recorded", not_utf8(Side::Server, number, at));
                        broken.store(true, std::sync::atomic::Ordering::SeqCst);
                        if bytes.last() == Some(&b'\n') {
                            bytes.pop();
                        }
                        let _ = out.send(bytes);
                        continue;
                    }
                    Err(e) => {
                        eprintln!(
                            "cargo-llmreplay mcp: cannot read the MCP server's messages: {e}"
                        );
                        broken.store(true, std::sync::atomic::Ordering::SeqCst);
                        break;
                    }
                };
                let message = serde_json::from_str::<Value>(&line).ok();
                let mut done = None;
                let mut pass = true;
                if let Some(message) = &message {
                    let mut f = flows.lock().expect("lock");
                    let id = message.get("id").map(Value::to_string).unwrap_or_default();
                    match cassettes::mcp::kind(message) {
                        Some(cassettes::mcp::Kind::Response) => {
                            if let Some(at) = f.swallowed.iter().position(|s| *s == id) {
                                f.swallowed.remove(at);
                                pass = false;
                            } else if let Some(at) = f.open.iter().position(|(open, _)| *open == id)
                            {
                                let (_, mut flow) = f.open.remove(at);
                                flow.steps.push(json!({"server": message}));
                                done = Some(flow);
                            }
                        }
                        Some(kind) => {
                            let step = json!({"server": message});
                            let owner = f.open.last().map(|(id, _)| id.clone());
                            match owner {
                                Some(owner) => {
                                    if kind == cassettes::mcp::Kind::Request {
                                        f.asked.insert(id.clone(), owner.clone());
                                    }
                                    if let Some((_, flow)) =
                                        f.open.iter_mut().find(|(o, _)| *o == owner)
                                    {
                                        flow.steps.push(step);
                                    }
                                }
                                None => {
                                    if let Some(flow) = f.after_notification.as_mut() {
                                        flow.steps.push(step);
                                    }
                                }
                            }
                        }
                        None => {}
                    }
                }
                if let Some(flow) = done {
                    save(flow).await;
                }
                if pass {
                    let _ = out.send(line.into_bytes());
                }
            }
            false
        })
    };
    let mut from_server = from_server;
    let mut lines = Lines::new(tokio::io::stdin(), max_line);
    let mut exit = None;
    let mut server_gone = false;
    let mut server_broke = false;
    loop {
        let line = tokio::select! {
            biased;
            line = lines.next() => line,
            // The server closed its stdout (it exited) while the client still talks: the
            // client would wait for ever for an answer.
            framing_broke = &mut from_server => {
                if matches!(framing_broke, Ok(true)) {
                    exit = Some(1);
                    server_broke = true;
                } else {
                    server_gone = true;
                }
                break;
            }
        };
        let line = match line {
            Ok(Some(Line::Text(line))) => line,
            Ok(None) => break,
            Ok(Some(Line::NotUtf8 { number, at, .. })) => {
                eprintln!("{}", not_utf8(Side::Client, number, at));
                exit = Some(1);
                break;
            }
            Ok(Some(Line::TooLong { number, at })) => {
                eprintln!("{}", too_long(Side::Client, number, at, max_line));
                exit = Some(1);
                break;
            }
            Err(e) => {
                eprintln!("cargo-llmreplay mcp: cannot read the client's messages: {e}");
                exit = Some(1);
                break;
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        let Ok(message) = serde_json::from_str::<Value>(&line) else {
            let _ = server_in.write_all(format!("{line}\n").as_bytes()).await;
            continue;
        };
        let kind = cassettes::mcp::kind(&message);
        let id = message.get("id").map(Value::to_string).unwrap_or_default();
        // A new client message ends the notification's answer before it.
        let ended = flows.lock().expect("lock").after_notification.take();
        if let Some(flow) = ended {
            save(flow).await;
        }
        let answer = match daemon.post("call", "", line.clone().into_bytes()).await {
            Ok(answer) => answer,
            Err(m) => {
                eprintln!("cargo-llmreplay mcp: the daemon could not take a message: {m}");
                json!({"do": "forward"})
            }
        };
        let mut send = false;
        match answer["do"].as_str() {
            Some("forward") => {
                send = true;
                let flow = Flow {
                    ticket: answer["ticket"].as_u64(),
                    steps: Vec::new(),
                    started: Instant::now(),
                };
                // A notification while a request is open: the server's messages go to that
                // request, so nothing is saved for it.
                let released = {
                    let mut f = flows.lock().expect("lock");
                    match kind {
                        Some(cassettes::mcp::Kind::Request) => {
                            f.open.push((id.clone(), flow));
                            None
                        }
                        Some(cassettes::mcp::Kind::Notification) if f.open.is_empty() => {
                            f.after_notification = Some(flow);
                            None
                        }
                        Some(cassettes::mcp::Kind::Response) => {
                            // The client's answer to a request of the server's: part of the
                            // exchange that request came in.
                            if let Some(owner) = f.asked.remove(&id) {
                                if let Some((_, open)) =
                                    f.open.iter_mut().find(|(o, _)| *o == owner)
                                {
                                    open.steps.push(json!({"client": message}));
                                }
                            }
                            None
                        }
                        _ => Some(flow),
                    }
                };
                if let Some(flow) = released {
                    save(flow).await;
                }
            }
            Some("replay") => {
                let steps = answer["steps"].as_array().cloned().unwrap_or_default();
                for step in steps {
                    if let Some(m) = step.get("server") {
                        let _ = out.send(line_of(m));
                    }
                }
                // The server still needs its handshake, for what is recorded later.
                let handshake = matches!(
                    cassettes::mcp::method(&message),
                    Some("initialize" | "notifications/initialized")
                );
                if lazy_handshake && handshake {
                    send = true;
                    if kind == Some(cassettes::mcp::Kind::Request) {
                        flows.lock().expect("lock").swallowed.push(id.clone());
                    }
                }
            }
            Some("answer") if kind == Some(cassettes::mcp::Kind::Request) => {
                let _ = out.send(line_of(&answer["message"]));
            }
            Some("exit") => {
                exit = Some(1);
                break;
            }
            _ => {}
        }
        if send
            && server_in
                .write_all(format!("{line}\n").as_bytes())
                .await
                .is_err()
        {
            server_gone = true;
            break;
        }
    }
    if let Some(code) = exit {
        let _ = child.kill().await;
        release_open(&daemon, &flows, server_broke).await;
        return Ok(code);
    }
    if server_gone {
        release_open(&daemon, &flows, true).await;
        return Ok(server_exited(child, command, server_err, out, writing).await);
    }
    // The client is done: the server's stdin closes, and what it still says is relayed.
    drop(server_in);
    let _ = from_server.await;
    let ended = flows.lock().expect("lock").after_notification.take();
    if let Some(flow) = ended {
        save(flow).await;
    }
    release_open(&daemon, &flows, false).await;
    drop(out);
    let _ = writing.await;
    let status = child.wait().await.ok().and_then(|s| s.code()).unwrap_or(0);
    // A process the server started may hold its stderr open after it exits.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), server_err).await;
    if broken.load(std::sync::atomic::Ordering::SeqCst) && status == 0 {
        return Ok(1);
    }
    Ok(status)
}

/// Lets the daemon forget the exchanges still open when the shim ends (the server never
/// answered them, or its answer was not UTF-8): nothing is saved for them, and the run's end
/// does not wait for them. When `server_ended`, each ends broken, saying the server ended
/// before answering.
async fn release_open(daemon: &Daemon, flows: &Mutex<Flows>, server_ended: bool) {
    let open: Vec<Flow> = {
        let mut f = flows.lock().expect("lock");
        let mut open: Vec<Flow> = f.open.drain(..).map(|(_, flow)| flow).collect();
        open.extend(f.after_notification.take());
        open
    };
    for ticket in open.into_iter().filter_map(|flow| flow.ticket) {
        let _ = daemon
            .post(
                "save",
                &format!(
                    "&ticket={ticket}&ms=0{}",
                    if server_ended { "&ended=server" } else { "" }
                ),
                b"[]".to_vec(),
            )
            .await;
    }
}

/// How many of the server's last stderr lines the shim repeats when it exits early.
const STDERR_TAIL: usize = 20;

/// Passes the server's stderr on to ours line by line, keeping its last [`STDERR_TAIL`] lines.
fn stderr_tail(
    err: tokio::process::ChildStderr,
) -> tokio::task::JoinHandle<std::collections::VecDeque<String>> {
    tokio::spawn(async move {
        let mut tail = std::collections::VecDeque::new();
        let mut reader = BufReader::new(err);
        let mut ours = tokio::io::stderr();
        let mut line = Vec::new();
        while matches!(reader.read_until(b'\n', &mut line).await, Ok(n) if n > 0) {
            let _ = ours.write_all(&line).await;
            if tail.len() == STDERR_TAIL {
                tail.pop_front();
            }
            tail.push_back(String::from_utf8_lossy(&line).trim_end().to_string());
            line.clear();
        }
        tail
    })
}

/// The server ended while its client still talked to it: says so, with its status and the
/// last lines of its stderr, and gives a failure status (the server's, or 1), at once; the
/// client then sees its server gone, as it would without the shim.
async fn server_exited(
    mut child: tokio::process::Child,
    command: &[OsString],
    server_err: tokio::task::JoinHandle<std::collections::VecDeque<String>>,
    out: mpsc::UnboundedSender<Vec<u8>>,
    writing: tokio::task::JoinHandle<()>,
) -> i32 {
    let grace = std::time::Duration::from_secs(2);
    // Its stdout is closed; a server that still runs after that is stopped.
    let status = match tokio::time::timeout(grace, child.wait()).await {
        Ok(Ok(status)) => Some(status),
        _ => {
            let _ = child.kill().await;
            None
        }
    };
    // A process the server started may hold its stderr open: the tail so far is enough.
    let tail = tokio::time::timeout(grace, server_err)
        .await
        .ok()
        .and_then(|t| t.ok())
        .unwrap_or_default();
    drop(out);
    let _ = writing.await;
    let program = command
        .iter()
        .map(|w| w.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ");
    let how = match status {
        Some(s) => describe(s),
        None => "closed its stdout and was stopped".to_string(),
    };
    let mut said = format!(
        "cargo-llmreplay mcp: the MCP server `{}` {how} while the client was still talking to it",
        program.escape_debug()
    );
    if tail.is_empty() {
        said.push_str("; it wrote nothing on stderr");
    } else {
        said.push_str(&format!("; the last {} line(s) of its stderr:", tail.len()));
        for line in &tail {
            said.push_str(&format!("\n  | {}", line.escape_debug()));
        }
    }
    eprintln!("{said}");
    match status.and_then(|s| s.code()) {
        Some(code) if code != 0 => code,
        _ => 1,
    }
}

/// An exit status in words: `exited with status 3`, `was killed by signal 9`.
fn describe(status: std::process::ExitStatus) -> String {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return format!("was killed by signal {signal}");
        }
    }
    match status.code() {
        Some(code) => format!("exited with status {code}"),
        None => "exited".to_string(),
    }
}

#[cfg(test)]
mod framing {
    use super::{Line, Lines};
    use proptest::prelude::*;

    /// Cases per property: all of them together take well under a second in CI.
    const CASES: u32 = 256;

    fn read_all(input: &[u8]) -> Vec<Line> {
        read_capped(input, usize::MAX)
    }

    fn read_capped(input: &[u8], max: usize) -> Vec<Line> {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(async {
                let mut lines = Lines::new(input, max);
                let mut out = Vec::new();
                while let Some(line) = lines.next().await.unwrap() {
                    out.push(line);
                }
                out
            })
    }

    /// A JSON-RPC message line, then bytes flipped in it.
    fn mutated() -> impl Strategy<Value = Vec<u8>> {
        (
            prop::collection::vec((any::<usize>(), any::<u8>()), 0..4),
            "[a-z/]{0,12}",
        )
            .prop_map(|(flips, method)| {
                let mut line =
                    format!("{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"{method}\"}}\n")
                        .into_bytes();
                let n = line.len();
                for (at, b) in flips {
                    line[at % n] = b;
                }
                line
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(CASES))]

        /// Every byte is in exactly one line, in order; a line that is not UTF-8 names the
        /// offset of its first bad byte and its own number; nothing panics.
        #[test]
        fn lines_account_for_every_byte(input in prop::collection::vec(any::<u8>(), 0..512)) {
            let mut rebuilt = Vec::new();
            for (i, line) in read_all(&input).into_iter().enumerate() {
                match line {
                    Line::Text(text) => {
                        prop_assert!(!text.contains('\n'));
                        let start = rebuilt.len();
                        rebuilt.extend_from_slice(text.as_bytes());
                        // What was stripped: "\n" or "\r\n", when the input had it.
                        for end in ["\r\n", "\n"] {
                            if input[start + text.len()..].starts_with(end.as_bytes()) {
                                rebuilt.extend_from_slice(end.as_bytes());
                                break;
                            }
                        }
                    }
                    Line::NotUtf8 { bytes, number, at } => {
                        prop_assert_eq!(number, i as u64 + 1);
                        let start = rebuilt.len() as u64;
                        prop_assert!(at >= start && at < start + bytes.len() as u64);
                        let valid = (at - start) as usize;
                        prop_assert!(std::str::from_utf8(&bytes[..valid]).is_ok());
                        prop_assert!(std::str::from_utf8(&bytes[valid..]).is_err());
                        rebuilt.extend_from_slice(&bytes);
                    }
                    Line::TooLong { .. } => prop_assert!(false, "uncapped"),
                }
            }
            prop_assert_eq!(rebuilt, input);
        }

        /// Capped, a line's bytes before its newline are at most the cap; the first longer
        /// line is named by its number and offset and is the last thing read; the lines
        /// before it are what the uncapped reader gives.
        #[test]
        fn no_line_passes_the_cap(
            input in prop::collection::vec(prop_oneof![any::<u8>(), Just(b'\n'), Just(b'a')], 0..512),
            max in 0usize..64,
        ) {
            let capped = read_capped(&input, max);
            let whole = read_all(&input);
            let mut offset = 0u64;
            for (i, line) in capped.iter().enumerate() {
                let length = input[offset as usize..].iter().position(|b| *b == b'\n');
                let content = length.unwrap_or(input.len() - offset as usize);
                match line {
                    Line::TooLong { number, at } => {
                        prop_assert_eq!(i + 1, capped.len());
                        prop_assert_eq!(*number, i as u64 + 1);
                        prop_assert_eq!(*at, offset);
                        prop_assert!(content > max);
                    }
                    _ => {
                        prop_assert!(content <= max);
                        prop_assert_eq!(line, &whole[i]);
                    }
                }
                offset += (content + usize::from(length.is_some())) as u64;
            }
            if !matches!(capped.last(), Some(Line::TooLong { .. })) {
                prop_assert_eq!(capped.len(), whole.len());
            }
        }

        /// Mutated JSON-RPC lines frame and classify without a panic.
        #[test]
        fn mutated_messages_frame_and_classify(lines in prop::collection::vec(mutated(), 1..8)) {
            let input: Vec<u8> = lines.concat();
            for line in read_all(&input) {
                if let Line::Text(text) = line {
                    if let Ok(message) = serde_json::from_str::<serde_json::Value>(&text) {
                        let _ = cassettes::mcp::kind(&message);
                        let _ = cassettes::mcp::method(&message);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::name_of;

    fn name(words: &[&str]) -> String {
        name_of(&words.iter().map(Into::into).collect::<Vec<_>>())
    }

    #[test]
    fn names_from_commands() {
        assert_eq!(
            name(&[
                "npx",
                "-y",
                "@modelcontextprotocol/server-everything@2026.8.31"
            ]),
            "server-everything"
        );
        assert_eq!(
            name(&["python", "tools/weather_server.py"]),
            "weather_server"
        );
        assert_eq!(name(&["uv", "run", "weather.py"]), "weather");
        assert_eq!(
            name(&["/usr/local/bin/my-server", "--port", "1"]),
            "my-server"
        );
    }
}
