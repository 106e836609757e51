// Names the running test in an `X-Test-Id` header on every request that reaches the
// cargo-llmreplay daemon, from the test's own context: the daemon files a request by its header
// first, so tests that run at once in one process (worker threads, concurrent tests) keep their
// calls apart. Node's fetch and node:http/https are patched once per realm (a worker thread has
// its own); requests to any other host are left exactly as they were.
"use strict";
const http = require("node:http");
const https = require("node:https");
const { AsyncLocalStorage } = require("node:async_hooks");
const announce = require("./announce.cjs");

// The realm's state lives on its node:http module, which every copy of this file loaded in the
// realm shares (vitest evaluates setup files once per test file, jest in each file's context).
const STATE = Symbol.for("llmreplay-test-setup.identity");
const PATCHED = Symbol.for("llmreplay-test-setup.patched");
// The patched http.request's original, which the announcements use: they name their test.
const ORIGINAL = Symbol.for("llmreplay-test-setup.original");

function state() {
  if (!http[STATE]) {
    http[STATE] = { context: new AsyncLocalStorage(), running: new Map() };
  }
  return http[STATE];
}

/** `test` runs in this realm from now on (an attempt of it: retries count twice). */
function started(test) {
  const { running } = state();
  running.set(test, (running.get(test) || 0) + 1);
}

/** An attempt of `test` ended. */
function finished(test) {
  const { running } = state();
  const n = (running.get(test) || 0) - 1;
  if (n > 0) running.set(test, n);
  else running.delete(test);
}

/** A test file starts: a test of the last one that never said it ended runs no more. */
function reset() {
  state().running.clear();
}

/** Runs `fn` as `test`'s: requests of its async context name `test`, whatever else runs. */
function within(test, fn) {
  return state().context.run(test, fn);
}

/** From here on, this async context is `test`'s (for runners with no hook that wraps a test). */
function enter(test) {
  state().context.enterWith(test);
}

/** The test this request is made for: its async context's, else the realm's only running one. */
function current() {
  const { context, running } = state();
  const own = context.getStore();
  if (own !== undefined) return own;
  // With several tests in flight and none in this context, naming one would be a guess.
  return running.size === 1 ? running.keys().next().value : undefined;
}

const LOOPBACK = new Set(["localhost", "127.0.0.1", "::1"]);
const DEFAULT_PORTS = { "http:": "80", "https:": "443" };

// host and port, loopback names as one: the daemon listens on loopback.
function endpoint(host, port, protocol) {
  let name = String(host || "localhost").toLowerCase();
  if (name.startsWith("[") && name.endsWith("]")) name = name.slice(1, -1);
  if (LOOPBACK.has(name)) name = "loopback";
  return `${name}:${port ? String(port) : DEFAULT_PORTS[protocol] || ""}`;
}

function urlEndpoint(url) {
  return endpoint(url.hostname, url.port, url.protocol);
}

let daemonAt;
function daemon() {
  if (daemonAt === undefined) {
    const at = announce.root();
    try {
      daemonAt = at === null ? null : urlEndpoint(new URL(at));
    } catch {
      daemonAt = null;
    }
  }
  return daemonAt;
}

function env(name) {
  return process.env[name] || process.env[name.toLowerCase()] || "";
}

// NO_PROXY as curl and undici read it: `*`, hosts, `.suffix`/`*.suffix`, optional `:port`.
function bypassed(url) {
  const list = env("NO_PROXY").split(/[\s,]+/).filter(Boolean);
  const host = url.hostname.replace(/^\[|\]$/g, "").toLowerCase();
  const port = url.port || DEFAULT_PORTS[url.protocol];
  return list.some((entry) => {
    if (entry === "*") return true;
    let [name, only] = entry.toLowerCase().split(/:(?=\d+$)/);
    if (only && only !== port) return false;
    name = name.replace(/^\*?\./, "");
    return host === name || host.endsWith(`.${name}`);
  });
}

// The proxy the environment names for `url`, when it is the daemon and `url` is not exempt.
function proxiedToDaemon(url) {
  const proxy = env(url.protocol === "https:" ? "HTTPS_PROXY" : "HTTP_PROXY");
  if (!proxy || bypassed(url)) return false;
  try {
    return urlEndpoint(new URL(proxy)) === daemon();
  } catch {
    return false;
  }
}

// Node's own clients read the proxy variables only when told to, and only from the versions
// that know NODE_USE_ENV_PROXY (fetch and http alike from 22.21 and 24.5): an older Node
// ignores it and sends the request straight to its host, which must never see a test's id.
function nodeUsesEnvProxy() {
  if (process.env.NODE_USE_ENV_PROXY !== "1") return false;
  const [major, minor] = process.versions.node.split(".").map(Number);
  return major > 24 || (major === 24 && minor >= 5) || (major === 22 && minor >= 21);
}

function headerValue(test) {
  return encodeURIComponent(test);
}

// fetch: the daemon's base URL, or a proxy dispatcher (undici's EnvHttpProxyAgent, or Node
// told to use the environment's proxy) whose proxy is the daemon.
function fetchReachesDaemon(url, dispatcher, itsOwn) {
  if (urlEndpoint(url) === daemon()) return true;
  // The environment's proxy applies to fetch's own dispatcher only, not to one the call gives.
  const proxyAgent =
    (dispatcher && dispatcher.constructor && dispatcher.constructor.name === "EnvHttpProxyAgent") ||
    (itsOwn && nodeUsesEnvProxy());
  return Boolean(proxyAgent) && proxiedToDaemon(url);
}

function looksLikeRequest(input) {
  return input !== null && typeof input === "object" && typeof input.url === "string" && input.headers && typeof input.headers.get === "function";
}

function patchFetch(global) {
  const original = global.fetch;
  if (typeof original !== "function" || original[PATCHED]) return;
  const Headers = global.Headers;
  const fetch = function fetch(input, init) {
    const test = current();
    if (test === undefined || daemon() === null) return original.call(this, input, init);
    let url;
    try {
      url = new URL(looksLikeRequest(input) ? input.url : String(input));
    } catch {
      return original.call(this, input, init);
    }
    const ownDispatcher = !(init && init.dispatcher);
    const dispatcher = (init && init.dispatcher) || global[Symbol.for("undici.globalDispatcher.1")];
    if (!fetchReachesDaemon(url, dispatcher, ownDispatcher)) return original.call(this, input, init);
    // init's headers replace a Request's, as fetch itself reads them.
    const given = init && init.headers !== undefined ? init.headers : looksLikeRequest(input) ? input.headers : undefined;
    const headers = new Headers(given);
    if (headers.has("x-test-id")) return original.call(this, input, init);
    headers.set("x-test-id", headerValue(test));
    return original.call(this, input, { ...init, headers });
  };
  fetch[PATCHED] = true;
  global.fetch = fetch;
}

// What an http.request call asks for: its target's endpoint and protocol, and the agent.
function requestTarget(args, protocol) {
  let url;
  let options = {};
  if (typeof args[0] === "string" || args[0] instanceof URL) {
    url = new URL(String(args[0]));
    if (args[1] && typeof args[1] === "object") options = args[1];
  } else if (args[0] && typeof args[0] === "object") {
    options = args[0];
  }
  const agent = options.agent;
  const scheme = options.protocol || (url && url.protocol) || (agent && agent.protocol) || protocol;
  const host = options.hostname || (options.host && String(options.host).replace(/:\d+$/, "")) || (url && url.hostname) || "localhost";
  const port = options.port || (url && url.port) || options.defaultPort || (agent && agent.defaultPort) || "";
  // The URL the request is for: an absolute-form path (a plain-HTTP proxy request) names it.
  const path = options.path || (url && url.pathname) || "/";
  let target;
  try {
    target = /^https?:\/\//i.test(path) ? new URL(path) : new URL(`${scheme}//${host.includes(":") ? `[${host}]` : host}${port ? `:${port}` : ""}/`);
  } catch {
    target = null;
  }
  return { at: endpoint(host, port, scheme), target, agent };
}

// http(s).request: the daemon itself (its base URL, or the daemon as a plain-HTTP proxy), a
// tunnel through an agent whose `proxy` is the daemon (http(s)-proxy-agent), or the
// environment's proxy when Node is told to use it.
function requestReachesDaemon({ at, target, agent }) {
  if (at === daemon()) return true;
  if (agent && agent.proxy) {
    try {
      return urlEndpoint(new URL(String(agent.proxy.href || agent.proxy))) === daemon();
    } catch {
      return false;
    }
  }
  // The environment's proxy applies to the global agent only, not to an agent of the caller's.
  const global = agent === undefined || agent === null || agent === http.globalAgent || agent === https.globalAgent;
  return global && nodeUsesEnvProxy() && target !== null && proxiedToDaemon(target);
}

function patchModule(module, protocol) {
  if (module[PATCHED]) return;
  module[PATCHED] = true;
  const original = module.request;
  const request = function request(...args) {
    const req = original.apply(this, args);
    const test = current();
    if (test !== undefined && daemon() !== null && !req.headersSent && !req.hasHeader("x-test-id")) {
      if (requestReachesDaemon(requestTarget(args, protocol))) req.setHeader("x-test-id", headerValue(test));
    }
    return req;
  };
  request[ORIGINAL] = original;
  module.request = request;
  // As Node's own get: a request ended at once (its headers go out with the end).
  module.get = function get(...args) {
    const req = request.apply(this, args);
    req.end();
    return req;
  };
}

/** Patches this realm's fetch (on `global`, a test environment's own) and node:http/https. */
function install(global) {
  if (daemon() === null) return;
  patchModule(http, "http:");
  patchModule(https, "https:");
  // ES modules that imported `request` by name see the patched one too.
  require("node:module").syncBuiltinESMExports();
  patchFetch(global);
}

module.exports = { install, started, finished, reset, within, enter, current };
