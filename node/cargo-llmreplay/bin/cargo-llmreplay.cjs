#!/usr/bin/env node
// The `cargo-llmreplay` command of the npm package: finds the prebuilt binary (the platform
// package npm installed as an optional dependency, or the file CARGO_LLMREPLAY_BINARY names),
// runs it with this command's arguments under this command's name, and ends as it ended.
"use strict";
const { spawnSync } = require("node:child_process");
const { PLATFORMS, executable } = require("../platforms.cjs");

function fail(message) {
  process.stderr.write(`cargo-llmreplay: ${message}\n`);
  process.exit(1);
}

function binary() {
  const override = process.env.CARGO_LLMREPLAY_BINARY;
  if (override) return override;
  const here = PLATFORMS.find((p) => p.os === process.platform && p.cpu === process.arch);
  if (!here) {
    fail(
      `no prebuilt binary for ${process.platform}-${process.arch}: install the CLI with ` +
        "`cargo install --locked cargo-llmreplay` and set CARGO_LLMREPLAY_BINARY to its path",
    );
  }
  try {
    return require.resolve(`${here.name}/bin/${executable(here.os)}`);
  } catch {
    return fail(
      `the package ${here.name}, which holds the binary for ${process.platform}-${process.arch}, ` +
        "is not installed. It is an optional dependency of cargo-llmreplay: install again without " +
        `--omit=optional (or --no-optional), or \`npm install --save-dev ${here.name}\`; ` +
        "or set CARGO_LLMREPLAY_BINARY to a cargo-llmreplay binary",
    );
  }
}

const program = binary();
// argv0: the program names itself, in every command it prints, as the user started it.
const ran = spawnSync(program, process.argv.slice(2), { stdio: "inherit", argv0: "cargo-llmreplay" });
if (ran.error) fail(`could not run ${program}: ${ran.error.message}`);
if (ran.signal) {
  // Ended by a signal: end by the same one, so that whoever started this sees it.
  process.kill(process.pid, ran.signal);
}
process.exit(ran.status ?? 1);
