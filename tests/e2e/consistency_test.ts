/**
 * Strong consistency under load: the cache of lib/auth.ts must never let a
 * key through after its revocation has returned, however busy the server.
 */

import assert from "node:assert/strict";
import { createKey, keys, startServer, tempDir } from "../support/processes.ts";
import { until } from "../support/wait.ts";

const ROUTE = "/api/v1/integration/connection";

Deno.test("a key revoked by the console while 32 clients hammer it is refused by every request sent after the revoke returned", async () => {
  using dir = tempDir();
  await using server = await startServer(dir.path, {
    LOCKOUT_MAX_FAILURES: "1000000000",
  });
  const target = await createKey(dir.path, "target");
  const bystander = await createKey(dir.path, "bystander");

  interface Sample {
    key: "target" | "bystander";
    sentAt: number;
    status: number;
  }
  const samples: Sample[] = [];
  let running = true;
  const client = async (which: "target" | "bystander") => {
    const key = which === "target" ? target.key : bystander.key;
    while (running) {
      const sentAt = performance.now();
      const response = await fetch(`${server.url}${ROUTE}`, {
        headers: { "X-API-Key": key },
      });
      await response.body?.cancel();
      samples.push({ key: which, sentAt, status: response.status });
    }
  };
  const clients = Array.from(
    { length: 32 },
    (_, i) => client(i % 8 === 0 ? "bystander" : "target"),
  );

  let revokedAt = Infinity;
  try {
    // Load, and a warm cache: waited for, not slept for.
    await until(
      () => samples.filter((s) => s.status === 200).length >= 100,
      "100 answers before the revoke",
    );
    const revoke = await keys(dir.path, ["revoke", String(target.id)]);
    revokedAt = performance.now(); // at or after the moment it returned
    assert.equal(revoke.code, 0, revoke.stderr);
    await until(
      () =>
        samples.filter((s) => s.key === "target" && s.sentAt > revokedAt)
          .length > 50,
      "50 requests for the key after the revoke",
    );
  } finally {
    running = false;
    await Promise.all(clients);
  }

  const before = samples.filter((s) =>
    s.key === "target" && s.sentAt < revokedAt
  );
  const after = samples.filter((s) =>
    s.key === "target" && s.sentAt > revokedAt
  );
  assert.ok(
    before.some((s) => s.status === 200),
    "the key worked under load before",
  );
  assert.ok(
    after.length > 50,
    `only ${after.length} requests after the revoke`,
  );
  const accepted = after.filter((s) => s.status !== 401);
  assert.equal(
    accepted.length,
    0,
    `${accepted.length} of ${after.length} requests after the revoke were not refused`,
  );
  const others = samples.filter((s) => s.key === "bystander");
  assert.ok(
    others.length > 0 && others.every((s) => s.status === 200),
    "the other key kept working",
  );
});
