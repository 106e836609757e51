// jest setup file (`setupFilesAfterEnv: ["llmreplay-test-setup/jest"]`): before each test, the
// worker announces "<file> > <full test name>" to the cargo-llmreplay daemon. jest tells no
// hook how a test ended, so its outcome is not reported: under `--record` a jest test keeps its
// older recordings beside the new ones, as a failed test does.
"use strict";
const path = require("node:path");
const announce = require("./announce.cjs");

if (announce.root() !== null) {
  let current = null;
  beforeEach(async () => {
    const state = expect.getState();
    const file = state.testPath ? path.relative(process.cwd(), state.testPath) : "";
    current = file ? `${file} > ${state.currentTestName}` : state.currentTestName;
    await announce.begin(current);
  });
  afterEach(async () => {
    if (current !== null) await announce.end(current, "skipped");
    current = null;
  });
}
