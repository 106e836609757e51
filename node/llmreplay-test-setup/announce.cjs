// Tells the cargo-llmreplay daemon which test this process runs now, and how it ended: the
// daemon then files every request of this process (any client, any kept-alive connection)
// under that test. With no daemon in the environment (LLMREPLAY_BASE_URL) it does nothing.
"use strict";
const http = require("node:http");

function root() {
  const base = process.env.LLMREPLAY_BASE_URL;
  if (!base) return null;
  // A base URL of one test (.../t/<id>) has the daemon's root before it.
  return base.split("/t/")[0].replace(/\/+$/, "");
}

// The names of variables whose values are keys, as the daemon judges its own.
const SECRET_SUFFIXES = ["_TOKEN", "_KEY", "_SECRET", "_PASSWORD", "_CREDENTIALS"];

// This process's secret-looking variables as the test starts (a .env a setup file loaded
// included), for the daemon to replace wherever their values turn up: {"env": {...}}.
function secretEnv() {
  const env = {};
  for (const [name, value] of Object.entries(process.env)) {
    const upper = name.toUpperCase();
    if (value && value.trim().length >= 8 && SECRET_SUFFIXES.some((s) => upper.endsWith(s))) {
      env[name] = value;
    }
  }
  return Object.keys(env).length ? JSON.stringify({ env }) : "";
}

// node:http, never a proxy: the daemon is on loopback.
function post(route, params, body = "") {
  const at = root();
  if (at === null) return Promise.resolve(null);
  // Percent-encoded, spaces as %20: the daemon reads a `+` as itself.
  const query = Object.entries(params)
    .map(([k, v]) => `${k}=${encodeURIComponent(String(v))}`)
    .join("&");
  const url = new URL(`${at}/__llmreplay/${route}?${query}`);
  return new Promise((resolve) => {
    const headers = { "content-length": Buffer.byteLength(body) };
    // Not through identity.cjs's patch: the query names the test.
    const request = http.request[Symbol.for("llmreplay-test-setup.original")] || http.request;
    const req = request(url, { method: "POST", headers }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (c) => (body += c));
      res.on("end", () => {
        if (res.statusCode >= 400) {
          // The daemon says what is wrong and what to do: a refusal must not pass unseen.
          process.stderr.write(`llmreplay-test-setup: the daemon refused ${route} (${res.statusCode}): ${body.trim()}\n`);
          resolve({ refused: body.trim() });
          return;
        }
        try {
          resolve(JSON.parse(body));
        } catch {
          resolve(null);
        }
      });
    });
    req.on("error", (e) => {
      process.stderr.write(`llmreplay-test-setup: could not reach the daemon at ${at}: ${e.message}\n`);
      resolve(null);
    });
    req.end(body);
  });
}

/** This process runs `test` from now on; its secret-looking variables are the run's secrets. */
function begin(test) {
  return post("begin", { test, pid: process.pid }, secretEnv());
}

/** `test` ended: "passed", "failed" or "skipped". */
function end(test, outcome) {
  return post("end", { test, pid: process.pid, outcome });
}

/** The collected suite of `runner` (its tests' ids, as begin names them, skipped ones
 * included); `filtered` when the runner's own selection left some out. Throws the daemon's
 * message when it refuses the list. */
async function listed(runner, tests, filtered) {
  const body = tests.map((t) => `${t}\n`).join("");
  const answer = await post("listed", { runner, filtered: Boolean(filtered) }, body);
  // Refused (two tests that would share a folder): the file fails before any test runs.
  if (answer && answer.refused !== undefined) throw new Error(answer.refused);
}

module.exports = { begin, end, listed, root };
