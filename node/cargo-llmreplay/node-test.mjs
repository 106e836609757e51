// `node --test --import cargo-llmreplay/node-test`: the node:test entry of llmreplay-test-setup.
import "llmreplay-test-setup/node-test";
