//! Answers as real servers write them, not as serde_json would: Google's indented JSON with
//! `\u` escapes, Go's HTML-safe escapes (Ollama), Gemini's stream as one JSON array (no
//! `alt=sse`), and tool calls in every family, whole and streamed in fragments. Each records,
//! replays offline byte for byte, and is summarised with its text or tool call.

use crate::support::{http, FakeProvider, Serve};
use serde_json::{json, Value};

struct Case {
    test: &'static str,
    provider: &'static str,
    path: &'static str,
    body: Value,
    /// What the summary must say: the answer's text, or the tool called.
    text: Option<&'static str>,
    tool: Option<&'static str>,
}

const PROMPT: &str = "<b>café & thé</b> = ☕ 'ok'";

fn cases() -> Vec<Case> {
    let chat = |stream: bool| json!({"model": "m", "stream": stream, "messages": [{"role": "user", "content": PROMPT}]});
    let openai_tools = |stream: bool| json!({"model": "m", "stream": stream, "messages": [{"role": "user", "content": "weather?"}], "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]});
    let anthropic_tools = |stream: bool| json!({"model": "m", "max_tokens": 64, "stream": stream, "messages": [{"role": "user", "content": "weather?"}], "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}]});
    let gemini = json!({"contents": [{"role": "user", "parts": [{"text": PROMPT}]}]});
    let gemini_tools = json!({"contents": [{"role": "user", "parts": [{"text": "weather?"}]}], "tools": [{"functionDeclarations": [{"name": "get_weather"}]}]});
    let said = "You said: <b>café & thé</b> = ☕ 'ok'";
    vec![
        Case {
            test: "wire$gemini_google_json",
            provider: "gemini",
            path: "/v1beta/models/gemini-2.5-flash:generateContent",
            body: gemini.clone(),
            text: Some(said),
            tool: None,
        },
        Case {
            test: "wire$gemini_json_array_stream",
            provider: "gemini",
            path: "/v1beta/models/gemini-2.5-flash:streamGenerateContent",
            body: gemini,
            text: Some(said),
            tool: None,
        },
        Case {
            test: "wire$ollama_go_json",
            provider: "ollama",
            path: "/api/chat",
            body: chat(false),
            text: Some(said),
            tool: None,
        },
        Case {
            test: "wire$ollama_go_ndjson",
            provider: "ollama",
            path: "/api/chat",
            body: chat(true),
            text: Some(said),
            tool: None,
        },
        Case {
            test: "wire$openai_tool",
            provider: "openai",
            path: "/v1/chat/completions",
            body: openai_tools(false),
            text: None,
            tool: Some("get_weather"),
        },
        Case {
            test: "wire$openai_tool_stream",
            provider: "openai",
            path: "/v1/chat/completions",
            body: openai_tools(true),
            text: None,
            tool: Some("get_weather"),
        },
        Case {
            test: "wire$anthropic_tool",
            provider: "anthropic",
            path: "/v1/messages",
            body: anthropic_tools(false),
            text: None,
            tool: Some("get_weather"),
        },
        Case {
            test: "wire$anthropic_tool_stream",
            provider: "anthropic",
            path: "/v1/messages",
            body: anthropic_tools(true),
            text: None,
            tool: Some("get_weather"),
        },
        Case {
            test: "wire$gemini_tool",
            provider: "gemini",
            path: "/v1beta/models/gemini-2.5-flash:generateContent",
            body: gemini_tools.clone(),
            text: None,
            tool: Some("get_weather"),
        },
        Case {
            test: "wire$gemini_tool_stream",
            provider: "gemini",
            path: "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
            body: gemini_tools,
            text: None,
            tool: Some("get_weather"),
        },
    ]
}

async fn send(serve: &Serve, case: &Case) -> (u16, bytes::Bytes) {
    let url = format!(
        "{}/{}{}",
        serve.for_test(case.test),
        case.provider,
        case.path
    );
    let r = http().post(&url).json(&case.body).send().await.unwrap();
    (r.status().as_u16(), r.bytes().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_real_servers_write_replays_byte_for_byte_and_is_summarised() {
    let mut fake = FakeProvider::start().await;
    let dir = tempfile::tempdir().unwrap();
    let upstreams: Vec<(&str, String)> = ["openai", "anthropic", "gemini", "ollama"]
        .into_iter()
        .map(|p| (p, fake.url()))
        .collect();
    let rec = Serve::recording_from(dir.path(), &upstreams);
    let mut recorded = Vec::new();
    for case in cases() {
        let (status, body) = send(&rec, &case).await;
        assert_eq!(
            status,
            200,
            "{}: {}",
            case.test,
            String::from_utf8_lossy(&body)
        );
        recorded.push(body);
    }
    assert!(rec.stop().status.success());

    // The fake really wrote what serde_json would not: escapes, spacing, an array stream.
    let text = |i: usize| String::from_utf8_lossy(&recorded[i]).into_owned();
    assert!(
        text(0).contains(
            r"\u003cb\u003ecaf\u00e9 \u0026 th\u00e9\u003c/b\u003e \u003d \u2615 \u0027ok\u0027"
        ),
        "{}",
        text(0)
    );
    assert!(text(0).contains("\"candidates\": ["), "{}", text(0));
    assert!(
        text(1).starts_with("[{\n") && text(1).contains("\n,\r\n{") && text(1).ends_with("\n]"),
        "{}",
        text(1)
    );
    assert!(
        text(2).contains(r"\u003cb\u003ecafé \u0026 thé\u003c/b\u003e"),
        "{}",
        text(2)
    );

    fake.stop();
    let replay = Serve::replaying(dir.path());
    for (case, bytes) in cases().iter().zip(&recorded) {
        let (status, body) = send(&replay, case).await;
        assert_eq!(
            status,
            200,
            "{}: {}",
            case.test,
            String::from_utf8_lossy(&body)
        );
        assert_eq!(&body, bytes, "{} replays byte for byte", case.test);
    }
    let stopped = replay.stop();
    assert!(stopped.status.success(), "{}", stopped.stderr);

    for case in cases() {
        let slug = case.test.replace('$', "--");
        let cassette =
            crate::support::read_json(&dir.path().join(format!("c/{slug}/{}.json", case.provider)));
        let summary = &cassette["interactions"][0]["summary"];
        if let Some(text) = case.text {
            assert_eq!(summary["text"], text, "{}: {cassette}", case.test);
        }
        if let Some(tool) = case.tool {
            let call = &summary["tool_calls"][0];
            assert_eq!(call["name"], tool, "{}: {summary}", case.test);
            let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
            assert_eq!(args, json!({"city": "Paris"}), "{}: {summary}", case.test);
        }
    }
}

/// A re-record that gets the same answers with new ids, timestamps and durations writes no
/// byte, for every family, whole and streamed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn re_recording_the_same_answers_changes_no_byte_in_any_family() {
    let fake = FakeProvider::start().await;
    let dir = tempfile::tempdir().unwrap();
    let upstreams: Vec<(&str, String)> = ["openai", "anthropic", "gemini", "ollama"]
        .into_iter()
        .map(|p| (p, fake.url()))
        .collect();
    let msgs = |stream: bool| json!({"model": "m", "max_tokens": 64, "stream": stream, "messages": [{"role": "user", "content": "same again"}]});
    let gemini = json!({"contents": [{"role": "user", "parts": [{"text": "same again"}]}]});
    let requests = [
        ("openai", "/v1/chat/completions", msgs(false)),
        ("openai", "/v1/chat/completions", msgs(true)),
        ("anthropic", "/v1/messages", msgs(false)),
        ("anthropic", "/v1/messages", msgs(true)),
        ("gemini", "/v1beta/models/g:generateContent", gemini.clone()),
        (
            "gemini",
            "/v1beta/models/g:streamGenerateContent?alt=sse",
            gemini.clone(),
        ),
        ("gemini", "/v1beta/models/g:streamGenerateContent", gemini),
        ("ollama", "/api/chat", msgs(false)),
        ("ollama", "/api/chat", msgs(true)),
    ];
    let (mut first, mut first_bodies) = (Vec::new(), Vec::new());
    for round in 0..2 {
        let rec = Serve::recording_from(dir.path(), &upstreams);
        let mut bodies = Vec::new();
        for (provider, path, body) in &requests {
            let url = format!("{}/{provider}{path}", rec.for_test("wire$quiet"));
            let r = http().post(&url).json(body).send().await.unwrap();
            assert_eq!(r.status(), 200, "{provider}{path}");
            bodies.push(r.bytes().await.unwrap());
        }
        let stopped = rec.stop();
        let files: Vec<Vec<u8>> = ["openai", "anthropic", "gemini", "ollama"]
            .iter()
            .map(|p| std::fs::read(dir.path().join(format!("c/wire--quiet/{p}.json"))).unwrap())
            .collect();
        if round == 0 {
            assert!(stopped.stderr.contains("9 recorded"), "{}", stopped.stderr);
            first = files;
            first_bodies = bodies;
        } else {
            assert!(
                stopped.stderr.contains(": 9 re-recorded unchanged\n"),
                "{}",
                stopped.stderr
            );
            assert_eq!(files, first, "no byte of any cassette changed");
            // Though the provider did answer each with new ids or timestamps.
            for ((request, a), b) in requests.iter().zip(&first_bodies).zip(&bodies) {
                assert_ne!(
                    a, b,
                    "{}{} answered the same bytes twice",
                    request.0, request.1
                );
            }
        }
    }
}
