// Two tests whose names differ only where a cassette folder's name cannot: they would share one.
import { test } from "vitest";
import { ask } from "./ask.js";

test("say hi", async () => {
  await ask("space", "Hi");
});

test("say-hi", async () => {
  await ask("dash", "Hi");
});
