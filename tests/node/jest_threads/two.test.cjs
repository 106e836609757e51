const { ask } = require("./ask.cjs");

describe("second", () => {
  test("asks", async () => {
    await ask("second", process.env.SAMPLE_CHANGED ? "Second again" : "Second");
  });
});
