/**
 * Where a key may be used from, and where it is used from, through the real
 * programs: the server behind a trusted proxy (X-Forwarded-For from
 * 127.0.0.1) and the console on the same store.
 */

import assert from "node:assert/strict";
import { generateApiKey } from "../../lib/auth/api_key.ts";
import { createKey, keys, startServer, tempDir } from "../support/processes.ts";
import { request } from "../support/http.ts";

const ROUTE = "/api/v1/integration/connection";
const BEHIND_PROXY = { TRUSTED_PROXIES: "127.0.0.1/32" };

function call(base: string, key: string, from: string): Promise<Response> {
  return request(`${base}${ROUTE}`, {
    headers: { "X-API-Key": key, "X-Forwarded-For": from },
  });
}

/**
 * Status, headers and body: what tells one answer from another. The date
 * and the request id differ on every answer, so only their presence counts.
 */
async function seen(response: Response): Promise<string> {
  const headers = [...response.headers].map(([name, value]) =>
    name === "date" || name === "x-request-id" ? [name, "…"] : [name, value]
  );
  return JSON.stringify([response.status, headers, await response.text()]);
}

async function shown(cwd: string, key: string) {
  const show = await keys(cwd, ["show", key, "--json"]);
  assert.equal(show.code, 0, show.stderr);
  return JSON.parse(show.stdout);
}

Deno.test("a key allowed from 127.0.0.2/32 works from there, gets the invalid key's very 401 from elsewhere, counts toward the lock-out and shows the refused use", async () => {
  using dir = tempDir();
  const made = await keys(dir.path, [
    "create",
    "--name",
    "pinned",
    "--email",
    "ops@example.com",
    "--allow-from",
    "127.0.0.2/32",
    "--json",
  ]);
  assert.equal(made.code, 0, made.stderr);
  const { key, id, allowFrom } = JSON.parse(made.stdout);
  assert.deepEqual(allowFrom, ["127.0.0.2/32"]);
  const server = await startServer(dir.path, {
    ...BEHIND_PROXY,
    LOCKOUT_MAX_FAILURES: "3",
  });
  const sending = Date.now();
  try {
    assert.equal((await call(server.url, key, "127.0.0.2")).status, 200);
    assert.equal((await call(server.url, key, "127.0.0.2")).status, 200);
    const refused = await seen(await call(server.url, key, "127.0.0.3"));
    const invalid = await seen(
      await call(server.url, generateApiKey().key, "127.0.0.4"),
    );
    assert.equal(refused, invalid);
    assert.match(refused, /^\[401,/);
    assert.equal((await call(server.url, key, "127.0.0.3")).status, 401);
    assert.equal((await call(server.url, key, "127.0.0.3")).status, 401);
    assert.equal(
      (await call(server.url, key, "127.0.0.3")).status,
      429,
      "the third refused use locked the address",
    );
    assert.equal((await call(server.url, key, "127.0.0.2")).status, 200);
  } finally {
    // Stopping writes what is pending.
    assert.equal(await server.stop(), 0);
  }
  const log = server.output();
  assert.equal(
    log.split("\n").filter((l) =>
      l.includes('"msg":"key_refused_from_address"') &&
      l.includes(`"apiKeyId":${id}`) && l.includes('"client":"127.0.0.3"')
    ).length,
    3,
  );
  assert.ok(!log.includes("isk_"), "no key in the log");
  const record = await shown(dir.path, "pinned");
  assert.equal(record.refusedUses.length, 3);
  assert.equal(record.refusedUses[0].address, "127.0.0.3");
  // Noted while the requests were sent, however long they took.
  const refusedAt = Date.parse(record.refusedUses[0].at);
  assert.ok(sending <= refusedAt && refusedAt <= Date.now());
  assert.deepEqual(
    record.networks.map((n: { network: string }) => n.network),
    ["127.0.0.0/24"],
  );
  const text = await keys(dir.path, ["show", "pinned"]);
  assert.match(text.stdout, /^allowFrom +127\.0\.0\.2\/32$/m);
  assert.match(text.stdout, /^refusedUses +127\.0\.0\.3 at \d{4}-/m);
  assert.ok(!text.stdout.includes(key), "show never prints the key");
});

Deno.test("the first use from a new network is audited and logged once; a second use from it adds nothing", async () => {
  using dir = tempDir();
  const { key, id } = await createKey(dir.path, "roaming");
  const server = await startServer(dir.path, BEHIND_PROXY);
  try {
    assert.equal((await call(server.url, key, "192.0.2.10")).status, 200);
    assert.equal((await call(server.url, key, "192.0.2.99")).status, 200);
    assert.equal((await call(server.url, key, "2001:db8:7:1::5")).status, 200);
  } finally {
    assert.equal(await server.stop(), 0);
  }
  const lines = server.output().split("\n").filter((l) =>
    l.includes('"msg":"key_new_network"')
  ).map((l) => JSON.parse(l));
  assert.deepEqual(
    lines.map((l) => [l.apiKeyId, l.network]).sort(),
    [[id, "192.0.2.0/24"], [id, "2001:db8:7::/48"]],
  );
  const audit = JSON.parse(
    (await keys(dir.path, ["audit", "roaming", "--json"])).stdout,
  );
  assert.deepEqual(
    audit.filter((e: { action: string }) => e.action === "network")
      .map((e: { detail: string }) => e.detail).sort(),
    ["first used from 192.0.2.0/24", "first used from 2001:db8:7::/48"],
  );
  // The same networks again, from a new server process: nothing new.
  const again = await startServer(dir.path, BEHIND_PROXY);
  try {
    assert.equal((await call(again.url, key, "192.0.2.11")).status, 200);
  } finally {
    assert.equal(await again.stop(), 0);
  }
  assert.ok(!again.output().includes("key_new_network"));
  const after = JSON.parse(
    (await keys(dir.path, ["audit", "roaming", "--json"])).stdout,
  );
  assert.equal(after.length, audit.length);
});

Deno.test("keys update --allow-from with IPv6 ranges holds from the next request on a running server, and any lifts it", async () => {
  using dir = tempDir();
  const { key } = await createKey(dir.path, "moving");
  await using server = await startServer(dir.path, BEHIND_PROXY);
  const status = async (from: string) =>
    (await call(server.url, key, from)).status;
  assert.equal(await status("2001:db9::1"), 200);
  const update = async (value: string) => {
    const result = await keys(dir.path, [
      "update",
      "moving",
      "--allow-from",
      value,
    ]);
    assert.equal(result.code, 0, result.stderr);
    return result;
  };
  await update("2001:db8::/32, 192.0.2.0/24");
  assert.equal(await status("2001:db8:ffff::1"), 200);
  assert.equal(await status("192.0.2.200"), 200);
  assert.equal(await status("2001:db9::1"), 401);
  await update("2001:db9::/32");
  assert.equal(await status("2001:db9::1"), 200);
  assert.equal(await status("2001:db8::1"), 401);
  const lifted = await update("any");
  assert.match(lifted.stderr, /now works from anywhere/);
  assert.equal(await status("2001:db8::1"), 200);
  const audit = JSON.parse(
    (await keys(dir.path, ["audit", "moving", "--json"])).stdout,
  );
  assert.deepEqual(
    audit.filter((e: { action: string }) => e.action === "allow_from")
      .map((e: { detail: string }) => e.detail),
    [
      "usable only from 2001:db8::/32, 192.0.2.0/24",
      "usable only from 2001:db9::/32",
      "usable from anywhere",
    ],
  );
});

Deno.test("keys update and create refuse a range that is not one with exit 2, naming the option and the fix, and change nothing", async () => {
  using dir = tempDir();
  await createKey(dir.path, "kept");
  for (
    const args of [
      ["update", "kept", "--allow-from", "10.0.0.1/8"],
      ["update", "kept", "--allow-from", "300.1.1.1"],
      ["update", "kept"],
      [
        "create",
        "--name",
        "n",
        "--email",
        "n@example.com",
        "--allow-from",
        "x",
      ],
    ]
  ) {
    const result = await keys(dir.path, args);
    assert.equal(result.code, 2, `${args.join(" ")}: ${result.stderr}`);
    assert.match(result.stderr, /--allow-from/);
    assert.equal(result.stdout, "");
  }
  const listed = JSON.parse((await keys(dir.path, ["list", "--json"])).stdout);
  assert.equal(listed.length, 1);
  assert.equal(listed[0].allowFrom, null);
});

Deno.test("keys create --allow-from 010.0.0.0/8 is refused for its leading zero, read as octal by some, suggesting 10.0.0.0/8", async () => {
  using dir = tempDir();
  const result = await keys(dir.path, [
    "create",
    "--name",
    "n",
    "--email",
    "n@example.com",
    "--allow-from",
    "010.0.0.0/8",
    "--json",
  ]);
  assert.equal(result.code, 2, result.stderr);
  const { error } = JSON.parse(result.stdout);
  assert.equal(error.code, "invalid_allowFrom");
  assert.match(
    error.message,
    /\(leading zeros are not allowed, as 010 may be read as octal: write 10\.0\.0\.0\/8\)/,
  );
});
