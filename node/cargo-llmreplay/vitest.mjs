// `setupFiles: ["cargo-llmreplay/vitest"]`: the setup file of llmreplay-test-setup.
import "llmreplay-test-setup/vitest";
