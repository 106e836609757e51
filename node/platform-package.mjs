// Writes the npm package that holds one platform's prebuilt binaries:
//   node node/platform-package.mjs <target> <folder of the built binaries> <out folder>
// <target> is one of node/cargo-llmreplay/platforms.cjs; the package is named for its os and
// cpu, has the version of node/cargo-llmreplay, and npm installs it only where it runs. The
// release workflow and .ci/packages.py make the packages with it, then `npm pack` or publish.
import { chmodSync, copyFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(import.meta.url);
const { PLATFORMS, executable } = require("./cargo-llmreplay/platforms.cjs");
const main = require("./cargo-llmreplay/package.json");

const [target, built, out] = process.argv.slice(2);
const platform = PLATFORMS.find((p) => p.target === target);
if (!platform || !built || !out) {
  console.error(
    `usage: platform-package.mjs <target> <binaries folder> <out folder>; targets: ${PLATFORMS.map((p) => p.target).join(", ")}`,
  );
  process.exit(2);
}
mkdirSync(path.join(out, "bin"), { recursive: true });
for (const program of ["cargo-llmreplay", "cargo-llmreplay-runner"]) {
  const file = executable(platform.os, program);
  const from = path.join(built, file);
  if (!existsSync(from)) {
    console.error(`platform-package.mjs: no ${file} in ${built}`);
    process.exit(1);
  }
  copyFileSync(from, path.join(out, "bin", file));
  chmodSync(path.join(out, "bin", file), 0o755);
}
const here = path.dirname(new URL(import.meta.url).pathname);
for (const license of ["LICENSE-MIT", "LICENSE-APACHE"]) {
  copyFileSync(path.join(here, "cargo-llmreplay", license), path.join(out, license));
}
const pkg = {
  name: platform.name,
  version: main.version,
  description: `The cargo-llmreplay binary for ${platform.os}-${platform.cpu} (${platform.target}); installed by the cargo-llmreplay package`,
  license: main.license,
  repository: main.repository,
  os: [platform.os],
  cpu: [platform.cpu],
  files: ["bin"],
  preferUnplugged: true,
};
writeFileSync(path.join(out, "package.json"), `${JSON.stringify(pkg, null, 2)}\n`);
writeFileSync(
  path.join(out, "README.md"),
  `# ${platform.name}\n\nThe \`cargo-llmreplay\` binary for ${platform.os}-${platform.cpu}. Install \`cargo-llmreplay\`, not this: it picks the package for your platform.\n`,
);
console.log(path.resolve(out));
