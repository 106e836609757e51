//! Test support: a loopback fake provider that speaks the real wire formats (OpenAI JSON and SSE
//! with `[DONE]`, Anthropic SSE events, Gemini SSE, Ollama NDJSON), and a handle on the real
//! `cargo-llmreplay serve` process. The fake is the only stand-in: everything else is real.

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use std::convert::Infallible;
use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the fake provider received.
#[derive(Clone, Debug)]
pub struct Received {
    pub path: String,
    pub query: Option<String>,
    pub headers: Vec<(String, String)>,
    pub body: Value,
    /// The body's bytes as they arrived (multipart, binary).
    pub raw: Bytes,
    /// When its head arrived.
    pub at: std::time::Instant,
}

#[derive(Default)]
pub struct FakeState {
    pub received: Mutex<Vec<Received>>,
    calls: AtomicUsize,
    /// Appended to every answer, to make the provider "change its mind".
    pub suffix: Mutex<String>,
    /// The model chat completions name, instead of the request's: a provider that points an
    /// alias at a new snapshot.
    pub answer_model: Mutex<Option<String>>,
    /// Pause between stream chunks.
    pub chunk_gap: Mutex<Duration>,
    /// When set, streams stop after their first chunk until this is notified.
    pub hold: Mutex<Option<Arc<tokio::sync::Notify>>>,
    /// Appended to the answers of prompts containing the first string: the provider changes its
    /// mind about some requests only.
    pub suffix_for: Mutex<Vec<(String, String)>>,
    /// Prompts containing any of these get a 500.
    pub fail_for: Mutex<Vec<String>>,
    /// Prompts containing any of these get a 400, as a request the API refuses.
    pub bad_for: Mutex<Vec<String>>,
    /// When set to n, requests wait until n are in flight (at most 10 s), so that a client
    /// sending n at a time is seen doing so.
    pub gate: Mutex<Option<usize>>,
    gate_open: tokio::sync::Notify,
    gate_opened: std::sync::atomic::AtomicBool,
    in_flight: AtomicUsize,
    /// The most requests in flight at once.
    pub peak: AtomicUsize,
    /// Prompts with `LIMIT429` get a 429 saying `retry-after-ms: 300` while this is above
    /// zero, one fewer each time: a provider's rate limit that lifts.
    pub limited: AtomicUsize,
    /// How long each answer takes to start, in flight: a slow provider.
    pub answer_delay: Mutex<Duration>,
    /// Chat completions of prompts containing the first string stop for the second reason
    /// (`length`) instead of `stop`: an answer whose structure changed.
    pub finish_for: Mutex<Vec<(String, String)>>,
}

/// Counts a request out of flight when its answer is made.
struct InFlight<'a>(&'a FakeState);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

impl FakeState {
    async fn enter(&self) -> InFlight<'_> {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        let gate = *self.gate.lock().unwrap();
        if let Some(n) = gate {
            let opened = self.gate_open.notified();
            tokio::pin!(opened);
            opened.as_mut().enable();
            if now >= n {
                self.gate_opened.store(true, Ordering::SeqCst);
                self.gate_open.notify_waiters();
            } else if !self.gate_opened.load(Ordering::SeqCst) {
                let _ = tokio::time::timeout(Duration::from_secs(10), opened).await;
            }
        }
        InFlight(self)
    }
}

/// A fake LLM provider on 127.0.0.1. Prompts steer it: `FAIL500` and `RATE429` answer those
/// statuses, `BREAK` cuts a stream off mid-way, `COUNT` puts the call number in the answer,
/// `CHARS5` streams it five characters an event, `USAGE` gives OpenAI chat, Anthropic
/// messages and Gemini answers the usage blocks of [`real_usage`].
pub struct FakeProvider {
    pub addr: SocketAddr,
    pub state: Arc<FakeState>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    tls: bool,
}

impl FakeProvider {
    pub async fn start() -> FakeProvider {
        Self::start_with(None).await
    }

    /// The same provider over HTTPS, with a certificate for `localhost` from `ca`.
    pub async fn start_tls(ca: &TestCa) -> FakeProvider {
        Self::start_with(Some(tokio_rustls::TlsAcceptor::from(ca.server_config()))).await
    }

    async fn start_with(tls: Option<tokio_rustls::TlsAcceptor>) -> FakeProvider {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(FakeState::default());
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let st = state.clone();
        let is_tls = tls.is_some();
        tokio::spawn(async move {
            loop {
                let socket = tokio::select! {
                    s = listener.accept() => s.unwrap().0,
                    _ = &mut stopped => return,
                };
                let st = st.clone();
                let tls = tls.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| answer(st.clone(), req));
                    let http = hyper::server::conn::http1::Builder::new();
                    match tls {
                        // A client that does not trust the certificate ends the handshake.
                        Some(tls) => {
                            if let Ok(stream) = tls.accept(socket).await {
                                let _ = http.serve_connection(TokioIo::new(stream), svc).await;
                            }
                        }
                        None => {
                            let _ = http.serve_connection(TokioIo::new(socket), svc).await;
                        }
                    }
                });
            }
        });
        FakeProvider {
            addr,
            state,
            stop: Some(stop),
            tls: is_tls,
        }
    }

    /// `http://127.0.0.1:PORT`, or `https://localhost:PORT` over TLS (the name its certificate
    /// holds, as a real provider's does).
    pub fn url(&self) -> String {
        if self.tls {
            format!("https://localhost:{}", self.addr.port())
        } else {
            format!("http://{}", self.addr)
        }
    }

    /// Stops accepting connections: from now on only cassettes can answer.
    pub fn stop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }

    pub fn received(&self) -> Vec<Received> {
        self.state.received.lock().unwrap().clone()
    }
}

type Body = http_body_util::combinators::UnsyncBoxBody<Bytes, std::io::Error>;

fn error_status(s: u16) -> Response<Body> {
    Response::builder()
        .status(s)
        .header("content-type", "application/json")
        .body(full(
            json!({"error": {"message": format!("fake {s}"), "type": "server_error"}}).to_string(),
        ))
        .unwrap()
}

fn last_user_text(body: &Value) -> String {
    let from = |list: &Value| {
        list.as_array()?
            .iter()
            .rev()
            .find(|m| m["role"] == "user")
            .map(|m| match (&m["content"], &m["parts"]) {
                (Value::String(s), _) => s.clone(),
                // Content blocks, as Anthropic's API and OpenAI's accept them.
                (Value::Array(blocks), _) => blocks
                    .iter()
                    .filter_map(|b| b["text"].as_str())
                    .collect::<Vec<_>>()
                    .join(""),
                (_, Value::Array(p)) => p[0]["text"].as_str().unwrap_or("").to_string(),
                (c, _) => c.to_string(),
            })
    };
    from(&body["messages"])
        .or_else(|| from(&body["contents"]))
        .or_else(|| body["prompt"].as_str().map(str::to_string))
        .or_else(|| body["input"].as_str().map(str::to_string))
        .unwrap_or_default()
}

async fn answer(
    state: Arc<FakeState>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let at = std::time::Instant::now();
    let path = req.uri().path().to_string();
    let query = req.uri().query().map(str::to_string);
    let headers = req
        .headers()
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_string()))
        .collect();
    let content_type = req
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap_or("").to_string())
        .unwrap_or_default();
    let method = req.method().clone();
    let bytes = req.into_body().collect().await.unwrap().to_bytes();
    let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    state.received.lock().unwrap().push(Received {
        path: path.clone(),
        query: query.clone(),
        headers,
        body: body.clone(),
        raw: bytes.clone(),
        at,
    });
    // Azure OpenAI: OpenAI's bodies under /openai/deployments/<deployment>/..., which needs its
    // api-version and api-key as the real service does.
    let path = match path.strip_prefix("/openai/deployments/") {
        Some(rest) => {
            let received = state.received.lock().unwrap().last().cloned().unwrap();
            let has_key = received
                .headers
                .iter()
                .any(|(k, v)| k == "api-key" && !v.is_empty());
            if !has_key || !query.as_deref().unwrap_or("").contains("api-version=") {
                return Ok(error_status(401));
            }
            format!("/v1{}", &rest[rest.find('/').unwrap_or(rest.len())..])
        }
        None => path,
    };
    let _in_flight = state.enter().await;
    let delay = *state.answer_delay.lock().unwrap();
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let n = state.calls.fetch_add(1, Ordering::SeqCst) + 1;
    // An OAuth token endpoint (Google's, Microsoft's): a form in, tokens out, laid out as
    // Python's json writes them.
    // Microsoft Entra ID: the tenant's OpenID configuration, then its token endpoint, which
    // answers a client-credentials grant with an access token alone.
    if let Some(tenant) = path
        .strip_suffix("/v2.0/.well-known/openid-configuration")
        .map(|t| t.trim_start_matches('/').to_string())
    {
        let at = format!("https://login.microsoftonline.com/{tenant}");
        return Ok(json_response(
            json!({
                "token_endpoint": format!("{at}/oauth2/v2.0/token"),
                "authorization_endpoint": format!("{at}/oauth2/v2.0/authorize"),
                "issuer": format!("{at}/v2.0"),
                "token_endpoint_auth_methods_supported": ["client_secret_post", "private_key_jwt", "client_secret_basic"],
            })
            .to_string(),
            &[],
        ));
    }
    if path.ends_with("/oauth2/v2.0/token") {
        let token = format!(
            "{{\"token_type\":\"Bearer\",\"expires_in\":3599,\"ext_expires_in\":3599,\"access_token\":\"eyJ0eXAiOiJKV1QifQ.fake-entra-{n}\"}}"
        );
        return Ok(json_response(token, &[]));
    }
    // An echo: the request's body back as the answer, in its type and encoding (any carrier a
    // secret can travel in, both ways).
    if path.ends_with("/echo") {
        let encoding = state.received.lock().unwrap().last().and_then(|r| {
            r.headers
                .iter()
                .find(|(k, _)| k == "content-encoding")
                .map(|(_, v)| v.clone())
        });
        let mut answer = Response::builder().header("content-type", content_type.as_str());
        if let Some(encoding) = encoding {
            answer = answer.header("content-encoding", encoding);
        }
        return Ok(answer
            .body(
                Full::new(bytes.clone())
                    .map_err(|never| match never {})
                    .boxed_unsync(),
            )
            .unwrap());
    }
    // OpenAI Realtime's ephemeral keys: a client secret as a bare `value`, and a session
    // whose `client_secret` holds one. Each call's key is new, as the real service's are.
    if path.ends_with("/realtime/client_secrets") {
        let key = format!("ek_{:032x}", fresh_tag());
        return Ok(json_response(
            json!({"value": key, "expires_at": 1756310470, "session": {
                "type": "realtime", "object": "realtime.session", "id": format!("sess_{n}"),
                "model": body["session"]["model"].as_str().unwrap_or("gpt-realtime"),
                "output_modalities": ["audio"], "instructions": "Be brief."}})
            .to_string(),
            &[],
        ));
    }
    if path.ends_with("/realtime/sessions") {
        let key = format!("ek_{:032x}", fresh_tag());
        return Ok(json_response(
            json!({"id": format!("sess_{n}"), "object": "realtime.session",
                "model": body["model"].as_str().unwrap_or("gpt-realtime"), "modalities": ["audio", "text"],
                "client_secret": {"value": key, "expires_at": 1756310470}})
            .to_string(),
            &[],
        ));
    }
    // AWS STS as boto3 meets it: a form in, XML out. AssumeRole answers new temporary
    // credentials; GetCallerIdentity names the key that signed it (from its Authorization).
    let form = std::str::from_utf8(&bytes).unwrap_or("");
    if path == "/" && form.starts_with("Action=AssumeRole&") {
        let tag = format!("{:020x}", fresh_tag());
        let xml = format!(
            "<AssumeRoleResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">\n  <AssumeRoleResult>\n    <AssumedRoleUser>\n      <AssumedRoleId>AROA3XFRBF535PLBIFPI4:ci</AssumedRoleId>\n      <Arn>arn:aws:sts::123456789012:assumed-role/ci-role/ci</Arn>\n    </AssumedRoleUser>\n    <Credentials>\n      <AccessKeyId>ASIA{}</AccessKeyId>\n      <SecretAccessKey>fake/sts+secret{tag}</SecretAccessKey>\n      <SessionToken>IQoJb3JpZ2luX2Vj-fake-session-{tag}</SessionToken>\n      <Expiration>2099-01-01T00:00:00Z</Expiration>\n    </Credentials>\n    <PackedPolicySize>6</PackedPolicySize>\n  </AssumeRoleResult>\n  <ResponseMetadata>\n    <RequestId>c6104cbe-af31-11e0-8154-cbc7ccf896c7</RequestId>\n  </ResponseMetadata>\n</AssumeRoleResponse>\n",
            tag[..16].to_uppercase()
        );
        return Ok(Response::builder()
            .header("content-type", "text/xml")
            .body(full(xml))
            .unwrap());
    }
    if path == "/" && form.starts_with("Action=GetCallerIdentity&") {
        let xml = "<GetCallerIdentityResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">\n  <GetCallerIdentityResult>\n    <Arn>arn:aws:sts::123456789012:assumed-role/ci-role/ci</Arn>\n    <UserId>AROA3XFRBF535PLBIFPI4:ci</UserId>\n    <Account>123456789012</Account>\n  </GetCallerIdentityResult>\n  <ResponseMetadata>\n    <RequestId>01234567-89ab-cdef-0123-456789abcdef</RequestId>\n  </ResponseMetadata>\n</GetCallerIdentityResponse>\n";
        return Ok(Response::builder()
            .header("content-type", "text/xml")
            .body(full(xml.to_string()))
            .unwrap());
    }
    if path == "/token" {
        let tokens = format!(
            "{{\"access_token\": \"ya29.fake-access-{n}\", \"expires_in\": 3599, \"refresh_token\": \"1//fake-refresh-{n}\", \"scope\": \"https://www.googleapis.com/auth/cloud-platform\", \"token_type\": \"Bearer\", \"id_token\": \"eyJhbGciOiJub25lIn0.fake-{n}.\"}}"
        );
        return Ok(json_response(tokens, &[]));
    }
    let prompt = last_user_text(&body);
    if state
        .fail_for
        .lock()
        .unwrap()
        .iter()
        .any(|f| prompt.contains(f.as_str()))
    {
        return Ok(error_status(500));
    }
    if prompt.contains("FAIL500") {
        return Ok(error_status(500));
    }
    if prompt.contains("RATE429") {
        return Ok(error_status(429));
    }
    let lifts = |n: usize| n.checked_sub(1);
    if prompt.contains("LIMIT429")
        && state
            .limited
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, lifts)
            .is_ok()
    {
        let mut limited = error_status(429);
        limited
            .headers_mut()
            .insert("retry-after-ms", http::HeaderValue::from_static("300"));
        return Ok(limited);
    }
    if prompt.contains("AUTH401") {
        return Ok(error_status(401));
    }
    let bad = state
        .bad_for
        .lock()
        .unwrap()
        .iter()
        .any(|f| prompt.contains(f.as_str()));
    if bad || prompt.contains("BAD400") {
        return Ok(Response::builder()
            .status(400)
            .header("content-type", "application/json")
            .body(full(json!({"error": {"message": "fake 400: max_tokens is too large", "type": "invalid_request_error"}}).to_string()))
            .unwrap());
    }
    let mut suffix = state.suffix.lock().unwrap().clone();
    for (when, extra) in state.suffix_for.lock().unwrap().iter() {
        if prompt.contains(when.as_str()) {
            suffix.push_str(extra);
        }
    }
    let counted = if prompt.contains("COUNT") {
        format!(" (call {n})")
    } else {
        String::new()
    };
    let text = format!("You said: {prompt}{counted}{suffix}");
    // `CHARS5` streams the answer five characters an event, as tokens cut a key.
    let words: Vec<String> = match prompt.contains("CHARS5") {
        true => text
            .chars()
            .collect::<Vec<char>>()
            .chunks(5)
            .map(|c| c.iter().collect())
            .collect(),
        false => text.split_inclusive(' ').map(str::to_string).collect(),
    };
    let gap = *state.chunk_gap.lock().unwrap();
    let hold = state.hold.lock().unwrap().clone();
    let breaks = prompt.contains("BREAK");
    let stream = body["stream"] == json!(true);
    let usage = prompt.contains("USAGE").then_some(());
    if let Some(tool) = tool_asked(&body) {
        let streamed = stream || path.contains(":streamGenerateContent");
        return Ok(tool_answer(&path, &tool, n, streamed));
    }
    let resp = if path == "/v1/traces/ingest" {
        // The Agents SDK's traces: acknowledged with no body, as OpenAI does.
        Response::builder()
            .status(204)
            .body(full(String::new()))
            .unwrap()
    } else if path == "/v1/chat/completions" {
        let id = format!("chatcmpl-{n}");
        let model = match state.answer_model.lock().unwrap().clone() {
            Some(model) => json!(model),
            None => body["model"].clone(),
        };
        if stream {
            let mut events: Vec<String> = words
                .iter()
                .map(|w| format!("data: {}\n\n", json!({"id": id, "object": "chat.completion.chunk", "created": n, "model": model, "system_fingerprint": format!("fp_{n}"), "choices": [{"index": 0, "delta": {"content": w}, "finish_reason": null}]})))
                .collect();
            events.push(format!("data: {}\n\n", json!({"id": id, "object": "chat.completion.chunk", "created": n, "model": model, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})));
            // `stream_options.include_usage`: a last chunk with no choices and the usage.
            if usage.is_some() && body["stream_options"]["include_usage"] == json!(true) {
                events.push(format!("data: {}\n\n", json!({"id": id, "object": "chat.completion.chunk", "created": n, "model": model, "choices": [], "usage": real_usage("openai")})));
            }
            events.push("data: [DONE]\n\n".into());
            sse(events, gap, breaks, "text/event-stream", hold.clone())
        } else {
            // OpenAI answers pretty-printed JSON with a final newline.
            let finish = state
                .finish_for
                .lock()
                .unwrap()
                .iter()
                .find(|(p, _)| prompt.contains(p.as_str()))
                .map_or("stop".to_string(), |(_, r)| r.clone());
            let counts = match usage {
                Some(()) => real_usage("openai"),
                None => {
                    json!({"prompt_tokens": 5, "completion_tokens": words.len(), "total_tokens": 5 + words.len()})
                }
            };
            let v = json!({"id": id, "object": "chat.completion", "created": n, "model": model, "system_fingerprint": format!("fp_{n}"), "choices": [{"index": 0, "message": {"role": "assistant", "content": text, "refusal": null}, "logprobs": null, "finish_reason": finish}], "usage": counts});
            json_response(
                serde_json::to_string_pretty(&v).unwrap() + "\n",
                &[
                    ("x-request-id", &format!("req_{n}")),
                    ("openai-organization", "org-secret-team"),
                    ("set-cookie", "__cf_bm=SECRETCOOKIE"),
                ],
            )
        }
    } else if path == "/v1/audio/speech" {
        // Audio: bytes of every value, most of them not UTF-8. `BIG` asks for 5 MiB.
        let input = body["input"].as_str().unwrap_or("");
        let size = if input.contains("BIG") { 5 << 20 } else { 6000 };
        binary_response(audio_bytes(&format!("{input}{suffix}"), size), "audio/mpeg")
    } else if path == "/v1/audio/transcriptions" {
        let (file, model) = multipart_file_and_model(&content_type, &bytes);
        let text = format!(
            "Heard {} bytes (sum {}) with {model}{suffix}",
            file.len(),
            file.iter().map(|b| *b as u64).sum::<u64>()
        );
        json_response(
            json!({"text": text, "usage": {"type": "duration", "seconds": 1}}).to_string(),
            &[],
        )
    } else if path == "/v1/images/generations" {
        use base64::Engine;
        let png = audio_bytes(&prompt, 300);
        let b64 = base64::engine::general_purpose::STANDARD.encode(png);
        json_response(
            json!({"created": n, "data": [{"b64_json": b64}], "usage": {"total_tokens": 3}})
                .to_string(),
            &[],
        )
    } else if path == "/v1/models" && method == hyper::Method::GET {
        // Some gateways compress whatever the client asked for.
        let list = json!({"object": "list", "data": [{"id": "gpt-4o-mini", "object": "model", "owned_by": "openai"}]});
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        std::io::Write::write_all(&mut gz, list.to_string().as_bytes()).unwrap();
        Response::builder()
            .header("content-type", "application/json")
            .header("content-encoding", "gzip")
            .body(
                Full::new(Bytes::from(gz.finish().unwrap()))
                    .map_err(|never| match never {})
                    .boxed_unsync(),
            )
            .unwrap()
    } else if path == "/v1/echo-bytes" {
        // Answers the request's bytes reversed: a binary exchange both ways.
        let mut back = bytes.to_vec();
        back.reverse();
        binary_response(back, "application/octet-stream")
    } else if path == "/v1/responses" && stream {
        let id = format!("resp_{n}");
        let response = |status: &str, output: Value| json!({"id": id, "object": "response", "created_at": n, "status": status, "model": body["model"], "output": output, "usage": null});
        // The Responses API's event sequence, as the SDK's stream helper expects it.
        let mut seq = 0;
        let mut event = |name: &str, mut data: Value| {
            data["type"] = json!(name);
            data["sequence_number"] = json!(seq);
            seq += 1;
            format!("event: {name}\ndata: {data}\n\n")
        };
        let item = |status: &str, text: &str| {
            let content = if status == "in_progress" {
                json!([])
            } else {
                json!([{"type": "output_text", "text": text, "annotations": []}])
            };
            json!({"type": "message", "id": "msg_1", "status": status, "role": "assistant", "content": content})
        };
        let part = |text: &str| json!({"type": "output_text", "text": text, "annotations": []});
        let at = json!({"item_id": "msg_1", "output_index": 0, "content_index": 0});
        let with = |extra: Value| {
            let mut v = at.clone();
            v.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            v
        };
        let mut events = vec![
            event(
                "response.created",
                json!({"response": response("in_progress", json!([]))}),
            ),
            event(
                "response.output_item.added",
                json!({"output_index": 0, "item": item("in_progress", "")}),
            ),
            event(
                "response.content_part.added",
                with(json!({"part": part("")})),
            ),
        ];
        for w in &words {
            events.push(event(
                "response.output_text.delta",
                with(json!({"delta": w, "logprobs": []})),
            ));
        }
        events.push(event(
            "response.output_text.done",
            with(json!({"text": text, "logprobs": []})),
        ));
        events.push(event(
            "response.content_part.done",
            with(json!({"part": part(&text)})),
        ));
        events.push(event(
            "response.output_item.done",
            json!({"output_index": 0, "item": item("completed", &text)}),
        ));
        let done = response("completed", json!([item("completed", &text)]));
        events.push(event("response.completed", json!({"response": done})));
        sse(
            events,
            gap,
            breaks,
            "text/event-stream; charset=utf-8",
            hold.clone(),
        )
    } else if path == "/v1/embeddings" {
        json_response(json!({"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": [0.25, -0.5, 0.125]}], "model": body["model"], "usage": {"prompt_tokens": 2, "total_tokens": 2}}).to_string(), &[])
    } else if path == "/v1/responses" {
        json_response(json!({"id": format!("resp_{n}"), "object": "response", "created_at": n, "status": "completed", "model": body["model"], "output": [{"type": "message", "id": format!("msg_{n}"), "status": "completed", "role": "assistant", "content": [{"type": "output_text", "text": text, "annotations": []}]}], "parallel_tool_calls": true, "tool_choice": "auto", "tools": [], "usage": {"input_tokens": 5, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 2, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 7}}).to_string(), &[])
    } else if path == "/v1/messages" {
        let id = format!("msg_{n}");
        if stream {
            let mut events = vec![
                format!(
                    "event: message_start\ndata: {}\n\n",
                    json!({"type": "message_start", "message": {"id": id, "type": "message", "role": "assistant", "content": [], "model": body["model"], "usage": match usage {
                        Some(()) => {
                            let mut start = real_usage("anthropic");
                            start["output_tokens"] = json!(1);
                            start
                        }
                        None => json!({"input_tokens": 5, "output_tokens": 1}),
                    }}})
                ),
                format!(
                    "event: content_block_start\ndata: {}\n\n",
                    json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
                ),
                "event: ping\ndata: {\"type\": \"ping\"}\n\n".to_string(),
            ];
            for w in &words {
                events.push(format!("event: content_block_delta\ndata: {}\n\n", json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": w}})));
            }
            events.push(format!(
                "event: content_block_stop\ndata: {}\n\n",
                json!({"type": "content_block_stop", "index": 0})
            ));
            let out = match usage {
                Some(()) => real_usage("anthropic")["output_tokens"].clone(),
                None => json!(words.len()),
            };
            events.push(format!("event: message_delta\ndata: {}\n\n", json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": out}})));
            events.push(format!(
                "event: message_stop\ndata: {}\n\n",
                json!({"type": "message_stop"})
            ));
            sse(
                events,
                gap,
                breaks,
                "text/event-stream; charset=utf-8",
                hold.clone(),
            )
        } else {
            let counts = match usage {
                Some(()) => real_usage("anthropic"),
                None => json!({"input_tokens": 5, "output_tokens": words.len()}),
            };
            json_response(json!({"id": id, "type": "message", "role": "assistant", "model": body["model"], "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "usage": counts}).to_string(), &[])
        }
    } else if path.contains(":generateContent") && !path.starts_with("/v1") {
        // Google's API has every path under its version, as `/v1beta/models/...`.
        Response::builder()
            .status(404)
            .header("content-type", "text/html; charset=UTF-8")
            .body(full(format!("<!DOCTYPE html><title>Error 404 (Not Found)</title><p>The requested URL <code>{path}</code> was not found on this server.")))
            .unwrap()
    } else if path.contains(":streamGenerateContent")
        && !query.as_deref().unwrap_or("").contains("alt=sse")
    {
        // Without alt=sse, Gemini streams one JSON array, element by element, pretty-printed.
        let items: Vec<String> = words
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let v = json!({"candidates": [{"content": {"parts": [{"text": w}], "role": "model"}, "index": 0}], "usageMetadata": {"promptTokenCount": 5}, "responseId": format!("r{n}")});
                let open = if i == 0 { "[" } else { "\n,\r\n" };
                format!("{open}{}", encode_json(&v, JsonStyle::Google))
            })
            .chain(std::iter::once("\n]".to_string()))
            .collect();
        sse(
            items,
            gap,
            breaks,
            "application/json; charset=UTF-8",
            hold.clone(),
        )
    } else if path.contains(":streamGenerateContent") {
        // Gemini separates events with CRLF pairs.
        let events = words
            .iter()
            .map(|w| format!("data: {}\r\n\r\n", json!({"candidates": [{"content": {"parts": [{"text": w}], "role": "model"}, "index": 0}], "usageMetadata": {"promptTokenCount": 5}, "responseId": format!("r{n}")})))
            .collect();
        sse(events, gap, breaks, "text/event-stream", hold.clone())
    } else if path.contains(":generateContent") {
        // Google's JSON: indented, `": "`, and HTML-safe `\u` escapes serde_json never writes.
        let mut v = json!({"candidates": [{"content": {"parts": [{"text": text}], "role": "model"}, "finishReason": "STOP"}], "usageMetadata": {"promptTokenCount": 5, "totalTokenCount": 9}, "responseId": format!("r{n}")});
        if usage.is_some() {
            v["usageMetadata"] = real_usage("gemini");
            // The model's version is in the answer only: the request names it in its path.
            let model = path
                .split("/models/")
                .nth(1)
                .and_then(|m| m.split(':').next());
            v["modelVersion"] = json!(model.unwrap_or("gemini"));
        }
        json_response(encode_json(&v, JsonStyle::Google) + "\n", &[])
    } else if path == "/api/chat" || path == "/api/generate" {
        let chat = path == "/api/chat";
        let line = |w: &str, done: bool| {
            let mut v = if chat {
                json!({"model": body["model"], "created_at": format!("2026-01-01T00:00:{n:02}Z"), "message": {"role": "assistant", "content": w}, "done": done})
            } else {
                json!({"model": body["model"], "created_at": format!("2026-01-01T00:00:{n:02}Z"), "response": w, "done": done})
            };
            if done {
                v["total_duration"] = json!(1000 + n);
                v["eval_count"] = json!(words.len());
            }
            // Ollama is Go: `<`, `>` and `&` come escaped.
            encode_json(&v, JsonStyle::Go) + "\n"
        };
        if body["stream"] == json!(false) {
            json_response(line(&text, true), &[])
        } else {
            let mut lines: Vec<String> = words.iter().map(|w| line(w, false)).collect();
            lines.push(line("", true));
            sse(lines, gap, breaks, "application/x-ndjson", hold.clone())
        }
    } else if path.starts_with("/tools/") {
        // A tool's API at a fixed URL (search, weather, an MCP server's HTTP side): it
        // answers what it was asked, and which call this was, so a replay is told apart from
        // a second real call.
        json_response(
            json!({"tool": path, "query": query, "asked": body, "call": n}).to_string(),
            &[],
        )
    } else if path == "/api/embed" {
        json_response(
            json!({"model": body["model"], "embeddings": [[0.5, 0.25]]}).to_string(),
            &[],
        )
    } else {
        Response::builder()
            .status(404)
            .body(full(format!("fake provider: no route {path}")))
            .unwrap()
    };
    Ok(resp)
}

/// Usage blocks as each family's API reports them, with cached and reasoning tokens, for
/// prompts with `USAGE`. Their prices, worked out by hand, are in `tests/it/ledger.rs`.
pub fn real_usage(family: &str) -> Value {
    match family {
        "openai" => json!({"prompt_tokens": 1200, "completion_tokens": 300, "total_tokens": 1500,
            "prompt_tokens_details": {"cached_tokens": 1000, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 100, "audio_tokens": 0,
                "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}}),
        "anthropic" => json!({"input_tokens": 200, "cache_creation_input_tokens": 1000,
            "cache_read_input_tokens": 3000, "output_tokens": 400,
            "cache_creation": {"ephemeral_5m_input_tokens": 1000, "ephemeral_1h_input_tokens": 0},
            "service_tier": "standard"}),
        "gemini" => json!({"promptTokenCount": 2000, "cachedContentTokenCount": 1500,
            "candidatesTokenCount": 100, "thoughtsTokenCount": 200, "totalTokenCount": 2300,
            "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 2000}]}),
        _ => panic!("no usage for {family}"),
    }
}

fn full(s: String) -> Body {
    Full::new(Bytes::from(s))
        .map_err(|never| match never {})
        .boxed_unsync()
}

fn binary_response(bytes: Vec<u8>, content_type: &str) -> Response<Body> {
    Response::builder()
        .header("content-type", content_type)
        .body(
            Full::new(Bytes::from(bytes))
                .map_err(|never| match never {})
                .boxed_unsync(),
        )
        .unwrap()
}

/// Deterministic bytes for `seed`, across the whole byte range.
pub fn audio_bytes(seed: &str, len: usize) -> Vec<u8> {
    let mut x: u64 = seed.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// The uploaded file and the `model` field of a multipart request, read the simple way a
/// server would: by the boundary of its content type.
fn multipart_file_and_model(content_type: &str, body: &[u8]) -> (Vec<u8>, String) {
    let boundary = content_type
        .split("boundary=")
        .nth(1)
        .unwrap_or("")
        .trim_matches('"');
    let delimiter = format!("--{boundary}");
    let find = |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).position(|w| w == needle);
    let (mut file, mut model) = (Vec::new(), String::new());
    let mut rest = body;
    while let Some(at) = find(rest, delimiter.as_bytes()) {
        rest = &rest[at + delimiter.len()..];
        let Some(head_end) = find(rest, b"\r\n\r\n") else {
            break;
        };
        let head = String::from_utf8_lossy(&rest[..head_end]).to_string();
        let content = &rest[head_end + 4..];
        let end = find(content, format!("\r\n{delimiter}").as_bytes()).unwrap_or(content.len());
        if head.contains("filename=") {
            file = content[..end].to_vec();
        } else if head.contains("name=\"model\"") {
            model = String::from_utf8_lossy(&content[..end]).to_string();
        }
    }
    (file, model)
}

fn json_response(body: String, extra: &[(&str, &str)]) -> Response<Body> {
    let mut b = Response::builder().header("content-type", "application/json");
    for (k, v) in extra {
        b = b.header(*k, *v);
    }
    b.body(full(body)).unwrap()
}

fn sse(
    events: Vec<String>,
    gap: Duration,
    breaks: bool,
    content_type: &str,
    hold: Option<Arc<tokio::sync::Notify>>,
) -> Response<Body> {
    let take = if breaks { 2 } else { events.len() };
    let mut items: Vec<Result<Frame<Bytes>, std::io::Error>> = events
        .into_iter()
        .take(take)
        .map(|e| Ok(Frame::data(Bytes::from(e))))
        .collect();
    if breaks {
        items.push(Err(std::io::Error::other(
            "connection reset by the fake provider",
        )));
    }
    // The hold, if any, is taken by the second chunk only: it waits once, the rest flow.
    let stream = futures_util::stream::unfold(
        (items.into_iter(), true, hold),
        move |(mut it, first, mut hold)| async move {
            let item = it.next()?;
            if !first {
                if let Some(h) = hold.take() {
                    h.notified().await;
                }
            }
            if !first && !gap.is_zero() {
                tokio::time::sleep(gap).await;
            }
            if item.is_err() {
                // Let hyper flush what came before, as a connection reset mid-stream would.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Some((item, (it, false, hold)))
        },
    );
    Response::builder()
        .header("content-type", content_type)
        .body(StreamBody::new(stream).boxed_unsync())
        .unwrap()
}

/// Removes a developer's own provider keys and base URLs, and the machine's proxy and CA
/// variables: they would change where recording goes and what the runner injects. A test that
/// wants one sets it.
pub fn without_provider_env(cmd: &mut Command) {
    // The daemon's log filter is the test's to choose.
    cmd.env_remove("RUST_LOG").env_remove("LLMREPLAY_LOG");
    let network = providers::env::PROXY_VARS
        .iter()
        .chain(providers::env::NO_PROXY_VARS)
        .chain(&["SSL_CERT_FILE", "SSL_CERT_DIR"]);
    for var in network {
        cmd.env_remove(var);
    }
    let routed = providers::env::Routed::builtins();
    for (k, _) in providers::env::injected("", &routed) {
        cmd.env_remove(k);
    }
    for k in providers::env::key_vars(&routed) {
        cmd.env_remove(k);
    }
    for file in providers::env::credentials_files() {
        cmd.env_remove(file.var);
    }
}

/// `--upstream openai=<fake> --upstream anthropic=<fake>`: the sample's providers.
pub fn upstream_args(fake: &FakeProvider) -> Vec<String> {
    vec![
        "--upstream".into(),
        format!("openai={}", fake.url()),
        "--upstream".into(),
        format!("anthropic={}", fake.url()),
    ]
}

/// The built `cargo-llmreplay` binary.
pub fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_cargo-llmreplay"))
}

/// A running `cargo llmreplay serve`. Killed on drop; `stop` shuts it down as Ctrl-C would.
pub struct Serve {
    child: Option<Child>,
    pub base: String,
}

pub struct Stopped {
    pub status: std::process::ExitStatus,
    pub stderr: String,
}

impl Serve {
    /// Starts `serve` in `dir` with `args`, and waits for its first stdout line: the daemon is
    /// listening once it is printed, so no sleep is needed.
    pub fn start(dir: &Path, args: &[&str]) -> Serve {
        Self::start_with_env(dir, args, &[])
    }

    pub fn start_with_env(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Serve {
        match Self::try_start(dir, args, env) {
            Ok(s) => s,
            Err(stderr) => panic!("serve did not start: {stderr}"),
        }
    }

    /// `serve` recording into `dir/c` from `upstream` (`NAME=URL`).
    pub fn recording(dir: &Path, upstream: &str) -> Serve {
        Self::in_mode(dir, "record", upstream, &[])
    }

    /// `serve` in `mode` on `dir/c`, with one upstream (`NAME=URL`) and `env`.
    pub fn in_mode(dir: &Path, mode: &str, upstream: &str, env: &[(&str, &str)]) -> Serve {
        Self::in_mode_with(dir, mode, upstream, env, &[])
    }

    /// [`Serve::in_mode`] with more flags.
    pub fn in_mode_with(
        dir: &Path,
        mode: &str,
        upstream: &str,
        env: &[(&str, &str)],
        more: &[&str],
    ) -> Serve {
        let mut args = vec![
            "--cassette-dir",
            "c",
            "--mode",
            mode,
            "--upstream",
            upstream,
        ];
        args.extend_from_slice(more);
        Self::start_with_env(dir, &args, env)
    }

    /// `serve` re-recording into `dir/c`, each provider `(name, url)` from its upstream.
    pub fn recording_from(dir: &Path, upstreams: &[(&str, String)]) -> Serve {
        let mut args = vec![
            "--cassette-dir".to_string(),
            "c".into(),
            "--mode".into(),
            "record".into(),
        ];
        for (name, url) in upstreams {
            args.push("--upstream".into());
            args.push(format!("{name}={url}"));
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Self::start(dir, &args)
    }

    /// `serve` replaying from `dir/c`.
    pub fn replaying(dir: &Path) -> Serve {
        Self::start(dir, &["--cassette-dir", "c"])
    }

    /// Like `start`, but returns what it printed on stderr when it exits instead of serving.
    pub fn try_start(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Result<Serve, String> {
        let mut cmd = Command::new(binary());
        cmd.arg("llmreplay")
            .arg("serve")
            .args(args)
            .current_dir(dir);
        cmd.env_remove("CI").env_remove("LLMREPLAY_MODE");
        without_provider_env(&mut cmd);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn cargo-llmreplay");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        match line.trim().strip_prefix("LLMREPLAY_BASE_URL=") {
            Some(base) => Ok(Serve {
                child: Some(child),
                base: base.to_string(),
            }),
            None => {
                let mut err = String::new();
                child
                    .stderr
                    .take()
                    .unwrap()
                    .read_to_string(&mut err)
                    .unwrap();
                child.wait().unwrap();
                Err(err)
            }
        }
    }

    /// `GET /__llmreplay/<route>` (health, stats, journal) as JSON.
    pub async fn control(&self, route: &str) -> Value {
        get_json(&format!("{}/__llmreplay/{route}", self.base)).await
    }

    /// Asks the daemon to write its tests' recordings to their cassettes now, as it does when
    /// it stops; panics unless it did.
    pub async fn flush(&self) {
        let r = http()
            .post(format!("{}/__llmreplay/flush", self.base))
            .send()
            .await
            .unwrap();
        let status = r.status();
        assert_eq!(status, 200, "{}", r.text().await.unwrap());
    }

    /// The daemon's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// What the daemon answered so far.
    pub async fn journal(&self) -> Value {
        self.control("journal").await
    }

    /// The per-test base URL the runner injects, built by the runner's own code.
    pub fn for_test(&self, test_id: &str) -> String {
        runner_plugin::test_base_url(&self.base, test_id)
    }

    /// SIGTERM, then waits for the summary and the exit status.
    pub fn stop(mut self) -> Stopped {
        let mut child = self.child.take().unwrap();
        Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status()
            .unwrap();
        let mut stderr = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        Stopped {
            status: child.wait().unwrap(),
            stderr,
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Stops a daemon as a user does (SIGTERM): it writes its tests' recordings, then exits.
pub fn terminate(child: &mut Child) {
    Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()
        .unwrap();
    let _ = child.wait();
}

/// Every file below `dir`, with its text: for "no secret anywhere" assertions.
pub fn all_files(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push((p.clone(), std::fs::read_to_string(&p).unwrap_or_default()));
            }
        }
    }
    out
}

pub fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// A sample workspace (tests/fixtures/sample) in a temp dir, in its own git repository, run with
/// the real `cargo llmreplay test` and real nextest. Its builds share one target dir.
pub struct Sample {
    dir: tempfile::TempDir,
    pub root: PathBuf,
}

/// What one `cargo llmreplay test` printed and wrote.
pub struct Run {
    pub code: Option<i32>,
    pub stderr: String,
    pub report: Value,
    pub report_path: PathBuf,
}

/// What one `cargo llmreplay <subcommand>` printed.
pub struct Output {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    /// Runs `cmd` to its end.
    pub fn of(cmd: &mut Command) -> Output {
        let out = cmd.output().unwrap();
        Output {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

impl Sample {
    pub fn new() -> Sample {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("sample");
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/sample");
        let runner = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../runner-plugin")
            .canonicalize()
            .unwrap();
        // The client is the quickstart example's: one copy of it in the repository.
        let client =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/quickstart/src/lib.rs");
        for (from, rel) in [
            (client, "src/lib.rs"),
            (fixture.join("tests/chat.rs"), "tests/chat.rs"),
        ] {
            std::fs::create_dir_all(root.join(rel).parent().unwrap()).unwrap();
            std::fs::copy(from, root.join(rel)).unwrap();
        }
        let manifest = std::fs::read_to_string(fixture.join("Cargo.toml.in")).unwrap();
        std::fs::write(
            root.join("Cargo.toml"),
            manifest.replace("@RUNNER_PLUGIN@", &runner.display().to_string()),
        )
        .unwrap();
        std::fs::write(root.join(".gitignore"), "/target\n").unwrap();
        git2::Repository::init(&root).unwrap();
        Sample { dir, root }
    }

    /// The capture sample (tests/fixtures/capture): tests whose clients call hard-coded hosts.
    pub fn capture() -> Sample {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("capture");
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/capture");
        std::fs::create_dir_all(root.join("tests")).unwrap();
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::write(root.join("src/lib.rs"), "").unwrap();
        std::fs::copy(
            fixture.join("tests/capture.rs"),
            root.join("tests/capture.rs"),
        )
        .unwrap();
        std::fs::copy(fixture.join("Cargo.toml.in"), root.join("Cargo.toml")).unwrap();
        std::fs::write(root.join(".gitignore"), "/target\n").unwrap();
        git2::Repository::init(&root).unwrap();
        Sample { dir, root }
    }

    /// The MCP agent sample (tests/fixtures/mcp_agent): a model call and a tool call through
    /// rmcp to a stdio server of its own.
    pub fn mcp_agent() -> Sample {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("mcp_agent");
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/mcp_agent");
        for rel in ["src/lib.rs", "src/bin/calc.rs", "tests/agent.rs"] {
            std::fs::create_dir_all(root.join(rel).parent().unwrap()).unwrap();
            std::fs::copy(fixture.join(rel), root.join(rel)).unwrap();
        }
        std::fs::copy(fixture.join("Cargo.toml.in"), root.join("Cargo.toml")).unwrap();
        std::fs::write(root.join(".gitignore"), "/target\n").unwrap();
        git2::Repository::init(&root).unwrap();
        Sample { dir, root }
    }

    /// The target dir all samples share, so each builds only its own small crate.
    pub fn target_dir() -> PathBuf {
        binary()
            .parent()
            .unwrap()
            .parent()
            .unwrap()
            .join("llmreplay-samples")
    }

    /// Runs `cargo llmreplay test ARGS` in the sample, offline, in a clean environment.
    pub fn run(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        let report = self.dir.path().join(format!(
            "report-{}.json",
            std::process::id() as u128 * 1000 + rand_suffix()
        ));
        self.run_reporting(&report, args, env)
    }

    /// As [`Sample::run`], writing the report at `report` (where the run before may have left
    /// one).
    pub fn run_reporting(&self, report: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
        let report = report.to_path_buf();
        let state = tempfile::tempdir().unwrap();
        let mut cmd = self.command(binary());
        cmd.args(["llmreplay", "test", "--report"])
            .arg(&report)
            .args(args);
        cmd.env("SAMPLE_STATE_DIR", state.path());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let report_path = report;
        let report = std::fs::read_to_string(&report_path)
            .map(|t| serde_json::from_str(&t).unwrap())
            .unwrap_or(Value::Null);
        Run {
            code: out.status.code(),
            stderr,
            report,
            report_path,
        }
    }

    /// Runs `cargo llmreplay ARGS` (status, diff, prune, report ...) in the sample.
    /// `cargo llmreplay test --record` of every test (the retried one needs `--retries 1`),
    /// recording from `fake`; fails the calling test if the run fails.
    pub fn record_all(&self, fake: &FakeProvider) -> Run {
        let mut args = vec!["--record".to_string(), "--retries".into(), "1".into()];
        args.extend(upstream_args(fake));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let run = self.run(&args, &[]);
        assert_eq!(run.code, Some(0), "{}", run.stderr);
        run
    }

    pub fn llmreplay(&self, args: &[&str]) -> Output {
        Output::of(self.command(binary()).arg("llmreplay").args(args))
    }

    /// Gives this sample's package its own version. Samples share a target dir, and cargo names
    /// a path package's build outputs by name, version and path relative to its workspace,
    /// which is the same for every sample; a test that edits the sample's code must not
    /// overwrite the binaries the others run.
    pub fn own_build(&self, version: &str) {
        let manifest = self.root.join("Cargo.toml");
        let text = std::fs::read_to_string(&manifest).unwrap();
        let edited = text.replacen(
            "version = \"0.1.0\"",
            &format!("version = \"{version}\""),
            1,
        );
        assert_ne!(edited, text);
        std::fs::write(manifest, edited).unwrap();
    }

    /// Adds the fixture's `tests/NAME` (kept out of every sample but those that ask for it).
    pub fn add_test(&self, name: &str) {
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/sample/tests");
        std::fs::copy(fixture.join(name), self.root.join("tests").join(name)).unwrap();
    }

    /// Runs `cargo llmreplay ARGS` in the sample with `env` on top of its clean environment.
    pub fn llmreplay_with(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut cmd = self.command(binary());
        cmd.arg("llmreplay").args(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        Output::of(&mut cmd)
    }

    /// A scratch folder beside the sample, removed with it.
    pub fn scratch(&self) -> &Path {
        self.dir.path()
    }

    /// A command in the sample's folder with none of the outer nextest's or CI's variables.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new(program);
        cmd.current_dir(&self.root);
        for (k, _) in std::env::vars() {
            if k.starts_with("NEXTEST")
                || k.starts_with("LLMREPLAY")
                || k == "CI"
                || k.starts_with("CARGO_TARGET_")
            {
                cmd.env_remove(k);
            }
        }
        without_provider_env(&mut cmd);
        cmd.env("CARGO_TARGET_DIR", Self::target_dir())
            .env("CARGO_NET_OFFLINE", "true");
        cmd
    }

    pub fn cassette(&self, slug: &str, provider: &str) -> PathBuf {
        self.root
            .join("tests/cassettes")
            .join(slug)
            .join(format!("{provider}.json"))
    }

    /// `git add -A && git commit`, with git2.
    pub fn commit_all(&self) {
        commit_all(&self.root);
    }

    /// `git add PATHSPEC && git commit`, with git2.
    pub fn commit(&self, pathspec: &str) {
        commit_matching(&self.root, pathspec);
    }
}

/// `git add -A && git commit` in the repository at `dir`, with git2.
pub fn commit_all(dir: &Path) {
    commit_matching(dir, "*");
}

fn commit_matching(dir: &Path, pathspec: &str) {
    let repo = git2::Repository::open(dir).unwrap();
    let mut index = repo.index().unwrap();
    index
        .add_all([pathspec], git2::IndexAddOption::DEFAULT, None)
        .unwrap();
    index.write().unwrap();
    let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
    let sig = git2::Signature::now("Test", "test@example.com").unwrap();
    let parent = repo.head().ok().and_then(|h| h.peel_to_commit().ok());
    let parents: Vec<&git2::Commit> = parent.iter().collect();
    repo.commit(Some("HEAD"), &sig, &sig, "cassettes", &tree, &parents)
        .unwrap();
}

/// A number this process has not handed out before, for names that must not collide.
/// A value no run saw before (the time in nanoseconds and a counter): a fake's new secret.
fn fresh_tag() -> u128 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    nanos.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ rand_suffix()
}

pub fn rand_suffix() -> u128 {
    static N: AtomicUsize = AtomicUsize::new(0);
    N.fetch_add(1, Ordering::SeqCst) as u128
}

/// The Python with the pinned official SDKs of `tests/sdk/requirements.txt`: `LLMREPLAY_PYTHON`,
/// else the venv `.ci/run` makes in `target/sdk-venv`. Missing, a test says so on stderr and
/// skips; under `CI=true` it fails instead, so that CI never passes by skipping.
pub fn sdk_python(module: &str) -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let python = std::env::var_os("LLMREPLAY_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target/sdk-venv/bin/python"));
    let works = Command::new(&python)
        .args(["-c", &format!("import {module}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if works {
        return Some(python);
    }
    let why = format!(
        "the Python package {module:?} is not importable by {}; create the venv with: python3 -m venv target/sdk-venv && target/sdk-venv/bin/pip install -r tests/sdk/requirements.txt",
        python.display()
    );
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{why}");
    }
    eprintln!("SKIPPED (not under CI): {why}");
    None
}

/// Runs a script of `tests/sdk/` with `python` and `env`; its stdout, or a panic with stderr.
pub fn run_sdk_script(python: &Path, script: &str, env: &[(&str, &str)]) -> String {
    run_sdk_script_with(python, script, &[], env)
}

/// [`run_sdk_script`] with arguments for the script.
pub fn run_sdk_script_with(
    python: &Path,
    script: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut cmd = Command::new(python);
    cmd.arg(root.join("tests/sdk").join(script)).args(args);
    for name in [
        "OPENAI_BASE_URL",
        "OPENAI_API_KEY",
        "AZURE_OPENAI_ENDPOINT",
        "AZURE_OPENAI_API_KEY",
        "OPENAI_API_VERSION",
    ] {
        cmd.env_remove(name);
    }
    cmd.envs(env.iter().copied());
    stdout_of(&mut cmd)
}

/// What `cmd` printed on stdout, or a panic with the command and its stderr when it failed.
pub fn stdout_of(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `GET url` as JSON.
pub async fn get_json(url: &str) -> Value {
    http().get(url).send().await.unwrap().json().await.unwrap()
}

/// A reqwest client; reqwest is built with rustls but no crypto provider, so ring is picked here,
/// as the daemon does.
pub fn http() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

/// A certificate authority made for one test, and a server certificate it signed for
/// `localhost` and 127.0.0.1: what a company's TLS-inspecting proxy or private gateway has.
pub struct TestCa {
    pub ca_pem: String,
    leaf: rustls::pki_types::CertificateDer<'static>,
    leaf_key: Vec<u8>,
}

impl TestCa {
    pub fn new(name: &str) -> TestCa {
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(rcgen::DnType::CommonName, format!("{name} test CA"));
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca, ca_key);
        let leaf_key = rcgen::KeyPair::generate().unwrap();
        let leaf = rcgen::CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()])
            .unwrap()
            .signed_by(&leaf_key, &issuer)
            .unwrap();
        TestCa {
            ca_pem: ca_cert.pem(),
            leaf: leaf.der().clone(),
            leaf_key: leaf_key.serialize_der(),
        }
    }

    /// Writes the CA's certificate as PEM to `path`.
    pub fn write_pem(&self, path: &Path) {
        std::fs::write(path, &self.ca_pem).unwrap();
    }

    /// Writes this CA to `scratch` and an `llmreplay.toml` in `root` whose `[upstream] ca_file`
    /// trusts it (stand-in upstreams on TLS), followed by `more`.
    pub fn trusted_by(&self, root: &Path, scratch: &Path, more: &str) {
        let ca_file = scratch.join("upstream-ca.pem");
        self.write_pem(&ca_file);
        std::fs::write(
            root.join("llmreplay.toml"),
            format!(
                "[upstream]\nca_file = {:?}\n{more}",
                ca_file.display().to_string()
            ),
        )
        .unwrap();
    }

    fn server_config(&self) -> Arc<rustls::ServerConfig> {
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(self.leaf_key.clone().into());
        Arc::new(
            rustls::ServerConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![self.leaf.clone()], key)
            .unwrap(),
        )
    }
}

/// A real HTTP proxy, tinyproxy, on 127.0.0.1: what a company's proxy is to the daemon. Its log
/// tells which requests went through it (a `CONNECT` per tunnel).
pub struct Tinyproxy {
    child: Child,
    pub port: u16,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Tinyproxy {
    /// Starts one, asking for `user:password` when given. `None` when tinyproxy is not
    /// installed (`.ci/run` installs it); under `CI=true` that fails the test instead.
    pub fn start(credentials: Option<(&str, &str)>) -> Option<Tinyproxy> {
        let Ok(bin) = which("tinyproxy") else {
            assert!(
                std::env::var_os("CI").is_none(),
                "tinyproxy is not installed (apt-get install tinyproxy; .ci/run does)"
            );
            eprintln!(
                "SKIPPED (not under CI): tinyproxy is not installed (apt-get install tinyproxy)"
            );
            return None;
        };
        let dir = tempfile::tempdir().unwrap();
        // The proxy needs a port of its own in its config; the OS picks a free one.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log = dir.path().join("tinyproxy.log");
        let mut conf = format!(
            "Port {port}\nListen 127.0.0.1\nTimeout 60\nLogFile \"{}\"\nLogLevel Info\nMaxClients 50\nAllow 127.0.0.1\nDisableViaHeader Yes\n",
            log.display()
        );
        if let Some((user, password)) = credentials {
            conf.push_str(&format!("BasicAuth {user} {password}\n"));
        }
        let conf_path = dir.path().join("tinyproxy.conf");
        std::fs::write(&conf_path, conf).unwrap();
        let mut child = Command::new(bin)
            .args(["-d", "-c"])
            .arg(&conf_path)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(status) = child.try_wait().unwrap() {
                let mut err = String::new();
                child
                    .stderr
                    .take()
                    .unwrap()
                    .read_to_string(&mut err)
                    .unwrap();
                panic!("tinyproxy exited ({status}): {err}");
            }
            assert!(
                std::time::Instant::now() < deadline,
                "tinyproxy did not listen on {port}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(Tinyproxy {
            child,
            port,
            log,
            _dir: dir,
        })
    }

    /// `http://[user:password@]127.0.0.1:PORT`.
    pub fn url(&self, credentials: Option<(&str, &str)>) -> String {
        match credentials {
            Some((u, p)) => format!("http://{u}:{p}@127.0.0.1:{}", self.port),
            None => format!("http://127.0.0.1:{}", self.port),
        }
    }

    /// What the proxy logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Tinyproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The first `name` on PATH.
fn which(name: &str) -> Result<PathBuf, ()> {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .ok_or(())
}

/// How a provider's server writes JSON, where it differs from serde_json's compact form.
#[derive(Clone, Copy)]
pub enum JsonStyle {
    /// Go's encoding/json (Ollama): compact, `<`, `>`, `&`, U+2028 and U+2029 as `\u` escapes.
    Go,
    /// Google's APIs (Gemini): two-space indent, `": "`, non-ASCII and `<>&='` as `\u` escapes.
    Google,
}

/// `value` as `style` writes it.
pub fn encode_json(value: &Value, style: JsonStyle) -> String {
    let mut out = String::new();
    write_json(value, style, 0, &mut out);
    out
}

fn write_json(value: &Value, style: JsonStyle, depth: usize, out: &mut String) {
    let pretty = matches!(style, JsonStyle::Google);
    let newline = |out: &mut String, depth: usize| {
        if pretty {
            out.push('\n');
            out.push_str(&"  ".repeat(depth));
        }
    };
    match value {
        Value::Object(map) if !map.is_empty() => {
            out.push('{');
            for (i, (k, v)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                newline(out, depth + 1);
                write_string(k, style, out);
                out.push_str(if pretty { ": " } else { ":" });
                write_json(v, style, depth + 1, out);
            }
            newline(out, depth);
            out.push('}');
        }
        Value::Array(list) if !list.is_empty() => {
            out.push('[');
            for (i, v) in list.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                newline(out, depth + 1);
                write_json(v, style, depth + 1, out);
            }
            newline(out, depth);
            out.push(']');
        }
        Value::String(text) => write_string(text, style, out),
        other => out.push_str(&other.to_string()),
    }
}

fn write_string(text: &str, style: JsonStyle, out: &mut String) {
    out.push('"');
    for c in text.chars() {
        let escaped = match style {
            JsonStyle::Go => matches!(c, '<' | '>' | '&' | '\u{2028}' | '\u{2029}'),
            JsonStyle::Google => !c.is_ascii() || matches!(c, '<' | '>' | '&' | '=' | '\''),
        };
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if escaped || (c as u32) < 0x20 => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// The name of the first tool a request offers, in any family's shape.
fn tool_asked(body: &Value) -> Option<String> {
    let tools = body["tools"].as_array()?;
    let first = tools.first()?;
    first["function"]["name"]
        .as_str()
        .or_else(|| first["name"].as_str())
        .or_else(|| first["functionDeclarations"][0]["name"].as_str())
        .map(str::to_string)
}

/// An answer that calls `tool` with `{"city": "Paris"}`, as each family sends one; streamed
/// arguments arrive in fragments, as they do from the real APIs.
fn tool_answer(path: &str, tool: &str, n: usize, streamed: bool) -> Response<Body> {
    let args = r#"{"city": "Paris"}"#;
    let fragments = [r#"{"ci"#, r#"ty": "Pa"#, r#"ris"}"#];
    let none = Duration::ZERO;
    if path == "/v1/chat/completions" {
        let id = format!("chatcmpl-{n}");
        if !streamed {
            let v = json!({"id": id, "object": "chat.completion", "created": n, "model": "m", "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": [{"id": format!("call_{n}"), "type": "function", "function": {"name": tool, "arguments": args}}]}, "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 9, "completion_tokens": 7, "total_tokens": 16}});
            return json_response(serde_json::to_string_pretty(&v).unwrap() + "\n", &[]);
        }
        let chunk = |delta: Value, finish: Value| {
            format!(
                "data: {}\n\n",
                json!({"id": id, "object": "chat.completion.chunk", "created": n, "model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
            )
        };
        let mut events = vec![chunk(
            json!({"role": "assistant", "content": null, "tool_calls": [{"index": 0, "id": format!("call_{n}"), "type": "function", "function": {"name": tool, "arguments": ""}}]}),
            Value::Null,
        )];
        for f in fragments {
            events.push(chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": f}}]}),
                Value::Null,
            ));
        }
        events.push(chunk(json!({}), json!("tool_calls")));
        events.push("data: [DONE]\n\n".into());
        return sse(events, none, false, "text/event-stream", None);
    }
    if path == "/v1/messages" {
        let id = format!("msg_{n}");
        if !streamed {
            let v = json!({"id": id, "type": "message", "role": "assistant", "model": "m", "content": [{"type": "tool_use", "id": format!("toolu_{n}"), "name": tool, "input": {"city": "Paris"}}], "stop_reason": "tool_use", "usage": {"input_tokens": 9, "output_tokens": 7}});
            return json_response(v.to_string(), &[]);
        }
        let event = |name: &str, v: Value| format!("event: {name}\ndata: {v}\n\n");
        let mut events = vec![
            event(
                "message_start",
                json!({"type": "message_start", "message": {"id": id, "type": "message", "role": "assistant", "content": [], "model": "m", "usage": {"input_tokens": 9, "output_tokens": 1}}}),
            ),
            event(
                "content_block_start",
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": format!("toolu_{n}"), "name": tool, "input": {}}}),
            ),
        ];
        for f in fragments {
            events.push(event("content_block_delta", json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": f}})));
        }
        events.push(event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ));
        events.push(event("message_delta", json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 7}})));
        events.push(event("message_stop", json!({"type": "message_stop"})));
        return sse(
            events,
            none,
            false,
            "text/event-stream; charset=utf-8",
            None,
        );
    }
    // Gemini: a functionCall part, whole or as one SSE event.
    let v = json!({"candidates": [{"content": {"parts": [{"functionCall": {"name": tool, "args": {"city": "Paris"}}}], "role": "model"}, "finishReason": "STOP", "index": 0}], "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": 7, "totalTokenCount": 16}, "responseId": format!("r{n}")});
    if streamed {
        sse(
            vec![format!("data: {v}\r\n\r\n")],
            none,
            false,
            "text/event-stream",
            None,
        )
    } else {
        json_response(encode_json(&v, JsonStyle::Google) + "\n", &[])
    }
}

/// A fake WebSocket upstream on 127.0.0.1 speaking OpenAI Realtime (and Azure's, on any path
/// with `realtime`) and Gemini Live (`...BidiGenerateContent`): every id and timestamp new on
/// each session, as the real ones are. A prompt with `CUT` drops the connection after the first
/// delta, without a close; one with `QUOTA` is answered with a close 1008 "quota exceeded".
pub struct FakeRealtime {
    pub addr: SocketAddr,
    /// Sessions opened, and the path and query of each upgrade.
    pub upgrades: Arc<Mutex<Vec<String>>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl FakeRealtime {
    pub async fn start() -> FakeRealtime {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let upgrades: Arc<Mutex<Vec<String>>> = Arc::default();
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let seen = upgrades.clone();
        tokio::spawn(async move {
            loop {
                let socket = tokio::select! {
                    s = listener.accept() => s.unwrap().0,
                    _ = &mut stopped => return,
                };
                let seen = seen.clone();
                tokio::spawn(async move {
                    let path = Arc::new(Mutex::new(String::new()));
                    let p = path.clone();
                    // tungstenite's callback type fixes the error's size.
                    #[allow(clippy::result_large_err)]
                    let callback =
                        move |req: &tokio_tungstenite::tungstenite::handshake::server::Request,
                              resp| {
                            *p.lock().unwrap() = req.uri().to_string();
                            Ok(resp)
                        };
                    let Ok(ws) = tokio_tungstenite::accept_hdr_async(socket, callback).await else {
                        return;
                    };
                    let path = path.lock().unwrap().clone();
                    let n = {
                        let mut all = seen.lock().unwrap();
                        all.push(path.clone());
                        all.len()
                    };
                    if path.contains("BidiGenerateContent") {
                        gemini_live(ws, n).await;
                    } else {
                        openai_realtime(ws, n).await;
                    }
                });
            }
        });
        FakeRealtime {
            addr,
            upgrades,
            stop: Some(stop),
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn stop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

type FakeSocket = tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>;

async fn send_json(ws: &mut FakeSocket, v: Value) {
    use futures_util::SinkExt;
    let _ = ws
        .send(tokio_tungstenite::tungstenite::Message::text(v.to_string()))
        .await;
}

async fn openai_realtime(mut ws: FakeSocket, n: usize) {
    use futures_util::StreamExt;
    use tokio_tungstenite::tungstenite::Message;
    let mut k = 0;
    let mut event_id = move || {
        k += 1;
        format!("event_{n}_{k}")
    };
    send_json(&mut ws, json!({"type": "session.created", "event_id": event_id(), "session": {"id": format!("sess_{n}"), "object": "realtime.session", "model": "gpt-realtime", "expires_at": 1_800_000_000 + n}})).await;
    let mut prompt = String::new();
    while let Some(Ok(m)) = ws.next().await {
        let Message::Text(t) = m else {
            if matches!(m, Message::Close(_)) {
                break;
            }
            continue;
        };
        let v: Value = serde_json::from_str(t.as_str()).unwrap_or(Value::Null);
        match v["type"].as_str().unwrap_or("") {
            "session.update" => {
                send_json(&mut ws, json!({"type": "session.updated", "event_id": event_id(), "session": {"id": format!("sess_{n}"), "model": "gpt-realtime", "instructions": v["session"]["instructions"]}})).await;
            }
            "conversation.item.create" => {
                prompt = v["item"]["content"][0]["text"]
                    .as_str()
                    .unwrap_or("")
                    .to_string();
                if prompt.contains("QUOTA") {
                    use futures_util::SinkExt;
                    let close = tokio_tungstenite::tungstenite::protocol::CloseFrame {
                        code: 1008.into(),
                        reason: "quota exceeded".into(),
                    };
                    let _ = ws.send(Message::Close(Some(close))).await;
                    while let Some(Ok(_)) = ws.next().await {}
                    return;
                }
                send_json(&mut ws, json!({"type": "conversation.item.created", "event_id": event_id(), "previous_item_id": null, "item": {"id": format!("item_{n}"), "type": "message", "role": "user", "content": v["item"]["content"]}})).await;
            }
            "response.create" => {
                let response_id = format!("resp_{n}");
                send_json(&mut ws, json!({"type": "response.created", "event_id": event_id(), "response": {"id": response_id, "object": "realtime.response", "status": "in_progress", "output": []}})).await;
                let answer = format!("You said: {prompt}");
                for (i, w) in answer.split_inclusive(' ').enumerate() {
                    if i == 1 && prompt.contains("CUT") {
                        // Gone without a close frame, as a dropped connection is.
                        return;
                    }
                    send_json(&mut ws, json!({"type": "response.output_text.delta", "event_id": event_id(), "response_id": response_id, "item_id": format!("item_{n}_out"), "output_index": 0, "content_index": 0, "delta": w})).await;
                }
                send_json(&mut ws, json!({"type": "response.output_text.done", "event_id": event_id(), "response_id": response_id, "item_id": format!("item_{n}_out"), "output_index": 0, "content_index": 0, "text": answer})).await;
                send_json(&mut ws, json!({"type": "response.done", "event_id": event_id(), "response": {"id": response_id, "object": "realtime.response", "status": "completed", "usage": {"total_tokens": 10, "input_tokens": 4, "output_tokens": 6}}})).await;
            }
            _ => {}
        }
    }
}

async fn gemini_live(mut ws: FakeSocket, n: usize) {
    use futures_util::StreamExt;
    use tokio_tungstenite::tungstenite::Message;
    while let Some(Ok(m)) = ws.next().await {
        let text = match &m {
            Message::Text(t) => t.as_str().to_string(),
            // Gemini Live clients may send JSON in binary frames.
            Message::Binary(b) => String::from_utf8_lossy(b).into_owned(),
            Message::Close(_) => break,
            _ => continue,
        };
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if v.get("setup").is_some() {
            send_json(
                &mut ws,
                json!({"setupComplete": {"sessionId": format!("live_{n}")}}),
            )
            .await;
        } else if let Some(turns) = v.pointer("/clientContent/turns") {
            let prompt = turns[0]["parts"][0]["text"].as_str().unwrap_or("");
            let answer = format!("You said: {prompt}");
            for w in answer.split_inclusive(' ') {
                send_json(&mut ws, json!({"serverContent": {"modelTurn": {"parts": [{"text": w}]}}, "responseId": format!("r{n}")})).await;
            }
            send_json(&mut ws, json!({"serverContent": {"turnComplete": true}, "usageMetadata": {"totalTokenCount": 9}, "responseId": format!("r{n}")})).await;
        }
    }
}

/// `&str`s of owned arguments, for `Sample::run`.
pub fn refs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// The first user message of each interaction of a chat cassette.
pub fn prompts(cassette: &Value) -> Vec<String> {
    cassette["interactions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            x["request"]["body"]["messages"][0]["content"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect()
}

/// Edits the sample's tests/chat.rs.
pub fn edit_sample_tests(sample: &Sample, edit: impl Fn(String) -> String) {
    let path = sample.root.join("tests/chat.rs");
    let text = std::fs::read_to_string(&path).unwrap();
    let edited = edit(text.clone());
    assert_ne!(edited, text, "the edit changed nothing");
    std::fs::write(&path, edited).unwrap();
}

/// A crate named `name` (for `cargo locate-project`) in its own git repository, its target dir
/// ignored by git when `ignore_target`.
pub fn crate_in_repo(name: &str, ignore_target: bool) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("Cargo.toml"),
        format!("[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n"),
    )
    .unwrap();
    std::fs::create_dir_all(dir.path().join("src")).unwrap();
    std::fs::write(dir.path().join("src/lib.rs"), "").unwrap();
    if ignore_target {
        std::fs::write(dir.path().join(".gitignore"), "/target\n").unwrap();
    }
    git2::Repository::init(dir.path()).unwrap();
    dir
}
