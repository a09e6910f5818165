/**
 * The service as its users run it: the server and the console as separate
 * processes, started from the deno.json tasks, sharing one store file.
 */

import assert from "node:assert/strict";
import {
  createKey,
  keys,
  readTree,
  startServer,
  tempDir,
} from "../support/processes.ts";
import { check } from "../support/http.ts";

/**
 * The audit log's changes to keys: proof that a command changed nothing.
 * The server's notes of where keys were used from (`network`) are left
 * out: it writes them in the background, whenever its flush comes round,
 * which on a busy machine may be after either count.
 */
async function changes(cwd: string): Promise<number> {
  const result = await keys(cwd, ["audit", "--json"]);
  assert.equal(result.code, 0, result.stderr);
  const lines: { action: string }[] = JSON.parse(result.stdout);
  return lines.filter((line) => line.action !== "network").length;
}

/**
 * The one end-to-end proof of revocation from the outside; the model test
 * (tests/contract/revocation_model_test.ts) covers every sequence of
 * changes, and tests/e2e/lease_consistency_test.ts several servers under load.
 */
Deno.test("a key revoked by the console is refused by the very next request with an empty 401, revoking it again changes nothing, a second key still gets 200, and a restart keeps both so", async () => {
  using dir = tempDir();
  const first = await createKey(dir.path, "berlin-erp", "ops@example.com");
  const second = await createKey(dir.path, "hamburg-erp", "it@example.com");
  {
    await using server = await startServer(dir.path);
    const ok = await check(server.url, first.key);
    assert.equal(ok.status, 200);
    assert.ok(ok.headers.get("date"), "Date header");
    assert.equal(ok.headers.get("content-type"), "application/json");
    assert.equal(ok.headers.get("cache-control"), "no-store");
    assert.deepEqual(
      { ...JSON.parse(ok.body), serverUtc: undefined },
      {
        connected: true,
        authenticatedByApiKey: true,
        apiKeyId: first.id,
        email: "ops@example.com",
        serverUtc: undefined,
      },
    );

    const revoke = (reason: string) =>
      keys(dir.path, ["revoke", String(first.id), "--reason", reason]);
    const revoked = await revoke("laptop stolen");
    assert.equal(revoked.code, 0, revoked.stderr);
    const refused = await check(server.url, first.key);
    assert.equal(refused.status, 401);
    assert.ok(refused.headers.get("date"), "Date header on 401");
    assert.equal(refused.body, "");
    const still = await check(server.url, second.key);
    assert.equal(still.status, 200);
    assert.equal(JSON.parse(still.body).apiKeyId, second.id);

    // A second revoke: said so to the administrator, nothing written.
    const before = await changes(dir.path);
    const again = await revoke("again");
    assert.equal(again.code, 0, again.stderr);
    assert.match(again.stderr, /already revoked/);
    assert.equal(await changes(dir.path), before);
    assert.equal((await check(server.url, first.key)).status, 401);
    assert.equal(await server.stop(), 0);
  }
  {
    await using server = await startServer(dir.path);
    assert.equal((await check(server.url, first.key)).status, 401);
    assert.equal((await check(server.url, second.key)).status, 200);
  }
});

Deno.test("20 console processes creating keys at once get 20 distinct ids and 20 working keys", async () => {
  using dir = tempDir();
  await using server = await startServer(dir.path);
  const made = await Promise.all(
    Array.from({ length: 20 }, (_, i) => createKey(dir.path, `site-${i}`)),
  );
  const ids = made.map((k) => k.id).sort((a, b) => a - b);
  assert.deepEqual(ids, Array.from({ length: 20 }, (_, i) => i + 1));
  for (const { id, key } of made) {
    const answer = await check(server.url, key);
    assert.equal(answer.status, 200);
    assert.equal(JSON.parse(answer.body).apiKeyId, id);
  }
});

Deno.test("no generated key appears in the store files, the server's output or the console's non-JSON output", async () => {
  using dir = tempDir();
  await using server = await startServer(dir.path);
  const generated: string[] = [];
  let consoleOutput = "";
  const run = async (args: string[]) => {
    const result = await keys(dir.path, args);
    assert.equal(result.code, 0, result.stderr);
    consoleOutput += result.stderr;
    return result;
  };
  // Plain create and rotate print the key alone on stdout, once: that is the one place it may be.
  for (const name of ["alpha", "beta", "gamma"]) {
    const result = await run([
      "create",
      "--name",
      name,
      "--email",
      `${name}@example.com`,
    ]);
    const key = result.stdout.trim();
    assert.match(key, /^isk_[0-9A-Za-z]{36}$/);
    assert.equal(result.stdout, key + "\n");
    generated.push(key);
  }
  const rotated = await run(["rotate", "beta"]);
  generated.push(rotated.stdout.trim());
  generated.push((await createKey(dir.path, "delta")).key);
  for (const key of generated) await check(server.url, key);
  await check(server.url, generated[0].slice(0, 39) + "x");
  await run(["revoke", "alpha", "--reason", "test"]);
  for (const key of generated) await check(server.url, key);
  for (
    const args of [
      ["list"],
      ["list", "--all"],
      ["show", "gamma"],
      ["show", "1"],
      ["audit"],
      ["revoke", "1"],
    ]
  ) {
    consoleOutput += (await run(args)).stdout;
  }
  assert.equal(await server.stop(), 0);
  const store = await readTree(`${dir.path}/data`);
  assert.ok(store.length > 0, "the store file was read");
  for (const key of generated) {
    const body = key.slice(4, 34);
    assert.ok(!store.includes(body), "a key is in the store files");
    assert.ok(!server.output().includes(body), "a key is in the server output");
    assert.ok(!consoleOutput.includes(body), "a key is in the console output");
  }
});
