import assert from "node:assert/strict";
import { ConfigError, readConfig } from "../lib/config.ts";

const env = (vars: Record<string, string>) => (name: string) => vars[name];

Deno.test("readConfig() defaults to 0.0.0.0:8000 and ./data/keys.db", () => {
  assert.deepEqual(readConfig(env({})), {
    port: 8000,
    hostname: "0.0.0.0",
    store: { kind: "kv", path: "./data/keys.db" },
  });
});

Deno.test("readConfig() takes PORT, HOST and DENO_KV_PATH", () => {
  const config = readConfig(
    env({ PORT: "9000", HOST: "127.0.0.1", DENO_KV_PATH: ":memory:" }),
  );
  assert.equal(config.port, 9000);
  assert.equal(config.hostname, "127.0.0.1");
  assert.deepEqual(config.store, { kind: "kv", path: ":memory:" });
  assert.equal(readConfig(env({ HOST: "[::1]" })).hostname, "::1");
});

Deno.test("readConfig() stops on a bad value with one line naming the variable", () => {
  const bad: [Record<string, string>, RegExp][] = [
    [
      { PORT: "eighty" },
      /^PORT must be a whole number from 0 to 65535, not "eighty"$/,
    ],
    [{ PORT: "70000" }, /^PORT must be a whole number/],
    [{ PORT: "-1" }, /^PORT must be a whole number/],
    [{ HOST: "http://x" }, /^HOST must be an IP address or host name/],
    [
      { DENO_KV_PATH: "data/" },
      /^DENO_KV_PATH must be a file path, ":memory:" or a URL/,
    ],
    [{ DENO_KV_PATH: "ftp://x/y" }, /^DENO_KV_PATH must be a file path/],
  ];
  for (const [vars, message] of bad) {
    assert.throws(() => readConfig(env(vars)), (e: Error) => {
      assert.ok(e instanceof ConfigError);
      assert.match(e.message, message);
      assert.ok(!e.message.includes("\n") && !e.message.endsWith("."));
      return true;
    });
  }
});
