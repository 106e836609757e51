// One call through a real Node client, configured by the environment alone (as the runner or
// `serve --env` sets it): prints the answer's text as JSON. `node clients.mjs <client> <prompt>`.
import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";
import { generateText } from "ai";
import { createOpenAI } from "@ai-sdk/openai";
import { createAnthropic } from "@ai-sdk/anthropic";

const [client, prompt] = process.argv.slice(2);

async function ask() {
  switch (client) {
    case "openai": {
      const r = await new OpenAI().chat.completions.create({
        model: "gpt-4o-mini",
        messages: [{ role: "user", content: prompt }],
      });
      return r.choices[0].message.content;
    }
    case "anthropic": {
      const r = await new Anthropic().messages.create({
        model: "claude-x",
        max_tokens: 50,
        messages: [{ role: "user", content: prompt }],
      });
      return r.content[0].text;
    }
    // Vercel's AI SDK: its providers read OPENAI_BASE_URL and ANTHROPIC_BASE_URL themselves.
    case "vercel-openai": {
      const { text } = await generateText({ model: createOpenAI().chat("gpt-4o-mini"), prompt });
      return text;
    }
    case "vercel-anthropic": {
      const { text } = await generateText({ model: createAnthropic()("claude-x"), prompt, maxOutputTokens: 50 });
      return text;
    }
    default:
      throw new Error(`unknown client ${client}`);
  }
}

try {
  console.log(JSON.stringify({ text: await ask() }));
} catch (e) {
  console.error(String(e?.stack ?? e));
  process.exit(1);
}
