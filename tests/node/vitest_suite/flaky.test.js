// A flaky vitest test with `retry`: its first attempt fails after its call, its retry passes.
// Each attempt makes the same call: the retry must be answered as the first attempt was.
import fs from "node:fs";
import path from "node:path";
import OpenAI from "openai";
import { expect, test } from "vitest";

const client = new OpenAI({ maxRetries: 0 });

test("flaky", { retry: 1 }, async () => {
  const answer = await client.chat.completions.create({
    model: "gpt-4o-mini",
    messages: [{ role: "user", content: "Retry me" }],
  });
  expect(answer.choices[0].message.content).toMatch(/^You said: Retry me/);
  const marker = path.join(process.env.SAMPLE_STATE, "failed-once");
  if (!fs.existsSync(marker)) {
    fs.writeFileSync(marker, "");
    throw new Error("the first attempt fails on purpose");
  }
});
