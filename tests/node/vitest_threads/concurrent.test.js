// Two tests of one file in flight at once, one calling with fetch (the `openai` SDK), the other
// over node:http: only each request's own header can tell whose call it is.
import { describe, test } from "vitest";
import { ask, askOverHttp } from "./ask.js";

describe.concurrent("at once", () => {
  test("fetch", async () => {
    await ask("fetch", "Over fetch");
  });
  test("http", async () => {
    await askOverHttp("http", "Over node:http");
  });
});
