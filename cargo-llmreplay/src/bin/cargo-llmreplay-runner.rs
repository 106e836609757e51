//! The nextest target runner as a binary of its own: it links `runner-plugin` and the standard
//! library alone, so it starts in a fraction of the time of `cargo-llmreplay` (which carries the
//! daemon, TLS and libgit2). `cargo llmreplay test` uses it when it is installed beside itself.

fn main() {
    let error = runner_plugin::run(std::env::args_os().skip(1).collect());
    eprintln!("cargo-llmreplay-runner: {error}");
    std::process::exit(runner_plugin::RUNNER_FAILED.into());
}
