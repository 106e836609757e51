// A jest suite with one module-level client of the official `openai` SDK, shared by its tests.
// Each test writes what it was answered to `$SAMPLE_OUT/<name>.txt`.
const fs = require("node:fs");
const path = require("node:path");
const OpenAI = require("openai");

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
    keep("hello", await ask("Hello"));
  });
  test("bye", async () => {
    keep("bye", await ask("Bye"));
  });
});
