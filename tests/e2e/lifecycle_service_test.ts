/**
 * Key lifetimes and rotations with an overlap, end to end: the real server
 * and console as child processes, on Deno KV and, when PostgreSQL is there,
 * on two instances sharing one database.
 */

import assert from "node:assert/strict";
import {
  createKey,
  keys,
  rotateUntilFirstUse,
  rotateWithOverlap,
  runTask,
  startServer,
  tempDir,
} from "../support/processes.ts";
import { freshDatabase, NO_DATABASE } from "../support/postgres.ts";
import { until } from "../support/wait.ts";

const ROUTE = "/api/v1/integration/connection";
const ROOT = new URL("../../", import.meta.url).pathname;

async function call(
  base: string,
  key: string,
): Promise<{ status: number; body: string; headers: [string, string][] }> {
  const response = await fetch(base + ROUTE, { headers: { "X-API-Key": key } });
  const body = await response.text();
  // The request id and date differ from answer to answer by design.
  const headers = [...response.headers].filter(([name]) =>
    !["date", "x-request-id"].includes(name)
  );
  return { status: response.status, body, headers };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** What an attempt says when its steps meant for before a deadline ran past it. */
const TOO_SLOW = Symbol("too slow");

/**
 * Runs `attempt` with a lifetime of `seconds`, doubled while the attempt
 * finds that what had to happen before its deadline happened after it. A
 * deadline is in real time: a busy machine may take longer than a short
 * lifetime to start a console and a check, and then the test would prove
 * nothing (or fail). Each attempt checks the time itself, after the steps,
 * so whatever it asserts happened before the deadline surely did.
 */
async function withLifetime(
  seconds: number,
  attempt: (seconds: number) => Promise<void | typeof TOO_SLOW>,
): Promise<void> {
  for (let tries = 0; tries < 5; tries++, seconds *= 2) {
    if (await attempt(seconds) !== TOO_SLOW) return;
  }
  assert.fail(`the steps before the deadline outlasted ${seconds / 2} s`);
}

Deno.test("a key rotated with --overlap works until its deadline and is refused on the first request after it", async () => {
  await withLifetime(2, async (seconds) => {
    using dir = tempDir();
    const old = await createKey(dir.path, "berlin-erp");
    await using server = await startServer(dir.path);
    const rotated = await rotateWithOverlap(
      dir.path,
      "berlin-erp",
      `${seconds}s`,
    );
    const deadline = Date.parse(rotated.replaces.expiresAt);
    const show = await keys(dir.path, ["show", String(old.id)]);
    if (Date.now() >= deadline) return TOO_SLOW;
    assert.match(show.stdout, /^status +valid$/m);
    assert.match(
      show.stdout,
      new RegExp(
        `^retirement +revoked at .*, replaced by key ${rotated.id}$`,
        "m",
      ),
    );
    // Polled until the first refusal: the old key answers 200 before the
    // deadline and 401 from the first request after it; the new key always
    // 200. A 200 after the deadline fails, so the loop cannot outlast it.
    let refusedAt = 0;
    let acceptedBefore = 0;
    while (refusedAt === 0) {
      const before = Date.now();
      const answer = await call(server.url, old.key);
      const after = Date.now();
      if (answer.status === 401) {
        assert.ok(
          after >= deadline,
          "the old key was refused before its deadline",
        );
        refusedAt = after;
      } else {
        assert.equal(answer.status, 200);
        assert.ok(before < deadline, "the old key worked after its deadline");
        assert.equal(
          JSON.parse(answer.body).apiKeyExpiresAt,
          rotated.replaces.expiresAt,
        );
        acceptedBefore++;
      }
      assert.equal((await call(server.url, rotated.key)).status, 200);
      await sleep(25);
    }
    if (acceptedBefore === 0) return TOO_SLOW;
    assert.equal((await call(server.url, old.key)).status, 401);
    // The server writes the revocation down off the request path: waited
    // for until the audit shows it.
    let audit = "";
    await until(async () => {
      audit =
        (await keys(dir.path, ["audit", String(old.id), "--json"])).stdout;
      return audit.includes("overlap ended");
    }, "the server to write the overlap's end down");
    assert.match(audit, /rotation overlap ended: replaced by key 2/, audit);
    assert.match(audit, /the old key works until/);
    const list = await keys(dir.path, ["list", "--all", "--json"]);
    const oldRecord = JSON.parse(list.stdout).find((r: { id: number }) =>
      r.id === old.id
    );
    assert.equal(oldRecord.status, "revoked");
  });
});

Deno.test("with --until-first-use the old key is refused on the very next request after the new key's first success", async () => {
  using dir = tempDir();
  const old = await createKey(dir.path, "berlin-erp");
  await using server = await startServer(dir.path);
  assert.equal((await call(server.url, old.key)).status, 200);
  const fresh = await rotateUntilFirstUse(dir.path, "berlin-erp");
  assert.equal(fresh.retires, old.id);
  assert.match(
    (await keys(dir.path, ["show", String(old.id)])).stdout,
    /^retirement +revoked at .* or at key 2's first use, replaced by key 2$/m,
  );
  for (let i = 0; i < 3; i++) {
    assert.equal((await call(server.url, old.key)).status, 200);
  }
  assert.equal((await call(server.url, fresh.key)).status, 200);
  assert.equal((await call(server.url, old.key)).status, 401);
  assert.equal((await call(server.url, fresh.key)).status, 200);
  const show = await keys(dir.path, ["show", String(old.id), "--json"]);
  const record = JSON.parse(show.stdout);
  assert.equal(record.status, "revoked");
  assert.equal(record.revokedReason, "replaced by key 2, which was first used");
  // The last change is the server's revoke. The usage flush (every 5 s, off
  // the request path) writes each first use from a network as a "network"
  // line whenever it runs, before or after that revoke: not a change.
  const lines = JSON.parse(
    (await keys(dir.path, ["audit", String(old.id), "--json"])).stdout,
  ).filter((line: { action: string }) => line.action !== "network");
  assert.deepEqual(
    [lines.at(-1).action, lines.at(-1).actor, lines.at(-1).detail],
    ["revoke", "server", "replaced by key 2, which was first used"],
  );
});

Deno.test("a key created with --expires-in a few seconds is refused once they are over with a 401 identical to a revoked key's, and the check warns then goes critical", async () => {
  await withLifetime(3, async (seconds) => {
    using dir = tempDir();
    const revoked = await createKey(dir.path, "gone");
    assert.equal((await keys(dir.path, ["revoke", "gone", "--yes"])).code, 0);
    // Started before the key is made: its start is not part of the lifetime.
    await using server = await startServer(dir.path);
    const made = await keys(dir.path, [
      "create",
      "--name",
      "short",
      "--email",
      "ops@example.com",
      "--expires-in",
      `${seconds}s`,
      "--json",
    ]);
    assert.equal(made.code, 0, made.stderr);
    const short = JSON.parse(made.stdout);
    const expiresAt = Date.parse(short.expiresAt);
    const ok = await call(server.url, short.key);
    const env = {
      INTEGRATION_BASE_URL: server.url,
      INTEGRATION_API_KEY: short.key,
    };
    const before = await runTask("check", { cwd: ROOT, env });
    const list = await keys(dir.path, ["list"]);
    // Each of them ended before the deadline, so each saw the key valid.
    if (Date.now() >= expiresAt) return TOO_SLOW;
    assert.equal(ok.status, 200);
    assert.equal(JSON.parse(ok.body).apiKeyExpiresAt, short.expiresAt);
    assert.equal(before.code, 1, before.stdout);
    assert.match(before.stdout, /^CONNECTION WARNING - key \d+ .*expires at/);
    assert.equal(list.code, 0, list.stderr);
    assert.match(list.stderr, /Expiring within 7 days: 2/);
    await sleep(Math.max(0, expiresAt - Date.now()) + 50);
    const expired = await call(server.url, short.key);
    const gone = await call(server.url, revoked.key);
    assert.equal(expired.status, 401);
    assert.deepEqual(expired, gone);
    const after = await runTask("check", { cwd: ROOT, env });
    assert.equal(after.code, 2, after.stdout);
    assert.match(after.stdout, /^CONNECTION CRITICAL - key refused/);
    for (const text of [before.stdout, after.stdout, list.stdout]) {
      assert.ok(!text.includes(short.key.slice(4, 34)), "a key was printed");
    }
    const show = JSON.parse(
      (await keys(dir.path, ["show", String(short.id), "--json"])).stdout,
    );
    assert.deepEqual([show.status, show.revokedReason], ["revoked", "expired"]);
    const all = await keys(dir.path, ["list", "--all"]);
    assert.match(all.stdout, /short .* revoked .* expired/);
  });
});

Deno.test("KEY_MAX_LIFETIME refuses a longer key with exit 2 naming it, and is the lifetime of a key created without one", async () => {
  using dir = tempDir();
  const env = { KEY_MAX_LIFETIME: "30d" };
  const long = await keys(dir.path, [
    "create",
    "--name",
    "long",
    "--email",
    "ops@example.com",
    "--expires-in",
    "31d",
  ], env);
  assert.equal(long.code, 2);
  assert.match(long.stderr, /KEY_MAX_LIFETIME/);
  assert.equal(long.stdout, "");
  const plain = await createKey(dir.path, "plain", "ops@example.com", env);
  const record = JSON.parse(
    (await keys(dir.path, ["show", String(plain.id), "--json"], env)).stdout,
  );
  const lifetime = Date.parse(record.expiresAt) - Date.parse(record.createdAt);
  assert.ok(Math.abs(lifetime - 30 * 86_400_000) < 60_000, String(lifetime));
});

Deno.test({
  name:
    "with --until-first-use on PostgreSQL, instance B refuses the old key right after the new key's first success on instance A",
  ignore: NO_DATABASE,
  async fn() {
    using dir = tempDir();
    await using database = await freshDatabase();
    const env = { DATABASE_URL: database.url };
    const old = await createKey(dir.path, "berlin-erp", "ops@example.com", env);
    await using a = await startServer(dir.path, env);
    await using b = await startServer(dir.path, env);
    assert.equal((await call(b.url, old.key)).status, 200);
    const fresh = await rotateUntilFirstUse(dir.path, "berlin-erp", env);
    assert.equal((await call(b.url, old.key)).status, 200);
    assert.equal((await call(a.url, fresh.key)).status, 200);
    assert.equal((await call(b.url, old.key)).status, 401);
    assert.equal((await call(a.url, old.key)).status, 401);
    assert.equal((await call(b.url, fresh.key)).status, 200);
  },
});

Deno.test({
  name:
    "with --overlap on PostgreSQL, two instances answer the old key until its deadline and both refuse it from the first request after",
  ignore: NO_DATABASE,
  async fn() {
    await withLifetime(3, async (seconds) => {
      using dir = tempDir();
      await using database = await freshDatabase();
      const env = { DATABASE_URL: database.url };
      const old = await createKey(
        dir.path,
        "berlin-erp",
        "ops@example.com",
        env,
      );
      await using a = await startServer(dir.path, env);
      await using b = await startServer(dir.path, env);
      const rotated = await rotateWithOverlap(
        dir.path,
        "berlin-erp",
        `${seconds}s`,
        { env },
      );
      const deadline = Date.parse(rotated.replaces.expiresAt);
      const refused = new Set<string>();
      const acceptedBefore = new Set<string>();
      // An integrator polling both instances in turn, as behind a load
      // balancer, until both refuse: a 200 after the deadline fails, so
      // the loop cannot outlast it.
      while (refused.size < 2) {
        for (const server of [a, b]) {
          const before = Date.now();
          const answer = await call(server.url, old.key);
          const after = Date.now();
          if (answer.status === 401) {
            assert.ok(after >= deadline, "refused before its deadline");
            refused.add(server.url);
          } else {
            assert.equal(answer.status, 200);
            assert.ok(before < deadline, "answered 200 after its deadline");
            assert.ok(!refused.has(server.url), "200 again after a 401");
            acceptedBefore.add(server.url);
          }
          assert.equal((await call(server.url, rotated.key)).status, 200);
        }
        await sleep(20);
      }
      // The rotation's console exited past the deadline: nothing was proven
      // about the overlap itself.
      if (acceptedBefore.size < 2) return TOO_SLOW;
    });
  },
});
