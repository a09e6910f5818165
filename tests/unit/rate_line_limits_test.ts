/**
 * A rotation line whose two keys have different limits, as 1.1's `keys
 * update --rate` or an import left them (the console now sets both): each
 * key still gets its own limit whatever the other did, and the answers
 * state the line's policy beside the key's (lib/auth/line_limits.ts,
 * lib/http/rate_limit_headers.ts). One server, a fake clock.
 */

import assert from "node:assert/strict";
import fc from "fast-check";
import { generateApiKey } from "../../lib/auth/api_key.ts";
import { createAuthenticator } from "../../lib/http/authenticate.ts";
import { createRouter } from "../../lib/http/router.ts";
import { RateLimiter } from "../../lib/auth/rate_limit.ts";
import { shareOf } from "../../lib/auth/peers.ts";
import { openKvStore } from "../../lib/store/kv.ts";
import type { ExportItem, RateLimit } from "../../lib/store/types.ts";
import { countingStore } from "../support/counting_store.ts";

const ROUTE = "/api/v1/integration/connection";
const INFO = {
  remoteAddr: { transport: "tcp", hostname: "192.0.2.1", port: 4000 },
  completed: Promise.resolve(),
} as unknown as Deno.ServeHandlerInfo;
const W = 60;

/**
 * A line of two keys in their overlap, the first at `first`, the second at
 * `second` (through an export edited and imported, as a 1.1 installation's
 * records may be), served by one authenticator on a fake clock.
 */
async function line(
  first: RateLimit,
  second: RateLimit,
  { servers = 1 }: { servers?: number } = {},
) {
  const source = await openKvStore(":memory:");
  const k1 = generateApiKey();
  const created = await source.create({
    name: "erp",
    email: "it@example.com",
    ...k1,
    rateLimit: first,
  }, { actor: "t" });
  const solo = generateApiKey();
  await source.create({
    name: "solo",
    email: "solo@example.com",
    ...solo,
    rateLimit: first,
  }, { actor: "t" });
  const k2 = generateApiKey();
  const rotated = await source.rotate(created.id, k2, {
    actor: "t",
    overlapUntil: new Date(Date.now() + 3_600_000).toISOString(),
  });
  const items: ExportItem[] = [];
  for await (const item of source.exportAll()) {
    items.push(
      item.type === "key" && item.record.id === rotated.created.id
        ? { ...item, record: { ...item.record, rateLimit: second } }
        : item,
    );
  }
  await source.close();
  const counting = await countingStore();
  await counting.store.importAll(
    (async function* () {
      yield* items;
    })(),
    { actor: "t" },
  );
  const clock = { ms: 1_000_000 };
  // Each server its own counts over one store, at even shares of `servers`.
  const handlers = Array.from({ length: servers }, (_, rank) =>
    createRouter([{
      path: ROUTE,
      auth: "api_key",
      methods: { GET: () => Response.json({ ok: true }) },
    }], {
      authenticator: createAuthenticator(counting.store, {
        rateLimiter: new RateLimiter({ now: () => clock.ms }),
        peers: servers === 1 ? undefined : {
          count: servers,
          share: (l: RateLimit, id: number) =>
            shareOf(l, { rank, count: servers, keyId: id }),
        },
      }),
    }));
  await counting.settled();
  const call = async (key: string, server = 0) => {
    const response = await handlers[server](
      new Request(`http://localhost${ROUTE}`, {
        headers: { "X-API-Key": key },
      }),
      INFO,
    );
    await response.body?.cancel();
    return response;
  };
  return {
    keys: [k1.key, k2.key],
    /** A key of the same installation never rotated, at `first`. */
    solo: solo.key,
    clock,
    call,
    async statuses(key: string, count: number): Promise<number[]> {
      const seen: number[] = [];
      for (let i = 0; i < count; i++) seen.push((await call(key)).status);
      return seen;
    },
    [Symbol.asyncDispose]: () => counting[Symbol.asyncDispose](),
  };
}

const times = (status: number, count: number) =>
  Array.from({ length: count }, () => status);

Deno.test("review case a: the old key at 10/min, the new at 5/min: the old key's 10 requests leave the never-used new key its 5, then its own count refuses it", async () => {
  await using t = await line(
    { count: 10, windowSeconds: W },
    { count: 5, windowSeconds: W },
  );
  const [old, fresh] = t.keys;
  assert.deepEqual(await t.statuses(old, 11), [...times(200, 10), 429]);
  const first = await t.call(fresh);
  assert.equal(first.status, 200);
  assert.equal(
    first.headers.get("ratelimit-policy"),
    '"key";q=5;w=60, "line";q=15;w=60',
  );
  assert.deepEqual(await t.statuses(fresh, 5), [...times(200, 4), 429]);
});

Deno.test("review case b: the new key at 100/min used 30 times leaves the never-used old key at 10/min its 10", async () => {
  await using t = await line(
    { count: 10, windowSeconds: W },
    { count: 100, windowSeconds: W },
  );
  const [old, fresh] = t.keys;
  assert.deepEqual(await t.statuses(fresh, 30), times(200, 30));
  assert.deepEqual(await t.statuses(old, 11), [...times(200, 10), 429]);
});

Deno.test("a line of two limits: a key is refused only past its own count in the window, whatever the other key did, and the line takes no more than both limits (property)", async () => {
  const step = fc.oneof(
    {
      weight: 8,
      arbitrary: fc.record({
        kind: fc.constant("call" as const),
        key: fc.nat(1),
      }),
    },
    {
      weight: 1,
      arbitrary: fc.record({
        kind: fc.constant("wait" as const),
        ms: fc.nat(30_000),
      }),
    },
  );
  await fc.assert(
    fc.asyncProperty(
      fc.integer({ min: 1, max: 12 }),
      fc.integer({ min: 1, max: 12 }),
      fc.array(step, { minLength: 10, maxLength: 60 }),
      async (a, b, steps) => {
        const limits = [a, b];
        await using t = await line(
          { count: a, windowSeconds: W },
          { count: b, windowSeconds: W },
        );
        const accepted: { at: number; key: number }[] = [];
        for (const s of steps) {
          if (s.kind === "wait") {
            t.clock.ms += s.ms;
            continue;
          }
          const response = await t.call(t.keys[s.key]);
          const now = t.clock.ms;
          const own = accepted.filter((x) =>
            x.key === s.key && x.at > now - W * 1000
          ).length;
          assert.equal(
            response.status,
            own < limits[s.key] ? 200 : 429,
            `key ${s.key} at ${
              limits[s.key]
            }/min with ${own} of its own in the window`,
          );
          if (response.status === 200) accepted.push({ at: now, key: s.key });
        }
        for (const { at: end } of accepted) {
          const inWindow = accepted.filter(({ at }) =>
            at > end - W * 1000 && at <= end
          ).length;
          assert.ok(inWindow <= a + b, `${inWindow} accepted within ${W} s`);
        }
      },
    ),
    { numRuns: 60 },
  );
});

Deno.test("a line of one limit states both policies on every answer, naming the key's as binding while the line has as much left; a key never rotated keeps its one policy byte for byte", async () => {
  await using t = await line(
    { count: 2, windowSeconds: W },
    { count: 2, windowSeconds: W },
  );
  const [old, fresh] = t.keys;
  const answers = [];
  for (const key of [old, old, fresh, fresh, fresh]) {
    const response = await t.call(key);
    answers.push([
      response.status,
      response.headers.get("ratelimit-policy"),
      response.headers.get("ratelimit")!.replace(/;t=\d+$/, ""),
    ]);
  }
  const both = '"key";q=2;w=60, "line";q=4;w=60';
  assert.deepEqual(answers, [
    [200, both, '"key";r=1'],
    [200, both, '"key";r=0'],
    [200, both, '"key";r=1'],
    [200, both, '"key";r=0'],
    [429, both, '"key";r=0'],
  ]);
  const alone = await t.call(t.solo);
  assert.equal(alone.status, 200);
  assert.deepEqual(
    [alone.headers.get("ratelimit-policy"), alone.headers.get("ratelimit")],
    ['"key";q=2;w=60', '"key";r=1;t=60'],
  );
});

Deno.test("a line of two limits on two servers: the old 10/min key's 10 requests, alternating between them, leave the never-used new 5/min key its 5 across both (a final review's case: 429 on both before)", async () => {
  await using t = await line(
    { count: 10, windowSeconds: W },
    { count: 5, windowSeconds: W },
    { servers: 2 },
  );
  const [old, fresh] = t.keys;
  for (let i = 0; i < 10; i++) {
    assert.equal(
      (await t.call(old, i % 2)).status,
      200,
      `old key, request ${i + 1}`,
    );
  }
  let accepted = 0;
  for (let i = 0; i < 8; i++) {
    if ((await t.call(fresh, i % 2)).status === 200) accepted++;
  }
  // Its own 5 across the installation, and no more.
  assert.equal(accepted, 5);
});
