// jest setup file (`setupFilesAfterEnv: ["llmreplay-test-setup/jest"]`): before each test, the
// worker announces "<file> > <full test name>" to the cargo-llmreplay daemon, and each request
// to the daemon names its test (identity.cjs): with `workerThreads: true` the workers share a
// process. jest tells no hook how a test ended, so its outcome is not reported: under
// `--record` a jest test keeps its older recordings beside the new ones, as a failed test does.
// Before the file's tests, its whole suite is listed (from jest-circus's state), so that the
// run tells a deleted test's folder from one a filter left out.
"use strict";
const path = require("node:path");
const announce = require("./announce.cjs");
const identity = require("./identity.cjs");

function file() {
  const { testPath } = expect.getState();
  return testPath ? path.relative(process.cwd(), testPath) : "";
}

function fullName(name) {
  const at = file();
  return at ? `${at} > ${name}` : name;
}

// Every test under `block`, by jest's own full name (its describes' names and its own, as
// `currentTestName` says them); skipped and todo ones included.
function testsOf(block, names = [], into = []) {
  for (const child of block.children || []) {
    const here = [...names, child.name];
    if (child.type === "describeBlock") testsOf(child, here, into);
    else if (child.type === "test") into.push(fullName(here.join(" ")));
  }
  return into;
}

if (announce.root() !== null) {
  identity.reset();
  identity.install(globalThis);
  let current = null;
  // jest-circus's event handlers (on the environment's global, where its own live) see the
  // collected suite as the run starts, even in a file whose tests are all skipped, where no
  // hook runs. Another runner (jest-jasmine) lists nothing.
  const handlers = globalThis[Symbol.for("EVENT_HANDLERS")];
  if (Array.isArray(handlers)) {
    handlers.push(async (event, state) => {
      if (event.name !== "run_start" || !state || !state.rootDescribeBlock) return;
      // `-t` and `.only` leave tests of the file out; `.skip` is the suite as written.
      const filtered = Boolean(state.testNamePattern) || Boolean(state.hasFocusedTests);
      await announce.listed("jest", testsOf(state.rootDescribeBlock), filtered);
    });
  }
  beforeEach(async () => {
    current = fullName(expect.getState().currentTestName);
    identity.started(current);
    await announce.begin(current);
  });
  afterEach(async () => {
    if (current === null) return;
    identity.finished(current);
    await announce.end(current, "skipped");
    current = null;
  });
}
