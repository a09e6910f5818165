/**
 * Per-key rate limits in the API-key step (lib/http/authenticate.ts) and
 * the router: what a key with a limit gets, what its refusal looks like,
 * and that neither costs a store call nor touches the lock-out.
 */

import assert from "node:assert/strict";
import fc from "fast-check";
import { generateApiKey, hashApiKey } from "../../lib/auth/api_key.ts";
import {
  type Authenticator,
  createAuthenticator,
} from "../../lib/http/authenticate.ts";
import { createRouter } from "../../lib/http/router.ts";
import { LockoutTracker } from "../../lib/auth/lockout.ts";
import { RateLimiter } from "../../lib/auth/rate_limit.ts";
import { shareOf } from "../../lib/auth/peers.ts";
import type { RateLimit } from "../../lib/store/types.ts";
import { countingStore } from "../support/counting_store.ts";

const ROUTE = "/api/v1/integration/connection";
const INFO = {
  remoteAddr: { transport: "tcp", hostname: "192.0.2.1", port: 4000 },
  completed: Promise.resolve(),
} as unknown as Deno.ServeHandlerInfo;

async function setup(
  limit: RateLimit | null,
  peers?: { count: number; rank: number },
) {
  const counting = await countingStore();
  const { key, record } = await counting.addKey("erp");
  if (limit !== null) {
    await counting.store.setRateLimit(record.id, limit, { actor: "t" });
  }
  const clock = { ms: 1_000_000 };
  const authenticator = createAuthenticator(counting.store, {
    lockout: new LockoutTracker({
      maxFailures: 3,
      windowSeconds: 60,
      lockSeconds: 300,
    }),
    rateLimiter: new RateLimiter({ now: () => clock.ms }),
    peers: peers && {
      count: peers.count,
      share: (l: RateLimit, id: number) =>
        shareOf(l, { rank: peers.rank, count: peers.count, keyId: id }),
    },
  });
  await counting.settled();
  const call = caller(authenticator);
  return {
    counting,
    clock,
    call,
    /** Another server over the same store and clock, with its own counts. */
    server(place: { count: number; rank: number }) {
      return caller(createAuthenticator(counting.store, {
        rateLimiter: new RateLimiter({ now: () => clock.ms }),
        peers: {
          count: place.count,
          share: (l: RateLimit, id: number) =>
            shareOf(l, { ...place, keyId: id }),
        },
      }));
    },
    key,
    record,
    async [Symbol.asyncDispose]() {
      await counting.settled();
      await counting[Symbol.asyncDispose]();
    },
  };
}

/** A router's answer to a request with `apiKey`, through `authenticator`. */
function caller(authenticator: Authenticator) {
  const handler = createRouter([{
    path: ROUTE,
    auth: "api_key",
    methods: { GET: () => Response.json({ ok: true }) },
  }], { authenticator });
  return (apiKey: string) =>
    handler(
      new Request(`http://localhost${ROUTE}`, {
        headers: { "X-API-Key": apiKey },
      }),
      INFO,
    );
}

Deno.test("a key with a limit gets its RateLimit fields on every 200, then 429 rate_limited with Retry-After at the limit", async () => {
  await using t = await setup({ count: 3, windowSeconds: 60 });
  const remaining: string[] = [];
  for (let i = 0; i < 3; i++) {
    const response = await t.call(t.key);
    assert.equal(response.status, 200);
    await response.body?.cancel();
    assert.equal(response.headers.get("ratelimit-policy"), '"key";q=3;w=60');
    remaining.push(response.headers.get("ratelimit")!);
  }
  assert.deepEqual(remaining.map((r) => r.split(";")[1]), [
    "r=2",
    "r=1",
    "r=0",
  ]);
  const refused = await t.call(t.key);
  assert.equal(refused.status, 429);
  const body = await refused.json();
  assert.equal(body.error, "rate_limited");
  assert.ok(Number(refused.headers.get("retry-after")) >= 1);
  // The limiter logs each request's time: it leaves the window exactly a
  // window after it was made.
  assert.ok(Number(refused.headers.get("retry-after")) <= 60);
  assert.equal(refused.headers.get("ratelimit-policy"), '"key";q=3;w=60');
  assert.match(refused.headers.get("ratelimit")!, /^"key";r=0;t=\d+$/);
  // Retry-After later, the key is served again.
  t.clock.ms += Number(refused.headers.get("retry-after")) * 1000;
  const again = await t.call(t.key);
  assert.equal(again.status, 200);
  await again.body?.cancel();
});

Deno.test("refusals at the rate limit never count toward the lock-out, and write nothing to the store", async () => {
  await using t = await setup({ count: 1, windowSeconds: 60 });
  (await t.call(t.key)).body?.cancel();
  await t.counting.settled();
  t.counting.reset();
  for (let i = 0; i < 20; i++) {
    const response = await t.call(t.key);
    assert.equal(response.status, 429);
    assert.equal((await response.json()).error, "rate_limited");
  }
  await t.counting.settled();
  // Without a lease each request reads its key (as any key's would); the
  // limit itself adds no store call, and no write.
  assert.equal(
    t.counting.calls(
      "create",
      "revoke",
      "rotate",
      "retire",
      "setAllowFrom",
      "setRateLimit",
      "markExposed",
      "recordLastUsed",
      "recordNetworkUses",
      "recordRefusedUses",
    ),
    0,
  );
  // Not locked out: a wrong key still gets its 401s before the lock.
  const wrong = await t.call("wrong");
  assert.equal(wrong.status, 401);
});

Deno.test("a key without a limit gets no RateLimit fields", async () => {
  await using t = await setup(null);
  const response = await t.call(t.key);
  assert.equal(response.status, 200);
  await response.body?.cancel();
  assert.equal(response.headers.get("ratelimit"), null);
  assert.equal(response.headers.get("ratelimit-policy"), null);
});

Deno.test("among several servers a server accepts its share only, and its RateLimit scales what remains to the installation", async () => {
  await using t = await setup({ count: 10, windowSeconds: 60 }, {
    count: 3,
    rank: 0,
  });
  let accepted = 0;
  let first: string | null = null;
  for (let i = 0; i < 10; i++) {
    const response = await t.call(t.key);
    await response.body?.cancel();
    first ??= response.headers.get("ratelimit");
    if (response.status === 200) accepted++;
  }
  const share = shareOf({ count: 10 }, { rank: 0, count: 3, keyId: 1 });
  assert.equal(accepted, share);
  // After one of its share: (share - 1) here, times three servers.
  assert.match(first!, new RegExp(`^"key";r=${(share - 1) * 3};t=6\\d$`));
});

Deno.test("during a rotation's overlap, the old key's holder using up its budget leaves the new key's untouched, and the new key's first use retires the old one", async () => {
  await using t = await setup({ count: 4, windowSeconds: 60 });
  const replacement = generateApiKey();
  const old = (await t.counting.store.findByHash(hashApiKey(t.key)))!;
  await t.counting.store.rotate(old.id, replacement, {
    actor: "t",
    overlapUntil: new Date(Date.now() + 3_600_000).toISOString(),
    untilFirstUse: true,
  });
  await t.counting.settled();
  const statuses = async (key: string, count: number) => {
    const seen: number[] = [];
    for (let i = 0; i < count; i++) {
      const response = await t.call(key);
      await response.body?.cancel();
      seen.push(response.status);
    }
    return seen;
  };
  assert.deepEqual(await statuses(t.key, 6), [200, 200, 200, 200, 429, 429]);
  assert.deepEqual(await statuses(replacement.key, 1), [200]);
  await t.counting.settled();
  assert.equal(
    (await t.counting.store.get(old.id))!.status,
    "revoked",
    "the new key's first use retired the old one",
  );
  assert.deepEqual(await statuses(t.key, 1), [401]);
});

Deno.test("a line of chained rotations is never accepted more than twice its limit in any window, and a request is refused only when its key's count is at its limit or the line's at twice it, on 1 to 3 servers (property)", async () => {
  const LIMIT = { count: 5, windowSeconds: 60 };
  const W = LIMIT.windowSeconds * 1000;
  // Calls mostly, with the newest keys likelier: what uses up a budget.
  const step = fc.oneof(
    {
      weight: 2,
      arbitrary: fc.record({
        kind: fc.constant("rotate" as const),
        overlap: fc.boolean(),
        untilFirstUse: fc.boolean(),
      }),
    },
    {
      weight: 8,
      arbitrary: fc.record({
        kind: fc.constant("call" as const),
        back: fc.nat(1),
        server: fc.nat(2),
      }),
    },
    {
      weight: 1,
      arbitrary: fc.record({
        kind: fc.constant("wait" as const),
        ms: fc.nat(15_000),
      }),
    },
  );
  await fc.assert(
    fc.asyncProperty(
      fc.integer({ min: 1, max: 3 }),
      fc.array(step, { minLength: 30, maxLength: 80 }),
      async (servers, steps) => {
        await using t = await setup(LIMIT);
        const root = t.record.id;
        const calls = Array.from(
          { length: servers },
          (_, rank) =>
            servers === 1 ? t.call : t.server({ count: servers, rank }),
        );
        const line = [{ key: t.key, id: t.record.id }];
        // Accepted requests: when, of which key, on which server.
        const accepted: { at: number; id: number; server: number }[] = [];
        for (const s of steps) {
          if (s.kind === "wait") t.clock.ms += s.ms;
          else if (s.kind === "rotate") {
            const fresh = generateApiKey();
            const { created } = await t.counting.store.rotate(
              line.at(-1)!.id,
              fresh,
              s.overlap
                ? {
                  actor: "t",
                  overlapUntil: new Date(Date.now() + 3_600_000).toISOString(),
                  untilFirstUse: s.untilFirstUse,
                }
                : { actor: "t" },
            );
            line.push({ key: fresh.key, id: created.id });
          } else {
            const { key, id } = line[Math.max(0, line.length - 1 - s.back)];
            const server = s.server % servers;
            const response = await calls[server](key);
            await response.body?.cancel();
            // A retired key's 401, or the lock-out's 429 once those add up
            // (only a key's limit answers with its RateLimit fields).
            if (!response.headers.has("ratelimit-policy")) continue;
            // The exact rule, on this server's even shares of L and 2L: the
            // requests it accepted in the window ending now, of this key and
            // of the whole line (the first key's before its rotation too).
            const now = t.clock.ms;
            const here = accepted.filter((a) =>
              a.server === server && a.at > now - W
            );
            const place = { rank: server, count: servers };
            const own = shareOf(LIMIT, { ...place, keyId: id });
            const ofLine = shareOf({ count: 2 * LIMIT.count }, {
              ...place,
              keyId: -root,
            });
            const allowed = here.filter((a) => a.id === id).length < own &&
              (line.length === 1 || here.length < ofLine);
            assert.equal(
              response.status,
              allowed ? 200 : 429,
              `key ${
                line.findIndex((k) => k.id === id)
              } of ${line.length} on server ${server} of ${servers}: ${
                here.filter((a) => a.id === id).length
              } of its own and ${here.length} of the line in the window`,
            );
            if (response.status === 200) accepted.push({ at: now, id, server });
          }
        }
        // Every window of 60 s ending at an accepted request, all servers.
        for (const { at: end } of accepted) {
          const inWindow = accepted.filter(({ at }) =>
            at > end - W && at <= end
          );
          assert.ok(
            inWindow.length <= 2 * LIMIT.count,
            `${inWindow.length} accepted within 60 s across ${line.length} keys`,
          );
        }
      },
    ),
    { numRuns: 100 },
  );
});

Deno.test("three chained rotations with an overlap of a 5/min key: 10 × 200 in a minute across the line, then 429", async () => {
  await using t = await setup({ count: 5, windowSeconds: 60 });
  const line = [{ key: t.key, id: t.record.id }];
  const statuses: number[][] = [];
  for (let r = 0; r < 3; r++) {
    const row: number[] = [];
    for (let i = 0; i < 6; i++) {
      const response = await t.call(line.at(-1)!.key);
      await response.body?.cancel();
      row.push(response.status);
    }
    statuses.push(row);
    const fresh = generateApiKey();
    const { created } = await t.counting.store.rotate(line.at(-1)!.id, fresh, {
      actor: "t",
      overlapUntil: new Date(Date.now() + 3_600_000).toISOString(),
    });
    line.push({ key: fresh.key, id: created.id });
  }
  // The line has made 10 in the minute: the third key has none to take.
  assert.deepEqual(statuses, [
    [200, 200, 200, 200, 200, 429],
    [200, 200, 200, 200, 200, 429],
    [429, 429, 429, 429, 429, 429],
  ]);
});

Deno.test("a 5/min key used 5 times, then rotated twice within the minute: the newest key gets its 5 × 200, then 429, and the other live key none (the line at 10)", async () => {
  await using t = await setup({ count: 5, windowSeconds: 60 });
  const statuses = async (key: string, count: number) => {
    const seen: number[] = [];
    for (let i = 0; i < count; i++) {
      const response = await t.call(key);
      await response.body?.cancel();
      seen.push(response.status);
      t.clock.ms += 100;
    }
    return seen;
  };
  assert.deepEqual(await statuses(t.key, 5), [200, 200, 200, 200, 200]);
  const overlap = {
    actor: "t",
    overlapUntil: new Date(Date.now() + 3_600_000).toISOString(),
  };
  const k1 = generateApiKey();
  const first = await t.counting.store.rotate(t.record.id, k1, overlap);
  const k2 = generateApiKey();
  const second = await t.counting.store.rotate(first.created.id, k2, overlap);
  assert.equal(second.retired?.id, t.record.id, "K0 retired by K1's rotation");
  const k2Seen = await statuses(k2.key, 6);
  assert.deepEqual(k2Seen, [200, 200, 200, 200, 200, 429]);
  const refused = await t.call(k1.key);
  assert.equal(refused.status, 429, "K1: the line has made 10 in the window");
  // The line frees when K0's first request leaves the window.
  const wait = Number(refused.headers.get("retry-after"));
  assert.ok(wait >= 1 && wait <= 60, `Retry-After ${wait}`);
  // Refused by the line, not its own count: the answer states both
  // policies, and names the line's as the one that binds.
  assert.equal(
    refused.headers.get("ratelimit-policy"),
    '"key";q=5;w=60, "line";q=10;w=60',
  );
  assert.equal(refused.headers.get("ratelimit"), `"line";r=0;t=${wait}`);
  t.clock.ms += wait * 1000;
  assert.deepEqual(await statuses(k1.key, 1), [200]);
});

Deno.test("a line key past its line's share waits on the line's counter at twice the limit, and past its own on its own, then is accepted once the wait's retry finds room", async () => {
  await using t = await setup({ count: 2, windowSeconds: 60 });
  const waits: [number, number][] = [];
  const lent = { room: 0 };
  const call = caller(createAuthenticator(t.counting.store, {
    rateLimiter: new RateLimiter({ now: () => t.clock.ms }),
    shares: {
      place: (limit) => ({ share: limit.count + lent.room, scale: 1 }),
      wait: (counter, limit, attempt) => {
        waits.push([counter, limit.count]);
        // Another server lends one: the retry is accepted.
        lent.room = 1;
        const accepted = attempt();
        lent.room = 0;
        return Promise.resolve(accepted);
      },
    },
  }));
  const status = async (key: string) => {
    const response = await call(key);
    await response.body?.cancel();
    return response.status;
  };
  for (let i = 0; i < 2; i++) assert.equal(await status(t.key), 200);
  const fresh = generateApiKey();
  const overlap = new Date(Date.now() + 3_600_000).toISOString();
  await t.counting.store.rotate(t.record.id, fresh, {
    actor: "t",
    overlapUntil: overlap,
  });
  // Past the first key's own 2: it waits on its own count, at 2.
  assert.equal(await status(t.key), 200);
  assert.deepEqual(waits, [[t.record.id, 2]]);
  // The line holds 3 of 4; the new key's own has room, its line one more.
  assert.equal(await status(fresh.key), 200);
  assert.equal(await status(fresh.key), 200);
  assert.deepEqual(waits.slice(1), [[-t.record.id, 4]]);
});
