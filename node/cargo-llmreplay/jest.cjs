// `setupFilesAfterEnv: ["cargo-llmreplay/jest"]`: the setup file of llmreplay-test-setup.
require("llmreplay-test-setup/jest");
