/**
 * A request held past this server's share (lib/auth/share_ledger.ts) when
 * the store stops answering for longer than the hold: the server has no
 * lease, so it could neither borrow, nor hear another's answer, nor know
 * the installation's window. Through the API-key step and the router, it
 * gets the same 503 as a request whose key lookup meets the outage, never
 * a 429 that tells the client its limit is spent.
 */

import assert from "node:assert/strict";
import { createAuthenticator } from "../../lib/http/authenticate.ts";
import { createRouter } from "../../lib/http/router.ts";
import { RateLimiter } from "../../lib/auth/rate_limit.ts";
import { ShareLedger } from "../../lib/auth/share_ledger.ts";
import { ShareEntries } from "../../lib/store/layout/_shares.ts";
import type { Entries } from "../../lib/store/entries.ts";
import { countingStore } from "../support/counting_store.ts";
import { until } from "../support/wait.ts";

const ROUTE = "/api/v1/integration/connection";
const INFO = {
  remoteAddr: { transport: "tcp", hostname: "192.0.2.1", port: 4000 },
  completed: Promise.resolve(),
} as unknown as Deno.ServeHandlerInfo;
const IDS = ["server-0", "server-1"];

Deno.test("a request held past the share while the lease is lost through the whole hold gets the outage's 503 (the lookup's status, body and Retry-After), not 429 with a false Retry-After", async () => {
  await using counting = await countingStore();
  const { key, record } = await counting.addKey("erp");
  const other = await counting.addKey("other");
  await counting.store.setRateLimit(record.id, {
    count: 10,
    windowSeconds: 60,
  }, { actor: "t" });
  using kv = await Deno.openKv(":memory:");
  const lease = { held: true };
  const timers: (() => void)[] = [];
  const clock = { ms: 1_000_000 };
  const limiter = new RateLimiter({ now: () => clock.ms });
  const ledger = new ShareLedger(new ShareEntries(kv as unknown as Entries), {
    self: () => IDS[0],
    held: () => lease.held,
    peers: { count: 2, live: IDS, share: (limit) => limit.count / 2 },
    used: (counter) => limiter.used(counter),
    frees: (counter, share) => limiter.freesInMs(counter, share),
    registered: () => Promise.resolve(IDS),
    waitMs: () => 6550,
    now: () => clock.ms,
    // The hold's bound passes when the test says so.
    setTimer: (run) => {
      timers.push(run);
      return () => {};
    },
  });
  await ledger.poll();
  const authenticator = createAuthenticator(counting.store, {
    rateLimiter: limiter,
    shares: ledger,
    now: () => clock.ms,
  });
  await counting.settled();
  const handler = createRouter([{
    path: ROUTE,
    auth: "api_key",
    methods: { GET: () => Response.json({ ok: true }) },
  }], { authenticator });
  const call = (apiKey: string) =>
    handler(
      new Request(`http://localhost${ROUTE}`, {
        headers: { "X-API-Key": apiKey },
      }),
      INFO,
    );
  for (let i = 0; i < 5; i++) {
    const response = await call(key);
    await response.body?.cancel();
    assert.equal(response.status, 200, `request ${i + 1}, within the share`);
  }
  // The store stops answering: the lease ends, and stays gone.
  lease.held = false;
  const sixth = call(key);
  await until(() => timers.length === 1, "the sixth request to be held");
  counting.failing = true;
  clock.ms += 6550;
  for (const run of timers) run();
  const held = await sixth;
  // What the same outage gives a request whose lookup meets it.
  const looked = await call(other.key);
  assert.equal(looked.status, 503, "the lookup's outage answer");
  assert.equal(held.status, 503, "the held request: the outage, not 429");
  assert.equal(await held.text(), await looked.text());
  for (const name of ["retry-after", "content-type"]) {
    assert.equal(held.headers.get(name), looked.headers.get(name), name);
  }
  assert.equal(held.headers.get("ratelimit"), null, "no spent limit stated");
});
