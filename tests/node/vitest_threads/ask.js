// What the tests of this suite share: one module-level `openai` client per worker (it calls with
// Node's fetch), and a call over plain node:http, as older SDKs and axios make theirs. Each test
// writes what it was answered to `$SAMPLE_OUT/<name>.txt`; `SAMPLE_CHANGED` changes the second
// test's prompt.
import fs from "node:fs";
import http from "node:http";
import path from "node:path";
import OpenAI from "openai";

const client = new OpenAI({ maxRetries: 0 });

function keep(name, text) {
  if (process.env.SAMPLE_OUT) fs.writeFileSync(path.join(process.env.SAMPLE_OUT, `${name}.txt`), text);
}

async function once(prompt) {
  const answer = await client.chat.completions.create({
    model: "gpt-4o-mini",
    messages: [{ role: "user", content: prompt }],
  });
  return answer.choices[0].message.content;
}

// Two calls: the second is made once every test has begun (the provider held the first until
// then), when only its header can say whose it is.
export async function ask(name, prompt) {
  const first = await once(prompt);
  keep(name, `${first}\n${await once(`${prompt}, again`)}`);
}

async function onceOverHttp(prompt) {
  const body = JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content: prompt }] });
  const url = `${process.env.OPENAI_BASE_URL.replace(/\/+$/, "")}/chat/completions`;
  const headers = {
    "content-type": "application/json",
    authorization: `Bearer ${process.env.OPENAI_API_KEY}`,
  };
  const text = await new Promise((resolve, reject) => {
    const req = http.request(url, { method: "POST", headers }, (res) => {
      let got = "";
      res.setEncoding("utf8");
      res.on("data", (c) => (got += c));
      res.on("end", () => (res.statusCode === 200 ? resolve(got) : reject(new Error(`${res.statusCode}: ${got}`))));
    });
    req.on("error", reject);
    req.end(body);
  });
  return JSON.parse(text).choices[0].message.content;
}

export async function askOverHttp(name, prompt) {
  const first = await onceOverHttp(prompt);
  keep(name, `${first}\n${await onceOverHttp(`${prompt}, again`)}`);
}
