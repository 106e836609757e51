// A node:test suite as users write them: one module-level client of the official `openai` SDK,
// shared by every test. Each test writes what it was answered to `$SAMPLE_OUT/<name>.txt`, so
// the outer test can compare a recording run with a replay.
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { describe, test } from "node:test";
import OpenAI from "openai";

const client = new OpenAI({ maxRetries: 0 });

function keep(name, text) {
  if (process.env.SAMPLE_OUT) fs.writeFileSync(path.join(process.env.SAMPLE_OUT, `${name}.txt`), text);
}

async function ask(prompt) {
  const answer = await client.chat.completions.create({
    model: "gpt-4o-mini",
    messages: [{ role: "user", content: prompt }],
  });
  return answer.choices[0].message.content;
}

describe("chat", () => {
  test("hello", async () => {
    const said = await ask(process.env.SAMPLE_CHANGED ? "Hello again" : "Hello");
    keep("hello", said);
    assert.match(said, /^You said: /);
  });

  test("bye", async () => {
    keep("bye", await ask("Bye"));
  });
});

test("top level", async () => {
  keep("top", await ask("Top"));
});
