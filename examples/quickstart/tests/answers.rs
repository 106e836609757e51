//! Tests that ask a real OpenAI model, replayed from the cassettes in tests/cassettes/.
//! `cargo llmreplay test` points OPENAI_BASE_URL at its daemon for each test.

use quickstart::ask_openai;

fn base() -> String {
    std::env::var("OPENAI_BASE_URL").expect("run me with: cargo llmreplay test")
}

#[test]
fn explains_cassettes() {
    let answer = ask_openai(&base(), "What is a cassette?");
    assert!(answer.starts_with("A cassette is"), "{answer}");
}

#[test]
fn says_hello() {
    let answer = ask_openai(&base(), "Say hello in three languages.");
    assert!(answer.contains("Bonjour"), "{answer}");
}

#[test]
fn needs_no_model() {
    assert_eq!(2 + 2, 4);
}
