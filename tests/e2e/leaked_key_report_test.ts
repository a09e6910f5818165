/**
 * Issue 32's leaked key report end to end: two servers started from the start
 * task on one store (a KV file, then a PostgreSQL database), the report sent
 * to one of them over HTTP, the other asked next. The report's effect is
 * waited for on the line the reporting server logs once its work is done,
 * which comes after the revocation returned, that is after every server
 * acknowledged it; nothing sleeps. Traffic goes to 127.0.0.1 only.
 */

import assert from "node:assert/strict";
import { generateApiKey, hashApiKey } from "../../lib/auth/api_key.ts";
import { LEAKED_PATH } from "../../lib/routes/leaked.ts";
import { openStore } from "../../lib/store/open.ts";
import type { AuditEntry } from "../../lib/store/types.ts";
import { request } from "../support/http.ts";
import { freshDatabase, NO_DATABASE } from "../support/postgres.ts";
import {
  keys,
  type ServerProcess,
  startServer,
  tempDir,
} from "../support/processes.ts";
import { type StoredKey, storeKey } from "../support/stored_keys.ts";
import { until } from "../support/wait.ts";

const CONNECTION = "/api/v1/integration/connection";
/** Every report counts toward the lock-out: room for all of a test's. */
const SERVER_ENV = { HOST: "127.0.0.1", LOCKOUT_MAX_FAILURES: "1000000" };
const REPORTER = "127.0.0.1";

const STORES = [
  { label: "KV", postgres: false },
  { label: "PostgreSQL", postgres: true },
] as const;

/** A store for one test: the servers' and the console's environment, and the keys made in it. */
async function installation(
  dir: string,
  postgres: boolean,
  names: string[],
): Promise<
  { env: Record<string, string>; made: StoredKey[] } & AsyncDisposable
> {
  const database = postgres ? await freshDatabase() : null;
  const env: Record<string, string> = database === null
    ? { DENO_KV_PATH: `${dir}/keys.db` }
    : { DATABASE_URL: database.url };
  // Made in this process before any server starts: the console would take
  // a process per key.
  const store = await openStore(
    database === null
      ? { kind: "kv", path: `${dir}/keys.db` }
      : { kind: "postgres", url: database.url },
  );
  const made: StoredKey[] = [];
  try {
    for (const name of names) made.push(await storeKey(store, name));
  } finally {
    await store.close();
  }
  return {
    env,
    made,
    [Symbol.asyncDispose]: async () => {
      await database?.[Symbol.asyncDispose]();
    },
  };
}

async function startServers(
  dir: string,
  env: Record<string, string>,
): Promise<ServerProcess[]> {
  return await Promise.all(
    [0, 1].map(() => startServer(dir, { ...SERVER_ENV, ...env })),
  );
}

async function report(server: ServerProcess, values: string[]) {
  // A connection of its own: the server closes one that carried a body.
  using client = Deno.createHttpClient({ poolMaxIdlePerHost: 0 });
  const response = await request(server.url + LEAKED_PATH, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(values),
    client,
  });
  return { status: response.status, body: await response.text() };
}

async function connect(server: ServerProcess, key: string): Promise<number> {
  const response = await request(server.url + CONNECTION, {
    headers: { "X-API-Key": key },
  });
  await response.body?.cancel();
  return response.status;
}

/** The server's `leak_report` lines, parsed, once there are `count`. */
async function reportLines(
  server: ServerProcess,
  count: number,
): Promise<Record<string, unknown>[]> {
  const lines = () =>
    server.output().split("\n").filter((line) =>
      line.includes('"msg":"leak_report"')
    ).map((line) => JSON.parse(line));
  await until(
    () => lines().length >= count,
    `${count} leak_report lines`,
    { everyMs: 20 },
  );
  return lines();
}

async function auditOf(
  dir: string,
  env: Record<string, string>,
): Promise<{ text: string; lines: AuditEntry[] }> {
  const result = await keys(dir, ["audit", "--json"], env);
  assert.equal(result.code, 0, result.stderr);
  return {
    text: result.stdout + result.stderr,
    lines: JSON.parse(result.stdout),
  };
}

/** Nothing of a key (whole, its body, its hash or the hash's start) in `text`. */
function assertNoSecret(text: string, values: string[], where: string): void {
  for (const value of values) {
    const hash = hashApiKey(value);
    for (const secret of [value, value.slice(4), hash, hash.slice(0, 16)]) {
      assert.ok(
        !text.includes(secret),
        `${where} holds a reported value or its hash`,
      );
    }
  }
}

for (const { label, postgres } of STORES) {
  Deno.test({
    name:
      `${label}: a valid key reported to one server gets 401 on the other from the next request on, audited as a report with no value or hash anywhere`,
    ignore: postgres && NO_DATABASE,
    async fn() {
      using dir = tempDir();
      await using store = await installation(dir.path, postgres, [
        "leaked",
        "other",
      ]);
      const [leaked, other] = store.made;
      const servers = await startServers(dir.path, store.env);
      const [a, b] = servers;
      try {
        for (const server of servers) {
          assert.equal(await connect(server, leaked.key), 200);
        }
        const noise = Array.from({ length: 20 }, () => generateApiKey().key);
        const answer = await report(a, [...noise, leaked.key, "not a key"]);
        assert.deepEqual(answer, {
          status: 202,
          body: '{"status":"accepted"}',
        });
        const [line] = await reportLines(a, 1);
        assert.deepEqual(line.exposed, [leaked.record.id]);
        assert.deepEqual(line.revoked, [leaked.record.id]);
        assert.equal(line.values, 22);
        assert.equal(line.client, REPORTER);
        // The revocation returned before that line: every server knows it.
        assert.equal(await connect(b, leaked.key), 401);
        assert.equal(await connect(a, leaked.key), 401);
        for (const server of servers) {
          assert.equal(await connect(server, other.key), 200);
        }
        const audit = await auditOf(dir.path, store.env);
        const reported = audit.lines.filter((entry) =>
          entry.actor === `report from ${REPORTER}`
        );
        assert.deepEqual(reported.map((e) => [e.action, e.keyId, e.detail]), [
          [
            "expose",
            leaked.record.id,
            `reported as leaked from ${REPORTER}; rotate it`,
          ],
          ["revoke", leaked.record.id, `reported as leaked from ${REPORTER}`],
        ]);
        const secrets = [leaked.key, ...noise];
        assertNoSecret(audit.text, secrets, "keys audit");
        for (const [i, server] of servers.entries()) {
          assertNoSecret(server.output(), secrets, `server ${i}'s log`);
        }
      } finally {
        await Promise.all(servers.map((server) => server.stop()));
      }
      for (const server of servers) {
        assert.doesNotMatch(server.output(), /"msg":"error"/);
      }
    },
  });

  Deno.test({
    name:
      `${label}: with LEAKED_KEY_ACTION=notify a reported key keeps working on both servers and the audit says it was exposed by a report`,
    ignore: postgres && NO_DATABASE,
    async fn() {
      using dir = tempDir();
      await using store = await installation(dir.path, postgres, ["leaked"]);
      const [leaked] = store.made;
      const servers = await startServers(dir.path, {
        ...store.env,
        LEAKED_KEY_ACTION: "notify",
      });
      const [a, b] = servers;
      try {
        assert.equal((await report(a, [leaked.key])).status, 202);
        const [line] = await reportLines(a, 1);
        assert.deepEqual(line.exposed, [leaked.record.id]);
        assert.deepEqual(line.revoked, []);
        for (const server of [b, a]) {
          assert.equal(await connect(server, leaked.key), 200);
        }
        const audit = await auditOf(dir.path, store.env);
        const changes = audit.lines.filter((entry) =>
          entry.keyId === leaked.record.id && entry.action !== "create"
        );
        assert.deepEqual(changes.map((e) => [e.action, e.actor]), [
          ["expose", `report from ${REPORTER}`],
        ]);
        assertNoSecret(audit.text, [leaked.key], "keys audit");
        for (const [i, server] of servers.entries()) {
          assertNoSecret(server.output(), [leaked.key], `server ${i}'s log`);
        }
      } finally {
        await Promise.all(servers.map((server) => server.stop()));
      }
    },
  });
}

const median = (values: number[]) => {
  const sorted = values.toSorted((x, y) => x - y);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1
    ? sorted[middle]
    : (sorted[middle - 1] + sorted[middle]) / 2;
};

Deno.test({
  name:
    "KV: a report of 100 random values and one of 99 random values and a valid key answer 202 in the same time, within noise",
  async fn() {
    const PAIRS = 20;
    /** Generous for a busy machine: a lookup or a revocation on the answer's path would cost several times the whole answer. */
    const RATIO = 1.5;
    using dir = tempDir();
    await using store = await installation(
      dir.path,
      false,
      Array.from({ length: PAIRS }, (_, i) => `leaked-${i}`),
    );
    const servers = await startServers(dir.path, store.env);
    const [a] = servers;
    const random = (count: number) =>
      Array.from({ length: count }, () => generateApiKey().key);
    const timed = async (values: string[]) => {
      const started = performance.now();
      const answer = await report(a, values);
      const elapsed = performance.now() - started;
      assert.deepEqual(answer, { status: 202, body: '{"status":"accepted"}' });
      return elapsed;
    };
    try {
      // Both kinds once first, so neither side pays for compiling alone.
      await timed(random(100));
      await timed([...random(99), generateApiKey().key]);
      const withoutKey: number[] = [];
      const withKey: number[] = [];
      for (const [i, leaked] of store.made.entries()) {
        const values = random(99);
        values.splice(i % 100, 0, leaked.key);
        // Interleaved, each kind first half the time.
        const plain = () =>
          timed(random(100)).then((ms) => withoutKey.push(ms));
        const keyed = () => timed(values).then((ms) => withKey.push(ms));
        if (i % 2 === 0) {
          await plain();
          await keyed();
        } else {
          await keyed();
          await plain();
        }
      }
      // Every key reported was revoked: the comparison is with real work.
      const lines = await reportLines(a, 2 + 2 * PAIRS);
      const revoked = lines.flatMap((line) => line.revoked as number[]);
      assert.deepEqual(
        revoked.toSorted((x, y) => x - y),
        store.made.map((k) => k.record.id),
      );
      const ratio = median(withKey) / median(withoutKey);
      console.log(
        `median 202: ${median(withoutKey).toFixed(2)} ms without a key, ${
          median(withKey).toFixed(2)
        } ms with one (ratio ${ratio.toFixed(2)}, ${PAIRS} pairs)`,
      );
      assert.ok(
        ratio < RATIO && ratio > 1 / RATIO,
        `medians differ by more than noise: ratio ${ratio.toFixed(2)}`,
      );
    } finally {
      await Promise.all(servers.map((server) => server.stop()));
    }
  },
});
