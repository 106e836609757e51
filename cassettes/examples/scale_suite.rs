//! Writes a suite as `cargo llmreplay test --record` would leave it, for `bench/scale.sh`: a crate
//! of TESTS tests, each asking OpenAI's chat completions INTERACTIONS times, and each test's
//! sealed cassette of ~1 KB answers; `--modify N` rewrites the answers of the first N tests.
//!
//!     cargo run --release -p llmreplay-cassettes --example scale_suite -- DIR TESTS INTERACTIONS [--modify N]

use llmreplay_cassettes::{
    seal_of, Cassette, Interaction, Key, Normalizer, ProviderName, RecordedResponse, Slug, TestId,
    Timing,
};
use std::fmt::Write as _;
use std::path::Path;

/// The request body each test sends for its `k`-th call, byte for byte.
fn body(test: usize, k: usize) -> String {
    format!(
        r#"{{"model":"gpt-4o-mini","messages":[{{"role":"user","content":"test {test} question {k}"}}]}}"#
    )
}

/// A chat completion of about 1 KB.
fn answer(test: usize, k: usize, version: &str) -> Vec<u8> {
    let text = format!("Answer {version} to test {test} question {k}. ").repeat(16);
    serde_json::to_vec(&serde_json::json!({
        "id": format!("chatcmpl-{test}-{k}"),
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 200, "total_tokens": 212},
    }))
    .expect("JSON serialises")
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: scale_suite DIR TESTS INTERACTIONS [--modify N]";
    let dir = Path::new(args.get(1).expect(usage));
    let tests: usize = args.get(2).and_then(|n| n.parse().ok()).expect(usage);
    let calls: usize = args.get(3).and_then(|n| n.parse().ok()).expect(usage);
    let modify: Option<usize> = match args.get(4).map(String::as_str) {
        Some("--modify") => Some(args.get(5).and_then(|n| n.parse().ok()).expect(usage)),
        _ => None,
    };
    let normalizer = Normalizer::plain();
    let provider = ProviderName::new("openai").expect("a name");
    let (first, last, version) = match modify {
        Some(n) => (0, n, "v2"),
        None => (0, tests, "v1"),
    };
    for t in first..last {
        let test = TestId::new(format!("scale::suite$t{t:05}"));
        let mut cassette = Cassette::new(&test, &provider);
        for k in 0..calls {
            let request = normalizer.request(
                "POST",
                "/v1/chat/completions",
                None,
                Some("application/json"),
                body(t, k).as_bytes(),
                &[],
            );
            let response = RecordedResponse::with_body(
                200,
                [("content-type".to_string(), "application/json".to_string())].into(),
                &answer(t, k, version),
            );
            let timing = Timing {
                ttfb_ms: 5,
                total_ms: 5,
            };
            let mut interaction =
                Interaction::recorded(Key::of(&request), request, response, timing);
            interaction.seal = Some(seal_of(&interaction.response));
            cassette.interactions.push(interaction);
        }
        let folder = dir
            .join("tests/cassettes")
            .join(Slug::from_test_id(&test).as_str());
        std::fs::create_dir_all(&folder).expect("a folder");
        std::fs::write(folder.join("openai.json"), cassette.to_bytes()).expect("a cassette");
    }
    if modify.is_some() {
        return;
    }
    std::fs::write(
        dir.join("Cargo.toml"),
        "[package]\nname = \"scale\"\nversion = \"0.1.0\"\nedition = \"2021\"\npublish = false\n\n[workspace]\n",
    )
    .expect("a manifest");
    std::fs::create_dir_all(dir.join("src")).expect("a folder");
    std::fs::write(dir.join("src/lib.rs"), "").expect("a lib");
    std::fs::write(dir.join(".gitignore"), "/target\n").expect("an ignore file");
    // The client: blocking HTTP/1.1 on a plain socket, so that the suite builds in seconds.
    let mut suite = String::from(
        r##"use std::io::{Read, Write};

fn ask(test: usize, calls: usize) {
    let base = std::env::var("OPENAI_BASE_URL").expect("OPENAI_BASE_URL");
    let rest = base.strip_prefix("http://").expect("http");
    let (addr, prefix) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    for k in 0..calls {
        let body = format!(r#"{{"model":"gpt-4o-mini","messages":[{{"role":"user","content":"test {test} question {k}"}}]}}"#);
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        write!(s, "POST {prefix}/chat/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAuthorization: Bearer sk-test\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
}
"##,
    );
    for t in 0..tests {
        let _ = writeln!(suite, "#[test]\nfn t{t:05}() {{ ask({t}, {calls}) }}");
    }
    std::fs::create_dir_all(dir.join("tests")).expect("a folder");
    std::fs::write(dir.join("tests/suite.rs"), suite).expect("the suite");
}
