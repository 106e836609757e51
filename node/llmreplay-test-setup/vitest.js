// vitest setup file (`setupFiles: ["llmreplay-test-setup/vitest"]`): before each test, the
// worker announces "<file> > <describe> > <test>" to the cargo-llmreplay daemon; when it
// finishes, its outcome, so that `--record` leaves a passed test with exactly what it recorded.
import { beforeEach, onTestFinished } from "vitest";
import announce from "./announce.cjs";

// "<file> > <describe> > <test>": the test and the suites around it, under its file.
function fullName(task) {
  const names = [];
  for (let t = task; t && t !== task.file; t = t.suite) {
    if (t.name) names.unshift(t.name);
  }
  const file = task.file && task.file.name;
  return file ? [file, ...names].join(" > ") : names.join(" > ");
}

const outcomes = { pass: "passed", fail: "failed", skip: "skipped", todo: "skipped" };

if (announce.root() !== null) {
  beforeEach(async (ctx) => {
    const test = fullName(ctx.task);
    await announce.begin(test);
    onTestFinished(async ({ task }) => {
      const state = task.result && task.result.state;
      await announce.end(test, outcomes[state] || "failed");
    });
  });
}
