// A second file with the first one's describe and test names (as common as `it("works")`), and
// titles in Japanese and Cyrillic: each test keeps a folder of its own.
import fs from "node:fs";
import path from "node:path";
import OpenAI from "openai";
import { describe, test } from "vitest";

const client = new OpenAI({ maxRetries: 0 });

async function ask(name, prompt) {
  const answer = await client.chat.completions.create({
    model: "gpt-4o-mini",
    messages: [{ role: "user", content: prompt }],
  });
  const said = answer.choices[0].message.content;
  if (process.env.SAMPLE_OUT) fs.writeFileSync(path.join(process.env.SAMPLE_OUT, `${name}.txt`), said);
}

describe("chat", () => {
  test("hello", async () => {
    await ask("twin-hello", "Hello from the twin");
  });
});

test("挨拶する", async () => {
  await ask("japanese", "こんにちは");
});

test("Приветствие", async () => {
  await ask("cyrillic", "Привет");
});
