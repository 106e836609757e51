//! The cassette file: what one test exchanged with one provider, as pretty JSON that a reviewer
//! can read in a pull request, and that replays byte for byte. An answer is one body (in the
//! forms of `body.rs`) or a stream of events, each kept as JSON when that reproduces its bytes.

use crate::body::{json_within_depth, Blob, Body, BodyFields};
use crate::id::{ProviderName, TestId};
use crate::key::{Key, RecordedRequest};
use crate::session::{Side, WsFrame};
use crate::Error;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

/// The format version written in every cassette's `llmreplay` field. Version 2 adds each
/// interaction's `recorded_at` and `step`; files of version 1 read unchanged.
pub const FORMAT_VERSION: u32 = 2;

/// The oldest format version this build reads.
pub const OLDEST_FORMAT_VERSION: u32 = 1;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
/// One cassette file: a test's recordings of one provider.
pub struct Cassette {
    /// The format version ([`FORMAT_VERSION`]).
    pub llmreplay: u32,
    /// Whose recordings these are: a test names its folder, so two tests never share one.
    pub test: TestId,
    /// The provider's name, as in the file's name.
    pub provider: ProviderName,
    /// The recordings, in the order they were made.
    pub interactions: Vec<Interaction>,
}

/// What a recording did to the cassette file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordOutcome {
    /// A new recording, at the end.
    Appended,
    /// A changed answer, in place.
    Replaced,
    /// The stored entry differs only in volatile fields, or not at all: the file is untouched.
    Unchanged,
}

/// One request and its answer; for a WebSocket session, the answer is the session's frames
/// (`frames` in the file, in place of `response`).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(try_from = "RawInteraction")]
pub struct Interaction {
    /// The key of the request ([`Key::of`]).
    pub key: Key,
    /// SHA-256 of the answer as stored ([`seal_of`]): an answer edited by hand no longer
    /// matches it and is never replayed. None in cassettes written before seals.
    pub seal: Option<String>,
    /// The request as recorded, normalised and without secrets.
    pub request: RecordedRequest,
    /// The answer (for a session, its frames).
    pub response: RecordedResponse,
    /// How long the answer took, for `--realtime` and review.
    pub timing: Option<Timing>,
    /// Derived for review (the answer as text); replay ignores it.
    pub summary: Option<Summary>,
    /// When it was recorded (UTC, RFC 3339, seconds); none in files of format version 1.
    pub recorded_at: Option<String>,
    /// When the live provider last gave an answer no code could tell from it (`rerun
    /// --mark-verified`), in the same form; its answer was left as recorded.
    pub verified_at: Option<String>,
    /// Its place among every exchange its test made in the run that recorded it, across all
    /// the test's cassette files, from 0: the order of an agent's calls to model and tools.
    pub step: Option<u64>,
}

#[derive(Deserialize)]
struct RawInteraction {
    key: Key,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    seal: Option<String>,
    request: RecordedRequest,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    response: Option<RecordedResponse>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    frames: Option<Vec<WsFrame>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    timing: Option<Timing>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    summary: Option<Summary>,
    #[serde(default)]
    recorded_at: Option<String>,
    #[serde(default)]
    verified_at: Option<String>,
    #[serde(default)]
    step: Option<u64>,
}

impl TryFrom<RawInteraction> for Interaction {
    type Error = String;
    fn try_from(r: RawInteraction) -> Result<Self, String> {
        let response = match (r.response, r.frames) {
            (Some(response), None) => response,
            (None, Some(frames)) => RecordedResponse::session(frames),
            (Some(_), Some(_)) => {
                return Err("an interaction has a response or frames, not both".into())
            }
            (None, None) => {
                return Err(
                    "an interaction needs a response (or frames, for a WebSocket session)".into(),
                )
            }
        };
        Ok(Interaction {
            key: r.key,
            seal: r.seal,
            request: r.request,
            response,
            timing: r.timing,
            summary: r.summary,
            recorded_at: r.recorded_at,
            verified_at: r.verified_at,
            step: r.step,
        })
    }
}

impl Interaction {
    /// A new recording of `request`: its summary derived from `response`; its seal is set when
    /// the store writes it.
    pub fn recorded(
        key: Key,
        request: RecordedRequest,
        response: RecordedResponse,
        timing: Timing,
    ) -> Interaction {
        Interaction {
            key,
            seal: None,
            request,
            summary: Summary::of(&response),
            response,
            timing: Some(timing),
            recorded_at: None,
            verified_at: None,
            step: None,
        }
    }

    /// When it was last known to be the provider's answer: verified, else recorded; none for
    /// a recording of before dates were kept.
    pub fn fresh_at(&self) -> Option<&str> {
        crate::clock::fresher(self.verified_at.as_deref(), self.recorded_at.as_deref())
    }
}

/// An interaction as it is written, borrowed: serialising a cassette copies no answer (a
/// session's frames can be most of the daemon's memory).
#[derive(Serialize)]
struct RawInteractionRef<'a> {
    key: &'a Key,
    #[serde(skip_serializing_if = "Option::is_none")]
    seal: &'a Option<String>,
    request: &'a RecordedRequest,
    #[serde(skip_serializing_if = "Option::is_none")]
    response: Option<&'a RecordedResponse>,
    #[serde(skip_serializing_if = "Option::is_none")]
    frames: Option<&'a [WsFrame]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    timing: &'a Option<Timing>,
    #[serde(skip_serializing_if = "Option::is_none")]
    summary: &'a Option<Summary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    recorded_at: &'a Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    verified_at: &'a Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    step: &'a Option<u64>,
}

impl Serialize for Interaction {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let (response, frames) = match &self.response.body {
            ResponseBody::Session(frames) => (None, Some(frames.as_slice())),
            _ => (Some(&self.response), None),
        };
        RawInteractionRef {
            key: &self.key,
            seal: &self.seal,
            request: &self.request,
            response,
            frames,
            timing: &self.timing,
            summary: &self.summary,
            recorded_at: &self.recorded_at,
            verified_at: &self.verified_at,
            step: &self.step,
        }
        .serialize(serializer)
    }
}

/// Which recording an interaction is, stable across appends and replacements: its request's
/// key and which recording of that key it is (0 for the first).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RecordingId {
    /// The request's key.
    pub key: Key,
    /// Which recording of `key`: 0 for the first.
    pub ordinal: usize,
}

/// The id of each interaction, in order.
pub fn recording_ids(interactions: &[Interaction]) -> Vec<RecordingId> {
    interactions
        .iter()
        .zip(ordinals(interactions))
        .map(|(x, ordinal)| RecordingId {
            key: x.key.clone(),
            ordinal,
        })
        .collect()
}

/// The seal of an answer: SHA-256 of its stored form as compact JSON (status, headers, body,
/// chunks or frames; a blob by its hash), so that what replay sends is covered the way the key
/// covers the request. The order of an answer's JSON members is part of the bytes replay sends,
/// so it is sealed as it stands; the JSON streams into the hash, never built whole.
pub fn seal_of(response: &RecordedResponse) -> String {
    use sha2::{Digest, Sha256};
    struct Hashing(Sha256);
    impl std::io::Write for Hashing {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.update(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut hashing = Hashing(Sha256::new());
    match &response.body {
        ResponseBody::Session(frames) => serde_json::to_writer(&mut hashing, frames),
        _ => serde_json::to_writer(&mut hashing, response),
    }
    .expect("answers serialise");
    hex::encode(hashing.0.finalize())
}

/// A recorded answer: status, the headers worth keeping, and its body or stream.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawResponse", into = "RawResponse")]
pub struct RecordedResponse {
    /// The HTTP status (101 for a session).
    pub status: u16,
    /// The headers worth keeping: no secrets, nothing of the transfer.
    pub headers: BTreeMap<String, String>,
    /// The body, stream or frames.
    pub body: ResponseBody,
}

/// An answer is one body, or a stream of events.
#[derive(Clone, Debug, PartialEq)]
pub enum ResponseBody {
    /// A body received whole.
    Whole(Body),
    /// A stream of events (SSE or NDJSON).
    Stream {
        /// How the events are framed.
        format: StreamFormat,
        /// The events, in order, with their times.
        chunks: Vec<Chunk>,
    },
    /// A WebSocket session: every frame, both ways.
    Session(Vec<WsFrame>),
}

/// The response as it stands in the file.
#[derive(Serialize, Deserialize)]
struct RawResponse {
    status: u16,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(flatten)]
    body: BodyFields,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    stream: Option<StreamFormat>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    chunks: Option<Vec<Chunk>>,
}

impl TryFrom<RawResponse> for RecordedResponse {
    type Error = String;
    fn try_from(raw: RawResponse) -> Result<Self, String> {
        let body = match raw.chunks {
            Some(chunks) => {
                if Body::try_from(raw.body)? != Body::Empty {
                    return Err("a response has chunks or a body, not both".into());
                }
                ResponseBody::Stream {
                    // Cassettes written before NDJSON was told apart are all SSE.
                    format: raw.stream.unwrap_or(StreamFormat::Sse),
                    chunks,
                }
            }
            None => ResponseBody::Whole(raw.body.try_into()?),
        };
        Ok(RecordedResponse {
            status: raw.status,
            headers: raw.headers,
            body,
        })
    }
}

impl From<RecordedResponse> for RawResponse {
    fn from(r: RecordedResponse) -> RawResponse {
        let (body, stream, chunks) = match r.body {
            ResponseBody::Whole(b) => (b.into(), None, None),
            ResponseBody::Stream { format, chunks } => {
                (BodyFields::default(), Some(format), Some(chunks))
            }
            // Written by the interaction as `frames`; a lone response says only its status.
            ResponseBody::Session(_) => (BodyFields::default(), None, None),
        };
        RawResponse {
            status: r.status,
            headers: r.headers,
            body,
            stream,
            chunks,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
/// How a stream frames its events.
pub enum StreamFormat {
    /// Server-sent events (OpenAI, Anthropic, Gemini).
    Sse,
    /// One JSON object a line (Ollama).
    Ndjson,
}

/// One stream event and when it arrived.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawChunk", into = "RawChunk")]
pub struct Chunk {
    /// The event.
    pub content: ChunkContent,
    /// Milliseconds from sending the request to this chunk's arrival, for `--realtime`.
    pub at_ms: u64,
}

/// Parsed (`event`, `data`) when that reproduces the event's bytes, else the raw text.
#[derive(Clone, Debug, PartialEq)]
pub enum ChunkContent {
    /// An event that parses: SSE's `event:` line and its JSON data.
    Event {
        /// SSE's `event:` name, if the event has one.
        event: Option<String>,
        /// The event's JSON payload.
        data: Value,
    },
    /// An event kept as its raw text.
    Raw(String),
}

#[derive(Serialize, Deserialize)]
struct RawChunk {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    event: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    data: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    raw: Option<String>,
    #[serde(default)]
    at_ms: u64,
}

impl TryFrom<RawChunk> for Chunk {
    type Error = String;
    fn try_from(c: RawChunk) -> Result<Chunk, String> {
        let content = match (c.raw, c.event, c.data) {
            (Some(raw), None, None) => ChunkContent::Raw(raw),
            (Some(_), _, _) => return Err("a chunk has raw or event and data, not both".into()),
            (None, event, data) => ChunkContent::Event {
                event,
                data: data.unwrap_or(Value::Null),
            },
        };
        Ok(Chunk {
            content,
            at_ms: c.at_ms,
        })
    }
}

impl From<Chunk> for RawChunk {
    fn from(c: Chunk) -> RawChunk {
        let (event, data, raw) = match c.content {
            ChunkContent::Event { event, data } => (event, Some(data), None),
            ChunkContent::Raw(raw) => (None, None, Some(raw)),
        };
        RawChunk {
            event,
            data,
            raw,
            at_ms: c.at_ms,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
/// How long an answer took.
pub struct Timing {
    /// Milliseconds to the first byte.
    pub ttfb_ms: u64,
    /// Milliseconds to the last byte.
    pub total_ms: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
/// What an answer said, derived for review; replay ignores it.
pub struct Summary {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    /// The answer's text, deltas assembled.
    pub text: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    /// The tool calls it made.
    pub tool_calls: Vec<ToolCall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Its usage block, as the provider sent it.
    pub usage: Option<Value>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
/// One tool call of an answer.
pub struct ToolCall {
    /// The tool's name.
    pub name: String,
    /// Its arguments, as the JSON text the model wrote.
    pub arguments: String,
}

/// Each interaction's place among the recordings of its key: 0 for the first with that key,
/// 1 for the second. The n-th request with a key replays the n-th recording, so (key, ordinal)
/// names an interaction across runs, re-records and versions of a file.
pub fn ordinals(interactions: &[Interaction]) -> Vec<usize> {
    let mut seen: std::collections::HashMap<&Key, usize> = std::collections::HashMap::new();
    interactions
        .iter()
        .map(|x| {
            let n = seen.entry(&x.key).or_insert(0);
            *n += 1;
            *n - 1
        })
        .collect()
}

impl Cassette {
    /// An empty cassette of `test` for `provider`.
    pub fn new(test: &TestId, provider: &ProviderName) -> Self {
        Cassette {
            llmreplay: FORMAT_VERSION,
            test: test.clone(),
            provider: provider.clone(),
            interactions: Vec::new(),
        }
    }

    /// Parses a cassette file's text; errors name the file and the line.
    pub fn parse(path: &Path, text: &str) -> Result<Self, Error> {
        let cassette: Cassette = serde_json::from_str(text).map_err(|e| Error::Corrupt {
            path: path.to_path_buf(),
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        })?;
        if !(OLDEST_FORMAT_VERSION..=FORMAT_VERSION).contains(&cassette.llmreplay) {
            return Err(Error::Corrupt {
                path: path.to_path_buf(),
                line: 1,
                column: 1,
                message: format!(
                    "cassette format version {} is not one this build reads ({OLDEST_FORMAT_VERSION} to {FORMAT_VERSION}); upgrade cargo-llmreplay",
                    cassette.llmreplay
                ),
            });
        }
        Ok(cassette)
    }

    /// Puts `new` as the `ordinal`-th recording of its key: in place of the one there (kept as it
    /// is when its answer is the same), else at the end.
    pub(crate) fn put(&mut self, ordinal: usize, new: Interaction) -> RecordOutcome {
        let existing = self
            .interactions
            .iter()
            .enumerate()
            .filter(|(_, i)| i.key == new.key)
            .nth(ordinal)
            .map(|(i, _)| i);
        match existing {
            Some(i) if self.interactions[i].response.comparable() == new.response.comparable() => {
                RecordOutcome::Unchanged
            }
            Some(i) => {
                self.interactions[i] = new;
                RecordOutcome::Replaced
            }
            None => {
                self.interactions.push(new);
                RecordOutcome::Appended
            }
        }
    }

    /// Pretty JSON with a final newline: the same cassette always gives the same bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = serde_json::to_vec_pretty(self).expect("cassettes serialise");
        out.push(b'\n');
        out
    }

    /// The interactions (by position) whose stored key is not the key of their stored request:
    /// edited by hand, and so never to be replayed as they stand.
    pub fn key_mismatches(&self) -> Vec<usize> {
        self.interactions
            .iter()
            .enumerate()
            .filter(|(_, x)| Key::of(&x.request) != x.key)
            .map(|(i, _)| i)
            .collect()
    }

    /// The interactions (by position) whose answer no longer matches its seal: edited by hand.
    pub fn seal_mismatches(&self) -> Vec<usize> {
        self.interactions
            .iter()
            .enumerate()
            .filter(|(_, x)| x.seal.as_ref().is_some_and(|s| *s != seal_of(&x.response)))
            .map(|(i, _)| i)
            .collect()
    }

    /// Every blob that requests and answers refer to.
    pub fn blobs(&self) -> Vec<&Blob> {
        self.interactions
            .iter()
            .flat_map(|x| {
                let mut out = x.request.body.blobs();
                match &x.response.body {
                    ResponseBody::Whole(b) => out.extend(b.blobs()),
                    ResponseBody::Session(frames) => {
                        out.extend(frames.iter().flat_map(|f| f.body.blobs()))
                    }
                    ResponseBody::Stream { .. } => {}
                }
                out
            })
            .collect()
    }

    /// Fills in the bytes of the blobs that `read` (given a hash) can find, and leaves the others
    /// unread: for showing sizes in a review, where a missing blob is not the question.
    pub fn fill_blobs(&mut self, read: impl Fn(&str) -> Option<Bytes>) {
        for x in &mut self.interactions {
            let response = match &mut x.response.body {
                ResponseBody::Whole(b) => b.blobs_mut(),
                ResponseBody::Session(frames) => {
                    frames.iter_mut().flat_map(|f| f.body.blobs_mut()).collect()
                }
                ResponseBody::Stream { .. } => Vec::new(),
            };
            for blob in x.request.body.blobs_mut().into_iter().chain(response) {
                if blob.bytes.is_none() {
                    blob.bytes = read(&blob.sha256);
                }
            }
        }
    }

    /// Reads every blob from `folder/blobs/`, checking its hash.
    pub fn load_blobs(&mut self, folder: &Path) -> Result<(), Error> {
        for x in &mut self.interactions {
            for blob in x.request.body.blobs_mut() {
                blob.load(folder)?;
            }
            let blobs = match &mut x.response.body {
                ResponseBody::Whole(b) => b.blobs_mut(),
                ResponseBody::Session(frames) => {
                    frames.iter_mut().flat_map(|f| f.body.blobs_mut()).collect()
                }
                ResponseBody::Stream { .. } => Vec::new(),
            };
            for blob in blobs {
                blob.load(folder)?;
            }
        }
        Ok(())
    }
}

impl RecordedResponse {
    /// A non-streamed answer, in the form that gives back its bytes exactly.
    /// A WebSocket session: the upgrade's answer is its frames.
    pub fn session(frames: Vec<WsFrame>) -> Self {
        RecordedResponse {
            status: 101,
            headers: BTreeMap::new(),
            body: ResponseBody::Session(frames),
        }
    }

    /// The frames, for a session.
    pub fn frames(&self) -> Option<&[WsFrame]> {
        match &self.body {
            ResponseBody::Session(frames) => Some(frames),
            _ => None,
        }
    }

    /// A whole answer, its body in the form that gives back its bytes exactly.
    pub fn with_body(status: u16, headers: BTreeMap<String, String>, body: &[u8]) -> Self {
        RecordedResponse {
            status,
            headers,
            body: ResponseBody::Whole(Body::exact(body)),
        }
    }

    /// A stream, split into its events; each event is stamped with the arrival time of the
    /// network frame that completed it. A stream that is not UTF-8 text is kept whole, as bytes.
    pub fn with_stream(
        status: u16,
        headers: BTreeMap<String, String>,
        format: StreamFormat,
        frames: &[(Bytes, u64)],
    ) -> Self {
        let mut bytes = Vec::new();
        let mut ends = Vec::with_capacity(frames.len());
        for (frame, at) in frames {
            bytes.extend_from_slice(frame);
            ends.push((bytes.len(), *at));
        }
        let Ok(text) = std::str::from_utf8(&bytes) else {
            return RecordedResponse::with_body(status, headers, &bytes);
        };
        let mut chunks = Vec::new();
        let mut start = 0;
        let mut frame = 0;
        for piece in split_events(text, format) {
            start += piece.len();
            while frame + 1 < ends.len() && ends[frame].0 < start {
                frame += 1;
            }
            let at_ms = ends.get(frame).map_or(0, |e| e.1);
            chunks.push(Chunk::from_text(piece, format, at_ms));
        }
        RecordedResponse {
            status,
            headers,
            body: ResponseBody::Stream { format, chunks },
        }
    }

    /// Whether the answer is a Bedrock event stream, kept whole as its binary frames.
    pub fn is_eventstream(&self) -> bool {
        self.headers
            .get("content-type")
            .is_some_and(|ct| ct.starts_with(crate::eventstream::CONTENT_TYPE))
    }

    /// The recorded `content-encoding`, if the answer was sent compressed.
    pub fn content_encoding(&self) -> Option<&str> {
        self.headers.get("content-encoding").map(String::as_str)
    }

    /// The bytes of the body, as they came from upstream (a blob must have been read).
    pub fn body_bytes(&self) -> Bytes {
        match &self.body {
            ResponseBody::Stream { format, chunks } => {
                let mut out = Vec::new();
                for c in chunks {
                    out.extend_from_slice(c.to_text(*format).as_bytes());
                }
                out.into()
            }
            ResponseBody::Whole(body) => body.bytes().unwrap_or_default(),
            ResponseBody::Session(_) => Bytes::new(),
        }
    }

    /// The response with ids, timestamps and headers set aside: what a re-record compares.
    pub fn comparable(&self) -> Value {
        let (mut body, chunks) = match &self.body {
            // Frames compared by what they say: the padding and timing in them change.
            ResponseBody::Whole(_) if self.is_eventstream() => (
                Value::Null,
                self.payloads()
                    .into_iter()
                    .map(|mut p| {
                        blank_volatile(&mut p);
                        p
                    })
                    .collect(),
            ),
            ResponseBody::Whole(b) => (
                b.decoded(self.content_encoding())
                    .or_else(|| b.sha256().map(Value::String))
                    .unwrap_or(Value::Null),
                Vec::new(),
            ),
            ResponseBody::Stream { format, chunks } => (
                Value::Null,
                chunks
                    .iter()
                    .map(|c| {
                        let mut payload = c.payload(*format);
                        blank_volatile(&mut payload);
                        payload
                    })
                    .collect(),
            ),
            ResponseBody::Session(frames) => (
                Value::Null,
                frames
                    .iter()
                    .map(|f| {
                        let mut payload = f
                            .json()
                            .or_else(|| f.body.sha256().map(Value::String))
                            .or_else(|| {
                                f.payload().map(|b| {
                                    Value::String(String::from_utf8_lossy(&b).into_owned())
                                })
                            })
                            .unwrap_or(Value::Null);
                        blank_volatile(&mut payload);
                        serde_json::json!({"from": f.from, "frame": payload})
                    })
                    .collect(),
            ),
        };
        blank_volatile(&mut body);
        serde_json::json!({
            "status": self.status,
            "content_type": self.headers.get("content-type"),
            "body": body,
            "chunks": chunks,
        })
    }

    /// The parsed JSON payloads: the body (decompressed), or each chunk's data.
    pub fn payloads(&self) -> Vec<Value> {
        match &self.body {
            ResponseBody::Stream { format, chunks } => chunks
                .iter()
                .map(|c| c.payload(*format))
                .map(|p| p.get("data").cloned().unwrap_or(p))
                .collect(),
            // A JSON array is a stream sent whole (Gemini without `alt=sse`): its elements are
            // the payloads.
            ResponseBody::Whole(b) if self.is_eventstream() => b
                .bytes()
                .and_then(|bytes| crate::eventstream::payloads(&bytes))
                .unwrap_or_default(),
            ResponseBody::Whole(b) => match b.json(self.content_encoding()) {
                Some(Value::Array(items)) => items,
                other => other.into_iter().collect(),
            },
            ResponseBody::Session(frames) => frames
                .iter()
                .filter(|f| f.from == Side::Server)
                .filter_map(WsFrame::json)
                .collect(),
        }
    }

    /// The answer's body when it is one, not a stream.
    pub fn whole(&self) -> Option<&Body> {
        match &self.body {
            ResponseBody::Whole(b) => Some(b),
            ResponseBody::Stream { .. } | ResponseBody::Session(_) => None,
        }
    }
}

/// Sets aside the fields that differ on every call with the same answer (ids, timestamps,
/// durations), as each provider family names them.
fn blank_volatile(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                if providers::is_volatile(k) {
                    *v = Value::Null;
                } else {
                    blank_volatile(v);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(blank_volatile),
        _ => {}
    }
}

/// Splits stream text after each event terminator (a blank line for SSE, a newline for NDJSON),
/// keeping every byte, so the pieces concatenate back to the input.
fn split_events(text: &str, format: StreamFormat) -> Vec<&str> {
    let mut pieces = Vec::new();
    let mut start = 0;
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let end = match format {
            StreamFormat::Ndjson => (bytes[i] == b'\n').then_some(i + 1),
            StreamFormat::Sse => {
                if bytes[i..].starts_with(b"\n\n") {
                    Some(i + 2)
                } else if bytes[i..].starts_with(b"\r\n\r\n") {
                    Some(i + 4)
                } else {
                    None
                }
            }
        };
        if let Some(end) = end {
            pieces.push(&text[start..end]);
            start = end;
            i = end;
        } else {
            i += 1;
        }
    }
    if start < text.len() {
        pieces.push(&text[start..]);
    }
    pieces
}

impl Chunk {
    fn from_text(text: &str, format: StreamFormat, at_ms: u64) -> Chunk {
        let parsed = match format {
            StreamFormat::Ndjson => text
                .strip_suffix('\n')
                .and_then(|line| json_within_depth(line.as_bytes()))
                .map(|data| (None, data)),
            StreamFormat::Sse => parse_simple_event(text),
        };
        if let Some((event, data)) = parsed {
            let chunk = Chunk {
                content: ChunkContent::Event { event, data },
                at_ms,
            };
            if chunk.to_text(format) == text {
                return chunk;
            }
        }
        Chunk {
            content: ChunkContent::Raw(text.to_string()),
            at_ms,
        }
    }

    /// This chunk's exact bytes on the wire.
    pub fn to_text(&self, format: StreamFormat) -> String {
        let (event, data) = match &self.content {
            ChunkContent::Raw(raw) => return raw.clone(),
            ChunkContent::Event { event, data } => (event, data),
        };
        let data = serde_json::to_string(data).expect("JSON values serialise");
        match format {
            StreamFormat::Ndjson => format!("{data}\n"),
            StreamFormat::Sse => match event {
                Some(e) => format!("event: {e}\ndata: {data}\n\n"),
                None => format!("data: {data}\n\n"),
            },
        }
    }

    /// `{event, data}` with data parsed as JSON where it is JSON, whichever form is stored.
    pub fn payload(&self, format: StreamFormat) -> Value {
        let raw = match &self.content {
            ChunkContent::Event { event, data } => {
                let mut out = serde_json::Map::new();
                if let Some(e) = event {
                    out.insert("event".into(), Value::String(e.clone()));
                }
                out.insert("data".into(), data.clone());
                return Value::Object(out);
            }
            ChunkContent::Raw(raw) => raw,
        };
        if format == StreamFormat::Ndjson {
            let data = json_within_depth(raw.trim().as_bytes())
                .unwrap_or_else(|| Value::String(raw.clone()));
            return serde_json::json!({ "data": data });
        }
        let mut event = None;
        let mut data = String::new();
        for line in raw.lines() {
            if let Some(e) = line.strip_prefix("event:") {
                event = Some(e.trim().to_string());
            } else if let Some(d) = line.strip_prefix("data:") {
                if !data.is_empty() {
                    data.push('\n');
                }
                data.push_str(d.strip_prefix(' ').unwrap_or(d));
            }
        }
        let data = json_within_depth(data.as_bytes()).unwrap_or(Value::String(data));
        let mut out = serde_json::Map::new();
        if let Some(e) = event {
            out.insert("event".into(), Value::String(e));
        }
        out.insert("data".into(), data);
        Value::Object(out)
    }
}

/// `[event: E\n]data: JSON\n\n` and nothing else, the common shape of provider events.
fn parse_simple_event(text: &str) -> Option<(Option<String>, Value)> {
    let body = text.strip_suffix("\n\n")?;
    let mut lines = body.split('\n');
    let first = lines.next()?;
    let (event, data_line) = match first.strip_prefix("event: ") {
        Some(e) => (Some(e.to_string()), lines.next()?),
        None => (None, first),
    };
    if lines.next().is_some() {
        return None;
    }
    let data = json_within_depth(data_line.strip_prefix("data: ")?.as_bytes())?;
    Some((event, data))
}

/// Bytes made once, at load time, so that a replay is a lookup and a write.
#[derive(Clone, Debug)]
pub struct Prepared {
    /// The recorded status.
    pub status: u16,
    /// The recorded headers.
    pub headers: Vec<(String, String)>,
    /// The whole body, chunks concatenated.
    pub body: Bytes,
    /// For streams: each chunk's bytes and arrival time, for `--realtime`.
    pub chunks: Option<Vec<(Bytes, u64)>>,
    /// For a WebSocket session: its frames, blobs read.
    pub frames: Option<Arc<Vec<WsFrame>>>,
    /// Milliseconds to the first byte, for `--realtime`.
    pub ttfb_ms: u64,
}

impl Prepared {
    /// The interaction's answer as bytes; its blobs must have been read.
    pub fn of(interaction: &Interaction) -> Prepared {
        let response = &interaction.response;
        let frames = match &response.body {
            ResponseBody::Session(frames) => Some(Arc::new(frames.clone())),
            _ => None,
        };
        Self::with_frames(interaction, frames)
    }

    /// As [`Prepared::of`], moving a session's frames out of `interaction` instead of copying
    /// them, and leaving its answer empty: the store keeps each answer once, prepared.
    pub fn take(interaction: &mut Interaction) -> Prepared {
        let frames = match &mut interaction.response.body {
            ResponseBody::Session(frames) => Some(Arc::new(std::mem::take(frames))),
            _ => None,
        };
        let prepared = Self::with_frames(interaction, frames);
        interaction.response.body = match interaction.response.body {
            ResponseBody::Session(_) => ResponseBody::Session(Vec::new()),
            _ => ResponseBody::Whole(Body::Empty),
        };
        prepared
    }

    fn with_frames(interaction: &Interaction, frames: Option<Arc<Vec<WsFrame>>>) -> Prepared {
        let response = &interaction.response;
        let (body, chunks) = match &response.body {
            ResponseBody::Stream { format, chunks } => {
                // One buffer for the whole stream; each chunk is a slice of it.
                let texts: Vec<(String, u64)> = chunks
                    .iter()
                    .map(|c| (c.to_text(*format), c.at_ms))
                    .collect();
                let body = Bytes::from(texts.iter().map(|(t, _)| t.as_str()).collect::<String>());
                let mut at = 0;
                let slices = texts
                    .iter()
                    .map(|(t, at_ms)| {
                        at += t.len();
                        (body.slice(at - t.len()..at), *at_ms)
                    })
                    .collect::<Vec<_>>();
                (body, Some(slices))
            }
            _ => (response.body_bytes(), None),
        };
        Prepared {
            status: response.status,
            headers: response
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            body,
            chunks,
            frames,
            ttfb_ms: interaction.timing.as_ref().map_or(0, |t| t.ttfb_ms),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn frames(parts: &[&str]) -> Vec<(Bytes, u64)> {
        parts
            .iter()
            .enumerate()
            .map(|(i, p)| (Bytes::from(p.to_string()), i as u64 * 10))
            .collect()
    }

    #[test]
    fn json_bodies_keep_their_layout() {
        for body in [
            r#"{"b":1,"a":[1,2]}"#.to_string(),
            "{\"b\":1}\n".to_string(),
            serde_json::to_string_pretty(&json!({"z": 1, "a": {"x": []}})).unwrap() + "\n",
            "{ \"odd\" :  1 }".to_string(),
            "not json at all".to_string(),
        ] {
            let r = RecordedResponse::with_body(200, BTreeMap::new(), body.as_bytes());
            assert_eq!(r.body_bytes(), body.as_bytes(), "{body}");
        }
        let r = RecordedResponse::with_body(200, BTreeMap::new(), br#"{"b":1,"a":2}"#);
        assert!(matches!(r.whole(), Some(Body::Json { .. })));
    }

    #[test]
    fn sse_streams_split_into_events_and_replay_exactly() {
        // Frames cut across event boundaries, as the network does.
        let parts = [
            "event: message_start\ndata: {\"type\":\"message_start\"}\n\ndata: {\"x\"",
            ":1}\n\n",
            "data: [DONE]\n\n",
        ];
        let r =
            RecordedResponse::with_stream(200, BTreeMap::new(), StreamFormat::Sse, &frames(&parts));
        let ResponseBody::Stream { chunks, .. } = &r.body else {
            panic!("a stream")
        };
        assert_eq!(chunks.len(), 3);
        assert!(matches!(&chunks[0].content,
            ChunkContent::Event { event: Some(e), .. } if e == "message_start"));
        assert!(matches!(&chunks[1].content,
            ChunkContent::Event { data, .. } if *data == json!({"x": 1})));
        assert_eq!(chunks[1].at_ms, 10, "stamped when its last byte arrived");
        assert_eq!(
            chunks[2].content,
            ChunkContent::Raw("data: [DONE]\n\n".into())
        );
        assert_eq!(r.body_bytes(), parts.concat().as_bytes());
        let p = Prepared::of(&Interaction {
            key: Key::of(&crate::Normalizer::plain().request("POST", "/", None, None, b"", &[])),
            seal: None,
            request: crate::Normalizer::plain().request("POST", "/", None, None, b"", &[]),
            response: r,
            timing: None,
            summary: None,
            recorded_at: None,
            verified_at: None,
            step: None,
        });
        assert_eq!(p.body, parts.concat().as_bytes());
        assert_eq!(p.chunks.unwrap().len(), 3);
    }

    #[test]
    fn crlf_and_ndjson_streams_replay_exactly() {
        let gemini = ["data: {\"a\":1}\r\n\r\n", "data: {\"a\":2}\r\n\r\n"];
        let r = RecordedResponse::with_stream(
            200,
            BTreeMap::new(),
            StreamFormat::Sse,
            &frames(&gemini),
        );
        assert_eq!(r.body_bytes(), gemini.concat().as_bytes());
        assert_eq!(r.payloads(), vec![json!({"a":1}), json!({"a":2})]);
        let ollama = ["{\"message\":{\"content\":\"Hi\"},\"done\":false}\n{\"done\":true}\n"];
        let r = RecordedResponse::with_stream(
            200,
            BTreeMap::new(),
            StreamFormat::Ndjson,
            &frames(&ollama),
        );
        assert!(matches!(&r.body, ResponseBody::Stream { chunks, .. } if chunks.len() == 2));
        assert_eq!(r.body_bytes(), ollama.concat().as_bytes());
    }

    #[test]
    fn volatile_fields_are_not_a_change() {
        let a = RecordedResponse::with_body(
            200,
            BTreeMap::new(),
            br#"{"id":"chatcmpl-1","created":1,"choices":[{"message":{"content":"hi"}}]}"#,
        );
        let b = RecordedResponse::with_body(
            200,
            BTreeMap::new(),
            br#"{"id":"chatcmpl-2","created":2,"choices":[{"message":{"content":"hi"}}]}"#,
        );
        let c = RecordedResponse::with_body(
            200,
            BTreeMap::new(),
            br#"{"id":"chatcmpl-2","created":2,"choices":[{"message":{"content":"ho"}}]}"#,
        );
        assert_eq!(a.comparable(), b.comparable());
        assert_ne!(a.comparable(), c.comparable());
    }

    /// Files written by earlier versions: a fixture of every old form (its keys computed by an
    /// independent implementation of the key rule) and the quickstart's real recordings.
    #[test]
    fn cassettes_written_before_keep_their_bytes_and_keys() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let quickstart = root.join("../examples/quickstart/tests/cassettes");
        let mut files = vec![root.join("src/fixtures/legacy-v1.json")];
        files.extend(crate::cassette_files(&quickstart).unwrap());
        assert!(files.len() >= 3);
        for path in files {
            let text = std::fs::read_to_string(&path).unwrap();
            let cassette = Cassette::parse(&path, &text).unwrap();
            assert_eq!(cassette.key_mismatches(), Vec::<usize>::new(), "{path:?}");
            assert_eq!(
                String::from_utf8(cassette.to_bytes()).unwrap(),
                text,
                "{path:?}"
            );
            for x in &cassette.interactions {
                Prepared::of(x);
            }
        }
    }

    /// Cases per property here and in `stream_fuzz`: all of them together take about a second
    /// in a debug build.
    const CASES: u32 = 256;

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(CASES))]

        /// Streams of any bytes, cut into frames anywhere, split into events that give back
        /// every byte, and a cassette of them reads back equal.
        #[test]
        fn any_stream_splits_and_round_trips(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600),
            cuts in proptest::collection::vec(0usize..600, 0..6),
            ndjson in proptest::prelude::any::<bool>(),
        ) {
            let format = if ndjson { StreamFormat::Ndjson } else { StreamFormat::Sse };
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(bytes.len())).collect();
            cuts.sort_unstable();
            let mut frames = Vec::new();
            let mut start = 0;
            for c in cuts.into_iter().chain([bytes.len()]) {
                frames.push((Bytes::copy_from_slice(&bytes[start..c]), c as u64));
                start = c;
            }
            let r = RecordedResponse::with_stream(200, BTreeMap::new(), format, &frames);
            proptest::prop_assert_eq!(&r.body_bytes()[..], &bytes[..]);
            let text = serde_json::to_string_pretty(&r).unwrap();
            let back: RecordedResponse = serde_json::from_str(&text).unwrap();
            proptest::prop_assert_eq!(&back.body_bytes()[..], &bytes[..]);
            proptest::prop_assert_eq!(back, r);
        }

        /// The loader never panics, whatever it is fed; what it accepts writes back and reads
        /// back the same.
        #[test]
        fn the_loader_takes_any_bytes(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400)) {
            let text = String::from_utf8_lossy(&bytes);
            if let Ok(c) = Cassette::parse(Path::new("x.json"), &text) {
                let again = Cassette::parse(Path::new("x.json"), std::str::from_utf8(&c.to_bytes()).unwrap()).unwrap();
                proptest::prop_assert_eq!(again, c);
            }
        }

        /// Text that looks like a cassette, with any bodies in it, loads and round-trips.
        #[test]
        fn cassettes_of_any_text_round_trip(
            body in "\\PC{0,40}",
            raw in "[a-z:{}\\n \"]{0,40}",
        ) {
            let text = format!(
                r#"{{"llmreplay":1,"test":"t","provider":"p","interactions":[{{"key":"k","request":{{"method":"POST","path":"/","body_text":{}}},"response":{{"status":200,"chunks":[{{"raw":{}}}]}}}}]}}"#,
                serde_json::to_string(&body).unwrap(),
                serde_json::to_string(&raw).unwrap()
            );
            let c = Cassette::parse(Path::new("x.json"), &text).unwrap();
            let again = Cassette::parse(Path::new("x.json"), std::str::from_utf8(&c.to_bytes()).unwrap()).unwrap();
            proptest::prop_assert_eq!(again, c);
        }
    }

    /// The SSE and NDJSON assembler fed real streams with bytes flipped, inserted and deleted,
    /// cut into network frames anywhere: it must take them all, the same way whatever the cuts.
    mod stream_fuzz {
        use super::*;
        use proptest::prelude::*;

        /// Streams as providers send them: OpenAI, Anthropic, Gemini (CRLF), Ollama (NDJSON).
        const STREAMS: [(&str, StreamFormat); 4] = [
            ("data: {\"choices\":[{\"delta\":{\"content\":\"He\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"llo\"}}]}\n\ndata: [DONE]\n\n", StreamFormat::Sse),
            ("event: message_start\ndata: {\"type\":\"message_start\"}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"Hi \u{e9}\"}}\n\n: ping\n\n", StreamFormat::Sse),
            ("data: {\"a\":1}\r\n\r\ndata: {\"a\":[2,{\"b\":null}]}\r\n\r\n", StreamFormat::Sse),
            ("{\"message\":{\"content\":\"Ol\"},\"done\":false}\n{\"done\":true,\"eval_count\":2}\n", StreamFormat::Ndjson),
        ];

        /// `bytes` cut before each of `cuts` (taken modulo its length), each frame stamped
        /// with its end.
        fn cut(bytes: &[u8], cuts: &[usize]) -> Vec<(Bytes, u64)> {
            let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
            cuts.sort_unstable();
            let mut frames = Vec::new();
            let mut start = 0;
            for c in cuts.into_iter().chain([bytes.len()]) {
                frames.push((Bytes::copy_from_slice(&bytes[start..c]), c as u64));
                start = c;
            }
            frames
        }

        /// The events without their times.
        fn contents(r: &RecordedResponse) -> Option<Vec<ChunkContent>> {
            match &r.body {
                ResponseBody::Stream { chunks, .. } => {
                    Some(chunks.iter().map(|c| c.content.clone()).collect())
                }
                _ => None,
            }
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(CASES))]

            /// A mutated stream, cut anywhere: the same events as from one frame; every byte
            /// given back, in order; no more events than bytes, each stamped no later than the
            /// last frame; payloads read without a panic; a cassette of it reads back equal.
            #[test]
            fn mutated_streams_assemble_alike_however_cut(
                which in 0..STREAMS.len(),
                edits in prop::collection::vec((0u8..3, any::<usize>(), any::<u8>()), 0..6),
                cuts in prop::collection::vec(any::<usize>(), 0..12),
            ) {
                let (stream, format) = STREAMS[which];
                let bytes = crate::testing::mutate(stream.as_bytes().to_vec(), &edits);
                let whole = RecordedResponse::with_stream(200, BTreeMap::new(), format, &cut(&bytes, &[]));
                let r = RecordedResponse::with_stream(200, BTreeMap::new(), format, &cut(&bytes, &cuts));
                prop_assert_eq!(contents(&r), contents(&whole));
                prop_assert_eq!(&r.body_bytes()[..], &bytes[..]);
                if let ResponseBody::Stream { chunks, .. } = &r.body {
                    prop_assert!(chunks.len() <= bytes.len());
                    prop_assert!(chunks.iter().all(|c| c.at_ms <= bytes.len() as u64));
                    prop_assert!(chunks.windows(2).all(|w| w[0].at_ms <= w[1].at_ms));
                }
                let _ = r.payloads();
                let _ = r.comparable();
                let text = serde_json::to_string_pretty(&r).unwrap();
                let back: RecordedResponse = serde_json::from_str(&text).unwrap();
                prop_assert_eq!(back, r);
            }

            /// Unmutated, every provider's events parse, and only a comment or `[DONE]` is kept
            /// as raw text.
            #[test]
            fn valid_streams_parse_however_cut(
                which in 0..STREAMS.len(),
                cuts in prop::collection::vec(any::<usize>(), 0..12),
            ) {
                let (stream, format) = STREAMS[which];
                let r = RecordedResponse::with_stream(200, BTreeMap::new(), format, &cut(stream.as_bytes(), &cuts));
                let contents = contents(&r).unwrap();
                prop_assert!(!contents.is_empty());
                for c in contents {
                    if let ChunkContent::Raw(raw) = c {
                        prop_assert!(raw.starts_with(':') || raw.contains("[DONE]") || raw.contains('\r'), "{raw:?}");
                    }
                }
            }
        }
    }

    /// The cassette loader fed real cassette files with bytes flipped, inserted and deleted, as
    /// a bad merge or a hand edit leaves them: it loads them, or says what is wrong and where.
    mod loader_fuzz {
        use super::*;
        use crate::session::{Side, WsFrame};
        use proptest::prelude::*;

        /// A cassette of every form the fixture lacks: a multipart upload answered by a
        /// stream, and a WebSocket session with JSON, text, bytes, a blob and a close.
        fn built() -> (Vec<u8>, Bytes) {
            let normalizer = crate::Normalizer::plain();
            let upload = normalizer.request(
                "POST",
                "/v1/audio/transcriptions",
                None,
                Some("multipart/form-data; boundary=XyZ"),
                b"--XyZ\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper-1\r\n--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\nContent-Type: audio/wav\r\n\r\nRIFF\x00\x01\r\n--XyZ--\r\n",
                &[],
            );
            let stream = RecordedResponse::with_stream(
                200,
                BTreeMap::new(),
                StreamFormat::Sse,
                &[(
                    Bytes::from_static(b"data: {\"text\":\"hi\"}\n\ndata: [DONE]\n\n"),
                    4,
                )],
            );
            let big = Bytes::from(vec![7u8; crate::INLINE_LIMIT + 1]);
            let frames = vec![
                WsFrame::new(
                    Side::Client,
                    false,
                    Bytes::from_static(b"{\"type\":\"session.update\"}"),
                    0,
                ),
                WsFrame::new(Side::Server, false, Bytes::from_static(b"plain text"), 1),
                WsFrame::new(Side::Server, true, Bytes::from_static(b"\x00\xff"), 2),
                WsFrame::new(Side::Server, true, big.clone(), 3),
                WsFrame::close(Side::Server, 1008, "quota exceeded".into(), 4),
            ];
            let ws = normalizer.request("GET", "/v1/realtime", Some("model=m"), None, b"", &[]);
            let timing = Timing {
                ttfb_ms: 1,
                total_ms: 4,
            };
            let mut c = Cassette::new(
                &crate::TestId::new("fuzz$built"),
                &crate::ProviderName::new("openai").unwrap(),
            );
            c.interactions.push(Interaction::recorded(
                Key::of(&upload),
                upload,
                stream,
                timing.clone(),
            ));
            c.interactions.push(Interaction::recorded(
                Key::of(&ws),
                ws,
                RecordedResponse::session(frames),
                timing,
            ));
            (c.to_bytes(), big)
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(CASES))]

            /// Loaded from a folder with its blob: either a cassette that writes back and reads
            /// back equal and prepares for replay without a panic, or an error naming the file
            /// (or the blob) it is about.
            #[test]
            fn a_damaged_cassette_loads_or_names_its_file(
                fixture in any::<bool>(),
                edits in prop::collection::vec((0u8..3, any::<usize>(), any::<u8>()), 1..6),
            ) {
                let (text, blob) = if fixture {
                    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
                    (std::fs::read(root.join("src/fixtures/legacy-v1.json")).unwrap(), Bytes::new())
                } else {
                    built()
                };
                let dir = tempfile::tempdir().unwrap();
                let blobs = dir.path().join(crate::BLOB_DIR);
                std::fs::create_dir(&blobs).unwrap();
                std::fs::write(blobs.join(crate::body::sha256_hex(&blob)), &blob).unwrap();
                let path = dir.path().join("openai.json");
                std::fs::write(&path, crate::testing::mutate(text, &edits)).unwrap();
                match crate::maintenance::read_cassette_with_blobs(&path) {
                    Ok(c) => {
                        let again = Cassette::parse(&path, std::str::from_utf8(&c.to_bytes()).unwrap()).unwrap();
                        prop_assert_eq!(&again, &c);
                        let _ = (c.key_mismatches(), c.seal_mismatches());
                        for x in &c.interactions {
                            let _ = (x.response.comparable(), x.response.payloads());
                            Prepared::of(x);
                        }
                    }
                    Err(e) => {
                        let said = e.to_string();
                        prop_assert!(said.contains(&*dir.path().to_string_lossy()), "{}", said);
                    }
                }
            }
        }

        /// Unmutated, both load whole, blob and all.
        #[test]
        fn the_valid_cassettes_load() {
            let (text, blob) = built();
            let dir = tempfile::tempdir().unwrap();
            let blobs = dir.path().join(crate::BLOB_DIR);
            std::fs::create_dir(&blobs).unwrap();
            std::fs::write(blobs.join(crate::body::sha256_hex(&blob)), &blob).unwrap();
            let path = dir.path().join("openai.json");
            std::fs::write(&path, &text).unwrap();
            let c = crate::maintenance::read_cassette_with_blobs(&path).unwrap();
            assert_eq!(c.interactions.len(), 2);
            assert_eq!(c.key_mismatches(), Vec::<usize>::new());
            assert!(matches!(c.interactions[0].request.body, Body::Parts(_)));
            assert_eq!(c.to_bytes(), text);
        }
    }

    #[test]
    fn corrupt_cassettes_name_the_line() {
        let e = Cassette::parse(
            Path::new("x/openai.json"),
            "{\n  \"llmreplay\": 1,\n  \"test\": oops\n}",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("x/openai.json") && e.contains("line 3"), "{e}");
    }
}
