/**
 * Webhooks end to end, on Deno KV and on PostgreSQL, with two servers started
 * as an operator starts them: endpoints added with the console, events raised
 * by the console, by requests, by a leaked-key report and by time, and a
 * loopback receiver that verifies every delivery with the `standardwebhooks`
 * reference library. Each
 * event reaches each endpoint subscribed to it exactly once (by webhook-id,
 * what a receiver acts on), through a receiver answering 503 for a while (the
 * retry base shortened, so no real minute passes) and a server killed with
 * SIGKILL while the receiver holds its delivery open. No key, hash or signing
 * secret appears in a payload, log line, audit line or console output.
 */

import assert from "node:assert/strict";
import { hashApiKey } from "../../lib/auth/api_key.ts";
import {
  keys,
  type ServerProcess,
  startServer,
  tempDir,
} from "../support/processes.ts";
import { freshDatabase, NO_DATABASE } from "../support/postgres.ts";
import { until } from "../support/wait.ts";
import {
  distinctByType,
  type Receiver,
  startReceiver,
} from "../support/webhook_receiver.ts";

const ROUTE = "/api/v1/integration/connection";

/** The events each key, request and change below raise, by type. */
const EVERY_EVENT: Record<string, number> = {
  "key.created": 5,
  "key.expired": 1,
  "key.expiring": 1,
  "key.new_network": 2,
  "key.refused_network": 1,
  "key.rate_limited": 1,
  "key.exposed": 2,
  "key.updated": 1,
  "key.rotated": 1,
  "key.revoked": 2,
};

type Env = Record<string, string>;

/** `keys ARGS`, which must succeed; stdout and stderr. */
async function run(cwd: string, args: string[], env: Env) {
  const result = await keys(cwd, args, env);
  assert.equal(result.code, 0, `keys ${args.join(" ")}: ${result.stderr}`);
  return result;
}

/** `keys create --name NAME … --json`: the new key and its record. */
async function create(
  cwd: string,
  name: string,
  options: { env: Env; extra?: string[] },
): Promise<{ id: number; key: string; expiresAt: string | null }> {
  const result = await run(cwd, [
    "create",
    "--name",
    name,
    "--email",
    `${name}@example.com`,
    ...(options.extra ?? []),
    "--json",
  ], options.env);
  return JSON.parse(result.stdout);
}

async function request(
  server: ServerProcess,
  key: string,
  options: { inUrl?: boolean } = {},
): Promise<number> {
  const response = await fetch(
    `${server.url}${ROUTE}${options.inUrl ? `?api_key=${key}` : ""}`,
    { headers: options.inUrl ? {} : { "X-API-Key": key } },
  );
  await response.body?.cancel();
  return response.status;
}

/** Every delivery in the store, as `keys webhooks deliveries --json` gives them. */
async function deliveries(
  cwd: string,
  env: Env,
): Promise<{ state: string; event: { type: string } }[]> {
  return JSON.parse(
    (await run(cwd, ["webhooks", "deliveries", "--json"], env)).stdout,
  );
}

function counts(receiver: Receiver): Record<string, number> {
  return Object.fromEntries(
    [...distinctByType(receiver.received)].map(([type, ids]) => [
      type,
      ids.size,
    ]),
  );
}

function hasAll(receiver: Receiver, wanted: Record<string, number>): boolean {
  const got = counts(receiver);
  return Object.entries(wanted).every(([type, n]) => (got[type] ?? 0) >= n);
}

/** Waits until `receiver` has `wanted`; a failure says what it had. */
async function untilReceived(
  receiver: Receiver,
  wanted: Record<string, number>,
  what: string,
): Promise<void> {
  try {
    await until(() => hasAll(receiver, wanted), what);
  } catch (error) {
    const had = JSON.stringify(counts(receiver));
    throw new Error(`${(error as Error).message}; received ${had}`);
  }
}

async function scenario(store: Env): Promise<void> {
  using dir = tempDir();
  const cwd = dir.path;
  const env: Env = {
    ...store,
    HOST: "127.0.0.1",
    WEBHOOK_HOSTS: "127.0.0.1",
    // 25 times faster than the default: a minute of retries in 2.4 s.
    WEBHOOK_RETRY_SECONDS: "0.2",
  };
  await using all = startReceiver();
  await using some = startReceiver();
  const printed: string[] = [];
  const added = await run(cwd, ["webhooks", "add", all.url, "--json"], env);
  const secrets = [JSON.parse(added.stdout).secret as string];
  const addedSome = await run(cwd, [
    "webhooks",
    "add",
    some.url,
    "--events",
    "key.revoked,key.exposed",
  ], env);
  secrets.push(addedSome.stdout.trim());
  all.verifyWith(secrets[0]);
  some.verifyWith(secrets[1]);
  printed.push(added.stderr, addedSome.stderr);

  const web = await create(cwd, "web", { env });
  const fenced = await create(cwd, "fenced", {
    env,
    extra: ["--allow-from", "10.0.0.0/8"],
  });
  const limited = await create(cwd, "limited", {
    env,
    extra: ["--rate", "2/min"],
  });
  const lapsing = await create(cwd, "lapsing", {
    env,
    extra: ["--expires-in", "1s"],
  });
  const soon = await create(cwd, "soon", {
    env,
    extra: ["--expires-in", "10d"],
  });
  const made = [web, fenced, limited, lapsing, soon];
  await until(
    () => Date.now() > Date.parse(lapsing.expiresAt!),
    "the lapsing key's end",
  );
  // The console writes down a passed deadline before any command it runs.
  printed.push((await run(cwd, ["webhooks", "list"], env)).stdout);

  const one = await startServer(cwd, env);
  const two = await startServer(cwd, env);
  let rotatedKey = "";
  try {
    // Requests raise the rest: a first use from a network, a use from
    // outside allowFrom, a rate limit, a key in a URL.
    assert.equal(await request(one, web.key), 200);
    assert.equal(await request(one, fenced.key), 401);
    const statuses: number[] = [];
    while (statuses.at(-1) !== 429 && statuses.length < 5) {
      statuses.push(await request(two, limited.key));
    }
    assert.deepEqual([statuses[0], statuses.at(-1)], [200, 429]);
    await request(two, web.key, { inUrl: true });
    const untilNow = {
      "key.created": 5,
      "key.expired": 1,
      "key.expiring": 1,
      "key.new_network": 2,
      "key.refused_network": 1,
      "key.rate_limited": 1,
      "key.exposed": 1,
    };
    await untilReceived(all, untilNow, "the first events");
    // Anyone may report a key found in the open: exposed, and revoked.
    const report = await fetch(`${one.url}/api/v1/keys/leaked`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(["not a key", limited.key]),
    });
    assert.equal(report.status, 202);
    await report.body?.cancel();
    await untilReceived(
      all,
      { "key.exposed": 2, "key.revoked": 1 },
      "the report's events",
    );
    const reported = all.received.filter((r) =>
      r.type === "key.exposed" && r.data.keyId === limited.id
    );
    assert.equal(reported[0].data.source, "report");
    assert.equal(reported[0].data.from, "127.0.0.1");

    // Down for "a minute": every try answered 503, then it is back.
    all.behave({ status: 503 });
    await run(cwd, ["update", "web", "--rate", "100/min"], env);
    const rotated = await run(cwd, ["rotate", "web", "--yes", "--json"], env);
    rotatedKey = JSON.parse(rotated.stdout).key;
    await until(
      () =>
        all.received.filter((r) =>
          r.type === "key.updated" || r.type === "key.rotated"
        ).length >= 8,
      "four refused tries of each",
    );
    all.behave({ status: 204 });
    await until(
      async () =>
        (await deliveries(cwd, env)).every((d) => d.state === "delivered"),
      "every delivery made once the receiver is back",
    );

    // A server killed mid-delivery: the other is paused, so the one killed
    // is the one that holds the delivery open.
    Deno.kill(two.process.pid, "SIGSTOP");
    all.behave({ hang: true });
    try {
      await run(cwd, ["revoke", "web", "--yes"], env);
      await until(() => all.hanging === 1, "the revocation held open");
      await one.stop("SIGKILL");
    } finally {
      Deno.kill(two.process.pid, "SIGCONT");
    }
    all.behave({ status: 204 });
    await until(
      async () =>
        (await deliveries(cwd, env)).every((d) => d.state === "delivered"),
      "the revocation sent again by the other server",
    );
    await untilReceived(all, EVERY_EVENT, "every event");
  } finally {
    all.release(503);
    await one.stop();
    await two.stop();
  }

  assert.deepEqual(counts(all), EVERY_EVENT);
  assert.deepEqual(counts(some), { "key.revoked": 2, "key.exposed": 2 });
  assert.equal(all.unverified + some.unverified, 0);
  // Repeats of one webhook-id come only from tries a receiver did not take.
  const revoked = all.received.filter((r) =>
    r.type === "key.revoked" && r.data.name === "web"
  );
  assert.ok(revoked.length >= 2, "the held revocation came again");
  assert.equal(new Set(revoked.map((r) => r.id)).size, 1);

  const revokedPayload = revoked[0].data;
  assert.equal(revokedPayload.name, "web");
  assert.equal(revokedPayload.email, "web@example.com");
  const audit = (await run(cwd, ["audit", "--json"], env)).stdout;
  const listed = (await run(cwd, ["webhooks", "list", "--json"], env)).stdout;
  const sent = [...all.received, ...some.received].map((r) => r.raw);
  const haystack = [
    ...sent,
    one.output(),
    two.output(),
    audit,
    listed,
    JSON.stringify(await deliveries(cwd, env)),
    ...printed,
  ].join("\n");
  for (const key of [...made.map((m) => m.key), rotatedKey]) {
    assert.ok(!haystack.includes(key), "a key was shown");
    assert.ok(!haystack.includes(hashApiKey(key)), "a key's hash was shown");
  }
  for (const secret of secrets) {
    assert.ok(!haystack.includes(secret), "a signing secret was shown again");
    assert.ok(!haystack.includes(secret.slice(6)), "a signing key was shown");
  }
}

Deno.test("two servers on Deno KV deliver every event once per endpoint, verified by standardwebhooks, through a receiver down and a server killed mid-delivery", async () => {
  await scenario({ DENO_KV_PATH: "./data/keys.db" });
});

Deno.test({
  name:
    "two servers on PostgreSQL deliver every event once per endpoint, verified by standardwebhooks, through a receiver down and a server killed mid-delivery",
  ignore: NO_DATABASE,
  async fn() {
    await using database = await freshDatabase();
    await scenario({ DATABASE_URL: database.url });
  },
});
