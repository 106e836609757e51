//! A body as a cassette keeps it: in the first form that gives back exactly the bytes received
//! (JSON with its layout, UTF-8 text, base64, a content-addressed blob beside the cassette, or the
//! parts of a multipart upload). Replay sends those bytes; keys hash what the body means, never
//! a multipart boundary; people are shown what it says (gzip decoded, binary as size and hash).

use crate::Error;
use base64::Engine;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// Binary bodies up to this size are kept inline as base64; larger ones go to a blob file.
pub const INLINE_LIMIT: usize = 64 * 1024;

/// JSON nested deeper than this is kept as text: serde_json reads at most 128 levels, and the
/// cassette around a body adds up to seven, so what records must stay well below.
pub const MAX_JSON_DEPTH: usize = 100;

/// Bodies larger than this are kept as their bytes (a blob), never parsed: a JSON tree takes
/// up to tens of times the size of its text, and the daemon's memory must stay within a small
/// multiple of its body limit.
pub const TREE_LIMIT: usize = 4 << 20;

/// The folder, beside a test's cassettes, that holds its blobs.
pub const BLOB_DIR: &str = "blobs";

/// How a JSON body was laid out on the wire, when not compact.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Layout {
    /// Compact, then a newline.
    CompactNewline,
    /// Pretty-printed (two spaces).
    Pretty,
    /// Pretty-printed, then a newline.
    PrettyNewline,
}

/// One body, request or response.
#[derive(Clone, Debug, PartialEq, Default)]
pub enum Body {
    #[default]
    /// No body at all.
    Empty,
    /// JSON; for a response, `layout` re-creates the exact bytes.
    Json {
        /// The parsed JSON.
        value: Value,
        /// How to lay it out again; none for compact.
        layout: Option<Layout>,
    },
    /// UTF-8 text that is not JSON.
    Text(String),
    /// Bytes that are not UTF-8, up to [`INLINE_LIMIT`]: stored as `body_base64`.
    Bytes(Bytes),
    /// Bytes over [`INLINE_LIMIT`], stored as `<slug>/blobs/<sha256>`.
    Blob(Blob),
    /// A `multipart/form-data` request, part by part.
    Parts(Vec<Part>),
    /// A request body of older cassettes kept only as its SHA-256: it still matches, but cannot
    /// be sent again.
    Digest(String),
}

/// A content-addressed blob: its hash, and its bytes once read (or before they are written).
#[derive(Clone, Debug)]
pub struct Blob {
    /// The SHA-256 of the bytes, its file name under `blobs/`.
    pub sha256: String,
    /// The bytes, once read (or before they are written).
    pub bytes: Option<Bytes>,
}

impl PartialEq for Blob {
    fn eq(&self, other: &Self) -> bool {
        self.sha256 == other.sha256
    }
}

/// One part of a multipart upload.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawPart", into = "RawPart")]
pub struct Part {
    /// The form field's name.
    pub name: String,
    /// The uploaded file's name, if a file.
    pub filename: Option<String>,
    /// The part's content type, if it gave one.
    pub content_type: Option<String>,
    /// The part's content.
    pub body: Body,
}

/// A body's fields as they stand in a cassette: at most one of them is set.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct BodyFields {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    body: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    body_layout: Option<Layout>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    body_text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    body_base64: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    body_blob: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    body_sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    parts: Option<Vec<Part>>,
}

impl TryFrom<BodyFields> for Body {
    type Error = String;

    fn try_from(f: BodyFields) -> Result<Body, String> {
        let set = [
            ("body", f.body.is_some()),
            ("body_text", f.body_text.is_some()),
            ("body_base64", f.body_base64.is_some()),
            ("body_blob", f.body_blob.is_some()),
            ("body_sha256", f.body_sha256.is_some()),
            ("parts", f.parts.is_some()),
        ];
        let named: Vec<&str> = set.iter().filter(|s| s.1).map(|s| s.0).collect();
        if named.len() > 1 {
            return Err(format!(
                "a body has one form, this one has {}",
                named.join(" and ")
            ));
        }
        if let Some(value) = f.body {
            return Ok(Body::Json {
                value,
                layout: f.body_layout,
            });
        }
        if let Some(text) = f.body_text {
            return Ok(Body::Text(text));
        }
        if let Some(b64) = f.body_base64 {
            return base64::engine::general_purpose::STANDARD
                .decode(b64.as_bytes())
                .map(|b| Body::Bytes(b.into()))
                .map_err(|e| format!("body_base64 is not base64: {e}"));
        }
        if let Some(sha256) = f.body_blob {
            if !is_sha256(&sha256) {
                return Err(format!(
                    "body_blob {sha256:?} is not a SHA-256 (64 hex digits)"
                ));
            }
            return Ok(Body::Blob(Blob {
                sha256,
                bytes: None,
            }));
        }
        if let Some(hash) = f.body_sha256 {
            return Ok(Body::Digest(hash));
        }
        Ok(f.parts.map_or(Body::Empty, Body::Parts))
    }
}

impl From<Body> for BodyFields {
    fn from(body: Body) -> BodyFields {
        let mut f = BodyFields::default();
        match body {
            Body::Empty => {}
            Body::Json { value, layout } => {
                f.body = Some(value);
                f.body_layout = layout;
            }
            Body::Text(t) => f.body_text = Some(t),
            Body::Bytes(b) => {
                f.body_base64 = Some(base64::engine::general_purpose::STANDARD.encode(&b))
            }
            Body::Blob(b) => f.body_blob = Some(b.sha256),
            Body::Parts(p) => f.parts = Some(p),
            Body::Digest(h) => f.body_sha256 = Some(h),
        }
        f
    }
}

#[derive(Serialize, Deserialize)]
struct RawPart {
    name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    filename: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    content_type: Option<String>,
    #[serde(flatten)]
    body: BodyFields,
}

impl TryFrom<RawPart> for Part {
    type Error = String;
    fn try_from(r: RawPart) -> Result<Part, String> {
        Ok(Part {
            name: r.name,
            filename: r.filename,
            content_type: r.content_type,
            body: r.body.try_into()?,
        })
    }
}

impl From<Part> for RawPart {
    fn from(p: Part) -> RawPart {
        RawPart {
            name: p.name,
            filename: p.filename,
            content_type: p.content_type,
            body: p.body.into(),
        }
    }
}

impl Body {
    /// The form that gives back `bytes` exactly: JSON in one of the layouts serde_json writes,
    /// else text, else binary.
    pub fn exact(bytes: &[u8]) -> Body {
        if bytes.is_empty() {
            return Body::Empty;
        }
        if bytes.len() > TREE_LIMIT {
            return Body::binary(Bytes::copy_from_slice(bytes));
        }
        if let Some(value) = json_within_depth(bytes) {
            // A bare `null` would read back as "no body".
            if !value.is_null() {
                let layouts = [
                    None,
                    Some(Layout::CompactNewline),
                    Some(Layout::Pretty),
                    Some(Layout::PrettyNewline),
                ];
                for layout in layouts {
                    if render_json(&value, layout) == bytes {
                        return Body::Json { value, layout };
                    }
                }
            }
        }
        match std::str::from_utf8(bytes) {
            Ok(text) => Body::Text(text.to_string()),
            Err(_) => Body::binary(Bytes::copy_from_slice(bytes)),
        }
    }

    /// Bytes kept as they are: inline up to [`INLINE_LIMIT`], a blob beyond.
    pub fn binary(bytes: Bytes) -> Body {
        if bytes.len() <= INLINE_LIMIT {
            Body::Bytes(bytes)
        } else {
            Body::Blob(Blob {
                sha256: sha256_hex(&bytes),
                bytes: Some(bytes),
            })
        }
    }

    /// The exact bytes, where the form holds them (multipart is re-encoded by [`Body::encode`]).
    pub fn bytes(&self) -> Option<Bytes> {
        match self {
            Body::Empty => Some(Bytes::new()),
            Body::Json { value, layout } => Some(render_json(value, *layout).into()),
            Body::Text(t) => Some(Bytes::from(t.clone())),
            Body::Bytes(b) => Some(b.clone()),
            Body::Blob(b) => b.bytes.clone(),
            Body::Parts(_) | Body::Digest(_) => None,
        }
    }

    /// The bytes to send again and, for multipart, the content type with a fresh boundary.
    pub fn encode(&self) -> Result<(Bytes, Option<String>), String> {
        match self {
            Body::Parts(parts) => {
                let boundary = fresh_boundary();
                let bytes = encode_multipart(parts, &boundary)?;
                Ok((
                    bytes,
                    Some(format!("multipart/form-data; boundary={boundary}")),
                ))
            }
            Body::Digest(_) => {
                Err("the recorded body was kept as its hash only, so it cannot be sent again; record it again".into())
            }
            Body::Blob(b) if b.bytes.is_none() => Err(format!(
                "the blob {} of this body was not read",
                b.sha256
            )),
            other => Ok((other.bytes().expect("every other form holds its bytes"), None)),
        }
    }

    /// Appends what identifies this body to a key's canonical form: JSON with sorted keys, the
    /// text, the SHA-256 of bytes, or each part's name, file name, type and content.
    pub(crate) fn write_key(&self, out: &mut Vec<u8>) {
        match self {
            Body::Empty => {}
            Body::Json { value, .. } => {
                out.extend_from_slice(b"json:");
                crate::canonical::write_canonical(value, out);
            }
            Body::Text(t) => {
                out.extend_from_slice(b"text:");
                out.extend_from_slice(t.as_bytes());
            }
            Body::Bytes(_) | Body::Blob(_) | Body::Digest(_) => {
                out.extend_from_slice(b"sha256:");
                out.extend_from_slice(self.sha256().expect("binary forms have a hash").as_bytes());
            }
            Body::Parts(parts) => {
                out.extend_from_slice(b"parts:");
                for p in parts {
                    let mut content = Vec::new();
                    p.body.write_key(&mut content);
                    let head = serde_json::json!({
                        "name": p.name,
                        "filename": p.filename,
                        "content_type": p.content_type,
                        "content": String::from_utf8_lossy(&content),
                    });
                    crate::canonical::write_canonical(&head, out);
                    out.push(b'\n');
                }
            }
        }
    }

    /// The SHA-256 of binary content.
    pub fn sha256(&self) -> Option<String> {
        match self {
            Body::Bytes(b) => Some(sha256_hex(b)),
            Body::Blob(b) => Some(b.sha256.clone()),
            Body::Digest(h) => Some(h.clone()),
            _ => None,
        }
    }

    /// The body as one JSON value, for naming the fields two requests differ in.
    pub fn to_value(&self) -> Value {
        match self {
            Body::Empty => Value::Null,
            Body::Json { value, .. } => value.clone(),
            Body::Text(t) => Value::String(t.clone()),
            Body::Bytes(_) | Body::Blob(_) | Body::Digest(_) => {
                Value::String(format!("sha256:{}", self.sha256().unwrap_or_default()))
            }
            Body::Parts(parts) => Value::Object(
                parts
                    .iter()
                    .map(|p| (p.name.clone(), p.body.to_value()))
                    .collect(),
            ),
        }
    }

    /// The bytes with gzip, deflate or brotli undone, as far as the form holds bytes.
    pub fn plain(&self, content_encoding: Option<&str>) -> Option<Vec<u8>> {
        let bytes = self.bytes()?;
        match content_encoding
            .map(|e| e.trim().to_ascii_lowercase())
            .as_deref()
        {
            Some(e @ ("gzip" | "x-gzip" | "deflate" | "br")) => decompress(&bytes, Some(e)),
            _ => Some(bytes.to_vec()),
        }
    }

    /// The body as JSON, decompressed first, when it is JSON.
    pub fn json(&self, content_encoding: Option<&str>) -> Option<Value> {
        if let Body::Json { value, .. } = self {
            return Some(value.clone());
        }
        json_within_depth(&self.plain(content_encoding)?)
    }

    /// What the body says, for people: JSON where it parses, else text; `None` for binary.
    pub fn decoded(&self, content_encoding: Option<&str>) -> Option<Value> {
        if let Some(v) = self.json(content_encoding) {
            return Some(v);
        }
        String::from_utf8(self.plain(content_encoding)?)
            .ok()
            .map(Value::String)
    }

    /// A line that names binary content by size and hash, so that a change shows in a review.
    pub fn describe_binary(&self) -> Option<String> {
        let len = match self {
            Body::Bytes(b) => b.len(),
            Body::Blob(b) => b.bytes.as_ref().map_or(0, |b| b.len()),
            _ => return None,
        };
        let sha = self.sha256().unwrap_or_default();
        Some(if len > 0 {
            format!("binary: {len} bytes, sha256 {sha}")
        } else {
            format!("binary: sha256 {sha}")
        })
    }

    /// Every blob this body refers to, parts included.
    pub fn blobs_mut(&mut self) -> Vec<&mut Blob> {
        match self {
            Body::Blob(b) => vec![b],
            Body::Parts(parts) => parts.iter_mut().flat_map(|p| p.body.blobs_mut()).collect(),
            _ => Vec::new(),
        }
    }

    /// The blobs this body refers to (a multipart body's, part by part).
    pub fn blobs(&self) -> Vec<&Blob> {
        match self {
            Body::Blob(b) => vec![b],
            Body::Parts(parts) => parts.iter().flat_map(|p| p.body.blobs()).collect(),
            _ => Vec::new(),
        }
    }
}

impl Blob {
    /// Reads this blob from `folder/blobs/`, checking its hash.
    pub fn load(&mut self, folder: &Path) -> Result<(), Error> {
        if self.bytes.is_some() {
            return Ok(());
        }
        let dir = blob_dir(folder).map_err(|reason| Error::Blob {
            path: folder.join(BLOB_DIR),
            reason,
        })?;
        if !is_sha256(&self.sha256) {
            return Err(Error::Blob {
                path: dir,
                reason: format!("{:?} is not a SHA-256", self.sha256),
            });
        }
        let path = dir.join(&self.sha256);
        let bytes = std::fs::read(&path).map_err(|e| Error::Blob {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        let found = sha256_hex(&bytes);
        if found != self.sha256 {
            return Err(Error::Blob {
                path,
                reason: format!("its content hashes to {found}"),
            });
        }
        self.bytes = Some(bytes.into());
        Ok(())
    }
}

/// A cassette folder's blob folder, refused when it is a link: what is read or removed there
/// must be inside the cassette folder, as what is written is.
pub fn blob_dir(folder: &Path) -> Result<PathBuf, String> {
    let dir = folder.join(BLOB_DIR);
    match std::fs::symlink_metadata(&dir) {
        Ok(m) if m.file_type().is_symlink() => Err(format!(
            "{} is a link to elsewhere; blobs are read and removed only inside the cassette folder",
            dir.display()
        )),
        _ => Ok(dir),
    }
}

/// The SHA-256 of `bytes`, in lowercase hex: a blob's name.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

pub(crate) fn is_sha256(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

pub(crate) fn render_json(value: &Value, layout: Option<Layout>) -> Vec<u8> {
    let mut out = match layout {
        None | Some(Layout::CompactNewline) => serde_json::to_vec(value),
        Some(Layout::Pretty | Layout::PrettyNewline) => serde_json::to_vec_pretty(value),
    }
    .expect("JSON values serialise");
    if matches!(layout, Some(Layout::CompactNewline | Layout::PrettyNewline)) {
        out.push(b'\n');
    }
    out
}

/// JSON that a cassette can hold: it parses, and nests no deeper than [`MAX_JSON_DEPTH`].
pub(crate) fn json_within_depth(bytes: &[u8]) -> Option<Value> {
    if nesting(bytes) > MAX_JSON_DEPTH {
        return None;
    }
    serde_json::from_slice(bytes).ok()
}

/// The deepest nesting of brackets outside strings: a cheap bound checked before parsing.
fn nesting(bytes: &[u8]) -> usize {
    let (mut depth, mut max, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for &b in bytes {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                max = max.max(depth);
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

/// Past this many bytes, a compressed body is not decoded: a few compressed bytes can claim
/// gigabytes, and no answer a test needs is that large.
const DECODED_LIMIT: usize = 64 << 20;

/// Bytes with their content encoding (gzip, deflate, brotli) undone, up to [`DECODED_LIMIT`];
/// `None` for another encoding, broken bytes or more than the limit.
pub(crate) fn decompress(bytes: &[u8], encoding: Option<&str>) -> Option<Vec<u8>> {
    decompress_within(bytes, encoding, DECODED_LIMIT)
}

pub(crate) fn decompress_within(
    bytes: &[u8],
    encoding: Option<&str>,
    limit: usize,
) -> Option<Vec<u8>> {
    use std::io::Read;
    let read = |reader: &mut dyn Read, out: &mut Vec<u8>| {
        out.clear();
        reader.take(limit as u64 + 1).read_to_end(out).is_ok() && out.len() <= limit
    };
    let mut out = Vec::new();
    let ok = match encoding.map(str::to_ascii_lowercase).as_deref() {
        Some("gzip" | "x-gzip") => read(&mut flate2::read::MultiGzDecoder::new(bytes), &mut out),
        // Zlib-wrapped as the standard says, or raw as some servers send it.
        Some("deflate") => {
            read(&mut flate2::read::ZlibDecoder::new(bytes), &mut out)
                || read(&mut flate2::read::DeflateDecoder::new(bytes), &mut out)
        }
        Some("br") => read(
            &mut brotli_decompressor::Decompressor::new(bytes, 4096),
            &mut out,
        ),
        _ => false,
    };
    ok.then_some(out)
}

/// The boundary of a `multipart/form-data` content type.
pub(crate) fn multipart_boundary(content_type: &str) -> Option<&str> {
    let mut params = content_type.split(';');
    let mime = params.next()?.trim();
    if !mime.eq_ignore_ascii_case("multipart/form-data") {
        return None;
    }
    params.find_map(|p| {
        let (k, v) = p.split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case("boundary")
            .then(|| v.trim().trim_matches('"'))
            .filter(|b| !b.is_empty())
    })
}

/// The parts of a multipart body (RFC 7578), or `None` when it is not well formed, in which case
/// it is kept as bytes.
pub(crate) fn parse_multipart(body: &[u8], boundary: &str) -> Option<Vec<Part>> {
    let delimiter = format!("--{boundary}");
    let delimiter = delimiter.as_bytes();
    let mut rest = body;
    // The preamble, up to the first delimiter, carries nothing.
    let start = find(rest, delimiter)?;
    rest = &rest[start + delimiter.len()..];
    let mut parts = Vec::new();
    loop {
        if rest.starts_with(b"--") {
            return Some(parts);
        }
        rest = rest.strip_prefix(b"\r\n")?;
        let mut headers = [httparse::EMPTY_HEADER; 16];
        let (used, headers) = match httparse::parse_headers(rest, &mut headers).ok()? {
            httparse::Status::Complete((used, headers)) => (used, headers),
            httparse::Status::Partial => return None,
        };
        let content_and_rest = &rest[used..];
        let mut next = Vec::with_capacity(delimiter.len() + 2);
        next.extend_from_slice(b"\r\n");
        next.extend_from_slice(delimiter);
        let end = find(content_and_rest, &next)?;
        let content = &content_and_rest[..end];
        rest = &content_and_rest[end + next.len()..];
        let mut part = Part {
            name: String::new(),
            filename: None,
            content_type: None,
            body: Body::Empty,
        };
        let mut named = false;
        for h in headers.iter() {
            let value = std::str::from_utf8(h.value).ok()?;
            if h.name.eq_ignore_ascii_case("content-disposition") {
                let (name, filename) = disposition(value)?;
                part.name = name;
                part.filename = filename;
                named = true;
            } else if h.name.eq_ignore_ascii_case("content-type") {
                part.content_type = Some(value.to_string());
            } else {
                // A header we would not write back: keep the whole body as bytes instead.
                return None;
            }
        }
        if !named {
            return None;
        }
        part.body = match std::str::from_utf8(content) {
            _ if content.is_empty() => Body::Empty,
            Ok(text) => Body::Text(text.to_string()),
            Err(_) => Body::binary(Bytes::copy_from_slice(content)),
        };
        parts.push(part);
    }
}

/// `form-data; name="x"; filename="y"`: the name and file name.
fn disposition(value: &str) -> Option<(String, Option<String>)> {
    let mut params = value.split(';');
    if !params.next()?.trim().eq_ignore_ascii_case("form-data") {
        return None;
    }
    let (mut name, mut filename) = (None, None);
    for p in params {
        let (k, v) = p.split_once('=')?;
        let v = v.trim();
        let v = v
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or(v);
        if v.contains('"') || v.contains('\\') {
            return None;
        }
        match k.trim().to_ascii_lowercase().as_str() {
            "name" => name = Some(v.to_string()),
            "filename" => filename = Some(v.to_string()),
            _ => return None,
        }
    }
    Some((name?, filename))
}

fn encode_multipart(parts: &[Part], boundary: &str) -> Result<Bytes, String> {
    let mut out = Vec::new();
    for p in parts {
        out.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
        out.extend_from_slice(
            format!("Content-Disposition: form-data; name=\"{}\"", p.name).as_bytes(),
        );
        if let Some(f) = &p.filename {
            out.extend_from_slice(format!("; filename=\"{f}\"").as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        if let Some(t) = &p.content_type {
            out.extend_from_slice(format!("Content-Type: {t}\r\n").as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        let (bytes, _) = p.body.encode()?;
        out.extend_from_slice(&bytes);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    Ok(out.into())
}

fn fresh_boundary() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let n = COUNT.fetch_add(1, Ordering::Relaxed);
    let seed = format!("{now}-{n}-{}", std::process::id());
    format!("llmreplay-{}", &sha256_hex(seed.as_bytes())[..24])
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn round_trip(body: &Body) -> Body {
        let fields: BodyFields = body.clone().into();
        let text = serde_json::to_string(&fields).unwrap();
        let back: BodyFields = serde_json::from_str(&text).unwrap();
        back.try_into().unwrap()
    }

    #[test]
    fn each_form_gives_back_its_bytes() {
        let big = vec![0xffu8; INLINE_LIMIT + 1];
        for bytes in [
            &b""[..],
            br#"{"a":1}"#,
            b"{\"a\":1}\n",
            b"{ \"odd\" : 1 }",
            b"null",
            b"plain text \xe2\x80\xba",
            b"\x1f\x8b\x08\x00binary\xff",
            &big,
        ] {
            let body = Body::exact(bytes);
            assert_eq!(body.bytes().unwrap(), bytes, "{body:?}");
            let mut back = round_trip(&body);
            for b in back.blobs_mut() {
                b.bytes = body.blobs()[0].bytes.clone();
            }
            assert_eq!(back.bytes().unwrap(), bytes);
        }
        assert!(matches!(Body::exact(&big), Body::Blob(_)));
        assert!(matches!(Body::exact(b"\xff"), Body::Bytes(_)));
        assert!(matches!(Body::exact(b"null"), Body::Text(_)));
    }

    #[test]
    fn deep_json_is_text() {
        let deep = format!("{}{}", "[".repeat(1000), "]".repeat(1000));
        assert!(matches!(Body::exact(deep.as_bytes()), Body::Text(_)));
        let fine = format!(
            "{}{}",
            "[".repeat(MAX_JSON_DEPTH),
            "]".repeat(MAX_JSON_DEPTH)
        );
        assert!(matches!(Body::exact(fine.as_bytes()), Body::Json { .. }));
        // Brackets inside strings do not count.
        let quoted = format!("{{\"a\":\"{}\"}}", "[".repeat(500));
        assert!(matches!(Body::exact(quoted.as_bytes()), Body::Json { .. }));
    }

    #[test]
    fn two_forms_are_an_error() {
        let e = serde_json::from_str::<BodyFields>(r#"{"body":{},"body_text":"x"}"#)
            .map(Body::try_from)
            .unwrap()
            .unwrap_err();
        assert!(e.contains("body and body_text"), "{e}");
    }

    const UPLOAD: &str = "--XyZ\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper-1\r\n--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\nContent-Type: audio/wav\r\n\r\nRIFF\u{0}\u{1}\r\n--XyZ--\r\n";

    #[test]
    fn multipart_parts_not_boundary() {
        let parts = parse_multipart(UPLOAD.as_bytes(), "XyZ").unwrap();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].name, "model");
        assert_eq!(parts[0].body, Body::Text("whisper-1".into()));
        assert_eq!(parts[1].filename.as_deref(), Some("a.wav"));
        assert_eq!(parts[1].content_type.as_deref(), Some("audio/wav"));
        assert_eq!(parts[1].body.bytes().unwrap(), &b"RIFF\0\x01"[..]);
        let (again, ct) = Body::Parts(parts.clone()).encode().unwrap();
        let boundary = multipart_boundary(ct.as_deref().unwrap()).unwrap();
        assert_ne!(boundary, "XyZ");
        assert_eq!(parse_multipart(&again, boundary).unwrap(), parts);
        assert_eq!(
            multipart_boundary("multipart/form-data; boundary=\"a b\""),
            Some("a b")
        );
        assert_eq!(multipart_boundary("application/json"), None);
        assert!(parse_multipart(b"--XyZ\r\nnot a header\r\n\r\n", "XyZ").is_none());
    }

    #[test]
    fn gzip_is_decoded_for_people() {
        use std::io::Write;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(br#"{"answer":"hi"}"#).unwrap();
        let body = Body::exact(&gz.finish().unwrap());
        assert!(matches!(body, Body::Bytes(_)));
        assert_eq!(
            body.decoded(Some("gzip")),
            Some(serde_json::json!({"answer":"hi"}))
        );
        assert_eq!(body.decoded(None), None);
        assert!(body.describe_binary().unwrap().contains("bytes, sha256 "));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_come_back(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
            let body = Body::exact(&bytes);
            prop_assert_eq!(&body.bytes().unwrap()[..], &bytes[..]);
            prop_assert_eq!(&round_trip(&body).bytes().unwrap()[..], &bytes[..]);
        }

        #[test]
        fn arbitrary_text_comes_back(text in "\\PC{0,200}") {
            let body = Body::exact(text.as_bytes());
            prop_assert_eq!(&round_trip(&body).bytes().unwrap()[..], text.as_bytes());
        }
    }

    /// The multipart splitter fed hostile bodies: what it accepts must hold up for every input.
    mod multipart_fuzz {
        use super::*;

        /// Cases per property: the three together take well under a second in a debug build.
        const CASES: u32 = 256;

        /// An edit to a valid input: flip the byte at a position, insert one, or delete one.
        fn edits() -> impl Strategy<Value = Vec<(u8, usize, u8)>> {
            prop::collection::vec((0u8..3, any::<usize>(), any::<u8>()), 0..6)
        }

        /// What holds for any parts the splitter returns: their contents fit in the body they
        /// came from, the parts survive the cassette, and written back under a fresh boundary
        /// (as the key does) they split into the same parts.
        fn check(body: &[u8], boundary: &str) -> Result<(), TestCaseError> {
            let Some(parts) = parse_multipart(body, boundary) else {
                return Ok(());
            };
            let content: usize = parts
                .iter()
                .map(|p| p.body.bytes().map_or(0, |b| b.len()))
                .sum();
            prop_assert!(content <= body.len());
            let kept = Body::Parts(parts.clone());
            prop_assert_eq!(&round_trip(&kept), &kept);
            let (again, ct) = kept.encode().unwrap();
            let fresh = multipart_boundary(ct.as_deref().unwrap()).unwrap();
            prop_assert_eq!(parse_multipart(&again, fresh), Some(parts));
            Ok(())
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(CASES))]

            /// Any bytes, with the boundary or without it: no panic, and the rules above.
            #[test]
            fn any_body_splits_or_is_refused(
                bytes in prop::collection::vec(any::<u8>(), 0..512),
                boundary in "[A-Za-z0-9'()+_,./:=? -]{1,12}",
                framed in any::<bool>(),
            ) {
                let body = if framed {
                    [format!("--{boundary}\r\n").into_bytes(), bytes, format!("\r\n--{boundary}--").into_bytes()].concat()
                } else {
                    bytes
                };
                check(&body, &boundary)?;
            }

            /// A real upload with bytes flipped, inserted and deleted.
            #[test]
            fn a_mutated_upload_splits_or_is_refused(edits in edits()) {
                check(&crate::testing::mutate(UPLOAD.as_bytes().to_vec(), &edits), "XyZ")?;
            }

            /// Parts as a client writes them split back into themselves.
            #[test]
            fn written_parts_split_into_themselves(
                parts in prop::collection::vec(
                    ("[a-z_]{1,8}", proptest::option::of("[a-z]{1,8}\\.[a-z]{1,3}"), proptest::option::of("[a-z]{1,6}/[a-z]{1,6}"), prop::collection::vec(any::<u8>(), 0..64)),
                    0..5,
                ),
            ) {
                let parts: Vec<Part> = parts
                    .into_iter()
                    .map(|(name, filename, content_type, content)| Part {
                        name,
                        filename,
                        content_type,
                        body: match std::str::from_utf8(&content) {
                            _ if content.is_empty() => Body::Empty,
                            Ok(text) => Body::Text(text.to_string()),
                            Err(_) => Body::binary(content.into()),
                        },
                    })
                    .collect();
                let (bytes, ct) = Body::Parts(parts.clone()).encode().unwrap();
                let boundary = multipart_boundary(ct.as_deref().unwrap()).unwrap();
                prop_assert_eq!(parse_multipart(&bytes, boundary), Some(parts));
                check(&bytes, boundary)?;
            }
        }
    }
}
