// vitest setup file (`setupFiles: ["llmreplay-test-setup/vitest"]`): before each test, the
// worker announces "<file> > <describe> > <test>" to the cargo-llmreplay daemon; when it
// finishes, its outcome, so that `--record` leaves a passed test with exactly what it recorded.
// Each request to the daemon names its test (identity.cjs): worker threads and
// `describe.concurrent` tests share a process. Before the file's tests, its whole suite is
// listed, so that the run tells a deleted test's folder from one a filter left out.
import * as vitest from "vitest";
import announce from "./announce.cjs";
import identity from "./identity.cjs";

// "<file> > <describe> > <test>": the test and the suites around it, under its file.
function fullName(task) {
  const names = [];
  for (let t = task; t && t !== task.file; t = t.suite) {
    if (t.name) names.unshift(t.name);
  }
  const file = task.file && task.file.name;
  return file ? [file, ...names].join(" > ") : names.join(" > ");
}

// Every test of the suite, skipped and todo ones included: they are the suite's all the same.
function testsOf(suite, into = []) {
  for (const task of suite.tasks || []) {
    if (task.type === "suite") testsOf(task, into);
    else into.push(fullName(task));
  }
  return into;
}

// Whether vitest's selection left tests of this file out: `-t`, a line or test id, tags, or
// `.only` (vitest marks them all "skip", as it does `.skip`, so the filter is asked instead).
function filtered(file) {
  const worker = globalThis.__vitest_worker__;
  const config = (worker && worker.config) || {};
  const spec = ((worker && worker.ctx && worker.ctx.files) || []).find((f) => f && f.filepath === file.filepath) || {};
  const some = (list) => Array.isArray(list) && list.length > 0;
  return Boolean(
    config.testNamePattern ||
      spec.testNamePattern ||
      some(spec.testLocations) ||
      some(spec.testIds) ||
      some(spec.testNames) ||
      some(spec.testTagsFilter) ||
      some(config.tagsFilter) ||
      file.containsOnly,
  );
}

const LISTS = Symbol.for("llmreplay-test-setup.lists");

async function list(file) {
  await announce.listed("vitest", testsOf(file), filtered(file));
}

// Each file's suite, before its tests. The runner's onBeforeRunSuite sees every file, even one
// whose tests are all skipped, where no hook runs; it is patched once per worker, on the class
// every worker's runner is made from. Without that class (an older vitest), a beforeAll lists.
function listEachFile() {
  const runner = vitest.TestRunner && vitest.TestRunner.prototype;
  if (runner && typeof runner.onBeforeRunSuite === "function") {
    if (runner[LISTS]) return;
    runner[LISTS] = true;
    const original = runner.onBeforeRunSuite;
    runner.onBeforeRunSuite = async function (suite) {
      if (suite && suite.file === suite) await list(suite);
      return original.call(this, suite);
    };
    return;
  }
  // No parameters declared: vitest 4+ reads a hook's first one as a fixtures pattern, and
  // passes the file's suite second where older versions passed it first.
  vitest.beforeAll(async function () {
    const file = Array.from(arguments).find((a) => a && a.type === "suite" && Array.isArray(a.tasks));
    if (file) await list(file);
  });
}

const outcomes = { pass: "passed", fail: "failed", skip: "skipped", todo: "skipped" };

if (announce.root() !== null) {
  identity.reset();
  identity.install(globalThis);
  listEachFile();
  // aroundEach (vitest 4.1+) runs the test's hooks and body inside the callback: the test's
  // async context, which concurrent tests do not share.
  if (typeof vitest.aroundEach === "function") {
    vitest.aroundEach(async function (runTest) {
      return identity.within(fullName(arguments[1].task), runTest);
    });
  }
  vitest.beforeEach(async (ctx) => {
    const test = fullName(ctx.task);
    if (typeof vitest.aroundEach !== "function") identity.enter(test);
    identity.started(test);
    await announce.begin(test);
    vitest.onTestFinished(async ({ task }) => {
      identity.finished(test);
      const state = task.result && task.result.state;
      await announce.end(test, outcomes[state] || "failed");
    });
  });
}
