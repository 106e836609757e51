// node:test entry (`node --test --import llmreplay-test-setup/node-test`): before each test,
// the file's process announces "<file> > <suite> > <test>" to the cargo-llmreplay daemon;
// after it, how it ended, so that `--record` leaves a passed test with exactly what it recorded.
// node --test runs each file in a process of its own and passes --import on to it. Requests
// to the daemon name the running test (identity.cjs) while it is the file's only one.
import path from "node:path";
import { afterEach, beforeEach } from "node:test";
import announce from "./announce.cjs";
import identity from "./identity.cjs";

// The test file as the command line named it, relative to where the run started.
function file() {
  const script = process.argv[1];
  return script ? path.relative(process.cwd(), script).split(path.sep).join("/") : "";
}

// "<file> > <suite> > <test>": node:test's full name (its suites and parent tests) under its file.
function fullName(t) {
  const name = t.fullName || t.name;
  const at = file();
  return at ? `${at} > ${name}` : name;
}

if (announce.root() !== null) {
  identity.install(globalThis);
  beforeEach(async (t) => {
    identity.started(fullName(t));
    await announce.begin(fullName(t));
  });
  afterEach(async (t) => {
    identity.finished(fullName(t));
    await announce.end(fullName(t), t.passed ? "passed" : "failed");
  });
}
