import { describe, test } from "vitest";
import { ask } from "./ask.js";

describe("second", () => {
  test("asks", async () => {
    await ask("second", process.env.SAMPLE_CHANGED ? "Second again" : "Second");
  });
});
