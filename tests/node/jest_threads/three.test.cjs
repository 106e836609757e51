const { askOverHttp } = require("./ask.cjs");

test("third over node:http", async () => {
  await askOverHttp("third", "Third");
});
