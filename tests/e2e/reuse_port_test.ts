/**
 * Every core: several server processes on one port (REUSE_PORT=1), each
 * with its own lease, the kernel spreading connections over them. A
 * revocation must hold across all of them under load, and without the
 * setting a second server must still refuse to start on a taken port.
 */

import assert from "node:assert/strict";
import {
  createKey,
  freePort,
  keys,
  refusedStart,
  startServer,
  tempDir,
} from "../support/processes.ts";
import { until } from "../support/wait.ts";

const ROUTE = "/api/v1/integration/connection";

/** The process that answered: the random prefix of its request ids. */
function answeredBy(response: Response): string {
  return (response.headers.get("x-request-id") ?? "").split("-")[0];
}

Deno.test("two servers sharing one port with REUSE_PORT=1 both answer, and a key revoked under load is refused by both for every request sent after the revoke returned", async () => {
  using dir = tempDir();
  const port = String(freePort());
  const env = {
    HOST: "127.0.0.1",
    PORT: port,
    REUSE_PORT: "1",
    LOCKOUT_MAX_FAILURES: "1000000000",
  };
  await using first = await startServer(dir.path, env);
  await using second = await startServer(dir.path, env);
  assert.equal(first.port, second.port);
  const target = await createKey(dir.path, "target");
  const bystander = await createKey(dir.path, "bystander");

  interface Sample {
    key: "target" | "bystander";
    sentAt: number;
    status: number;
    by: string;
  }
  const samples: Sample[] = [];
  let running = true;
  const client = async (which: "target" | "bystander") => {
    const key = which === "target" ? target.key : bystander.key;
    // A client of its own, so its connections land where the kernel puts them.
    using http = Deno.createHttpClient({});
    while (running) {
      const sentAt = performance.now();
      const response = await fetch(`${first.url}${ROUTE}`, {
        client: http,
        headers: { "X-API-Key": key, "Connection": "close" },
      });
      await response.body?.cancel();
      samples.push({
        key: which,
        sentAt,
        status: response.status,
        by: answeredBy(response),
      });
    }
  };
  const clients = Array.from(
    { length: 16 },
    (_, i) => client(i % 8 === 0 ? "bystander" : "target"),
  );

  /** Whether both processes have answered the key in a request sent in `when`. */
  const bothAnswered = (when: (sentAt: number) => boolean) =>
    new Set(
      samples.filter((s) => s.key === "target" && when(s.sentAt)).map((s) =>
        s.by
      ),
    ).size === 2;
  let revokedAt = Infinity;
  try {
    // Load on both, waited for, not slept for.
    await until(
      () => bothAnswered(() => true),
      "both processes answering the key before the revoke",
    );
    const revoke = await keys(dir.path, ["revoke", String(target.id)]);
    revokedAt = performance.now(); // at or after the moment it returned
    assert.equal(revoke.code, 0, revoke.stderr);
    await until(
      () => bothAnswered((sentAt) => sentAt > revokedAt),
      "both processes answering the key after the revoke",
    );
  } finally {
    running = false;
    await Promise.all(clients);
  }

  const target200 = samples.filter((s) =>
    s.key === "target" && s.sentAt < revokedAt && s.status === 200
  );
  assert.equal(
    new Set(target200.map((s) => s.by)).size,
    2,
    "both processes answered the key before the revoke",
  );
  const after = samples.filter((s) =>
    s.key === "target" && s.sentAt > revokedAt
  );
  assert.equal(
    new Set(after.map((s) => s.by)).size,
    2,
    "both processes answered after the revoke",
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
    "the other key kept working on both",
  );
});

Deno.test("without REUSE_PORT a second server on a taken port stops with the address in use", async () => {
  using dir = tempDir();
  const port = String(freePort());
  await using _first = await startServer(dir.path, {
    HOST: "127.0.0.1",
    PORT: port,
  });
  const failed = await refusedStart(dir.path, {
    HOST: "127.0.0.1",
    PORT: port,
  });
  assert.equal(failed.code, 1, failed.output);
  assert.match(failed.output, /The address is already in use/);
});
