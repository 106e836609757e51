import { test } from "vitest";
import { ask } from "./ask.js";

test("first", async () => {
  await ask("first", "First");
});
