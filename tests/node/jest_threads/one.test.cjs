const { ask } = require("./ask.cjs");

test("first", async () => {
  await ask("first", "First");
});
