// Calls to a host that is not the daemon, made from inside a test: neither fetch nor node:http
// may tell it the test's id, whatever the environment says of proxies.
import { test, expect } from "vitest";
import http from "node:http";

const elsewhere = process.env.ELSEWHERE_URL;

test("calls elsewhere", async () => {
  const fetched = await fetch(`${elsewhere}/fetched`);
  expect(fetched.status).toBe(200);
  await fetched.text();
  const status = await new Promise((resolve, reject) => {
    http
      .get(`${elsewhere}/requested`, { agent: new http.Agent() }, (res) => {
        res.resume();
        res.on("end", () => resolve(res.statusCode));
      })
      .on("error", reject);
  });
  expect(status).toBe(200);
  const global = await new Promise((resolve, reject) => {
    http
      .get(`${elsewhere}/global`, (res) => {
        res.resume();
        res.on("end", () => resolve(res.statusCode));
      })
      .on("error", reject);
  });
  expect(global).toBe(200);
});
