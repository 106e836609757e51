// The prebuilt binaries, one npm package per platform (esbuild's and biome's pattern): the
// release target each is built for, and the `os` and `cpu` npm installs it on. The shim picks
// the one for this machine; node/platform-package.mjs writes each package; the release workflow
// builds every target named here.
"use strict";

const PLATFORMS = [
  { target: "x86_64-unknown-linux-musl", os: "linux", cpu: "x64" },
  { target: "aarch64-unknown-linux-musl", os: "linux", cpu: "arm64" },
  { target: "x86_64-apple-darwin", os: "darwin", cpu: "x64" },
  { target: "aarch64-apple-darwin", os: "darwin", cpu: "arm64" },
  { target: "x86_64-pc-windows-msvc", os: "win32", cpu: "x64" },
].map((p) => ({ ...p, name: `cargo-llmreplay-${p.os}-${p.cpu}` }));

/** The binary's file name in a platform package (`bin/<this>`). */
function executable(os, program = "cargo-llmreplay") {
  return os === "win32" ? `${program}.exe` : program;
}

module.exports = { PLATFORMS, executable };
