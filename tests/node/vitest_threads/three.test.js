import { test } from "vitest";
import { askOverHttp } from "./ask.js";

test("third over node:http", async () => {
  await askOverHttp("third", "Third");
});
